"""hexir-fuse: decide which graph ops become one kernel, as a `hexir.group` on each of them.

Runs after placement, right before hexir-lower-to-tir, which makes one kernel of each group.
A group is a chain ending in one op (its sink, the only op whose result leaves the group):

- element-wise ops (`ops.ELEMENTWISE`) join the group of the element-wise op that consumes them:
  `add -> relu` is one map;
- a contraction (matmul, linear, conv) heads the group of the element-wise epilogue that
  consumes it (bias, activation, residual add, scale): `linear -> add -> relu` is one
  kernel, and so is `conv -> add -> relu`;
- a reduction (softmax, layer_norm, reduce_*) ends the group of the element-wise prologue
  that computes its data operand: `add -> layer_norm` (a residual) and `mul -> softmax` (a
  scale) are one kernel each. Nothing consumes a reduction inside a group;
- concats along one axis are one group, and one kernel that copies each part once: the dialect's
  concat joins two operands (IRDL's variadic operands are all of one type, and parts differ in
  size), so an importer writes an n-way Concat as a tree of them, which would copy its first
  parts once per level (DenseNet-121's concats of all earlier feature maps, a chain each: 535
  copy kernels, 8 of its ~41 ms a call). Nothing else joins a concat's group;
- a slice or a gather joins the group of the element-wise ops or reduction that read it, as a
  leaf (`LEAVES`: nothing of the group flows into it): the kernel reads its source where it
  maps the group's coordinates (start + i * step; the index read at the indices' axes), so
  it is never copied. An unrolled recurrent layer gathers every step's row of its input
  projection and slices the gates out of it (GRU, hidden 256, 64 steps: seven kernels a
  step, five of them copies of 256 elements; two once they are leaves).

A producer joins its consumer's group only when both run on the same device (placement
decides fusion boundaries), every use of its result is in that group, and the result has the
shape of the consumer's result (an element-wise consumer) or data operand (a reduction): every
element-wise value of the group then lives at the same coordinates. A value used twice in the
group is computed once there: SiLU's `x * sigmoid(x)` and HardSwish's `x * hardsigmoid(x)`
after a conv are its epilogue (the conv's result has two uses, both in the group once the
sigmoid has joined the mul's; EfficientNet-B0 at x86-64-v4, two threads, one profile on a
loaded machine: its 48 separate `sigmoid_mul` kernels were 43.2 of its 71.7 ms of kernels;
fused, its 49 `conv_add_sigmoid_mul` kernels took 23.5 ms, 20.4 with their epilogues on
vectors of channels, 13.5 with the depthwise changes). A group holds at most
one contraction (its kernel computes it first, then the rest in program order at each output
element), never a contraction and a reduction together, and takes at most MAX_KERNEL_INPUTS
inputs from outside.
Groups are numbered per function in program order; an op in no group keeps no attribute.
Running the pass again recomputes the same groups.
"""

from __future__ import annotations

from hexir_compiler.dialects.hexir import MAX_KERNEL_INPUTS
from hexir_compiler.mlir import ir
from hexir_compiler.ops import CONTRACTIONS, ELEMENTWISE, REDUCTIONS
from hexir_compiler.placement import device_of

PASS_NAME = "hexir-fuse"
GROUP = "hexir.group"
#: The ops whose producers may join their group.
SEEDS = ELEMENTWISE | REDUCTIONS | {"concat"}
#: The ops that join a group only as its leaves (nothing of the group flows into them).
LEAVES = frozenset({"slice", "gather"})


def mnemonic(op: ir.Operation) -> str:
    return op.name.removeprefix("hexir.") if op.name.startswith("hexir.") else ""


def run(module: ir.Module | ir.Operation) -> None:
    """Write `hexir.group` on the ops of every fusion group in `module`'s functions."""
    module = module.operation
    with module.context:
        for view in module.regions[0].blocks[0].operations:
            op = view.operation
            if op.name == "func.func" and len(op.regions[0].blocks):
                _function(op.regions[0].blocks[0])


def _function(block: ir.Block) -> None:
    ops = [view.operation for view in block.operations]
    for op in ops:
        if GROUP in op.attributes:
            del op.attributes[GROUP]
    group_of: dict[int, list[ir.Operation]] = {}  # id(op) -> its group (shared list)
    producers = {result: op for op in ops for result in op.results}
    for op in ops:
        if mnemonic(op) not in SEEDS:
            continue
        group = group_of.setdefault(id(op), [op])
        joined_any = True
        while joined_any:  # a join can let a producer in whose other uses were in the group
            joined_any = False
            for consumer in list(group):
                if mnemonic(consumer) not in SEEDS:
                    continue  # a contraction heads its group: its operands come from outside
                for operand in _data(consumer):
                    producer = producers.get(operand)
                    if producer is None or not _joins(producer, consumer, group, group_of):
                        continue
                    joined = group_of.get(id(producer), [producer])
                    merged = [o for o in ops if o in joined or o in group]  # program order
                    for member in merged:
                        group_of[id(member)] = merged
                    group, joined_any = merged, True
    numbered: dict[int, int] = {}
    for op in ops:
        members = group_of.get(id(op))
        if members is None or len(members) < 2:
            continue
        number = numbered.setdefault(id(members), len(numbered))
        op.attributes[GROUP] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), number)


def _joins(producer: ir.Operation, consumer: ir.Operation, group: list,
           group_of: dict[int, list]) -> bool:
    name = mnemonic(producer)
    if name not in ELEMENTWISE and name not in CONTRACTIONS and name not in LEAVES and \
            name != "concat":
        return False
    if id(producer) in {id(o) for o in group}:
        return False
    if device_of(producer) != device_of(consumer) or len(producer.results) != 1:
        return False
    uses = list(producer.results[0].uses)
    if any(_op(use.owner) not in group for use in uses):
        return False
    if "concat" in (name, mnemonic(consumer)):  # concats join concats of their axis only
        theirs = group_of.get(id(producer), [producer])
        return name == mnemonic(consumer) and _axis(producer) == _axis(consumer) and \
            len(_inputs([*theirs, *group])) <= MAX_KERNEL_INPUTS
    # and each of them reads it through the group: a contraction's operands, and a
    # reduction's other than its data, come from outside its kernel
    if any(mnemonic(_op(use.owner)) not in ELEMENTWISE | REDUCTIONS or (
            mnemonic(_op(use.owner)) in REDUCTIONS and use.operand_number != 0)
           for use in uses):
        return False
    into_reduction = mnemonic(consumer) in REDUCTIONS
    lives = _type_shape(consumer.operands[0].type) if into_reduction else _shape(consumer)
    if _shape(producer) != lives:
        return False
    theirs = group_of.get(id(producer), [producer])
    contractions = [o for o in (*theirs, *group) if mnemonic(o) in CONTRACTIONS]
    if contractions and any(mnemonic(o) in REDUCTIONS for o in group):
        return False
    return len(contractions) <= 1 and len(_inputs([*theirs, *group])) <= MAX_KERNEL_INPUTS


def _axis(op: ir.Operation) -> int:
    """A concat's axis, counted from the first."""
    axis = ir.IntegerAttr(op.attributes["axis"]).value
    return axis % ir.RankedTensorType(op.results[0].type).rank


def _data(op: ir.Operation) -> list[ir.Value]:
    """The operands of `op` whose producers may join its group: a reduction's data operand,
    an element-wise op's every operand."""
    return list(op.operands)[:1] if mnemonic(op) in REDUCTIONS else list(op.operands)


def _inputs(members: list[ir.Operation]) -> list[ir.Value]:
    """The values a group's kernel would take: its operands produced outside it."""
    inside = {m.results[0] for m in members}
    found: list[ir.Value] = []
    for member in members:
        for value in member.operands:
            if value not in inside and value not in found:
                found.append(value)
    return found


def _op(owner) -> ir.Operation:
    return owner.operation if isinstance(owner, ir.OpView) else owner


def _shape(op: ir.Operation) -> tuple[int, ...] | None:
    return _type_shape(op.results[0].type)


def _type_shape(t: ir.Type) -> tuple[int, ...] | None:
    return tuple(ir.RankedTensorType(t).shape) if isinstance(t, ir.RankedTensorType) else None


