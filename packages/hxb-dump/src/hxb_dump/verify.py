"""The checks a parsed module must still pass before its listing can be trusted.

hexir_format.parse proves the bytes match the layout; it does not follow references. This
replays each entry point the way the runtime would, without running anything: every slot a
command names exists (v4) and is bound before it is read, every CONST lies inside rodata,
every DISPATCH names an executable whose argument types (v4) its slots match, or whose
argument sizes (v3) they hold at least, INPUT and OUTPUT indices are 0..n-1 once each, every
kernel's argument types and params fit its kind, and its launch geometry makes sense. The kind
rule is the runtime's own (`hexir_format.signatures`), so a file this calls damaged is one the
runtime refuses, and the other way round. The first violation raises DumpError naming the
entry point (or the executable), the command and its file offset.
"""

from __future__ import annotations

from hexir_format import (
    Command,
    Device,
    Executable,
    Function,
    Module,
    Op,
    SectionKind,
    TensorType,
    elf,
    signature_problem,
)

from hxb_dump.errors import DumpError
from hxb_dump.facts import COMMAND_HEADER, command_size


def verify(module: Module) -> None:
    """Raise DumpError for the first reference in `module` that does not hold."""
    for index, exe in enumerate(module.executables):
        _executable(module.version, index, exe)
    program = module.layout.section(SectionKind.PROGRAM) if module.layout else None
    base = program.offset if program else 0
    offset = 0
    for function in module.functions:
        offset = _Replay(module, function, base, offset).run()


def _executable(version: int, index: int, exe: Executable) -> None:
    where = f"executable {index} ({exe.name})"
    axes = 3 if version >= 4 else 2  # version 3 records x and y only
    problem = signature_problem(exe.kind, exe.args, exe.params)
    if problem:
        raise DumpError(f"{where}: {problem}")
    grid, block = exe.grid[:axes], exe.block[:axes]
    launch = f"grid=({_dims(grid)}) block=({_dims(block)})"
    if exe.image is None and any((*grid, *block)):
        raise DumpError(f"{where}: launch geometry {launch} but no device image; expected "
                        "all zero")
    if exe.image is not None and not all((*grid, *block)):
        raise DumpError(f"{where}: image with launch geometry {launch}; expected every "
                        "extent >= 1")
    if exe.device is Device.CPU and (problem := elf.cpu_code_problem(version, exe)):
        raise DumpError(f"{where}: {problem}")


def _dims(values: tuple[int, ...]) -> str:
    return ",".join(map(str, values))


class _Replay:
    """One entry point's commands in order, tracking what each slot is bound to."""

    def __init__(self, module: Module, function: Function, base: int, offset: int):
        self.module, self.function, self.base, self.pc = module, function, base, offset
        self.typed = module.version >= 4
        self.bound: dict[int, int] = {}  # slot -> bytes of the buffer bound to it
        self.indices: dict[Op, list[int]] = {Op.INPUT: [], Op.OUTPUT: []}
        self.command: Command | None = None

    def run(self) -> int:
        """Check every command; returns the program offset after this function's END."""
        for command in self.function.commands:
            self.command = command
            self.check(command)
            self.pc += command_size(command)
        for op, seen in self.indices.items():
            if sorted(seen) != list(range(len(seen))):
                raise DumpError(f"{self.function.name}: {op} indices {sorted(seen)} are not "
                                f"0..{len(seen) - 1}, each once")
        return self.pc + COMMAND_HEADER

    def check(self, c: Command) -> None:
        match c.op:
            case Op.ALLOC:
                self.bind(c.slot, c.bytes)
            case Op.CONST:
                self.const(c)
            case Op.DISPATCH:
                self.dispatch(c)
            case Op.PRINT:
                self.print(c)
            case Op.INPUT:
                self.indices[Op.INPUT].append(c.index)
                t = self.slot(c.slot)
                self.bind(c.slot, t.nbytes if t else 0)
            case Op.OUTPUT:
                self.read(c.slot)
                self.indices[Op.OUTPUT].append(c.index)
            case Op.COPY:
                self.copy(c)

    def fail(self, problem: str) -> DumpError:
        where = (f"{self.function.name}: {self.command.op} at program+{self.pc} "
                 f"(offset {self.base + self.pc})")
        return DumpError(f"{where}: {problem}")

    def slot(self, slot: int) -> TensorType | None:
        """The slot's type (v4), after checking the slot exists; None in v3."""
        if not self.typed:
            return None
        if slot >= len(self.module.slots):
            raise self.fail(f"slot {slot} does not exist; the module has "
                            f"{len(self.module.slots)} slots")
        return self.module.slots[slot].type

    def read(self, slot: int) -> int:
        self.slot(slot)
        if slot not in self.bound:
            raise self.fail(f"slot {slot} is read before any command binds it")
        return self.bound[slot]

    def bind(self, slot: int, nbytes: int) -> None:
        t = self.slot(slot)
        if t is not None and nbytes != t.nbytes:
            raise self.fail(f"{nbytes} bytes for slot {slot}, which holds {t} "
                            f"({t.nbytes} bytes)")
        self.bound[slot] = nbytes

    def const(self, c: Command) -> None:
        size = len(self.module.rodata)
        if c.rodata_offset > size or c.bytes > size - c.rodata_offset:
            raise self.fail(f"rodata_offset {c.rodata_offset} + bytes {c.bytes} runs past the "
                            f"end of the {size}-byte rodata section")
        self.bind(c.slot, c.bytes)

    def dispatch(self, c: Command) -> None:
        exes = self.module.executables
        if c.executable >= len(exes):
            raise self.fail(f"executable {c.executable} does not exist; the module has "
                            f"{len(exes)}")
        exe = exes[c.executable]
        if c.argc != len(exe.args):
            raise self.fail(f"argc {c.argc}, but {exe.name} ({exe.kind}) takes "
                            f"{len(exe.args)} arguments")
        for j, (slot, expected) in enumerate(zip(c.slots, exe.args)):
            nbytes = self.read(slot)
            t = self.slot(slot)
            if t is not None and t != expected:
                raise self.fail(f"argument {j} of {exe.name} is slot {slot} of type {t}; "
                                f"expected {expected}")
            if t is not None and self.module.slots[slot].device is not exe.device:
                raise self.fail(f"argument {j} of {exe.name} is slot {slot} on "
                                f"{self.module.slots[slot].device}, but the kernel runs on "
                                f"{exe.device}")
            if t is None and nbytes < expected.nbytes:
                raise self.fail(f"argument {j} of {exe.name} is slot {slot} holding {nbytes} "
                                f"bytes; {expected} needs {expected.nbytes}")

    def print(self, c: Command) -> None:
        nbytes = self.read(c.slot)
        t = self.slot(c.slot)
        if t is not None and c.rows * c.cols != t.size:
            raise self.fail(f"rows {c.rows} x cols {c.cols} for slot {c.slot}, which holds {t} "
                            f"({t.size} elements)")
        if t is None and c.rows * c.cols * 8 > nbytes:
            raise self.fail(f"rows {c.rows} x cols {c.cols} f64 need {c.rows * c.cols * 8} "
                            f"bytes but slot {c.slot} holds {nbytes}")

    def copy(self, c: Command) -> None:
        self.read(c.src)
        src, dst = self.slot(c.src), self.slot(c.dst)
        if src != dst:
            raise self.fail(f"copies slot {c.src} ({src}) into slot {c.dst} ({dst}); "
                            "expected the same type")
        self.bind(c.dst, src.nbytes if src else self.bound[c.src])
