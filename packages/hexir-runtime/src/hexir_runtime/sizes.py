"""A dynamic module's sizes, per call: the symbols bound from the inputs' shapes, and the
entry point made static for them.

A dynamic module (version 6) declares its tensors' dimensions, ALLOC's bytes and its
kernels' launch geometry as expressions over named size symbols (`batch`, `past + seq`).
A call binds the symbols from its inputs' shapes (`dims.bind`: one line naming both inputs
when two disagree, or the symbol's range when a size is outside it), then `specialize`
evaluates everything for those values with checked int64 arithmetic and refuses a call
whose buffers would pass the load's cap -- all before anything is allocated -- and plans its
memory (`plan.assign`). The result is the static plan of that binding, which the interpreter
runs as it runs a static module's; the runtime keeps the programs of the last few bindings
(`interpreter.Resident.sized`), so a steady call with the sizes of an earlier one plans
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from hexir_format import Command, Module, Op, Slot, dims, plan, signature_problem
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


def specialize(module_plan: ModulePlan, entry: EntryPlan, key: tuple[int, ...],
               max_alloc_bytes: int | None) -> Sized:
    """`entry` made static for the symbols' values `key`: every slot's type, ALLOC's bytes
    and each kernel's argument types and launch geometry evaluated; the kernels' signatures
    checked on those types, and the memory planned. Refuses (InputError, nothing allocated)
    a binding whose buffers pass MAX_BYTES or `max_alloc_bytes`."""
    module = module_plan.module
    env = {s.name: v for s, v in zip(module.symbols, key, strict=True)}
    sizes = ", ".join(f"{n} = {v}" for n, v in env.items())
    where = f"{entry.name} with {sizes}"
    def three(d: tuple[dims.Dim, dims.Dim, dims.Dim]) -> tuple[int, int, int]:
        return dims.evaluate(d[0], env), dims.evaluate(d[1], env), dims.evaluate(d[2], env)

    try:
        slots = tuple(Slot(s.device, s.type.evaluate(env)) for s in module.slots)
        commands = tuple(Command(Op.ALLOC, (c.slot, dims.evaluate(c.bytes, env)))
                         if c.op is Op.ALLOC else c for c in entry.commands)
        executables = tuple(replace(
            exe, args=tuple(t.evaluate(env) for t in exe.args),
            grid=three(exe.grid), block=three(exe.block))
            for exe in module.executables)
    except dims.DimError as e:
        raise InputError(f"{where}: {e}") from None
    for i, s in enumerate(slots):
        if s.type.static_nbytes > MAX_BYTES:
            raise InputError(f"{where}: slot {i} would be a {s.type}, {s.type.static_nbytes} "
                             "bytes, more than any array can hold")
    for index in entry.executables:
        exe = executables[index]
        if problem := signature_problem(exe.kind, exe.args, exe.params, exe.name):
            raise ExecutionError(f"{where}: executable {index} ('{exe.name}'), args: {problem}")
    types = {i: s.type for i, s in enumerate(slots)}
    devices = {i: s.device for i, s in enumerate(slots)}
    kinds = [exe.kind for exe in executables]
    offsets = plan.assign(commands, types, devices, kinds)
    arenas = plan.arenas(offsets, types, devices)
    signature = Signature(tuple(t.evaluate(env) for t in entry.signature.inputs),
                          tuple(t.evaluate(env) for t in entry.signature.outputs),
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
