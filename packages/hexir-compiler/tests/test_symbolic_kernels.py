"""Kernels of symbolic sizes, run thread by thread (`tir_graph`, `tir_interp`) on both
devices: the same module at several sizes, each against numpy.

What only a symbolic kernel has is checked here without a GPU: the views of its flat buffers
(`memref.reinterpret_cast`, every access bounds-checked against the view, and the view
against the buffer), its loops bounded by sizes computed from its symbol operands, the cpu
schedules' remainders, and on cuda a grid of static geometry striding over a space whose size
is an operand (every thread of the launch runs, races and unwritten destination elements are
failures). The cuda grid of a symbolic space is made 3 blocks here (SYMBOLIC_BLOCKS), so
that an interpreted launch is 768 threads rather than 270,336: the striding it checks is the
same, only more of it. Layers: attention (a matmul whose columns, and another whose depth,
are the sequence's length; a softmax over it) and a reduction over a symbolic axis.
"""

# ruff: noqa: E501  (the MLIR programs below are one op a line)

from __future__ import annotations

import numpy as np
import pytest

import tir_graph
from hexir_compiler.pipeline import Options
from hexir_compiler.transforms.tir import schedule


@pytest.fixture(autouse=True)
def small_grid(monkeypatch):
    monkeypatch.setattr(schedule, "SYMBOLIC_BLOCKS", 3)

ATTENTION = """
func.func @main(%q: tensor<?x?x8xf32, ["batch", "seq"]>, %k: tensor<?x?x8xf32, ["batch", "seq"]>,
                %v: tensor<?x?x8xf32, ["batch", "seq"]>) -> tensor<?x?x8xf32, ["batch", "seq"]> {
  %kt = "hexir.transpose"(%k) {permutation = array<i64: 0, 2, 1>} : (tensor<?x?x8xf32, ["batch", "seq"]>) -> tensor<?x8x?xf32, ["batch", "seq"]>
  %s = "hexir.matmul"(%q, %kt) : (tensor<?x?x8xf32, ["batch", "seq"]>, tensor<?x8x?xf32, ["batch", "seq"]>) -> tensor<?x?x?xf32, ["batch", "seq", "seq"]>
  %p = "hexir.softmax"(%s) {axis = -1 : i64} : (tensor<?x?x?xf32, ["batch", "seq", "seq"]>) -> tensor<?x?x?xf32, ["batch", "seq", "seq"]>
  %o = "hexir.matmul"(%p, %v) : (tensor<?x?x?xf32, ["batch", "seq", "seq"]>, tensor<?x?x8xf32, ["batch", "seq"]>) -> tensor<?x?x8xf32, ["batch", "seq"]>
  return %o : tensor<?x?x8xf32, ["batch", "seq"]>
}
"""

ROWS = """
func.func @main(%x: tensor<?x6xf32, ["n"]>, %w: tensor<6x5xf32>) -> tensor<5xf32> {
  %y = "hexir.linear"(%x, %w) : (tensor<?x6xf32, ["n"]>, tensor<6x5xf32>) -> tensor<?x5xf32, ["n"]>
  %g = "hexir.gelu"(%y) {approximate = "none"} : (tensor<?x5xf32, ["n"]>) -> tensor<?x5xf32, ["n"]>
  %s = "hexir.reduce_sum"(%g) {axes = array<i64: 0>, keepdims = false} : (tensor<?x5xf32, ["n"]>) -> tensor<5xf32>
  return %s : tensor<5xf32>
}
"""


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_attention_of_any_batch_and_length(device, tmp_path):
    source = tmp_path / "attention.mlir"
    source.write_text(ATTENTION)
    rng = np.random.default_rng(0)
    for batch, seq in ((1, 1), (2, 5), (3, 17)):
        q, k, v = (rng.standard_normal((batch, seq, 8)).astype(np.float32) for _ in range(3))
        (got,) = tir_graph.run(str(source), [q, k, v], Options("mlir-tir", {"*": device}))
        want = _softmax(q @ k.transpose(0, 2, 1)) @ v
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_reduction_over_a_symbolic_axis(device, tmp_path):
    from math import erf

    source = tmp_path / "rows.mlir"
    source.write_text(ROWS)
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    for n in (1, 7, 70):
        x = rng.standard_normal((n, 6)).astype(np.float32)
        (got,) = tir_graph.run(str(source), [x, w], Options("mlir-tir", {"*": device}))
        y = (x @ w).astype(np.float64)
        want = (0.5 * y * (1 + np.vectorize(erf)(y / np.sqrt(2)))).sum(0)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


CONCAT = """
func.func @main(%a: tensor<1x3x?x?xf32, ["h", "w"]>, %b: tensor<1x2x?x?xf32, ["h", "w"]>) -> tensor<1x5x?x?xf32, ["h", "w"]> {
  %c = "hexir.concat"(%a, %b) {axis = 1 : i64} : (tensor<1x3x?x?xf32, ["h", "w"]>, tensor<1x2x?x?xf32, ["h", "w"]>) -> tensor<1x5x?x?xf32, ["h", "w"]>
  return %c : tensor<1x5x?x?xf32, ["h", "w"]>
}
"""


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_channel_concat_of_symbolic_planes(device, tmp_path):
    """On the cpu each channel's plane is one flat loop (h x w, a symbolic count) whose
    coordinates are folded back: every size, planes of one row or one column too."""
    source = tmp_path / "concat.mlir"
    source.write_text(CONCAT)
    rng = np.random.default_rng(3)
    for h, w in ((1, 1), (1, 7), (6, 1), (5, 9)):
        a = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        b = rng.standard_normal((1, 2, h, w)).astype(np.float32)
        (got,) = tir_graph.run(str(source), [a, b], Options("mlir-tir", {"*": device}))
        np.testing.assert_array_equal(got, np.concatenate([a, b], axis=1))
