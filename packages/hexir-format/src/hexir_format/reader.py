"""Parse a `.hxb` without trusting it and without copying its payloads.

Every offset, size and count comes off disk, so each is checked against what holds it before
anything is read through it, and a violation becomes one `FormatError` that names the field
and the absolute byte offset. Rodata and device images are returned as memoryview slices of
the caller's buffer (an mmap stays an mmap): validation touches headers and tables only.
"""

from __future__ import annotations

import itertools
import math
import mmap
import struct
from dataclasses import replace

import construct

from hexir_format import layout as L
from hexir_format.errors import FormatError
from hexir_format.model import (
    CPU_LEVELS,
    MAGIC,
    MAX_BYTES,
    MAX_IO_NAME,
    MAX_RANK,
    NAME_BYTES,
    OPERAND_NAMES,
    V3_KINDS,
    V3_OPS,
    V4_DTYPES,
    VERSIONS,
    Command,
    Device,
    DType,
    Executable,
    Function,
    KernelKind,
    Layout,
    Module,
    Op,
    Section,
    SectionKind,
    Slot,
    TensorType,
)

#: What the reader parses: the file's bytes, or a mapping of it (the runtime's and hxb-dump's).
Buffer = bytes | bytearray | memoryview | mmap.mmap


def parse_layout(buf: Buffer) -> Layout:
    """The header and the section table, each section checked to lie inside the file."""
    data = memoryview(buf).cast("B")
    size = len(data)
    if size < L.size(L.Header):
        raise FormatError(f"file is {size} bytes, too short for the {L.size(L.Header)}-byte "
                          "header", field="header", offset=0)
    if bytes(data[:8]) != MAGIC:
        raise FormatError(f"bad magic {bytes(data[:8])!r} at offset 0, expected {MAGIC!r}: "
                          "this is not a hexir module", field="magic", offset=0)
    header = _struct(L.Header, data, 0, "header")
    if header.version not in VERSIONS:
        raise FormatError(f"header: version {header.version} at offset 8 is not supported; "
                          f"expected one of {', '.join(map(str, VERSIONS))}",
                          field="version", offset=8)
    if header.flags:
        raise FormatError(f"header: flags 0x{header.flags:x} at offset 12; no flags are "
                          "defined, expected 0", field="flags", offset=12)
    _reserved("header", header.reserved, 20)
    count = header.section_count
    table_end = L.size(L.Header) + count * L.size(L.SectionEntry)
    if table_end > size:
        raise FormatError(f"header: section_count {count} at offset 16 needs a table ending at "
                          f"{table_end}, past the end of the {size}-byte file",
                          field="section_count", offset=16)
    sections = []
    for i in range(count):
        at = L.size(L.Header) + i * L.size(L.SectionEntry)
        e = _struct(L.SectionEntry, data, at, f"section {i}")
        sections.append(Section(e.kind, e.flags, e.offset, e.size))
    layout = Layout(size, header.version, header.flags, tuple(sections))
    _check_sections(layout, table_end)
    return layout


def _check_sections(layout: Layout, table_end: int) -> None:
    since = {SectionKind.SLOTS: 4, SectionKind.NAMES: 5, SectionKind.PLAN: 5}
    known = {k for k in SectionKind if layout.version >= since.get(k, 3)}
    seen: dict[int, int] = {}
    for i, s in enumerate(layout.sections):
        where = f"section {i} ({s.name})"
        at = L.size(L.Header) + i * L.size(L.SectionEntry)
        if s.kind not in known:
            raise FormatError(f"{where}: kind {s.kind} at offset {at} is not a section of "
                              f"version {layout.version}", field="kind", offset=at)
        if s.kind in seen:
            raise FormatError(f"{where}: duplicates section {seen[s.kind]}", field="kind",
                              offset=at)
        seen[s.kind] = i
        if s.flags:
            raise FormatError(f"{where}: flags 0x{s.flags:x} at offset {at + 4}, expected 0",
                              field="flags", offset=at + 4)
        if s.offset > layout.file_size or s.size > layout.file_size - s.offset:
            raise FormatError(f"{where}: offset {s.offset} + size {s.size} runs past the end of "
                              f"the {layout.file_size}-byte file", field="offset", offset=at + 8)
        if s.offset < table_end and s.size:
            raise FormatError(f"{where}: offset {s.offset} lies inside the header and section "
                              f"table (which end at {table_end})", field="offset", offset=at + 8)
        if s.offset % L.ALIGNMENT:
            raise FormatError(f"{where}: offset {s.offset} is not {L.ALIGNMENT}-byte aligned",
                              field="offset", offset=at + 8)
    spans = sorted((s.offset, s.offset + s.size, i) for i, s in enumerate(layout.sections)
                   if s.size)
    for (_, end, i), (start, _, j) in itertools.pairwise(spans):
        if start < end:
            raise FormatError(f"section {j} ({layout.sections[j].name}) at offset {start} "
                              f"overlaps section {i} ({layout.sections[i].name}), which ends at "
                              f"{end}", field="offset", offset=start)
    required = [SectionKind.SYMBOLS, SectionKind.PROGRAM, SectionKind.RODATA,
                SectionKind.EXECUTABLES] + ([SectionKind.SLOTS] if layout.version >= 4 else [])
    for kind in required:
        if kind not in seen:
            raise FormatError(f"the {kind} section is missing", field="kind")


def parse(buf: Buffer) -> Module:
    """The whole module. Raises FormatError for anything the layout does not allow."""
    data = memoryview(buf).cast("B")
    layout = parse_layout(data)

    def payload(kind: SectionKind) -> tuple[memoryview, int]:
        s = layout.section(kind)
        assert s is not None  # _check_sections requires every kind
        return data[s.offset:s.offset + s.size], s.offset

    slots = _slots(layout.version, *payload(SectionKind.SLOTS)) if layout.version >= 4 else ()
    functions = _functions(layout.version, payload(SectionKind.SYMBOLS),
                           payload(SectionKind.PROGRAM))
    executables = _executables(layout.version, *payload(SectionKind.EXECUTABLES))
    rodata, _ = payload(SectionKind.RODATA)
    if layout.section(SectionKind.NAMES) is not None:
        functions = _names(functions, *payload(SectionKind.NAMES))
    placements: tuple[tuple[int, int], ...] = ()
    if layout.section(SectionKind.PLAN) is not None:
        placements = _placements(len(slots), *payload(SectionKind.PLAN))
    return Module(layout.version, functions, rodata, executables, slots, layout, placements)


def _placements(slot_count: int, data: memoryview, base: int) -> tuple[tuple[int, int], ...]:
    """The plan's (slot, offset) entries; the validator checks what they mean."""
    head, size = L.size(L.PlanHeader), L.size(L.PlanEntry)
    h = _struct(L.PlanHeader, data, 0, "plan")
    _reserved("plan", h.reserved, base + 4)
    if len(data) != head + h.count * size:
        raise FormatError(f"plan: count {h.count} at offset {base} needs {head + h.count * size} "
                          f"bytes but the section has {len(data)}", field="count", offset=base)
    found, previous = [], -1
    for n in range(h.count):
        at = head + n * size
        e = _struct(L.PlanEntry, data, at, f"plan entry {n}")
        if e.slot >= slot_count or e.slot <= previous:
            raise FormatError(f"plan entry {n}: slot {e.slot} at offset {base + at} is not a "
                              f"slot after {previous} (there are {slot_count})", field="slot",
                              offset=base + at)
        _reserved(f"plan entry {n}", e.reserved, base + at + 4)
        if e.offset > MAX_BYTES:
            raise FormatError(f"plan entry {n}: offset {e.offset} at offset {base + at + 8} is "
                              "beyond any arena", field="offset", offset=base + at + 8)
        found.append((e.slot, e.offset))
        previous = e.slot
    return tuple(found)


def _struct(decl: construct.Construct, data: memoryview, at: int, where: str):
    """Parse a fixed-size struct at `at` (its bytes are there, so parsing cannot fail)."""
    end = at + L.size(decl)
    if at < 0 or end > len(data):
        raise FormatError(f"{where}: a {L.size(decl)}-byte record at offset {at} runs past the "
                          f"end ({len(data)})", offset=at)
    return L.compiled(decl).parse(bytes(data[at:end]))


def _reserved(where: str, value: object, at: int) -> None:
    """A reserved field must be zero."""
    if value:
        raise FormatError(f"{where}: reserved field at offset {at} is {value}, expected 0",
                          field="reserved", offset=at)


def _name(raw: bytes, where: str, at: int) -> str:
    end = raw.find(b"\0")
    if end < 0:
        raise FormatError(f"{where}: name at offset {at} has no NUL terminator within "
                          f"{NAME_BYTES} bytes", field="name", offset=at)
    if end == 0:
        raise FormatError(f"{where}: name at offset {at} is empty", field="name", offset=at)
    if any(raw[end:]):
        raise FormatError(f"{where}: name at offset {at} has bytes after its terminator",
                          field="name", offset=at)
    try:
        return raw[:end].decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(f"{where}: name at offset {at} is not UTF-8", field="name",
                          offset=at) from None


def _commands(version: int, program: memoryview, base: int) -> list[tuple[int, Command]]:
    """Every command of the program section with its offset inside the section."""
    out, pc, end = [], 0, len(program)
    header = L.size(L.CommandHeader)
    while pc < end:
        at = base + pc
        if end - pc < header:
            raise FormatError(f"program: {end - pc} stray bytes at offset {at}, too short for a "
                              "command header", field="kind", offset=at)
        kind, count = struct.unpack_from("<II", program, pc)
        if count > (end - pc - header) // 8:
            raise FormatError(f"program: command at offset {at} claims {count} operands and runs "
                              f"off the end of the program section (at {base + end})",
                              field="operand_count", offset=at + 4)
        try:
            op = Op(kind)
        except ValueError:
            op = None
        if op is None or (version == 3 and op not in V3_OPS):
            raise FormatError(f"program: command at offset {at} has unknown kind {kind} for "
                              f"version {version}", field="kind", offset=at)
        operands = struct.unpack_from(f"<{count}Q", program, pc + header)
        _check_operand_count(op, operands, at)
        out.append((pc, Command(op, operands)))
        pc += header + 8 * count
    return out


def _check_operand_count(op: Op, operands: tuple[int, ...], at: int) -> None:
    named = len(OPERAND_NAMES[op])
    if op is Op.DISPATCH:
        if len(operands) < 2 or len(operands) != 2 + operands[1]:
            argc = operands[1] if len(operands) >= 2 else "?"
            raise FormatError(f"program: dispatch at offset {at} has {len(operands)} operands "
                              f"but argc {argc} needs {argc} + 2", field="argc", offset=at)
        return
    if len(operands) != named:
        raise FormatError(f"program: {op} at offset {at} has {len(operands)} operands, expected "
                          f"{named}", field="operand_count", offset=at + 4)


def _functions(version: int, symbols: tuple[memoryview, int],
               program: tuple[memoryview, int]) -> tuple[Function, ...]:
    sym, sym_base = symbols
    if len(sym) % L.size(L.Symbol):
        raise FormatError(f"symbols: size {len(sym)} at offset {sym_base} is not a multiple of "
                          f"{L.size(L.Symbol)}", field="size", offset=sym_base)
    commands = _commands(version, *program)
    index = {pc: i for i, (pc, _) in enumerate(commands)}
    functions, expected = [], 0
    names: set[tuple[str, int]] = set()
    decl = L.SymbolV6 if version >= 6 else L.Symbol
    for n in range(len(sym) // L.size(L.Symbol)):
        at = n * L.size(L.Symbol)
        where = f"symbol {n}"
        entry = _struct(decl, sym, at, where)
        name = _name(entry.name, where, sym_base + at)
        where = f"symbol {n} ({name})"
        level = entry.cpu_level if version >= 6 else 0
        if version >= 6 and level not in (0, *CPU_LEVELS):
            raise FormatError(f"{where}: cpu_level {level} at offset {sym_base + at + 36}; "
                              "expected 0 (no host code) or 1 to 4 (the x86-64 level it was "
                              "compiled for)", field="cpu_level", offset=sym_base + at + 36)
        if (name, level) in names or (name, 0) in names or (level == 0 and any(
                other == name for other, _ in names)):
            also = f" for {CPU_LEVELS[level]}" if level else ""
            raise FormatError(f"{where}: entry point defined twice{also}", field="name",
                              offset=sym_base + at)
        names.add((name, level))
        if version < 6:
            _reserved(where, entry.reserved, sym_base + at + 36)
        if entry.program_offset != expected:
            raise FormatError(f"{where}: program_offset {entry.program_offset} at offset "
                              f"{sym_base + at + 32} should be {expected}, where the previous "
                              "entry point ends", field="program_offset", offset=sym_base + at + 32)
        first = index.get(entry.program_offset, len(commands))
        body = []
        for pc, command in commands[first:]:
            if command.op is Op.END:
                expected = pc + 8
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
    h = _struct(L.NamesHeader, data, 0, "names")
    _reserved("names", h.reserved, base + 4)
    if h.count > (len(data) - head) // size:
        raise FormatError(f"names: count {h.count} at offset {base} needs "
                          f"{head + h.count * size} bytes but the section has {len(data)}",
                          field="count", offset=base)
    names: list[tuple[list[str], list[str]]] = [([], []) for _ in functions]
    offset, previous = head + h.count * size, (-1, -1)
    for n in range(h.count):
        at = head + n * size
        e, where = _struct(L.NameEntry, data, at, f"name {n}"), f"name {n}"
        if e.function >= len(functions):
            raise FormatError(f"{where}: function {e.function} at offset {base + at} is not an "
                              f"entry point (there are {len(functions)})", field="function",
                              offset=base + at)
        if e.role > 1:
            raise FormatError(f"{where}: role {e.role} at offset {base + at + 4}; expected 0 "
                              "(input) or 1 (output)", field="role", offset=base + at + 4)
        row = names[e.function][e.role]
        if (e.function, e.role) < previous or e.index != len(row):
            raise FormatError(f"{where}: function {e.function}, role {e.role}, index {e.index} "
                              f"at offset {base + at} is out of order; expected index "
                              f"{len(row)} next", field="index", offset=base + at + 8)
        previous = (e.function, e.role)
        if e.offset != offset or not 0 < e.size <= MAX_IO_NAME or e.size > len(data) - offset:
            raise FormatError(f"{where}: {e.size} bytes at section offset {e.offset} (field at "
                              f"offset {base + at + 12}); expected 1 to {MAX_IO_NAME} bytes at "
                              f"{offset}, inside the section", field="size", offset=base + at + 12)
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


def _enum(enum, value: int, where: str, field: str, at: int):
    try:
        return enum(value)
    except ValueError:
        raise FormatError(f"{where}: {field} {value} at offset {at} is not a known "
                          f"{enum.__name__}", field=field, offset=at) from None


def _tensor_type(entry, where: str, at: int, version: int) -> TensorType:
    dtype = _enum(DType, entry.dtype, where, "dtype", at)
    if version < 5 and dtype not in V4_DTYPES:
        raise FormatError(f"{where}: dtype {int(dtype)} ({dtype}) at offset {at} needs version "
                          f"5; this module is version {version}", field="dtype", offset=at)
    if entry.rank > MAX_RANK:
        raise FormatError(f"{where}: rank {entry.rank} at offset {at + 4} exceeds {MAX_RANK}",
                          field="rank", offset=at + 4)
    if any(entry.dims[entry.rank:]):
        raise FormatError(f"{where}: dimensions past rank {entry.rank} at offset {at + 8} are "
                          "not zero", field="dims", offset=at + 8)
    shape = tuple(entry.dims[:entry.rank])
    if math.prod(max(d, 1) for d in shape) * dtype.itemsize > MAX_BYTES:
        raise FormatError(f"{where}: dimensions {list(shape)} at offset {at + 8} span more "
                          f"than {MAX_BYTES} bytes of {dtype} (counting a 0 as 1), more than "
                          "any array can", field="dims", offset=at + 8)
    return TensorType(dtype, shape)


def _slots(version: int, data: memoryview, base: int) -> tuple[Slot, ...]:
    size = L.size(L.SlotEntry)
    if len(data) % size:
        raise FormatError(f"slots: size {len(data)} at offset {base} is not a multiple of "
                          f"{size}", field="size", offset=base)
    slots = []
    for i in range(len(data) // size):
        at = base + i * size
        e = _struct(L.SlotEntry, data, i * size, f"slot {i}")
        device = _enum(Device, e.device, f"slot {i}", "device", at)
        _reserved(f"slot {i}", e.reserved, at + 4)
        slots.append(Slot(device, _tensor_type(e.type, f"slot {i}", at + 8, version)))
    return tuple(slots)


def _executables(version: int, data: memoryview, base: int) -> tuple[Executable, ...]:
    head = L.size(L.ExecutablesHeader)
    if len(data) < head:
        raise FormatError(f"executables: size {len(data)} at offset {base} is too small for "
                          f"the {head}-byte header", field="size", offset=base)
    h = _struct(L.ExecutablesHeader, data, 0, "executables")
    entry = L.EXECUTABLE[version]
    if h.count > (len(data) - head) // L.size(entry):
        raise FormatError(f"executables: count {h.count} at offset {base} needs "
                          f"{head + h.count * L.size(entry)} bytes but the section has "
                          f"{len(data)}", field="count", offset=base)
    _reserved("executables", h.reserved, base + 4)
    exes, records = [], [(0, head + h.count * L.size(entry), "the entry table", base)]
    for i in range(h.count):
        at = head + i * L.size(entry)
        e = _struct(entry, data, at, f"executable {i}")
        name = _name(e.name, f"executable {i}", base + at)
        where = f"executable {i} ({name})"
        kind = _enum(KernelKind, e.kind, where, "kind", base + at + 32)
        device = _enum(Device, e.device, where, "device", base + at + 36)
        image = _image(e, data, base, where, at)
        records.append((e.image_offset, e.image_size, f"{where}: its image", base + at + 56))
        if version == 3:
            exes.append(_v3_executable(e, name, kind, device, image, where, base + at))
        else:
            exes.append(_v4_executable(e, version, name, kind, device, image, data, base, where,
                                       at))
            records += [(e.args_offset, e.argc * L.size(L.TensorTypeEntry),
                         f"{where}: its argument types", base + at + 44),
                        (e.params_offset, e.params_count * 8, f"{where}: its params",
                         base + at + 48)]
    _check_records(records)
    return tuple(exes)


def _check_records(records: list[tuple[int, int, str, int]]) -> None:
    """Each record of the executables section (argument types, params, images) starts on an
    8-byte boundary and shares no byte with another record or with the entry table, so no
    field can be read as part of something else."""
    spans = sorted((offset, size, what, at) for offset, size, what, at in records if size)
    for offset, _, what, at in spans:
        if offset % L.ALIGNMENT:
            raise FormatError(f"{what} at section offset {offset} (field at offset {at}) is "
                              f"not {L.ALIGNMENT}-byte aligned", field="offset", offset=at)
    for (start, size, what, _), (nxt, _, other, at) in itertools.pairwise(spans):
        if nxt < start + size:
            raise FormatError(f"{other} at section offset {nxt} (field at offset {at}) overlaps "
                              f"{what}, which spans {start}..{start + size}", field="offset",
                              offset=at)


def _image(e, data: memoryview, base: int, where: str, at: int) -> memoryview | None:
    if e.image_size == 0:
        if e.image_offset:
            raise FormatError(f"{where}: image_offset {e.image_offset} with image_size 0",
                              field="image_offset", offset=base + at + 56)
        return None
    if e.image_offset > len(data) or e.image_size > len(data) - e.image_offset:
        raise FormatError(f"{where}: image_offset {e.image_offset} + image_size {e.image_size} "
                          f"runs past the end of the {len(data)}-byte executables section",
                          field="image_offset", offset=base + at)
    return data[e.image_offset:e.image_offset + e.image_size]


def _v3_executable(e, name, kind, device, image, where: str, at: int) -> Executable:
    if kind not in V3_KINDS:
        raise FormatError(f"{where}: kind {kind.value} at offset {at + 32} is not a version 3 "
                          "kernel", field="kind", offset=at + 32)
    if e.elem_size != 8:
        raise FormatError(f"{where}: elem_size {e.elem_size} at offset {at + 52}; version 3 "
                          "holds f64 (8) only", field="elem_size", offset=at + 52)
    if kind is not KernelKind.MATMUL and e.k:
        raise FormatError(f"{where}: k {e.k} at offset {at + 48} must be 0 for {kind}",
                          field="k", offset=at + 48)
    f64 = DType.F64
    out = TensorType(f64, (e.m, e.n))
    if kind is KernelKind.MATMUL:
        args = (TensorType(f64, (e.m, e.k)), TensorType(f64, (e.k, e.n)), out)
    else:
        args = (out,) * (kind.arity + 1)
    z = 1 if image is not None else 0
    return Executable(name, kind, device, args, (), image, (e.grid_x, e.grid_y, z),
                      (e.block_x, e.block_y, z))


def _v4_executable(e, version: int, name, kind, device, image, data: memoryview, base: int,
                   where: str, at: int) -> Executable:
    if version == 4 and any(e.reserved):  # two reserved words, shown as a list
        _reserved(where, list(e.reserved), base + at + 88)
    if version >= 5:
        _reserved(where, e.reserved, base + at + 92)
    level = e.cpu_level if version >= 5 else 0
    host = device is Device.CPU and image is not None
    if version >= 5 and (level in CPU_LEVELS) != host:
        expected = "1 to 4, the x86-64 level its host image needs" if host else \
            "0: it carries no host image"
        raise FormatError(f"{where}: cpu_level {level} at offset {base + at + 88}; expected "
                          f"{expected}", field="cpu_level", offset=base + at + 88)
    if not kind.takes(e.argc):
        inputs = "at least 1 input" if kind.arity is None else f"{kind.arity} inputs"
        raise FormatError(f"{where}: argc {e.argc} at offset {base + at + 40}; {kind} takes "
                          f"{inputs} + 1 destination", field="argc", offset=base + at + 40)
    size = L.size(L.TensorTypeEntry)
    if e.args_offset > len(data) or e.argc * size > len(data) - e.args_offset:
        raise FormatError(f"{where}: args_offset {e.args_offset} + {e.argc} x {size} bytes runs "
                          "past the end of the executables section", field="args_offset",
                          offset=base + at + 44)
    args = tuple(
        _tensor_type(_struct(L.TensorTypeEntry, data, e.args_offset + j * size, where),
                     f"{where} argument {j}", base + e.args_offset + j * size, version)
        for j in range(e.argc))
    if e.params_offset > len(data) or e.params_count * 8 > len(data) - e.params_offset:
        raise FormatError(f"{where}: params_offset {e.params_offset} + {e.params_count} x 8 "
                          "bytes runs past the end of the executables section",
                          field="params_offset", offset=base + at + 48)
    params = struct.unpack_from(f"<{e.params_count}d", data, e.params_offset)
    return Executable(name, kind, device, args, tuple(params), image,
                      (e.grid_x, e.grid_y, e.grid_z), (e.block_x, e.block_y, e.block_z), level)
