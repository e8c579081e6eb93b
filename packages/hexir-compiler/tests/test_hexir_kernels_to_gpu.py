"""hextir-to-loops + hexir-kernels-to-gpu keep every cuda kernel's meaning: launched as CUDA
would launch it, the gpu.func computes exactly what the hextir kernel computes.

The gpu.func runs in `gpu_interp` over the grid and block the pass recorded (its shared
buffers now workgroup attributions, its barriers `gpu.barrier`); the hextir kernel runs in
`tir_interp`. Both share one table of scalar semantics, so the results must be bit-identical,
and both must match numpy. The cases cover every schedule: flat element-wise threads, the
tiled GEMM (batched, tall, edges the tiles do not divide), thread-per-row and block-per-row
reductions, movement kernels.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_interp import GpuKernel
from tir_programs import Case, Lowered, assert_close, reference, sample, to_gpu

CASES = [
    Case("sigmoid", [(3, 70)], (3, 70)),
    Case("add", [(5, 1, 7), (3, 7)], (5, 3, 7)),
    Case("gelu", [(2, 33)], (2, 33), {"approximate": '"tanh"'}),
    Case("matmul", [(2, 17, 5), (5, 19)], (2, 17, 19)),
    Case("matmul", [(2, 20, 21), (2, 21, 9)], (2, 20, 9)),
    Case("matmul", [(70, 17), (17, 40)], (70, 40)),
    Case("linear", [(3, 7), (7, 40)], (3, 40)),
    Case("softmax", [(4, 9)], (4, 9), {"axis": "-1 : i64"}),
    Case("softmax", [(3, 100)], (3, 100), {"axis": "-1 : i64"}),
    Case("layer_norm", [(6, 10), (10,), (10,)], (6, 10), {"epsilon": "1.0e-05 : f64"}),
    Case("layer_norm", [(2, 70), (70,), (70,)], (2, 70), {"epsilon": "1.0e-05 : f64"}),
    Case("transpose", [(2, 3, 5)], (5, 2, 3), {"permutation": "array<i64: 2, 0, 1>"}),
    Case("transpose", [(40, 3, 35)], (35, 3, 40), {"permutation": "array<i64: 2, 1, 0>"}),
    Case("reduce_sum", [(3, 4, 5)], (3, 5), {"axes": "array<i64: 1>", "keepdims": "false"}),
    Case("reduce_max", [(2, 65)], (2, 1), {"axes": "array<i64: 1>", "keepdims": "true"}),
]
PARAMS = [pytest.param(c, id=f"{c.op}-{'x'.join(map(str, c.inputs[0]))}") for c in CASES]


@pytest.mark.parametrize("element", ["f32", "f64"])
@pytest.mark.parametrize("case", PARAMS)
def test_gpu_kernel_computes_what_the_hextir_kernel_computes(case: Case, element: str):
    lowered = Lowered(case.program(element, "cuda"))
    (kernel,) = lowered.kernels
    inputs = sample(case, element, np.random.default_rng(0))
    expected = np.full(case.output, np.nan, dtype=inputs[0].dtype)
    with lowered.context:
        kernel(*inputs, expected)
        gpu_kernel = GpuKernel(to_gpu(lowered))
        actual = np.full(case.output, np.nan, dtype=inputs[0].dtype)
        gpu_kernel(*inputs, actual)
    assert gpu_kernel.name == kernel.name
    assert (gpu_kernel.grid, gpu_kernel.block) == (kernel.grid, kernel.block)
    assert not np.isnan(actual).any(), "some destination element was never written"
    np.testing.assert_array_equal(actual, expected)
    assert_close(actual, reference(case, inputs), element)


def test_shared_buffers_become_workgroup_attributions() -> None:
    lowered = Lowered(Case("softmax", [(3, 100)], (3, 100), {"axis": "-1 : i64"})
                      .program("f32", "cuda"))
    with lowered.context:
        to_gpu(lowered)
        text = str(lowered.module)
    assert "workgroup(%" in text and "gpu.barrier" in text
    assert "memref.alloc" not in text
