"""What a kernel's image is, read from its bytes: one reader for the compiler and hxb-dump.

A cuda kernel carries PTX text (the driver compiles it at load), an ELF cubin (SASS for one
architecture) or a fatbin (NVIDIA's container of PTX and cubin parts, each for one `sm_XX`);
a cpu kernel (version 5) carries a host object, read by `hexir_format.elf`. The compiler asks
which kernels each part defines, to prove the image it embeds names the kernel it describes;
hxb-dump asks the same to show it. Every length is checked before it is used: a damaged image
is one `FormatError`. A cubin is read through `hexir_format.elf`'s ELF64 declarations, a
fatbin through the two below: no field is found by a number written in the code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import construct
from construct import Bytes, Int16ul, Int32ul, Int64ul, Padding, Struct

from hexir_format import elf
from hexir_format import layout as L
from hexir_format.errors import FormatError

ELF_MAGIC = elf.MAGIC
EM_X86_64, EM_CUDA = elf.EM_X86_64, 190
STO_CUDA_ENTRY = 0x10  # st_other's mark of a kernel entry (helpers lack it)
FATBIN_MAGIC = bytes.fromhex("50ED55BA")
# NVIDIA's fatbin, undocumented: this header, then parts, each a header below and its payload.
FatbinHeader = Struct(
    "magic" / Bytes(4),
    "version" / Int16ul,
    "header_size" / Int16ul,
    "parts_size" / Int64ul,
)
FatbinPart = Struct(
    "kind" / Int16ul,  # 1 PTX, 2 ELF
    "version" / Int16ul,
    "header_size" / Int32ul,  # at least this struct's size
    "payload_size" / Int64ul,
    Padding(12),  # not read
    "arch" / Int32ul,  # the sm number
    Padding(8),  # not read
    "flags" / Int64ul,
)
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
        machine = _header_field(image, "e_machine")
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
    if len(image) < L.size(elf.Elf64_Ehdr):
        return None
    h = L.compiled(elf.Elf64_Ehdr).parse(bytes(image[:L.size(elf.Elf64_Ehdr)]))
    if h.e_machine != EM_CUDA:
        return None
    sm = (h.e_flags >> 8) & 0xFF if h.e_ident.ei_abiversion >= 8 else h.e_flags & 0xFF
    return f"sm_{sm}" if sm else None


def _header_field(image: bytes, name: str) -> int | None:
    """One field of an ELF64 header, or None when the image is too short to hold it."""
    at, decl = L.offset_of(elf.Elf64_Ehdr, name), L.field_of(elf.Elf64_Ehdr, name)
    return decl.parse(bytes(image[at:at + L.size(decl)])) if len(image) >= at + L.size(decl) \
        else None


def _record(decl: construct.Construct, data: bytes, at: int, what: str):
    """The record `decl` at `at`, or FormatError when `data` ends before it does."""
    end = at + L.size(decl)
    if end > len(data):
        raise FormatError(f"malformed {what}: a {L.size(decl)}-byte record at offset {at} runs "
                          f"past the end of the {len(data)}-byte image")
    return L.compiled(decl).parse(bytes(data[at:end]))


def cubin_kernels(cubin: bytes) -> tuple[str, ...]:
    """Kernels of a cubin (64-bit little-endian ELF): FUNC symbols marked as CUDA entries.

    Helpers ptxas adds (such as the slow path of a float division) are FUNC symbols too, but
    without the entry mark, so they are left out."""
    h = _record(elf.Elf64_Ehdr, cubin, 0, "cubin")
    sections = [_record(elf.Elf64_Shdr, cubin, h.e_shoff + i * h.e_shentsize, "cubin")
                for i in range(h.e_shnum)]
    names: list[str] = []
    try:
        for s in sections:
            if s.sh_type != elf.SHT_SYMTAB or not s.sh_entsize:
                continue
            strtab = sections[s.sh_link].sh_offset
            for at in range(s.sh_offset, s.sh_offset + s.sh_size, s.sh_entsize):
                sym = _record(elf.Elf64_Sym, cubin, at, "cubin")
                if sym.st_info & 0xF == elf.STT_FUNC and sym.st_other & STO_CUDA_ENTRY:
                    end = cubin.index(b"\0", strtab + sym.st_name)
                    names.append(cubin[strtab + sym.st_name:end].decode())
    except (IndexError, ValueError, UnicodeDecodeError) as err:
        raise FormatError(f"malformed cubin: {err}") from None
    return tuple(names)


def _fatbin_parts(image: bytes) -> list[Part]:
    """The parts of a fatbin (`FatbinHeader`, then each `FatbinPart` and its payload)."""
    if len(image) < L.size(FatbinHeader):
        raise FormatError(f"malformed fatbin: {len(image)} bytes, shorter than its header")
    h = _record(FatbinHeader, image, 0, "fatbin")
    header, total = h.header_size, h.parts_size
    offset, end = header, header + total
    if header < L.size(FatbinHeader) or end > len(image):
        raise FormatError(f"malformed fatbin: {total} bytes of parts after a {header}-byte "
                          f"header in a {len(image)}-byte image")
    found = []
    while offset < end:
        if end - offset < L.size(FatbinPart):
            raise FormatError(f"malformed fatbin: a part header at {offset} runs past {end}")
        part = _record(FatbinPart, image, offset, "fatbin")
        kind, part_header, size = part.kind, part.header_size, part.payload_size
        arch, flags = part.arch, part.flags
        if part_header < L.size(FatbinPart) or size > end - offset - part_header:
            raise FormatError(f"malformed fatbin: the part at {offset} runs past {end}")
        payload = image[offset + part_header:offset + part_header + size]
        offset += part_header + size
        if kind not in _PART_KINDS:
            continue
        found.append(Part(_PART_KINDS[kind], arch, payload, bool(flags & _COMPRESSED)))
    return found
