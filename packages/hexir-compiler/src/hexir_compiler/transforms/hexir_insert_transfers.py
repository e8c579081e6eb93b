"""hexir-insert-transfers: make every value live where its consumer runs.

Runs after hexir-partition. A value lives on its producer's device: a function argument on
the cpu (inputs arrive from the host), an op's result on the op's `device`. It is consumed
on the consumer's device, where `hexir.print` and `func.return` are cpu (results go back to
the host) and a transfer consumes on its `src`. Where the two differ, one
`hexir.transfer {src, dst}` per (value, destination device) goes right after the producer,
and every consumer on that device reads the copy: a value used twice on the GPU moves once.

A constant whose consumers all run on cuda is placed on cuda instead: weights are uploaded
once at load time, never staged through the cpu. Running the pass twice changes nothing.
"""

from __future__ import annotations

from collections import defaultdict

from hexir_compiler.mlir import ir
from hexir_compiler.placement import device_of

PASS_NAME = "hexir-insert-transfers"
HOST_CONSUMERS = frozenset({"hexir.print", "func.return"})


def run(module: ir.Module | ir.Operation) -> None:
    """Insert the transfers in every `func.func` of `module`."""
    module = module.operation
    with module.context:
        for view in module.regions[0].blocks[0].operations:
            op = view.operation
            if op.name == "func.func" and len(op.regions[0].blocks):  # not a declaration
                _function(op)


def _device(op: ir.Operation, side: str = "dst") -> str:
    """Where `op` runs: its `device` (cpu when it has none); a transfer's result lives on its
    `dst` side and is read on its `src` side."""
    if op.name == "hexir.transfer":
        return ir.StringAttr(op.attributes[side]).value
    return device_of(op)


def _consumer_device(op: ir.Operation) -> str:
    return "cpu" if op.name in HOST_CONSUMERS else _device(op, "src")


def _function(func: ir.Operation) -> None:
    block = func.regions[0].blocks[0]
    for arg in block.arguments:
        _route(arg, "cpu", func.location, ir.InsertionPoint.at_block_begin(block), None)
    for view in list(block.operations):
        op = view.operation
        if op.name == "hexir.constant":  # consumed on cuda alone: uploaded there at load
            if {_consumer_device(use.owner.operation) for use in op.results[0].uses} == {"cuda"}:
                op.attributes["device"] = ir.StringAttr.get("cuda")
        for result in op.results:
            _route(result, _device(op), op.location, ir.InsertionPoint(op), op)


def _route(
    value: ir.Value,
    device: str,
    loc: ir.Location,
    ip: ir.InsertionPoint,
    producer: ir.Operation | None,
) -> None:
    """Give the consumers of `value` on other devices one copy per device.

    The copies go at `ip`, then (for an op's result) move right after `producer`.
    """
    elsewhere: dict[str, list[tuple[ir.Operation, int]]] = defaultdict(list)
    for use in value.uses:
        owner = use.owner.operation
        wanted = _consumer_device(owner)
        if wanted != device:
            elsewhere[wanted].append((owner, use.operand_number))
    for dst in sorted(elsewhere, reverse=True):  # each goes first: the result is sorted
        copy = ir.Operation.create(
            "hexir.transfer",
            results=[value.type],
            operands=[value],
            attributes={"src": ir.StringAttr.get(device), "dst": ir.StringAttr.get(dst)},
            loc=loc,
            ip=ip,
        )
        if producer is not None:
            copy.move_after(producer)
        for owner, index in elsewhere[dst]:
            owner.operands[index] = copy.results[0]


def make_pass():
    """A callable for `PassManager.add(..., name=PASS_NAME)`."""

    def hexir_insert_transfers(op: ir.Operation, pass_) -> None:
        run(op)

    return hexir_insert_transfers
