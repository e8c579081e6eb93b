"""Parse a `.hxb` without trusting it and without copying its payloads.

Every offset, size and count comes off disk, so each is checked against what holds it before
anything is read through it, and a violation becomes one `FormatError` that names the field
and the absolute byte offset. Records are parsed through their declarations in `layout`,
which also say where each field lies: an error's offset is where its record lies plus the
declared offset of the field it names (`_Record.at`), never a number written here. What
differs between versions is the version's `layout.Format` (its symbol and executable
records, sections, commands and element types). Rodata and device images are returned as
memoryview slices of the caller's buffer (an mmap stays an mmap): validation touches headers
and tables only.
"""

from __future__ import annotations

import io
import itertools
import math
import mmap
from dataclasses import replace

import construct

from hexir_format import dims
from hexir_format import layout as L
from hexir_format.dims import Dim
from hexir_format.errors import FormatError
from hexir_format.model import (
    CPU_LEVELS,
    MAGIC,
    MAX_BYTES,
    MAX_IO_NAME,
    MAX_RANK,
    MAX_SYMBOL,
    NAME_BYTES,
    OPERAND_NAMES,
    V3_KINDS,
    Command,
    Device,
    DType,
    Executable,
    Function,
    Generation,
    KernelKind,
    Layout,
    Module,
    Op,
    Section,
    SectionKind,
    Slot,
    Symbol,
    TensorType,
)

#: What the reader parses: the file's bytes, or a mapping of it (the runtime's and hxb-dump's).
Buffer = bytes | bytearray | memoryview | mmap.mmap


class _Record:
    """One record parsed through its declaration, and the file offset it starts at: its fields
    read as attributes, and `at(field)` is where a field lies, for messages."""

    __slots__ = ("decl", "start", "values")

    def __init__(self, decl: construct.Construct, start: int, values: construct.Container):
        self.decl, self.start, self.values = decl, start, values

    def __getattr__(self, name: str):  # only for the record's fields (the slots come first)
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def has(self, field: str) -> bool:
        """Whether this record's layout (this version's) has the field."""
        return field in self.values

    def at(self, field: str) -> int:
        return self.start + L.offset_of(self.decl, field)

    def nested(self, field: str) -> _Record:
        """A Struct-valued field (a slot's tensor type) as a record of its own."""
        return _Record(L.field_of(self.decl, field), self.at(field), self.values[field])


def _read(decl: construct.Construct, data: memoryview, at: int, base: int,
          where: str) -> _Record:
    """The fixed-size record `decl` at `at` of `data`, which starts at file offset `base`."""
    size = L.size(decl)
    if at < 0 or at + size > len(data):
        raise FormatError(f"{where}: a {size}-byte record at offset {base + at} runs past the "
                          f"end (at {base + len(data)})", offset=base + at)
    return _Record(decl, base + at, L.compiled(decl).parse(bytes(data[at:at + size])))


def parse_layout(buf: Buffer) -> Layout:
    """The header and the section table, each section checked to lie inside the file."""
    data = memoryview(buf).cast("B")
    size, head = len(data), L.size(L.Header)
    if size < head:
        raise FormatError(f"file is {size} bytes, too short for the {head}-byte header",
                          field="header", offset=0)
    at = L.offset_of(L.Header, "magic")
    if (magic := bytes(data[at:at + len(MAGIC)])) != MAGIC:
        raise FormatError(f"bad magic {magic!r} at offset {at}, expected {MAGIC!r}: this is "
                          "not a hexir module", field="magic", offset=at)
    header = _read(L.Header, data, 0, 0, "header")
    if header.version not in L.FORMATS:
        raise FormatError(f"header: version {header.version} at offset {header.at('version')} "
                          f"is not supported; expected one of {', '.join(map(str, L.FORMATS))}",
                          field="version", offset=header.at("version"))
    if header.flags:
        raise FormatError(f"header: flags 0x{header.flags:x} at offset {header.at('flags')}; no "
                          "flags are defined, expected 0", field="flags", offset=header.at("flags"))
    _reserved("header", header)
    count, entry = header.section_count, L.size(L.SectionEntry)
    table_end = head + count * entry
    if table_end > size:
        raise FormatError(f"header: section_count {count} at offset "
                          f"{header.at('section_count')} needs a table ending at {table_end}, "
                          f"past the end of the {size}-byte file", field="section_count",
                          offset=header.at("section_count"))
    entries = [_read(L.SectionEntry, data, head + i * entry, 0, f"section {i}")
               for i in range(count)]
    layout = Layout(size, header.version, header.flags,
                    tuple(Section(e.kind, e.flags, e.offset, e.size) for e in entries))
    _check_sections(layout, entries, table_end)
    return layout


def _check_sections(layout: Layout, entries: list[_Record], table_end: int) -> None:
    fmt = L.FORMATS[layout.version]
    seen: dict[int, int] = {}
    for i, (s, e) in enumerate(zip(layout.sections, entries, strict=True)):
        where = f"section {i} ({s.name})"
        if s.kind not in fmt.sections:
            raise FormatError(f"{where}: kind {s.kind} at offset {e.at('kind')} is not a section "
                              f"of version {layout.version}", field="kind", offset=e.at("kind"))
        if s.kind in seen:
            raise FormatError(f"{where}: duplicates section {seen[s.kind]}", field="kind",
                              offset=e.at("kind"))
        seen[s.kind] = i
        if s.flags:
            raise FormatError(f"{where}: flags 0x{s.flags:x} at offset {e.at('flags')}, "
                              "expected 0", field="flags", offset=e.at("flags"))
        if s.offset > layout.file_size or s.size > layout.file_size - s.offset:
            raise FormatError(f"{where}: offset {s.offset} + size {s.size} runs past the end of "
                              f"the {layout.file_size}-byte file", field="offset",
                              offset=e.at("offset"))
        if s.offset < table_end and s.size:
            raise FormatError(f"{where}: offset {s.offset} lies inside the header and section "
                              f"table (which end at {table_end})", field="offset",
                              offset=e.at("offset"))
        if s.offset % L.ALIGNMENT:
            raise FormatError(f"{where}: offset {s.offset} is not {L.ALIGNMENT}-byte aligned",
                              field="offset", offset=e.at("offset"))
    spans = sorted((s.offset, s.offset + s.size, i) for i, s in enumerate(layout.sections)
                   if s.size)
    for (_, end, i), (start, _, j) in itertools.pairwise(spans):
        if start < end:
            raise FormatError(f"section {j} ({layout.sections[j].name}) at offset {start} "
                              f"overlaps section {i} ({layout.sections[i].name}), which ends at "
                              f"{end}", field="offset", offset=start)
    for kind in fmt.required:
        if kind not in seen:
            raise FormatError(f"the {kind} section is missing", field="kind")


def parse(buf: Buffer) -> Module:
    """The whole module. Raises FormatError for anything the layout does not allow."""
    data = memoryview(buf).cast("B")
    layout = parse_layout(data)
    fmt = L.FORMATS[layout.version]

    def payload(kind: SectionKind) -> tuple[memoryview, int] | None:
        s = layout.section(kind)
        return None if s is None else (data[s.offset:s.offset + s.size], s.offset)

    def required(kind: SectionKind) -> tuple[memoryview, int]:
        found = payload(kind)
        assert found is not None  # _check_sections requires the kind
        return found

    sizes = _Sizes.read(*found) if (found := payload(SectionKind.SIZES)) else _Sizes()
    slots = _slots(fmt, sizes, *slot_section) if (slot_section := payload(SectionKind.SLOTS)) \
        else ()
    functions = _functions(fmt, sizes, required(SectionKind.SYMBOLS),
                           required(SectionKind.PROGRAM))
    executables = sizes.operands(_executables(fmt, sizes, *required(SectionKind.EXECUTABLES)))
    rodata, _ = required(SectionKind.RODATA)
    if names := payload(SectionKind.NAMES):
        functions = _names(functions, *names)
    placements: tuple[tuple[int, int], ...] = ()
    if plan := payload(SectionKind.PLAN):
        placements = _placements(len(slots), *plan)
    strings = _strings(*found) if (found := payload(SectionKind.STRINGS)) else ()
    generations = _generations(*found) if (found := payload(SectionKind.GENERATE)) else ()
    return Module(layout.version, functions, rodata, executables, slots, layout, placements,
                  sizes.symbols, strings, generations)


class _Sizes:
    """Version 6's sizes section: the size symbols, each expression program decoded, and the
    executables' operands; `dim64` and `dim32` resolve a size field that names an expression
    (`layout.TAG64`, `TAG32`). Empty for a module without one (a tagged field is then an
    error: it names an expression of none)."""

    def __init__(self) -> None:
        self.symbols: tuple[Symbol, ...] = ()
        self.programs: list[Dim] = []
        self.entries: list[_Record] = []  # the operand entries, checked against executables

    @classmethod
    def read(cls, data: memoryview, base: int) -> _Sizes:
        self = cls()
        h = _read(L.SizesHeader, data, 0, base, "sizes")
        _reserved("sizes", h)
        sym, prog, op = L.size(L.SizeSymbol), L.size(L.ProgramEntry), L.size(L.OperandEntry)
        start = L.size(L.SizesHeader) + h.symbol_count * sym + h.program_count * prog + \
            h.operand_count * op
        if start > len(data):
            raise FormatError(f"sizes: {h.symbol_count} symbols, {h.program_count} programs and "
                              f"{h.operand_count} operands (header at offset {base}) need "
                              f"{start} bytes but the section has {len(data)}",
                              field="symbol_count", offset=h.at("symbol_count"))
        symbols: list[Symbol] = []
        at = L.size(L.SizesHeader)
        for n in range(h.symbol_count):
            where = f"size symbol {n}"
            e = _read(L.SizeSymbol, data, at + n * sym, base, where)
            name = _name(e, where)
            if not name.isidentifier() or name in (s.name for s in symbols):
                raise FormatError(f"{where}: name '{name}' at offset {e.at('name')} is not an "
                                  "identifier distinct from the other symbols", field="name",
                                  offset=e.at("name"))
            if e.hi > MAX_SYMBOL or e.lo > e.hi:
                field = "hi" if e.hi > MAX_SYMBOL else "lo"
                raise FormatError(f"{where} ({name}): range {e.lo}..{e.hi} at offset "
                                  f"{e.at('lo')}; expected lo <= hi <= {MAX_SYMBOL}",
                                  field=field, offset=e.at(field))
            symbols.append(Symbol(name, e.lo, e.hi))
        self.symbols = tuple(symbols)
        names = [s.name for s in symbols]
        at += h.symbol_count * sym
        word = L.size(L.ProgramWord)
        expected = start
        for k in range(h.program_count):
            where = f"sizes: program {k}"
            e = _read(L.ProgramEntry, data, at + k * prog, base, where)
            if e.offset != expected or not 0 < e.words <= dims.MAX_WORDS or \
                    e.words * word > len(data) - expected:
                raise FormatError(f"{where}: {e.words} words at section offset {e.offset} (entry "
                                  f"at offset {e.start}); expected 1 to {dims.MAX_WORDS} words at "
                                  f"{expected}, inside the section", field="offset",
                                  offset=e.at("offset") if e.offset != expected else
                                  e.at("words"))
            words = construct.Array(e.words, L.ProgramWord).parse(
                bytes(data[e.offset:e.offset + e.words * word]))
            try:
                self.programs.append(dims.decode(words, names))
            except dims.DimError as error:
                raise FormatError(f"{where} at offset {base + e.offset}: {error}",
                                  field="program", offset=base + e.offset) from None
            expected += e.words * word
        at += h.program_count * prog
        self.entries = [_read(L.OperandEntry, data, at + n * op, base, f"sizes: operand {n}")
                        for n in range(h.operand_count)]
        if expected != len(data):
            raise FormatError(f"sizes: bytes {expected}..{len(data)} (offset {base + expected}) "
                              "belong to no program", field="size", offset=base + expected)
        return self

    def _program(self, value: int, tag: int, field: str, at: int, where: str) -> Dim:
        k = value & (tag - 1)
        if k >= len(self.programs):
            raise FormatError(f"{where}: {field} at offset {at} names expression #{k}, but the "
                              f"module has {len(self.programs)} (its sizes section)",
                              field=field, offset=at)
        return self.programs[k]

    def dim64(self, value: int, field: str, at: int, where: str, fmt: L.Format) -> Dim:
        """A 64-bit size field (a tensor dimension, ALLOC's bytes), which lies at `at` and
        errors call `field`, as a dimension."""
        if fmt.number < 6 or not value & L.TAG64:
            return value
        return self._program(value, L.TAG64, field, at, where)

    def dim32(self, value: int, field: str, at: int, where: str, fmt: L.Format) -> Dim:
        """A 32-bit launch geometry field as a dimension."""
        if fmt.number < 6 or not value & L.TAG32:
            return value
        return self._program(value, L.TAG32, field, at, where)

    def operands(self, executables: tuple[Executable, ...]) -> tuple[Executable, ...]:
        """The executables with their operands, each entry checked: an executable and a
        symbol that exist, in executable order."""
        taken: list[list[int]] = [[] for _ in executables]
        previous = 0
        for n, e in enumerate(self.entries):
            where = f"sizes: operand {n}"
            if not previous <= e.executable < len(executables):
                raise FormatError(f"{where}: executable {e.executable} at offset "
                                  f"{e.at('executable')} is not an executable from {previous} "
                                  f"on (there are {len(executables)})", field="executable",
                                  offset=e.at("executable"))
            if e.symbol >= len(self.symbols):
                raise FormatError(f"{where}: symbol {e.symbol} at offset {e.at('symbol')} is not "
                                  f"a size symbol (there are {len(self.symbols)})",
                                  field="symbol", offset=e.at("symbol"))
            taken[e.executable].append(e.symbol)
            previous = e.executable
        return tuple(replace(exe, operands=tuple(ops)) if ops else exe
                     for exe, ops in zip(executables, taken, strict=True))


def _placements(slot_count: int, data: memoryview, base: int) -> tuple[tuple[int, int], ...]:
    """The plan's (slot, offset) entries; the validator checks what they mean."""
    head, size = L.size(L.PlanHeader), L.size(L.PlanEntry)
    h = _read(L.PlanHeader, data, 0, base, "plan")
    _reserved("plan", h)
    if len(data) != head + h.count * size:
        raise FormatError(f"plan: count {h.count} at offset {h.at('count')} needs "
                          f"{head + h.count * size} bytes but the section has {len(data)}",
                          field="count", offset=h.at("count"))
    found, previous = [], -1
    for n in range(h.count):
        where = f"plan entry {n}"
        e = _read(L.PlanEntry, data, head + n * size, base, where)
        if e.slot >= slot_count or e.slot <= previous:
            raise FormatError(f"{where}: slot {e.slot} at offset {e.at('slot')} is not a slot "
                              f"after {previous} (there are {slot_count})", field="slot",
                              offset=e.at("slot"))
        _reserved(where, e)
        if e.offset > MAX_BYTES:
            raise FormatError(f"{where}: offset {e.offset} at offset {e.at('offset')} is beyond "
                              "any arena", field="offset", offset=e.at("offset"))
        found.append((e.slot, e.offset))
        previous = e.slot
    return tuple(found)


def _generations(data: memoryview, base: int) -> tuple[Generation, ...]:
    """Version 6's generate section: each record and its cache pairs, back to back, the
    whole section used. What the indices must name (the step's signature) is the
    validator's to check; here each field is read and held to what it can mean at all."""
    head, record, pair = (L.size(d) for d in (L.GenerateHeader, L.GenerateRecord, L.CachePair))
    h = _read(L.GenerateHeader, data, 0, base, "generate")
    _reserved("generate", h)
    if h.count > (len(data) - head) // record:
        raise FormatError(f"generate: count {h.count} at offset {h.at('count')} needs at least "
                          f"{head + h.count * record} bytes but the section has {len(data)}",
                          field="count", offset=h.at("count"))
    found: list[Generation] = []
    at = head
    for n in range(h.count):
        where = f"generation {n}"
        r = _read(L.GenerateRecord, data, at, base, where)
        _reserved(where, r)
        name, step = _name(r, where), _name(r, where, "step")
        if r.eos < -1:
            raise FormatError(f"{where}: eos {r.eos} at offset {r.at('eos')} is not a token id "
                              "(or -1 for none)", field="eos", offset=r.at("eos"))
        if not 2 <= r.max_length <= MAX_SYMBOL:
            raise FormatError(f"{where}: max_length {r.max_length} at offset "
                              f"{r.at('max_length')} is outside 2..{MAX_SYMBOL}",
                              field="max_length", offset=r.at("max_length"))
        at += record
        if r.cache_count > (len(data) - at) // pair:
            raise FormatError(f"{where}: cache_count {r.cache_count} at offset "
                              f"{r.at('cache_count')} needs {r.cache_count * pair} bytes after "
                              f"the record, but {len(data) - at} are left",
                              field="cache_count", offset=r.at("cache_count"))
        cache = []
        for _ in range(r.cache_count):
            p = _read(L.CachePair, data, at, base, where)
            cache.append((p.past, p.present))
            at += pair
        found.append(Generation(name, step, r.ids, r.mask, r.positions, r.logits,
                                tuple(cache), r.eos, r.max_length))
    if at != len(data):
        raise FormatError(f"generate: bytes {at}..{len(data)} (offset {base + at}) belong to no "
                          "record", field="count", offset=base + at)
    return tuple(found)


def _strings(data: memoryview, base: int) -> tuple[str, ...]:
    """Version 6's string table: each entry's bytes where the previous one's end (the first
    right after the entries), inside the section, valid UTF-8; no byte left over."""
    head, size = L.size(L.StringsHeader), L.size(L.StringEntry)
    h = _read(L.StringsHeader, data, 0, base, "strings")
    _reserved("strings", h)
    if h.count > (len(data) - head) // size:
        raise FormatError(f"strings: count {h.count} at offset {h.at('count')} needs "
                          f"{head + h.count * size} bytes but the section has {len(data)}",
                          field="count", offset=h.at("count"))
    entry = L.compiled(L.StringEntry)
    strings: list[str] = []
    offset = head + h.count * size
    for n in range(h.count):
        at = head + n * size
        e = _Record(L.StringEntry, base + at, entry.parse(bytes(data[at:at + size])))
        if e.offset != offset or e.size > len(data) - offset:
            field = "offset" if e.offset != offset else "size"
            raise FormatError(f"string {n}: {e.size} bytes at section offset {e.offset} (entry "
                              f"at offset {e.start}); expected them at {offset}, inside the "
                              f"{len(data)}-byte section", field=field, offset=e.at(field))
        try:
            strings.append(str(data[offset:offset + e.size], "utf-8"))
        except UnicodeDecodeError as error:
            raise FormatError(f"string {n}: its {e.size} bytes at offset {base + offset} are not "
                              f"UTF-8 (byte {error.start}: {error.reason})", field="string",
                              offset=base + offset + error.start) from None
        offset += e.size
    if offset != len(data):
        raise FormatError(f"strings: bytes {offset}..{len(data)} (offset {base + offset}) belong "
                          "to no string", field="size", offset=base + offset)
    return tuple(strings)


def _reserved(where: str, record: _Record) -> None:
    """A reserved field must be zero (every word of it, when it is several)."""
    value = record.reserved
    if isinstance(value, list):  # two reserved words (a v4 executable), shown as a list
        value = list(value) if any(value) else 0
    if value:
        raise FormatError(f"{where}: reserved field at offset {record.at('reserved')} is "
                          f"{value}, expected 0", field="reserved", offset=record.at("reserved"))


def _name(record: _Record, where: str, field: str = "name") -> str:
    """A record's NUL-terminated, NUL-padded UTF-8 name (its `field`)."""
    raw, at = getattr(record, field), record.at(field)
    end = raw.find(b"\0")
    if end < 0:
        raise FormatError(f"{where}: {field} at offset {at} has no NUL terminator within "
                          f"{NAME_BYTES} bytes", field=field, offset=at)
    if end == 0:
        raise FormatError(f"{where}: {field} at offset {at} is empty", field=field, offset=at)
    if any(raw[end:]):
        raise FormatError(f"{where}: {field} at offset {at} has bytes after its terminator",
                          field=field, offset=at)
    try:
        return raw[:end].decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(f"{where}: {field} at offset {at} is not UTF-8", field=field,
                          offset=at) from None


def _commands(fmt: L.Format, sizes: _Sizes, program: memoryview,
              base: int) -> list[tuple[int, Command]]:
    """Every command of the program section with its offset inside the section: each one's
    header read first, so that its operand count is checked against the section before the
    whole `layout.Command` is read through it."""
    out, pc, end = [], 0, len(program)
    stream = io.BytesIO(program)
    header, command = L.compiled(L.CommandHeader), L.compiled(L.Command)
    while pc < end:
        at = base + pc
        if end - pc < L.size(L.CommandHeader):
            raise FormatError(f"program: {end - pc} stray bytes at offset {at}, too short for a "
                              "command header", field="kind",
                              offset=at + L.offset_of(L.CommandHeader, "kind"))
        h = _Record(L.CommandHeader, at, header.parse_stream(stream))
        size = L.command_size(h.operand_count)
        if size > end - pc:
            raise FormatError(f"program: command at offset {at} claims {h.operand_count} "
                              f"operands and runs off the end of the program section (at "
                              f"{base + end})", field="operand_count",
                              offset=h.at("operand_count"))
        try:
            op = Op(h.kind)
        except ValueError:
            op = None
        if op is None or op not in fmt.ops:
            raise FormatError(f"program: command at offset {at} has unknown kind {h.kind} for "
                              f"version {fmt.number}", field="kind", offset=h.at("kind"))
        stream.seek(pc)
        c = _Record(L.Command, at, command.parse_stream(stream))
        _check_operand_count(op, c)
        operands: tuple[Dim, ...] = tuple(c.operands)
        if op is Op.ALLOC:  # its bytes may name an expression
            operands = (operands[0], sizes.dim64(c.operands[1], "bytes", c.at("operands[1]"),
                                                 f"program: alloc at offset {at}", fmt))
        out.append((pc, Command(op, operands)))
        pc += size
    return out


def _check_operand_count(op: Op, command: _Record) -> None:
    operands, at = command.operands, command.start
    if op is Op.DISPATCH:
        argc = OPERAND_NAMES[op].index("argc")
        if len(operands) <= argc or len(operands) != argc + 1 + operands[argc]:
            if len(operands) > argc:
                count, field, offset = operands[argc], "argc", command.at(f"operands[{argc}]")
            else:
                count, field, offset = "?", "operand_count", command.at("operand_count")
            raise FormatError(f"program: dispatch at offset {at} has {len(operands)} operands "
                              f"but argc {count} needs {count} + {argc + 1}", field=field,
                              offset=offset)
        return
    if len(operands) != (named := len(OPERAND_NAMES[op])):
        raise FormatError(f"program: {op} at offset {at} has {len(operands)} operands, expected "
                          f"{named}", field="operand_count", offset=command.at("operand_count"))


def _functions(fmt: L.Format, sizes: _Sizes, symbols: tuple[memoryview, int],
               program: tuple[memoryview, int]) -> tuple[Function, ...]:
    sym, sym_base = symbols
    size = L.size(fmt.symbol)
    if len(sym) % size:
        raise FormatError(f"symbols: size {len(sym)} at offset {sym_base} is not a multiple of "
                          f"{size}", field="size", offset=sym_base)
    commands = _commands(fmt, sizes, *program)
    index = {pc: i for i, (pc, _) in enumerate(commands)}
    functions, expected = [], 0
    names: set[tuple[str, int]] = set()
    for n in range(len(sym) // size):
        where = f"symbol {n}"
        entry = _read(fmt.symbol, sym, n * size, sym_base, where)
        name = _name(entry, where)
        where = f"symbol {n} ({name})"
        level = entry.cpu_level if entry.has("cpu_level") else 0
        if level not in (0, *CPU_LEVELS):
            raise FormatError(f"{where}: cpu_level {level} at offset {entry.at('cpu_level')}; "
                              "expected 0 (no host code) or 1 to 4 (the x86-64 level it was "
                              "compiled for)", field="cpu_level", offset=entry.at("cpu_level"))
        if (name, level) in names or (name, 0) in names or (level == 0 and any(
                other == name for other, _ in names)):
            also = f" for {CPU_LEVELS[level]}" if level else ""
            raise FormatError(f"{where}: entry point defined twice{also}", field="name",
                              offset=entry.at("name"))
        names.add((name, level))
        if entry.has("reserved"):
            _reserved(where, entry)
        if entry.program_offset != expected:
            at = entry.at("program_offset")
            raise FormatError(f"{where}: program_offset {entry.program_offset} at offset {at} "
                              f"should be {expected}, where the previous entry point ends",
                              field="program_offset", offset=at)
        first = index.get(entry.program_offset, len(commands))
        body = []
        for pc, command in commands[first:]:
            if command.op is Op.END:
                expected = pc + L.command_size(len(command.operands))
                break
            body.append(command)
        else:
            raise FormatError(f"{where}: its commands run off the end of the program section "
                              "without an END", field="program_offset", offset=program[1])
        functions.append(Function(name, tuple(body), cpu_level=level))
    if expected != len(program[0]):
        raise FormatError(f"program: bytes {expected}..{len(program[0])} (offset "
                          f"{program[1] + expected}) belong to no entry point", field="size",
                          offset=program[1] + expected)
    return tuple(functions)


def _names(functions: tuple[Function, ...], data: memoryview,
           base: int) -> tuple[Function, ...]:
    """The functions with their input and output names (the layout's canonical order only)."""
    head, size = L.size(L.NamesHeader), L.size(L.NameEntry)
    h = _read(L.NamesHeader, data, 0, base, "names")
    _reserved("names", h)
    if h.count > (len(data) - head) // size:
        raise FormatError(f"names: count {h.count} at offset {h.at('count')} needs "
                          f"{head + h.count * size} bytes but the section has {len(data)}",
                          field="count", offset=h.at("count"))
    names: list[tuple[list[str], list[str]]] = [([], []) for _ in functions]
    offset, previous = head + h.count * size, (-1, -1)
    for n in range(h.count):
        where = f"name {n}"
        e = _read(L.NameEntry, data, head + n * size, base, where)
        if e.function >= len(functions):
            raise FormatError(f"{where}: function {e.function} at offset {e.at('function')} is "
                              f"not an entry point (there are {len(functions)})",
                              field="function", offset=e.at("function"))
        if e.role > 1:
            raise FormatError(f"{where}: role {e.role} at offset {e.at('role')}; expected 0 "
                              "(input) or 1 (output)", field="role", offset=e.at("role"))
        row = names[e.function][e.role]
        if (e.function, e.role) < previous or e.index != len(row):
            raise FormatError(f"{where}: function {e.function}, role {e.role}, index {e.index} "
                              f"at offset {e.start} is out of order; expected index "
                              f"{len(row)} next", field="index", offset=e.at("index"))
        previous = (e.function, e.role)
        if e.offset != offset or not 0 < e.size <= MAX_IO_NAME or e.size > len(data) - offset:
            raise FormatError(f"{where}: {e.size} bytes at section offset {e.offset} (field at "
                              f"offset {e.at('size')}); expected 1 to {MAX_IO_NAME} bytes at "
                              f"{offset}, inside the section", field="size", offset=e.at("size"))
        raw = bytes(data[offset:offset + e.size])
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            name = ""
        if not name or "\0" in name or not name.isprintable() or name in row:
            raise FormatError(f"{where}: the name at offset {base + offset} is not printable "
                              "UTF-8 distinct from the others", field="name", offset=base + offset)
        row.append(name)
        offset += e.size
    if offset != len(data):
        raise FormatError(f"names: bytes {offset}..{len(data)} (offset {base + offset}) belong "
                          "to no name", field="size", offset=base + offset)
    return tuple(replace(f, inputs=tuple(i), outputs=tuple(o))
                 for f, (i, o) in zip(functions, names, strict=False))


def _enum(enum, record: _Record, field: str, where: str):
    value, at = record.values[field], record.at(field)
    try:
        return enum(value)
    except ValueError:
        raise FormatError(f"{where}: {field} {value} at offset {at} is not a known "
                          f"{enum.__name__}", field=field, offset=at) from None


def _tensor_type(t: _Record, where: str, fmt: L.Format, sizes: _Sizes) -> TensorType:
    dtype = _enum(DType, t, "dtype", where)
    if dtype not in fmt.dtypes:
        since = min(n for n, f in L.FORMATS.items() if dtype in f.dtypes)
        raise FormatError(f"{where}: dtype {int(dtype)} ({dtype}) at offset {t.at('dtype')} "
                          f"needs version {since}; this module is version {fmt.number}",
                          field="dtype", offset=t.at("dtype"))
    if t.rank > MAX_RANK:
        raise FormatError(f"{where}: rank {t.rank} at offset {t.at('rank')} exceeds {MAX_RANK}",
                          field="rank", offset=t.at("rank"))
    if any(t.dims[t.rank:]):
        raise FormatError(f"{where}: dimensions past rank {t.rank} at offset {t.at('dims')} are "
                          "not zero", field="dims", offset=t.at("dims"))
    raw: list[int] = t.dims[:t.rank]
    shape: tuple[Dim, ...] = tuple(raw)
    if fmt.number >= 6 and any(d & L.TAG64 for d in raw):  # (ints: the common case)
        shape = tuple(sizes.dim64(d, "dims", t.at("dims"), where, fmt) for d in raw)
    if all(type(d) is int for d in shape) and \
            math.prod(max(d, 1) for d in shape) * dtype.itemsize > MAX_BYTES:  # type: ignore
        raise FormatError(f"{where}: dimensions {list(shape)} at offset {t.at('dims')} span more "
                          f"than {MAX_BYTES} bytes of {dtype} (counting a 0 as 1), more than "
                          "any array can", field="dims", offset=t.at("dims"))
    return TensorType(dtype, shape)


def _slots(fmt: L.Format, sizes: _Sizes, data: memoryview, base: int) -> tuple[Slot, ...]:
    size = L.size(L.SlotEntry)
    if len(data) % size:
        raise FormatError(f"slots: size {len(data)} at offset {base} is not a multiple of "
                          f"{size}", field="size", offset=base)
    slots = []
    for i in range(len(data) // size):
        where = f"slot {i}"
        e = _read(L.SlotEntry, data, i * size, base, where)
        device = _enum(Device, e, "device", where)
        _reserved(where, e)
        slots.append(Slot(device, _tensor_type(e.nested("type"), where, fmt, sizes)))
    return tuple(slots)


def _executables(fmt: L.Format, sizes: _Sizes, data: memoryview,
                 base: int) -> tuple[Executable, ...]:
    head = L.size(L.ExecutablesHeader)
    if len(data) < head:
        raise FormatError(f"executables: size {len(data)} at offset {base} is too small for "
                          f"the {head}-byte header", field="size", offset=base)
    h = _read(L.ExecutablesHeader, data, 0, base, "executables")
    size = L.size(fmt.executable)
    if h.count > (len(data) - head) // size:
        raise FormatError(f"executables: count {h.count} at offset {h.at('count')} needs "
                          f"{head + h.count * size} bytes but the section has {len(data)}",
                          field="count", offset=h.at("count"))
    _reserved("executables", h)
    # (section offset, size, what, file offset of the field that places it, that field)
    exes, records = [], [(0, head + h.count * size, "the entry table", h.at("count"), "count")]
    for i in range(h.count):
        e = _read(fmt.executable, data, head + i * size, base, f"executable {i}")
        name = _name(e, f"executable {i}")
        where = f"executable {i} ({name})"
        kind = _enum(KernelKind, e, "kind", where)
        if kind not in fmt.kinds:
            since = min(n for n, f in L.FORMATS.items() if kind in f.kinds)
            raise FormatError(f"{where}: kind {kind.value} ({kind}) at offset {e.at('kind')} "
                              f"needs version {since}; this module is version {fmt.number}",
                              field="kind", offset=e.at("kind"))
        device = _enum(Device, e, "device", where)
        image = _image(e, data, where)
        records.append((e.image_offset, e.image_size, f"{where}: its image",
                        e.at("image_offset"), "image_offset"))
        if not e.has("argc"):  # version 3: extents (m, n, k) instead of argument types
            exes.append(_v3_executable(e, name, kind, device, image, where))
        else:
            exes.append(_v4_executable(e, fmt, sizes, name, kind, device, image, data, base,
                                       where))
            records += [(e.args_offset, e.argc * L.size(L.TensorTypeEntry),
                         f"{where}: its argument types", e.at("args_offset"), "args_offset"),
                        (e.params_offset, e.params_count * L.size(L.Param),
                         f"{where}: its params", e.at("params_offset"), "params_offset")]
    _check_records(records)
    return tuple(exes)


def _check_records(records: list[tuple[int, int, str, int, str]]) -> None:
    """Each record of the executables section (argument types, params, images) starts on an
    8-byte boundary and shares no byte with another record or with the entry table, so no
    field can be read as part of something else."""
    spans = sorted(record for record in records if record[1])
    for offset, _, what, at, field in spans:
        if offset % L.ALIGNMENT:
            raise FormatError(f"{what} at section offset {offset} (field at offset {at}) is "
                              f"not {L.ALIGNMENT}-byte aligned", field=field, offset=at)
    for (start, size, what, _, _), (nxt, _, other, at, field) in itertools.pairwise(spans):
        if nxt < start + size:
            raise FormatError(f"{other} at section offset {nxt} (field at offset {at}) overlaps "
                              f"{what}, which spans {start}..{start + size}", field=field,
                              offset=at)


def _image(e: _Record, data: memoryview, where: str) -> memoryview | None:
    if e.image_size == 0:
        if e.image_offset:
            raise FormatError(f"{where}: image_offset {e.image_offset} with image_size 0",
                              field="image_offset", offset=e.at("image_offset"))
        return None
    if e.image_offset > len(data) or e.image_size > len(data) - e.image_offset:
        raise FormatError(f"{where}: image_offset {e.image_offset} + image_size {e.image_size} "
                          f"runs past the end of the {len(data)}-byte executables section",
                          field="image_offset", offset=e.at("image_offset"))
    return data[e.image_offset:e.image_offset + e.image_size]


def _v3_executable(e: _Record, name, kind, device, image, where: str) -> Executable:
    if kind not in V3_KINDS:
        raise FormatError(f"{where}: kind {kind.value} at offset {e.at('kind')} is not a "
                          "version 3 kernel", field="kind", offset=e.at("kind"))
    if e.elem_size != DType.F64.itemsize:
        raise FormatError(f"{where}: elem_size {e.elem_size} at offset {e.at('elem_size')}; "
                          "version 3 holds f64 (8) only", field="elem_size",
                          offset=e.at("elem_size"))
    if kind is not KernelKind.MATMUL and e.k:
        raise FormatError(f"{where}: k {e.k} at offset {e.at('k')} must be 0 for {kind}",
                          field="k", offset=e.at("k"))
    f64 = DType.F64
    out = TensorType(f64, (e.m, e.n))
    if kind is KernelKind.MATMUL:
        args = (TensorType(f64, (e.m, e.k)), TensorType(f64, (e.k, e.n)), out)
    else:
        args = (out,) * (kind.arity + 1)
    z = 1 if image is not None else 0
    return Executable(name, kind, device, args, (), image, (e.grid_x, e.grid_y, z),
                      (e.block_x, e.block_y, z))


def _v4_executable(e: _Record, fmt: L.Format, sizes: _Sizes, name, kind, device, image,
                   data: memoryview, base: int, where: str) -> Executable:
    _reserved(where, e)  # version 4: two words; version 5 on: the one after cpu_level
    level = e.cpu_level if e.has("cpu_level") else 0
    host = device is Device.CPU and image is not None
    if e.has("cpu_level") and not (level in CPU_LEVELS if host else level == 0):
        expected = "1 to 4, the x86-64 level its host image needs" if host else \
            "0: it carries no host image"
        raise FormatError(f"{where}: cpu_level {level} at offset {e.at('cpu_level')}; expected "
                          f"{expected}", field="cpu_level", offset=e.at("cpu_level"))
    if not kind.takes(e.argc):
        least = kind.least_args - 1
        inputs = f"at least {least} input{'s' * (least != 1)}" if kind.arity is None else \
            f"{kind.arity} inputs"
        raise FormatError(f"{where}: argc {e.argc} at offset {e.at('argc')}; {kind} takes "
                          f"{inputs} + 1 destination", field="argc", offset=e.at("argc"))
    size = L.size(L.TensorTypeEntry)
    if e.args_offset > len(data) or e.argc * size > len(data) - e.args_offset:
        raise FormatError(f"{where}: args_offset {e.args_offset} + {e.argc} x {size} bytes runs "
                          "past the end of the executables section", field="args_offset",
                          offset=e.at("args_offset"))
    args = tuple(
        _tensor_type(_read(L.TensorTypeEntry, data, e.args_offset + j * size, base, where),
                     f"{where} argument {j}", fmt, sizes)
        for j in range(e.argc))
    param = L.size(L.Param)
    if e.params_offset > len(data) or e.params_count * param > len(data) - e.params_offset:
        raise FormatError(f"{where}: params_offset {e.params_offset} + {e.params_count} x "
                          f"{param} bytes runs past the end of the executables section",
                          field="params_offset", offset=e.at("params_offset"))
    params = construct.Array(e.params_count, L.Param).parse(
        bytes(data[e.params_offset:e.params_offset + e.params_count * param]))
    grid, block = (tuple(sizes.dim32(e.values[f"{what}_{axis}"], f"{what}_{axis}",
                                     e.at(f"{what}_{axis}"), where, fmt) for axis in "xyz")
                   for what in ("grid", "block"))
    return Executable(name, kind, device, args, tuple(params), image,
                      grid, block, level)  # type: ignore[arg-type]  # three each
