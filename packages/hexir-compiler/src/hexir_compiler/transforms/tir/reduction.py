"""Kernels that reduce along axes: softmax, layer_norm, reduce_sum/mean/max/min.

One iteration of the parallel space (`schedule.parallel`: cpu loops or one cuda thread) owns
one output row or element and walks the reduced axes with serial loops that carry their
accumulators as loop results, so no two iterations touch the same output and no atomics or
shared memory are needed. Softmax subtracts the row maximum before exponentiating (as the
numpy reference does); layer_norm uses the biased variance over the last dimension. A
reduction over no elements gives its identity (0 for a sum, -inf / the least integer / false
for a max, the opposite for a min), as ONNX defines it, and a mean of nothing is NaN (0 / 0).
"""

from __future__ import annotations

import math as pymath

from hexir_format import signatures

from hexir_compiler.mlir import arith, ir, math
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.kernel import GraphOp, Kernel
from hexir_compiler.transforms.tir.schedule import parallel

NEG_INF = float("-inf")


def plan_softmax(op: GraphOp) -> Kernel:
    (shape,) = op.inputs
    op.expect_output(shape)
    axis = signatures.normalize_axis(op.int_attr("axis"), len(shape))
    rows = [e for d, e in enumerate(shape) if d != axis]

    def emit(b: KernelBuilder) -> None:
        x, out = b.args
        with b.building(), parallel(b, rows) as coords:

            def at(k: ir.Value) -> list[ir.Value]:
                return [*coords[:axis], k, *coords[axis:]]

            def shifted_exp(k: ir.Value, peak: ir.Value) -> ir.Value:
                return math.exp(arith.subf(b.load(x, at(k)), peak))

            (peak,) = b.fold(
                [shape[axis]],
                [b.float(NEG_INF)],
                lambda k, c: [arith.maximumf(c[0], b.load(x, at(k[0])))],
            )
            (total,) = b.fold(
                [shape[axis]],
                [b.float(0.0)],
                lambda k, c: [arith.addf(c[0], shifted_exp(k[0], peak))],
            )
            with b.loop(shape[axis], "serial") as k:
                b.store(arith.divf(shifted_exp(k, peak), total), out, at(k))

    return Kernel("softmax", emit, (axis,))


def plan_layer_norm(op: GraphOp) -> Kernel:
    shape, gamma, beta = op.inputs
    epsilon = op.float_attr("epsilon")
    op.expect_output(signatures.layer_norm(shape, gamma, beta, epsilon))
    depth = shape[-1]

    def emit(b: KernelBuilder) -> None:
        x, scale, shift, out = b.args
        count = b.float(float(depth))
        with b.building(), parallel(b, shape[:-1]) as coords:

            def centered(k: ir.Value, mean: ir.Value) -> ir.Value:
                return arith.subf(b.load(x, [*coords, k]), mean)

            (total,) = b.fold(
                [depth],
                [b.float(0.0)],
                lambda k, c: [arith.addf(c[0], b.load(x, [*coords, k[0]]))],
            )
            mean = arith.divf(total, count)
            (squares,) = b.fold(
                [depth],
                [b.float(0.0)],
                lambda k, c: [arith.addf(c[0], _square(centered(k[0], mean)))],
            )
            spread = math.sqrt(arith.addf(arith.divf(squares, count), b.float(epsilon)))
            with b.loop(depth, "serial") as k:
                normal = arith.divf(centered(k, mean), spread)
                value = arith.mulf(normal, b.load(scale, [k]))
                b.store(arith.addf(value, b.load(shift, [k])), out, [*coords, k])

    return Kernel("layer_norm", emit, (epsilon,))


def plan_reduce(op: GraphOp) -> Kernel:
    (shape,) = op.inputs
    keepdims = op.bool_attr("keepdims", False)
    op.expect_output(signatures.reduce(shape, op.ints_attr("axes"), keepdims))
    axes = list(signatures.reduce_axes(op.ints_attr("axes"), len(shape)))
    kept = [d for d in range(len(shape)) if d not in axes]
    reduced = [shape[d] for d in axes]
    element = op.elements[0]

    def emit(b: KernelBuilder) -> None:
        x, out = b.args
        combine, start = _monoid(op.mnemonic, element)
        with b.building(), parallel(b, [shape[d] for d in kept]) as coords:
            outer = dict(zip(kept, coords, strict=True))

            def step(ivs: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
                inner = dict(zip(axes, ivs, strict=True))
                at = [outer[d] if d in outer else inner[d] for d in range(len(shape))]
                return [combine(acc[0], b.load(x, at))]

            (value,) = b.fold(reduced, [b.constant(start, b.element)], step)
            if op.mnemonic == "reduce_mean":
                value = arith.divf(value, b.float(float(pymath.prod(reduced))))
            at = [outer[d] if d in outer else b.index(0) for d in range(len(shape))]
            b.store(value, out, at if keepdims else coords)

    kind = "generic" if op.mnemonic == "reduce_min" else op.mnemonic  # min has no kind
    return Kernel(kind, emit, () if kind == "generic" else (float(keepdims), *axes))


def _monoid(mnemonic: str, element: str):
    """(combine, identity) of a reduction over `element`s."""
    if element == "i1":  # any / all
        return {"reduce_max": (arith.ori, 0), "reduce_min": (arith.andi, 1)}[mnemonic]
    if element in ("i32", "i64"):
        bits = int(element[1:])
        least, most = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        return {"reduce_sum": (arith.addi, 0), "reduce_max": (arith.maxsi, least),
                "reduce_min": (arith.minsi, most)}[mnemonic]
    return {"reduce_sum": (arith.addf, 0.0), "reduce_mean": (arith.addf, 0.0),
            "reduce_max": (arith.maximumf, NEG_INF),
            "reduce_min": (arith.minimumf, float("inf"))}[mnemonic]


def _square(v: ir.Value) -> ir.Value:
    return arith.mulf(v, v)
