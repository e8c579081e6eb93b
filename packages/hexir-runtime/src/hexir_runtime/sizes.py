"""A dynamic module's sizes, per call: the symbols bound from the inputs' shapes, and the
entry point made static for them.

A dynamic module (version 6) declares its tensors' dimensions, ALLOC's bytes and its
kernels' launch geometry as expressions over named size symbols (`batch`, `past + seq`).
A call binds the symbols from its inputs' shapes (`dims.bind`: one line naming both inputs
when two disagree, or the symbol's range when a size is outside it), then `specialize`
evaluates the entry's sizes for those values with checked int64 arithmetic (each distinct
expression once: `Flat`, the module's sizes coded once per load) and refuses a call
whose buffers would pass the load's cap -- all before anything is allocated -- and plans its
memory (`plan.assign`). The result is the static plan of that binding, which the interpreter
runs as it runs a static module's; the runtime keeps the programs of the last few bindings
(`interpreter.Resident.sized`), so a steady call with the sizes of an earlier one plans
nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from hexir_format import (
    OPERAND_NAMES,
    Command,
    Module,
    Op,
    Slot,
    TensorType,
    dims,
    plan,
    signature_problem,
)
from hexir_format.model import MAX_BYTES
from hexir_runtime.errors import ExecutionError, InputError
from hexir_runtime.validate import EntryPlan, ModulePlan, Signature

#: The number of bindings whose programs a load keeps, per entry point: past it, the least
#: recently used one is dropped (and planned again if its sizes come back).
CACHED_BINDINGS = 16


@dataclass(frozen=True)
class Sized:
    """An entry point made static for one binding: `module` and `entry` as `validate` would
    have planned a static module of these sizes, and each dispatched kernel's operand values
    (by executable index) and launch geometry for them."""

    key: tuple[int, ...]  # the symbols' values, in the module's order
    module: ModulePlan
    entry: EntryPlan
    scalars: dict[int, tuple[int, ...]]


def shape_of(x: Any) -> tuple[int, ...]:
    """The shape of a call's input as given: an array's (numpy, torch, cupy), else numpy's
    reading of it (a nested list)."""
    shape = getattr(x, "shape", None)
    if isinstance(shape, tuple) and all(isinstance(d, int) for d in shape):
        return shape
    try:
        return tuple(int(d) for d in np.shape(x))
    except (TypeError, ValueError):  # a ragged list, an object without a shape
        return ()


def bind(module: Module, entry: EntryPlan, inputs: Sequence[Any]) -> tuple[int, ...]:
    """The symbols' values the inputs' shapes give, in the module's order; an InputError
    (one line) for a rank that differs, sizes that disagree, or a size outside its range."""
    want, names = entry.signature.inputs, entry.signature.input_names
    given = []
    for i, (x, t) in enumerate(zip(inputs, want, strict=True)):
        shape = shape_of(x)
        name = names[i] if names else str(i)
        if len(shape) != t.rank:
            shown = "x".join(map(str, shape)) or "scalar"
            raise InputError(f"input {i} ('{name}') of {entry.name}: expected {t}, got shape "
                             f"{shown}")
        given += [dims.Given(name, axis, d, n) for axis, (d, n) in
                  enumerate(zip(t.shape, shape, strict=True))]
    ranges = {s.name: (s.lo, s.hi) for s in module.symbols}
    try:
        env = dims.bind(given, ranges)
    except dims.DimError as e:
        raise InputError(f"{entry.name}: {e}") from None
    missing = [s.name for s in module.symbols if s.name not in env]
    if missing:
        # a symbol no input gives: the module's other sizes cannot be known
        raise InputError(f"{entry.name}: no input gives size '{missing[0]}'; its inputs are "
                         f"{entry.signature.named()}")
    return tuple(env[s.name] for s in module.symbols)


class Flat:
    """A dynamic module's sizes in flat form, made once per load: its distinct symbolic
    dimensions (`dims`), and every slot type, kernel argument, launch and ALLOC as a code
    over them -- a tuple whose element is a number, or ~i for `dims[i]` -- so a new binding
    evaluates each distinct expression once and builds the rest by indexing. (Walking every
    type's expressions anew was most of a new binding's cost: GPT-2's decode step, its
    program once per x86-64 level, ~3000 walks, 10-20 ms a token.)"""

    def __init__(self, module: Module) -> None:
        self.dims: list[dims.Dim] = []
        self._index: dict[dims.Dim, int] = {}
        self.slots = [None if s.type.is_static else self.code(s.type.shape)
                      for s in module.slots]
        self.executables = [
            None if all(t.is_static for t in e.args) and _numbers(*e.grid, *e.block)
            else (tuple(None if t.is_static else self.code(t.shape) for t in e.args),
                  self.code(e.grid), self.code(e.block))
            for e in module.executables]
        self.entries: dict[str, tuple] = {}
        self._lock = threading.Lock()  # (entries are coded on first use, by any thread)

    def code(self, shape: Sequence[dims.Dim]) -> tuple[int, ...]:
        out = []
        for d in shape:
            if isinstance(d, int):
                out.append(d)
                continue
            if d not in self._index:
                self._index[d] = len(self.dims)
                self.dims.append(d)
            out.append(~self._index[d])
        return tuple(out)

    def entry(self, entry: EntryPlan) -> tuple:
        """The entry's ALLOC bytes (by command index) and its signature's types, as codes
        (new dimensions are appended to `dims`: code an entry before evaluating them)."""
        with self._lock:
            return self._entry(entry)

    def _entry(self, entry: EntryPlan) -> tuple:
        if entry.name not in self.entries:
            allocs = {i: self.code([c.bytes])[0] for i, c in enumerate(entry.commands)
                      if c.op is Op.ALLOC and not isinstance(c.bytes, int)}
            types = tuple((t.dtype, self.code(t.shape)) for t in
                          (*entry.signature.inputs, *entry.signature.outputs))
            used = frozenset(o for c in entry.commands for n, o in
                             zip(OPERAND_NAMES[c.op], c.operands, strict=False)
                             if n in _SLOT_OPERANDS) | frozenset(
                o for c in entry.commands if c.op is Op.DISPATCH
                for o in c.operands[len(OPERAND_NAMES[c.op]):])
            self.entries[entry.name] = (allocs, types, used)
        return self.entries[entry.name]


#: The operands that name a slot (DISPATCH's slots come after its named operands).
_SLOT_OPERANDS = frozenset({"slot", "dst", "src"})


def _numbers(*values: dims.Dim) -> bool:
    return all(isinstance(v, int) for v in values)


def specialize(module_plan: ModulePlan, entry: EntryPlan, key: tuple[int, ...],
               max_alloc_bytes: int | None, flat: Flat | None = None) -> Sized:
    """`entry` made static for the symbols' values `key`: every slot's type, ALLOC's bytes
    and each kernel's argument types and launch geometry evaluated; the kernels' signatures
    checked on those types, and the memory planned. Refuses (InputError, nothing allocated)
    a binding whose buffers pass MAX_BYTES or `max_alloc_bytes`. `flat` is the module's
    `Flat` (made here when not given: a caller that binds again keeps it)."""
    module = module_plan.module
    flat = flat or Flat(module)
    env = {s.name: v for s, v in zip(module.symbols, key, strict=True)}
    sizes = ", ".join(f"{n} = {v}" for n, v in env.items())
    where = f"{entry.name} with {sizes}"
    allocs, signature_types, used = flat.entry(entry)
    try:
        values = [dims.evaluate(d, env) for d in flat.dims]
    except dims.DimError as e:
        raise InputError(f"{where}: {e}") from None

    def at(code: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(c if c >= 0 else values[~c] for c in code)

    def grid(code: tuple[int, ...]) -> tuple[int, int, int]:
        x, y, z = at(code)
        return x, y, z

    # the entry's own slots (a module holds a variant of it per x86-64 level; the others'
    # slots and kernels stay as they are)
    slots = tuple(s if code is None or i not in used else
                  Slot(s.device, TensorType(s.type.dtype, at(code)))
                  for i, (s, code) in enumerate(zip(module.slots, flat.slots, strict=True)))
    dispatched = set(entry.executables)
    executables = tuple(
        exe if code is None or i not in dispatched else replace(
            exe, args=tuple(t if c is None else TensorType(t.dtype, at(c))
                            for t, c in zip(exe.args, code[0], strict=True)),
            grid=grid(code[1]), block=grid(code[2]))
        for i, (exe, code) in enumerate(zip(module.executables, flat.executables,
                                            strict=True)))
    commands = tuple(Command(Op.ALLOC, (c.slot, values[~allocs[i]])) if i in allocs else c
                     for i, c in enumerate(entry.commands))
    typed = [TensorType(dtype, at(code)) for dtype, code in signature_types]
    for i, (s, code) in enumerate(zip(slots, flat.slots, strict=True)):
        if code is not None and i in used and s.type.static_nbytes > MAX_BYTES:
            raise InputError(f"{where}: slot {i} would be a {s.type}, {s.type.static_nbytes} "
                             "bytes, more than any array can hold")
    for index in entry.executables:
        exe = executables[index]
        if problem := signature_problem(exe.kind, exe.args, exe.params, exe.name):
            raise ExecutionError(f"{where}: executable {index} ('{exe.name}'), args: {problem}")
    types = {i: slots[i].type for i in used}
    devices = {i: slots[i].device for i in used}
    kinds = [exe.kind for exe in executables]
    offsets = plan.assign(commands, types, devices, kinds)
    arenas = plan.arenas(offsets, types, devices)
    count = len(entry.signature.inputs)
    signature = Signature(tuple(typed[:count]), tuple(typed[count:]),
                          entry.signature.input_names, entry.signature.output_names)
    # what a call allocates: its arenas and its inputs (the cap a planned static module's
    # validation applies)
    total = sum(arenas.values()) + sum(t.static_nbytes for t in signature.inputs)
    if max_alloc_bytes is not None and total > max_alloc_bytes:
        sizes = ", ".join(f"the {d} arena {n}" for d, n in sorted(arenas.items()))
        raise InputError(f"{where}: a call would allocate {total} bytes ({sizes}, inputs "
                         f"{total - sum(arenas.values())}), more than the cap of "
                         f"{max_alloc_bytes} bytes (max_alloc_bytes)")
    static = replace(module, slots=slots, executables=executables)
    sized = replace(entry, commands=commands, signature=signature, alloc_bytes=total,
                    offsets=offsets, arenas=arenas)
    scalars = {index: tuple(key[k] for k in module.executables[index].operands)
               for index in entry.executables}
    return Sized(key, replace(module_plan, module=static, entries={entry.name: sized}), sized,
                 scalars)
