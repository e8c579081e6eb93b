"""Kernels that index by data: gather_elements, scatter_elements, scatter_nd.

An index read from a tensor is wrapped (negative: from the end) and clamped into its axis
(`movement.index_in`), as `gather` does, so no address leaves its buffer whatever the data
holds; the importer refuses indices it knows to be out of range. None has a format kind
(`generic`). Schedules, race-free by construction on both devices:

- gather_elements: one iteration (cpu loops, cuda thread) per output element.
- scatter_elements: one iteration per line of the data along `axis`: it copies its line into
  the output, then walks the updates of that line in order, combining each into the element
  its index names. Updates only ever land in their own line, so no two iterations write one
  element, and duplicates within a line meet in index order (reduction none: the last wins).
- scatter_nd: the output is [P rows (the k indexed axes), S (the slice axes)]; an iteration
  owns a block of R consecutive rows (on cuda, at one slice position j: a thread per (block,
  j), neighbouring threads on neighbouring elements): it copies its rows' elements, then
  walks all M index tuples (k coordinates each) in order and applies those whose row is in
  its block. R = min(P, WALK_SHARE x M x k) rows, so the walks cost at most 1 / WALK_SHARE
  of the copy while the rest stays parallel: ceil(P / R) iterations (x S on cuda), many for
  a few updates into a big tensor (a cache update), one (S) when the updates outnumber the
  rows. Duplicates meet in order, as in scatter_elements.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import arith, ir
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.kernel import GraphOp, Kernel
from hexir_compiler.transforms.tir.movement import GENERIC, index_in
from hexir_compiler.transforms.tir.schedule import parallel
from hexir_format import signatures

WALK_SHARE = 16  # scatter_nd: rows an iteration copies per index coordinate it reads


def plan_gather_elements(op: GraphOp) -> Kernel:
    data, indices = op.inputs
    axis = signatures.normalize_axis(op.int_attr("axis"), len(data))
    op.expect_output(signatures.gather_elements(data, indices, axis))
    _some_element(op, data, [axis], math.prod(indices))

    def emit(b: KernelBuilder) -> None:
        x, where, out = b.args
        with b.building(), parallel(b, op.output) as coords:
            source = list(coords)
            source[axis] = index_in(b, b.load(where, coords), data[axis])
            b.store(b.load(x, source), out, coords)

    return Kernel(GENERIC, emit)


def plan_scatter_elements(op: GraphOp) -> Kernel:
    data, indices, updates = op.inputs
    axis = signatures.normalize_axis(op.int_attr("axis"), len(data))
    op.expect_output(signatures.scatter_elements(data, indices, updates, axis))
    _some_element(op, data, [axis], math.prod(indices))
    combine = _combine(op)
    lines = [e for d, e in enumerate(data) if d != axis]
    covered = [(d, indices[d]) for d in range(len(data)) if d != axis]

    def emit(b: KernelBuilder) -> None:
        x, where, new, out = b.args
        with b.building(), parallel(b, lines) as coords:

            def at(k: ir.Value) -> list[ir.Value]:
                return [*coords[:axis], k, *coords[axis:]]

            with b.loop(data[axis], "serial") as k:
                b.store(b.load(x, at(k)), out, at(k))
            inside = [b.less_than(c, n) for c, (d, n) in zip(coords, covered, strict=True)
                      if n < data[d]]
            with b.guard(b.all_of(inside)), b.loop(indices[axis], "serial") as k:
                target = at(index_in(b, b.load(where, at(k)), data[axis]))
                _apply(b, combine, b.load(new, at(k)), out, target)

    return Kernel(GENERIC, emit)


def plan_scatter_nd(op: GraphOp) -> Kernel:
    data, indices, updates = op.inputs
    op.expect_output(signatures.scatter_nd(data, indices, updates))
    depth = indices[-1]
    lead, tail, tuples = data[:depth], data[depth:], indices[:-1]
    rows, count = math.prod(lead), math.prod(tuples)
    _some_element(op, data, range(depth), count)
    combine = _combine(op)
    per_block = max(1, min(rows, WALK_SHARE * count * depth))  # R in the module docstring
    blocks = max(1, -(-rows // per_block))

    def emit(b: KernelBuilder) -> None:
        x, where, new, out = b.args
        spread = b.device == "cuda"  # the slice positions in the parallel space, or loops
        with b.building(), parallel(b, [blocks, *(tail if spread else [])]) as (block, *given):
            first = b.mul(block, per_block)
            with b.loop(per_block, "serial") as r:
                row = arith.addi(first, r)
                with b.guard(b.less_than(row, rows) if blocks * per_block > rows else None), \
                        _slots(b, tail, given if spread else None) as slot:
                    at = [*b.delinearize(row, lead), *slot]
                    b.store(b.load(x, at), out, at)
            with b.loop(count, "serial") as m:
                tuple_at = b.delinearize(m, tuples)
                target = [index_in(b, b.load(where, [*tuple_at, b.index(d)]), lead[d])
                          for d in range(depth)]
                mine = None
                if blocks > 1:
                    row = b.linearize(target, lead)
                    mine = arith.andi(arith.cmpi(arith.CmpIPredicate.uge, row, first),
                                      b.less_than(arith.subi(row, first), per_block))
                with b.guard(mine), _slots(b, tail, given if spread else None) as slot:
                    _apply(b, combine, b.load(new, [*tuple_at, *slot]), out, [*target, *slot])

    return Kernel(GENERIC, emit)


@contextlib.contextmanager
def _slots(b: KernelBuilder, tail: Sequence[int], given: list[ir.Value] | None):
    """The slice position: `given` (a cuda thread's), or serial loops over every one of
    them, innermost last (a cpu iteration's: its rows are contiguous runs of memory)."""
    if given is not None:
        yield given
        return
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(b.loop(extent, "serial")) for extent in tail]


def _some_element(op: GraphOp, data, axes, count: int) -> None:
    """Refuse indices into an empty axis: there is no element for them to name."""
    empty = [d for d in axes if data[d] == 0]
    if empty and count:
        raise CompileError(f"hexir.{op.mnemonic}: axis {empty[0]} of {signatures.fmt(data)} "
                           "is empty, so no index can name an element of it")


def _combine(op: GraphOp):
    """How an update meets the element it lands on: None (it replaces it) or arith's op."""
    reduction = op.string_attr("reduction", "none")
    if reduction == "none":
        return None
    floats = op.elements[0] in ("f32", "f64")
    table = {"add": (arith.addf, arith.addi), "mul": (arith.mulf, arith.muli),
             "max": (arith.maximumf, arith.maxsi), "min": (arith.minimumf, arith.minsi)}
    if reduction not in table or op.elements[0] == "i1":
        raise CompileError(f"hexir.{op.mnemonic}: reduction \"{reduction}\" of "
                           f"{op.elements[0]} is not one Hexir computes")
    return table[reduction][0 if floats else 1]


def _apply(b: KernelBuilder, combine, update: ir.Value, out: ir.Value,
           target: list[ir.Value]) -> None:
    value = update if combine is None else combine(b.load(out, target), update)
    b.store(value, out, target)
