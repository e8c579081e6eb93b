"""The constants of a module, read out of rodata with the element type they are used as.

Version 3 rodata holds f64 only, so the whole section is one run of doubles (which is how the
earlier tool printed it). Version 4 rodata is untyped bytes: a range has a type only through
the CONST commands that bind it to a slot, so each distinct (offset, bytes, dtype) a CONST
names becomes one typed range (version 5's i32, i64 and i1 ranges hold integers and
booleans; version 6's str ranges hold handles, each shown with the string it names). A
range that does not lie inside rodata is listed without values; the verifier reports it.
"""

from __future__ import annotations

import struct
from typing import Any

from hexir_format import DType, Module, Op

FORMATS = {DType.F32: "f", DType.F64: "d", DType.I32: "i", DType.I64: "q", DType.BOOL: "?",
           DType.STRING: "q"}  # a string constant's values: int64 handles


def ranges(module: Module, *, values: bool) -> list[dict[str, Any]]:
    """Typed ranges of rodata, by offset; each with its values when `values` is set."""
    size = len(module.rodata)
    if module.version < 4:
        whole = {"offset": 0, "bytes": size - size % 8, "dtype": "f64", "type": None,
                 "slots": []}
        return [_with_values(module, whole, DType.F64, values)]
    found: dict[tuple[int, int, DType | None], dict[str, Any]] = {}
    for function in module.functions:
        for command in function.commands:
            if command.op is not Op.CONST:
                continue
            slot = module.slots[command.slot] if command.slot < len(module.slots) else None
            dtype = slot.type.dtype if slot else None
            key = (command.rodata_offset, command.bytes, dtype)
            entry = found.setdefault(key, {
                "offset": command.rodata_offset, "bytes": command.bytes,
                "dtype": str(dtype) if dtype else None,
                "type": str(slot.type) if slot else None, "slots": []})
            if command.slot not in entry["slots"]:
                entry["slots"].append(command.slot)
    return [_with_values(module, found[key], key[2], values)
            for key in sorted(found, key=lambda k: (k[0], k[1], k[2] or 0))]


def _with_values(module: Module, entry: dict[str, Any], dtype: DType | None,
                 values: bool) -> dict[str, Any]:
    offset, nbytes = entry["offset"], entry["bytes"]
    inside = offset <= len(module.rodata) and nbytes <= len(module.rodata) - offset
    if dtype is None or not inside:
        return entry
    count = nbytes // dtype.itemsize
    entry["count"] = count
    if values:
        entry["values"] = list(struct.unpack_from(f"<{count}{FORMATS[dtype]}", module.rodata,
                                                  offset))
        if dtype is DType.STRING:  # the string each handle names (None: none, a damage)
            entry["strings"] = [module.strings[h] if 0 <= h < len(module.strings) else None
                                for h in entry["values"]]
    return entry
