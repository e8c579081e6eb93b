"""hexir-lower-to-linalg: every graph op, run as linalg on tensors, computes numpy's answer.

The lowered module is evaluated by linalg_interp (there is no JIT) on random inputs, in f32
and f64; the structural side (which ops, which maps) is in tests/lit/hexir-lower-to-linalg.mlir.
"""

from __future__ import annotations

import numpy as np
import pytest

import linalg_interp
from hexir_compiler.dialects import context
from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import ir
from hexir_compiler.transforms import hexir_lower_to_linalg, hexir_partition
from linalg_programs import CASES, Case, inputs, program, reference, tolerance


def lower(text: str) -> ir.Module:
    module = ir.Module.parse(text)
    hexir_lower_to_linalg.run(module)
    module.operation.verify()
    return module


@pytest.mark.parametrize("elem", ["f32", "f64"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_op_computes_numpy_result(case: Case, elem: str) -> None:
    with context():
        module = lower(program(case, elem))
        assert not any(op.name.startswith("hexir.") for op in _ops(module))
        xs = inputs(case, elem)
        (got,), _ = linalg_interp.run(module, xs)
    want = reference(case, xs)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, **tolerance(elem))


def test_two_by_two_program_prints_the_product_after_relu() -> None:
    text = """
    func.func @main() {
      %a = "hexir.constant"() {value = dense<[[3.0, -1.0], [2.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
      %w = "hexir.constant"() {value = dense<[[1.0, 5.0], [5.0, -2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
      %m = "hexir.linear"(%a, %w) : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
      %r = "hexir.relu"(%m) : (tensor<2x2xf64>) -> tensor<2x2xf64>
      "hexir.print"(%r) : (tensor<2x2xf64>) -> ()
      return
    }"""
    with context():
        _, printed = linalg_interp.run(lower(text), [])
    np.testing.assert_array_equal(printed[0], [[0.0, 17.0], [12.0, 6.0]])


def test_every_created_tensor_op_carries_the_device_of_its_graph_op() -> None:
    text = """
    func.func @main(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> tensor<4x8xf32> {
      %s = "hexir.softmax"(%x) {axis = -1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
      %n = "hexir.layer_norm"(%s, %g, %g) {epsilon = 1.0e-05 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
      return %n : tensor<4x8xf32>
    }"""
    with context():
        module = ir.Module.parse(text)
        hexir_partition.run(module, {"hexir.softmax": "cuda", "hexir.layer_norm": "cpu"})
        hexir_lower_to_linalg.run(module)
        body = module.body.operations[0].regions[0].blocks[0].operations
        tensors = [op for op in body
                   if any(isinstance(r.type, ir.RankedTensorType) for r in op.results)]
        devices = [ir.StringAttr(op.attributes["device"]).value for op in tensors]
        scalars = [op for op in body if op.name == "arith.constant" and op not in tensors]
        assert scalars and all("device" not in op.attributes for op in scalars)
    # softmax: max, exp, sum, divide (plus their empties, fills and zeros), then layer_norm.
    assert devices.count("cuda") > 4 and devices.count("cpu") > 4
    assert devices == sorted(devices, key=lambda d: d != "cuda"), "all cuda ops come first"


def test_call_tir_is_refused_with_its_location(tmp_path) -> None:
    path = tmp_path / "k.mlir"
    path.write_text(
        'func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n'
        '  %y = "hexir.call_tir"(%x) {callee = @k} : (tensor<2xf32>) -> tensor<2xf32>\n'
        "  return %y : tensor<2xf32>\n}\n"
        '"hextir.prim_func"() ({\n^bb0(%a: memref<2xf32>, %b: memref<2xf32>):\n'
        '  "hextir.return"() : () -> ()\n}) {sym_name = "k", device = "cpu", '
        'function_type = (memref<2xf32>, memref<2xf32>) -> (), hexir.kernel = "relu", '
        "hexir.params = array<f64>} : () -> ()\n"
    )
    with context():
        module = ir.Module.parseFile(str(path))
        with pytest.raises(CompileError, match="cannot lower 'hexir.call_tir'") as err:
            hexir_lower_to_linalg.run(module)
    assert f'"{path}":2:' in str(err.value.location)


def _ops(module: ir.Module) -> list[ir.Operation]:
    found = []
    module.operation.walk(lambda op: found.append(op) or ir.WalkResult.ADVANCE)
    return found
