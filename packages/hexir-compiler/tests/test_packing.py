"""A weight a cpu kernel reads packed (`hexir_compiler.packing`): hexir-lower-to-tir gives the
matmul or conv a constant that keeps the weight's value as given and names its layout in
`packing`, and the serializer makes the packed elements as it writes RODATA (`Packed`), so
the MLIR context never holds a weight twice.

Checked here: each layout's elements against an element-by-element definition and its shape
against `packed_shape`; the lowered constant holds the very attribute of the source's (MLIR
uniques attributes: the same storage, no copy); RODATA holds the packed bytes at the CONST's
offset, once for every level that reads them; a printed stage fed back gives the same `.hxb`;
the verifier's and the format writer's refusals.
"""

from __future__ import annotations

import io
import itertools

import numpy as np
import pytest

import hexir_format as hf
from hexir_compiler import packing
from hexir_compiler.dialects import context
from hexir_compiler.mlir import ir
from hexir_compiler.pipeline import Options, lower
from hexir_compiler.pipeline import compile as compile_source
from hexir_format import parse

V3 = "cpu:x86-64-v3"


def _columns_by_element(w: np.ndarray, width: int) -> np.ndarray:
    depth, cols = w.shape
    out = np.zeros((-(-cols // width), depth, width), w.dtype)
    for p, k, t in itertools.product(*map(range, out.shape)):
        if p * width + t < cols:
            out[p, k, t] = w[k, p * width + t]
    return out


def _conv_by_element(w: np.ndarray, group: int, width: int) -> np.ndarray:
    m, cg, *kernel = w.shape
    mg = m // group
    panels = -(-mg // width)
    out = np.zeros((group * panels, *kernel, cg, width), w.dtype)
    for g, q, t, c in itertools.product(range(group), range(panels), range(width), range(cg)):
        if q * width + t < mg:
            for at in itertools.product(*map(range, kernel)):
                out[(g * panels + q, *at, c, t)] = w[(g * mg + q * width + t, c, *at)]
    return out


@pytest.mark.parametrize(("shape", "width"), [((5, 16), 16), ((3, 17), 16), ((1, 1), 8),
                                              ((7, 40), 16), ((4, 3), 4)])
def test_column_panels_hold_each_column_and_zeros_past_n(shape, width) -> None:
    w = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    packed = packing.pack("columns", (width,), w)
    assert packed.shape == packing.packed_shape("columns", (width,), shape)
    np.testing.assert_array_equal(packed, _columns_by_element(w, width))


@pytest.mark.parametrize(("shape", "group", "width"), [
    ((8, 3, 3, 3), 1, 16),    # fewer channels than a panel
    ((40, 2, 1, 1), 1, 16),   # a 1x1 conv, a last panel part zeros
    ((12, 4, 3, 3), 2, 4),    # grouped: each group's panels on their own
    ((6, 5, 3), 3, 4),        # conv1d, a group's channels past its panel width
    ((4, 2, 2, 2, 2), 1, 2),  # 3-D
])
def test_conv_panels_hold_each_group_s_channels_and_zeros_past_them(shape, group, width) -> None:
    w = np.random.default_rng(1).standard_normal(shape)
    packed = packing.pack("conv", (group, width), w)
    assert packed.shape == packing.packed_shape("conv", (group, width), shape)
    np.testing.assert_array_equal(packed, _conv_by_element(w, group, width))


def _program(w: np.ndarray) -> str:
    k, n = w.shape
    return (f"func.func @main(%x: tensor<64x{k}xf32>) -> tensor<64x{n}xf32> {{\n"
            f'  %w = "hexir.constant"() {{value = dense<"0x{w.tobytes().hex()}"> : '
            f"tensor<{k}x{n}xf32>}} : () -> tensor<{k}x{n}xf32>\n"
            f'  %y = "hexir.matmul"(%x, %w) : (tensor<64x{k}xf32>, tensor<{k}x{n}xf32>) -> '
            f"tensor<64x{n}xf32>\n"
            f"  return %y : tensor<64x{n}xf32>\n}}\n")


#: 64 x 512 x 200: 6.5 M multiply-adds, a matmul the schedule packs
WEIGHT = np.random.default_rng(2).standard_normal((512, 200)).astype(np.float32)


def test_the_lowered_constant_holds_the_source_s_attribute_and_names_its_layout() -> None:
    with context():
        module = ir.Module.parse(_program(WEIGHT))
        (source,) = [op.operation for op in module.body.operations[0].regions[0].blocks[0]
                     .operations if op.operation.name == "hexir.constant"]
        original = source.attributes["value"]
        lower(module, Options("mlir-tir", cpu="x86-64-v3"), "mlir-tir")
        constants = [op.operation for op in module.body.operations[0].regions[0].blocks[0]
                     .operations if op.operation.name == "hexir.constant"]
        (packed,) = constants  # the unpacked one is gone: nothing else reads it
        layout, params = packing.of(packed)
        assert layout == "columns"
        assert packed.attributes["value"] == original  # the same uniqued storage
        assert tuple(ir.RankedTensorType(packed.results[0].type).shape) == \
            packing.packed_shape(layout, params, WEIGHT.shape)


def test_rodata_holds_the_packed_weight_once_for_every_level(tmp_path) -> None:
    source = tmp_path / "mm.mlir"
    source.write_text(_program(WEIGHT))
    module = parse(compile_source(source))
    assert len({f.cpu_level for f in module.functions}) == 3  # a program per level
    consts = {(c.operands[1], c.operands[2]) for f in module.functions for c in f.commands
              if c.op is hf.Op.CONST}
    panels = {packing.pack("columns", (w,), WEIGHT).tobytes() for w in (4, 8, 16, 32)}
    packed = [(offset, size) for offset, size in consts
              if bytes(module.rodata[offset: offset + size]) in panels]
    assert len(packed) == 1, consts  # every level reads the one stored copy


def test_a_fed_back_stage_gives_the_same_module(tmp_path) -> None:
    source = tmp_path / "mm.mlir"
    source.write_text(_program(WEIGHT))
    stage = compile_source(source, emit="mlir-tir", target=V3)
    assert 'packing = ["columns", ' in stage
    fed = tmp_path / "mm-tir.mlir"
    fed.write_text(stage)
    assert compile_source(fed) == compile_source(source, target=V3)


@pytest.mark.parametrize(("attr", "result", "error"), [
    ('["rows", 16]', "tensor<1x4x16xf32>",
     "packing must be [layout, params...] with layout one of columns, conv"),
    ('["columns"]', "tensor<1x4x16xf32>", "packing columns takes 1 positive integers (width)"),
    ('["columns", 0]', "tensor<1x4x16xf32>", "packing columns takes 1 positive integers"),
    ('["conv", 16]', "tensor<1x4x16xf32>", "packing conv takes 2 positive integers"),
    ('["columns", 16]', "tensor<4x1x16xf32>", "value of type tensor<4x3xf32> packed as columns "
     "is tensor<1x4x16xf32>, but the result is tensor<4x1x16xf32>"),
    ('["columns", 16]', "tensor<1x4x16xf64>", "packed as columns is tensor<1x4x16xf32>"),
    ('["conv", 2, 4]', "tensor<1x4x16xf32>", "conv packs a weight [M, Cg, *kernel]"),
])
def test_the_verifier_refuses_a_packing_the_value_does_not_fit(attr, result, error) -> None:
    text = ('func.func @main() {\n  %w = "hexir.constant"() {packing = ' + attr +
            ', value = dense<1.0> : tensor<4x3xf32>} : () -> ' + result + "\n  return\n}\n")
    with context(), pytest.raises(ir.MLIRError) as err:
        ir.Module.parse(text)
    assert error in err.value.error_diagnostics[0].message


def test_the_format_writer_makes_callable_pieces_as_it_writes_them() -> None:
    class Piece:
        nbytes = 8

        def __init__(self, data: bytes) -> None:
            self.data, self.calls = data, 0

        def __call__(self) -> bytes:
            self.calls += 1
            return self.data

    module = hf.Module(5, (), b"", ())
    good = Piece(b"abcdefgh")
    out = io.BytesIO()
    hf.write(module, out, [b"01234567", good])
    assert good.calls == 1
    assert parse(out.getvalue()).rodata == b"01234567abcdefgh"
    with pytest.raises(hf.FormatError, match="made 3 bytes; it announced 8"):
        hf.write(module, io.BytesIO(), [Piece(b"abc")])
