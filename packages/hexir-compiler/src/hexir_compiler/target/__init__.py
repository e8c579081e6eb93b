"""Code generation for devices, and the `-target` option that chooses them: `host` (llvmlite:
the cpu kernels and the host program, for an x86-64 level), `cuda` (toolkit lookup, device
images for an architecture).
"""

from __future__ import annotations

import re

from hexir_compiler.errors import CompileError
from hexir_compiler.target import host


class TargetError(CompileError):
    """A malformed `-target` entry (the CLI answers with usage and exit 2)."""


def parse_targets(entries: list[str]) -> tuple[str | None, str | tuple[str, ...] | None]:
    """(CUDA architecture, host CPU levels) that `-target` names (None: the default): the
    level, or a tuple of the levels when several `cpu:<level>` entries name more than one."""
    chip = None
    levels: list[str] = []
    for text in entries:
        for entry in text.split(","):
            device, colon, arch = entry.partition(":")
            if device == "cpu":
                if colon and arch not in host.CPUS:
                    raise TargetError(
                        f"'{arch}' is not a host CPU level; expected one of {', '.join(host.CPUS)}"
                    )
                if arch and arch not in levels:
                    levels.append(arch)
            elif device in ("cuda", "gpu"):
                if colon and not re.fullmatch(r"sm_\d+", arch):
                    raise TargetError(
                        f"'{arch}' is not a CUDA architecture; expected sm_XX, for example sm_75"
                    )
                chip = arch or chip
            else:
                raise TargetError(f"'{device}' is not a device; expected cpu or cuda")
    cpu = None if not levels else levels[0] if len(levels) == 1 else host.cpus(tuple(levels))
    return chip, cpu
