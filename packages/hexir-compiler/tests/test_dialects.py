"""The dialects through the Python API: builders, accessors, verifiers, fresh contexts."""

import pytest

from hexir_compiler.dialects import context, hexir, hextir
from hexir_compiler.mlir import arith, ir


def test_for_op_builds_without_segment_sizes_and_reads_its_operands():
    with context(), ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            idx, f32 = ir.IndexType.get(), ir.F32Type.get()
            lb, ub = arith.ConstantOp(idx, 0).result, arith.ConstantOp(idx, 8).result
            acc = arith.ConstantOp(f32, 0.0).result
            loop = hextir.ForOp(lb, ub, lb, [acc], ir.StringAttr.get("serial"), results_=[f32])
            body = loop.body.blocks.append(idx, f32)
            with ir.InsertionPoint(body):
                hextir.YieldOp([body.arguments[1]])
        assert "SegmentSizes" not in str(module)
        assert module.operation.verify()
        assert loop.step == lb and loop.upper_bound == ub and loop.init_args == [acc]


def test_call_tir_reads_heterogeneous_inputs():
    """Three inputs of three types (IRDL would bind one variadic group to one type): each is
    its own optional group, and the call says so in operandSegmentSizes."""
    text = """
    func.func @main(%x: tensor<2x3xf64>, %w: tensor<3x4xf64>,
        %b: tensor<4xf64>) -> tensor<2x4xf64> {
      %y = "hexir.call_tir"(%x, %w, %b)
          {callee = @k, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0>}
          : (tensor<2x3xf64>, tensor<3x4xf64>, tensor<4xf64>) -> tensor<2x4xf64>
      return %y : tensor<2x4xf64>
    }
    "hextir.prim_func"() ({
    ^bb0(%a: memref<2x3xf64>, %b: memref<3x4xf64>, %d: memref<4xf64>, %c: memref<2x4xf64>):
      "hextir.return"() : () -> ()
    }) {sym_name = "k", function_type = (memref<2x3xf64>, memref<3x4xf64>, memref<4xf64>,
        memref<2x4xf64>) -> ()} : () -> ()
    """
    with context():
        module = ir.Module.parse(text)
        call = module.body.operations[0].regions[0].blocks[0].operations[0]
        assert isinstance(call, hexir.CallTirOp)
        assert [str(v.type) for v in call.operands] == [
            "tensor<2x3xf64>", "tensor<3x4xf64>", "tensor<4xf64>"]


def test_call_tir_needs_its_segment_sizes():
    text = """
    func.func @main(%x: tensor<2x3xf64>) -> tensor<2x3xf64> {
      %y = "hexir.call_tir"(%x)
          {callee = @k, operandSegmentSizes = array<i32: 0, 1, 0, 0, 0, 0, 0, 0>}
          : (tensor<2x3xf64>) -> tensor<2x3xf64>
      return %y : tensor<2x3xf64>
    }
    "hextir.prim_func"() ({
    ^bb0(%a: memref<2x3xf64>, %c: memref<2x3xf64>):
      "hextir.return"() : () -> ()
    }) {sym_name = "k", function_type = (memref<2x3xf64>, memref<2x3xf64>) -> ()} : () -> ()
    """
    with context(), pytest.raises(ir.MLIRError) as err:
        ir.Module.parse(text)
    assert "operandSegmentSizes must be" in str(err.value.error_diagnostics[0].message)


def test_verifier_errors_carry_the_location():
    text = (
        "func.func @main(%a: tensor<2x3xf32>, %w: tensor<2x2xf32>) {\n"
        '  %r = "hexir.linear"(%a, %w) : (tensor<2x3xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>\n'
        "  return\n}\n"
    )
    with context(), pytest.raises(ir.MLIRError) as err:
        ir.Module.parse(text)
    first = err.value.error_diagnostics[0]
    assert first.message == "'hexir.linear' op inner dimensions differ: 3 vs 2"
    assert str(first.location) == 'loc("-":2:8)'


def test_each_context_gets_the_dialects():
    for _ in range(3):
        with context():
            module = ir.Module.parse(
                "func.func @f(%x: tensor<2xf64>) -> tensor<2xf64> {\n"
                '  %y = "hexir.neg"(%x) : (tensor<2xf64>) -> tensor<2xf64>\n'
                "  return %y : tensor<2xf64>\n}\n"
            )
            assert module.operation.verify()


X = "tensor<2x4xf64>"
V = "tensor<4xf64>"


def _layer_norm(epsilon: str) -> str:
    return f'"hexir.layer_norm"(%x, %v, %v) {{epsilon = {epsilon} : f64}} : ({X}, {V}, {V}) -> {X}'


def _reduce(op: str, keepdims: str, result: str) -> str:
    return f'"hexir.{op}"(%x) {{axes = array<i64>, keepdims = {keepdims}}} : ({X}) -> {result}'


@pytest.mark.parametrize(
    ("op", "error"),
    [
        # layer_norm's epsilon: finite and >= 0, as the runtime takes it (ONNX allows 0).
        (_layer_norm("0.0"), None),
        (_layer_norm("1.0e-05"), None),
        (_layer_norm("-1.0e-09"), "epsilon is -1e-09; expected a finite value >= 0"),
        (_layer_norm("0x7FF0000000000000"), "epsilon is inf; expected a finite value >= 0"),
        # No reduction axes: every axis (ONNX's default, and the format's).
        (_reduce("reduce_sum", "false", "tensor<f64>"), None),
        (_reduce("reduce_mean", "true", "tensor<1x1xf64>"), None),
        (_reduce("reduce_max", "false", X), "result shape 2x4 does not match the expected scalar"),
    ],
)
def test_the_rules_settled_with_the_runtime(op: str, error: str | None) -> None:
    text = f"func.func @main(%x: {X}, %v: {V}) {{\n  %r = {op}\n  return\n}}\n"
    with context():
        if error is None:
            assert ir.Module.parse(text).operation.verify()
            return
        with pytest.raises(ir.MLIRError) as err:
            ir.Module.parse(text)
        name = op.split('"')[1]
        assert err.value.error_diagnostics[0].message == f"'{name}' op {error}"
