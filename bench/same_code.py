"""Whether two `.hxb` of one model run the same code, and what differs.

    python bench/same_code.py BEFORE.hxb AFTER.hxb

For checking a compiler change that should not change what a module computes but may change
its executables (hexir-dedupe-kernels merges kernels identical but for their name): RODATA,
slots and the memory plan must be equal, every command equal but DISPATCH's executable index,
and each dispatch's executable in AFTER must be the one in BEFORE but for its name -- the same
kind, arguments, parameters, grid, level and object code (every ELF section but the string
and symbol tables equal, and the symbols equal but their names). Exit status 1 otherwise.
"""

from __future__ import annotations

import sys

import hexir_format as hf
from hexir_format import elf


def code(exe: hf.Executable):
    """What an executable runs, its name left out."""
    if exe.image is None:
        return None
    o = elf.parse_object(exe.image)
    return ([(s.name, bytes(s.data)) for s in o.sections if s.name not in (".strtab", ".symtab")],
            [(s.bind, s.type, s.section, s.value, s.size) for s in o.symbols],
            o.relocations, o.undefined)


def alike(a: hf.Executable, b: hf.Executable) -> bool:
    return (a.kind, a.device, a.args, a.params, a.grid, a.block, a.cpu_level) == \
        (b.kind, b.device, b.args, b.params, b.grid, b.block, b.cpu_level) and code(a) == code(b)


def main(before: str, after: str) -> int:
    a, b = (hf.parse(open(path, "rb").read()) for path in (before, after))
    print(f"rodata equal: {bytes(a.rodata) == bytes(b.rodata)} ({len(a.rodata)} bytes)")
    print(f"slots equal: {a.slots == b.slots}, memory plan equal: {a.placements == b.placements}")
    print(f"executables: {len(a.executables)} -> {len(b.executables)}")
    same = bytes(a.rodata) == bytes(b.rodata) and a.slots == b.slots \
        and a.placements == b.placements and len(a.functions) == len(b.functions)
    seen: dict[tuple[int, int], bool] = {}
    for fa, fb in zip(a.functions, b.functions, strict=False):
        same &= len(fa.commands) == len(fb.commands)
        for ca, cb in zip(fa.commands, fb.commands, strict=False):
            if ca.op is hf.Op.DISPATCH and cb.op is hf.Op.DISPATCH:
                pair = (ca.operands[0], cb.operands[0])
                if pair not in seen:
                    seen[pair] = alike(a.executables[pair[0]], b.executables[pair[1]])
                same &= seen[pair] and ca.operands[1:] == cb.operands[1:]
            else:
                same &= ca == cb
    print(f"every command the same, each dispatch's executable alike but for its name: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python bench/same_code.py BEFORE.hxb AFTER.hxb")
    sys.exit(main(*sys.argv[1:]))
