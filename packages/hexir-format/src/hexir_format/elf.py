"""ELF64 x86-64 relocatable objects: the host image of a cpu kernel, parsed without trust.

A `.hxb` embeds each compiled cpu kernel as a *host image*: the ELF relocatable object (ET_REL)
that LLVM's `emit_object` writes for x86-64 (`reloc="pic"`, `codemodel="small"`). The contract:

- ELF64, little-endian, e_machine EM_X86_64 (62), e_type ET_REL (1), SHT_RELA relocations.
- The kernel entry is a defined global or weak STT_FUNC symbol named like the kernel, with the
  signature `void name(void *buf_0, ..., void *buf_{n-1}, int64_t lo, int64_t hi)`: one bare
  pointer per buffer (inputs, then the destination), then the half-open range [lo, hi) of the
  kernel's outermost parallel loop.
- Undefined symbols name libm/libc functions; which ones a loader accepts, and which relocation
  types it applies, is the loader's business (`hexir_runtime.hal.hostcode`).

The structures are declared once, below, with construct. `parse_object` checks every offset,
size, count and index it reads against what holds it, so a damaged or foreign object becomes one
single-line `FormatError` naming the field, what was expected and what was found; nothing is
copied (section data are memoryview slices of the caller's buffer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

import construct
from construct import Bytes, Int8ul, Int16ul, Int32ul, Int64sl, Int64ul, Struct

from hexir_format import layout as L
from hexir_format.errors import FormatError

# e_ident's bytes, as the ELF specification numbers them (EI_MAG0-3, EI_CLASS, EI_DATA, ...).
Elf64_Ident = Struct(
    "ei_mag" / Bytes(4),
    "ei_class" / Int8ul,
    "ei_data" / Int8ul,
    "ei_version" / Int8ul,
    "ei_osabi" / Int8ul,
    "ei_abiversion" / Int8ul,
    "ei_pad" / Bytes(7),
)

Elf64_Ehdr = Struct(
    "e_ident" / Elf64_Ident,
    "e_type" / Int16ul,
    "e_machine" / Int16ul,
    "e_version" / Int32ul,
    "e_entry" / Int64ul,
    "e_phoff" / Int64ul,
    "e_shoff" / Int64ul,
    "e_flags" / Int32ul,
    "e_ehsize" / Int16ul,
    "e_phentsize" / Int16ul,
    "e_phnum" / Int16ul,
    "e_shentsize" / Int16ul,
    "e_shnum" / Int16ul,
    "e_shstrndx" / Int16ul,
)

Elf64_Shdr = Struct(
    "sh_name" / Int32ul,
    "sh_type" / Int32ul,
    "sh_flags" / Int64ul,
    "sh_addr" / Int64ul,
    "sh_offset" / Int64ul,
    "sh_size" / Int64ul,
    "sh_link" / Int32ul,
    "sh_info" / Int32ul,
    "sh_addralign" / Int64ul,
    "sh_entsize" / Int64ul,
)

Elf64_Sym = Struct(
    "st_name" / Int32ul,
    "st_info" / Int8ul,
    "st_other" / Int8ul,
    "st_shndx" / Int16ul,
    "st_value" / Int64ul,
    "st_size" / Int64ul,
)

Elf64_Rela = Struct(
    "r_offset" / Int64ul,
    "r_info" / Int64ul,
    "r_addend" / Int64sl,
)

# The four sizes (64, 64, 24, 24), through `layout.size`'s cache of construct's sizeof().
EHDR_BYTES, SHDR_BYTES, SYM_BYTES, RELA_BYTES = (
    L.size(d) for d in (Elf64_Ehdr, Elf64_Shdr, Elf64_Sym, Elf64_Rela))

MAGIC = b"\x7fELF"
ET_REL, EM_X86_64 = 1, 62
SHT_NULL, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOBITS, SHT_REL = 0, 2, 3, 4, 8, 9
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR, SHF_TLS = 0x1, 0x2, 0x4, 0x400
SHN_UNDEF, SHN_LORESERVE, SHN_ABS, SHN_COMMON = 0, 0xFF00, 0xFFF1, 0xFFF2
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE, STT_COMMON, STT_TLS = range(7)

# Largest section alignment accepted: a page, so a loader can honour it inside its mapping.
MAX_ALIGN = 4096

E_TYPES = {0: "ET_NONE", 1: "ET_REL", 2: "ET_EXEC", 3: "ET_DYN", 4: "ET_CORE"}
E_MACHINES = {3: "EM_386", 40: "EM_ARM", 62: "EM_X86_64", 183: "EM_AARCH64", 243: "EM_RISCV"}
SYMBOL_TYPES = {STT_NOTYPE: "STT_NOTYPE", STT_OBJECT: "STT_OBJECT", STT_FUNC: "STT_FUNC",
                STT_SECTION: "STT_SECTION", STT_FILE: "STT_FILE", STT_COMMON: "STT_COMMON",
                STT_TLS: "STT_TLS"}

# The x86-64 psABI relocation types by number, for messages, and the width in bytes of the
# field each of the common ones patches (an unlisted type is bounds-checked as 1 byte).
RELOCATION_NAMES = dict(enumerate(
    "NONE 64 PC32 GOT32 PLT32 COPY GLOB_DAT JUMP_SLOT RELATIVE GOTPCREL 32 32S 16 PC16 8 PC8 "
    "DTPMOD64 DTPOFF64 TPOFF64 TLSGD TLSLD DTPOFF32 GOTTPOFF TPOFF32 PC64 GOTOFF64 GOTPC32 "
    "GOT64 GOTPCREL64 GOTPC64 GOTPLT64 PLTOFF64 SIZE32 SIZE64 GOTPC32_TLSDESC TLSDESC_CALL "
    "TLSDESC IRELATIVE RELATIVE64 PC32_BND PLT32_BND GOTPCRELX REX_GOTPCRELX".split()))
RELOCATION_WIDTHS = {1: 8, 2: 4, 3: 4, 4: 4, 9: 4, 10: 4, 11: 4, 12: 2, 13: 2, 14: 1, 15: 1,
                     24: 8, 26: 4, 41: 4, 42: 4}


def relocation_name(kind: int) -> str:
    """`R_X86_64_PC32 (2)`-style text for any relocation type number."""
    name = RELOCATION_NAMES.get(kind)
    return f"R_X86_64_{name} ({kind})" if name else f"unknown type {kind}"


@dataclass(frozen=True)
class Section:
    """A section header, checked; `data` is a view of the object's bytes."""

    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    align: int  # sh_addralign, 1 for 0
    link: int
    info: int
    data: memoryview  # empty for SHT_NOBITS

    @property
    def label(self) -> str:
        return f"section {self.index} ({self.name})"

    @property
    def alloc(self) -> bool:
        return bool(self.flags & SHF_ALLOC)


@dataclass(frozen=True)
class Symbol:
    """A symbol table entry; `bind` and `type` are st_info's two halves."""

    index: int
    name: str
    bind: int
    type: int
    section: int  # st_shndx: a section index, SHN_UNDEF, SHN_ABS or SHN_COMMON
    value: int
    size: int

    @property
    def defined(self) -> bool:
        return self.section != SHN_UNDEF


@dataclass(frozen=True)
class Relocation:
    """An Elf64_Rela: `offset` is checked to leave room for the field inside its section."""

    offset: int
    type: int
    symbol: int
    addend: int


@dataclass(frozen=True)
class RelocationTable:
    """One SHT_RELA section: the relocations it applies to section `target`."""

    index: int
    target: int
    relocations: tuple[Relocation, ...]


@dataclass(frozen=True)
class ElfObject:
    """A parsed object; `what` names it in messages ("host image of kernel 'relu_1'")."""

    what: str
    size: int
    machine: int
    sections: tuple[Section, ...]
    symbols: tuple[Symbol, ...]
    relocations: tuple[RelocationTable, ...]

    @property
    def functions(self) -> tuple[str, ...]:
        """The defined global and weak STT_FUNC symbols: the kernels an image can offer."""
        return tuple(s.name for s in self.symbols if s.type == STT_FUNC and s.defined
                     and s.bind in (STB_GLOBAL, STB_WEAK))

    @property
    def undefined(self) -> tuple[str, ...]:
        """The names the object needs from outside (libm, libc)."""
        return tuple(s.name for s in self.symbols[1:] if not s.defined)


def parse_object(data: bytes | bytearray | memoryview, what: str = "host image") -> ElfObject:
    """Parse and check an ELF64 x86-64 relocatable object; FormatError for anything off."""
    return _Parser(memoryview(data).cast("B"), what).parse()


class _Parser:
    """One pass over the headers and tables, each checked before it is used."""

    def __init__(self, view: memoryview, what: str):
        self.view, self.what, self.size = view, what, len(view)
        # Each name decoded once per string-table offset, and the names of distinct offsets
        # bounded by the table's size: N symbols naming one L-byte string cost L, not N x L.
        self.names: dict[tuple[str, int], str] = {}
        self.decoded: dict[str, int] = {}  # string table -> bytes of names decoded from it

    def fail(self, message: str, field: str, offset: int | None = None) -> NoReturn:
        raise FormatError(f"{self.what}: {message}", field=field, offset=offset)

    def parse(self) -> ElfObject:
        h = self.header()
        self.shoff = h.e_shoff
        self.headers = L.table(Elf64_Shdr, self.view[h.e_shoff:], h.e_shnum)
        shstrndx = L.offset_of(Elf64_Ehdr, "e_shstrndx")
        if not 0 < h.e_shstrndx < h.e_shnum:
            self.fail(f"e_shstrndx {h.e_shstrndx} at offset {shstrndx} is not a section index "
                      f"(the object has {h.e_shnum} sections)", "e_shstrndx", shstrndx)
        if self.headers[h.e_shstrndx].sh_type != SHT_STRTAB:
            self.fail(f"e_shstrndx {h.e_shstrndx} names a section of type "
                      f"{self.headers[h.e_shstrndx].sh_type}, expected {SHT_STRTAB} "
                      "(SHT_STRTAB)", "e_shstrndx", shstrndx)
        names = bytes(self.contents(h.e_shstrndx, f"section {h.e_shstrndx}"))
        self.sections = tuple(self.section(i, names, h.e_shstrndx)
                              for i in range(len(self.headers)))
        symtabs = [s for s in self.sections if s.type == SHT_SYMTAB]
        if len(symtabs) > 1:
            self.fail(f"{symtabs[1].label} is a second SHT_SYMTAB; a relocatable object has "
                      "one", "sh_type", self.at(symtabs[1].index, "sh_type"))
        symtab = symtabs[0] if symtabs else None
        symbols = self.symbols(symtab) if symtab else ()
        relocations = tuple(self.relocations(s, symtab, len(symbols)) for s in self.sections
                            if s.type == SHT_RELA)
        return ElfObject(self.what, self.size, h.e_machine, self.sections, symbols,
                         relocations)

    def header(self):
        if self.size < EHDR_BYTES:
            self.fail(f"is {self.size} bytes, too short for the {EHDR_BYTES}-byte ELF "
                      "header", "e_ident", 0)
        h = _record(Elf64_Ehdr, self.view, 0)
        at = {field: L.offset_of(Elf64_Ehdr, field) for field in (
            "e_ident", "e_ident.ei_class", "e_ident.ei_data", "e_ident.ei_version", "e_type",
            "e_machine", "e_shnum", "e_shentsize", "e_shoff")}
        if h.e_ident.ei_mag != MAGIC:
            self.fail(f"bad magic {h.e_ident.ei_mag!r} in e_ident at offset {at['e_ident']}, "
                      f"expected {MAGIC!r}: not an ELF object", "e_ident", at["e_ident"])
        for ident, field, want, meaning in (("ei_class", "EI_CLASS", 2, "ELFCLASS64"),
                                            ("ei_data", "EI_DATA", 1, "ELFDATA2LSB, little-endian"),
                                            ("ei_version", "EI_VERSION", 1, "EV_CURRENT")):
            if (found := h.e_ident[ident]) != want:
                where = at[f"e_ident.{ident}"]
                self.fail(f"{field} {found} at offset {where}, expected {want} ({meaning})",
                          field, where)
        if h.e_type != ET_REL:
            self.fail(f"e_type {h.e_type} ({E_TYPES.get(h.e_type, 'unknown')}) at offset "
                      f"{at['e_type']}, expected {ET_REL} (ET_REL, a relocatable object)",
                      "e_type", at["e_type"])
        if h.e_machine != EM_X86_64:
            self.fail(f"e_machine {h.e_machine} ({E_MACHINES.get(h.e_machine, 'unknown')}) at "
                      f"offset {at['e_machine']}, expected {EM_X86_64} (EM_X86_64)", "e_machine",
                      at["e_machine"])
        if h.e_shnum == 0:
            self.fail(f"e_shnum 0 at offset {at['e_shnum']}: no section table (extended "
                      "numbering is not supported)", "e_shnum", at["e_shnum"])
        if h.e_shentsize != SHDR_BYTES:
            self.fail(f"e_shentsize {h.e_shentsize} at offset {at['e_shentsize']}, expected "
                      f"{SHDR_BYTES}", "e_shentsize", at["e_shentsize"])
        end = h.e_shoff + h.e_shnum * SHDR_BYTES
        if end > self.size:
            self.fail(f"e_shoff {h.e_shoff} at offset {at['e_shoff']} puts the {h.e_shnum}-entry "
                      f"section table at [{h.e_shoff}, {end}), past the end of the "
                      f"{self.size}-byte object", "e_shoff", at["e_shoff"])
        return h

    def at(self, i: int, field: str) -> int:
        """The file offset of a field of section header `i`."""
        return self.shoff + i * SHDR_BYTES + L.offset_of(Elf64_Shdr, field)

    def contents(self, i: int, label: str) -> memoryview:
        sh = self.headers[i]
        if i == 0 or sh.sh_type == SHT_NOBITS:
            return self.view[0:0]
        if sh.sh_offset > self.size or sh.sh_size > self.size - sh.sh_offset:
            self.fail(f"{label}: sh_offset {sh.sh_offset} + sh_size {sh.sh_size} runs past the "
                      f"end of the {self.size}-byte object", "sh_offset", self.at(i, "sh_offset"))
        return self.view[sh.sh_offset:sh.sh_offset + sh.sh_size]

    def section(self, i: int, names: bytes, shstrndx: int) -> Section:
        sh = self.headers[i]
        name = self.string(names, sh.sh_name, f"section {i}", "sh_name", f"section {shstrndx}",
                           self.at(i, "sh_name"))
        label = f"section {i} ({name})"
        align = sh.sh_addralign or 1
        if align & (align - 1) or align > MAX_ALIGN:
            self.fail(f"{label}: sh_addralign {sh.sh_addralign} is not a power of two up to "
                      f"{MAX_ALIGN}", "sh_addralign", self.at(i, "sh_addralign"))
        if sh.sh_type == SHT_REL:
            self.fail(f"{label}: sh_type SHT_REL (relocations without addends), expected "
                      "SHT_RELA on x86-64", "sh_type", self.at(i, "sh_type"))
        return Section(i, name, sh.sh_type, sh.sh_flags, sh.sh_offset, sh.sh_size, align,
                       sh.sh_link, sh.sh_info, self.contents(i, label))

    def entries(self, s: Section, entry: construct.Construct) -> int:
        """Check a table section's shape; its number of entries."""
        entsize, want = self.headers[s.index].sh_entsize, L.size(entry)
        if entsize != want or s.size % want:
            self.fail(f"{s.label}: sh_entsize {entsize} and sh_size {s.size}, expected entries "
                      f"of {want} bytes", "sh_entsize", self.at(s.index, "sh_entsize"))
        return s.size // want

    def symbols(self, symtab: Section) -> tuple[Symbol, ...]:
        count = self.entries(symtab, Elf64_Sym)
        link = symtab.link
        if not 0 < link < len(self.sections) or self.sections[link].type != SHT_STRTAB:
            self.fail(f"{symtab.label}: sh_link {link} is not the index of a SHT_STRTAB section",
                      "sh_link", self.at(symtab.index, "sh_link"))
        strtab = bytes(self.sections[link].data)
        out = []
        for j, raw in enumerate(L.table(Elf64_Sym, symtab.data, count)):
            at = symtab.offset + j * SYM_BYTES
            where = f"{symtab.label}: symbol {j}"
            name = self.string(strtab, raw.st_name, where, "st_name", f"section {link}",
                               at + L.offset_of(Elf64_Sym, "st_name"))
            shndx = raw.st_shndx
            if shndx not in (SHN_UNDEF, SHN_ABS, SHN_COMMON):
                if shndx >= len(self.sections):
                    field = at + L.offset_of(Elf64_Sym, "st_shndx")
                    self.fail(f"{where} ({name}): st_shndx 0x{shndx:x} at offset {field} is "
                              f"neither a section index (the object has {len(self.sections)}) "
                              "nor SHN_UNDEF/SHN_ABS/SHN_COMMON", "st_shndx", field)
                home = self.sections[shndx]
                if raw.st_value > home.size:
                    field = at + L.offset_of(Elf64_Sym, "st_value")
                    self.fail(f"{where} ({name}): st_value 0x{raw.st_value:x} at offset {field} "
                              f"is past the end of {home.label} ({home.size} bytes)",
                              "st_value", field)
            out.append(Symbol(j, name, raw.st_info >> 4, raw.st_info & 0xF, shndx,
                              raw.st_value, raw.st_size))
        return tuple(out)

    def relocations(self, rela: Section, symtab: Section | None, symbols: int) -> RelocationTable:
        count = self.entries(rela, Elf64_Rela)
        if symtab is None or rela.link != symtab.index:
            self.fail(f"{rela.label}: sh_link {rela.link} is not the index of the symbol table",
                      "sh_link", self.at(rela.index, "sh_link"))
        if not 0 < rela.info < len(self.sections) or self.sections[rela.info].type in (
                SHT_NULL, SHT_NOBITS):
            self.fail(f"{rela.label}: sh_info {rela.info} is not the index of a section with "
                      "contents to relocate", "sh_info", self.at(rela.index, "sh_info"))
        target = self.sections[rela.info]
        out = []
        for k, raw in enumerate(L.table(Elf64_Rela, rela.data, count)):
            at = rela.offset + k * RELA_BYTES
            kind, symbol = raw.r_info & 0xFFFFFFFF, raw.r_info >> 32
            where = f"{rela.label}: relocation {k} at offset 0x{raw.r_offset:x}"
            if symbol >= symbols:
                field = at + L.offset_of(Elf64_Rela, "r_info")
                self.fail(f"{where}: r_info symbol {symbol} at offset {field} is past the end "
                          f"of the {symbols}-entry symbol table", "r_info", field)
            width = RELOCATION_WIDTHS.get(kind, 1)
            if raw.r_offset + width > target.size:
                self.fail(f"{where} ({relocation_name(kind)}, {width} bytes, r_offset) is past "
                          f"the end of section {target.index} ({target.name}, {target.size} "
                          "bytes)", "r_offset", at + L.offset_of(Elf64_Rela, "r_offset"))
            out.append(Relocation(raw.r_offset, kind, symbol, raw.r_addend))
        return RelocationTable(rela.index, target.index, tuple(out))

    def string(self, table: bytes, offset: int, where: str, field: str, table_label: str,
               at: int) -> str:
        """The NUL-terminated, printable name at `offset` of a string table."""
        name = self.names.get((table_label, offset))
        if name is not None:
            return name
        end = table.find(b"\0", offset) if offset < len(table) else -1
        total = self.decoded.get(table_label, 0) + max(end - offset, 0)
        if total > 2 * len(table):
            self.fail(f"{where}: {field} {offset} at offset {at} brings the names read from the "
                      f"string table ({table_label}, {len(table)} bytes) to {total} bytes of "
                      "names, more than twice its size (names overlap only where one is the "
                      "tail of another)", field, at)
        self.decoded[table_label] = total
        try:
            name = table[offset:end].decode("utf-8") if end >= 0 else ""
        except UnicodeDecodeError:
            name = "\0"
        if offset >= len(table):
            problem = f"is past the end of the string table ({table_label}, {len(table)} bytes)"
        elif end < 0:
            problem = f"has no NUL terminator in the string table ({table_label})"
        elif not name.isprintable():
            problem = f"is not printable UTF-8 in the string table ({table_label})"
        else:
            self.names[table_label, offset] = name
            return name
        self.fail(f"{where}: {field} {offset} at offset {at} {problem}", field, at)


def _record(decl: construct.Construct, data: memoryview, at: int):
    """A fixed-size record the caller has bounds-checked (construct compiled: ~3 us each)."""
    return L.compiled(decl).parse(bytes(data[at:at + L.size(decl)]))
