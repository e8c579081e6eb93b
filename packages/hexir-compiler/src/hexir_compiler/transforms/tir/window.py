"""Kernels that slide a window over spatial dimensions: conv and pool (max, average).

A cpu conv is register-tiled (`convolution`: its schedules and weight packing). Elsewhere (pools; a
conv on cuda) one iteration of the parallel space owns one output element [n, m, o...] and walks its
window with serial loops carrying the accumulator (for conv, the input channels of its group too).
Input position p = o * stride - pad_begin + k * dilation; a position in the padding is never read:
its load goes to a clamped address inside the input and the step keeps the accumulator as it was, so
padding adds 0 to a conv and nothing to a pool. When no pads are given, every position is inside by
the shape rule, and the kernel has no masks at all. A cpu pool computes a row of outputs in
vectors instead, the padding's lanes -inf or 0 (`plan_pool`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from hexir_compiler.mlir import arith, ir, vector
from hexir_compiler.transforms.tir import convolution
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.kernel import Epilogue, GraphOp, Kernel
from hexir_compiler.transforms.tir.schedule import parallel, register_lanes
from hexir_format import signatures
from hexir_format.dims import Dim

GENERIC = "generic"


def _geometry(op: GraphOp) -> tuple[list[int], list[int], list[int]]:
    return op.ints_attr("strides"), op.ints_attr("pads"), op.ints_attr("dilations")


def _positions(b: KernelBuilder, outs: Sequence[ir.Value], ks: Sequence[ir.Value],
               spatial: Sequence[int], strides: Sequence[int], pads: Sequence[int],
               dilations: Sequence[int], padded: bool, inside_along: int | None = None):
    """(clamped input positions, inside-the-input condition or None, inside-the-padded-extent
    condition or None) for window offsets `ks` of output positions `outs`; along axis
    `inside_along`, if given, the caller knows every position is inside the input."""
    rank = len(spatial)
    clamped, inside, extent = [], [], []
    for d in range(rank):
        base = arith.addi(b.mul(outs[d], strides[d]), b.mul(ks[d], dilations[d]))
        if not padded:
            clamped.append(base)
            continue
        if d == inside_along:
            clamped.append(arith.subi(base, b.index(pads[d])) if pads[d] else base)
            continue
        pos = arith.subi(base, b.index(pads[d]))  # may be negative: compared signed
        low = arith.cmpi(arith.CmpIPredicate.sge, pos, b.index(0))
        high = arith.cmpi(arith.CmpIPredicate.slt, pos, b.index(spatial[d]))
        inside.append(arith.andi(low, high))
        extent.append(arith.cmpi(arith.CmpIPredicate.slt, pos,
                                 b.index(spatial[d] + pads[rank + d])))
        low_clamp = arith.maxsi(pos, b.index(0))
        clamped.append(arith.minsi(low_clamp, b.index(spatial[d] - 1)))
    return clamped, b.all_of(inside), b.all_of(extent)


def plan_conv(op: GraphOp, epilogue: Epilogue | None = None) -> Kernel:
    """The conv kernel of `op`, applying `epilogue` to each output before it is stored (the
    kernel's arguments are then data, weight, the epilogue's inputs, the destination)."""
    x, w = op.inputs[:2]
    strides, pads, dilations = _geometry(op)
    group = op.int_attr("group")
    op.expect_output(signatures.conv(x, w, group, strides, pads, dilations))
    per_group_in, per_group_out = w[1], w[0] // group
    spatial, kernel = x[2:], w[2:]
    padded = any(pads)

    def emit(b: KernelBuilder) -> None:
        data, weight, *_, out = b.args
        if b.device == "cpu":
            with b.building():
                convolution.emit_cpu(b, op, epilogue)
            return
        with b.building(), parallel(b, op.output) as coords:
            n, m, outs = coords[0], coords[1], coords[2:]
            first_channel = b.mul(arith.divui(m, b.index(per_group_out)), per_group_in) \
                if group > 1 else None

            def step(ivs: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
                c, ks = ivs[0], ivs[1:]
                at, inside, _ = _positions(b, outs, ks, spatial, strides, pads, dilations, padded)
                channel = c if first_channel is None else arith.addi(first_channel, c)
                term = arith.mulf(b.load(data, [n, channel, *at]), b.load(weight, [m, c, *ks]))
                total = arith.addf(acc[0], term)
                return [total if inside is None else arith.select(inside, total, acc[0])]

            (value,) = b.fold([per_group_in, *kernel], [b.float(0.0)], step)
            b.store(value if epilogue is None else epilogue(b, value, coords), out, coords)

    return Kernel(GENERIC, emit)


#: The most window offsets a vectorized max pool unrolls (beyond: one output at a time).
MAX_UNROLLED_WINDOW = 64


def _interior(outputs: Dim, size: Dim, stride: int, pad: int, dilation: int,
              kernel: int) -> tuple[int, int] | None:
    """The outputs [lo, hi) along an axis whose windows lie inside the input along it (no
    padding read), or None where the sizes are symbolic."""
    if not isinstance(outputs, int) or not isinstance(size, int):
        return None
    lo = min(outputs, -(-pad // stride))
    return lo, max(lo, min(outputs, (size - 1 - (kernel - 1) * dilation + pad) // stride + 1))


def _drop_last(pads: Sequence[int]) -> list[int]:
    """ONNX pads [begin..., end...] without the last axis's."""
    rank = len(pads) // 2
    return [*pads[:rank - 1], *pads[rank:2 * rank - 1]]


def plan_pool(op: GraphOp) -> Kernel:
    (x,) = op.inputs
    strides, pads, dilations = _geometry(op)
    kernel = op.ints_attr("kernel")
    kind = op.string_attr("kind", "")
    include_pad = op.bool_attr("count_include_pad", False)
    op.expect_output((*x[:2], *signatures.window(x[2:], kernel, strides, pads, dilations,
                                                 op.bool_attr("ceil_mode", False))))
    spatial = x[2:]
    # ceil_mode's last window may run past the end padding: masks then guard even with no pads.
    padded = any(pads) or any((o - 1) * s + (k - 1) * d >= e for o, s, k, d, e in
                              zip(op.output[2:], strides, kernel, dilations, spatial, strict=False))

    def value(b: KernelBuilder, coords: list[ir.Value], inside_along: int | None = None):
        """The pool of the window of output `coords` (`_positions`' `inside_along`)."""
        data = b.args[0]
        n, c, outs = coords[0], coords[1], coords[2:]

        def step(ks: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
            at, inside, extent = _positions(b, outs, ks, spatial, strides, pads, dilations,
                                            padded, inside_along)
            value = b.load(data, [n, c, *at])
            if kind == "max":
                best = arith.maximumf(acc[0], value)
                return [best if inside is None else arith.select(inside, best, acc[0])]
            total, count = arith.addf(acc[0], value), arith.addf(acc[1], b.float(1.0))
            counted = (extent if include_pad else inside)
            if inside is not None:
                total = arith.select(inside, total, acc[0])
            if counted is not None:
                count = arith.select(counted, count, acc[1])
            return [total, count]

        if kind == "max":
            (result,) = b.fold(kernel, [b.float(float("-inf"))], step)
            return result
        total, count = b.fold(kernel, [b.float(0.0), b.float(0.0)], step)
        return arith.divf(total, count)

    def block(b: KernelBuilder, coords: list[ir.Value], first: int | ir.Value, count: int):
        """The pools of `count` outputs along the last axis from `first` (a number: an edge
        block, its windows may reach into the padding or past the row's end; a value: an
        interior block, all inside along that axis). The windows' rows (their offsets along
        the other axes) are read as one run each -- every element of the row any of the
        windows needs, contiguous -- and combined first (max or sum), a row in the padding
        left out (a condition of the row); then each offset along the last axis is a shuffle
        of the run's lanes, stride apart, a position outside the row a lane of the fill
        (-inf, or 0) instead. An average divides by how many of its window's positions count
        (those in the input, or in the padded extent with count_include_pad): the rows' count
        times each lane's along the row, known at compile time. No output is computed alone
        and nothing is masked along the row (SqueezeNet's 3x3/2 max pool: 9 loads, 6 row
        maxima and 3 shuffles a vector of outputs, where per-offset strided loads took 18
        loads and 9 shuffles)."""
        data, last = b.args[0], len(spatial) - 1
        step, dilation, begin = strides[last], dilations[last], pads[last]
        at = [[(j * step + k * dilation) for j in range(count)] for k in range(kernel[last])]
        if isinstance(first, int):  # positions in the row, clipped to it
            at = [[first * step - begin + p for p in row] for row in at]
            low = max(0, min(p for row in at for p in row))
            high = min(spatial[last], max(p for row in at for p in row) + 1)
            start = b.index(low)
        else:  # positions from the window of `first`'s start
            low, high = 0, max(p for row in at for p in row) + 1
            start = arith.subi(b.mul(first, step), b.index(begin)) if begin \
                else b.mul(first, step)
        span = high - low
        fill = b.splat(b.float(float("-inf") if kind == "max" else 0.0), span)
        combine = arith.maximumf if kind == "max" else arith.addf
        n, c, outs = coords[0], coords[1], coords[2:]
        rows, counted = None, None
        for offsets in itertools.product(*(range(k) for k in kernel[:-1])):
            row, inside, extent = _positions(b, outs, [b.index(k) for k in offsets],
                                             spatial[:-1], strides[:-1], _drop_last(pads),
                                             dilations[:-1], padded)
            run = b.load_vector(data, [n, c, *row, start], span)
            if inside is not None:
                run = arith.select(inside, run, fill)
            rows = run if rows is None else combine(rows, run)
            if kind != "max":
                counts = extent if include_pad else inside
                one = b.float(1.0) if counts is None else \
                    arith.select(counts, b.float(1.0), b.float(0.0))
                counted = one if counted is None else arith.addf(counted, one)
        result = None
        for lanes_at in at:
            picked = vector.shuffle(rows, fill, [p - low if low <= p < high else span
                                                 for p in lanes_at])
            result = picked if result is None else combine(result, picked)
        if kind == "max":
            return result
        if isinstance(first, int):
            end = spatial[last] + pads[len(pads) // 2 + last] if include_pad else spatial[last]
            lower = -begin if include_pad else 0
            along = b.vector_of([b.float(float(sum(lower <= row[j] < end for row in at)))
                                 for j in range(count)])
        else:
            along = b.splat(b.float(float(kernel[last])), count)
        if counted is not None:
            along = arith.mulf(along, b.splat(counted, count))
        return arith.divf(result, along)

    def emit(b: KernelBuilder) -> None:
        out = b.args[-1]
        interior = _interior(op.output[-1], spatial[-1], strides[-1], pads[len(spatial) - 1],
                             dilations[-1], kernel[-1])
        lanes = register_lanes(b.host_level, ir.FloatType(b.element).width // 8) \
            if isinstance(b.element, ir.F32Type | ir.F64Type) else 1
        if b.device != "cpu" or interior is None \
                or lanes == 1 or math.prod(kernel) > MAX_UNROLLED_WINDOW:
            with b.building(), parallel(b, op.output) as coords:
                b.store(value(b, coords), out, coords)
            return
        # cpu: a row of outputs along the last axis an iteration, in blocks of `lanes`;
        # those whose windows lie inside the row along it in a loop, the edges' unrolled
        # (`block`). One output at a time, as above, LLVM vectorized only unpadded rows at
        # least a vector wide; padded, the masks kept it from vectorizing at all.
        lo, hi = interior
        first_inside = -(-lo // lanes)
        inside = max(0, (hi - first_inside * lanes) // lanes)
        edges = [j for j in range(0, op.output[-1], lanes)
                 if not first_inside * lanes <= j < (first_inside + inside) * lanes]
        with b.building(), parallel(b, op.output[:-1]) as coords:
            if inside:
                with b.loop(inside, "serial") as j:
                    first = arith.addi(b.index(first_inside * lanes), b.mul(j, lanes)) \
                        if first_inside else b.mul(j, lanes)
                    b.store_vector(block(b, coords, first, lanes), out, [*coords, first])
            for j in edges:
                count = min(lanes, op.output[-1] - j)
                b.store_vector(block(b, coords, j, count), out, [*coords, b.index(j)])

    return Kernel(GENERIC, emit)

