"""hextir-to-gpu keeps every kernel's meaning: launched as CUDA would launch it, the gpu.func
computes exactly what the hextir kernel computes, for each of the 19 kernel kinds in f32 and
f64, on shapes that thread blocks and tiles do not divide.

The gpu.func runs in `gpu_interp` over the grid and block the pass recorded; the hextir
kernel runs in `tir_interp`. Both share one table of scalar semantics, so the results must be
bit-identical, and both must match numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from gpu_interp import GpuKernel
from hexir_compiler.transforms import hextir_to_gpu
from tir_programs import Case, Lowered, assert_close, reference, sample

ELEMENTWISE = (5, 1, 7), (3, 7), (5, 3, 7)
CASES = [
    *(Case(op, [(3, 70)], (3, 70)) for op in ("relu", "sigmoid", "tanh", "exp", "sqrt", "neg")),
    *(Case(op, list(ELEMENTWISE[:2]), ELEMENTWISE[2]) for op in ("add", "sub", "mul", "div")),
    Case("gelu", [(2, 33)], (2, 33), {"approximate": '"none"'}),
    Case("gelu", [(2, 33)], (2, 33), {"approximate": '"tanh"'}),
    Case("matmul", [(2, 17, 5), (5, 19)], (2, 17, 19)),
    Case("linear", [(3, 7), (7, 40)], (3, 40)),
    Case("softmax", [(4, 9)], (4, 9), {"axis": "-1 : i64"}),
    Case("softmax", [(4, 9)], (4, 9), {"axis": "0 : i64"}),
    Case("layer_norm", [(6, 10), (10,), (10,)], (6, 10), {"epsilon": "1.0e-05 : f64"}),
    Case("transpose", [(2, 3, 5)], (5, 2, 3), {"permutation": "array<i64: 2, 0, 1>"}),
    Case("reshape", [(4, 6)], (24,)),
    Case("reduce_sum", [(3, 4, 5)], (3, 5), {"axes": "array<i64: 1>", "keepdims": "false"}),
    Case("reduce_mean", [(3, 4, 5)], (1, 4, 1), {"axes": "array<i64: 0, -1>", "keepdims": "true"}),
    Case("reduce_max", [(3, 4, 5)], (3, 4), {"axes": "array<i64: 2>", "keepdims": "false"}),
]
PARAMS = [pytest.param(c, id=f"{c.op}-{'x'.join(map(str, c.output))}") for c in CASES]


def test_the_cases_cover_every_kernel_kind():
    kinds = {"matmul" if c.op == "linear" else c.op for c in CASES}
    assert len(kinds) == 19


@pytest.mark.parametrize("element", ["f32", "f64"])
@pytest.mark.parametrize("case", PARAMS)
def test_gpu_kernel_computes_what_the_hextir_kernel_computes(case: Case, element: str):
    lowered = Lowered(case.program(element, "cuda"))
    (kernel,) = lowered.kernels
    inputs = sample(case, element, np.random.default_rng(0))
    expected = np.full(case.output, np.nan, dtype=inputs[0].dtype)
    with lowered.context:
        kernel(*inputs, expected)
        hextir_to_gpu.run(lowered.module)
        (gpu_module,) = [
            op.operation
            for op in lowered.module.body.operations
            if op.operation.name == "gpu.module"
        ]
        gpu_kernel = GpuKernel(gpu_module)
        actual = np.full(case.output, np.nan, dtype=inputs[0].dtype)
        gpu_kernel(*inputs, actual)
    assert gpu_kernel.name == kernel.name
    assert (gpu_kernel.grid, gpu_kernel.block) == (kernel.grid, kernel.block)
    assert not np.isnan(actual).any(), "some destination element was never written"
    np.testing.assert_array_equal(actual, expected)
    assert_close(actual, reference(case, inputs), element)
