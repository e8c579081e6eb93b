"""Memory planning: where each intermediate buffer of an entry point lives in its device's arena.

An entry's intermediates are the slots its ALLOC and COPY commands bind (its inputs arrive
from the caller, its constants are rodata). A slot is live from the first command that binds
it to the last one that reads or writes it, and to the end of the call when an OUTPUT names
it. A reshape kernel's destination may be its input's own bytes (the runtime runs reshapes as
views), so the input stays live as long as the destination does.

An element-wise kernel may write its result over an input that dies at that kernel, in place:
when the two have the same element count and byte size (so output element i overwrites
exactly input element i, after the kernel has read it, on every device) and nothing touches
the result before that kernel. `in_place` names those pairs; they are the only buffers live at once that may share bytes, and then exactly. Two slots may share bytes only when their lifetimes do not overlap, so an arena's size is
the peak of what is live at once rather than the sum of all intermediates.

Written once, used twice: the compiler calls `assign` and records the offsets in the module's
plan section; the validator calls `problem` on an untrusted plan, so a damaged one can never
make two live buffers share bytes (nor reach outside its arena, whose size it defines).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hexir_format.model import BINARY_KINDS, Command, Device, KernelKind, Op, TensorType

#: Kernels whose output element i reads only element i of each same-sized input.
ELEMENTWISE_KINDS = frozenset({*BINARY_KINDS, KernelKind.RELU, KernelKind.SIGMOID,
                               KernelKind.TANH, KernelKind.EXP, KernelKind.SQRT,
                               KernelKind.NEG, KernelKind.GELU, KernelKind.MAP})

#: Every planned offset is a multiple of this: a cache line, and any vector load's alignment.
ARENA_ALIGNMENT = 64
#: What a cuda kernel may assume of every buffer it is given (the compiler emits 128-bit
#: accesses on that promise): arenas place buffers at ARENA_ALIGNMENT, allocations are
#: aligned further still.
DEVICE_ARGUMENT_ALIGNMENT = 16


@dataclass(frozen=True)
class Lifetime:
    first: int  # the command that first binds the slot
    last: int  # the last command that uses it (len(commands) when it is an output)


def lifetimes(commands: Sequence[Command],
              kinds: Sequence[KernelKind] = ()) -> dict[int, Lifetime]:
    """The lifetime of every slot an entry's ALLOC or COPY commands bind; `kinds[e]` is
    executable e's kind."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    root: dict[int, int] = {}  # a reshape's destination -> the slot whose bytes it may be
    for i, c in enumerate(commands):
        if c.op in (Op.ALLOC, Op.COPY):
            slot = c.slot if c.op is Op.ALLOC else c.dst
            first.setdefault(slot, i)
        for slot in _touched(c):
            last[slot] = len(commands) if c.op is Op.OUTPUT else max(last.get(slot, i), i)
        if c.op is Op.DISPATCH and c.executable < len(kinds) \
                and kinds[c.executable] is KernelKind.RESHAPE and len(c.slots) == 2:
            root[c.slots[1]] = root.get(c.slots[0], c.slots[0])
    for view, source in root.items():
        if view in last:
            last[source] = max(last.get(source, 0), last[view])
    return {s: Lifetime(f, max(last.get(s, f), f)) for s, f in first.items()}


def _touched(c: Command) -> Iterable[int]:
    if c.op is Op.DISPATCH:
        return c.slots
    if c.op is Op.COPY:
        return (c.dst, c.src)
    if c.op in (Op.ALLOC, Op.PRINT, Op.OUTPUT):
        return (c.slot,)
    return ()


def in_place(commands: Sequence[Command], types: Mapping[int, TensorType],
             devices: Mapping[int, Device], kinds: Sequence[KernelKind]) -> dict[int, int]:
    """destination -> the input it may overwrite: element-wise dispatches whose input, an
    intermediate on the destination's device of its element count and byte size, dies there."""
    spans = lifetimes(commands, kinds)
    outputs = {c.slot for c in commands if c.op is Op.OUTPUT}
    used: dict[int, int] = {}  # slot -> the first command after its binding that touches it
    for i, c in enumerate(commands):
        for slot in _touched(c):
            if spans.get(slot, Lifetime(i, i)).first != i:
                used.setdefault(slot, i)
    pairs: dict[int, int] = {}
    taken: set[int] = set()
    for i, c in enumerate(commands):
        if c.op is not Op.DISPATCH or c.executable >= len(kinds) or not c.slots \
                or kinds[c.executable] not in ELEMENTWISE_KINDS:
            continue
        *inputs, dst = c.slots
        # the destination's bytes are the input's until this kernel: nothing may touch it first
        if dst not in spans or dst in pairs or spans[dst].first >= i or dst in inputs \
                or used[dst] != i:
            continue
        for x in inputs:
            if (x in spans and x not in outputs and x not in taken and spans[x].last == i
                    and spans[x].first < spans[dst].first and devices.get(x) is devices.get(dst)
                    and types[x].size == types[dst].size and types[x].nbytes == types[dst].nbytes):
                pairs[dst] = x
                taken.add(x)
                break
    return pairs


def _aligned(n: int) -> int:
    return -(-n // ARENA_ALIGNMENT) * ARENA_ALIGNMENT


def assign(commands: Sequence[Command], types: Mapping[int, TensorType],
           devices: Mapping[int, Device], kinds: Sequence[KernelKind] = ()) -> dict[int, int]:
    """An offset for every intermediate: an element-wise result over the input it may
    overwrite (`in_place`), else first fit, in order of first use, among the bytes not held
    by a slot still live on the same device."""
    offsets: dict[int, int] = {}
    live: dict[Device, list[tuple[int, int, int, int]]] = {}  # (start, end, last use, slot)
    spans = lifetimes(commands, kinds)
    over = in_place(commands, types, devices, kinds)
    for slot, span in sorted(spans.items(), key=lambda kv: (kv[1].first, kv[0])):
        held = [h for h in live.get(devices[slot], []) if h[2] >= span.first]
        nbytes = types[slot].nbytes
        if slot in over and over[slot] in offsets:
            offset = offsets[over[slot]]
            held = [h for h in held if h[3] != over[slot]]  # the input's bytes become ours
        else:
            size, offset = _aligned(nbytes), 0
            for start, end, *_ in sorted(held):
                if offset + size <= start:
                    break
                offset = max(offset, _aligned(end))
        offsets[slot] = offset
        live[devices[slot]] = [*held, (offset, offset + nbytes, span.last, slot)]
    return offsets


def arenas(offsets: Mapping[int, int], types: Mapping[int, TensorType],
           devices: Mapping[int, Device]) -> dict[Device, int]:
    """Each device's arena size: the end of its furthest buffer."""
    found: dict[Device, int] = {}
    for slot, offset in offsets.items():
        found[devices[slot]] = max(found.get(devices[slot], 0), offset + types[slot].nbytes)
    return found


def problem(commands: Sequence[Command], offsets: Mapping[int, int],
            types: Mapping[int, TensorType], devices: Mapping[int, Device],
            kinds: Sequence[KernelKind] = ()) -> str | None:
    """Why `offsets` cannot be an entry's plan (a slot unplanned, misaligned, or sharing bytes
    with one live at the same time on its device but for an in-place pair exactly), or None."""
    spans = lifetimes(commands, kinds)
    over = in_place(commands, types, devices, kinds)
    sizes = {s: types[s].nbytes for s in spans}
    for slot in spans:
        if slot not in offsets:
            return f"slot {slot} is an intermediate of the entry but has no place in the plan"
        if offsets[slot] % ARENA_ALIGNMENT:
            return f"slot {slot} is at offset {offsets[slot]}, not a multiple of {ARENA_ALIGNMENT}"
    # In time order, the live byte ranges of each device stay disjoint: a slot that binds
    # checks only its neighbours among them (one sorted list per device).
    active: dict[Device, list[tuple[int, int, int]]] = {}  # (start, end, slot) by start
    for slot in sorted(spans, key=lambda s: (spans[s].first, s)):
        if not sizes[slot]:
            continue
        span, start = spans[slot], offsets[slot]
        end = start + sizes[slot]
        ranges = active.setdefault(devices[slot], [])
        ranges[:] = [r for r in ranges if spans[r[2]].last >= span.first]
        if (start, end, over.get(slot)) in ranges:  # in place: its input, of the same size,
            ranges.remove((start, end, over[slot]))  # at the same offset; those bytes become ours
        at = bisect.bisect_left(ranges, (start, end, slot))
        for other in ranges[max(at - 1, 0):at + 1]:
            if other[0] < end and start < other[1]:
                o = other[2]
                return (f"slots {o} and {slot} are live at once (commands {spans[o].first}-"
                        f"{spans[o].last} and {span.first}-{span.last}) and share bytes at "
                        f"offset {max(start, other[0])} of the {devices[slot]} arena")
        ranges.insert(at, (start, end, slot))
    return None
