"""A corpus of single-field dump_corruptions of the built-in fixture (version 3, 488 bytes).

Each entry overwrites one field at its absolute offset with a value the format or the
program cannot allow, and names a fragment the one-line error must contain. Offsets follow
the fixture's layout: header 0, section table 24, symbols 120, program 160 (commands at
+0 const, +32 const, +64 alloc, +88 dispatch, +136 print, +168 end), rodata 336,
executables 400 (entry at 408).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import hexir_format as hf
from hxb_dump.facts import module_facts


class Corruption(NamedTuple):
    name: str
    offset: int
    fmt: str
    value: int | bytes
    expect: str

    def apply(self, data: bytes) -> bytes:
        out = bytearray(data)
        struct.pack_into(self.fmt, out, self.offset, self.value)
        return bytes(out)


def _section(i: int, field: str) -> int:
    return 24 + 24 * i + {"kind": 0, "flags": 4, "offset": 8, "size": 16}[field]


PROGRAM, EXE = 160, 408
U32, U64 = "<I", "<Q"

V3 = [
    # header
    Corruption("magic", 0, "8s", b"HEXIRMOE", "bad magic"),
    Corruption("version-2", 8, U32, 2, "version 2"),
    Corruption("version-5", 8, U32, 5, "slots section is missing"),
    Corruption("header-flags", 12, U32, 1, "flags 0x1"),
    Corruption("section-count-0", 16, U32, 0, "missing"),
    Corruption("section-count-3", 16, U32, 3, "executables section is missing"),
    Corruption("section-count-5", 16, U32, 5, "inside the header"),
    Corruption("section-count-huge", 16, U32, 0xFFFFFFFF, "section_count"),
    Corruption("header-reserved", 20, U32, 7, "reserved"),
    # section table
    Corruption("symbols-kind-unknown", _section(0, "kind"), U32, 9, "kind 9"),
    Corruption("slots-kind-in-v3", _section(0, "kind"), U32, 5, "kind 5"),
    Corruption("program-kind-duplicate", _section(1, "kind"), U32, 1, "duplicates"),
    Corruption("rodata-flags", _section(2, "flags"), U32, 1, "flags 0x1"),
    Corruption("symbols-offset-unaligned", _section(0, "offset"), U64, 124, "aligned"),
    Corruption("symbols-offset-in-header", _section(0, "offset"), U64, 0, "inside the header"),
    Corruption("program-offset-past-end", _section(1, "offset"), U64, 10**9, "past the end"),
    Corruption("rodata-overlaps-executables", _section(2, "offset"), U64, 344, "overlaps"),
    Corruption("executables-size-past-end", _section(3, "size"), U64, 96, "past the end"),
    Corruption("size-u64-max", _section(1, "size"), U64, 2**64 - 1, "past the end"),
    Corruption("symbols-size-not-multiple", _section(0, "size"), U64, 39, "multiple of 40"),
    Corruption("program-size-short", _section(1, "size"), U64, 168, "without an END"),
    Corruption("rodata-size-short", _section(2, "size"), U64, 56, "rodata_offset 32"),
    Corruption("executables-size-short", _section(3, "size"), U64, 80, "count 1"),
    # symbols
    Corruption("symbol-name-empty", 120, "B", 0, "empty"),
    Corruption("symbol-name-unterminated", 120, "32s", b"A" * 32, "NUL"),
    Corruption("symbol-name-junk-after-nul", 130, "B", 65, "after its terminator"),
    Corruption("symbol-program-offset", 152, U32, 8, "program_offset 8"),
    Corruption("symbol-reserved", 156, U32, 1, "reserved"),
    # program: const slot=0 rodata_offset=0 bytes=32
    Corruption("const-kind-unknown", PROGRAM, U32, 99, "unknown kind 99"),
    Corruption("const-kind-v4-only", PROGRAM, U32, 5, "unknown kind 5"),
    Corruption("const-operand-count-2", PROGRAM + 4, U32, 2, "has 2 operands, expected 3"),
    Corruption("const-operand-count-huge", PROGRAM + 4, U32, 1000, "1000 operands"),
    Corruption("const-slot", PROGRAM + 8, U64, 7, "slot 0 is read before"),
    Corruption("const-rodata-offset", PROGRAM + 16, U64, 64, "rodata_offset 64"),
    Corruption("const-bytes", PROGRAM + 24, U64, 24, "but slot 0 holds 24"),
    Corruption("const-bytes-huge", PROGRAM + 24, U64, 2**63, "runs past the end"),
    Corruption("const-1-offset", PROGRAM + 32 + 16, U64, 48, "rodata_offset 48"),
    Corruption("const-1-slot", PROGRAM + 32 + 8, U64, 0, "slot 1 is read before"),
    # program: alloc slot=2 bytes=32
    Corruption("alloc-kind-print", PROGRAM + 64, U32, 4, "has 2 operands, expected 3"),
    Corruption("alloc-slot", PROGRAM + 64 + 8, U64, 3, "slot 2 is read before"),
    Corruption("alloc-bytes", PROGRAM + 64 + 16, U64, 16, "but slot 2 holds 16"),
    # program: dispatch executable=0 argc=3 %0 %1 %2
    Corruption("dispatch-executable", PROGRAM + 88 + 8, U64, 1, "executable 1 is out of range"),
    Corruption("dispatch-argc-2", PROGRAM + 88 + 16, U64, 2, "argc 2"),
    Corruption("dispatch-argc-huge", PROGRAM + 88 + 16, U64, 2**64 - 1, "argc"),
    Corruption("dispatch-operand-count", PROGRAM + 88 + 4, U32, 4, "argc 3"),
    Corruption("dispatch-slot-a", PROGRAM + 88 + 24, U64, 9, "slot 9 is read before"),
    Corruption("dispatch-slot-b", PROGRAM + 88 + 32, U64, 2**40,
               "slot 1099511627776 is out of range"),
    Corruption("dispatch-slot-dest", PROGRAM + 88 + 40, U64, 5, "slot 5 is read before"),
    # program: print slot=2 rows=2 cols=2
    Corruption("print-slot", PROGRAM + 136 + 8, U64, 6, "slot 6 is read before"),
    Corruption("print-rows", PROGRAM + 136 + 16, U64, 3, "3 x 2 f64 values are 48 bytes"),
    Corruption("print-cols", PROGRAM + 136 + 24, U64, 100, "2 x 100 f64 values are 1600 bytes"),
    # program: end
    Corruption("end-kind-alloc", PROGRAM + 168, U32, 1, "has 0 operands, expected 2"),
    Corruption("end-operand-count", PROGRAM + 168 + 4, U32, 1, "runs off the end"),
    # executables
    Corruption("exe-count-2", 400, U32, 2, "count 2"),
    Corruption("exe-count-0", 400, U32, 0, "executable 0 is out of range"),
    Corruption("exe-reserved", 404, U32, 1, "reserved"),
    Corruption("exe-name-empty", EXE, "B", 0, "empty"),
    Corruption("exe-name-unterminated", EXE, "32s", b"k" * 32, "NUL"),
    Corruption("exe-kind-v4-only", EXE + 32, U32, 13, "not a version 3 kernel"),
    Corruption("exe-kind-unknown", EXE + 32, U32, 0, "kind 0"),
    Corruption("exe-device", EXE + 36, U32, 2, "device 2"),
    Corruption("exe-m", EXE + 40, U32, 3, "takes 48 bytes"),
    Corruption("exe-n", EXE + 44, U32, 3, "takes 48 bytes"),
    Corruption("exe-k", EXE + 48, U32, 3, "takes 48 bytes"),
    Corruption("exe-elem-size", EXE + 52, U32, 4, "elem_size 4"),
    Corruption("exe-image-offset-no-size", EXE + 56, U32, 8, "image_offset 8"),
    Corruption("exe-image-size-past-end", EXE + 60, U32, 1000, "image_size 1000"),
    Corruption("exe-image-without-geometry", EXE + 60, U32, 8,
               "overlaps executable 0 (linear_0): its image"),
    Corruption("exe-grid-x", EXE + 64, U32, 2, "a kernel without an image has no launch geometry"),
    Corruption("exe-grid-y", EXE + 68, U32, 2, "a kernel without an image has no launch geometry"),
    Corruption("exe-block-x", EXE + 72, U32, 32,
               "a kernel without an image has no launch geometry"),
    Corruption("exe-block-y", EXE + 76, U32, 1, "a kernel without an image has no launch geometry"),
]

V3_BY_NAME = {c.name: c for c in V3}


def v4(data: bytes) -> list[Corruption]:
    """Corruptions of the `kernels` sample module (see dump_samples.py), located through
    its own layout: five executables (layer_norm, transpose, reduce_sum, reduce_mean,
    reduce_max) over nine slots."""
    layout = hf.parse_layout(data)
    exes = layout.section(hf.SectionKind.EXECUTABLES).offset
    slots = layout.section(hf.SectionKind.SLOTS).offset
    program = layout.section(hf.SectionKind.PROGRAM).offset
    commands = module_facts(hf.parse(data), values=False)["functions"][0]["commands"]

    def slot(i: int, field: int) -> int:
        return slots + 64 * i + field

    def exe(i: int, field: int) -> int:
        return exes + 8 + 96 * i + field

    def param(i: int, j: int) -> int:
        return exes + struct.unpack_from("<I", data, exe(i, 48))[0] + 8 * j

    def arg_dim(i: int, j: int, d: int) -> int:
        return exes + struct.unpack_from("<I", data, exe(i, 44))[0] + 56 * j + 8 + 8 * d

    def operand(n: int, k: int) -> int:
        return program + commands[n]["offset"] + 8 + 8 * k

    F64 = "<d"
    return [
        Corruption("slot-device", slot(0, 0), U32, 2, "device 2"),
        Corruption("slot-reserved", slot(0, 4), U32, 1, "reserved"),
        Corruption("slot-dtype", slot(0, 8), U32, 3, "dtype 3"),
        Corruption("slot-rank", slot(0, 12), U32, 7, "rank 7"),
        Corruption("slot-dim-past-rank", slot(0, 16 + 8 * 5), U64, 1, "past rank 4"),
        Corruption("slot-dim", slot(1, 16), U64, 6, "20 bytes does not match slot 1, a 6xf32"),
        Corruption("slot-device-mismatch", slot(3, 0), U32, 0, "runs on cuda"),
        Corruption("slot-dtype-f64", slot(4, 8), U32, 2, "480 bytes does not match slot 4"),
        Corruption("slots-size", _section(4, "size"), U64, 568, "multiple of 64"),
        Corruption("exe-argc", exe(0, 40), U32, 3, "argc 3"),
        Corruption("exe-args-offset", exe(0, 44), U32, 10**6, "args_offset"),
        Corruption("exe-params-offset", exe(0, 48), U32, 10**6, "params_offset"),
        Corruption("exe-params-count", exe(0, 52), U32, 2,
                   "overlaps executable 0 (layer_norm_0): its params"),
        Corruption("exe-grid-z", exe(0, 72), U32, 0, "launch grid (2, 1, 0) is outside"),
        Corruption("exe-block-z", exe(0, 84), U32, 0, "launch block (128, 1, 0) is outside"),
        Corruption("exe-cpu-grid", exe(2, 64), U32, 1,
                   "a kernel without an image has no launch geometry"),
        Corruption("exe-reserved", exe(0, 88), U32, 1, "reserved"),
        Corruption("exe-image-size", exe(0, 60), U32, 10**6, "image_size"),
        Corruption("exe-arg-dim", arg_dim(0, 0, 0), U64, 3, "gives 3x3x4x5, destination is"),
        Corruption("exe-arg-dtype", arg_dim(0, 0, -1), U32, 9, "dtype 9"),
        Corruption("layer-norm-epsilon-negative", param(0, 0), F64, -1.0, "epsilon is -1"),
        Corruption("layer-norm-epsilon-nan", param(0, 0), F64, float("nan"), "epsilon is nan"),
        Corruption("transpose-not-permutation", param(1, 1), F64, 1.0, "not a permutation"),
        Corruption("transpose-axis-out-of-range", param(1, 1), F64, 4.0, "permutation entry 4"),
        Corruption("reduce-keepdims", param(2, 0), F64, 2.0, "keepdims is 2"),
        Corruption("reduce-axis-fraction", param(2, 1), F64, 2.5, "axis 2.5"),
        Corruption("reduce-axis-twice", param(3, 1), F64, 3.0, "twice"),
        Corruption("input-index", operand(0, 1), U64, 1, "input indices [1]"),
        Corruption("input-slot", operand(0, 0), U64, 100, "slot 100 is out of range"),
        Corruption("const-offset", operand(1, 1), U64, 40, "rodata_offset 40"),
        Corruption("const-bytes", operand(2, 2), U64, 16, "16 bytes does not match slot 2"),
        Corruption("alloc-bytes", operand(3, 1), U64, 96, "96 bytes does not match slot 3"),
        Corruption("dispatch-executable", operand(4, 0), U64, 7, "executable 7 is out of range"),
        Corruption("dispatch-argc", operand(4, 1), U64, 3, "argc 3"),
        Corruption("dispatch-slot", operand(4, 2), U64, 99, "slot 99 is out of range"),
        Corruption("dispatch-wrong-kernel", operand(6, 0), U64, 0, "takes 4 arguments"),
        Corruption("copy-src-unbound", operand(7, 1), U64, 6, "slot 6 is read before"),
        Corruption("copy-type", operand(7, 0), U64, 3, "but its source, slot 4, is a 2x4x3x5xf32"),
        Corruption("output-index", operand(16, 1), U64, 0, "output 0 is named twice"),
        Corruption("output-slot", operand(15, 0), U64, 42, "slot 42 is out of range"),
    ]
