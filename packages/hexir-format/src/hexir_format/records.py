"""Where every record of a `.hxb` lies, and every field of each, from the declarations.

For tools that address a file's bytes field by field -- the damage campaigns, which set each
field in turn to hostile values, and the tests that prove an error's offset is the declared
offset of the field it names -- so that they walk a file the way `layout` declares it instead
of repeating its arithmetic. The file must parse: each record is found through offsets the
reader has already checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from construct import Array, Construct, Struct

from hexir_format import layout as L
from hexir_format.model import Op, SectionKind
from hexir_format.reader import Buffer, parse


@dataclass(frozen=True)
class Record:
    """One record: `kind` is its declaration's role (`header`, `section`, `symbol`, `command`,
    `executables`, `executable`, `argument`, `param`, `slot`, `names`, `name`, `plan`,
    `placement`, `strings`, `string`, `generate`, `generation`, `cache_pair`, and a dynamic
    module's `sizes`, `size_symbol`,
    `program_entry`, `operand`, `word`); `label` names it uniquely in the file (`section[2]`,
    `exe[1].arg[0]`, `dispatch@48`); `values` is what construct parsed there."""

    kind: str
    label: str
    decl: Construct
    offset: int
    values: Any


@dataclass(frozen=True)
class Field:
    """One leaf field of a record: an integer, a float, or a byte string (a name, the magic).
    `path` is its path inside the record (`flags`, `type.dims[2]`, `operands[1]`; empty for
    a record that is one value, a param), as `layout.offset_of` takes it."""

    record: Record
    path: str
    offset: int
    format: str | None  # the struct format of a number ("<I", "<Q", "<d"); None for bytes

    @property
    def width(self) -> int:
        return L.size(L.field_of(self.record.decl, self.path) if self.path else self.record.decl)


def records(data: Buffer) -> list[Record]:
    """Every fixed record of the file, in file order within each section, sections in the
    writer's order; an executable's argument types and params follow its entry."""
    module = parse(data)
    view = memoryview(data).cast("B")
    fmt = L.FORMATS[module.version]
    assert module.layout is not None
    sections = {s.kind: s for s in module.layout.sections}

    def read(kind: str, label: str, decl: Construct, offset: int, size: int = 0) -> Record:
        size = size or L.size(decl)
        return Record(kind, label, decl, offset,
                      L.compiled(decl).parse(bytes(view[offset:offset + size])))

    head, entry = L.size(L.Header), L.size(L.SectionEntry)
    out = [read("header", "header", L.Header, 0)]
    out += [read("section", f"section[{i}]", L.SectionEntry, head + i * entry)
            for i in range(len(module.layout.sections))]
    symbols, size = sections[SectionKind.SYMBOLS], L.size(fmt.symbol)
    out += [read("symbol", f"symbol[{i}]", fmt.symbol, symbols.offset + i * size)
            for i in range(symbols.size // size)]
    program, pc = sections[SectionKind.PROGRAM], 0
    while pc < program.size:
        h = read("command", "", L.CommandHeader, program.offset + pc)
        size = L.command_size(h.values.operand_count)
        out.append(read("command", f"{Op(h.values.kind)}@{pc}", L.Command, program.offset + pc,
                        size))
        pc += size
    exes = sections[SectionKind.EXECUTABLES]
    out.append(read("executables", "executables", L.ExecutablesHeader, exes.offset))
    size = L.size(fmt.executable)
    for i in range(len(module.executables)):
        exe = read("executable", f"exe[{i}]", fmt.executable,
                   exes.offset + L.size(L.ExecutablesHeader) + i * size)
        out.append(exe)
        if "argc" in exe.values:
            args, params = exe.values.args_offset, exe.values.params_offset
            out += [read("argument", f"exe[{i}].arg[{j}]", L.TensorTypeEntry,
                         exes.offset + args + j * L.size(L.TensorTypeEntry))
                    for j in range(exe.values.argc)]
            out += [read("param", f"exe[{i}].param[{j}]", L.Param,
                         exes.offset + params + j * L.size(L.Param))
                    for j in range(exe.values.params_count)]
    if slots := sections.get(SectionKind.SLOTS):
        out += [read("slot", f"slot[{i}]", L.SlotEntry, slots.offset + i * L.size(L.SlotEntry))
                for i in range(slots.size // L.size(L.SlotEntry))]
    for kind, header, entry_kind, decl in ((SectionKind.NAMES, L.NamesHeader, "name",
                                            L.NameEntry),
                                           (SectionKind.PLAN, L.PlanHeader, "placement",
                                            L.PlanEntry),
                                           (SectionKind.STRINGS, L.StringsHeader, "string",
                                            L.StringEntry)):
        if section := sections.get(kind):
            table = read(str(kind), str(kind), header, section.offset)
            out.append(table)
            out += [read(entry_kind, f"{entry_kind}[{n}]", decl,
                         section.offset + L.size(header) + n * L.size(decl))
                    for n in range(table.values.count)]
    if sizes := sections.get(SectionKind.SIZES):
        h = read("sizes", "sizes", L.SizesHeader, sizes.offset)
        out.append(h)
        at = sizes.offset + L.size(L.SizesHeader)
        for role, decl, count in (("size_symbol", L.SizeSymbol, h.values.symbol_count),
                                  ("program_entry", L.ProgramEntry, h.values.program_count),
                                  ("operand", L.OperandEntry, h.values.operand_count)):
            out += [read(role, f"{role}[{n}]", decl, at + n * L.size(decl))
                    for n in range(count)]
            at += count * L.size(decl)
        word = L.size(L.ProgramWord)
        out += [read("word", f"word[{n}]", L.ProgramWord, at + n * word)
                for n in range((sizes.offset + sizes.size - at) // word)]
    if generate := sections.get(SectionKind.GENERATE):
        h = read("generate", "generate", L.GenerateHeader, generate.offset)
        out.append(h)
        at = generate.offset + L.size(L.GenerateHeader)
        for n in range(h.values.count):
            r = read("generation", f"generation[{n}]", L.GenerateRecord, at)
            out.append(r)
            at += L.size(L.GenerateRecord)
            out += [read("cache_pair", f"generation[{n}].cache[{k}]", L.CachePair,
                         at + k * L.size(L.CachePair)) for k in range(r.values.cache_count)]
            at += r.values.cache_count * L.size(L.CachePair)
    return out


def fields(record: Record) -> Iterator[Field]:
    """Every leaf field of `record`, in declaration order; an array element by element."""
    yield from _leaves(record, record.decl, "")


def _leaves(record: Record, decl: Construct, prefix: str) -> Iterator[Field]:
    if not isinstance(decl, Struct):  # a record that is one value (a param)
        yield Field(record, prefix, record.offset, getattr(decl, "fmtstr", None))
        return
    values = record.values
    for step in filter(None, prefix.rstrip(".").split(".")):
        values = values[step]
    for sub in decl.subcons:
        path, inner = f"{prefix}{sub.name}", sub.subcon
        if isinstance(inner, Struct):
            yield from _leaves(record, inner, f"{path}.")
        elif isinstance(inner, Array):  # a counted array (operands) has as many as were read
            for k in range(len(values[sub.name])):
                element = f"{path}[{k}]"
                yield Field(record, element, record.offset + L.offset_of(record.decl, element),
                            getattr(inner.subcon, "fmtstr", None))
        else:
            yield Field(record, path, record.offset + L.offset_of(record.decl, path),
                        getattr(inner, "fmtstr", None))
