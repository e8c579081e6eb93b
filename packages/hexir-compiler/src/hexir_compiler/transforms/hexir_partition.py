"""hexir-partition: decide where each op runs, as a `device` attribute on the op.

The placement is decided here, before any lowering, and every later pass copies it, so by
the time kernels are generated the ops that should run on the GPU are already labelled.
A placeable op (see `hexir_compiler.placement`) gets the device the `-placement` option names
for its op name; otherwise it keeps a `device` it already has (so the pass can run on its own
output); otherwise it goes to the default device (`-placement=cuda`), the cpu unless named.
Constants and prints go to the cpu (`hexir-insert-transfers` moves constants that only feed
cuda ops). The module records the devices it targets as `hexir.targets = ["cpu", "cuda"]`.
"""

from __future__ import annotations

from collections.abc import Mapping

from hexir_compiler.mlir import ir
from hexir_compiler.placement import DEFAULT_DEVICE, DEVICES, EVERY_OP, PLACEABLE

PASS_NAME = "hexir-partition"
#: Non-compute graph ops that still need a device: where their buffer lives.
HOST_OPS = frozenset({"hexir.constant", "hexir.print", "hexir.call_tir"})


def run(module: ir.Module | ir.Operation, placement: Mapping[str, str] | None = None) -> None:
    """Write `device` on every placeable op of `module` and `hexir.targets` on the module."""
    placement = placement or {}
    module = module.operation
    with module.context:
        module.attributes["hexir.targets"] = ir.ArrayAttr.get(
            [ir.StringAttr.get(d) for d in DEVICES]
        )

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name in PLACEABLE or op.name in HOST_OPS:
                device = _device_for(op, placement)
                op.attributes["device"] = ir.StringAttr.get(device)
            return ir.WalkResult.ADVANCE

        module.walk(visit)


def _device_for(op: ir.Operation, placement: Mapping[str, str]) -> str:
    if op.name in placement:
        return placement[op.name]
    if "device" in op.attributes:
        return ir.StringAttr(op.attributes["device"]).value
    if op.name in HOST_OPS:
        return DEFAULT_DEVICE
    return placement.get(EVERY_OP, DEFAULT_DEVICE)


def make_pass(placement: Mapping[str, str] | None = None):
    """A callable for `PassManager.add(..., name=PASS_NAME)` with this placement."""

    def hexir_partition(op: ir.Operation, pass_) -> None:
        run(op, placement)

    return hexir_partition
