"""Whether a parsed module holds together: the one validator the runtime and hxb-dump share.

`parse` proves the bytes fit the layout; it does not follow references. `check` does, before
anything runs. Every executable: its argument types and params fit its kind, it carries the
code its device needs, its launch geometry is in range. Every entry point, replayed
symbolically: each slot a command names exists and is bound before it is read; a CONST lies
inside rodata on an element boundary, and two constants coincide or are apart (a shifted
offset would read parts of two); a DISPATCH hands its kernel buffers of exactly the types
(v4+) or sizes (v3) the kernel was declared with, and never writes into a constant; INPUT and
OUTPUT indices are 0..n-1, once each; no COPY is left unread (so an OUTPUT damaged into a COPY
of the same operands is caught); a run's buffers (under a memory plan, its arenas) stay under
a byte cap, 16 GiB unless the caller gives another; a cpu kernel's host image is one the
loader can link (`hostlink`). The runtime runs only what this accepts and hxb-dump lists only
what it accepts, so the two cannot disagree.
"""

from __future__ import annotations

import bisect
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from hexir_format import dims, elf, generation, hostlink, plan
from hexir_format import layout as L
from hexir_format.dims import Dim, Expr
from hexir_format.errors import FormatError, ValidationError
from hexir_format.model import (
    CPU_LEVELS,
    MAX_BLOCK,
    MAX_BLOCK_THREADS,
    MAX_BYTES,
    MAX_GRID,
    MAX_SYMBOL,
    Command,
    Device,
    DType,
    Executable,
    Function,
    KernelKind,
    Module,
    Op,
    SectionKind,
    TensorType,
)
from hexir_format.signatures import signature_problem

#: What one call of an entry may allocate unless the caller says otherwise (the runtime's
#: `max_alloc_bytes`; hxb-dump applies it too, so that it refuses what a call would refuse).
DEFAULT_MAX_ALLOC_BYTES = 16 << 30
MAX_V3_SLOTS = 1 << 16  # v3 has no slot table; its slot indices must stay below this


@dataclass(frozen=True)
class Signature:
    """The types of an entry's inputs and outputs, by index, and their names (empty when the
    module names none)."""

    inputs: tuple[TensorType, ...] = ()
    outputs: tuple[TensorType, ...] = ()
    input_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()

    def __str__(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.outputs))
        return f"({ins}) -> ({outs})"

    def named(self) -> str:
        """`(x: 4xf32) -> (y: 4xf32)`: the types with their names, where the module has any."""
        def side(names: tuple[str, ...], types: tuple[TensorType, ...]) -> str:
            return ", ".join(f"{n}: {t}" if n else str(t)
                             for n, t in zip((*names, *[""] * len(types)), types,
                                             strict=False))
        return (f"({side(self.input_names, self.inputs)}) -> "
                f"({side(self.output_names, self.outputs)})")


@dataclass(frozen=True)
class Need:
    """The first thing in an entry that needs a device, for a placement message."""

    device: Device
    what: str


@dataclass(frozen=True)
class EntryPlan:
    """An entry point that passed: its commands and what running them takes."""

    name: str
    commands: tuple[Command, ...]
    signature: Signature
    needs: tuple[Need, ...]
    executables: tuple[int, ...]  # dispatched, in first-use order
    #: What a run allocates (ALLOC, INPUT and COPY buffers): in a dynamic module an
    #: expression of its sizes, which the runtime caps for each call's.
    alloc_bytes: Dim
    #: The memory plan, when the module has one: each intermediate's offset in its device's
    #: arena, and each arena's size (`hexir_format.plan`).
    offsets: dict[int, int] = field(default_factory=dict)
    arenas: dict[Device, int] = field(default_factory=dict)
    cpu_level: int = 0  # the x86-64 level of this variant (version 6), else 0

    @property
    def label(self) -> str:
        """The entry's name, with its level when it is one level's variant."""
        return variant_label(self.name, self.cpu_level)


def variant_label(name: str, cpu_level: int) -> str:
    """`main`, or `main [x86-64-v3]` for a version 6 variant."""
    return f"{name} [{CPU_LEVELS[cpu_level]}]" if cpu_level else name


@dataclass(frozen=True)
class ModulePlan:
    module: Module
    #: Each entry point by name: the variant chosen for the cpu level `check` was given.
    entries: dict[str, EntryPlan]
    home: Device  # v3: where every buffer lives (the device of the module's kernels)
    #: Every variant of each entry point, lowest level first (one each before version 6).
    variants: dict[str, tuple[EntryPlan, ...]] = field(default_factory=dict)

    def slot_device(self, slot: int) -> Device:
        return self.module.slots[slot].device if self.module.slots else self.home

    def slot_type(self, slot: int) -> TensorType | None:
        return self.module.slots[slot].type if self.module.slots else None

    def tensor(self, slot: int) -> TensorType:
        """The type of a slot that INPUT, OUTPUT or COPY names: `check` found it in the slot
        table (those commands come with one, from version 4 on)."""
        return self.module.slots[slot].type


def check(module: Module, *, max_alloc_bytes: int | None = DEFAULT_MAX_ALLOC_BYTES,
          cpu_level: int | None = None) -> ModulePlan:
    """Every executable and every entry point (every variant) checked; ValidationError on the
    first problem.

    `max_alloc_bytes` caps what one run of an entry may allocate (ALLOC, INPUT and COPY
    buffers together; under a memory plan, its arenas and its inputs); None: no cap.
    `cpu_level` picks each entry's variant (version 6): the highest level at or below it, or
    the lowest when every variant needs more (the cpu device then refuses its kernels, naming
    the level); None picks the highest.
    """
    _check_sizes(module)
    home = _check_executables(module)
    program = module.layout.section(SectionKind.PROGRAM) if module.layout else None
    base = program.offset if program else None
    entries, offset, constants = [], 0, _Constants()
    for function in module.functions:
        replay = _Replay(module, function, max_alloc_bytes, home, base, offset,
                         constants=constants)
        entries.append(replay.run())
        offset = replay.pc + L.command_size(0)  # past the END
    if module.placements:
        entries = _check_plan(module, entries, max_alloc_bytes)
    variants: dict[str, list[EntryPlan]] = {}
    for entry in entries:
        variants.setdefault(entry.name, []).append(entry)
    for name, found in variants.items():
        found.sort(key=lambda e: e.cpu_level)
        if differ := next((e for e in found[1:] if e.signature != found[0].signature), None):
            raise ValidationError(f"{differ.label}: its signature {differ.signature.named()} "
                                  f"differs from {found[0].label}'s "
                                  f"{found[0].signature.named()}; the variants of an entry "
                                  "point must agree", entry=name, field="symbols")
    chosen = {name: _choose(found, cpu_level) for name, found in variants.items()}
    generation.check(module, {name: (e.signature.inputs, e.signature.outputs)
                              for name, e in chosen.items()})
    return ModulePlan(module, chosen, home, {n: tuple(v) for n, v in variants.items()})


def _choose(variants: list[EntryPlan], cpu_level: int | None) -> EntryPlan:
    """The highest variant at or below `cpu_level` (None: the highest), else the lowest."""
    fit = [v for v in variants if cpu_level is None or v.cpu_level <= cpu_level]
    return fit[-1] if fit else variants[0]


def _check_plan(module: Module, entries: list[EntryPlan],
                max_alloc_bytes: int | None) -> list[EntryPlan]:
    """The entries with their part of the memory plan, which must place every intermediate
    and no two live ones in the same bytes (`plan.problem`), in arenas that with the inputs
    stay under the cap (an arena is as large as its furthest buffer's end)."""
    placed = dict(module.placements)
    devices = {i: s.device for i, s in enumerate(module.slots)}
    types = {i: s.type for i, s in enumerate(module.slots)}
    kinds = [e.kind for e in module.executables]
    planned: list[EntryPlan] = []
    used: set[int] = set()
    for entry in entries:
        name = entry.label
        spans = plan.lifetimes(entry.commands, kinds)
        offsets = {slot: placed[slot] for slot in spans if slot in placed}
        if problem := plan.problem(entry.commands, offsets, types, devices, kinds):
            raise ValidationError(f"{name}: plan: {problem}", entry=entry.name, field="plan")
        used |= set(spans)
        arenas = plan.arenas(offsets, types, devices)
        inputs = sum(t.static_nbytes for t in entry.signature.inputs)
        total = sum(arenas.values()) + inputs
        if max_alloc_bytes is not None and total > max_alloc_bytes:
            far = max(offsets, key=lambda s: offsets[s] + types[s].static_nbytes)
            sizes = ", ".join(f"the {d} arena {n}" for d, n in sorted(arenas.items()))
            raise ValidationError(f"{name}: plan: slot {far} at offset {offsets[far]} makes a "
                                  f"call allocate {total} bytes ({sizes}, inputs {inputs}), "
                                  f"more than the cap of {max_alloc_bytes} bytes",
                                  entry=name, field="plan")
        planned.append(replace(entry, offsets=offsets, arenas=arenas))
    stray = sorted(set(placed) - used)
    if stray:
        raise ValidationError(f"plan: slot {stray[0]} is placed but is no entry's intermediate "
                              "(an ALLOC or COPY destination)", field="plan")
    return planned


def _expressions(module: Module) -> Iterator[tuple[str, Expr]]:
    """(where, the expression) for every size of the module that is an expression (not a
    plain integer): each tensor dimension, each launch extent, each ALLOC's bytes. Only these
    are described, so a static module's thousands of sizes cost no text."""
    for i, s in enumerate(module.slots):
        for j, d in enumerate(s.type.shape):
            if isinstance(d, Expr):
                yield f"slot {i} ({s.type}), dim {j}", d
    for i, exe in enumerate(module.executables):
        where = f"executable {i} ('{exe.name}')"
        for a, t in enumerate(exe.args):
            for j, d in enumerate(t.shape):
                if isinstance(d, Expr):
                    yield f"{where}, argument {a} ({t}), dim {j}", d
        for what in ("grid", "block"):
            for axis, d in zip("xyz", getattr(exe, what), strict=True):
                if isinstance(d, Expr):
                    yield f"{where}, {what}_{axis}", d
    for function in module.functions:
        for n, c in enumerate(function.commands):
            if c.op is Op.ALLOC and isinstance(c.bytes, Expr):
                yield (f"{variant_label(function.name, function.cpu_level)}: command {n} "
                       "(alloc), bytes", c.bytes)


def _check_sizes(module: Module) -> None:
    """A dynamic module's size symbols and expressions (version 6): each symbol's range is
    0 <= lo <= hi <= MAX_SYMBOL, every expression reads only the module's symbols and is
    bounded over their ranges -- never negative, never dividing by a divisor that may be 0
    -- and an executable's operands name symbols. A module below version 6 holds none, and
    a dynamic one has no memory plan (the runtime plans each call's sizes). A static module
    passes untouched."""
    found = list(_expressions(module))
    operands = [(i, exe) for i, exe in enumerate(module.executables) if exe.operands]
    if not (module.symbols or found or operands):
        return
    if module.version < 6:
        where = found[0][0] if found else "size symbols"
        raise ValidationError(f"{where}: size symbols and expressions need version 6; this "
                              f"module is version {module.version}", field="sizes")
    ranges: dict[str, tuple[int, int]] = {}
    for s in module.symbols:
        if not 0 <= s.lo <= s.hi <= MAX_SYMBOL or s.name in ranges:
            raise ValidationError(f"size symbol '{s.name}': range {s.lo}..{s.hi}; expected a "
                                  f"name of its own and 0 <= lo <= hi <= {MAX_SYMBOL}",
                                  field="sizes")
        ranges[s.name] = (s.lo, s.hi)
    if module.placements:
        raise ValidationError("plan: a dynamic module has no memory plan (the runtime plans "
                              "each call's sizes), but this one has one", field="plan")
    for i, exe in operands:
        if bad := [k for k in exe.operands if not 0 <= k < len(module.symbols)]:
            raise ValidationError(f"executable {i} ('{exe.name}'), operands: symbol {bad[0]} is "
                                  f"not one of the module's {len(module.symbols)}",
                                  field="operands")
    for where, d in found:
        if unknown := sorted(d.symbols() - ranges.keys()):
            raise ValidationError(f"{where}: '{dims.render(d)}' reads '{unknown[0]}', which is "
                                  "not a size symbol of the module", field="sizes")
        try:
            lo, _ = dims.bound(d, ranges)
        except dims.DimError as e:
            raise ValidationError(f"{where}: {e}", field="sizes") from None
        if lo < 0:
            raise ValidationError(f"{where}: '{dims.render(d)}' can be {lo} for the symbols' "
                                  f"ranges ({_ranges(d, module)}); a size is never negative",
                                  field="sizes")


def _ranges(d: Expr, module: Module) -> str:
    return ", ".join(str(s) for s in module.symbols if s.name in d.symbols())


def _check_executables(module: Module) -> Device:
    _check_string_slots(module)
    for i, exe in enumerate(module.executables):
        where = f"executable {i} ('{exe.name}')"
        problem = signature_problem(exe.kind, exe.args, exe.params, exe.name)
        if problem:
            raise ValidationError(f"{where}, args: {problem}", field="args")
        if exe.image is None and any((*exe.grid, *exe.block)):
            raise ValidationError(f"{where}, grid: a kernel without an image has no launch "
                                  f"geometry, but this one says grid {exe.grid} block "
                                  f"{exe.block}", field="grid")
        if exe.kind is KernelKind.LIBRARY:
            _check_library(exe, where)
        elif exe.device is Device.CUDA:
            _check_launchable(exe, where, {s.name: (s.lo, s.hi) for s in module.symbols})
        elif problem := _cpu_code_problem(module.version, exe):
            raise ValidationError(f"{where}, image: {problem}", field="image")
    devices = {exe.device for exe in module.executables}
    if module.version == 3 and len(devices) > 1:
        first = {d: next(e.name for e in module.executables if e.device is d) for d in devices}
        raise ValidationError(f"version 3 modules run on one device, but kernel "
                              f"'{first[Device.CPU]}' is placed on cpu and kernel "
                              f"'{first[Device.CUDA]}' on cuda", field="device")
    return devices.pop() if len(devices) == 1 else Device.CPU


def _check_string_slots(module: Module) -> None:
    """Strings are version 6's, and live on the cpu: a string slot is never on cuda (nor
    copied there, since a COPY's destination is a slot of the same type). (The reader refuses
    strings below version 6 too; this holds a module built in memory to the same rule.)"""
    if module.version < 6 and (module.strings or any(
            s.type.dtype is DType.STRING for s in module.slots) or any(
            e.kind is KernelKind.LIBRARY for e in module.executables)):
        raise ValidationError(f"strings, string tensors and library kernels need version 6; "
                              f"this module is version {module.version}", field="version")
    for i, s in enumerate(module.slots):
        if s.type.dtype is DType.STRING and s.device is not Device.CPU:
            raise ValidationError(f"slot {i}, device: a {s.type} lives on {s.device}; string "
                                  "tensors live on the cpu (the runtime's string table is host "
                                  "memory)", field="device")


def _check_library(exe: Executable, where: str) -> None:
    """A library kernel is the runtime's own code: no image, on the cpu, no size operands."""
    if exe.image is not None:
        raise ValidationError(f"{where}, image: library kernel '{exe.name}' carries a "
                              f"{len(exe.image)}-byte image; a library function is the "
                              "runtime's own code and has none", field="image")
    if exe.device is not Device.CPU:
        raise ValidationError(f"{where}, device: library kernel '{exe.name}' is placed on "
                              f"{exe.device}; the runtime's library runs on the cpu",
                              field="device")
    if exe.cpu_level or exe.operands:
        what = f"cpu_level {exe.cpu_level}" if exe.cpu_level else \
            f"size operands {list(exe.operands)}"
        raise ValidationError(f"{where}, args: library kernel '{exe.name}' has {what}; a "
                              "library function takes neither", field="args")


def _cpu_code_problem(version: int, exe: Executable) -> str | None:
    """Why cpu executable `exe` of a `version` module does not carry the code it must, or None.

    Version 5 and later: a host image that parses, defines a function of the kernel's name,
    runs on grid (extent, 1, 1) and block (1, 1, 1), and that the loader can link wherever it
    goes (`hostlink.layout`). Versions 3 and 4: no image (a descriptor). The image is parsed
    once for all of it: parsing is most of a module's validation.
    """
    if exe.image is None:
        if version >= 5:
            return (f"cpu kernel '{exe.name}' carries no host image; in version {version} every "
                    "cpu kernel is compiled code")
        return None
    if version < 5:
        return (f"kernel '{exe.name}' is placed on cpu and carries an image, which only version "
                f"5 holds; this module is version {version}")
    try:
        obj = elf.parse_object(exe.image, f"host image of kernel '{exe.name}'")
    except FormatError as e:
        return str(e)
    if exe.name not in obj.functions:
        return (f"the host image defines no function '{exe.name}' (it defines "
                f"{', '.join(obj.functions) or 'none'})")
    if tuple(exe.grid[1:]) != (1, 1) or tuple(exe.block) != (1, 1, 1):
        return (f"a cpu kernel runs on grid (extent, 1, 1) with block (1, 1, 1), not grid "
                f"{tuple(exe.grid)} block {tuple(exe.block)}")
    try:
        hostlink.layout(obj, exe.name)
    except FormatError as e:
        return str(e)
    return None


def _check_launchable(exe: Executable, where: str, ranges: dict[str, tuple[int, int]]) -> None:
    """A cuda kernel's launch is inside CUDA's limits; a dynamic one's for every value of the
    symbols in their ranges (the bounds of each extent, `_check_sizes` proved them bounded)."""
    if exe.image is None:
        raise ValidationError(f"{where}, image: kernel '{exe.name}' is placed on cuda, but the "
                              "module carries a kernel descriptor rather than device code, and "
                              "there is nothing to launch", field="image")
    for name, extents, limits in (("grid", exe.grid, MAX_GRID), ("block", exe.block, MAX_BLOCK)):
        spans = [dims.bound(d, ranges) for d in extents]
        if any(not 1 <= lo <= hi <= top for (lo, hi), top in zip(spans, limits, strict=True)):
            shown = "(" + ", ".join(map(dims.render, extents)) + ")"
            over = "" if all(isinstance(d, int) for d in extents) else \
                f", ranging over {spans} for the symbols' ranges"
            raise ValidationError(f"{where}, {name}: launch {name} {shown}{over} is outside "
                                  f"1..{limits} per dimension", field=name)
    threads = math.prod(dims.bound(d, ranges)[1] for d in exe.block)
    if threads > MAX_BLOCK_THREADS:
        shown = "(" + ", ".join(map(dims.render, exe.block)) + ")"
        up_to = "" if all(isinstance(d, int) for d in exe.block) else "up to "
        raise ValidationError(f"{where}, block: {shown} is {up_to}{threads} threads per block, "
                              f"more than {MAX_BLOCK_THREADS}", field="block")


class _Constants:
    """The rodata ranges CONSTs name, kept pairwise equal or disjoint."""

    def __init__(self) -> None:
        self.ends: dict[int, int] = {}  # start -> end
        self.starts: list[int] = []  # sorted

    def claim(self, start: int, end: int) -> tuple[int, int] | None:
        """Record [start, end); the range it partly overlaps, if any (then nothing is kept)."""
        if start == end or self.ends.get(start) == end:
            return None
        i = bisect.bisect_left(self.starts, end)  # the ranges that start before `end`
        if i and self.ends[self.starts[i - 1]] > start:  # disjoint ranges: only the last
            return self.starts[i - 1], self.ends[self.starts[i - 1]]
        bisect.insort(self.starts, start)
        self.ends[start] = end
        return None


@dataclass
class _Bound:
    nbytes: Dim
    const: bool


@dataclass
class _Replay:
    """One entry point's commands in order, tracking what each slot is bound to."""

    module: Module
    function: Function
    max_alloc_bytes: int | None
    home: Device  # where a v3 buffer lives
    base: int | None  # the program section's file offset, when the module came from a file
    pc: int  # this command's offset inside the program section
    bound: dict[int, _Bound] = field(default_factory=dict)
    inputs: dict[int, TensorType] = field(default_factory=dict)
    outputs: dict[int, TensorType] = field(default_factory=dict)
    unread: dict[int, tuple[int, Command, int]] = field(default_factory=dict)  # COPY dst -> at
    kernel_needs: dict[Device, str] = field(default_factory=dict)
    slot_needs: dict[Device, str] = field(default_factory=dict)
    executables: dict[int, None] = field(default_factory=dict)
    alloc_bytes: Dim = 0
    constants: _Constants = field(default_factory=_Constants)  # module-wide
    index: int = 0
    command: Command = field(default_factory=Command.end)

    def run(self) -> EntryPlan:
        for index, command in enumerate(self.function.commands):
            self.index, self.command = index, command
            getattr(self, f"_{command.op}")(command)  # `_alloc`, `_const`, ... by op name
            self.pc += L.command_size(len(command.operands))
        self.index, self.command = len(self.function.commands), Command.end()
        if self.unread:
            self.index, self.command, self.pc = min(self.unread.values(), key=lambda u: u[0])
            raise self.fail("dst", f"slot {self.command.dst} is copied into and never read; "
                                   "a module does not copy what it does not use")
        f, label = self.function, variant_label(self.function.name, self.function.cpu_level)
        signature = Signature(self._dense(self.inputs, "input"),
                              self._dense(self.outputs, "output"), f.inputs, f.outputs)
        for role, names, types in (("input", f.inputs, signature.inputs),
                                   ("output", f.outputs, signature.outputs)):
            if (f.inputs or f.outputs) and len(names) != len(types):
                raise ValidationError(f"{label}: names {len(names)} {role}s but the entry has "
                                      f"{len(types)}", entry=f.name, field="names")
        needs = {**self.slot_needs, **self.kernel_needs}
        return EntryPlan(f.name, f.commands, signature,
                         tuple(Need(d, w) for d, w in needs.items()),
                         tuple(self.executables), self.alloc_bytes, cpu_level=f.cpu_level)

    # ---- helpers ---------------------------------------------------------------------------

    def fail(self, name: str, message: str) -> ValidationError:
        at = f" at offset {self.base + self.pc}" if self.base is not None else ""
        label = variant_label(self.function.name, self.function.cpu_level)
        return ValidationError(f"{label}: command {self.index} "
                               f"({self.command.op}{at}), {name}: {message}",
                               entry=self.function.name, command=self.index, field=name,
                               offset=self.base + self.pc if self.base is not None else None)

    def slot(self, name: str, slot: int) -> int:
        if self.module.version >= 4 and slot >= len(self.module.slots):
            raise self.fail(name, f"slot {slot} is out of range; the module has "
                                  f"{len(self.module.slots)} slots")
        if self.module.version == 3 and slot >= MAX_V3_SLOTS:
            raise self.fail(name, f"slot {slot} is out of range; version 3 modules have at "
                                  f"most {MAX_V3_SLOTS} slots")
        return slot

    def used(self, name: str, slot: int) -> _Bound:
        if self.slot(name, slot) not in self.bound:
            raise self.fail(name, f"slot {slot} is read before anything is bound to it")
        self.unread.pop(slot, None)
        return self.bound[slot]

    def typed(self, slot: int) -> TensorType | None:
        return self.module.slots[slot].type if self.module.slots else None

    def tensor(self, slot: int) -> TensorType:
        """The type of `slot`, already checked to be in the slot table (the commands that
        name a slot's type, from version 4 on, come with one)."""
        return self.module.slots[slot].type

    def bind(self, name: str, slot: int, nbytes: Dim, *, const: bool = False) -> None:
        t = self.typed(slot)
        if t is not None and nbytes != t.nbytes:
            raise self.fail(name, f"{dims.render(nbytes)} bytes does not match slot {slot}, a "
                                  f"{t} ({dims.render(t.nbytes)} bytes)")
        if not (isinstance(nbytes, int) and isinstance(self.alloc_bytes, int)):
            # a dynamic size: the runtime caps what each call's sizes make it
            self.alloc_bytes = dims.add(self.alloc_bytes, nbytes) if not const else \
                self.alloc_bytes
        elif not const:
            self.alloc_bytes += nbytes
            cap = self.max_alloc_bytes
            if cap is not None and self.alloc_bytes > cap:
                what = f"{nbytes} bytes is" if nbytes > cap else \
                    f"this run would allocate {self.alloc_bytes} bytes,"
                raise self.fail(name, f"{what} more than the cap of {cap} bytes")
        device = self.module.slots[slot].device if self.module.slots else self.home
        self.slot_needs.setdefault(device, f"slot {slot} (command {self.index}, "
                                           f"{self.command.op})")
        self.bound[slot] = _Bound(nbytes, const)

    def _dense(self, seen: dict[int, TensorType], what: str) -> tuple[TensorType, ...]:
        if sorted(seen) != list(range(len(seen))):
            missing = min(set(range(len(seen) + 1)) - set(seen))
            raise self.fail("index", f"{what} indices {sorted(seen)} skip {missing}; they must "
                                     f"be 0..{len(seen) - 1}")
        return tuple(seen[i] for i in range(len(seen)))

    # ---- commands --------------------------------------------------------------------------

    def _alloc(self, c: Command) -> None:
        self.bind("bytes", self.slot("slot", c.slot), c.bytes)

    def _const(self, c: Command) -> None:
        t = self.typed(self.slot("slot", c.slot))
        size, item = len(self.module.rodata), t.dtype.itemsize if t else 8
        if c.rodata_offset > size or c.bytes > size - c.rodata_offset:
            raise self.fail("rodata_offset", f"rodata_offset {c.rodata_offset} + bytes {c.bytes} "
                                             f"runs past the end of the {size}-byte rodata")
        if c.rodata_offset % item:
            raise self.fail("rodata_offset", f"rodata_offset {c.rodata_offset} is not a "
                                             f"multiple of {item}, the size of one element")
        start, end = c.rodata_offset, c.rodata_offset + c.bytes
        if clash := self.constants.claim(start, end):
            raise self.fail("rodata_offset", f"rodata [{start}, {end}) overlaps the constant "
                                             f"at [{clash[0]}, {clash[1]}); constants coincide "
                                             "or are apart")
        self.bind("bytes", c.slot, c.bytes, const=True)
        if t is not None and t.dtype is DType.STRING:
            self._handles(c.slot, start, end)

    def _handles(self, slot: int, start: int, end: int) -> None:
        """A string constant's elements are handles into the module's string table."""
        count = len(self.module.strings)
        data = memoryview(self.module.rodata)[start:end]
        for k, (h,) in enumerate(struct.iter_unpack("<q", data)):
            if not 0 <= h < count:
                raise self.fail("rodata_offset", f"string constant slot {slot}: element {k} "
                                                 f"is handle {h}; expected 0 to {count - 1}, "
                                                 f"the module's {count} strings" if count else
                                f"string constant slot {slot}: element {k} is handle {h}, but "
                                "the module has no strings")

    def _dispatch(self, c: Command) -> None:
        count = len(self.module.executables)
        if c.executable >= count:
            raise self.fail("executable", f"executable {c.executable} is out of range; the "
                                          f"module has {count}")
        exe = self.module.executables[c.executable]
        if c.argc != len(exe.args):
            raise self.fail("argc", f"kernel '{exe.name}' ({exe.kind}) takes {len(exe.args)} "
                                    f"arguments, the dispatch passes {c.argc}")
        level = self.function.cpu_level
        if level and exe.cpu_level > level:
            raise self.fail("executable", f"kernel '{exe.name}' is host code for "
                                          f"{CPU_LEVELS[exe.cpu_level]}, above this variant's "
                                          f"{CPU_LEVELS[level]}: a host of that level would "
                                          "pick it and could not run it")
        for j, (slot, want) in enumerate(zip(c.slots, exe.args, strict=True)):
            self._argument(f"slots[{j}]", exe, slot, want, last=j == len(exe.args) - 1)
        self.kernel_needs.setdefault(exe.device, f"kernel '{exe.name}'")
        self.executables.setdefault(c.executable)

    def _argument(self, name: str, exe: Executable, slot: int, want: TensorType,
                  last: bool) -> None:
        b = self.used(name, slot)
        if last and b.const:
            raise self.fail(name, f"kernel '{exe.name}' would write its result into slot "
                                  f"{slot}, which is a constant (read-only rodata)")
        if self.module.slots:
            s = self.module.slots[slot]
            if s.type != want:
                raise self.fail(name, f"slot {slot} is a {s.type} but kernel '{exe.name}' "
                                      f"takes a {want} there")
            if s.device is not exe.device:
                raise self.fail(name, f"slot {slot} lives on {s.device} but kernel "
                                      f"'{exe.name}' runs on {exe.device}")
        elif b.nbytes != want.nbytes:
            m, n, k = exe.extents or (0, 0, 0)
            raise self.fail(name, f"kernel '{exe.name}' ({exe.kind}, extents m={m} n={n} "
                                  f"k={k}) takes {want.nbytes} bytes ({want}) there, "
                                  f"but slot {slot} holds {b.nbytes}")

    def _print(self, c: Command) -> None:
        b = self.used("slot", c.slot)
        t = self.typed(c.slot)
        if t is not None and t.dtype is DType.STRING:
            raise self.fail("slot", f"slot {c.slot} is a {t}; PRINT shows numbers, and a "
                                    "string tensor is returned as an output instead")
        item = t.dtype.itemsize if t else 8
        if max(c.rows, 1) * max(c.cols, 1) * item > MAX_BYTES:
            raise self.fail("rows", f"{c.rows} x {c.cols} is larger than any array can be")
        rows, cols = (math.prod(t.shape[:-1]), t.shape[-1]) if t is not None and t.rank else (1, 1)
        if t is not None and (c.rows, c.cols) != (rows, cols):
            raise self.fail("rows", f"{c.rows} x {c.cols} does not match slot {c.slot}, a {t}; "
                                    f"expected {rows} x {cols} (the last dimension as columns)")
        if t is None and c.rows * c.cols * 8 != b.nbytes:
            raise self.fail("rows", f"{c.rows} x {c.cols} f64 values are "
                                    f"{c.rows * c.cols * 8} bytes but slot {c.slot} holds "
                                    f"{b.nbytes}")

    def _input(self, c: Command) -> None:
        t = self.tensor(self.slot("slot", c.slot))
        if c.index in self.inputs:
            raise self.fail("index", f"input {c.index} is bound twice")
        self.inputs[c.index] = t
        self.bind("slot", c.slot, t.nbytes)

    def _output(self, c: Command) -> None:
        self.used("slot", c.slot)
        if c.index in self.outputs:
            raise self.fail("index", f"output {c.index} is named twice")
        self.outputs[c.index] = self.tensor(c.slot)

    def _copy(self, c: Command) -> None:
        self.slot("dst", c.dst)
        self.used("src", c.src)
        dst, src = self.tensor(c.dst), self.tensor(c.src)
        if dst != src:
            raise self.fail("dst", f"slot {c.dst} is a {dst} but its source, slot {c.src}, is "
                                   f"a {src}")
        self.bind("dst", c.dst, dst.nbytes)
        self.unread[c.dst] = (self.index, c, self.pc)
