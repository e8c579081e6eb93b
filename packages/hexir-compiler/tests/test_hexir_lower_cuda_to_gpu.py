"""hexir-lower-cuda-to-gpu: every op placed on cuda, run thread by thread, matches numpy.

Each program goes through the linalg path to -emit=mlir-gpu with everything on cuda, and
linalg_interp runs each gpu.launch as the GPU would: every (block, thread) of the grid runs
the body once. It fails on two threads storing one element or on an out-of-bounds access,
so a wrong guard or delinearization shows up as an error, not as a lucky number.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import linalg_interp
from hexir_compiler.dialects import context
from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import ir
from hexir_compiler.placement import PLACEABLE
from hexir_compiler.transforms import hexir_lower_cuda_to_gpu, linalg_path
from linalg_programs import CASES, Case, inputs, program, reference, tolerance

ALL_CUDA = {op: "cuda" for op in PLACEABLE if op.startswith("hexir.")}


def to_gpu(text: str) -> ir.Module:
    module = ir.Module.parse(text)
    linalg_path.run(module, "mlir-gpu", placement=ALL_CUDA)
    module.operation.verify()
    return module


def launches(module: ir.Module) -> list[ir.Operation]:
    found = []

    def visit(op):
        if op.name == "gpu.launch":
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def geometry(launch: ir.Operation) -> tuple[int, int]:
    """(blocks, threads per block) of a launch with constant sizes on x, 1 on y and z."""
    sizes = [ir.IntegerAttr(v.owner.attributes["value"]).value for v in launch.operands[:6]]
    assert sizes[1:3] == [1, 1] and sizes[4:6] == [1, 1]
    return sizes[0], sizes[3]


@pytest.mark.parametrize("elem", ["f32", "f64"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_op_on_cuda_computes_numpy_result(case: Case, elem: str) -> None:
    with context():
        module = to_gpu(program(case, elem))
        kernels = launches(module)
        assert case.op == "reshape" or kernels, "a compute op on cuda launches a kernel"
        assert all(ir.StringAttr(k.attributes["device"]).value == "cuda" for k in kernels)
        xs = inputs(case, elem)
        (got,), _ = linalg_interp.run(module, xs)
    np.testing.assert_allclose(got, reference(case, xs), **tolerance(elem))


@pytest.mark.parametrize(("shape", "blocks", "threads"), [
    ((2, 2), 1, 32),        # 4 elements: one warp, 28 threads idle behind the guard
    ((5, 7), 1, 64),        # 35: rounded up to whole warps
    ((16, 16), 1, 256),
    ((20, 30), 3, 256),     # 600: two full blocks and a partial one
    ((3, 37, 11), 5, 256),  # 1221: a prime extent in the middle
])
def test_launch_geometry_covers_every_element_once(shape, blocks, threads) -> None:
    t = f"tensor<{'x'.join(map(str, shape))}xf32>"
    text = (f"func.func @main(%x: {t}) -> {t} {{\n"
            f'  %r = "hexir.sigmoid"(%x) : ({t}) -> {t}\n  return %r : {t}\n}}\n')
    with context():
        module = to_gpu(text)
        (launch,) = launches(module)
        assert geometry(launch) == (blocks, threads)
        assert blocks * threads >= math.prod(shape) > (blocks - 1) * threads
        x = np.random.default_rng(1).normal(size=shape).astype(np.float32)
        (got,), _ = linalg_interp.run(module, [x])
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-x)), rtol=1e-6)


def test_interpreter_catches_a_missing_guard() -> None:
    """The evidence above is only as good as the interpreter: drop the guard, it must fail."""
    text = """func.func @main(%x: tensor<3x5xf32>) -> tensor<3x5xf32> {
      %r = "hexir.relu"(%x) : (tensor<3x5xf32>) -> tensor<3x5xf32>
      return %r : tensor<3x5xf32>
    }"""
    with context():
        module = to_gpu(text)
        (launch,) = launches(module)
        guard = next(op for op in launch.regions[0].blocks[0].operations if op.name == "scf.if")
        condition = guard.operands[0].owner
        with ir.InsertionPoint(condition), condition.location:
            from hexir_compiler.mlir import arith

            always = arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result
        guard.operands[0] = always
        with pytest.raises(linalg_interp.InterpError, match="out of bounds"):
            linalg_interp.run(module, [np.zeros((3, 5), np.float32)])


def test_cpu_ops_and_prints_stay_on_the_host() -> None:
    text = """func.func @main(%x: tensor<4xf64>) {
      %e = "hexir.exp"(%x) : (tensor<4xf64>) -> tensor<4xf64>
      %r = "hexir.relu"(%e) : (tensor<4xf64>) -> tensor<4xf64>
      "hexir.print"(%r) : (tensor<4xf64>) -> ()
      return
    }"""
    with context():
        module = ir.Module.parse(text)
        linalg_path.run(module, "mlir-gpu", placement={"hexir.exp": "cuda"})
        (launch,) = launches(module)
        kernel, text = str(launch), str(module)
        _, printed = linalg_interp.run(module, [np.array([-1.0, 0.0, 1.0, 2.0])])
    assert "math.exp" in kernel
    assert 'linalg.generic' in text and 'attrs =  {device = "cpu"}' in text
    assert text.count('memref.copy') == 2  # the input in, the exponentials back
    np.testing.assert_allclose(printed[0], np.exp([-1.0, 0.0, 1.0, 2.0]))


def test_tensor_form_is_refused() -> None:
    text = """func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
      %e = tensor.empty() : tensor<4xf32>
      %r = linalg.copy {device = "cuda"} ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
      return %r : tensor<4xf32>
    }"""
    with context():
        module = ir.Module.parse(text)
        with pytest.raises(CompileError, match="still returns a tensor"):
            hexir_lower_cuda_to_gpu.run(module)
