"""Kernels with one output element per iteration and no reduction.

Unary math, numpy-broadcast binary arithmetic, gelu, and the data movers (transpose,
reshape). `UNARY` and `BINARY` are the whole definition of a plain element-wise op: an entry
(mnemonic -> the scalar formula) is the dialect's op `hexir.<mnemonic>` (`dialects/hexir.py`
makes it), its placement, its kernel on both devices and its `.hxb` kind (its own, or `map`). Each is a map over the output's index space (`schedule.parallel`), with numpy's
meaning of each formula.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable

from hexir_format import KernelKind, signatures

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import arith, ir, math
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.kernel import GraphOp, Kernel, broadcast_indices
from hexir_compiler.transforms.tir.schedule import parallel

Scalar = Callable[..., ir.Value]


def _relu(b: KernelBuilder, x: ir.Value) -> ir.Value:
    # max(x, 0) with NaN propagated, as numpy's maximum and ONNX's Relu give.
    return arith.maximumf(x, b.float(0.0))


def _sigmoid(b: KernelBuilder, x: ir.Value) -> ir.Value:
    # e = exp(-|x|); x >= 0 ? 1 / (1 + e) : e / (1 + e) -- exp never overflows, and tiny
    # results for very negative x stay nonzero, as in the reference.
    zero, one = b.float(0.0), b.float(1.0)
    e = math.exp(arith.negf(math.absf(x)))
    denominator = arith.addf(one, e)
    positive = arith.cmpf(arith.CmpFPredicate.OGE, x, zero)
    return arith.select(positive, arith.divf(one, denominator), arith.divf(e, denominator))


def _gelu_erf(b: KernelBuilder, x: ir.Value) -> ir.Value:
    # x * 0.5 * (1 + erf(x / sqrt(2)))
    erf = math.erf(arith.divf(x, b.float(pymath.sqrt(2.0))))
    return arith.mulf(arith.mulf(x, b.float(0.5)), arith.addf(b.float(1.0), erf))


def _gelu_tanh(b: KernelBuilder, x: ir.Value) -> ir.Value:
    # 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
    cube = arith.mulf(arith.mulf(x, x), x)
    inner = arith.addf(x, arith.mulf(b.float(0.044715), cube))
    t = math.tanh(arith.mulf(b.float(pymath.sqrt(2.0 / pymath.pi)), inner))
    return arith.mulf(arith.mulf(b.float(0.5), x), arith.addf(b.float(1.0), t))


UNARY: dict[str, Scalar] = {
    "relu": _relu,
    "sigmoid": _sigmoid,
    "tanh": lambda b, x: math.tanh(x),
    "exp": lambda b, x: math.exp(x),
    "sqrt": lambda b, x: math.sqrt(x),
    "neg": lambda b, x: arith.negf(x),
    "abs": lambda b, x: math.absf(x),
}

BINARY: dict[str, Scalar] = {
    "add": lambda b, x, y: arith.addf(x, y),
    "sub": lambda b, x, y: arith.subf(x, y),
    "mul": lambda b, x, y: arith.mulf(x, y),
    "div": lambda b, x, y: arith.divf(x, y),
}

GELU_APPROXIMATIONS = {"none": 0, "tanh": 1}


def plan_unary(op: GraphOp) -> Kernel:
    op.expect_output(op.inputs[0])
    return Kernel(_kind(op.mnemonic), lambda b: _map(b, op, UNARY[op.mnemonic]))


def plan_binary(op: GraphOp) -> Kernel:
    op.expect_output(signatures.broadcast(*op.inputs))
    return Kernel(_kind(op.mnemonic), lambda b: _map(b, op, BINARY[op.mnemonic]))


def _kind(mnemonic: str) -> str:
    """The format's kernel kind: the op's own where the format names it, else `map` (any
    element-wise op: the runtime needs its code, not its name)."""
    return mnemonic if mnemonic.upper() in KernelKind.__members__ else str(KernelKind.MAP)


def plan_gelu(op: GraphOp) -> Kernel:
    op.expect_output(op.inputs[0])
    approximate = op.string_attr("approximate", "none")
    if approximate not in GELU_APPROXIMATIONS:
        raise CompileError(
            f'hexir.gelu: approximate must be "none" or "tanh", found "{approximate}"'
        )
    scalar = _gelu_tanh if approximate == "tanh" else _gelu_erf
    return Kernel("gelu", lambda b: _map(b, op, scalar), (GELU_APPROXIMATIONS[approximate],))


def plan_transpose(op: GraphOp) -> Kernel:
    (shape,) = op.inputs
    perm = op.ints_attr("permutation")
    op.expect_output(signatures.transpose(shape, perm))

    def emit(b: KernelBuilder) -> None:
        x, out = b.args
        with b.building(), parallel(b, op.output) as coords:
            source = [coords[perm.index(axis)] for axis in range(len(shape))]
            b.store(b.load(x, source), out, coords)

    return Kernel("transpose", emit, tuple(perm))


def plan_reshape(op: GraphOp) -> Kernel:
    (shape,) = op.inputs
    signatures.reshape(shape, op.output)

    def emit(b: KernelBuilder) -> None:
        x, out = b.args
        with b.building(), parallel(b, op.output) as coords:
            source = b.delinearize(b.linearize(coords, op.output), shape)
            b.store(b.load(x, source), out, coords)

    return Kernel("reshape", emit)


def _map(b: KernelBuilder, op: GraphOp, scalar: Scalar) -> None:
    *inputs, out = b.args
    with b.building(), parallel(b, op.output) as coords:
        values = [
            b.load(buffer, broadcast_indices(b, coords, shape, op.output))
            for buffer, shape in zip(inputs, op.inputs, strict=True)
        ]
        b.store(scalar(b, *values), out, coords)
