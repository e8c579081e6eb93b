"""What one call runs in: an arena of buffers kept between calls, the steps bound to it, and
the call running in it now.

An arena is made on a call's first use and kept for the next (`interpreter.Program` holds the
pool); its steps are the entry's commands bound to its buffers once. A run of steps that only
queue work on a device that records graphs becomes one `graph_step`: captured on the arena's
first call, since the graph holds the arena's buffer addresses, and replayed on every call.
"""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hexir_format import Device
from hexir_runtime import hal
from hexir_runtime.errors import DeviceError, ExecutionError
from hexir_runtime.hal import threads
from hexir_runtime.hal.hostcode import Job
from hexir_runtime.library import Strings

Printer = Callable[[np.ndarray], None]


@dataclass
class Call:
    """What one call brings and gathers: its inputs (host arrays, or `DevicePointer`s), its
    printer, the devices with work not yet waited for, what it printed, the copies off a
    device it leaves out (results that go to device memory, not through the host), and its
    string table (an entry that has strings: `library.Strings`)."""

    inputs: Sequence[Any]
    on_print: Printer | None
    pending: set[Device] = field(default_factory=set)
    printed: list[np.ndarray] = field(default_factory=list)
    kept_on_device: frozenset[int] = frozenset()  # COPY destinations not to bring to the host
    strings: Strings | None = None


# An arena's call between calls: nothing to read. Steps run only inside a call, so they read
# `arena.call` unchecked; this keeps the caller's arrays from being held past their call.
IDLE = Call((), None)


@dataclass
class Step:
    """A command bound to an arena: `run` does it; `device` is the device it leaves work
    queued on (None: done when `run` returns); `capturable` when it does nothing but queue
    work there, so a run of such steps can be one graph; `job` when it is a compiled cpu
    kernel, so a run of such steps can be one native sequence (`threads.sequence`)."""

    label: str  # `command 3 (dispatch)`, as errors name it
    run: Callable[[], None]
    device: Device | None = None
    capturable: bool = False
    job: Job | None = None  # a compiled cpu kernel's launch, for a sequence
    input: int | None = None  # the input an INPUT step writes into its buffer
    record: threads.Record | None = None  # a native sequence's (`sequences`)


@dataclass
class Arena:
    """One call's buffers (constants included), the commands bound to them, and the call
    running in it now."""

    buffers: list[hal.Buffer]
    planned: list[hal.Buffer] = field(default_factory=list)  # the memory plan's arenas
    staging: dict[int, hal.Buffer] = field(default_factory=dict)  # binding -> pinned buffer
    steps: list[Step] = field(default_factory=list)  # one per command (or graph) that runs
    runs: list[Step] = field(default_factory=list)  # the same, runs of kernels as sequences
    # the steps but the inputs' as one sequence (`Program.native_steps`), made once
    native: threads.Record | None = None
    native_made: bool = False
    graphs: list[tuple[hal.Device, Any]] = field(default_factory=list)  # captured here
    result_views: list[np.ndarray] = field(default_factory=list)  # each result's host bytes
    # per result: the copy that brings it off a device into its pinned buffer (None: none)
    result_copies: list[tuple[Callable[[], None], Device] | None] = field(default_factory=list)
    unwaited: set[Device] = field(default_factory=set)  # left running by the last call
    call: Call = field(default_factory=lambda: IDLE)  # the call running in it now


Failure = Callable[[str, DeviceError], ExecutionError]  # a step's label and error, as raised


def graph_step(arena: Arena, device: hal.Device, run: list[Step], failed: Failure) -> Step:
    """The run as one step: captured on its first call in this arena (the arena's buffer
    addresses are in the graph), one graph launch on every call. A step that fails while it
    is captured is named as itself; a failing capture or launch, as the run."""
    graph = None

    def labeled(step: Step) -> Callable[[], None]:
        def launch() -> None:
            try:
                step.run()
            except DeviceError as e:
                raise failed(step.label, e) from None
        return launch

    def replay() -> None:
        nonlocal graph
        if graph is None:
            graph = device.capture([labeled(s) for s in run])
            arena.graphs.append((device, graph))
        device.replay(graph)
    first, last = run[0].label.split()[1], run[-1].label.split()[1]
    span = f"command {first}" if first == last else f"commands {first}-{last}"
    return Step(f"{span} ({device.kind} graph)", replay, device.kind)


def sequences(steps: list[Step]) -> list[Step]:
    """Each maximal run of compiled cpu kernels made one step: their launches in one foreign
    call (`threads.sequence`), so no Python runs between them; the other steps as they are.
    A kernel alone is a sequence too: a call points a sequence's kernels at the caller's
    arrays (`direct_inputs`), and a one-conv module's input of 3.2 MB was otherwise copied
    in on every call, 0.47 ms beside a 0.64 ms kernel."""
    made: list[Step] = []
    for native, run in itertools.groupby(steps, lambda s: s.job is not None):
        group = list(run)
        jobs = [s.job for s in group if s.job is not None]
        record = threads.sequence(jobs) if native else None
        if record is None:
            made.extend(group)
            continue
        first, last = group[0].label.split()[1], group[-1].label.split()[1]
        span = f"command {first}" if first == last else f"commands {first}-{last}"
        made.append(Step(f"{span} (cpu sequence)", record.run, record=record))
    return made


def direct_inputs(arena: Arena, inputs: dict[int, tuple[int, int]]) -> list[Step]:
    """The arena's runs with the INPUT steps of `inputs` (index -> its buffer's address and
    bytes: inputs that only compiled cpu kernels read) made to repoint the sequences'
    kernels at the caller's array instead of copying it in: an image model's input is 0.6
    MB, a copy of 60-110 us a call. An array not aligned to its element, or a device
    array, is still copied into the buffer, and the kernels pointed back at it. An input
    that a kernel outside a sequence reads (its pointers bound into its own foreign call)
    keeps its copy."""
    made = []
    for step in arena.runs:
        if step.input not in inputs:
            made.append(step)
            continue
        address, size = inputs[step.input]
        sites: list[Site] = []
        alone = False
        for other in arena.runs:
            if other.record is not None:
                table = other.record.pointers
                at = np.flatnonzero(other.record.addresses & (table >= address)
                                    & (table < address + size))
                if at.size:
                    view = (ctypes.c_uint64 * table.size).from_buffer(table.data)
                    sites.extend((view, int(i), int(table[i]) - address) for i in at)
            elif other.job is not None:
                alone = alone or any(address <= p < address + size
                                     for p in other.job.addresses)
        made.append(step if alone or not sites else
                    dataclasses.replace(step, run=_repoint(arena, step, address, sites)))
    return made


# A pointer a sequence passes that a call repoints: the sequence's pointer table (a ctypes
# view of `Record.pointers`), the pointer's index in it, and its offset from the input's start.
Site = tuple[ctypes.Array, int, int]


def _repoint(arena: Arena, step: Step, address: int, sites: list[Site]) -> Callable[[], None]:
    """The INPUT step that points `sites` at the call's array (its buffer's copy, at
    `address`, where the array cannot be read in place). It runs once a call with the cache
    cold -- the kernels before it swept it -- where each Python or numpy operation costs
    tens of microseconds: so plain ctypes stores, and the address read with the alignment
    in one step (`hal.aligned_address`); numpy's `ctypes.data` and a fancy-indexed store
    took 77 us of the example MLP's call there, these 27 (bench/README.md)."""
    copy, index = step.run, step.input
    assert index is not None, "an INPUT step"

    def repoint() -> None:
        x = arena.call.inputs[index]
        base = hal.aligned_address(x) if isinstance(x, np.ndarray) else None
        if base is None:  # checked: exact type, contiguous; not aligned, or on a device
            copy()
            base = address
        for view, at, offset in sites:
            view[at] = base + offset
    return repoint


def graphs(arena: Arena, devices: dict[Device, hal.Device], steps: list[Step],
           failed: Failure) -> list[Step]:
    """Each maximal run of capturable steps on one device that records graphs made one
    `graph_step`; the other steps as they are."""
    def graphable(step: Step) -> bool:
        return step.capturable and step.device is not None and devices[step.device].graphs

    made: list[Step] = []
    for (graph, device), run in itertools.groupby(steps, lambda s: (graphable(s), s.device)):
        group = list(run)
        made.extend([graph_step(arena, devices[device], group, failed)] if graph else group)
    return made
