"""What a kernel's image is, read from its bytes: one reader for the compiler and hxb-dump.

A cuda kernel carries PTX text (the driver compiles it at load), an ELF cubin (SASS for one
architecture) or a fatbin (NVIDIA's container of PTX and cubin parts, each for one `sm_XX`);
a cpu kernel (version 5) carries a host object, read by `hexir_format.elf`. The compiler asks
which kernels each part defines, to prove the image it embeds names the kernel it describes;
hxb-dump asks the same to show it. Every length is checked before it is used: a damaged image
is one `FormatError`.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from hexir_format.errors import FormatError

ELF_MAGIC = b"\x7fELF"
EM_X86_64, EM_CUDA = 62, 190
FATBIN_MAGIC = bytes.fromhex("50ED55BA")
_FATBIN_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the parts
_PART_HEADER = struct.Struct("<HHIQ")  # kind, version, header size, payload size
_PART_ARCH, _PART_FLAGS = 28, 40  # u32 sm number, u64 flags, inside a part header
_COMPRESSED = 0x2000 | 0x8000  # LZ4, zstd
_PART_KINDS = {1: "ptx", 2: "elf"}
_PTX_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$][\w$]*)\s*\(")
_PTX_TARGET = re.compile(rb"\.target\s+(sm_\w+)")


@dataclass(frozen=True)
class Part:
    """One piece of device code: PTX text or an ELF cubin, for `sm_<arch>` (None for a bare
    PTX or cubin file, whose container says nothing)."""

    kind: str  # "ptx" or "elf"
    arch: int | None
    payload: bytes = field(repr=False)
    compressed: bool = False

    @property
    def kernels(self) -> tuple[str, ...]:
        """The kernels the part defines; FormatError when it cannot be read (compressed)."""
        if self.compressed:
            raise FormatError(f"the {self.kind} part for sm_{self.arch} is compressed; its "
                              "kernels cannot be listed")
        return ptx_entries(self.payload) if self.kind == "ptx" else cubin_kernels(self.payload)


def flavour(image: bytes) -> str:
    """`host object`, `ELF cubin`, `fatbin`, `PTX text` or `unknown`, from the first bytes."""
    if image.startswith(ELF_MAGIC):
        machine = struct.unpack_from("<H", image, 18)[0] if len(image) >= 20 else None
        return "host object" if machine == EM_X86_64 else "ELF cubin"
    if image.startswith(FATBIN_MAGIC):
        return "fatbin"
    if image.startswith(b"//") or b".target" in image[:256] or _PTX_ENTRY.search(image):
        return "PTX text"
    return "unknown"


def parts(image: bytes) -> list[Part]:
    """The PTX and cubin parts of a cuda kernel's image; FormatError when its headers do not
    add up."""
    match flavour(image):
        case "fatbin":
            return _fatbin_parts(image)
        case "ELF cubin":
            return [Part("elf", None, image)]
        case "PTX text":
            return [Part("ptx", None, image)]
    raise FormatError(f"a {len(image)}-byte image that is neither PTX, a cubin nor a fatbin "
                      f"(it starts with {image[:8].hex(' ')})")


def ptx_entries(ptx: bytes) -> tuple[str, ...]:
    """Names declared with `.entry` in PTX text."""
    return tuple(m.decode() for m in _PTX_ENTRY.findall(ptx))


def ptx_target(ptx: bytes) -> str | None:
    """The `.target sm_XX` of PTX text, which says what a cubin should be built for."""
    match = _PTX_TARGET.search(ptx[:4096])
    return match.group(1).decode("ascii") if match else None


def cubin_arch(image: bytes) -> str | None:
    """The SM a CUDA ELF (e_machine 190) was built for, from e_flags: bits 8-15 since ELF ABI
    version 8 (CUDA 13), the low byte before it."""
    if len(image) < 64 or struct.unpack_from("<H", image, 18)[0] != EM_CUDA:
        return None
    flags = struct.unpack_from("<I", image, 48)[0]
    sm = (flags >> 8) & 0xFF if image[8] >= 8 else flags & 0xFF
    return f"sm_{sm}" if sm else None


def cubin_kernels(cubin: bytes) -> tuple[str, ...]:
    """Kernels of a cubin (64-bit little-endian ELF): FUNC symbols marked as CUDA entries.

    Helpers ptxas adds (such as the slow path of a float division) are FUNC symbols too, but
    without the entry mark, so they are left out."""
    try:
        (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", cubin, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize)
                    for i in range(shnum)]
        names: list[str] = []
        for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
            if sh_type != 2 or not entsize:  # SHT_SYMTAB
                continue
            strtab = sections[link][4]
            for sym in range(offset, offset + size, entsize):
                st_name, st_info, st_other = struct.unpack_from("<IBB", cubin, sym)
                if st_info & 0xF == 2 and st_other & 0x10:  # STT_FUNC, STO_CUDA_ENTRY
                    end = cubin.index(b"\0", strtab + st_name)
                    names.append(cubin[strtab + st_name:end].decode())
        return tuple(names)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as err:
        raise FormatError(f"malformed cubin: {err}") from None


def _fatbin_parts(image: bytes) -> list[Part]:
    """The layout is NVIDIA's, undocumented: a 16-byte header, then parts, each a header
    (kind, version, header size, payload size, ..., sm at +28, flags at +40) and its payload."""
    if len(image) < _FATBIN_HEADER.size:
        raise FormatError(f"malformed fatbin: {len(image)} bytes, shorter than its header")
    _, _, header, total = _FATBIN_HEADER.unpack_from(image)
    offset, end = header, header + total
    if header < _FATBIN_HEADER.size or end > len(image):
        raise FormatError(f"malformed fatbin: {total} bytes of parts after a {header}-byte "
                          f"header in a {len(image)}-byte image")
    found = []
    while offset < end:
        if end - offset < _PART_FLAGS + 8:
            raise FormatError(f"malformed fatbin: a part header at {offset} runs past {end}")
        kind, _, part_header, size = _PART_HEADER.unpack_from(image, offset)
        (arch,) = struct.unpack_from("<I", image, offset + _PART_ARCH)
        (flags,) = struct.unpack_from("<Q", image, offset + _PART_FLAGS)
        if part_header < _PART_FLAGS + 8 or size > end - offset - part_header:
            raise FormatError(f"malformed fatbin: the part at {offset} runs past {end}")
        payload = image[offset + part_header:offset + part_header + size]
        offset += part_header + size
        if kind not in _PART_KINDS:
            continue
        found.append(Part(_PART_KINDS[kind], arch, payload, bool(flags & _COMPRESSED)))
    return found
