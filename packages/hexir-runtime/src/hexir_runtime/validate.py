"""Prove, before anything runs, that a module is sound and that this runtime can run it.

Soundness is `hexir_format.validate`'s, the rule hxb-dump applies too. What is left here is
the runtime's own: a cap on what one run may allocate, the descriptor kinds it has bodies for
(versions 3 and 4), and whether the devices of a load can place an entry.
"""

from __future__ import annotations

import hexir_format as hf
from hexir_format import Device
from hexir_format.validate import DEFAULT_MAX_ALLOC_BYTES, EntryPlan, ModulePlan, Signature
from hexir_runtime import kernels, library
from hexir_runtime.errors import PlacementError, ValidationError
from hexir_runtime.hal import hostcode

__all__ = ["DEFAULT_MAX_ALLOC_BYTES", "EntryPlan", "ModulePlan", "Signature", "check_module",
           "check_placement"]


def check_module(module: hf.Module, *, max_alloc_bytes: int = DEFAULT_MAX_ALLOC_BYTES
                 ) -> ModulePlan:
    """The module's plan, each entry point the variant for the host's x86-64 level
    (`hostcode.usable_level`); ValidationError on the first problem."""
    try:
        plan = hf.validate.check(module, max_alloc_bytes=max_alloc_bytes,
                                 cpu_level=hostcode.usable_level())
    except hf.ValidationError as e:
        raise ValidationError(str(e), entry=e.entry, command=e.command, field=e.field,
                              offset=e.offset) from None
    for i, exe in enumerate(module.executables):
        if exe.kind is hf.KernelKind.LIBRARY:
            if exe.name not in library.FUNCTIONS:  # (a format newer than this runtime)
                raise ValidationError(f"executable {i} ('{exe.name}'), name: this runtime's "
                                      f"library has no function '{exe.name}' (it has "
                                      f"{', '.join(library.FUNCTIONS)})", field="name")
        elif exe.image is None and exe.kind not in kernels.BODIES:
            kinds = ", ".join(str(k) for k in kernels.BODIES)
            raise ValidationError(f"executable {i} ('{exe.name}'), kind: cpu kernel "
                                  f"'{exe.name}' is a {exe.kind} descriptor; this runtime runs "
                                  f"compiled cpu kernels (version 5) and, as descriptors, only "
                                  f"{kinds}: recompile the module", field="kind")
    return plan


def check_placement(plan: EntryPlan, available: set[Device]) -> None:
    """Refuse an entry that needs a device this run does not have (cpu is always there)."""
    for need in plan.needs:
        if need.device not in available:
            active = ", ".join(str(d) for d in sorted(available))
            hint = ": run it with --device=cuda (device='cuda' in Python), or compile it for " \
                "the cpu" if need.device is Device.CUDA else ""
            raise PlacementError(f"{need.what} is placed on {need.device} but the active device "
                                 f"is {active}{hint}")
