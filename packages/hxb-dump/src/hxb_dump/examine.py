"""Read a `.hxb` as far as it is safe to, and collect what can be said about it.

A file is examined in three widening steps, each kept only if it succeeds: the file's size,
then the header and section table (`hexir_format.parse_layout`), then the whole module
(`hexir_format.parse`) and the checks that follow references (`hexir_format.validate`, the
runtime's own). The first failure
becomes the report's one error, and the facts gathered before it are still shown.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import hexir_format
from hexir_format import CPU_LEVELS, HexirError, KernelKind, Module
from hexir_format.files import open_regular
from hxb_dump.errors import DumpError
from hxb_dump.facts import Facts, layout_facts, module_facts


@dataclass
class Report:
    facts: Facts
    module: Module | None  # the parsed module, when the file parsed and verified
    error: str | None


def examine(path: str, *, values: bool) -> Report:
    """Everything `path` safely shows; rodata values too when `values` is set."""
    facts: Facts = {"file": path}
    try:
        data = _map(Path(path))
    except OSError as e:
        return Report(facts, None, f"cannot read '{path}': {e.strerror or e}")
    facts["size"] = len(data)
    try:
        facts |= layout_facts(hexir_format.parse_layout(data))
        module = hexir_format.parse(data)
        facts |= module_facts(module, values=values)
        hexir_format.validate.check(module)
    except HexirError as e:
        return Report(facts, None, str(e))
    return Report(facts, module, None)


def _map(path: Path) -> bytes | mmap.mmap:
    """The file's bytes, mapped read-only so rodata and images are never copied whole (a
    FIFO, device or directory is refused before anything waits on it)."""
    with open_regular(path) as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def kernel_image(module: Module, name: str, path: str) -> bytes:
    """The device image of kernel `name` (`name@x86-64-v3`: that level's, where a module holds
    a variant per level); DumpError naming the kernels that exist, or saying the kernel
    carries none."""
    kernel, at, level = name.partition("@")
    found = [e for e in module.executables if e.name == kernel and (
        not at or CPU_LEVELS.get(e.cpu_level) == level)]
    if not found:
        names = ", ".join(dict.fromkeys(e.name for e in module.executables))
        known = f"its kernels are: {names}" if names else "it has no kernels"
        raise DumpError(f"no kernel '{name}' in {path}; {known}")
    if all(e.kind is KernelKind.LIBRARY for e in found):
        raise DumpError(f"kernel '{name}' is the runtime's library function {kernel} and has "
                        "no image")
    if len(found) > 1:
        levels = ", ".join(f"{kernel}@{CPU_LEVELS[e.cpu_level]}" for e in found
                           if e.cpu_level)
        raise DumpError(f"kernel '{kernel}' has a host image for each level of {path}; name "
                        f"one: {levels}")
    exe = found[0]
    if exe.image is None:
        raise DumpError(f"kernel '{name}' is placed on {exe.device} and carries no device "
                        "image (the runtime supplies the body)")
    return bytes(exe.image)
