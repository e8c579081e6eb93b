"""Every on-disk record of a `.hxb`, of every version the reader accepts, declared once.

The records are construct Structs; what differs between versions is a `Format` entry
(which symbol and executable record, which sections, commands and element types), not a
branch on a number in the code that reads them. The reader, the writer, the validator,
hxb-dump and the runtime's damage campaign take every size and every field offset from here
(`size`, `offset_of`, `command_size`), so no two of them can disagree about where a field
lies, and an error's offset is the declared offset of the field it names.
"""

from __future__ import annotations

import collections
import functools
import re
import struct
from dataclasses import dataclass
from typing import Any

from construct import (
    Array,
    Bytes,
    Const,
    Construct,
    Float64l,
    FormatField,
    Int32ul,
    Int64sl,
    Int64ul,
    Struct,
    this,
)

from hexir_format.model import (
    MAGIC,
    MAX_RANK,
    NAME_BYTES,
    V3_OPS,
    V4_DTYPES,
    V5_DTYPES,
    DType,
    KernelKind,
    Op,
    SectionKind,
)

Header = Struct(
    "magic" / Const(MAGIC),
    "version" / Int32ul,
    "flags" / Int32ul,
    "section_count" / Int32ul,
    "reserved" / Int32ul,
)

SectionEntry = Struct(
    "kind" / Int32ul,
    "flags" / Int32ul,
    "offset" / Int64ul,
    "size" / Int64ul,
)

Symbol = Struct(
    "name" / Bytes(NAME_BYTES),
    "program_offset" / Int32ul,
    "reserved" / Int32ul,
)

# A command is this header followed by `operand_count` u64 operands (`Command`).
CommandHeader = Struct(
    "kind" / Int32ul,
    "operand_count" / Int32ul,
)
Operand = Int64ul
Command = Struct(*CommandHeader.subcons, "operands" / Array(this.operand_count, Operand))

ExecutablesHeader = Struct(
    "count" / Int32ul,
    "reserved" / Int32ul,
)

ExecutableV3 = Struct(
    "name" / Bytes(NAME_BYTES),
    "kind" / Int32ul,
    "device" / Int32ul,
    "m" / Int32ul,
    "n" / Int32ul,
    "k" / Int32ul,
    "elem_size" / Int32ul,
    "image_offset" / Int32ul,
    "image_size" / Int32ul,
    "grid_x" / Int32ul,
    "grid_y" / Int32ul,
    "block_x" / Int32ul,
    "block_y" / Int32ul,
)

ExecutableV4 = Struct(
    "name" / Bytes(NAME_BYTES),
    "kind" / Int32ul,
    "device" / Int32ul,
    "argc" / Int32ul,
    "args_offset" / Int32ul,
    "params_offset" / Int32ul,
    "params_count" / Int32ul,
    "image_offset" / Int32ul,
    "image_size" / Int32ul,
    "grid_x" / Int32ul,
    "grid_y" / Int32ul,
    "grid_z" / Int32ul,
    "block_x" / Int32ul,
    "block_y" / Int32ul,
    "block_z" / Int32ul,
    "reserved" / Array(2, Int32ul),
)

TensorTypeEntry = Struct(
    "dtype" / Int32ul,
    "rank" / Int32ul,
    "dims" / Array(MAX_RANK, Int64ul),
)

SlotEntry = Struct(
    "device" / Int32ul,
    "reserved" / Int32ul,
    "type" / TensorTypeEntry,
)

Param = Float64l

# Version 5: version 4's entry, its first reserved word now the x86-64 level (1-4: x86-64,
# x86-64-v2, -v3, -v4) a cpu kernel's host image needs (0 for a cuda kernel).
ExecutableV5 = Struct(*ExecutableV4.subcons[:-1], "cpu_level" / Int32ul, "reserved" / Int32ul)

# Version 5's optional names section: this header, `count` entries ordered by (function,
# role, index) with indices 0, 1, ... for each function and role, then the names' UTF-8 bytes,
# back to back in entry order (`offset` counts from the section's start).
NamesHeader = ExecutablesHeader

NameEntry = Struct(
    "function" / Int32ul,  # the entry point's symbol index
    "role" / Int32ul,  # 0: an input, 1: an output
    "index" / Int32ul,
    "size" / Int32ul,
    "offset" / Int64ul,
)

# Version 5's optional plan section: this header, then `count` entries in increasing slot order.
PlanHeader = ExecutablesHeader

PlanEntry = Struct(
    "slot" / Int32ul,
    "reserved" / Int32ul,
    "offset" / Int64ul,  # in the arena of the slot's device, a multiple of 64
)

# Version 6: version 5's layout, the symbol's reserved word now the x86-64 level (1-4, 0 for
# none) the entry point's variant was compiled for; symbols may then repeat a name, once per
# level (`model.Function.cpu_level`).
SymbolV6 = Struct(*Symbol.subcons[:-1], "cpu_level" / Int32ul)

# Version 6's optional sizes section, a dynamic module's: this header; `symbol_count` size
# symbols; `program_count` program entries, each placing one expression program (a postfix
# program of `ProgramWord`s, `dims.encode`) in the words that follow, back to back in entry
# order (`offset` in bytes from the section's start); `operand_count` operand entries, ordered
# by executable, each giving one symbol an executable receives (in order, as int64 arguments
# after its buffers, `model.Executable.operands`); then the programs' words.
SizesHeader = Struct(
    "symbol_count" / Int32ul,
    "program_count" / Int32ul,
    "operand_count" / Int32ul,
    "reserved" / Int32ul,
)

SizeSymbol = Struct(
    "name" / Bytes(NAME_BYTES),
    "lo" / Int64ul,  # the inclusive range of values a call may give it
    "hi" / Int64ul,
)

ProgramEntry = Struct(
    "offset" / Int32ul,
    "words" / Int32ul,
)

OperandEntry = Struct(
    "executable" / Int32ul,
    "symbol" / Int32ul,
)

ProgramWord = Int64sl  # an opcode, or an immediate (a CONST's value may be negative)

# Version 6's optional strings section, the module's string table (`model.Module.strings`):
# this header, `count` entries in string order, then the strings' UTF-8 bytes back to back in
# entry order (`offset` counts from the section's start; a string may be empty). A STRING
# tensor's elements are int64 handles into this table (`model.DType.STRING`).
StringsHeader = ExecutablesHeader

StringEntry = Struct(
    "offset" / Int32ul,
    "size" / Int32ul,
)

# Version 6's optional generate section (`model.Generation`): this header, then `count`
# records, each followed by its `cache_count` pairs. The names are entry points': the one the
# record makes and the one it runs each step; the indices are the step's inputs and outputs.
GenerateHeader = ExecutablesHeader

GenerateRecord = Struct(
    "name" / Bytes(NAME_BYTES),
    "step" / Bytes(NAME_BYTES),
    "ids" / Int32ul,
    "mask" / Int32ul,
    "positions" / Int32ul,
    "logits" / Int32ul,
    "cache_count" / Int32ul,
    "reserved" / Int32ul,
    "eos" / Int64sl,  # -1: none
    "max_length" / Int64ul,
)

CachePair = Struct(
    "past" / Int32ul,  # the step's input index
    "present" / Int32ul,  # the step's output index
)

# A size field that holds "expression #k of the sizes section" (version 6) rather than a
# number: the field's top bit set, k in the bits below. Tensor dimensions and ALLOC's bytes
# (64-bit) use TAG64, the launch geometry (32-bit grid_* and block_*) TAG32; no static value
# of those fields can set the bit (MAX_BYTES < 2**63, every launch limit < 2**31).
TAG64, TAG32 = 1 << 63, 1 << 31

ALIGNMENT = 8


@dataclass(frozen=True)
class Format:
    """What one version of the format holds: the records whose layout changed between
    versions, and what may appear in its sections (the reader refuses the rest by name)."""

    number: int
    symbol: Construct
    executable: Construct
    sections: frozenset[SectionKind]  # the kinds a file may hold
    required: tuple[SectionKind, ...]  # the kinds it must hold, in the order they are checked
    ops: frozenset[Op]  # the command kinds of its program
    dtypes: frozenset[DType]  # the element types of its tensors
    kinds: frozenset[KernelKind]  # the kernel kinds of its executables


_V3_SECTIONS = (SectionKind.SYMBOLS, SectionKind.PROGRAM, SectionKind.RODATA,
                SectionKind.EXECUTABLES)
_V4_SECTIONS = (*_V3_SECTIONS, SectionKind.SLOTS)
_V5_SECTIONS = frozenset({*_V4_SECTIONS, SectionKind.NAMES, SectionKind.PLAN})
_V6_SECTIONS = frozenset({*_V5_SECTIONS, SectionKind.SIZES, SectionKind.STRINGS,
                          SectionKind.GENERATE})
_ALL_OPS, _ALL_DTYPES, _ALL_KINDS = frozenset(Op), frozenset(DType), frozenset(KernelKind)
#: The kernel kinds before version 6 (LIBRARY is version 6's).
_V5_KINDS = _ALL_KINDS - {KernelKind.LIBRARY}

#: Every version the reader accepts (`model.VERSIONS`), by number.
FORMATS = {
    3: Format(3, Symbol, ExecutableV3, frozenset(_V3_SECTIONS), _V3_SECTIONS, V3_OPS,
               V4_DTYPES, _V5_KINDS),
    4: Format(4, Symbol, ExecutableV4, frozenset(_V4_SECTIONS), _V4_SECTIONS, _ALL_OPS,
               V4_DTYPES, _V5_KINDS),
    5: Format(5, Symbol, ExecutableV5, _V5_SECTIONS, _V4_SECTIONS, _ALL_OPS, V5_DTYPES,
               _V5_KINDS),
    6: Format(6, SymbolV6, ExecutableV5, _V6_SECTIONS, _V4_SECTIONS, _ALL_OPS, _ALL_DTYPES,
               _ALL_KINDS),
}
#: The executable entry of each version (the writer's and the tools' shorthand).
EXECUTABLE = {n: v.executable for n, v in FORMATS.items()}


@functools.cache
def size(decl: Construct) -> int:
    """`decl.sizeof()`, which construct recomputes on every call (the reader asks often)."""
    return decl.sizeof()


@functools.cache
def compiled(decl: Construct) -> Construct:
    """`decl` compiled by construct: the same parse, several times faster."""
    return decl.compile()


@functools.cache
def _table_format(decl: Construct) -> tuple[struct.Struct, Any]:
    """A flat Struct of little-endian integer fields as one `struct` format, and a named
    tuple of its field names."""
    fields = [(sub.name, sub.subcon) for sub in decl.subcons]
    if not all(isinstance(field, FormatField) and field.fmtstr[0] == "<"
               for _, field in fields):
        raise TypeError(f"{decl} is not a flat Struct of little-endian integers")
    return (struct.Struct("<" + "".join(field.fmtstr[1:] for _, field in fields)),
            collections.namedtuple("Record", [name for name, _ in fields]))


def table(decl: Construct, data, count: int) -> list:
    """The first `count` records of `decl` (a flat Struct of little-endian integers) in
    `data`, which the caller has bounds-checked, as named tuples: unpacked at once by
    `struct` from the one declaration, where construct parses a record at a time (an ELF
    object's symbols and relocations: ~8 us a record, most of a module's validation)."""
    form, record = _table_format(decl)
    return [record._make(values) for values in
            form.iter_unpack(memoryview(data).cast("B")[:count * form.size])]


_STEP = re.compile(r"(\w+)(?:\[(\d+)\])?$")


@functools.cache
def offset_of(decl: Construct, path: str) -> int:
    """Where field `path` of fixed-size Struct `decl` starts, in bytes from the record's start:
    the sum of the sizes of the fields declared before it (so a field after a counted array,
    which no record has, cannot be located). `path` names a nested field with dots and an
    array element by index: `"type.rank"`, `"dims[2]"`, `"reserved[1]"`. An error's offset is
    this, added to where its record lies."""
    return _locate(decl, path)[0]


@functools.cache
def field_of(decl: Construct, path: str) -> Construct:
    """The declaration of field `path` of `decl` (as `offset_of` names it): what it holds."""
    return _locate(decl, path)[1]


@functools.cache
def _locate(decl: Construct, path: str) -> tuple[int, Construct]:
    name, _, rest = path.partition(".")
    step = _STEP.match(name)
    if step is None or not isinstance(decl, Struct):
        raise KeyError(f"{path!r} is not a field path")
    at = 0
    for sub in decl.subcons:
        if sub.name == step[1]:
            inner = sub.subcon
            if step[2] is not None:  # an element; a counted array's (operands) may be any
                if not isinstance(inner, Array) or (isinstance(inner.count, int)
                                                    and int(step[2]) >= inner.count):
                    raise KeyError(f"{path!r}: {step[1]} is not an array of that length")
                at += int(step[2]) * size(inner.subcon)
                inner = inner.subcon
            if not rest:
                return at, inner
            within, field = _locate(inner, rest)
            return at + within, field
        at += size(sub)
    raise KeyError(f"{decl} has no field {step[1]!r}")


def command_size(operand_count: int) -> int:
    """The bytes of a command with `operand_count` operands: its header, then the operands."""
    return size(CommandHeader) + operand_count * size(Operand)


def align(offset: int) -> int:
    """Round up to the payload alignment (8 bytes), the one rule every offset obeys."""
    return -(-offset // ALIGNMENT) * ALIGNMENT
