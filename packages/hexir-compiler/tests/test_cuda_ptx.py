"""Programs with every op on cuda, fused, through the runtime on the fake driver: each
kernel's PTX runs on the executor (the runtime's tests/ptx_exec.py) and the results match the
cpu module's, f32 within 1e-5 and f64 within 1e-12 of the largest value. The shapes are the
ones a schedule gets wrong: rows long enough for the block-per-row reductions, and matmul
and conv extents that do not divide the tiles."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import hexir_compiler
import hexir_runtime
from fake_driver import FakeDriver

TOLERANCE = {np.float32: 1e-5, np.float64: 1e-12}
ELEM = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _model(nodes, x_shape, dtype, weights):
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(dtype), name)
             for name, shape in weights.items()]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", ELEM[dtype],
                                                                         x_shape)],
                              [helper.make_tensor_value_info("y", ELEM[dtype], None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


PROGRAMS = {
    # a matmul whose M, N, K divide no tile, its bias and gelu fused, then a long softmax row
    "mlp": (lambda: [helper.make_node("MatMul", ["x", "w"], ["h"]),
                     helper.make_node("Add", ["h", "b"], ["a"]),
                     helper.make_node("Relu", ["a"], ["r"]),
                     helper.make_node("MatMul", ["r", "w2"], ["z"]),
                     helper.make_node("Softmax", ["z"], ["y"], axis=-1)],
            (37, 53), {"w": (53, 29), "b": (29,), "w2": (29, 1000)}),
    # layer_norm over a row of 777, then a scaled residual
    "layer_norm": (lambda: [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"],
                                             axis=-1),
                            helper.make_node("Mul", ["n", "x"], ["y"])],
                   (5, 777), {"g": (777,), "b": (777,)}),
    # a strided, padded conv with bias and relu, pooled, on sizes that divide nothing
    "conv": (lambda: [helper.make_node("Conv", ["x", "k", "kb"], ["c"], pads=[1, 2, 1, 2],
                                       strides=[2, 1]),
                      helper.make_node("Relu", ["c"], ["r"]),
                      helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2]),
                      helper.make_node("ReduceMean", ["p"], ["y"], axes=[2, 3],
                                       keepdims=0)],
             (2, 3, 13, 11), {"k": (7, 3, 3, 5), "kb": (7,)}),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_op_on_cuda_matches_the_cpu(name, dtype):
    nodes, shape, weights = PROGRAMS[name]
    model = _model(nodes(), shape, dtype, weights)
    x = np.random.default_rng(9).standard_normal(shape).astype(dtype)
    cpu = hexir_runtime.load(hexir_compiler.compile(model))
    cuda = hexir_compiler.compile(model, placement="cuda")
    with cpu, hexir_runtime.load(cuda, device="cuda", driver=FakeDriver()) as gpu:
        want, got = cpu.main(x), gpu.main(x)
    error = np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()
    assert error <= TOLERANCE[dtype], error
