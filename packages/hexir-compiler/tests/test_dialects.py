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
    text = """
    func.func @main(%x: tensor<2x3xf64>, %w: tensor<3x4xf64>) -> tensor<2x4xf64> {
      %y = "hexir.call_tir"(%x, %w) {callee = @k} : (tensor<2x3xf64>, tensor<3x4xf64>) -> tensor<2x4xf64>
      return %y : tensor<2x4xf64>
    }
    "hextir.prim_func"() ({
    ^bb0(%a: memref<2x3xf64>, %b: memref<3x4xf64>, %c: memref<2x4xf64>):
      "hextir.return"() : () -> ()
    }) {sym_name = "k", function_type = (memref<2x3xf64>, memref<3x4xf64>, memref<2x4xf64>) -> ()} : () -> ()
    """
    with context():
        module = ir.Module.parse(text)
        call = module.body.operations[0].regions[0].blocks[0].operations[0]
        assert isinstance(call, hexir.CallTirOp)
        assert str(call.first.type) == "tensor<2x3xf64>"
        assert [str(v.type) for v in call.rest] == ["tensor<3x4xf64>"]


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
