"""Run an entry point: its commands made, once per load, into steps bound to everything.

The interpreter is the same for every backend: slots resolve to `hal.Buffer`s on the device
the slot lives on, DISPATCH launches on the kernel's device, COPY moves bytes between devices.
It runs only plans that `validate` produced, so it never range-checks a command itself.

What outlives one call lives in `Resident` (one per load): the devices, each executable loaded
once per device, each constant bound (cpu) or uploaded (cuda) once, and each entry's
`Program`. A program resolves, when it is made, which buffer every command reads and writes
(a slot bound twice is two buffers), and binds each command to its device, its kernel and its
buffers: a call then only copies its inputs in, runs the bound steps, and reads its outputs
out. The buffers a call works in are an *arena*, made on a call's first use and kept for the
next, so a steady call allocates, zeroes and frees nothing; calls in flight at once each take
their own arena (the pool grows to the most calls ever in flight), so a module may be called
from several threads, with the same results as one at a time. When the module plans its
memory (`hexir_format.plan`), an arena's intermediates are views into one buffer per device,
placed by the plan, instead of one buffer each. An arena is zeroed when it is made; a buffer
that a call reads before it writes it (never in a module the compiler writes, where every
buffer is a kernel's destination first) is zeroed again where its ALLOC binds it, so no call
sees another's data, nor a buffer the bytes of one that died earlier in the call. Launches are asynchronous; a device is waited for only
where its results are read (PRINT, a COPY off it, the end of the call).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hexir_format import Command, Device, DType, KernelKind, Op, TensorType

from hexir_runtime import hal
from hexir_runtime.errors import DeviceError, ExecutionError
from hexir_runtime.validate import EntryPlan, ModulePlan, check_placement


@dataclass
class Resident:
    """Everything a load keeps between calls."""

    plan: ModulePlan
    devices: dict[Device, hal.Device]
    executables: dict[int, Any] = field(default_factory=dict)
    constants: dict[tuple[Device, int, int], hal.Buffer] = field(default_factory=dict)
    programs: dict[str, Program] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def executable(self, index: int) -> Any:
        """Executable `index`, loaded on its device the first time it is needed."""
        if index not in self.executables:
            exe = self.plan.module.executables[index]
            self.executables[index] = self.devices[exe.device].load_executable(exe)
        return self.executables[index]

    def constant(self, device: Device, offset: int, nbytes: int) -> hal.Buffer:
        """rodata[offset:offset+nbytes] on `device`: bound or uploaded once per load."""
        key = (device, offset, nbytes)
        if key not in self.constants:
            view = self.plan.module.rodata[offset:offset + nbytes]
            self.constants[key] = self.devices[device].constant(view)
        return self.constants[key]

    def program(self, plan: EntryPlan) -> Program:
        """The entry made ready to run: placement checked, kernels loaded, once per load."""
        program = self.programs.get(plan.name)
        if program is not None:
            return program
        with self.lock:
            if plan.name not in self.programs:
                check_placement(plan, set(self.devices))
                for index in plan.executables:
                    try:
                        self.executable(index)
                    except DeviceError as e:
                        raise ExecutionError(f"{plan.name}: {e}") from None
                self.programs[plan.name] = Program(self, plan)
            return self.programs[plan.name]

    def close(self) -> None:
        for program in self.programs.values():
            program.close()
        self.programs.clear()
        for buffer in self.constants.values():
            buffer.device.release(buffer)
        self.constants.clear()
        self.executables.clear()
        for device in self.devices.values():
            device.close()


@dataclass
class Execution:
    """What one call produced: the entry's results and what its PRINTs printed."""

    outputs: tuple[np.ndarray, ...]
    printed: list[np.ndarray]
    output_names: tuple[str, ...] = ()  # as the module names them: none, or one per output

    @property
    def results(self) -> dict[str, np.ndarray]:
        """The results by name, in output order: the module's output names, or `output_0`,
        `output_1`, ... where it names none (the names `hexir-run --output=@FILE.npz` writes
        either way, so a file and a call agree)."""
        names = self.output_names or tuple(f"output_{i}" for i in range(len(self.outputs)))
        return dict(zip(names, self.outputs, strict=True))


Printer = Callable[[np.ndarray], None]


def prepare(resident: Resident, plan: EntryPlan) -> None:
    """Refuse a plan this load cannot place, and load its kernels (once per load)."""
    resident.program(plan)


def execute(resident: Resident, plan: EntryPlan, inputs: Sequence[np.ndarray],
            on_print: Printer | None = None, out: Sequence[np.ndarray] | None = None
            ) -> Execution:
    """Run `plan` with `inputs` (already checked against its signature); the results go into
    `out` (checked arrays, one per output) when given, else into fresh arrays."""
    return resident.program(plan).run(inputs, on_print, out)


@dataclass
class _Call:
    """What one call brings and gathers: its inputs, its printer, what it printed."""

    inputs: Sequence[np.ndarray]
    on_print: Printer | None
    pending: set[Device] = field(default_factory=set)
    printed: list[np.ndarray] = field(default_factory=list)


@dataclass
class _Binding:
    """A buffer a command binds: on `device`, `nbytes` long; `constant` when it is rodata;
    `offset` its place in the device's arena when the module plans its memory."""

    device: Device
    nbytes: int
    constant: hal.Buffer | None = None
    offset: int | None = None


class Program:
    """An entry point's commands, resolved to buffers once; runs on a pool of arenas."""

    def __init__(self, resident: Resident, plan: EntryPlan):
        self.resident, self.plan = resident, plan
        self.bindings: list[_Binding] = []
        self.reads: list[tuple[int, ...]] = []  # per command: the bindings it reads, then writes
        self.writes: list[int | None] = []
        current: dict[int, int] = {}  # slot -> binding, as of the command being resolved
        for c in plan.commands:
            reads = tuple(current[s] for s in _read_slots(c))
            written = _written_slot(c)
            if written is not None:
                current[written] = self._binding(c, written, reads)
            self.reads.append(reads)
            self.writes.append(current[written] if written is not None else None)
        self.outputs = self._outputs()
        self.rezero = self._read_before_written()
        self.alias, self.views = self._reshapes_as_views()
        self._free: list[_Arena] = []
        self._arenas: list[_Arena] = []
        self._lock = threading.Lock()
        # A cuda context is current on one thread at a time: calls that touch cuda take turns.
        self._serial = threading.Lock() if Device.CUDA in {b.device for b in self.bindings} | {
            resident.plan.module.executables[i].device for i in plan.executables} else None

    def _binding(self, c: Command, slot: int, reads: tuple[int, ...]) -> int:
        device = self.resident.plan.slot_device(slot)
        if c.op is Op.CONST:
            buffer = self.resident.constant(device, c.rodata_offset, c.bytes)
            self.bindings.append(_Binding(device, c.bytes, buffer))
        elif c.op is Op.COPY:
            self.bindings.append(_Binding(device, self.bindings[reads[0]].nbytes,
                                          offset=self.plan.offsets.get(slot)))
        elif c.op is Op.INPUT:
            self.bindings.append(_Binding(device, self.resident.plan.slot_type(slot).nbytes))
        else:  # ALLOC
            self.bindings.append(_Binding(device, c.bytes, offset=self.plan.offsets.get(slot)))
        return len(self.bindings) - 1

    def _outputs(self) -> list[tuple[int, TensorType]]:
        found = {}
        for c, reads in zip(self.plan.commands, self.reads, strict=True):
            if c.op is Op.OUTPUT:
                found[c.index] = (reads[0], self.resident.plan.slot_type(c.slot))
        return [found[i] for i in range(len(found))]

    def _read_before_written(self) -> list[int]:
        """The ALLOC bindings some command reads before any command of the call writes them."""
        written: set[int] = set()
        first_read: list[int] = []
        for c, reads, write in zip(self.plan.commands, self.reads, self.writes, strict=True):
            destination = reads[-1] if c.op is Op.DISPATCH else None
            for b in reads:
                if b not in written and b != destination and self.bindings[b].constant is None:
                    first_read.append(b)
                    written.add(b)
            if destination is not None:
                written.add(destination)
            if write is not None and c.op is not Op.ALLOC:
                written.add(write)
        return sorted(set(first_read))

    def _reshapes_as_views(self) -> tuple[dict[int, int], set[int]]:
        """A reshape kernel copies its input's bytes unchanged (row-major order is kept), so
        its destination can be its input's buffer instead, and the kernel need not run: when
        both are on one device, and neither is written again (no later kernel writes the
        input, none but the reshape writes the destination, nothing reads it first).
        Returns destination binding -> the binding it shares, and the commands skipped."""
        written_at: dict[int, list[int]] = {}
        for i, (c, reads) in enumerate(zip(self.plan.commands, self.reads, strict=True)):
            if c.op is Op.DISPATCH:
                written_at.setdefault(reads[-1], []).append(i)
        alias: dict[int, int] = {}
        views: set[int] = set()
        for i, (c, reads) in enumerate(zip(self.plan.commands, self.reads, strict=True)):
            if c.op is not Op.DISPATCH or \
                    self.resident.plan.module.executables[c.executable].kind is not KernelKind.RESHAPE:
                continue
            src, dst = alias.get(reads[0], reads[0]), reads[1]
            if (self.bindings[src].device is not self.bindings[dst].device
                    or written_at[dst] != [i] or dst in self.rezero
                    or any(j > i for j in written_at.get(src, []))
                    or self.bindings[dst].constant is not None):
                continue
            alias[dst] = src
            views.add(i)
        return alias, views

    # ---- arenas ------------------------------------------------------------------------------

    def _take(self) -> _Arena:
        with self._lock:
            if self._free:
                return self._free.pop()
        buffers: list[hal.Buffer] = []
        arenas: dict[Device, hal.Buffer] = {}
        try:
            for device, size in self.plan.arenas.items():  # the memory plan: one per device
                arenas[device] = self.resident.devices[device].allocate(size)
            for i, b in enumerate(self.bindings):
                if i in self.alias:  # a reshape's destination: its input's buffer
                    buffers.append(buffers[self.alias[i]])
                elif b.offset is not None:
                    buffers.append(self.resident.devices[b.device].view(
                        arenas[b.device], b.offset, b.nbytes))
                else:
                    buffers.append(b.constant if b.constant is not None else
                                   self.resident.devices[b.device].allocate(b.nbytes))
        except DeviceError as e:
            self._release(buffers)
            for arena_buffer in arenas.values():
                arena_buffer.device.release(arena_buffer)
            total = sum(b.nbytes for b in self.bindings if b.constant is None)
            raise ExecutionError(f"{self.plan.name}: allocating a call's buffers ({total} "
                                 f"bytes): {e}") from None
        arena = _Arena(buffers, list(arenas.values()))
        steps = ((i, self._bind(i, arena)) for i in range(len(self.plan.commands)))
        arena.steps = [(i, step) for i, step in steps if step is not None]
        with self._lock:
            self._arenas.append(arena)
        return arena

    def _give(self, arena: _Arena) -> None:
        with self._lock:
            self._free.append(arena)

    def _release(self, buffers: list[hal.Buffer]) -> None:
        for i, (buffer, binding) in enumerate(zip(buffers, self.bindings, strict=False)):
            if binding.constant is None and i not in self.alias:
                buffer.device.release(buffer)

    def close(self) -> None:
        for arena in self._arenas:
            self._release(arena.buffers)
            for planned in arena.planned:
                planned.device.release(planned)
            # the steps hold views of the buffers (and of the mapping) and the arena itself:
            # drop them now, so that closing the module can unmap the file at once
            arena.steps.clear()
            arena.buffers.clear()
            arena.call = None
        self._arenas.clear()
        self._free.clear()

    def _bind(self, i: int, arena: _Arena) -> Callable[[], None] | None:
        """Command `i` bound to an arena: what a call runs for it, with no arguments (a cpu
        kernel's is the foreign call itself); None for nothing to run (ALLOC and CONST bind a
        buffer the arena holds, OUTPUT is read at the end)."""
        c, reads, write, buffers = self.plan.commands[i], self.reads[i], self.writes[i], \
            arena.buffers
        if i in self.views:
            return None  # a reshape whose destination is its input's buffer
        if c.op is Op.DISPATCH:
            kind = self.resident.plan.module.executables[c.executable].device
            launch = self.resident.devices[kind].bind(self.resident.executables[c.executable],
                                                      [buffers[b] for b in reads])
            if kind is Device.CPU:  # synchronous: nothing to wait for later
                return launch

            def dispatch() -> None:
                launch()
                arena.call.pending.add(kind)
            return dispatch
        if c.op is Op.INPUT:
            target, index = buffers[write], c.index
            return lambda: target.device.write(
                target, arena.call.inputs[index].reshape(-1).view(np.uint8))
        if c.op is Op.COPY:
            dst, src = buffers[write], buffers[reads[0]]
            return lambda: _copy(arena.call, dst, src)
        if c.op is Op.PRINT:
            t = self.resident.plan.slot_type(c.slot)
            flat = TensorType(t.dtype if t is not None else DType.F64, (c.rows * c.cols,))
            return functools.partial(_print, arena, buffers[reads[0]], flat, (c.rows, c.cols))
        if c.op is Op.ALLOC and write in self.rezero:
            # read before any kernel writes it: zeroed where it is bound, since under a
            # memory plan its bytes may have held another buffer earlier in the call
            target = buffers[write]
            zeros = bytes(target.size)
            return lambda: target.device.write(target, zeros)
        return None

    # ---- a call ------------------------------------------------------------------------------

    def run(self, inputs: Sequence[np.ndarray], on_print: Printer | None,
            out: Sequence[np.ndarray] | None = None) -> Execution:
        if self._serial is None:
            return self._run(inputs, on_print, out)
        with self._serial:
            return self._run(inputs, on_print, out)

    def _run(self, inputs: Sequence[np.ndarray], on_print: Printer | None,
             out: Sequence[np.ndarray] | None) -> Execution:
        arena = self._take()
        call = arena.call = _Call(inputs, on_print)
        try:
            for i, step in arena.steps:
                try:
                    step()
                except DeviceError as e:
                    raise ExecutionError(f"{self.plan.name}: command {i} "
                                         f"({self.plan.commands[i].op}): {e}") from None
            try:
                for kind in sorted(call.pending) if call.pending else ():
                    self.resident.devices[kind].wait()
                if out is None:
                    outputs = tuple(_tensor(arena.buffers[b], t) for b, t in self.outputs)
                else:
                    for (b, t), target in zip(self.outputs, out, strict=True):
                        buffer = arena.buffers[b]
                        buffer.device.read(buffer, t.nbytes, out=target.reshape(-1).view(np.uint8))
                    outputs = tuple(out)
            except DeviceError as e:
                raise ExecutionError(f"{self.plan.name}: command {len(self.plan.commands)} "
                                     f"(end): {e}") from None
            return Execution(outputs, call.printed, self.plan.signature.output_names)
        finally:
            self._give(arena)


@dataclass
class _Arena:
    """One call's buffers (constants included), the commands bound to them, and the call
    running in it now."""

    buffers: list[hal.Buffer]
    planned: list[hal.Buffer] = field(default_factory=list)  # the memory plan's arenas
    steps: list[tuple[int, Callable[[], None]]] = field(default_factory=list)  # (command, run)
    call: _Call | None = None


def _print(arena: _Arena, buffer: hal.Buffer, flat: TensorType, shape: tuple[int, int]) -> None:
    call = arena.call
    _wait(call, buffer.device)
    array = _tensor(buffer, flat).reshape(shape)
    call.printed.append(array)
    if call.on_print is not None:
        call.on_print(array)


def _read_slots(c: Command) -> tuple[int, ...]:
    """The slots a command reads (DISPATCH: its inputs, then its destination)."""
    if c.op is Op.DISPATCH:
        return c.slots
    if c.op in (Op.PRINT, Op.OUTPUT):
        return (c.slot,)
    if c.op is Op.COPY:
        return (c.src,)
    return ()


def _written_slot(c: Command) -> int | None:
    """The slot a command binds to a new buffer, if any."""
    if c.op in (Op.ALLOC, Op.CONST, Op.INPUT):
        return c.slot
    return c.dst if c.op is Op.COPY else None


def _wait(call: _Call, device: hal.Device) -> None:
    if device.kind in call.pending:
        call.pending.discard(device.kind)
        device.wait()


def _tensor(buffer: hal.Buffer, t: TensorType) -> np.ndarray:
    """A host copy of the first `t.nbytes` bytes of `buffer`, as a `t`."""
    raw = buffer.device.read(buffer, t.nbytes)
    return raw.view(t.dtype.numpy).reshape(t.shape)


def _copy(call: _Call, dst: hal.Buffer, src: hal.Buffer) -> None:
    dst_device, src_device = dst.device, src.device
    if dst_device is src_device:
        dst_device.copy(dst, src)
        return
    host = src_device.host_pointer(src)
    if host is not None:  # host-addressable source: one host-to-device write
        dst_device.write(dst, host[:src.size])
        return
    _wait(call, src_device)
    target = dst_device.host_pointer(dst)
    if target is not None:  # device to host, straight into the destination
        src_device.read(src, out=target[:src.size])
    else:
        dst_device.write(dst, src_device.read(src))
