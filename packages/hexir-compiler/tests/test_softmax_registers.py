"""Softmax of short rows held in registers (`transforms/tir/reduction.py`'s
`_softmax_registers`), compiled for the cpu at every x86-64 level this CPU runs and compared
with numpy.

The rows reach each part of the form: whole vectors only, whole vectors and a partial one (a
row of 49: SegFormer's reduced keys, Swin's windows), a row shorter than a register (the
vectors narrowed to it), a row of exactly ROW_REGISTERS vectors (the most it holds; at a
lower level, its registers narrower, the loop form), -inf among a row's elements (an
attention mask's), and the fused prologues an attention's scores bring: a scale and a mask
added (formulas of vectors), and a chain with one that is not (sqrt: the loop form).
"""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest

import hexir_runtime
from hexir_compiler.pipeline import compile as compile_source
from hexir_compiler.transforms.tir.reduction import ROW_REGISTERS
from hexir_runtime.hal.hostcode import host_level

DTYPES = {"f32": np.float32, "f64": np.float64}
LEVELS = [level for level in (2, 3, 4) if level <= host_level()]
LONGEST = ROW_REGISTERS[4] * 16  # f32 at x86-64-v4

CASES = {  # name: (shape, prologue: None, "scale-mask" or "sqrt")
    "whole-vectors": ((3, 5, 32), None),
    "49-keys": ((2, 3, 49), None),
    "7-wide": ((6, 7), None),
    "longest": ((3, LONGEST), None),
    "masked": ((4, 2, 20), None),
    "scale-mask": ((2, 4, 49), "scale-mask"),
    "not-vector-formula": ((3, 2, 24), "sqrt"),
}


def _t(shape, element: str) -> str:
    return f"tensor<{''.join(f'{n}x' for n in shape)}{element}>"


def _program(shape, prologue: str | None, element: str) -> str:
    x = _t(shape, element)
    mask = _t((1, shape[-1]), element)
    args = [f"%x: {x}"] + ([f"%m: {mask}"] if prologue == "scale-mask" else [])
    lines = [f"func.func @main({', '.join(args)}) -> {x} {{"]
    data = "%x"
    if prologue == "scale-mask":
        scalar = _t((), element)
        lines += [f'  %c = "hexir.constant"() {{value = dense<0.125> : {scalar}}} : () -> {scalar}',
                  f'  %s = "hexir.mul"(%x, %c) : ({x}, {scalar}) -> {x}',
                  f'  %a = "hexir.add"(%s, %m) : ({x}, {mask}) -> {x}']
        data = "%a"
    elif prologue == "sqrt":
        lines.append(f'  %a = "hexir.sqrt"(%x) : ({x}) -> {x}')
        data = "%a"
    lines += [f'  %y = "hexir.softmax"({data}) {{axis = -1 : i64}} : ({x}) -> {x}',
              f"  return %y : {x}", "}"]
    return "\n".join(lines) + "\n"


def _inputs(name: str, shape, prologue: str | None, element: str) -> list[np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = rng.standard_normal(shape) * 3
    if prologue == "sqrt":
        x = np.abs(x)
    if name == "masked":  # some elements of every row -inf, none a whole row
        x[..., 3::5] = -np.inf
    args = [x.astype(DTYPES[element])]
    if prologue == "scale-mask":
        mask = np.zeros((1, shape[-1]))
        mask[0, -7:] = -1e4
        args.append(mask.astype(DTYPES[element]))
    return args


def _softmax(v: np.ndarray) -> np.ndarray:
    e = np.exp(v - v.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("level", LEVELS, ids=lambda v: f"v{v}")
@pytest.mark.parametrize("element", ["f32", "f64"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_softmax_row_matches_numpy(tmp_path, name, element, level) -> None:
    shape, prologue = CASES[name]
    args = _inputs(name, shape, prologue, element)
    source = tmp_path / "softmax.mlir"
    source.write_text(_program(shape, prologue, element))
    with hexir_runtime.load(compile_source(source, "hxb", target=f"cpu:x86-64-v{level}")) as m:
        got = m.main(*args)
    x = args[0].astype(np.float64)
    if prologue == "scale-mask":
        x = x * 0.125 + args[1].astype(np.float64)
    elif prologue == "sqrt":
        x = np.sqrt(x)
    want = _softmax(x)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= (2e-6 if element == "f32" else 1e-14)


def _softmax_kernel(shape, prologue: str | None, level: int, tmp_path) -> str:
    source = tmp_path / "softmax.mlir"
    source.write_text(_program(shape, prologue, "f32"))
    tir = compile_source(source, "mlir-tir", target=f"cpu:x86-64-v{level}")
    kernels = re.split(r'(?=  "hextir.prim_func"\(\))', tir)
    (kernel,) = [k for k in kernels if re.search(r'sym_name = "\w*softmax_\d+"', k)]
    return kernel


@pytest.mark.parametrize(("name", "level", "registers"), [
    ("49-keys", 4, True), ("49-keys", 2, False), ("whole-vectors", 2, True), ("7-wide", 3, True),
    ("scale-mask", 4, True), ("longest", 4, True), ("longest", 3, False),
    ("not-vector-formula", 4, False)])
def test_a_short_row_is_held_in_registers(tmp_path, name, level, registers) -> None:
    """The register form loads whole vectors and combines lanes by shuffles, and loops over
    nothing in the row; the loop form carries its maximum and sum through loops."""
    shape, prologue = CASES[name]
    kernel = _softmax_kernel(shape, prologue, level, tmp_path)
    carried = re.search(r'"hextir.for"\(%\w+, %\w+, %\w+, %', kernel)
    held = "vector.load" in kernel and "vector.shuffle" in kernel and not carried
    assert held == registers, kernel
