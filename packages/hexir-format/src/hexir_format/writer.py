"""Build a `.hxb` from the typed model.

Each section is built from the declarations in `layout`, then placed after the header and
section table at the next 8-byte boundary. The version is the module's own; `minimum_version`
tells a writer whether the smaller, older layout (v3) can express a module.

`write` streams the sections to a file, the read-only data straight from the caller's
buffers (a compiler's constants): a big model's weights are then never copied into one
buffer, which `build` (the bytes of a module) cannot avoid.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import BinaryIO

from construct import Array

from hexir_format import dims
from hexir_format import layout as L
from hexir_format.dims import Dim, Expr
from hexir_format.errors import FormatError
from hexir_format.model import (
    CPU_LEVELS,
    MAX_IO_NAME,
    MAX_NAME,
    MAX_RANK,
    MAX_SYMBOL,
    NAME_BYTES,
    V3_OPS,
    V4_DTYPES,
    Command,
    Device,
    DType,
    Executable,
    Generation,
    KernelKind,
    Module,
    Op,
    SectionKind,
    TensorType,
)


def minimum_version(module: Module) -> int:
    """3 when the v3 layout can hold the module exactly; 6 when an entry point is one x86-64
    level's variant, the module is dynamic (has size symbols), has strings, a string tensor
    or a library kernel, or a generate entry point; 5 when a cpu kernel carries
    a host image, a tensor is of an integer or boolean type, an entry point names its inputs
    or outputs, or the module has a memory plan; else 4."""
    if any(f.cpu_level for f in module.functions) or module.symbols or _v6_only(module):
        return 6
    if (any(exe.device is Device.CPU and exe.image is not None for exe in module.executables)
            or any(t.dtype not in V4_DTYPES for t in _types(module))
            or any(f.inputs or f.outputs for f in module.functions) or module.placements):
        return 5
    return 3 if _v3_problem(module) is None else 4


def _v6_only(module: Module) -> str | None:
    """What of the module only version 6 holds of strings, the library and generation, or
    None."""
    if module.generations:
        return f"a generate entry point ('{module.generations[0].name}')"
    if module.strings:
        return f"a string table ({len(module.strings)} strings)"
    if typed := next((t for t in _types(module) if t.dtype is DType.STRING), None):
        return f"tensor type {typed}"
    if library := next((e for e in module.executables if e.kind is KernelKind.LIBRARY), None):
        return f"library kernel '{library.name}'"
    return None


def _v3_problem(module: Module) -> str | None:
    if module.slots:
        return "typed slots"
    for function in module.functions:
        for command in function.commands:
            if command.op not in V3_OPS:
                return f"the {command.op} command"
    for exe in module.executables:
        if _v3_extents(exe) is None:
            return f"kernel '{exe.name}' ({exe.kind} on {', '.join(map(str, exe.args))})"
    return None


def _v3_extents(exe: Executable) -> tuple[int, int, int] | None:
    """(m, n, k) when the kernel is one v3 can describe: f64 extents, no params, no z axis."""
    if exe.params or exe.destination.dtype is not DType.F64:
        return None
    if exe.image is not None and (exe.grid[2] != 1 or exe.block[2] != 1):
        return None
    return exe.extents


def build(module: Module) -> bytes:
    """The bytes of `module` in its own version's layout."""
    out = io.BytesIO()
    write(module, out)
    return out.getvalue()  # BytesIO hands over its buffer: no second copy


def write(module: Module, out: BinaryIO, rodata: Iterable | None = None) -> int:
    """Write `module` in its own version's layout to `out` (a binary file, at its start or
    anywhere: offsets are the module's own) and return the bytes written. `rodata`, where
    given, is the read-only data as a sequence of pieces written one after the other, in
    place of `module.rodata` (which must then be empty): nothing joins them. A piece is a
    byte buffer, or a callable with an `nbytes` that makes its buffer as it is written (a
    compiler's packed weight: it exists only while it is written)."""
    pieces = [memoryview(module.rodata)] if rodata is None else \
        [p if callable(p) else memoryview(p) for p in rodata]
    if rodata is not None and len(module.rodata):
        raise FormatError("the read-only data is given twice: the module's and as pieces")
    if module.version == 3 and (problem := _v3_problem(module)):
        raise FormatError(f"version 3 cannot express {problem}; write version 4")
    if module.version not in L.FORMATS:
        raise FormatError(f"cannot write version {module.version}; expected 3, 4, 5 or 6")
    if module.version < 6 and (variant := next((f for f in module.functions if f.cpu_level),
                                               None)):
        raise FormatError(f"entry point '{variant.name}' is the variant for "
                          f"{CPU_LEVELS.get(variant.cpu_level, variant.cpu_level)}, which only "
                          f"version 6 holds; this module is version {module.version}")
    if module.version < 5 and (host := next((e for e in module.executables
                                             if e.device is Device.CPU and e.image is not None),
                                            None)):
        raise FormatError(f"cpu kernel '{host.name}' carries a host image, which only version 5 "
                          f"holds; this module is version {module.version}")
    if module.version < 6 and (problem := _v6_only(module)):
        raise FormatError(f"{problem} needs version 6; this module is version {module.version}")
    sizes = _Sizes(module)
    symbols, program = _symbols_and_program(module, sizes)
    #: each section's payload: its bytes, or (RODATA) the pieces written one after another
    sections: list[tuple[SectionKind, bytes | list[memoryview]]] = [
        (SectionKind.SYMBOLS, symbols),
        (SectionKind.PROGRAM, program),
        (SectionKind.RODATA, pieces),
        (SectionKind.EXECUTABLES, _executables(module, sizes)),
    ]
    named = [f for f in module.functions if f.inputs or f.outputs]
    if named and module.version < 5:
        raise FormatError(f"entry point '{named[0].name}' names its inputs or outputs, which only "
                          f"version 5 holds; this module is version {module.version}")
    if module.version < 5 and (typed := next((t for t in _types(module)
                                              if t.dtype not in V4_DTYPES), None)):
        raise FormatError(f"tensor type {typed} needs version 5; this module is version "
                          f"{module.version}")
    if module.version >= 4:
        sections.append((SectionKind.SLOTS, b"".join(
            L.SlotEntry.build(dict(device=s.device, reserved=0, type=_type(s.type, sizes)))
            for s in module.slots)))
    if named:
        sections.append((SectionKind.NAMES, _names(module)))
    if module.placements:
        if module.version < 5:
            raise FormatError(f"a memory plan needs version 5; this module is version "
                              f"{module.version}")
        slots = [slot for slot, _ in module.placements]
        if slots != sorted(set(slots)):
            raise FormatError("the memory plan must name each slot once, in increasing order")
        sections.append((SectionKind.PLAN, L.PlanHeader.build(dict(
            count=len(module.placements), reserved=0)) + b"".join(
            L.PlanEntry.build(dict(slot=slot, reserved=0, offset=offset))
            for slot, offset in module.placements)))
    if module.symbols:
        sections.append((SectionKind.SIZES, sizes.build()))
    if module.strings:
        sections.append((SectionKind.STRINGS, _strings(module.strings)))
    if module.generations:
        sections.append((SectionKind.GENERATE, _generations(module.generations)))
    table, end = [], L.Header.sizeof() + len(sections) * L.SectionEntry.sizeof()
    for kind, payload in sections:
        size = sum(p.nbytes for p in payload) if isinstance(payload, list) else len(payload)
        table.append(dict(kind=kind, flags=0, offset=L.align(end), size=size))
        end = L.align(end) + size
    written = out.write(L.Header.build(dict(
        version=module.version, flags=0, section_count=len(sections), reserved=0,
    )) + b"".join(L.SectionEntry.build(e) for e in table))
    for (_, payload), entry in zip(sections, table, strict=True):
        written += out.write(bytes(entry["offset"] - written))
        for piece in (payload if isinstance(payload, list) else (payload,)):
            made = piece() if callable(piece) else piece
            if callable(piece) and memoryview(made).nbytes != piece.nbytes:
                raise FormatError(f"a read-only data piece made {memoryview(made).nbytes} "
                                  f"bytes; it announced {piece.nbytes}")
            written += out.write(made)
    return written


def _types(module: Module):
    yield from (s.type for s in module.slots)
    for exe in module.executables:
        yield from exe.args


def _names(module: Module) -> bytes:
    entries, strings = [], bytearray()
    rows = [(i, role, names) for i, f in enumerate(module.functions)
            for role, names in enumerate((f.inputs, f.outputs))]
    count = sum(len(names) for *_, names in rows)
    start = L.size(L.NamesHeader) + count * L.size(L.NameEntry)
    for i, role, names in rows:
        if len(set(names)) != len(names):
            raise FormatError(f"entry point '{module.functions[i].name}' names two "
                              f"{('inputs', 'outputs')[role]} alike: {', '.join(names)}")
        for index, name in enumerate(names):
            raw = name.encode("utf-8")
            if not 0 < len(raw) <= MAX_IO_NAME or b"\0" in raw:
                raise FormatError(f"name '{name}' must be 1 to {MAX_IO_NAME} bytes without NUL")
            entries.append(L.NameEntry.build(dict(function=i, role=role, index=index,
                                                  size=len(raw), offset=start + len(strings))))
            strings += raw
    return L.NamesHeader.build(dict(count=count, reserved=0)) + b"".join(entries) + strings


def _strings(strings: tuple[str, ...]) -> bytes:
    entries, raw = bytearray(), bytearray()
    start = L.size(L.StringsHeader) + len(strings) * L.size(L.StringEntry)
    for n, text in enumerate(strings):
        if not isinstance(text, str):
            raise FormatError(f"string {n} is {type(text).__name__} {text!r}; expected a str")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise FormatError(f"string {n} cannot be UTF-8 ({e.reason})") from None
        entries += L.StringEntry.build(dict(offset=start + len(raw), size=len(data)))
        raw += data
    if start + len(raw) > 0xFFFFFFFF:
        raise FormatError(f"the string table is {start + len(raw)} bytes; its offsets are "
                          "32-bit, so it holds at most 4 GiB")
    return L.StringsHeader.build(dict(count=len(strings), reserved=0)) + bytes(entries) + \
        bytes(raw)


def _generations(generations: tuple[Generation, ...]) -> bytes:
    out = [L.GenerateHeader.build(dict(count=len(generations), reserved=0))]
    for g in generations:
        out.append(L.GenerateRecord.build(dict(
            name=_name(g.name, "generation"), step=_name(g.step, "generation step"),
            ids=g.ids, mask=g.mask, positions=g.positions, logits=g.logits,
            cache_count=len(g.cache), reserved=0, eos=g.eos, max_length=g.max_length)))
        out += [L.CachePair.build(dict(past=past, present=present)) for past, present in g.cache]
    return b"".join(out)


def _name(name: str, what: str) -> bytes:
    raw = name.encode("utf-8")
    if not raw or len(raw) > MAX_NAME or b"\0" in raw:
        raise FormatError(f"{what} name '{name}' must be 1 to {MAX_NAME} bytes")
    return raw.ljust(NAME_BYTES, b"\0")


class _Sizes:
    """A dynamic module's sizes section in the making: its symbols (checked), and each
    distinct expression the module holds, numbered in the order the writer first meets it,
    which the fields that hold it name by that number (`tag64`, `tag32`)."""

    def __init__(self, module: Module):
        self.module = module
        self.names = [s.name for s in module.symbols]
        self.programs: dict[Expr, int] = {}
        if module.symbols and module.version < 6:
            raise FormatError(f"size symbols ({', '.join(self.names)}) need version 6; this "
                              f"module is version {module.version}")
        if module.symbols and module.placements:
            raise FormatError("a dynamic module has no memory plan: the runtime plans each "
                              "call's sizes")
        for s in module.symbols:
            _name(s.name, "size symbol")
            if not 0 <= s.lo <= s.hi <= MAX_SYMBOL:
                raise FormatError(f"size symbol '{s.name}': range {s.lo}..{s.hi}; expected "
                                  f"0 <= lo <= hi <= {MAX_SYMBOL}")
        if len(set(self.names)) != len(self.names):
            raise FormatError(f"size symbols name one twice: {', '.join(self.names)}")
        for i, exe in enumerate(module.executables):
            if bad := [k for k in exe.operands if not 0 <= k < len(self.names)]:
                raise FormatError(f"kernel '{exe.name}' (executable {i}) takes symbol {bad[0]} "
                                  f"as an operand; the module has {len(self.names)}")

    def _index(self, d: Expr) -> int:
        if self.module.version < 6:
            raise FormatError(f"dimension '{dims.render(d)}' is an expression, which only "
                              f"version 6 holds; this module is version {self.module.version}")
        if d not in self.programs:
            try:
                dims.encode(d, self.names)
            except dims.DimError as e:
                raise FormatError(f"dimension '{dims.render(d)}': {e}") from None
            self.programs[d] = len(self.programs)
        return self.programs[d]

    def tag64(self, d: Dim) -> int:
        """A 64-bit size field's value: the number, or TAG64 | the expression's index."""
        return self._number(d, L.TAG64) if isinstance(d, int) else L.TAG64 | self._index(d)

    def tag32(self, d: Dim) -> int:
        """A 32-bit launch geometry field's value: the number, or TAG32 | the index."""
        return self._number(d, L.TAG32) if isinstance(d, int) else L.TAG32 | self._index(d)

    def _number(self, d: int, tag: int) -> int:
        """A number that version 6 would read as an expression's tag is no size it holds."""
        if self.module.version >= 6 and d >= tag:
            raise FormatError(f"size {d} does not fit its field in version 6, whose top bit "
                              "marks an expression")
        return d

    def build(self) -> bytes:
        symbols = b"".join(L.SizeSymbol.build(dict(name=_name(s.name, "size symbol"), lo=s.lo,
                                                   hi=s.hi)) for s in self.module.symbols)
        operands = [(i, k) for i, exe in enumerate(self.module.executables)
                    for k in exe.operands]
        programs = [dims.encode(d, self.names) for d in self.programs]
        start = (L.size(L.SizesHeader) + len(symbols) + len(programs) * L.size(L.ProgramEntry)
                 + len(operands) * L.size(L.OperandEntry))
        entries, words = bytearray(), bytearray()
        for program in programs:
            entries += L.ProgramEntry.build(dict(offset=start + len(words), words=len(program)))
            words += b"".join(L.ProgramWord.build(w) for w in program)
        return (L.SizesHeader.build(dict(symbol_count=len(self.module.symbols),
                                         program_count=len(programs),
                                         operand_count=len(operands), reserved=0))
                + symbols + bytes(entries)
                + b"".join(L.OperandEntry.build(dict(executable=i, symbol=k))
                           for i, k in operands)
                + bytes(words))


def _symbols_and_program(module: Module, sizes: _Sizes) -> tuple[bytes, bytes]:
    symbols, program = bytearray(), bytearray()
    symbol = L.FORMATS[module.version].symbol  # its last word: reserved, or (v6) cpu_level
    levels: dict[str, set[int]] = {}
    for function in module.functions:
        level, seen = function.cpu_level, levels.setdefault(function.name, set())
        if level not in (0, *CPU_LEVELS):
            raise FormatError(f"entry point '{function.name}': cpu_level {level} is not an "
                              "x86-64 level (1 to 4) or 0")
        if level in seen or (seen and 0 in (level, *seen)):
            raise FormatError(f"entry point '{function.name}' is defined twice"
                              + (f" for {CPU_LEVELS[level]}" if level else ""))
        seen.add(level)
        symbols += symbol.build(dict(name=_name(function.name, "entry point"),
                                     program_offset=len(program), cpu_level=level, reserved=0))
        for command in (*function.commands, Command.end()):
            program += L.CommandHeader.build(dict(kind=command.op,
                                                  operand_count=len(command.operands)))
            operands = command.operands
            if command.op is Op.ALLOC:  # its bytes may be an expression
                operands = (*operands[:1], *map(sizes.tag64, operands[1:]))
            program += b"".join(L.Operand.build(v) for v in operands)
    return bytes(symbols), bytes(program)


def _type(t: TensorType, sizes: _Sizes) -> dict:
    if t.rank > MAX_RANK:
        raise FormatError(f"tensor type {t} has rank {t.rank}; at most {MAX_RANK} is supported")
    return dict(dtype=t.dtype, rank=t.rank,
                dims=[*map(sizes.tag64, t.shape), *[0] * (MAX_RANK - t.rank)])


def _executables(module: Module, sizes: _Sizes) -> bytes:
    exes = module.executables
    table_end = L.ExecutablesHeader.sizeof() + len(exes) * L.EXECUTABLE[module.version].sizeof()
    out = bytearray(table_end)  # the header and entries, filled in once every offset is known
    placed: list[list[int]] = []  # [args_offset, params_offset, image_offset]
    for exe in exes:  # v4 argument types and params, after the entries
        args_offset = len(out)
        if module.version >= 4:
            out += b"".join(L.TensorTypeEntry.build(_type(t, sizes)) for t in exe.args)
        params_offset = len(out)
        if module.version >= 4:
            out += b"".join(L.Param.build(p) for p in exe.params)
        placed.append([args_offset, params_offset, 0])
    for exe, where in zip(exes, placed, strict=True):  # then the images, each at an 8-byte boundary
        if exe.image is not None and len(exe.image):
            out += bytes(L.align(len(out)) - len(out))
            where[2] = len(out)
            out += exe.image
    out[:table_end] = L.ExecutablesHeader.build(dict(count=len(exes), reserved=0)) + b"".join(
        _entry(module.version, exe, sizes, *where) for exe, where in zip(exes, placed,
                                                                          strict=True))
    return bytes(out)


def _entry(version: int, exe: Executable, sizes: _Sizes, args_offset: int, params_offset: int,
           image_offset: int) -> bytes:
    image_size = len(exe.image) if exe.image is not None else 0
    common = dict(name=_name(exe.name, "kernel"), kind=exe.kind, device=exe.device,
                  image_offset=image_offset, image_size=image_size)
    if version == 3:
        m, n, k = _v3_extents(exe)  # type: ignore[misc]  # checked by _v3_problem
        return L.ExecutableV3.build(dict(
            common, m=m, n=n, k=k, elem_size=exe.destination.dtype.itemsize,
            grid_x=exe.grid[0], grid_y=exe.grid[1], block_x=exe.block[0], block_y=exe.block[1]))
    grid, block = [sizes.tag32(d) for d in exe.grid], [sizes.tag32(d) for d in exe.block]
    fields = dict(
        common, argc=len(exe.args), args_offset=args_offset, params_offset=params_offset,
        params_count=len(exe.params), grid_x=grid[0], grid_y=grid[1], grid_z=grid[2],
        block_x=block[0], block_y=block[1], block_z=block[2])
    decl = L.EXECUTABLE[version]
    reserved = L.field_of(decl, "reserved")  # v4: two words; v5 on: one, after cpu_level
    zero = [0] * reserved.count if isinstance(reserved, Array) else 0
    return decl.build(dict(fields, cpu_level=exe.cpu_level, reserved=zero))

