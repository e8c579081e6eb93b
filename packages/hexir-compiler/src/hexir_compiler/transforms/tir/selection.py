"""Kernels that pick positions by comparing elements: arg_max, arg_min, top_k.

All three rank the elements of a row (the positions along `axis`) in one strict total order
(`Order`): by value, then by position, so ties are decided and every pass has one answer.
NaN is a value too: arg_max and arg_min take it as the extreme (numpy's argmax and argmin
return the first NaN), top_k as greater than every number (numpy's sort order: first when
`largest`, last otherwise). ONNX Runtime's ArgMax instead skips a NaN unless it is the
row's first element; numpy's is the ONNX reference implementation's meaning.

- arg_max / arg_min: the first row element in the order, its i64 position stored.
- top_k: k passes over the row; pass j finds the first element in the order among those that
  come after the one pass j - 1 found, so the k positions come out best first (`sorted`),
  each in O(row) work and no state but the previous pick. The values are a gather of these
  (the importer adds `gather_elements`).

Schedules (`schedule`): a row shorter than ROW_MIN, and every cpu row, is one iteration's
serial loop (cpu loops, one cuda thread per row); a longer cuda row is a block, its threads
striding the row, their candidates merged in a shared-memory tree (the order's minimum is
associative, so the tree finds what the serial loop does); top_k's passes are a serial loop
around that, with a barrier after each so the next pass's tree cannot overwrite the result
a thread is still reading. No format kind (`generic`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from hexir_format import signatures

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import arith, ir
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.kernel import GraphOp, Kernel
from hexir_compiler.transforms.tir.movement import GENERIC
from hexir_compiler.transforms.tir.schedule import Row, by_rows, parallel, rows


@dataclass(frozen=True)
class Order:
    """Which of two row elements comes first: the greater (`greater`) or the lesser value,
    NaN before every number (`nan_first`) or after it, equal values by position (the later
    first with `last`)."""

    greater: bool
    nan_first: bool
    last: bool = False

    def precedes(self, b: KernelBuilder, p: tuple[ir.Value, ir.Value],
                  q: tuple[ir.Value, ir.Value]) -> ir.Value:
        """Whether element p = (value, i64 position) comes before q."""
        (a, i), (c, j) = p, q
        if isinstance(a.type, ir.FloatType):
            better = arith.cmpf(arith.CmpFPredicate.OGT if self.greater else
                                arith.CmpFPredicate.OLT, a, c)
            nan_a, nan_c = _is_nan(a), _is_nan(c)
            first, second = (nan_a, nan_c) if self.nan_first else (nan_c, nan_a)
            better = arith.ori(better, arith.andi(first, _not(b, second)))
            same = arith.ori(arith.cmpf(arith.CmpFPredicate.OEQ, a, c), arith.andi(nan_a, nan_c))
        else:
            better = arith.cmpi(arith.CmpIPredicate.sgt if self.greater else
                                arith.CmpIPredicate.slt, a, c)
            same = arith.cmpi(arith.CmpIPredicate.eq, a, c)
        earlier = arith.cmpi(arith.CmpIPredicate.sgt if self.last else arith.CmpIPredicate.slt,
                             i, j)
        return arith.ori(better, arith.andi(same, earlier))


def plan_arg(op: GraphOp) -> Kernel:
    (shape,) = op.inputs
    axis = signatures.normalize_axis(op.int_attr("axis"), len(shape))
    keepdims = op.bool_attr("keepdims", True)
    op.expect_output(signatures.reduce(shape, [axis], keepdims))
    extent = shape[axis]
    if extent == 0:
        raise CompileError(f"hexir.{op.mnemonic}: axis {axis} of {signatures.fmt(shape)} is "
                           "empty: it has no extreme")
    order = Order(op.mnemonic == "arg_max", True, op.bool_attr("select_last_index", False))
    space = [e for d, e in enumerate(shape) if d != axis]

    def emit(b: KernelBuilder) -> None:
        x, out = b.args
        with b.building(), _rows(b, space, extent) as (coords, row):
            line = _Line(b, x, coords, axis, extent, order)
            position = line.first(row, lambda k: None)
            with row.first_thread() if row else contextlib.nullcontext():
                b.store(position, out, line.at(b.index(0)) if keepdims else coords)

    return Kernel(GENERIC, emit)


def plan_top_k(op: GraphOp) -> Kernel:
    (shape,) = op.inputs
    k = op.int_attr("k")
    axis = signatures.normalize_axis(op.int_attr("axis"), len(shape))
    op.expect_output(signatures.top_k(shape, k, axis))
    largest = op.bool_attr("largest", True)
    order = Order(largest, largest)
    extent = shape[axis]
    space = [e for d, e in enumerate(shape) if d != axis]

    def emit(b: KernelBuilder) -> None:
        x, out = b.args
        with b.building(), _rows(b, space, extent) as (coords, row):
            line = _Line(b, x, coords, axis, extent, order)

            def rank(j: list[ir.Value], carried: list[ir.Value]) -> list[ir.Value]:
                (previous,) = carried
                start = arith.cmpi(arith.CmpIPredicate.eq, previous, line.none)
                pick = line.first(row, lambda q: arith.ori(start, line.precedes(previous, q)))
                with row.first_thread() if row else contextlib.nullcontext():
                    b.store(pick, out, line.at(j[0]))
                if row:
                    b.barrier()
                return [pick]

            b.fold([k], [line.none], rank)

    return Kernel(GENERIC, emit)


@contextlib.contextmanager
def _rows(b: KernelBuilder, space: list[int], extent: int):
    """(the row's coordinates in `space`, its `Row` or None): a block per row for a long cuda
    row, else one iteration of `parallel`."""
    if by_rows(b, extent):
        with rows(b, space, extent) as row:
            yield row.coords, row
        return
    with parallel(b, space) as coords:
        yield coords, None


class _Line:
    """One row of `x` along `axis` at `coords`, its elements named by i64 positions: loops
    carry positions only (a hextir.for carries values of one type), and read the values."""

    def __init__(self, b: KernelBuilder, x: ir.Value, coords: list[ir.Value], axis: int,
                 extent: int, order: Order) -> None:
        self.b, self.x, self.coords, self.axis, self.order = b, x, coords, axis, order
        self.i64 = ir.IntegerType.get_signless(64)
        self.extent = extent
        self.none = b.constant(extent, self.i64)  # the position of no element

    def at(self, k: ir.Value) -> list[ir.Value]:
        return [*self.coords[:self.axis], k, *self.coords[self.axis:]]

    def value(self, position: ir.Value) -> ir.Value:
        """The element at `position` (`none` reads the last one: its value goes unused)."""
        last = arith.minsi(position, self.b.constant(self.extent - 1, self.i64))
        return self.b.load(self.x, self.at(arith.index_cast(self.b.index_type, last)))

    def precedes(self, p: ir.Value, q: ir.Value) -> ir.Value:
        return self.order.precedes(self.b, (self.value(p), p), (self.value(q), q))

    def first(self, row: Row | None, eligible: Callable[[ir.Value], ir.Value | None]
              ) -> ir.Value:
        """The position of the row's first element in the order among those that
        `eligible(position)` admits (None: all); `none` when it admits none."""
        b, none = self.b, self.none

        def merge(p: list[ir.Value], q: list[ir.Value]) -> list[ir.Value]:
            real = arith.cmpi(arith.CmpIPredicate.ne, q[0], none)
            empty = arith.cmpi(arith.CmpIPredicate.eq, p[0], none)
            # precedes also reads the placeholder `none`; its answer then goes unused
            take = arith.andi(real, arith.ori(empty, self.precedes(q[0], p[0])))
            return [arith.select(take, q[0], p[0])]

        def step(k: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            position = arith.index_cast(self.i64, k)
            admitted = eligible(position)
            if admitted is not None:
                position = arith.select(admitted, position, none)
            return merge(acc, [position])

        if row is None:
            (found,) = b.fold([self.extent], [none], lambda ks, acc: step(ks[0], acc))
        else:
            (found,) = row.reduce(row.fold([none], step), merge)
        return found


def _is_nan(v: ir.Value) -> ir.Value:
    return arith.cmpf(arith.CmpFPredicate.UNE, v, v)


def _not(b: KernelBuilder, condition: ir.Value) -> ir.Value:
    return arith.cmpi(arith.CmpIPredicate.eq, condition, b.constant(0, condition.type))
