"""The host-image parser: the checked-in objects read back, and damaged ones are refused.

The objects come from `packages/hexir-runtime/tests/fixtures/host/generate.py` (llvmlite); this
file only reads them. Each damaged variant is made here by patching one field of a good object,
and must come back as one single-line FormatError that names that field.
"""

import pathlib
import random
import struct

import pytest

from hexir_format import FormatError, elf

HOST = pathlib.Path(__file__).resolve().parents[3] / "packages/hexir-runtime/tests/fixtures/host"


def fixture(name: str) -> bytes:
    return (HOST / f"{name}.o").read_bytes()


def section(obj: elf.ElfObject, name: str) -> elf.Section:
    return next(s for s in obj.sections if s.name == name)


def patched(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def shdr(data: bytes, index: int, field: str) -> int:
    """The file offset of `field` in section header `index`."""
    names = [sc.name for sc in elf.Elf64_Shdr.subcons]
    within = sum(sc.sizeof() for sc in elf.Elf64_Shdr.subcons[:names.index(field)])
    return struct.unpack_from("<Q", data, 40)[0] + index * elf.Elf64_Shdr.sizeof() + within


def test_structures_have_the_elf64_sizes():
    assert [d.sizeof() for d in (elf.Elf64_Ehdr, elf.Elf64_Shdr, elf.Elf64_Sym, elf.Elf64_Rela)] \
        == [64, 64, 24, 24]


def test_an_object_reads_back():
    obj = elf.parse_object(fixture("exp_f32"))
    assert (obj.machine, obj.size) == (elf.EM_X86_64, len(fixture("exp_f32")))
    assert (obj.functions, obj.undefined) == (("exp_f32",), ("expf",))
    text = section(obj, ".text")
    assert text.alloc and text.flags & elf.SHF_EXECINSTR and text.align == 16
    assert bytes(text.data) == fixture("exp_f32")[text.offset:text.offset + text.size]
    (table,) = obj.relocations
    assert table.target == text.index
    assert [(elf.relocation_name(r.type), obj.symbols[r.symbol].name, r.addend)
            for r in table.relocations] == [("R_X86_64_PLT32 (4)", "expf", -4)]


def test_relocation_types_and_nobits():
    lut, probe = elf.parse_object(fixture("lut")), elf.parse_object(fixture("probe"))
    kinds = {r.type for t in lut.relocations for r in t.relocations}
    assert kinds == {2, 42}  # PC32 to .rodata, REX_GOTPCRELX to the preemptible table
    kinds = {r.type for t in probe.relocations for r in t.relocations}
    assert kinds == {1, 24, 42}  # R_X86_64_64, PC64, REX_GOTPCRELX
    bss = section(probe, ".bss")
    assert bss.type == elf.SHT_NOBITS and bss.size == 32 and len(bss.data) == 0


def test_a_memoryview_is_not_copied():
    data = bytearray(fixture("lut"))
    text = section(elf.parse_object(memoryview(data)), ".text")
    data[text.offset] ^= 0xFF
    assert text.data[0] == data[text.offset]


def refused(data: bytes, field: str) -> FormatError:
    with pytest.raises(FormatError) as e:
        elf.parse_object(data, "host image of kernel 'k'")
    message = str(e.value)
    assert "\n" not in message and message.startswith("host image of kernel 'k': ")
    assert field in message and e.value.field == field, message
    return e.value


def test_every_truncation_is_refused():
    data = fixture("probe")
    for n in range(len(data)):
        with pytest.raises(FormatError) as e:
            elf.parse_object(data[:n])
        assert "\n" not in str(e.value)


def test_header_damage():
    data = fixture("exp_f32")
    assert "bad magic" in str(refused(b"\x7fELG" + data[4:], "e_ident"))
    assert "ELFCLASS64" in str(refused(patched(data, 4, "B", 1), "EI_CLASS"))
    assert "little-endian" in str(refused(patched(data, 5, "B", 2), "EI_DATA"))
    assert "ET_DYN" in str(refused(patched(data, 16, "<H", 3), "e_type"))
    assert "183 (EM_AARCH64)" in str(refused(patched(data, 18, "<H", 183), "e_machine"))
    refused(patched(data, 40, "<Q", len(data) - 64), "e_shoff")
    refused(patched(data, 58, "<H", 40), "e_shentsize")
    refused(patched(data, 60, "<H", 0), "e_shnum")
    refused(patched(data, 62, "<H", 99), "e_shstrndx")
    refused(patched(data, 62, "<H", 2), "e_shstrndx")  # .text is not a string table


def test_section_damage():
    data = fixture("exp_f32")
    obj = elf.parse_object(data)
    text, symtab, rela = (section(obj, n).index for n in (".text", ".symtab", ".rela.text"))
    e = refused(patched(data, shdr(data, text, "sh_offset"), "<Q", 1 << 40), "sh_offset")
    assert f"section {text} (.text)" in str(e) and e.offset == shdr(data, text, "sh_offset")
    refused(patched(data, shdr(data, text, "sh_size"), "<Q", (1 << 64) - 1), "sh_offset")
    refused(patched(data, shdr(data, text, "sh_name"), "<I", 10_000), "sh_name")
    refused(patched(data, shdr(data, text, "sh_addralign"), "<Q", 24), "sh_addralign")
    refused(patched(data, shdr(data, text, "sh_addralign"), "<Q", 1 << 20), "sh_addralign")
    refused(patched(data, shdr(data, rela, "sh_type"), "<I", elf.SHT_REL), "sh_type")
    refused(patched(data, shdr(data, symtab, "sh_link"), "<I", 77), "sh_link")
    refused(patched(data, shdr(data, symtab, "sh_link"), "<I", text), "sh_link")
    refused(patched(data, shdr(data, symtab, "sh_entsize"), "<Q", 16), "sh_entsize")
    refused(patched(data, shdr(data, rela, "sh_info"), "<I", 77), "sh_info")
    refused(patched(data, shdr(data, rela, "sh_link"), "<I", text), "sh_link")


def test_symbol_damage():
    data = fixture("exp_f32")
    obj = elf.parse_object(data)
    symtab = section(obj, ".symtab")
    entry = next(s.index for s in obj.symbols if s.name == "exp_f32")
    at = symtab.offset + entry * elf.Elf64_Sym.sizeof()
    assert "past the end of the string table" in str(refused(patched(data, at, "<I", 5000),
                                                             "st_name"))
    refused(patched(data, at + 6, "<H", 0x50), "st_shndx")
    refused(patched(data, at + 6, "<H", 0xFFFF), "st_shndx")  # SHN_XINDEX
    refused(patched(data, at + 8, "<Q", 1 << 32), "st_value")


def test_relocation_damage():
    data = fixture("exp_f32")
    obj = elf.parse_object(data)
    rela, text = section(obj, ".rela.text"), section(obj, ".text")
    e = refused(patched(data, rela.offset, "<Q", text.size - 2), "r_offset")
    assert f"past the end of section {text.index} (.text, {text.size} bytes)" in str(e)
    assert "R_X86_64_PLT32 (4), 4 bytes" in str(e)
    refused(patched(data, rela.offset + 8, "<Q", (len(obj.symbols) << 32) | 4), "r_info")


def test_random_damage_never_escapes_as_another_error():
    rng = random.Random(1)
    good = fixture("probe")
    obj = elf.parse_object(good)
    tables = [(s.offset, s.offset + s.size) for s in obj.sections
              if s.type in (elf.SHT_SYMTAB, elf.SHT_RELA)]
    shoff = struct.unpack_from("<Q", good, 40)[0]
    spans = [(0, 64), (shoff, len(good)), *tables]
    for _ in range(600):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            lo, hi = rng.choice(spans)
            data[rng.randrange(lo, hi)] = rng.randrange(256)
        try:
            elf.parse_object(bytes(data))
        except FormatError as e:
            assert "\n" not in str(e)


def with_names(data: bytes, names: bytes, offsets: list[int]) -> bytes:
    """`data` with its symbol table replaced by one symbol per offset (undefined, named at that
    offset of `names`), and `names` added to its string table; both appended to the object."""
    obj = elf.parse_object(data)
    symtab = next(s for s in obj.sections if s.type == elf.SHT_SYMTAB)
    out = bytearray(data)
    strtab_at, old = len(out), bytes(obj.sections[symtab.link].data)
    out += old + names
    symtab_at = len(out)
    out += bytes(elf.SYM_BYTES)  # the null symbol
    for offset in offsets:
        out += struct.pack("<IBBHQQ", len(old) + offset, 0x10, 0, 0, 0, 0)  # global, undefined
    for index, at, size in ((symtab.link, strtab_at, len(old) + len(names)),
                            (symtab.index, symtab_at, len(out) - symtab_at)):
        struct.pack_into("<Q", out, shdr(data, index, "sh_offset"), at)
        struct.pack_into("<Q", out, shdr(data, index, "sh_size"), size)
    return bytes(out)


def test_many_symbols_naming_one_string_decode_it_once():
    """20,000 symbols naming one 5,000-byte string hold one string, not 100 MB of copies."""
    name = b"x" * 5000
    obj = elf.parse_object(with_names(fixture("exp_f32"), name + b"\0", [0] * 20_000))
    assert len(obj.symbols) == 20_001
    assert len({id(s.name) for s in obj.symbols[1:]}) == 1
    assert obj.symbols[1].name == name.decode()


def test_names_that_overlap_beyond_a_string_table_s_size_are_refused():
    """Each of 3,000 symbols names a different suffix of one 4,000-byte string: 7.5 MB of
    names from a 4 KB table. A linker's table merges a name with the tail of another at most,
    so the names of distinct offsets total no more than twice the table."""
    e = refused(with_names(fixture("exp_f32"), b"y" * 4000 + b"\0", list(range(3000))),
                "st_name")
    assert "string table" in str(e) and "bytes of names" in str(e)
