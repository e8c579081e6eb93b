"""Kernel images: what kind of blob a kernel carries, writing it out, and its SASS.

A cuda kernel's image is whatever the compiler made of its PTX: PTX text (the driver compiles
it at load), an ELF cubin (SASS for one architecture) or a fatbin (both). A cpu kernel's image
(version 5) is a host object: an x86-64 ELF relocatable, read with `hexir_format.elf`, the
same parser the runtime's loader uses. The flavour decides what can be done with it: a cubin
or a fatbin holds SASS that `cuobjdump --dump-sass` prints; a host object is for
`objdump -d`.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

from hexir_format import elf

from hxb_dump.errors import DumpError

ELF_MAGIC = b"\x7fELF"
ELF_HEADER = 64
EM_CUDA = 190
EM_X86_64 = 62
FATBIN_MAGIC = bytes.fromhex("50ED55BA")
FATBIN_HEADER = 16
FATBIN_ENTRY = 40
FATBIN_KINDS = {1: "PTX", 2: "ELF"}
PTX_TARGET = re.compile(rb"\.target\s+(sm_\w+)")
SNIFF_BYTES = 4096


def flavour(image: bytes) -> str:
    """`host object`, `ELF cubin`, `fatbin`, `PTX text` or `unknown`, from the first bytes."""
    if image.startswith(ELF_MAGIC):
        machine = struct.unpack_from("<H", image, 18)[0] if len(image) >= 20 else None
        return "host object" if machine == EM_X86_64 else "ELF cubin"
    if image.startswith(FATBIN_MAGIC):
        return "fatbin"
    if image.startswith(b"//") or b".target" in image[:256]:
        return "PTX text"
    return "unknown"


def ptx_target(image: bytes) -> str | None:
    """The `.target sm_XX` of PTX text, which says what a cubin should be built for."""
    match = PTX_TARGET.search(image[:SNIFF_BYTES])
    return match.group(1).decode("ascii") if match else None


def elf_arch(image: bytes) -> str | None:
    """The SM a CUDA ELF (e_machine 190) was built for, from e_flags: bits 8-15 since ELF ABI
    version 8 (CUDA 13), the low byte before it."""
    if len(image) < ELF_HEADER or struct.unpack_from("<H", image, 18)[0] != EM_CUDA:
        return None
    flags = struct.unpack_from("<I", image, 48)[0]
    sm = (flags >> 8) & 0xFF if image[8] >= 8 else flags & 0xFF
    return f"sm_{sm}" if sm else None


def fatbin_contents(image: bytes) -> list[dict[str, str]] | None:
    """The entries of a fatbin (PTX or ELF, and for which SM), or None when its headers do not
    add up. The layout is NVIDIA's undocumented one, read defensively for display only:
    a 16-byte header (magic, version u16, header size u16, payload size u64), then entries of
    kind u16, version u16, header size u32, padded payload size u32, ..., sm u32 at +28."""
    if len(image) < FATBIN_HEADER:
        return None
    _, _, header, size = struct.unpack_from("<IHHQ", image, 0)
    end = header + size
    if header < FATBIN_HEADER or end > len(image):
        return None
    entries, at = [], header
    while at < end:
        if end - at < FATBIN_ENTRY:
            return None
        kind, _, entry_header, payload = struct.unpack_from("<HHII", image, at)
        if entry_header < FATBIN_ENTRY or payload > end - at - entry_header:
            return None
        sm = struct.unpack_from("<I", image, at + 28)[0]
        entries.append({"kind": FATBIN_KINDS.get(kind, f"kind{kind}"), "arch": f"sm_{sm}"})
        at += entry_header + payload
    return entries


def describe(image: bytes) -> dict[str, object]:
    """Size, flavour and what the image targets (`target` for PTX and ELF, `contents` for a
    fatbin; None where it cannot be told)."""
    kind = flavour(image)
    facts: dict[str, object] = {"size": len(image), "flavour": kind, "target": None}
    if kind == "PTX text":
        facts["target"] = ptx_target(image)
    elif kind == "ELF cubin":
        facts["target"] = elf_arch(image)
    elif kind == "fatbin":
        facts["contents"] = fatbin_contents(image)
    elif kind == "host object":
        facts |= host_object(image)
    return facts


def host_object(image: bytes) -> dict[str, object]:
    """Format, architecture and symbols of a host image; FormatError when it is damaged."""
    described = elf.describe(elf.parse_object(image))
    return {"format": described["format"], "target": None,
            "functions": described["functions"], "undefined": described["undefined"]}


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
    contents = fatbin_contents(image) if kind == "fatbin" else None
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
