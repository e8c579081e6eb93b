"""A compiled kernel (`DeviceImage`) and a reader that says what an image contains.

The reader exists so the compiler can prove, without a GPU and without `cuobjdump`, that the
image it embeds names the kernel the executable entry names: a fatbin is a list of PTX and
ELF (CUBIN) parts for given architectures; PTX declares its kernels as `.entry <name>(`; a
CUBIN lists them as FUNC symbols marked as entries. Only uncompressed parts can be read,
which is what `cuda.compile_kernels` writes.
"""

import re
import struct
from dataclasses import dataclass
from typing import Literal

from hexir_compiler.errors import CompileError

Flavour = Literal["fatbin", "cubin", "ptx"]

FATBIN_MAGIC = 0xBA55ED50  # bytes 50 ED 55 BA
ELF_MAGIC = b"\x7fELF"
_FATBIN_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the parts
_PART_HEADER = struct.Struct("<HHIQ")  # kind, version, header size, payload size
_PART_ARCH_OFFSET = 28  # u32 sm number (75, 90 ...) inside a part header
_PART_FLAGS_OFFSET = 40  # u64 flags
_COMPRESSED = 0x2000 | 0x8000  # LZ4, zstd
_PART_KINDS = {1: "ptx", 2: "elf"}
_PTX_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$][\w$]*)\s*\(")


@dataclass(frozen=True)
class DeviceImage:
    """One kernel's device code and the geometry it is launched with (x, y, z)."""

    image: bytes
    flavour: Flavour
    grid: tuple[int, int, int]
    block: tuple[int, int, int]


@dataclass(frozen=True)
class Part:
    """One piece of device code: PTX text or an ELF CUBIN, for `sm_<arch>`."""

    kind: Literal["ptx", "elf"]
    arch: int | None  # None for bare PTX / CUBIN files (the fatbin header carries it)
    kernels: tuple[str, ...]


def flavour_of(image: bytes) -> Flavour:
    """Tell a fatbin, an ELF CUBIN and PTX text apart by their first bytes."""
    if len(image) >= 4 and struct.unpack_from("<I", image)[0] == FATBIN_MAGIC:
        return "fatbin"
    if image.startswith(ELF_MAGIC):
        return "cubin"
    if _PTX_ENTRY.search(image):
        return "ptx"
    raise CompileError(f"not a device image: starts with {image[:8].hex(' ')}")


def parts(image: bytes) -> list[Part]:
    """The PTX/CUBIN parts of an image and the kernels each one defines."""
    match flavour_of(image):
        case "fatbin":
            return list(_fatbin_parts(image))
        case "cubin":
            return [Part("elf", None, elf_kernels(image))]
        case "ptx":
            return [Part("ptx", None, ptx_entries(image))]


def ptx_entries(ptx: bytes) -> tuple[str, ...]:
    """Names declared with `.entry` in PTX text."""
    return tuple(m.decode() for m in _PTX_ENTRY.findall(ptx))


def elf_kernels(elf: bytes) -> tuple[str, ...]:
    """Kernels of a CUBIN (64-bit little-endian ELF): FUNC symbols marked as CUDA entries.

    Helpers ptxas adds (such as the slow path of a float division) are FUNC symbols too, but
    without the entry mark, so they are left out."""
    try:
        (shoff,) = struct.unpack_from("<Q", elf, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
        sections = [
            struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)
        ]
        names: list[str] = []
        for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
            if sh_type != 2 or not entsize:  # SHT_SYMTAB
                continue
            strtab_offset = sections[link][4]
            for sym in range(offset, offset + size, entsize):
                st_name, st_info, st_other = struct.unpack_from("<IBB", elf, sym)
                if st_info & 0xF == 2 and st_other & 0x10:  # STT_FUNC, STO_CUDA_ENTRY
                    end = elf.index(b"\0", strtab_offset + st_name)
                    names.append(elf[strtab_offset + st_name : end].decode())
        return tuple(names)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as err:
        raise CompileError(f"malformed CUBIN: {err}") from None


def _fatbin_parts(image: bytes):
    _, _, header_size, total = _FATBIN_HEADER.unpack_from(image)
    offset, end = header_size, header_size + total
    if end > len(image):
        raise CompileError(f"malformed fatbin: {total} bytes of parts in a {len(image)}-byte image")
    while offset < end:
        kind, _, part_header, size = _PART_HEADER.unpack_from(image, offset)
        (arch,) = struct.unpack_from("<I", image, offset + _PART_ARCH_OFFSET)
        (flags,) = struct.unpack_from("<Q", image, offset + _PART_FLAGS_OFFSET)
        payload = image[offset + part_header : offset + part_header + size]
        offset += part_header + size
        if kind not in _PART_KINDS:
            continue
        if flags & _COMPRESSED:
            raise CompileError(f"fatbin part for sm_{arch} is compressed; cannot list its kernels")
        if _PART_KINDS[kind] == "ptx":
            yield Part("ptx", arch, ptx_entries(payload))
        else:
            yield Part("elf", arch, elf_kernels(payload))
