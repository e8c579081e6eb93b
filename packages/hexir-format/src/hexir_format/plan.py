"""Memory planning: where each intermediate buffer of an entry point lives in its device's arena.

An entry's intermediates are the slots its ALLOC and COPY commands bind (its inputs arrive
from the caller, its constants are rodata). A slot is live from the first command that binds
it to the last one that reads or writes it, and to the end of the call when an OUTPUT names
it. A reshape kernel's destination may be its input's own bytes (the runtime runs reshapes as
views), so the input stays live as long as the destination does.

An element-wise kernel may write its result over an input that dies at that kernel, in place:
when the two have the same element count and byte size (so output element i overwrites
exactly input element i, after the kernel has read it, on every device) and nothing touches
the result before that kernel. `in_place` names those pairs; they are the only buffers live
at once that may share bytes, and then exactly. Two slots may share bytes only when their
lifetimes do not overlap, so an arena's size is the peak of what is live at once rather than
the sum of all intermediates.

Written once, used twice: the compiler calls `assign` and records the offsets in the module's
plan section; the validator calls `problem` on an untrusted plan, so a damaged one can never
make two live buffers share bytes (nor reach outside its arena, whose size it defines).
"""

from __future__ import annotations

import bisect
import heapq
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
             devices: Mapping[int, Device], kinds: Sequence[KernelKind],
             spans: Mapping[int, Lifetime] | None = None) -> dict[int, int]:
    """destination -> the input it may overwrite: element-wise dispatches whose input, an
    intermediate on the destination's device of its element count and byte size, dies there
    (`spans`: the commands' `lifetimes`, where the caller has them)."""
    spans = lifetimes(commands, kinds) if spans is None else spans
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
    over = in_place(commands, types, devices, kinds, spans)
    for slot, span in sorted(spans.items(), key=lambda kv: (kv[1].first, kv[0])):
        held = [h for h in live.get(devices[slot], []) if h[2] >= span.first]
        nbytes = types[slot].static_nbytes
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
        found[devices[slot]] = max(found.get(devices[slot], 0),
                                   offset + types[slot].static_nbytes)
    return found


def problem(commands: Sequence[Command], offsets: Mapping[int, int],
            types: Mapping[int, TensorType], devices: Mapping[int, Device],
            kinds: Sequence[KernelKind] = ()) -> str | None:
    """Why `offsets` cannot be an entry's plan (a slot unplanned, misaligned, or sharing bytes
    with one live at the same time on its device but for an in-place pair exactly), or None."""
    spans = lifetimes(commands, kinds)
    over = in_place(commands, types, devices, kinds, spans)
    sizes = {s: types[s].static_nbytes for s in spans}
    for slot in spans:
        if slot not in offsets:
            return f"slot {slot} is an intermediate of the entry but has no place in the plan"
        if offsets[slot] % ARENA_ALIGNMENT:
            return f"slot {slot} is at offset {offsets[slot]}, not a multiple of {ARENA_ALIGNMENT}"
    # In time order, the live byte ranges of each device stay disjoint: a slot that binds is
    # checked against the live range that starts last before its end (the only one that can
    # meet it, the others lying wholly before that one). Live starts are kept per device in a
    # Fenwick tree over the plan's distinct offsets, their deaths in a heap: n log n in all.
    order = sorted((s for s in spans if sizes[s]), key=lambda s: (spans[s].first, s))
    live: dict[Device, _LiveRanges] = {}
    for slot in order:
        span, start = spans[slot], offsets[slot]
        end = start + sizes[slot]
        ranges = live.get(devices[slot])
        if ranges is None:
            ranges = live[devices[slot]] = _LiveRanges(
                [offsets[s] for s in order if devices[s] is devices[slot]])
        ranges.expire(span.first, spans)
        x = over.get(slot)  # in place: its input, of the same size, at the same offset
        if x is not None and ranges.at(start) == x and offsets[x] + sizes[x] == end:
            ranges.remove(start)  # those bytes become ours
        o = ranges.last_before(end)
        if o is not None and offsets[o] + sizes[o] > start:
            return (f"slots {o} and {slot} are live at once (commands {spans[o].first}-"
                    f"{spans[o].last} and {span.first}-{span.last}) and share bytes at "
                    f"offset {max(start, offsets[o])} of the {devices[slot]} arena")
        ranges.add(start, slot, span.last)
    return None


class _LiveRanges:
    """The disjoint byte ranges live on one device, by start: at most one per start."""

    def __init__(self, starts: Iterable[int]):
        self.starts = sorted(set(starts))
        self.tree = [0] * (len(self.starts) + 1)  # Fenwick tree: how many live starts
        self.holder: dict[int, int] = {}  # start index -> the live slot there
        self.deaths: list[tuple[int, int, int]] = []  # heap of (last use, start index, slot)

    def _count(self, i: int, delta: int) -> None:
        i += 1
        while i < len(self.tree):
            self.tree[i] += delta
            i += i & -i

    def add(self, start: int, slot: int, last: int) -> None:
        i = bisect.bisect_left(self.starts, start)
        self.holder[i] = slot
        self._count(i, 1)
        heapq.heappush(self.deaths, (last, i, slot))

    def remove(self, start: int) -> None:
        i = bisect.bisect_left(self.starts, start)
        del self.holder[i]
        self._count(i, -1)

    def at(self, start: int) -> int | None:
        return self.holder.get(bisect.bisect_left(self.starts, start))

    def expire(self, now: int, spans: Mapping[int, Lifetime]) -> None:
        """Drop the ranges whose slot was last used before command `now`."""
        while self.deaths and self.deaths[0][0] < now:
            _, i, slot = heapq.heappop(self.deaths)
            if self.holder.get(i) == slot:  # (not already taken over in place)
                self.remove(self.starts[i])

    def last_before(self, end: int) -> int | None:
        """The live slot whose start is the greatest below `end`, if any."""
        i, k = bisect.bisect_left(self.starts, end), 0
        while i:  # k = the number of live starts below `end`
            k += self.tree[i]
            i -= i & -i
        if not k:
            return None
        pos, step = 0, 1 << (len(self.tree) - 1).bit_length()
        while step:  # the k-th live start: descend the tree
            if pos + step < len(self.tree) and self.tree[pos + step] < k:
                pos += step
                k -= self.tree[pos]
            step >>= 1
        return self.holder[pos]
