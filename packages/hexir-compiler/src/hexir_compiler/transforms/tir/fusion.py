"""One kernel for a fusion group (`hexir-fuse`): element-wise chains, contraction epilogues,
reduction prologues, concats.

A group's element-wise values all have one shape, so they are computed together at each element: the
group's inputs loaded there (numpy-broadcast, each once), the ops evaluated in program order with
their scalar formulas (`elementwise.formula`, the ones their own kernels use). A chain alone is one
pass over the output that stores the last value. A group headed by a contraction (matmul, linear,
conv) is its kernel with that evaluation as the epilogue of each output (on the cpu, where the
matmul is the host BLAS, a pass over the product in place right after the call). A group ending in a
reduction is that reduction's kernel reading its data operand through the chain (a `Prologue`):
wherever it would load an element it evaluates the chain there instead, so the chain's result never
goes through memory (softmax reads its row twice and layer_norm three times: the chain's ops are
recomputed rather than stored). A group of concats is one concat of the parts at its leaves.
A slice or gather in a group (a leaf: `hexir-fuse`) is a load of its source at the
coordinates it maps the group's to (`_viewed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import arith, ir
from hexir_compiler.ops import CONTRACTIONS, REDUCTIONS
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.contraction import plan_matmul
from hexir_compiler.transforms.tir.elementwise import VECTOR_FORMULAS, formula
from hexir_compiler.transforms.tir.kernel import (
    Epilogue,
    GraphOp,
    Kernel,
    Prologue,
    broadcast_indices,
    varying_axes,
)
from hexir_compiler.transforms.tir.movement import (
    check_gather,
    check_slice,
    gather_source,
    plan_concat,
    slice_source,
)
from hexir_compiler.transforms.tir.reduction import plan_layer_norm, plan_reduce, plan_softmax
from hexir_compiler.transforms.tir.schedule import lanes
from hexir_compiler.transforms.tir.window import plan_conv
from hexir_format import signatures

#: The element types a vector epilogue takes (MLIR's names).
FLOATS = frozenset({"f16", "bf16", "f32", "f64"})
#: The planners of the ops that can head a group (`ops.CONTRACTIONS`; each takes an epilogue).
HEADS = {"matmul": plan_matmul, "linear": plan_matmul, "conv": plan_conv}
#: The ops a group reads its inputs through (`hexir_fuse.LEAVES`): each the function that
#: checks it, and the one that maps the group's coordinates to its source's.
VIEWS = {"slice": (check_slice, lambda b, op, buffers, at: slice_source(b, op, at)),
         "gather": (check_gather,
                    lambda b, op, buffers, at: gather_source(b, op, buffers[1], at))}
#: The planners of the reductions (`ops.REDUCTIONS`; each takes a prologue).
SINKS = {"softmax": plan_softmax, "layer_norm": plan_layer_norm,
         **dict.fromkeys(REDUCTIONS - {"softmax", "layer_norm"}, plan_reduce)}


@dataclass(frozen=True)
class Step:
    """One op of the group: its graph op and where each operand comes from: ("input", i) --
    the kernel's i-th input -- or ("step", j), the j-th step's value."""

    op: GraphOp
    operands: tuple[tuple[str, int], ...]


def plan_group(steps: Sequence[Step], inputs: Sequence[tuple[int, ...]],
               output: tuple[int, ...]) -> Kernel:
    """The kernel of a group whose inputs have shapes `inputs` (a contraction's two first)."""
    sink = steps[-1]
    if all(s.op.mnemonic == "concat" for s in steps):
        return _concat_of_leaves(steps, inputs)
    reduction = SINKS.get(sink.op.mnemonic)
    chain = steps[:-1] if reduction else steps
    shape = sink.op.inputs[0] if reduction else output  # where the chain's values live
    head = next((i for i, s in enumerate(chain) if s.op.mnemonic in CONTRACTIONS), None)
    rest = [(i, s) for i, s in enumerate(chain) if i != head]
    for _, s in rest:
        if s.op.mnemonic in VIEWS:
            VIEWS[s.op.mnemonic][0](s.op)
    formulas = {i: formula(s.op) for i, s in rest if s.op.mnemonic not in VIEWS}
    vectors = all(s.op.mnemonic in VECTOR_FORMULAS or s.op.mnemonic in VIEWS
                  for _, s in rest) and all(
        e in FLOATS for _, s in rest
        for e in (s.op.elements[-1:] if s.op.mnemonic in VIEWS else s.op.elements))

    def evaluate(b: KernelBuilder, coords: list[ir.Value], product: ir.Value | None,
                 axis: int | tuple[int, ...] = -1, lanes: int = 0):
        """The chain's value at `coords` (a vector of `lanes` along `axis` where the
        contraction's `product` is one, or `lanes` is given)."""
        buffers = b.args[:-1]
        loaded: dict[int, ir.Value] = {}
        values: dict[int, ir.Value] = {} if head is None else {head: product}
        if product is not None and isinstance(product.type, ir.VectorType):
            lanes = ir.VectorType(product.type).shape[0]

        def operand(source: tuple[str, int]) -> ir.Value:
            kind, index = source
            if kind == "step":
                return values[index]
            if index not in loaded and all(d == 1 for d in inputs[index]):
                scalar = b.load_once(buffers[index])  # a clip's bound: loaded once a kernel
                loaded[index] = b.splat(scalar, lanes) if lanes else scalar
            if index not in loaded:
                loaded[index] = _vector_operand(
                    b, buffers[index], coords, inputs[index], shape, axis, lanes) if lanes \
                    else b.load(buffers[index], broadcast_indices(b, coords, inputs[index],
                                                                  shape))
            return loaded[index]

        for i, step in rest:
            if step.op.mnemonic in VIEWS:  # (a leaf: its operands are inputs)
                values[i] = _viewed(b, step, buffers, coords, axis, lanes)
            else:
                values[i] = formulas[i](b, *(operand(s) for s in step.operands))
        return values[len(chain) - 1]

    if reduction:
        others = tuple(index for kind, index in sink.operands[1:] if kind == "input")
        if sink.operands[0] != ("step", len(chain) - 1) or len(others) != len(sink.operands) - 1:
            raise CompileError(f"hexir.{sink.op.mnemonic}: only its data operand can be a "
                               "fused prologue")
        return reduction(sink.op, Prologue(
            lambda b, at: evaluate(b, at, None), others,
            (lambda b, at, lanes: evaluate(b, at, None, -1, lanes)) if vectors else None))
    if head is not None:
        # (a view's elements are at the output's coordinates: it varies as the output does)
        operands = tuple(s.op.output if s.op.mnemonic in VIEWS else inputs[index]
                         for _, s in rest for kind, index in s.operands if kind == "input")
        return HEADS[steps[head].op.mnemonic](steps[head].op, Epilogue(
            lambda b, value, at, axis: evaluate(b, at, value, axis), vectors, operands))

    def emit(b: KernelBuilder) -> None:
        out = b.args[-1]
        with b.building(), lanes(b, output) as owned:
            results = [evaluate(b, coords, None) for coords in owned]
            for coords, value in zip(owned, results, strict=True):
                b.store(value, out, coords)

    # a view's source is not of the map's broadcast shapes: no format kind computes it
    viewed = any(s.op.mnemonic in VIEWS for s in steps)
    return Kernel("generic" if viewed else "map", emit)


def _concat_of_leaves(steps: Sequence[Step], inputs: Sequence[tuple[int, ...]]) -> Kernel:
    """A group of concats (of one axis, `hexir-fuse`) as one concat of its leaves in order:
    the kernel inputs its operand tree reaches, left to right."""
    def leaves(source: tuple[str, int]) -> list[int]:
        kind, index = source
        if kind == "input":
            return [index]
        return [leaf for s in steps[index].operands for leaf in leaves(s)]

    sink = steps[-1]
    order = [leaf for s in sink.operands for leaf in leaves(s)]
    whole = GraphOp("concat", tuple(inputs[i] for i in order), sink.op.output,
                    sink.op.attributes, sink.op.elements)
    return plan_concat(whole, order)


def _viewed(b: KernelBuilder, step: Step, buffers: Sequence[ir.Value], coords: list[ir.Value],
            axis: int | tuple[int, ...], lanes: int) -> ir.Value:
    """A view's (`VIEWS`) element at the group's `coords` (its result has the group's
    shape), or `lanes` of them along `axis`: one vector load where they are adjacent in the
    source (the output's innermost axis, which a slice of step 1 or a gather along another
    axis keeps as its source's innermost), else loaded one by one."""
    op = step.op
    mine = [buffers[index] for _, index in step.operands]

    def source(at: list[ir.Value]) -> list[ir.Value]:
        return VIEWS[op.mnemonic][1](b, op, mine, at)

    if not lanes:
        return b.load(mine[0], source(coords))
    rank = len(op.output)
    axes = [a % rank for a in ((axis,) if isinstance(axis, int) else axis)]
    data = op.inputs[0]
    if op.mnemonic == "slice":
        adjacent = op.ints_attr("steps")[-1] == 1
    else:
        gathered = signatures.normalize_axis(op.int_attr("axis"), len(data))
        adjacent = gathered != len(data) - 1
    if axes == [rank - 1] and adjacent:
        return b.load_vector(mine[0], source(coords), lanes)
    return b.vector_of([b.load(mine[0], source(lane))
                        for lane in _lanes(b, coords, axes, op.output, lanes)])


def _vector_operand(b: KernelBuilder, buffer: ir.Value, coords: list[ir.Value],
                    operand: tuple[int, ...], out: tuple[int, ...],
                    axis: int | tuple[int, ...], lanes: int) -> ir.Value:
    """An epilogue operand of shape `operand` (broadcast to the output's `out`) at `lanes`
    neighbours along the output's `axis` -- or along the consecutive axes `axis`, flattened
    -- from the output coordinates `coords`: a broadcast where it does not vary along them,
    one vector load where its elements along them are adjacent (it spans them whole, and
    nothing varies after them: a bias [C, 1, 1] along the channels, a residual along a
    plane's pixels), else a vector of its elements loaded one by one (a residual along the
    channels, each a plane apart)."""
    rank = len(out)
    axes = [a % rank for a in ((axis,) if isinstance(axis, int) else axis)]
    offset = rank - len(operand)  # the operand's dim of output axis a is a - offset
    at = broadcast_indices(b, coords, operand, out)
    varying = varying_axes(operand, rank, axes)
    if not varying:
        return b.splat(b.load(buffer, at), lanes)
    if varying == axes and all(operand[a - offset] == out[a] for a in axes[1:]) and \
            all(extent == 1 for extent in operand[axes[-1] - offset + 1:]):
        return b.load_vector(buffer, at, lanes)
    return b.vector_of([b.load(buffer, broadcast_indices(b, lane, operand, out))
                        for lane in _lanes(b, coords, axes, out, lanes)])


def _lanes(b: KernelBuilder, coords: list[ir.Value], axes: list[int], out: Sequence[int],
           lanes: int) -> list[list[ir.Value]]:
    """The output coordinates of `lanes` neighbours from `coords` along the consecutive
    `axes` of `out` (flattened: a lane past an axis's end carries into the one before)."""
    extents = [out[a] for a in axes]
    first = b.linearize([coords[a] for a in axes], extents)
    found = []
    for j in range(lanes):
        moved = b.delinearize(arith.addi(first, b.index(j)), extents) if j else \
            [coords[a] for a in axes]
        lane = list(coords)
        for a, value in zip(axes, moved, strict=True):
            lane[a] = value
        found.append(lane)
    return found
