"""Which ops can be placed where, the `-placement` option that chooses, and where a placed op
runs (`device_of`).

One registry for the compiler: the CLI's usage text lists it, `hexir-partition` reads it,
and every later pass asks `device_of` rather than reading the `device` attribute itself.
Every hexir op that has a kernel (`ops.KERNEL_OPS`) runs on both devices, since its one
lowering produces the cpu and the cuda code; an op not listed here is not placeable
(constants, prints and transfers are placed by the passes, never by the user).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import ir
from hexir_compiler.ops import KERNEL_OPS

DEVICES = ("cpu", "cuda")
ALIASES = {"gpu": "cuda"}
DEFAULT_DEVICE = "cpu"
#: The `-placement` key of the default device: `*=cuda`, or just `cuda`.
EVERY_OP = "*"

#: op name -> devices it can run on.
PLACEABLE: Mapping[str, tuple[str, ...]] = {f"hexir.{name}": DEVICES
                                             for name in sorted(KERNEL_OPS)}


class PlacementError(CompileError):
    """A malformed `-placement` entry (the CLI answers with usage and exit 2)."""


def device_of(op: ir.Operation) -> str:
    """Where `op` runs: its `device` attribute (written by hexir-partition, copied by every
    later pass), or the default device where it has none."""
    if "device" not in op.attributes:
        return DEFAULT_DEVICE
    return ir.StringAttr(op.attributes["device"]).value


def normalize_device(name: str) -> str | None:
    """`cpu` / `cuda` for a device name or alias, None for anything else."""
    name = ALIASES.get(name, name)
    return name if name in DEVICES else None


def parse_placement(entries: Iterable[str]) -> dict[str, str]:
    """`["hexir.linear=cuda,hexir.relu=gpu", ...]` -> `{op: device}` (later entries win).

    A bare device (`cuda`) or `*=<device>` is the default for every op not named, under key
    `EVERY_OP`."""
    return dict(_parse_entry(entry) for text in entries for entry in text.split(","))


def _parse_entry(entry: str) -> tuple[str, str]:
    op, sep, device = entry.partition("=")
    op, device = op.strip(), device.strip()
    if not sep and normalize_device(op):
        op, sep, device = EVERY_OP, "=", op
    prefix = f"invalid -placement entry '{entry}'"
    if not sep or not op or not device:
        raise PlacementError(f"{prefix} is not of the form <op-name>=<device> or <device>")
    normalized = normalize_device(device)
    if normalized is None:
        raise PlacementError(f"{prefix}: '{device}' is not a device; expected cpu, cuda or gpu")
    if op == EVERY_OP:
        return op, normalized
    if op not in PLACEABLE:
        raise PlacementError(f"{prefix}: '{op}' is not a placeable op")
    if normalized not in PLACEABLE[op]:
        raise PlacementError(
            f"{prefix}: op '{op}' cannot run on '{normalized}'; it supports "
            f"{', '.join(sorted(PLACEABLE[op]))}"
        )
    return op, normalized


def usage_lines() -> list[str]:
    """The "placeable ops" part of the CLI usage text."""
    lines = ["placeable ops:"]
    lines += [f"  {op}  ->  {', '.join(devs)}" for op, devs in sorted(PLACEABLE.items())]
    lines.append("devices: cpu, cuda (gpu is accepted as an alias)")
    return lines
