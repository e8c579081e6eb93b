"""The serializer: the built-in program byte for byte, v5 modules that parse back, refusals."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import hexir_format as hf
from hexir_compiler import builtin, serialize
from hexir_compiler.dialects import context
from hexir_compiler.errors import CompileError, diagnostic
from hexir_compiler.mlir import ir
from hexir_compiler.pipeline import Options, lower

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def tir(text: str | None, placement: dict[str, str] | None = None) -> ir.Module:
    """The program lowered to mlir-llvm, what the serializer takes (unfused: these tests
    look at each op's own kernel)."""
    module = builtin.build() if text is None else ir.Module.parse(text)
    return lower(module, Options("hxb", placement or {}, fuse=False), "mlir-llvm")


def test_builtin_is_the_fixtures_v2_variant_with_a_host_image():
    """One level's program is version 5; the fixture (a default compile) holds it as its
    x86-64-v2 variant, over the same slots, kernel and constants."""
    with context():
        data = serialize.to_bytes(tir(None))
    fixture = hf.parse((FIXTURES / "builtin-cpu.hxb").read_bytes())
    module = hf.parse(data)
    v2 = fixture.functions[0]
    assert v2.cpu_level == 2 and replace(v2, cpu_level=0) == module.functions[0]
    assert fixture.executables[0] == module.executables[0]
    assert bytes(fixture.rodata) == bytes(module.rodata)
    assert module.version == 5
    (exe,) = module.executables
    assert bytes(exe.image[:4]) == b"\x7fELF" and exe.grid == (1, 1, 1)  # one BLAS call


def test_builtin_skips_the_unused_constant():
    with context():
        module = serialize.serialize(tir(None))
    main = module.functions[0]
    assert [c.op for c in main.commands] == [
        hf.Op.CONST,
        hf.Op.CONST,
        hf.Op.ALLOC,
        hf.Op.DISPATCH,
        hf.Op.PRINT,
    ]
    assert np.frombuffer(bytes(module.rodata), "<f8").tolist() == [3, 1, 2, 2, 1, 5, 5, 2]


SPLAT = """
func.func @main() {
  %a = "hexir.constant"() {value = dense<2.5> : tensor<2x3xf64>} : () -> tensor<2x3xf64>
  %r = "hexir.relu"(%a) : (tensor<2x3xf64>) -> tensor<2x3xf64>
  "hexir.print"(%r) : (tensor<2x3xf64>) -> ()
  return
}
"""


def test_splat_is_expanded():
    with context():
        module = serialize.serialize(tir(SPLAT))
    assert np.frombuffer(bytes(module.rodata), "<f8").tolist() == [2.5] * 6
    assert module.executables[0].kind is hf.KernelKind.RELU


ENTRIES = """
func.func @main(%x: tensor<2x3xf32>) -> tensor<2x4xf32> {
  %w = "hexir.constant"() {value = dense<1.0> : tensor<3x4xf32>} : () -> tensor<3x4xf32>
  %y = "hexir.linear"(%x, %w) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %g = "hexir.gelu"(%y) {approximate = "tanh"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %g : tensor<2x4xf32>
}
func.func @norm(%x: tensor<3x4xf64>, %g: tensor<4xf64>, %b: tensor<4xf64>) -> tensor<3x4xf64> {
  %y = "hexir.layer_norm"(%x, %g, %b) {epsilon = 1.0e-5 : f64}
      : (tensor<3x4xf64>, tensor<4xf64>, tensor<4xf64>) -> tensor<3x4xf64>
  "hexir.print"(%y) : (tensor<3x4xf64>) -> ()
  return %y : tensor<3x4xf64>
}
"""


def test_entry_points_with_inputs_and_outputs_parse_back():
    with context():
        model = serialize.serialize(tir(ENTRIES))
    assert model.version == 5
    back = hf.parse(hf.build(model))
    assert back == model
    assert [f.name for f in back.functions] == ["main", "norm"]
    norm = back.function("norm")
    assert [c.op for c in norm.commands] == [
        hf.Op.INPUT,
        hf.Op.INPUT,
        hf.Op.INPUT,
        hf.Op.ALLOC,
        hf.Op.DISPATCH,
        hf.Op.PRINT,
        hf.Op.OUTPUT,
    ]
    assert [c.operands[1] for c in norm.commands if c.op is hf.Op.INPUT] == [0, 1, 2]
    gelu = next(e for e in back.executables if e.kind is hf.KernelKind.GELU)
    assert gelu.params == (1.0,)
    assert gelu.args == (hf.TensorType(hf.DType.F32, (2, 4)),) * 2
    ln = next(e for e in back.executables if e.kind is hf.KernelKind.LAYER_NORM)
    assert ln.params == (1e-5,)
    assert back.slots[0] == hf.Slot(hf.Device.CPU, hf.TensorType(hf.DType.F32, (2, 3)))


def test_transfers_become_copies_between_device_slots(monkeypatch):
    from hexir_compiler.target import cuda
    from hexir_compiler.target.cuda import DeviceImage

    fake = DeviceImage(b"\x7fELF fake", (1, 1, 1), (32, 1, 1))
    monkeypatch.setattr(cuda, "compile_kernels", lambda module, target=None: {"linear_0": fake})
    with context():
        model = serialize.serialize(tir(None, {"hexir.linear": "cuda"}))
    main = model.functions[0]
    assert [c.op for c in main.commands] == [
        hf.Op.CONST,
        hf.Op.CONST,
        hf.Op.ALLOC,
        hf.Op.DISPATCH,
        hf.Op.COPY,
        hf.Op.PRINT,
    ]
    copy = main.commands[4]
    assert model.slots[copy.dst].device is hf.Device.CPU
    assert model.slots[copy.src].device is hf.Device.CUDA
    assert [s.device for s in model.slots[:2]] == [hf.Device.CUDA, hf.Device.CUDA]
    exe = model.executables[0]
    assert (exe.device, bytes(exe.image), exe.grid, exe.block) == (
        hf.Device.CUDA,
        fake.image,
        (1, 1, 1),
        (32, 1, 1),
    )


def test_a_cuda_kernel_is_never_written_without_device_code(monkeypatch):
    from hexir_compiler.target import cuda

    monkeypatch.setattr(cuda, "compile_kernels", lambda module, target=None: {})
    with context(), pytest.raises(CompileError, match="kernel 'linear_0' has no code"):
        serialize.serialize(tir(None, {"hexir.linear": "cuda"}))


def test_an_op_outside_the_host_program_is_refused_at_its_location():
    text = """
func.func @main() {
  %c = arith.constant dense<1.0> : tensor<2x2xf64>
  "hexir.print"(%c) : (tensor<2x2xf64>) -> ()
  return
}
"""
    with context():
        module = ir.Module.parse(text)
        with pytest.raises(CompileError) as err:
            serialize.serialize(module)
    assert diagnostic(err.value) == "-:3:8: error: cannot serialize this op into a host program"


def test_a_module_without_functions_has_nothing_to_run():
    with context(), pytest.raises(CompileError, match=r"no func.func"):
        serialize.serialize(tir("module {}"))


def test_a_declaration_is_not_an_entry_point():
    text = "func.func private @decl(tensor<2xf32>) -> tensor<2xf32>\n"
    with context(), pytest.raises(CompileError) as err:
        serialize.serialize(tir(text))
    assert diagnostic(err.value) == (
        "-:1:1: error: function @decl is a declaration; an entry point needs a body"
    )
