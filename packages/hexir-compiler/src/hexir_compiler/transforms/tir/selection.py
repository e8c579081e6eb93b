"""Kernels that pick positions by comparing elements: arg_max, arg_min, top_k.

All three rank the elements of a row (the positions along `axis`) in one strict total order
(`Order`): by value, then by position, so ties are decided and every pass has one answer.
NaN is a value too: arg_max and arg_min take it as the extreme (numpy's argmax and argmin
return the first NaN), top_k as greater than every number (numpy's sort order: first when
`largest`, last otherwise). ONNX Runtime's ArgMax instead skips a NaN unless it is the
row's first element; numpy's is the ONNX reference implementation's meaning.

Finding the first element in the order is two reductions over the row, each carrying one
value of one type (a hextir.for's carried values share one): the best value (`Order.best`,
e.g. maximumf, which lets NaN win), then the least position holding it (the greatest with
`select_last_index`). Neither step's carried chain waits on a load, so both run at the
speed of the row's reads.

- arg_max / arg_min: that position, stored as i64.
- top_k on one iteration's row: one walk keeping the best k so far in the output row, sorted
  (an insertion where an element beats the last of them: O(row) compares plus O(k) per
  insertion, about k log(row / k) of them on unordered data).
- top_k on a block's row (cuda): k passes; pass j does the two reductions over the elements
  that come after the one pass j - 1 found, so the k positions come out best first, each
  pass O(row) work and no state but the previous pick.
Either way the positions come out best first (`sorted`); the values are a gather of these
(the importer adds `gather_elements`).

Schedules (`schedule`): a row shorter than ROW_MIN, and every cpu row, is one iteration's
serial loops (cpu loops, one cuda thread per row); a longer cuda row is a block, its threads
striding the row, their partial results merged in a shared-memory tree (both reductions are
associative: best of values, least of positions); top_k's passes are a serial loop around
that, with a barrier after each so the next pass's trees cannot overwrite the result a
thread is still reading. No format kind (`generic`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import arith, ir
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.kernel import GraphOp, Kernel
from hexir_compiler.transforms.tir.movement import GENERIC
from hexir_compiler.transforms.tir.schedule import Row, by_rows, parallel, rows
from hexir_format import signatures


@dataclass(frozen=True)
class Order:
    """Which of two row elements comes first: the greater (`greater`) or the lesser value,
    NaN before every number (`nan_first`) or after it; equal values by position."""

    greater: bool
    nan_first: bool

    def better(self, b: KernelBuilder, a: ir.Value, c: ir.Value) -> ir.Value:
        """Whether value a comes before value c."""
        if not isinstance(a.type, ir.FloatType):
            return arith.cmpi(arith.CmpIPredicate.sgt if self.greater else
                              arith.CmpIPredicate.slt, a, c)
        ordered = arith.cmpf(arith.CmpFPredicate.OGT if self.greater else
                             arith.CmpFPredicate.OLT, a, c)
        first, second = (a, c) if self.nan_first else (c, a)
        return arith.ori(ordered, arith.andi(_is_nan(first), _not(b, _is_nan(second))))

    @staticmethod
    def same(a: ir.Value, c: ir.Value) -> ir.Value:
        """Whether values a and c tie (NaN ties with NaN)."""
        if not isinstance(a.type, ir.FloatType):
            return arith.cmpi(arith.CmpIPredicate.eq, a, c)
        return arith.ori(arith.cmpf(arith.CmpFPredicate.OEQ, a, c),
                         arith.andi(_is_nan(a), _is_nan(c)))

    def best(self, b: KernelBuilder, a: ir.Value, c: ir.Value) -> ir.Value:
        """The value of a and c that comes first (either, when they tie)."""
        if not isinstance(a.type, ir.FloatType):
            return (arith.maxsi if self.greater else arith.minsi)(a, c)
        if self.nan_first:  # maximumf / minimumf: NaN wins
            return (arith.maximumf if self.greater else arith.minimumf)(a, c)
        return arith.select(self.better(b, c, a), c, a)

    def worst(self, b: KernelBuilder, element: ir.Type) -> ir.Value:
        """A value no element comes after: where nothing is eligible, `best` keeps it."""
        if not isinstance(element, ir.FloatType):
            bits = ir.IntegerType(element).width
            return b.constant(-(2 ** (bits - 1)) if self.greater else 2 ** (bits - 1) - 1,
                              element)
        if not self.nan_first:
            return b.constant(float("nan"), element)
        return b.constant(float("-inf") if self.greater else float("inf"), element)


def plan_arg(op: GraphOp) -> Kernel:
    (shape,) = op.inputs
    axis = signatures.normalize_axis(op.int_attr("axis"), len(shape))
    keepdims = op.bool_attr("keepdims", True)
    op.expect_output(signatures.reduce(shape, [axis], keepdims))
    extent = shape[axis]
    if extent == 0:
        raise CompileError(f"hexir.{op.mnemonic}: axis {axis} of {signatures.fmt(shape)} is "
                           "empty: it has no extreme")
    order = Order(op.mnemonic == "arg_max", True)
    last = op.bool_attr("select_last_index", False)
    space = [e for d, e in enumerate(shape) if d != axis]

    def emit(b: KernelBuilder) -> None:
        x, out = b.args
        with b.building(), _rows(b, space, extent) as (coords, row):
            line = _Line(b, x, coords, axis, extent, row)
            best = line.best(order, lambda k, value: None)
            position = line.position(last, lambda k, value: order.same(value, best))
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
            line = _Line(b, x, coords, axis, extent, row)
            if k and row is None:
                _insert_each(b, line, order, k, out)
            elif k and row is not None:
                _passes(b, line, row, order, k, out)

    return Kernel(GENERIC, emit)


def _insert_each(b: KernelBuilder, line: _Line, order: Order, k: int, out: ir.Value) -> None:
    """One walk over a row (one iteration's): the output row holds the positions of the best
    elements so far, best first; an element better than the last of them is put in its
    place and moved ahead past every one it is better than. It comes after all of them in
    position, so strictly better decides, ties keep position order, and since the list is
    sorted, `better` holds for a suffix of it: fixed loops with guards, no early exit."""
    i64 = line.i64

    def held(slot: ir.Value) -> ir.Value:
        return b.load(out, line.at(slot))

    with b.loop(k, "serial") as j:  # valid positions from the start: every read is inside
        b.store(arith.index_cast(i64, j), out, line.at(j))
    with b.loop(line.extent, "serial") as q:
        value, position = b.load(line.x, line.at(q)), arith.index_cast(i64, q)
        slot = arith.minui(q, b.index(k - 1))  # the first k fill the list, the rest compete
        accept = arith.ori(b.less_than(q, k), order.better(b, value, line.value(
            held(b.index(k - 1)))))
        with b.guard(accept):
            b.store(position, out, line.at(slot))
            with b.loop(k - 1, "serial") as t:
                i = arith.subi(b.index(k - 1), t)  # k - 1 down to 1
                ahead_slot = arith.subi(i, b.index(1))
                with b.guard(arith.cmpi(arith.CmpIPredicate.ule, i, slot)):
                    ahead = held(ahead_slot)
                    with b.guard(order.better(b, value, line.value(ahead))):
                        b.store(ahead, out, line.at(i))
                        b.store(position, out, line.at(ahead_slot))


def _passes(b: KernelBuilder, line: _Line, row: Row, order: Order, k: int,
            out: ir.Value) -> None:
    """k passes over a block's row (`line.row`), each its two tree reductions over the
    elements after the previous pick."""

    def rank(j: list[ir.Value], carried: list[ir.Value]) -> list[ir.Value]:
        (previous,) = carried  # its position; `line.none` before the first pass
        start = arith.cmpi(arith.CmpIPredicate.eq, previous, line.none)
        last_value = line.value(previous)

        def after(position: ir.Value, value: ir.Value) -> ir.Value:
            """Whether the element (position, value) comes after the previous pick."""
            later = arith.andi(order.same(last_value, value),
                               arith.cmpi(arith.CmpIPredicate.slt, previous, position))
            return arith.ori(start, arith.ori(order.better(b, last_value, value), later))

        best = line.best(order, after)
        pick = line.position(False, lambda position, value: arith.andi(
            after(position, value), order.same(value, best)))
        with row.first_thread():
            b.store(pick, out, line.at(j[0]))
        b.barrier()
        return [pick]

    b.fold([k], [line.none], rank)


@contextlib.contextmanager
def _rows(b: KernelBuilder, space: list[int], extent: int):
    """(the row's coordinates in `space`, its `Row` or None): a block per row for a long cuda
    row, else one iteration of `parallel`."""
    if by_rows(b, extent, space):
        with rows(b, space, extent) as row:
            yield row.coords, row
        return
    with parallel(b, space) as coords:
        yield coords, None


#: (i64 position, value) -> i1: whether an element takes part (None: every one does)
Eligible = Callable[[ir.Value, ir.Value], ir.Value | None]


class _Line:
    """One row of `x` along `axis` at `coords` (its `Row` on cuda, or None), reduced."""

    def __init__(self, b: KernelBuilder, x: ir.Value, coords: list[ir.Value], axis: int,
                 extent: int, row: Row | None) -> None:
        self.b, self.x, self.coords, self.axis, self.row = b, x, coords, axis, row
        self.i64 = ir.IntegerType.get_signless(64)
        self.extent = extent
        self.none = b.constant(extent, self.i64)  # the position of no element

    def at(self, k: ir.Value) -> list[ir.Value]:
        return [*self.coords[:self.axis], k, *self.coords[self.axis:]]

    def value(self, position: ir.Value) -> ir.Value:
        """The element at i64 `position` (`none` reads the last one, a value left unused)."""
        last = arith.minsi(position, self.b.constant(self.extent - 1, self.i64))
        return self.b.load(self.x, self.at(arith.index_cast(self.b.index_type, last)))

    def best(self, order: Order, eligible: Eligible) -> ir.Value:
        """The first value in `order` among the eligible elements."""
        b = self.b

        def step(k: ir.Value, acc: ir.Value) -> ir.Value:
            value = b.load(self.x, self.at(k))
            better = order.best(b, acc, value)
            admitted = eligible(arith.index_cast(self.i64, k), value)
            return better if admitted is None else arith.select(admitted, better, acc)

        return self._reduce(order.worst(b, b.elements[self.x]), step,
                            lambda p, q: order.best(b, p, q))

    def position(self, last: bool, eligible: Eligible) -> ir.Value:
        """The least (`last`: greatest) i64 position among the eligible elements; `none`
        (-1 with `last`) when there is none."""
        b = self.b
        pick = arith.maxsi if last else arith.minsi

        def step(k: ir.Value, acc: ir.Value) -> ir.Value:
            position = arith.index_cast(self.i64, k)
            admitted = eligible(position, b.load(self.x, self.at(k)))
            return arith.select(admitted, pick(acc, position), acc)

        return self._reduce(b.constant(-1, self.i64) if last else self.none, step, pick)

    def _reduce(self, init: ir.Value, step: Callable[[ir.Value, ir.Value], ir.Value],
                combine: Callable[[ir.Value, ir.Value], ir.Value]) -> ir.Value:
        """Fold `step(k, accumulated)` over the row: one serial loop, or the row's threads'
        strided shares merged by `combine` in the shared-memory tree."""
        if self.row is None:
            (result,) = self.b.fold([self.extent], [init],
                                    lambda ks, acc: [step(ks[0], acc[0])])
            return result
        partial = self.row.fold([init], lambda k, acc: [step(k, acc[0])])
        (result,) = self.row.reduce(partial, lambda p, q: [combine(p[0], q[0])])
        return result


def _is_nan(v: ir.Value) -> ir.Value:
    return arith.cmpf(arith.CmpFPredicate.UNE, v, v)


def _not(b: KernelBuilder, condition: ir.Value) -> ir.Value:
    return arith.cmpi(arith.CmpIPredicate.eq, condition, b.constant(0, condition.type))
