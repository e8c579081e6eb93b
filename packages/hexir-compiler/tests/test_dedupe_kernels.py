"""hexir-dedupe-kernels: kernels identical but for their name become one, and the results stay.

A network repeating one layer (two linear+relu layers of one shape, then a head of another)
keeps one kernel per distinct code: both layers' calls name the first layer's kernel, the
`.hxb` holds one executable for them, and the cpu runtime computes what numpy does.
"""

from __future__ import annotations

import re

import numpy as np

import hexir_compiler
import hexir_format as hf
import hexir_runtime
from hexir_compiler.dialects import context
from hexir_compiler.mlir import ir
from hexir_compiler.transforms import hexir_dedupe_kernels

RNG = np.random.default_rng(0)
W1, W2 = (RNG.standard_normal((8, 8)).astype(np.float32) for _ in range(2))
W3 = RNG.standard_normal((8, 3)).astype(np.float32)


def _dense(a: np.ndarray) -> str:
    shape = "x".join(map(str, a.shape))
    return f'dense<"0x{a.astype("<f4").tobytes().hex().upper()}"> : tensor<{shape}xf32>'


def _layer(x: str, w: str, n: int, out: str, relu: bool) -> str:
    t = f"tensor<4x{n}xf32>"
    text = (f'  %{out}_mm = "hexir.linear"(%{x}, %{w}) : (tensor<4x8xf32>, '
            f"tensor<8x{n}xf32>) -> {t}\n")
    if relu:
        return text + f'  %{out} = "hexir.relu"(%{out}_mm) : ({t}) -> {t}\n'
    return text.replace(f"%{out}_mm =", f"%{out} =")


PROGRAM = (
    "func.func @main(%x: tensor<4x8xf32>) -> tensor<4x3xf32> {\n"
    + "".join(f'  %{n} = "hexir.constant"() {{value = {_dense(w)}}} : () -> '
              f"tensor<{'x'.join(map(str, w.shape))}xf32>\n"
              for n, w in (("w1", W1), ("w2", W2), ("w3", W3)))
    + _layer("x", "w1", 8, "h1", True) + _layer("h1", "w2", 8, "h2", True)
    + _layer("h2", "w3", 3, "y", False)
    + "  return %y : tensor<4x3xf32>\n}\n"
)


def test_a_repeated_layer_is_one_kernel_and_one_executable(tmp_path):
    source = tmp_path / "layers.mlir"
    source.write_text(PROGRAM)
    tir = hexir_compiler.compile(source, "mlir-tir")
    assert re.findall(r"callee = @(\w+)", tir) == ["linear_relu_0", "linear_relu_0", "linear_2"]
    assert re.findall(r'sym_name = "(\w+)"', tir).count("linear_relu_1") == 0

    image = hexir_compiler.compile(source)
    per_level = [(e.name, e.cpu_level) for e in hf.parse(image).executables]
    assert per_level == [(name, level) for level in (2, 3, 4)
                         for name in ("linear_relu_0", "linear_2")]
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    expected = np.maximum(np.maximum(x @ W1, 0) @ W2, 0) @ W3
    got = hexir_runtime.load(image, device="cpu").main(x)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # unfused: relu and linear kernels each repeat, and are each merged too
    unfused = hf.parse(hexir_compiler.compile(source, fuse=False, target="cpu:x86-64-v2"))
    assert [e.name for e in unfused.executables] == ["linear_0", "relu_1", "linear_4"]


def test_running_the_pass_again_changes_nothing(tmp_path):
    source = tmp_path / "layers.mlir"
    source.write_text(PROGRAM)
    tir = hexir_compiler.compile(source, "mlir-tir")
    with context():
        module = ir.Module.parse(tir)
        assert hexir_dedupe_kernels.run(module) == {}
        assert str(module) == str(ir.Module.parse(tir))


def test_kernels_that_differ_in_one_attribute_stay_apart():
    with context():
        module = ir.Module.parse(
            'llvm.func @a(%p: !llvm.ptr) attributes {hexir.kernel = "generic", '
            'hexir.grid = [1, 1, 1]} { llvm.return }\n'
            'llvm.func @b(%p: !llvm.ptr) attributes {hexir.kernel = "generic", '
            'hexir.grid = [2, 1, 1]} { llvm.return }\n'
            'llvm.func @c(%p: !llvm.ptr) attributes {hexir.kernel = "generic", '
            'hexir.grid = [1, 1, 1]} { llvm.return }\n'
        )
        assert hexir_dedupe_kernels.run(module) == {"c": "a"}
        names = [ir.StringAttr(v.operation.attributes["sym_name"]).value
                 for v in module.body.operations]
        assert names == ["a", "b"]
