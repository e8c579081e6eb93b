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
from hexir_runtime.device_arrays import DeviceArray, DevicePointer
from hexir_runtime.errors import DeviceError, ExecutionError, InputError
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


def execute(resident: Resident, plan: EntryPlan, inputs: Sequence[Any],
            on_print: Printer | None = None, out: Sequence[Any] | None = None,
            on_device: bool = False) -> Execution:
    """Run `plan` with `inputs` (already checked against its signature: host arrays, or
    `DevicePointer`s); the results go into `out` (checked arrays or device pointers, one per
    output) when given, else into fresh arrays, or `DeviceArray`s for results a device
    holds when `on_device`."""
    return resident.program(plan).run(inputs, on_print, out, on_device)


@dataclass
class _Call:
    """What one call brings and gathers: its inputs (host arrays, or `DevicePointer`s), its
    printer, the devices with work not yet waited for, what it printed, and the copies off a
    device it leaves out (results that go to device memory, not through the host)."""

    inputs: Sequence[Any]
    on_print: Printer | None
    pending: set[Device] = field(default_factory=set)
    printed: list[np.ndarray] = field(default_factory=list)
    kept_on_device: frozenset[int] = frozenset()  # COPY destinations not to bring to the host


@dataclass
class _Binding:
    """A buffer a command binds: on `device`, `nbytes` long; `constant` when it is rodata;
    `offset` its place in the device's arena when the module plans its memory."""

    device: Device
    nbytes: int
    constant: hal.Buffer | None = None
    offset: int | None = None


@dataclass
class _Step:
    """A command bound to an arena: `run` does it; `device` is the device it leaves work
    queued on (None: done when `run` returns); `capturable` when it does nothing but queue
    work there, so a run of such steps can be one graph."""

    label: str  # `command 3 (dispatch)`, as errors name it
    run: Callable[[], None]
    device: Device | None = None
    capturable: bool = False


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
        self.forwarded, self.deferred = self._crossings()
        self._free: list[_Arena] = []
        self._arenas: list[_Arena] = []
        self._lock = threading.Lock()
        used = {b.device for b in self.bindings} | {
            resident.plan.module.executables[i].device for i in plan.executables}
        self.devices = [resident.devices[d] for d in sorted(used) if d in resident.devices]
        # A cuda context is current on one thread at a time: calls that touch cuda take turns.
        self._serial = threading.Lock() if Device.CUDA in used else None

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

    def _crossings(self) -> tuple[dict[int, int], dict[int, int]]:
        """The copies between the host and a device that can skip a host buffer: an input
        on the cpu read only by COPYs to a device goes from the caller's array (or device
        array) straight to the device (input binding -> input index); a COPY to the cpu
        whose destination only OUTPUT reads is left queued until the results are read, and
        a result kept on the device is taken from its source (destination -> source)."""
        readers: dict[int, list[tuple[Op, int | None]]] = {}
        for c, reads, write in zip(self.plan.commands, self.reads, self.writes, strict=True):
            for b in reads:
                readers.setdefault(b, []).append((c.op, write))
        def on_cpu(b: int) -> bool:
            return self.bindings[b].device is Device.CPU

        forwarded, deferred = {}, {}
        for c, reads, write in zip(self.plan.commands, self.reads, self.writes, strict=True):
            uses = readers.get(write, [])
            if c.op is Op.INPUT and on_cpu(write) and uses and all(
                    op is Op.COPY and not on_cpu(dst) for op, dst in uses):
                forwarded[write] = c.index
            if c.op is Op.COPY and on_cpu(write) and not on_cpu(reads[0]) and uses and all(
                    op is Op.OUTPUT for op, _ in uses):
                deferred[write] = reads[0]
        return forwarded, deferred

    # ---- arenas ------------------------------------------------------------------------------

    def _take(self) -> _Arena:
        with self._lock:
            if self._free:
                return self._free.pop()
        buffers: list[hal.Buffer] = []
        arenas: dict[Device, hal.Buffer] = {}
        arena = _Arena(buffers)
        try:
            for device, size in self.plan.arenas.items():  # the memory plan: one per device
                arenas[device] = self.resident.devices[device].allocate(size)
                arena.planned.append(arenas[device])
            for i, b in enumerate(self.bindings):
                if i in self.alias:  # a reshape's destination: its input's buffer
                    buffers.append(buffers[self.alias[i]])
                elif b.offset is not None:
                    buffers.append(self.resident.devices[b.device].view(
                        arenas[b.device], b.offset, b.nbytes))
                else:
                    buffers.append(b.constant if b.constant is not None else
                                   self.resident.devices[b.device].allocate(b.nbytes))
            steps = [self._bind(i, arena) for i in range(len(self.plan.commands))]
            self._read_back(arena)
        except DeviceError as e:
            self._release(arena)
            total = sum(b.nbytes for b in self.bindings if b.constant is None)
            raise ExecutionError(f"{self.plan.name}: allocating a call's buffers ({total} "
                                 f"bytes): {e}") from None
        arena.steps = self._graphs(arena, [s for s in steps if s is not None])
        with self._lock:
            self._arenas.append(arena)
        return arena

    def _give(self, arena: _Arena) -> None:
        with self._lock:
            self._free.append(arena)

    def _release(self, arena: _Arena) -> None:
        for device, graph in arena.graphs:
            device.release_graph(graph)
        for i, (buffer, binding) in enumerate(zip(arena.buffers, self.bindings, strict=False)):
            if binding.constant is None and i not in self.alias:
                buffer.device.release(buffer)
        for buffer in (*arena.planned, *arena.staging.values()):
            buffer.device.release(buffer)

    def close(self) -> None:
        for arena in self._arenas:
            self._release(arena)
            # the steps hold views of the buffers (and of the mapping) and the arena itself:
            # drop them now, so that closing the module can unmap the file at once
            arena.steps.clear()
            arena.buffers.clear()
            arena.call = None
        self._arenas.clear()
        self._free.clear()

    def _staging(self, arena: _Arena, binding: int) -> np.ndarray:
        """The host bytes of binding's pinned staging buffer in this arena (made once), on
        the binding's device (or, for a cpu binding, the device it is copied to or from)."""
        buffer = arena.staging.get(binding)
        if buffer is None:
            device = self.resident.devices.get(Device.CUDA)
            buffer = arena.staging[binding] = device.allocate(
                self.bindings[binding].nbytes, hal.MemoryKind.HOST_VISIBLE, zeroed=False)
        return buffer

    def _graphs(self, arena: _Arena, steps: list[_Step]) -> list[_Step]:
        """Each maximal run of capturable steps on a device that records graphs, made one
        step that captures the run on its first call and replays it after."""
        def graphable(step: _Step) -> bool:
            return step.capturable and self.resident.devices[step.device].graphs

        made: list[_Step] = []
        run: list[_Step] = []
        for step in steps:
            if run and not (graphable(step) and step.device is run[0].device):
                made.append(_graph_step(arena, self.resident.devices[run[0].device], run,
                                        self._failed))
                run = []
            (run if graphable(step) else made).append(step)
        if run:
            made.append(_graph_step(arena, self.resident.devices[run[0].device], run,
                                    self._failed))
        return made

    def _failed(self, label: str, e: DeviceError) -> ExecutionError:
        return ExecutionError(f"{self.plan.name}: {label}: {e}")

    def _bind(self, i: int, arena: _Arena) -> _Step | None:
        """Command `i` bound to an arena: what a call runs for it (a cpu kernel's is the
        foreign call itself); None for nothing to run (ALLOC and CONST bind a buffer the
        arena holds, OUTPUT is read at the end, a reshape may be a view)."""
        c, reads, write, buffers = self.plan.commands[i], self.reads[i], self.writes[i], \
            arena.buffers
        label = f"command {i} ({c.op})"
        if i in self.views:
            return None  # a reshape whose destination is its input's buffer
        if c.op is Op.DISPATCH:
            kind = self.resident.plan.module.executables[c.executable].device
            launch = self.resident.devices[kind].bind(self.resident.executables[c.executable],
                                                      [buffers[b] for b in reads])
            if kind is Device.CPU:  # synchronous: nothing to wait for later
                return _Step(label, launch)
            return _Step(label, launch, kind, capturable=True)
        if c.op is Op.INPUT:
            return self._bind_input(label, arena, c.index, write)
        if c.op is Op.COPY:
            return self._bind_copy(label, arena, write, reads[0])
        if c.op is Op.PRINT:
            t = self.resident.plan.slot_type(c.slot)
            flat = TensorType(t.dtype if t is not None else DType.F64, (c.rows * c.cols,))
            source = buffers[reads[0]]
            staged = None if source.device.host_pointer(source) is not None else \
                self._staging(arena, reads[0])
            return _Step(label, functools.partial(_print, arena, source, staged, flat,
                                                  (c.rows, c.cols)))
        if c.op is Op.ALLOC and write in self.rezero:
            # read before any kernel writes it: zeroed where it is bound, since under a
            # memory plan its bytes may have held another buffer earlier in the call
            target = buffers[write]
            zero = functools.partial(target.device.zero, target)
            return _Step(label, zero, target.device.kind,
                         capturable=target.device.kind is not Device.CPU)
        return None

    def _bind_input(self, label: str, arena: _Arena, index: int, write: int) -> _Step | None:
        """An input into its buffer: on the cpu, written there (a device array read back
        through pinned memory); on a device, staged through pinned memory (a device array
        copied device to device). An input only copied to a device is left to the COPY."""
        if write in self.forwarded:
            return None
        target, call = arena.buffers[write], lambda: arena.call
        host = target.device.host_pointer(target)
        if host is not None:
            def to_host() -> None:
                x = call().inputs[index]
                if isinstance(x, np.ndarray):
                    host[:target.size] = x.reshape(-1).view(np.uint8)
                else:
                    self._device_to_host(arena, write, x, host)
            return _Step(label, to_host)
        staged = self._staging(arena, write)
        pinned = staged.device.host_pointer(staged)

        def to_device() -> None:
            self._upload(arena, target, call().inputs[index], staged, pinned)
        return _Step(label, to_device, target.device.kind)

    def _device_to_host(self, arena: _Arena, binding: int, x: DevicePointer,
                        host: np.ndarray) -> None:
        """A caller's device array into a cpu buffer: the host waits for it here."""
        staged = self._staging(arena, binding)
        device = staged.device
        if x.stream is not None:
            device.follow(x.stream)
        device.copy(staged, device.borrow(x.address, x.nbytes))
        device.wait()
        arena.call.pending.discard(device.kind)
        host[:x.nbytes] = device.host_pointer(staged)

    def _bind_copy(self, label: str, arena: _Arena, write: int, read: int) -> _Step:
        dst, src = arena.buffers[write], arena.buffers[read]
        if dst.device is src.device:
            copy = functools.partial(dst.device.copy, dst, src)
            return _Step(label, copy, dst.device.kind,
                         capturable=dst.device.kind is not Device.CPU)
        host = src.device.host_pointer(src)
        if host is not None:  # host to device, through pinned memory
            staged = self._staging(arena, write)
            pinned, index = staged.device.host_pointer(staged), self.forwarded.get(read)
            if index is None:
                def up() -> None:
                    self._settle(arena)
                    pinned[:] = host[:src.size]
                    dst.device.copy(dst, staged)
            else:  # the caller's input itself, never written to the cpu buffer
                def up() -> None:
                    self._upload(arena, dst, arena.call.inputs[index], staged, pinned)
            return _Step(label, up, dst.device.kind)
        staged = self._staging(arena, write)
        if write in self.deferred:  # left queued: the host reads it with the results
            def down_later() -> None:
                if write not in arena.call.kept_on_device:
                    src.device.copy(staged, src)
            return _Step(label, down_later, src.device.kind)
        target, pinned = dst.device.host_pointer(dst), staged.device.host_pointer(staged)

        def down() -> None:  # device to host, for a cpu kernel: the host waits here
            src.device.copy(staged, src)
            src.device.wait()
            arena.call.pending.discard(src.device.kind)
            target[:src.size] = pinned
        return _Step(label, down)

    def _upload(self, arena: _Arena, target: hal.Buffer, x: Any, staged: hal.Buffer,
                pinned: np.ndarray) -> None:
        """An input onto its device: a host array through the pinned buffer, a device array
        device to device (after its producer's stream)."""
        device = target.device
        if isinstance(x, np.ndarray):
            self._settle(arena)
            pinned[:] = x.reshape(-1).view(np.uint8)
            device.copy(target, staged)
            return
        if x.stream is not None:
            device.follow(x.stream)
        device.copy(target, device.borrow(x.address, x.nbytes))

    def _settle(self, arena: _Arena) -> None:
        """Before the host rewrites a pinned buffer of this arena: wait for the copies the
        last call here left queued (it kept its results on the device and did not wait)."""
        for kind in arena.unwaited:
            self.resident.devices[kind].wait()
        arena.unwaited.clear()

    def _read_back(self, arena: _Arena) -> None:
        """Pinned buffers for the results a device holds at the end of a call."""
        for b, _ in self.outputs:
            buffer = arena.buffers[b]
            if buffer.device.host_pointer(buffer) is None:
                self._staging(arena, b)

    # ---- a call ------------------------------------------------------------------------------

    def run(self, inputs: Sequence[Any], on_print: Printer | None,
            out: Sequence[Any] | None = None, on_device: bool = False) -> Execution:
        if self._serial is None:
            return self._run(inputs, on_print, out, on_device)
        with self._serial:
            for device in self.devices:
                device.make_current()
            self._check_device_arrays(inputs, out)
            return self._run(inputs, on_print, out, on_device)

    def _check_device_arrays(self, inputs: Sequence[Any], out: Sequence[Any] | None) -> None:
        """Device arrays given for inputs and `out=`: device memory of this module's device
        that holds them whole, for an input or result that crosses a device (a one-line
        InputError otherwise)."""
        where = [(f"input {i}", x) for i, x in enumerate(inputs)] + \
            [(f"out[{i}]", y) for i, y in enumerate(out or ())]
        for label, x in where:
            if not isinstance(x, DevicePointer) or not x.nbytes:
                continue
            device = self.resident.devices[Device.CUDA]
            try:
                base, size = device.address_range(x.address)
            except DeviceError as e:
                raise InputError(f"{label} of {self.plan.name}: its pointer {x.address:#x} is "
                                 f"not device memory of {device.name} ({e})") from None
            if x.address + x.nbytes > base + size:
                raise InputError(f"{label} of {self.plan.name}: its {x.nbytes} bytes at "
                                 f"{x.address:#x} run past the end of their allocation "
                                 f"({size} bytes at {base:#x})")
        for i, y in enumerate(out or ()):
            b = self.outputs[i][0]
            if isinstance(y, DevicePointer) and self.bindings[b].device is Device.CPU and \
                    b not in self.deferred:
                raise InputError(f"out[{i}] of {self.plan.name}: this result is computed on "
                                 "the cpu; pass a numpy array for it")

    def _run(self, inputs: Sequence[Any], on_print: Printer | None,
             out: Sequence[Any] | None, on_device: bool) -> Execution:
        arena = self._take()
        targets = out if out is not None else [None] * len(self.outputs)
        kept = {b for (b, _), y in zip(self.outputs, targets, strict=True)
                if on_device or isinstance(y, DevicePointer)}
        kept -= {b for (b, _), y in zip(self.outputs, targets, strict=True)
                 if not (on_device or isinstance(y, DevicePointer))}
        call = arena.call = _Call(inputs, on_print, kept_on_device=frozenset(kept))
        try:
            for step in arena.steps:
                try:
                    step.run()
                except DeviceError as e:
                    raise self._failed(step.label, e) from None
                if step.device is not None:
                    call.pending.add(step.device)
            try:
                outputs = self._results(arena, out, on_device)
            except DeviceError as e:
                raise ExecutionError(f"{self.plan.name}: command {len(self.plan.commands)} "
                                     f"(end): {e}") from None
            return Execution(outputs, call.printed, self.plan.signature.output_names)
        finally:
            self._give(arena)

    def _results(self, arena: _Arena, out: Sequence[Any] | None,
                 on_device: bool) -> tuple[Any, ...]:
        """The outputs: results a device holds are queued into pinned memory (or, kept on
        the device, into device memory of their own or the caller's); the host waits once
        per device where it reads one, or where a caller's device array must be complete
        when the call returns, then copies the results out of pinned memory."""
        call, buffers = arena.call, arena.buffers
        reads: list[Callable[[], Any]] = []
        wait = not self.outputs  # a call without results ends when its work has
        for i, (b, t) in enumerate(self.outputs):
            target = out[i] if out is not None else None
            source = buffers[self.deferred.get(b, b)]
            if isinstance(target, DevicePointer) or (on_device and source.device.kind
                                                     is not Device.CPU):
                reads.append(_keep(source, target, t))
                call.pending.add(source.device.kind)
                wait = wait or target is not None
                continue
            host = source.device.host_pointer(source)
            if host is None:
                if b not in self.deferred:
                    source.device.copy(arena.staging[b], source)
                    call.pending.add(source.device.kind)
                host = arena.staging[b].device.host_pointer(arena.staging[b])
                wait = True
            reads.append(functools.partial(_host_result, host, t, target))
        if wait:
            for kind in sorted(call.pending):
                self.resident.devices[kind].wait()
        else:  # results kept on the device: nothing for the host to wait for now
            arena.unwaited = set(call.pending)
        return tuple(read() for read in reads)


@dataclass
class _Arena:
    """One call's buffers (constants included), the commands bound to them, and the call
    running in it now."""

    buffers: list[hal.Buffer]
    planned: list[hal.Buffer] = field(default_factory=list)  # the memory plan's arenas
    staging: dict[int, hal.Buffer] = field(default_factory=dict)  # binding -> pinned buffer
    steps: list[_Step] = field(default_factory=list)
    graphs: list[tuple[hal.Device, Any]] = field(default_factory=list)  # captured here
    unwaited: set[Device] = field(default_factory=set)  # left running by the last call
    call: _Call | None = None


def _graph_step(arena: _Arena, device: hal.Device, run: list[_Step],
                failed: Callable[[str, DeviceError], ExecutionError]) -> _Step:
    """The run as one step: captured on its first call in this arena (the arena's buffer
    addresses are in the graph), one graph launch on every call."""
    graph = None

    def labeled(step: _Step) -> Callable[[], None]:
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
    return _Step(f"{span} ({device.kind} graph)", replay, device.kind)


def _keep(source: hal.Buffer, target: DevicePointer | None, t: TensorType
          ) -> Callable[[], Any]:
    """A result kept on the device: queued device to device into the caller's array, or
    into a `DeviceArray` of its own; returns what the call hands back for it."""
    device = source.device
    if target is not None:
        device.copy(device.borrow(target.address, t.nbytes), source)
        return lambda: target.owner
    kept = device.export(t.nbytes)
    try:
        device.copy(kept, source)
    except DeviceError:
        device.release_export(kept)
        raise
    array = DeviceArray(device, kept, np.dtype(t.dtype.numpy), t.shape)
    return lambda: array


def _host_result(host: np.ndarray, t: TensorType, target: np.ndarray | None) -> np.ndarray:
    """A result copied out of host memory (a cpu buffer or a pinned one), once the host has
    waited, into `target` or a fresh array."""
    if target is None:
        return host[:t.nbytes].view(t.dtype.numpy).reshape(t.shape).copy()
    target.reshape(-1).view(np.uint8)[:] = host[:t.nbytes]
    return target


def _print(arena: _Arena, buffer: hal.Buffer, staged: hal.Buffer | None, flat: TensorType,
           shape: tuple[int, int]) -> None:
    call = arena.call
    if staged is None:
        host = buffer.device.host_pointer(buffer)
    else:  # off a device through its pinned buffer: the host waits here
        buffer.device.copy(staged, buffer)
        buffer.device.wait()
        call.pending.discard(buffer.device.kind)
        host = staged.device.host_pointer(staged)
    array = host[:flat.nbytes].view(flat.dtype.numpy).reshape(shape).copy()
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
