"""Every fixed-size structure of a `.hxb`, declared once with construct.

The reader and the writer both use these declarations, so the two cannot drift; the sizes
asserted in the tests (header 24, section entry 24, symbol 40, executable 80/96, ...) are
the `sizeof()` of these structs.
"""

import functools

from construct import Array, Bytes, Const, Construct, Float64l, Int32ul, Int64ul, Struct

from hexir_format.model import MAGIC, MAX_RANK, NAME_BYTES

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

# A command is this header followed by `operand_count` u64 operands.
CommandHeader = Struct(
    "kind" / Int32ul,
    "operand_count" / Int32ul,
)
Operand = Int64ul

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

EXECUTABLE = {3: ExecutableV3, 4: ExecutableV4, 5: ExecutableV5, 6: ExecutableV5}
ALIGNMENT = 8


@functools.cache
def size(decl: Construct) -> int:
    """`decl.sizeof()`, which construct recomputes on every call (the reader asks often)."""
    return decl.sizeof()


@functools.cache
def compiled(decl: Construct) -> Construct:
    """`decl` compiled by construct: the same parse, several times faster."""
    return decl.compile()


def align(offset: int) -> int:
    """Round up to the payload alignment (8 bytes), the one rule every offset obeys."""
    return -(-offset // ALIGNMENT) * ALIGNMENT
