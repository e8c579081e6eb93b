"""hexir-lower-to-tir as a pass: what it replaces, what it names, what it records, what it
refuses. The values the kernels compute are in test_lower_to_tir_kernels.py."""

from __future__ import annotations

import pytest

from hexir_compiler.dialects import context
from hexir_compiler.errors import CompileError, diagnostic
from hexir_compiler.mlir import ir, passmanager
from hexir_compiler.transforms import hexir_lower_to_tir
from tir_programs import Case, Lowered

PROGRAM = """\
func.func @main(%x: tensor<2x3xf64>) -> tensor<2x4xf64> {
  %w = "hexir.constant"() {device = "cpu", value = dense<1.0> : tensor<3x4xf64>}
      : () -> tensor<3x4xf64>
  %0 = "hexir.linear"(%x, %w) {device = "cuda"}
      : (tensor<2x3xf64>, tensor<3x4xf64>) -> tensor<2x4xf64>
  %1 = "hexir.transfer"(%0) {src = "cuda", dst = "cpu"} : (tensor<2x4xf64>) -> tensor<2x4xf64>
  %2 = "hexir.relu"(%1) : (tensor<2x4xf64>) -> tensor<2x4xf64>
  "hexir.print"(%2) {device = "cpu"} : (tensor<2x4xf64>) -> ()
  return %2 : tensor<2x4xf64>
}
"""


def _ops(lowered: Lowered) -> list[str]:
    main = lowered.module.body.operations[0]
    return [op.operation.name for op in main.regions[0].blocks[0].operations]


def test_compute_ops_become_call_tir_and_the_rest_stays() -> None:
    lowered = Lowered(PROGRAM)
    assert _ops(lowered) == [
        "hexir.constant",
        "hexir.call_tir",
        "hexir.transfer",
        "hexir.call_tir",
        "hexir.print",
        "func.return",
    ]
    assert [(k.name, k.device, k.kind) for k in lowered.kernels] == [
        ("linear_0", "cuda", "matmul"),
        ("relu_1", "cpu", "relu"),  # no device: the default, cpu
    ]
    assert '{callee = @linear_0, device = "cuda", operandSegmentSizes' in lowered.text
    assert '{callee = @relu_1, device = "cpu", operandSegmentSizes' in lowered.text


def test_kernel_names_skip_symbols_already_taken() -> None:
    # Lower, add one more relu to the lowered program, lower again: relu_1 exists already.
    first = Lowered(PROGRAM).text
    more = first.replace(
        "    return %3",
        '    %9 = "hexir.relu"(%3) : (tensor<2x4xf64>) -> tensor<2x4xf64>\n    return %9',
    )
    names = [kernel.name for kernel in Lowered(more).kernels]
    assert names == ["linear_0", "relu_1", "relu_0"]


@pytest.mark.parametrize(
    ("case", "kind", "params"),
    [
        (Case("matmul", [(2, 3, 4), (4, 5)], (2, 3, 5)), "matmul", []),
        (Case("gelu", [(3,)], (3,)), "gelu", [0.0]),
        (Case("gelu", [(3,)], (3,), {"approximate": '"tanh"'}), "gelu", [1.0]),
        (Case("softmax", [(2, 3, 4)], (2, 3, 4), {"axis": "-2 : i64"}), "softmax", [1.0]),
        (
            Case("layer_norm", [(2, 4), (4,), (4,)], (2, 4), {"epsilon": "1.0e-03 : f64"}),
            "layer_norm",
            [1e-3],
        ),
        (
            Case("transpose", [(2, 3, 4)], (4, 2, 3), {"permutation": "array<i64: 2, 0, 1>"}),
            "transpose",
            [2.0, 0.0, 1.0],
        ),
        (Case("reshape", [(2, 6)], (3, 4)), "reshape", []),
        (
            Case(
                "reduce_max", [(2, 3, 4)], (3,), {"axes": "array<i64: 2, -3>", "keepdims": "false"}
            ),
            "reduce_max",
            [0.0, 0.0, 2.0],
        ),
        (
            Case("reduce_sum", [(2, 3)], (2, 1), {"axes": "array<i64: -1>", "keepdims": "true"}),
            "reduce_sum",
            [1.0, 1.0],
        ),
    ],
    ids=lambda v: v.op if isinstance(v, Case) else None,
)
def test_kernel_kind_and_params(case: Case, kind: str, params: list[float]) -> None:
    for device in ("cpu", "cuda"):
        (kernel,) = Lowered(case.program("f32", device)).kernels
        assert (kernel.kind, kernel.params, kernel.device) == (kind, params, device)


def test_buffers_are_the_operands_then_the_destination() -> None:
    lowered = Lowered(Case("add", [(4, 1), (3,)], (4, 3)).program("f32", "cpu"))
    assert "function_type = (memref<4x1xf32>, memref<3xf32>, memref<4x3xf32>) -> ()" in lowered.text


def test_cpu_kernels_have_no_thread_binding_and_cuda_kernels_no_parallel_loops() -> None:
    case = Case("softmax", [(5, 7)], (5, 7), {"axis": "0 : i64"})
    cpu = Lowered(case.program("f64", "cpu")).text
    cuda = Lowered(case.program("f64", "cuda")).text
    assert "thread_binding" not in cpu and 'kind = "parallel"' in cpu
    assert 'kind = "parallel"' not in cuda and 'bind = "threadIdx.x"' in cuda


def test_usable_as_a_python_pass_with_its_name() -> None:
    with context():
        module = ir.Module.parse(PROGRAM)
        pm = passmanager.PassManager()
        pm.add(hexir_lower_to_tir.hexir_lower_to_tir, name=hexir_lower_to_tir.PASS_NAME)
        pm.run(module.operation)
        assert "hexir.call_tir" in str(module) and "hexir.linear" not in str(module)


BIG_BATCH = """\
func.func @main(%a: tensor<70000x1x1xf32>, %b: tensor<70000x1x1xf32>) -> tensor<70000x1x1xf32> {
  %0 = "hexir.matmul"(%a, %b) {device = "cuda"}
      : (tensor<70000x1x1xf32>, tensor<70000x1x1xf32>) -> tensor<70000x1x1xf32>
  return %0 : tensor<70000x1x1xf32>
}
"""
MESSAGE = "hexir.matmul: cuda kernel needs 70000 blocks on grid axis z, more than the 65535 allowed"


def test_refusal_is_a_located_compile_error() -> None:
    with context():
        module = ir.Module.parse(BIG_BATCH)
        with pytest.raises(CompileError) as caught:
            hexir_lower_to_tir.run(module)
        assert diagnostic(caught.value) == f"-:2:8: error: {MESSAGE}"
        assert "hextir.prim_func" not in str(module)  # nothing half-built is left behind


def test_refusal_through_the_pass_manager_is_a_diagnostic() -> None:
    with context():
        module = ir.Module.parse(BIG_BATCH)
        pm = passmanager.PassManager()
        pm.add(hexir_lower_to_tir.hexir_lower_to_tir, name=hexir_lower_to_tir.PASS_NAME)
        with pytest.raises(ir.MLIRError) as caught:
            pm.run(module.operation)
        (first, *_) = caught.value.error_diagnostics
        assert first.message == MESSAGE
        assert str(first.location) == 'loc("-":2:8)'
