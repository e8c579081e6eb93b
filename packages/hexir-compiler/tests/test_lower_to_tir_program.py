"""A whole program through the kernel stage (partition, transfers, lower-to-tir), evaluated by
running its call_tir's kernels with tir_interp in program order: the operands each call site
passes, the copies between devices and the kernels together compute the program.

The program is a small transformer block (layer_norm, attention with reshapes, transposes,
a batched matmul and softmax, a gelu MLP, residual adds) followed by every remaining op, under
two placements that split it between cpu and cuda in opposite ways. Then the example
transformer block of examples/ with every op on cuda: its real cuda kernels, launched thread
by thread, against the example's own numpy reference.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from hexir_compiler import packing
from hexir_compiler.dialects import context
from hexir_compiler.mlir import ir
from hexir_compiler.pipeline import Options, lower
from tir_interp import Kernel
from tir_programs import DTYPES

PROGRAM = """\
func.func @main(%x: tensor<2x4x8xT>, %g: tensor<8xT>, %b: tensor<8xT>, %wq: tensor<8x8xT>,
                %wk: tensor<8x8xT>, %wv: tensor<8x8xT>, %w1: tensor<8x16xT>, %w2: tensor<16x8xT>,
                %scale: tensor<1xT>) -> (tensor<2x4x8xT>, tensor<2x4x1xT>, tensor<4xT>) {
  %h = "hexir.layer_norm"(%x, %g, %b) {epsilon = 1.0e-05 : f64}
      : (tensor<2x4x8xT>, tensor<8xT>, tensor<8xT>) -> tensor<2x4x8xT>
  %q = "hexir.linear"(%h, %wq) : (tensor<2x4x8xT>, tensor<8x8xT>) -> tensor<2x4x8xT>
  %k = "hexir.linear"(%h, %wk) : (tensor<2x4x8xT>, tensor<8x8xT>) -> tensor<2x4x8xT>
  %v = "hexir.linear"(%h, %wv) : (tensor<2x4x8xT>, tensor<8x8xT>) -> tensor<2x4x8xT>
  %q4 = "hexir.reshape"(%q) : (tensor<2x4x8xT>) -> tensor<2x4x2x4xT>
  %k4 = "hexir.reshape"(%k) : (tensor<2x4x8xT>) -> tensor<2x4x2x4xT>
  %v4 = "hexir.reshape"(%v) : (tensor<2x4x8xT>) -> tensor<2x4x2x4xT>
  %qh = "hexir.transpose"(%q4) {permutation = array<i64: 0, 2, 1, 3>}
      : (tensor<2x4x2x4xT>) -> tensor<2x2x4x4xT>
  %kt = "hexir.transpose"(%k4) {permutation = array<i64: 0, 2, 3, 1>}
      : (tensor<2x4x2x4xT>) -> tensor<2x2x4x4xT>
  %vh = "hexir.transpose"(%v4) {permutation = array<i64: 0, 2, 1, 3>}
      : (tensor<2x4x2x4xT>) -> tensor<2x2x4x4xT>
  %s = "hexir.matmul"(%qh, %kt) : (tensor<2x2x4x4xT>, tensor<2x2x4x4xT>) -> tensor<2x2x4x4xT>
  %ss = "hexir.mul"(%s, %scale) : (tensor<2x2x4x4xT>, tensor<1xT>) -> tensor<2x2x4x4xT>
  %p = "hexir.softmax"(%ss) {axis = -1 : i64} : (tensor<2x2x4x4xT>) -> tensor<2x2x4x4xT>
  %o = "hexir.matmul"(%p, %vh) : (tensor<2x2x4x4xT>, tensor<2x2x4x4xT>) -> tensor<2x2x4x4xT>
  %ot = "hexir.transpose"(%o) {permutation = array<i64: 0, 2, 1, 3>}
      : (tensor<2x2x4x4xT>) -> tensor<2x4x2x4xT>
  %o3 = "hexir.reshape"(%ot) : (tensor<2x4x2x4xT>) -> tensor<2x4x8xT>
  %r = "hexir.add"(%x, %o3) : (tensor<2x4x8xT>, tensor<2x4x8xT>) -> tensor<2x4x8xT>
  %f1 = "hexir.linear"(%r, %w1) : (tensor<2x4x8xT>, tensor<8x16xT>) -> tensor<2x4x16xT>
  %f2 = "hexir.gelu"(%f1) : (tensor<2x4x16xT>) -> tensor<2x4x16xT>
  %f3 = "hexir.linear"(%f2, %w2) : (tensor<2x4x16xT>, tensor<16x8xT>) -> tensor<2x4x8xT>
  %y = "hexir.add"(%r, %f3) : (tensor<2x4x8xT>, tensor<2x4x8xT>) -> tensor<2x4x8xT>
  %a = "hexir.sigmoid"(%y) : (tensor<2x4x8xT>) -> tensor<2x4x8xT>
  %c = "hexir.sqrt"(%a) : (tensor<2x4x8xT>) -> tensor<2x4x8xT>
  %d = "hexir.tanh"(%y) : (tensor<2x4x8xT>) -> tensor<2x4x8xT>
  %e = "hexir.sub"(%d, %c) : (tensor<2x4x8xT>, tensor<2x4x8xT>) -> tensor<2x4x8xT>
  %n = "hexir.neg"(%y) : (tensor<2x4x8xT>) -> tensor<2x4x8xT>
  %rl = "hexir.relu"(%n) : (tensor<2x4x8xT>) -> tensor<2x4x8xT>
  %ex = "hexir.exp"(%rl) : (tensor<2x4x8xT>) -> tensor<2x4x8xT>
  %z = "hexir.div"(%e, %ex) : (tensor<2x4x8xT>, tensor<2x4x8xT>) -> tensor<2x4x8xT>
  %m = "hexir.reduce_mean"(%z) {axes = array<i64: -1>, keepdims = true}
      : (tensor<2x4x8xT>) -> tensor<2x4x1xT>
  %sm = "hexir.reduce_sum"(%z) {axes = array<i64: 0, 2>, keepdims = false}
      : (tensor<2x4x8xT>) -> tensor<4xT>
  %mx = "hexir.reduce_max"(%y) {axes = array<i64: 2, 0>, keepdims = false}
      : (tensor<2x4x8xT>) -> tensor<4xT>
  %out = "hexir.add"(%sm, %mx) : (tensor<4xT>, tensor<4xT>) -> tensor<4xT>
  "hexir.print"(%m) : (tensor<2x4x1xT>) -> ()
  return %z, %m, %out : tensor<2x4x8xT>, tensor<2x4x1xT>, tensor<4xT>
}
"""
SHAPES = [(2, 4, 8), (8,), (8,), (8, 8), (8, 8), (8, 8), (8, 16), (16, 8), (1,)]
GPU_HEAVY = ["linear", "matmul", "softmax", "transpose", "add", "gelu", "layer_norm"]
OTHERS = [
    "reshape",
    "mul",
    "sigmoid",
    "sqrt",
    "tanh",
    "sub",
    "neg",
    "relu",
    "exp",
    "div",
    "reduce_mean",
    "reduce_sum",
    "reduce_max",
]


def reference(x, g, b, wq, wk, wv, w1, w2, scale):
    mean = x.mean(-1, keepdims=True)
    h = (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b
    heads = [(h @ w).reshape(2, 4, 2, 4) for w in (wq, wk, wv)]
    qh, kt, vh = (
        heads[0].transpose(0, 2, 1, 3),
        heads[1].transpose(0, 2, 3, 1),
        heads[2].transpose(0, 2, 1, 3),
    )
    s = (qh @ kt) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    r = x + (p @ vh).transpose(0, 2, 1, 3).reshape(2, 4, 8)
    f1 = r @ w1
    f2 = 0.5 * f1 * (1 + np.vectorize(math.erf)(f1 / math.sqrt(2)))
    y = r + f2 @ w2
    z = (np.tanh(y) - np.sqrt(1 / (1 + np.exp(-y)))) / np.exp(np.maximum(-y, 0))
    return z, z.mean(-1, keepdims=True), z.sum(axis=(0, 2)) + y.max(axis=(2, 0))


def evaluate(module: ir.Module, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run `main` of a lowered module: kernels through tir_interp, copies as copies."""
    body = module.body.operations
    kernels = {
        ir.StringAttr(op.attributes["sym_name"]).value: Kernel(op)
        for op in body
        if op.operation.name == "hextir.prim_func"
    }
    main = body[0].regions[0].blocks[0]
    values = dict(zip(main.arguments, inputs, strict=True))
    for view in main.operations:
        op = view.operation
        args = [values[v] for v in op.operands]
        if op.name == "hexir.call_tir":
            out = np.full(ir.RankedTensorType(op.results[0].type).shape, np.nan, args[0].dtype)
            kernels[ir.FlatSymbolRefAttr(op.attributes["callee"]).value](*args, out)
            values[op.results[0]] = out
        elif op.name == "hexir.transfer":
            values[op.results[0]] = args[0].copy()
        elif op.name == "hexir.constant":
            values[op.results[0]] = _constant(op)
        elif op.name == "func.return":
            return args
        elif op.name != "hexir.print":
            raise AssertionError(f"unexpected op at the kernel level: {op.name}")
    raise AssertionError("main has no return")


def _constant(op: ir.Operation) -> np.ndarray:
    type_ = ir.RankedTensorType(op.results[0].type)
    return np.array(packing.value(op, np.dtype(DTYPES[str(type_.element_type)])))


@pytest.mark.parametrize("element", ["f32", "f64"])
@pytest.mark.parametrize("on_cuda", [GPU_HEAVY, OTHERS], ids=["gpu-heavy", "gpu-light"])
def test_the_lowered_program_computes_the_program(on_cuda: list[str], element: str) -> None:
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(s).astype(DTYPES[element]) for s in SHAPES]
    inputs[-1][...] = 0.5
    placement = {f"hexir.{name}": "cuda" for name in on_cuda}
    with context():
        module = ir.Module.parse(PROGRAM.replace("xT>", f"x{element}>"))
        lower(module, Options(stage="mlir-tir", placement=placement, fuse=False), "mlir-tir")
        text = str(module)
        assert text.count('"hexir.call_tir"') == 33 and '"hexir.transfer"' in text
        outputs = evaluate(module, inputs)
    expected = reference(*(a.astype(np.float64) for a in inputs))
    # Thirty-odd f32 kernels in a row, through tanh(y) - sqrt(sigmoid(y)) (which cancels):
    # rounding compounds, so f32 gets ten times the one-kernel tolerance.
    for got, want in zip(outputs, expected, strict=True):
        rtol, atol = (1e-4, 1e-5) if element == "f32" else (1e-11, 1e-12)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * max(1.0, np.abs(want).max()))


EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_the_example_transformer_block_on_cuda_computes_its_reference() -> None:
    spec = importlib.util.spec_from_file_location("reference", EXAMPLES / "reference.py")
    reference_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference_module)
    program = EXAMPLES / "transformer_block.mlir"
    x = reference_module.sample_input(program, np.random.default_rng(0))
    everything = {f"hexir.{name}": "cuda" for name in [*GPU_HEAVY, *OTHERS]}
    with context():
        module = ir.Module.parseFile(str(program))
        lower(module, Options(stage="mlir-tir", placement=everything), "mlir-tir")
        (out,) = evaluate(module, [x])
    error = reference_module.relative_error(out, reference_module.evaluate(program, x))
    assert error <= reference_module.TOLERANCE["f32"], f"relative error {error:.3g}"
