"""No offset in the reader is written by hand: each comes from the declarations in `layout`.

Every field of every record kind of every version is damaged in turn; each refusal that
names the damaged field must report the offset `layout.offset_of` declares for it in that
record (an array's start, for an element of it). A number written into the reader that
disagreed with a declaration would report another offset, and a refusal that went missing
would leave a field below uncovered: either fails here.
"""

import re
import struct

import pytest

import hexir_format as hf
from conftest import FIXTURES
from hexir_format import (
    Command,
    Device,
    DType,
    Executable,
    Function,
    KernelKind,
    Module,
    Slot,
    TensorType,
    records,
)
from hexir_format import layout as L
from hexir_format.model import VERSIONS
from test_dynamic import linear


def _v4() -> bytes:
    """A version 4 module with every kind of record version 4 has: two entry points, each
    command kind, a kernel with params."""
    t, v = TensorType(DType.F32, (2, 3)), TensorType(DType.F64, (3,))
    exes = (Executable("relu_0", KernelKind.RELU, Device.CPU, (t, t)),
            Executable("softmax_1", KernelKind.SOFTMAX, Device.CPU, (t, t), (1.0,)))
    main = Function("main", (Command.input(0, 0), Command.alloc(1, t.nbytes),
                             Command.dispatch(0, (0, 1)), Command.dispatch(1, (1, 2)),
                             Command.copy(3, 2), Command.output(3, 0)))
    other = Function("other", (Command.const(4, 0, v.nbytes), Command.print(4, 1, 3)))
    slots = (Slot(Device.CPU, t),) * 4 + (Slot(Device.CPU, v),)
    return hf.build(Module(4, (main, other), bytes(v.nbytes), exes, slots))


def _v3_add() -> bytes:
    """A version 3 module whose kernel is not a matmul (its k must be 0)."""
    t = TensorType(DType.F64, (2, 2))
    main = Function("main", (Command.alloc(0, t.nbytes), Command.alloc(1, t.nbytes),
                             Command.dispatch(0, (0, 0, 1)), Command.print(1, 2, 2)))
    return hf.build(Module(3, (main,), b"", (Executable("add_0", KernelKind.ADD, Device.CPU,
                                                        (t, t, t)),)))


def _v6_names() -> bytes:
    """A version 6 module with what the compiler's fixtures lack together: variants of an
    entry point, names of its inputs and outputs, a memory plan."""
    t = TensorType(DType.I32, (4,))
    body = (Command.input(0, 0), Command.alloc(1, t.nbytes), Command.dispatch(0, (0, 1)),
            Command.output(1, 0))
    main = [Function("main", body, ("x",), ("y",), cpu_level=level) for level in (1, 3)]
    return hf.build(Module(6, tuple(main), b"", (Executable("neg_0", KernelKind.NEG, Device.CPU,
                                                            (t, t)),),
                           (Slot(Device.CPU, t),) * 2, placements=((1, 64),)))


SOURCES = {
    "v3": lambda: (FIXTURES / "builtin.hxb").read_bytes(),
    "v3-add": _v3_add,
    "v4": _v4,
    "v5": lambda: (FIXTURES / "builtin-cuda.hxb").read_bytes(),
    "v6": _v6_names,
    "v6-host": lambda: (FIXTURES / "builtin-cpu.hxb").read_bytes(),
    "v6-sizes": lambda: hf.build(linear()),  # a dynamic module: sizes section, tagged fields
}


def _sample(found: list[records.Record]) -> list[records.Record]:
    """Every record of a kind that has few, else its first two and its last; commands and
    executables by their own kind (each op, each kernel kind)."""
    by_kind: dict[tuple[str, int], list[records.Record]] = {}
    for record in found:
        own = record.values.kind if record.kind in ("command", "executable") else 0
        by_kind.setdefault((record.kind, own), []).append(record)
    return [r for rs in by_kind.values() for r in (rs if len(rs) <= 3 else rs[:2] + rs[-1:])]


def _hostile(data: bytes, field: records.Field) -> list[tuple[int, bytes]]:
    """(offset, bytes) patches that damage the field."""
    if field.format is None:  # a name (or the magic): empty, not UTF-8, unterminated
        end = field.offset + field.width - 1
        return [(field.offset, b"\0"), (field.offset, b"\xff"), (end, b"x")]
    if field.format.endswith("d"):  # a param: any value is a float
        return []
    (value,) = struct.unpack_from(field.format, data, field.offset)
    top = (1 << 8 * field.width) - 1
    values = {0, 1, 2, 5, 7, 64, top, top >> 1, (value + 1) & top, (value - 1) & top,
              value ^ 0x80, value + 8 & top}
    if field.format[-1].islower():  # a signed field (a program's word): the same bits
        values = {v - (top + 1) if v > top >> 1 else v for v in values}
    return [(field.offset, struct.pack(field.format, v)) for v in sorted(values - {value})]


def _named(record: records.Record, field: records.Field) -> tuple[str, str]:
    """The name an error gives the field, and the path of what it locates: an array whole, a
    command's operand by the name its op gives it."""
    path = re.sub(r"\[\d+\]$", "", field.path)
    if record.kind == "command" and path == "operands":
        index = int(field.path[len("operands["):-1])
        names = hf.OPERAND_NAMES[hf.Op(record.values.kind)]
        return (names[index] if index < len(names) else "slot"), field.path
    return path.rsplit(".", 1)[-1], path


@pytest.mark.parametrize("source", SOURCES)
def test_each_error_reports_its_fields_declared_offset(source):
    data = SOURCES[source]()
    version = hf.parse_layout(data).version
    checked: set[tuple[str, str]] = set()
    for record in _sample(records.records(data)):
        size = L.command_size(len(record.values.operands)) if record.kind == "command" \
            else L.size(record.decl)
        for field in records.fields(record):
            name, path = _named(record, field)
            declared = record.offset + (L.offset_of(record.decl, path) if path else 0)
            for at, patch in _hostile(data, field):
                mutant = data[:at] + patch + data[at + len(patch):]
                try:
                    hf.parse(mutant)
                except hf.FormatError as e:
                    inside = e.offset is not None and 0 <= e.offset - record.offset < size
                    if e.field == name and inside:
                        assert e.offset == declared, \
                            f"v{version} {record.label}.{field.path}: {e} (offset {e.offset})"
                        checked.add((record.kind, name))
    assert checked >= COVERED[source], sorted(COVERED[source] - checked)


_HEADER = {("header", f) for f in ("magic", "version", "flags", "section_count", "reserved")}
_SECTIONS = {("section", f) for f in ("kind", "flags", "offset")}
_SYMBOL = {("symbol", f) for f in ("name", "program_offset")}
_COMMAND = {("command", f) for f in ("kind", "operand_count")}
_EXECUTABLE = {("executables", f) for f in ("count", "reserved")} | {
    ("executable", f) for f in ("name", "kind", "device", "image_offset")}
_V4_EXECUTABLE = {("executable", f) for f in ("argc", "args_offset", "params_offset")}
_TYPES = {(kind, f) for kind in ("argument", "slot") for f in ("dtype", "rank", "dims")} | {
    ("slot", "device"), ("slot", "reserved")}
_PLAN = {("plan", "count"), ("plan", "reserved"), ("placement", "slot"),
         ("placement", "reserved"), ("placement", "offset")}
_NAMES = {("names", "count"), ("names", "reserved"), ("name", "function"), ("name", "role"),
          ("name", "index"), ("name", "size")}
_V5 = _HEADER | _SECTIONS | _SYMBOL | _COMMAND | _EXECUTABLE | _V4_EXECUTABLE | _TYPES | {
    ("symbol", "reserved"), ("executable", "cpu_level"), ("executable", "reserved"),
    ("command", "argc")}

_SIZES = {("sizes", "reserved"), ("sizes", "symbol_count"), ("size_symbol", "name"),
          ("size_symbol", "lo"), ("size_symbol", "hi"), ("program_entry", "offset"),
          ("operand", "executable"), ("operand", "symbol"), ("argument", "dims"),
          ("slot", "dims"), ("executable", "grid_x"), ("executable", "block_x"),
          ("command", "bytes")}

#: What each source's damage must have checked: every field the reader refuses a value of.
COVERED = {
    "v3": _HEADER | _SECTIONS | _SYMBOL | _COMMAND | _EXECUTABLE | {
        ("symbol", "reserved"), ("executable", "elem_size"), ("command", "argc")},
    "v3-add": {("executable", "k"), ("executable", "elem_size"), ("command", "argc")},
    "v4": _HEADER | _SECTIONS | _SYMBOL | _COMMAND | _EXECUTABLE | _V4_EXECUTABLE | _TYPES | {
        ("symbol", "reserved"), ("executable", "reserved"), ("command", "argc")},
    "v5": _V5 | _PLAN,
    "v6": (_V5 - {("symbol", "reserved")}) | {("symbol", "cpu_level")} | _NAMES | _PLAN,
    "v6-host": (_V5 - {("symbol", "reserved")}) | {("symbol", "cpu_level")} | _PLAN,
    "v6-sizes": _SIZES,
}


@pytest.mark.parametrize(("decl", "path", "offset"), [
    (L.Header, "version", 8), (L.Header, "section_count", 16), (L.Header, "reserved", 20),
    (L.SectionEntry, "offset", 8), (L.Symbol, "reserved", 36), (L.SymbolV6, "cpu_level", 36),
    (L.Command, "operands[1]", 16), (L.ExecutableV3, "elem_size", 52),
    (L.ExecutableV3, "image_offset", 56), (L.ExecutableV4, "args_offset", 44),
    (L.ExecutableV4, "reserved[1]", 92), (L.ExecutableV5, "cpu_level", 88),
    (L.ExecutableV5, "reserved", 92), (L.SlotEntry, "type.dims[2]", 32),
    (L.NameEntry, "size", 12), (L.PlanEntry, "offset", 8),
])
def test_offset_of_agrees_with_the_documented_layout(decl, path, offset):
    assert L.offset_of(decl, path) == offset


@pytest.mark.parametrize("path", ["nothing", "reserved[2]", "version.x", "dims[]"])
def test_offset_of_refuses_what_the_record_does_not_have(path):
    with pytest.raises(KeyError):
        L.offset_of(L.ExecutableV4 if path.startswith("reserved") else L.Header, path)


def test_every_version_the_model_names_is_declared():
    assert tuple(L.FORMATS) == VERSIONS
    assert all(L.size(f.symbol) == L.size(L.Symbol) for f in L.FORMATS.values())
    assert L.command_size(3) == L.size(L.CommandHeader) + 3 * L.size(L.Operand) == 32
