"""Kernels that move elements without arithmetic on them: concat, slice, gather.

Each is a map over the output's index space (`schedule.parallel`) that computes where its
element comes from. None has a kernel kind of its own in the format (`generic`: the
runtime needs only the code). Every address is inside its buffer by construction: the shape
rules (`hexir_format.signatures`) bound concat's and slice's, and gather clamps the indices
it reads from its input tensor, since their values are data the compiler never sees.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import arith, ir
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.kernel import GraphOp, Kernel
from hexir_compiler.transforms.tir.schedule import parallel
from hexir_format import dims, signatures
from hexir_format.dims import Dim

GENERIC = "generic"


def plan_concat(op: GraphOp, order: Sequence[int] | None = None) -> Kernel:
    """`op.inputs` joined in turn, the i-th read from kernel input `order[i]` (by default
    the i-th: a fused group of concats names its leaves, `tir.fusion`).

    On the cpu, with axes after the concat axis, a parallel iteration is one row of the
    output up to that axis, and copies its trailing elements from the one input that holds
    them in one flat serial loop: the choice of input is made once per row, and the loop is
    a plain contiguous copy LLVM vectorizes. (One output element an iteration, each
    choosing its input, copied a decode step's KV cache at 4 GB/s: 25 us for 100 KB.)
    Elsewhere -- cuda, or a concat along the last axis -- each output element is one
    iteration."""
    axis = signatures.normalize_axis(op.int_attr("axis"), len(op.output))
    op.expect_output(signatures.concat(op.inputs, axis))
    rows = op.output[:axis + 1]
    trailing = op.output[axis + 1:]

    def copy(b: KernelBuilder, inputs, coords, inner) -> None:
        """out[coords] from the input that holds coords[axis] (`inner`: the loops that
        complete coords to an element)."""
        offset: Dim = 0
        for buffer, shape in zip(inputs, op.inputs, strict=True):
            if shape[axis]:
                at = coords[axis]
                inside = [b.less_than(at, dims.add(offset, shape[axis]))]
                if offset:
                    inside.append(arith.cmpi(arith.CmpIPredicate.uge, at, b.index(offset)))
                with b.guard(b.all_of(inside)):
                    source = list(coords)
                    source[axis] = arith.subi(at, b.index(offset)) if offset else at
                    inner(buffer, source, list(coords))
            offset = dims.add(offset, shape[axis])

    def element(b: KernelBuilder, buffer, source, target) -> None:
        b.store(b.load(buffer, source), b.args[-1], target)

    def emit(b: KernelBuilder) -> None:
        *args, _ = b.args
        inputs = args if order is None else [args[i] for i in order]
        if b.device == "cuda" or not trailing:
            with b.building(), parallel(b, op.output) as coords:
                copy(b, inputs, coords, lambda *where: element(b, *where))
            return

        def rest(buffer, source, target) -> None:
            # the trailing axes as one flat loop, the coordinates folded back into the
            # address (which runs on in memory): a 55 x 55 plane is one loop of 3025 that
            # LLVM vectorizes, not 55 rows each too short for its vector body (SqueezeNet's
            # channel concats: 240 -> 170 us)
            with b.loop(math.prod(trailing) if len(trailing) > 1 else trailing[0],
                        "serial") as i:
                at = b.delinearize(i, trailing) if len(trailing) > 1 else [i]
                element(b, buffer, [*source, *at], [*target, *at])

        with b.building(), parallel(b, rows) as coords:
            copy(b, inputs, coords, rest)

    return Kernel(GENERIC, emit)


def plan_slice(op: GraphOp) -> Kernel:
    check_slice(op)

    def emit(b: KernelBuilder) -> None:
        x, out = b.args
        with b.building(), parallel(b, op.output) as coords:
            b.store(b.load(x, slice_source(b, op, coords)), out, coords)

    return Kernel(GENERIC, emit)


def check_slice(op: GraphOp) -> None:
    (shape,) = op.inputs
    signatures.slice_(shape, op.ints_attr("starts"), op.ints_attr("steps"), op.output)


def slice_source(b: KernelBuilder, op: GraphOp, coords: Sequence[ir.Value]) -> list[ir.Value]:
    """Where a slice's element at `coords` is in its source: start + i * step on each axis."""
    source = []
    for coord, start, step in zip(coords, op.ints_attr("starts"), op.ints_attr("steps"),
                                  strict=True):
        moved = b.mul(coord, abs(step))
        if step < 0:
            source.append(arith.subi(b.index(start), moved))
        else:
            source.append(arith.addi(moved, b.index(start)) if start else moved)
    return source


def plan_gather(op: GraphOp) -> Kernel:
    check_gather(op)

    def emit(b: KernelBuilder) -> None:
        x, where, out = b.args
        with b.building(), parallel(b, op.output) as coords:
            b.store(b.load(x, gather_source(b, op, where, coords)), out, coords)

    return Kernel(GENERIC, emit)


def check_gather(op: GraphOp) -> None:
    data, indices = op.inputs
    axis = signatures.normalize_axis(op.int_attr("axis"), len(data))
    op.expect_output(signatures.gather(data, indices, axis))
    if data[axis] == 0 and 0 not in op.output:
        raise CompileError(f"hexir.gather: axis {axis} of {signatures.fmt(data)} is empty, so "
                           "no index can be taken from it")


def gather_source(b: KernelBuilder, op: GraphOp, where: ir.Value,
                  coords: Sequence[ir.Value]) -> list[ir.Value]:
    """Where a gather's element at `coords` is in its data: the index read from `where` (the
    indices buffer) at the coordinates of the indices' axes, in place of those axes."""
    data, indices = op.inputs
    axis = signatures.normalize_axis(op.int_attr("axis"), len(data))
    picked = list(coords[axis:axis + len(indices)])
    return [*coords[:axis], index_in(b, b.load(where, picked), data[axis]),
            *coords[axis + len(indices):]]


def index_in(b: KernelBuilder, raw: ir.Value, extent: int) -> ir.Value:
    """An i32 or i64 index read from a tensor as a position in an axis of `extent` (> 0): a
    negative one counts from the end, and one still outside is clamped to the nearest end,
    so the address stays inside the buffer whatever the data holds."""
    i64 = ir.IntegerType.get_signless(64)
    if raw.type != i64:
        raw = arith.extsi(i64, raw)
    wrapped = arith.select(arith.cmpi(arith.CmpIPredicate.slt, raw, b.constant(0, i64)),
                           arith.addi(raw, b.constant(extent, i64)), raw)
    clamped = arith.minsi(arith.maxsi(wrapped, b.constant(0, i64)), b.constant(extent - 1, i64))
    return arith.index_cast(b.index_type, clamped)
