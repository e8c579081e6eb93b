"""Kernel images: what kind of blob a kernel carries, writing it out, and its SASS.

What an image is comes from `hexir_format.images` (the compiler's reader too) and, for a cpu
kernel's host object, `hexir_format.elf` (the runtime loader's parser). The flavour decides
what can be done with it: a cubin or a fatbin holds SASS that `cuobjdump --dump-sass` prints;
a host object is for `objdump -d`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hexir_format import FormatError, elf
from hexir_format.images import cubin_arch, flavour, parts, ptx_target
from hxb_dump.errors import DumpError


def describe(image: bytes) -> dict[str, Any]:
    """Size, flavour and what the image targets (`target` for PTX and ELF, `contents` for a
    fatbin, None where its headers do not add up)."""
    kind = flavour(image)
    facts: dict[str, Any] = {"size": len(image), "flavour": kind, "target": None}
    if kind == "PTX text":
        facts["target"] = ptx_target(image)
    elif kind == "ELF cubin":
        facts["target"] = cubin_arch(image)
    elif kind == "fatbin":
        try:
            facts["contents"] = [{"kind": p.kind.upper(), "arch": f"sm_{p.arch}"}
                                 for p in parts(image)]
        except FormatError:
            facts["contents"] = None
    elif kind == "host object":  # its format and symbols; FormatError when it is damaged
        obj = elf.parse_object(image)
        facts |= {"format": "ELF64 x86-64 relocatable", "functions": list(obj.functions),
                  "undefined": list(obj.undefined)}
    return facts


def next_step(image: bytes, path: str) -> str:
    """What to do with a written image: disassemble a cubin or fatbin, assemble PTX."""
    kind = flavour(image)
    if kind == "PTX text":
        arch = ptx_target(image) or "sm_XX"
        return f"PTX text; assemble it with: ptxas -arch={arch} -o {path}.cubin {path}"
    if kind == "unknown":
        return "not a cubin, fatbin, PTX or host object"
    if kind == "host object":
        return f"try: objdump -d {path}"
    return f"try: cuobjdump --dump-sass {path}"


def find_cuobjdump() -> str | None:
    """`cuobjdump` on PATH, else in $CUDA_HOME/bin, else in /usr/local/cuda/bin."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    homes = [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    for home in filter(None, homes):
        candidate = Path(home) / "bin" / "cuobjdump"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def sass(name: str, image: bytes) -> str:
    """The SASS of kernel `name`'s image, as `cuobjdump --dump-sass` prints it."""
    kind = flavour(image)
    if kind == "PTX text":
        arch = ptx_target(image) or "sm_XX"
        raise DumpError(f"kernel '{name}' carries PTX text only (the driver compiles it when the "
                        f"module loads), so there is no SASS to show; compile with "
                        f"-target=cuda:{arch} to embed a cubin")
    if kind == "host object":
        raise DumpError(f"kernel '{name}' is a cpu kernel: its image is x86-64 code, not SASS; "
                        f"write it with --image {name} and disassemble it with objdump -d")
    contents = describe(image).get("contents") if kind == "fatbin" else None
    if contents and all(entry["kind"] == "PTX" for entry in contents):
        arch = contents[0]["arch"]
        raise DumpError(f"kernel '{name}' carries a fatbin of PTX only, so there is no SASS to "
                        f"show; compile with -target=cuda:{arch} to embed a cubin")
    if kind == "unknown":
        raise DumpError(f"kernel '{name}' carries a {len(image)}-byte image that is neither an "
                        "ELF cubin nor a fatbin, so cuobjdump cannot read it")
    tool = find_cuobjdump()
    if tool is None:
        raise DumpError("cuobjdump was not found on PATH, in $CUDA_HOME/bin or in "
                        f"/usr/local/cuda/bin; write the image with --image {name} and "
                        "disassemble it where the CUDA toolkit is installed")
    suffix = ".cubin" if kind == "ELF cubin" else ".fatbin"
    with tempfile.TemporaryDirectory(prefix="hxb-dump-") as tmp:
        path = Path(tmp) / f"{name}{suffix}"
        path.write_bytes(image)
        try:
            done = subprocess.run([tool, "--dump-sass", str(path)], capture_output=True,
                                  text=True, check=False)
        except OSError as e:
            raise DumpError(f"could not run {tool}: {e.strerror}") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no message"]
        raise DumpError(f"{tool} --dump-sass failed with exit code {done.returncode} on "
                        f"kernel '{name}': {lines[-1]}")
    return done.stdout
