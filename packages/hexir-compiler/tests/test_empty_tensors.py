"""Tensors with a zero dimension compile, on both devices, and run on the cpu with numpy's
answer: nothing to compute, or a reduction over nothing (sum 0, matmul over k=0 zeros)."""

import shutil
from pathlib import Path

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
from hexir_compiler.pipeline import Options, compile_file

HAS_TOOLKIT = shutil.which("ptxas") is not None or Path("/usr/local/cuda/bin/ptxas").exists()

CASES = {
    "softmax over an empty axis": (
        '%r = "hexir.softmax"(%x) {axis = 1 : i64} : (tensor<2x0xf32>) -> tensor<2x0xf32>',
        ["2x0"], "2x0", lambda x: x),
    "softmax beside an empty axis": (
        '%r = "hexir.softmax"(%x) {axis = 1 : i64} : (tensor<0x3xf32>) -> tensor<0x3xf32>',
        ["0x3"], "0x3", lambda x: x),
    "a sum over an empty axis is 0": (
        '%r = "hexir.reduce_sum"(%x) {axes = array<i64: 1>, keepdims = false} : '
        '(tensor<2x0xf32>) -> tensor<2xf32>', ["2x0"], "2", lambda x: x.sum(axis=1)),
    "a matmul over k = 0 is zeros": (
        '%r = "hexir.matmul"(%x, %y) : (tensor<2x0xf32>, tensor<0x3xf32>) -> tensor<2x3xf32>',
        ["2x0", "0x3"], "2x3", lambda x, y: x @ y),
    "an empty broadcast": (
        '%r = "hexir.add"(%x, %y) : (tensor<0x3xf32>, tensor<3xf32>) -> tensor<0x3xf32>',
        ["0x3", "3"], "0x3", lambda x, y: x + y),
}


def program(body: str, inputs: list[str], output: str) -> str:
    names = ["%x", "%y"][:len(inputs)]
    args = ", ".join(f"{n}: tensor<{s}xf32>" for n, s in zip(names, inputs, strict=True))
    return (f"func.func @main({args}) -> tensor<{output}xf32> {{\n  {body}\n"
            f"  return %r : tensor<{output}xf32>\n}}\n")


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_an_empty_tensor_compiles_and_runs(tmp_path, name, device):
    if device == "cuda" and not HAS_TOOLKIT:
        pytest.skip("cuda kernels need ptxas")
    body, inputs, output, reference = CASES[name]
    source = tmp_path / "empty.mlir"
    source.write_text(program(body, inputs, output))
    data = compile_file(source, Options("hxb", {"*": device}))
    assert hf.parse(data).executables  # a kernel was made, and the module parses
    if device == "cuda":
        return  # running it needs a GPU: the cuda tests of the runtime do that
    arrays = [np.zeros(tuple(int(d) for d in s.split("x")), np.float32) + 1 for s in inputs]
    with hr.load(data) as m:
        got = m.main(*arrays)
    np.testing.assert_array_equal(got, reference(*arrays))
    assert got.shape == tuple(int(d) for d in output.split("x"))
