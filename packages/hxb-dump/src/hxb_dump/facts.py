"""What a `.hxb` holds, as plain data: the one source of both the text listing and `--json`.

Everything here is derived from hexir_format's typed model (or, for a damaged file, from its
layout alone) and made of dicts, lists, strings and numbers, so the two outputs cannot say
different things. A module can parse yet name slots or executables that do not exist;
nothing here indexes on trust, and the verifier says what is wrong.
"""

from __future__ import annotations

from typing import Any

from hexir_format import (
    CPU_LEVELS,
    OPERAND_NAMES,
    Command,
    Executable,
    FormatError,
    Generation,
    Layout,
    Module,
    Op,
    dims,
    plan,
    signature_problem,
)
from hexir_format import layout as L
from hexir_format.validate import variant_label
from hxb_dump import images, params, rodata

#: A JSON object of `--json`'s document: its values are of many types (numbers, strings, lists
#: of further objects), and the listing reads each by its key, knowing what that key holds.
Facts = dict[str, Any]


def layout_facts(layout: Layout) -> Facts:
    """The header and section table."""
    return {
        "version": layout.version,
        "flags": layout.flags,
        "sections": [{"kind": s.kind, "name": s.name, "offset": s.offset, "size": s.size}
                     for s in layout.sections],
    }


def _dim(d: dims.Dim) -> int | str:
    """A dimension as JSON holds it: a number, or (a dynamic module's) its expression."""
    return d if isinstance(d, int) else dims.render(d)


def module_facts(module: Module, *, values: bool) -> Facts:
    """Size symbols, slots, entry points with their commands, rodata and executables."""
    return {
        "symbols": [{"name": s.name, "lo": s.lo, "hi": s.hi} for s in module.symbols],
        "strings": list(module.strings),
        "generations": [_generation(module, g) for g in module.generations],
        "slots": [{"index": i, "device": str(s.device), "type": str(s.type),
                   "dtype": str(s.type.dtype), "shape": [_dim(d) for d in s.type.shape],
                   "bytes": _dim(s.type.nbytes)} for i, s in enumerate(module.slots)],
        "functions": _functions(module),
        "rodata": {"size": len(module.rodata),
                   "ranges": rodata.ranges(module, values=values)},
        "executables": [_executable(module, i, e) for i, e in enumerate(module.executables)],
        "plan": _plan(module),
    }


def _generation(module: Module, g: Generation) -> Facts:
    """A generate entry point: its step's roles by index and name, the cache pairs (the
    loop's state), the end-of-sequence token and the bound."""
    step = module.function(g.step)
    ins, outs = (step.inputs, step.outputs) if step is not None else ((), ())

    def named(names: tuple[str, ...], index: int) -> Facts:
        return {"index": index, "name": names[index] if index < len(names) else None}

    return {"name": g.name, "step": g.step, "eos": g.eos, "max_length": g.max_length,
            "ids": named(ins, g.ids), "mask": named(ins, g.mask),
            "positions": named(ins, g.positions), "logits": named(outs, g.logits),
            "cache": [{"past": named(ins, past), "present": named(outs, present)}
                      for past, present in g.cache]}


def _plan(module: Module) -> list[Facts]:
    """Per entry point, the memory plan's arenas: each device's size (the peak of what is live
    at once) against the sum of its intermediates, and where each one is placed."""
    if not module.placements:
        return []
    placed = dict(module.placements)
    kinds = [e.kind for e in module.executables]
    out = []
    for function in module.functions:
        slots = [s for s in plan.lifetimes(function.commands, kinds)
                 if s in placed and s < len(module.slots)]
        arenas: dict[str, Facts] = {}
        for slot in slots:
            device, size = str(module.slots[slot].device), module.slots[slot].type.nbytes
            arena = arenas.setdefault(device, {"bytes": 0, "sum": 0, "count": 0, "offsets": {}})
            arena["bytes"] = max(arena["bytes"], placed[slot] + size)
            arena["sum"] += size
            arena["count"] += 1
            arena["offsets"][slot] = placed[slot]
        out.append({"function": variant_label(function.name, function.cpu_level),
                    "arenas": arenas})
    return out


def _functions(module: Module) -> list[Facts]:
    out, offset = [], 0
    for function in module.functions:
        commands, pc = [], offset
        for command in function.commands:
            commands.append(_command(pc, command))
            pc += L.command_size(len(command.operands))
        inputs = _bound(module, function.commands, Op.INPUT)
        outputs = _bound(module, function.commands, Op.OUTPUT)
        out.append({
            "name": function.name,
            "program_offset": offset,
            # version 6: the x86-64 level this variant of the entry point is for
            "target": CPU_LEVELS.get(function.cpu_level) if function.cpu_level else None,
            "inputs": inputs,
            "outputs": outputs,
            "input_names": list(function.inputs),
            "output_names": list(function.outputs),
            "signature": f"{function.name}({_named(function.inputs, inputs)}) -> "
                         f"({_named(function.outputs, outputs)})",
            "commands": commands,
        })
        offset = pc + L.command_size(0)  # the END that closes the function
    return out


def _named(names: tuple[str, ...], types: list[str]) -> str:
    """`x: 2x3xf32, mask: 3xi1` where the module names them, else `2x3xf32, 3xi1` (a count
    that does not match, which the validator refuses, names what it can)."""
    named = (f"{n}: {t}" for n, t in zip(names, types, strict=False))
    return ", ".join([*named, *types[len(names):]])


def _command(pc: int, command: Command) -> Facts:
    names = OPERAND_NAMES[command.op]
    return {
        "offset": pc,
        "op": str(command.op),
        "args": dict(zip(names, map(_dim, command.operands), strict=False)),
        "slots": list(command.operands[len(names):]),
    }


def _bound(module: Module, commands: tuple[Command, ...], op: Op) -> list[str]:
    """The types of the slots an entry point's INPUT (or OUTPUT) commands name, by index;
    `?` where an index is missing or names no slot."""
    by_index = {c.index: c.slot for c in commands if c.op is op}
    slots = [by_index.get(i, len(module.slots)) for i in range(len(by_index))]
    return [str(module.slots[s].type) if s < len(module.slots) else "?" for s in slots]


def _executable(module: Module, index: int, exe: Executable) -> Facts:
    version = module.version
    fits = signature_problem(exe.kind, exe.args, exe.params, exe.name) is None
    named = params.decode(exe.kind, exe.params, exe.name) if fits else None
    return {
        "index": index,
        "name": exe.name,
        "kind": str(exe.kind),
        "device": str(exe.device),
        "args": [str(t) for t in exe.args],
        "params": named,
        "raw_params": list(exe.params),
        "extents": extents(exe),
        "image": _image(exe),
        "grid": [_dim(d) for d in (exe.grid if version >= 4 else exe.grid[:2])],
        "block": [_dim(d) for d in (exe.block if version >= 4 else exe.block[:2])],
        # a dynamic module's: the size symbols it receives after its buffers, in order
        "operands": [module.symbols[k].name if k < len(module.symbols) else f"#{k}"
                     for k in exe.operands],
    }


def _image(exe: Executable) -> Facts | None:
    if exe.image is None:
        return None
    try:
        facts = images.describe(bytes(exe.image))
    except FormatError as e:  # a damaged host object: show what can be, validation says the rest
        return {"size": len(exe.image), "flavour": "damaged host object", "target": None,
                "error": str(e)}
    if facts["flavour"] == "host object":  # the x86-64 level the module says it needs
        facts["target"] = CPU_LEVELS.get(exe.cpu_level, f"level {exe.cpu_level}")
    return facts


def extents(exe: Executable) -> Facts | None:
    """Version 3's description of a kernel (m, n, k, elem_size) where it applies."""
    if exe.extents is None:
        return None
    m, n, k = exe.extents
    return {"m": m, "n": n, "k": k, "elem_size": exe.destination.dtype.itemsize}
