"""Run an entry point: its commands made, once per load, into steps bound to everything.

The interpreter is the same for every backend: slots resolve to `hal.Buffer`s on the device
the slot lives on, DISPATCH launches on the kernel's device, COPY moves bytes between devices.
It runs only plans that `validate` produced, so it never range-checks a command itself.

What outlives one call lives in `Resident` (one per load): the devices, each executable
loaded once per device, each constant bound (cpu) or uploaded (cuda) once, and each entry's
`Program`. A program resolves, when it is made, which buffer every command reads and writes
(a slot bound twice is two buffers), and binds each command to its device, its kernel and
its buffers: a call then only copies its inputs in, runs the bound steps, and reads its
outputs out. A run of compiled cpu kernels is one step of the runtime's native loop (a
SEQUENCE, `arena.sequences`): one foreign call for all of them; an input only such kernels
read is not even copied: their pointers are set to the caller's array
(`arena.direct_inputs`). The buffers a call works in are an *arena* (`arena.Arena`), made on
a call's first use and kept for the next, so a steady call allocates, zeroes and frees
nothing; calls in flight at once each take their own arena (the pool grows to the most calls
ever in flight), so a module may be called from several threads, with the same results as
one at a time (calls that touch cuda take turns: a context is current on one thread at a
time). When the module plans its memory (`hexir_format.plan`), an arena's intermediates are
views into one buffer per device, placed by the plan, instead of one buffer each. An arena
is zeroed when it is made; a buffer that a call reads before it writes it (never in a module
the compiler writes, where every buffer is a kernel's destination first; a kernel that names
its destination among its inputs reads it first too) is zeroed again where its ALLOC binds
it, so no call sees another's data, nor a buffer the bytes of one that died earlier in the
call.

Device work is asynchronous, in order on the device's stream. Each maximal run of commands
that only queue work on a device that records graphs (cuda kernels, copies and zeroing
between the uploads and the downloads) is one step: captured as a graph on the arena's first
call and replayed after (`arena.graphs`). What crosses between the host and a device goes
through the arena's pinned buffers (`transfers`), and the host waits only where it reads: a
COPY off a device that a cpu kernel reads, a PRINT, the results.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hexir_format import Command, Device, DType, Executable, KernelKind, Op, TensorType
from hexir_runtime import hal, library, sizes
from hexir_runtime.arena import IDLE, Arena, Call, Printer, Step, direct_inputs, graphs, sequences
from hexir_runtime.errors import DeviceError, ExecutionError
from hexir_runtime.hal import threads
from hexir_runtime.hal.cpu import CpuDevice
from hexir_runtime.transfers import Transfers
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
    #: A dynamic module's programs, one per (entry, binding), the most recently used last
    #: (at most `sizes.CACHED_BINDINGS` per entry), and how often a call found its binding's.
    sized_programs: OrderedDict[tuple[str, tuple[tuple[int, ...], ...]], Program] = field(
        default_factory=OrderedDict)
    retired: list[Program] = field(default_factory=list)  # dropped, maybe still running
    hits: int = 0
    misses: int = 0
    max_alloc_bytes: int | None = None
    flat: sizes.Flat | None = None  # a dynamic module's sizes in flat form, made once

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
                self._ready(plan)
                self.programs[plan.name] = Program(self, plan)
            return self.programs[plan.name]

    def ready(self, plan: EntryPlan) -> None:
        """The entry's placement checked and its kernels loaded (a dynamic module's: its
        programs are made per binding, `sized`)."""
        with self.lock:
            self._ready(plan)

    def _ready(self, plan: EntryPlan) -> None:
        check_placement(plan, set(self.devices))
        for index in plan.executables:
            try:
                self.executable(index)
            except DeviceError as e:
                raise ExecutionError(f"{plan.name}: {e}") from None

    def sized(self, plan: EntryPlan, inputs: Sequence[Any]) -> Program:
        """A dynamic module's entry made ready for the sizes of `inputs` (`sizes.bind`):
        the program of that binding, planned on its first call and kept for the next ones
        (least recently used dropped past `sizes.CACHED_BINDINGS` per entry). Refuses a
        binding, in one line, before anything is allocated.

        Programs are kept by the inputs' shapes: the binding is a function of them, and
        inputs that bind are exactly of their binding's shapes, so the two identify one
        another, and a call with the shapes of an earlier one binds nothing."""
        key = (plan.name, tuple([sizes.shape_of(x) for x in inputs]))
        with self.lock:
            program = self.sized_programs.get(key)
            if program is not None:
                self.sized_programs.move_to_end(key)
                self.hits += 1
                return program
        with self.lock:
            if self.flat is None:
                self.flat = sizes.Flat(self.plan.module)
        made = sizes.specialize(self.plan, plan, sizes.bind(self.plan.module, plan, inputs),
                                self.max_alloc_bytes, self.flat)
        with self.lock:
            if key in self.sized_programs:  # made meanwhile by a call on another thread
                self.hits += 1
                return self.sized_programs[key]
            self._ready(made.entry)
            self.misses += 1
            self.sized_programs[key] = program = Program(self, made.entry, made)
            mine = [k for k in self.sized_programs if k[0] == plan.name]
            dropped = [self.sized_programs.pop(old) for old in mine[:-sizes.CACHED_BINDINGS]]
            for old_program in (*self.retired, *dropped):
                old_program.release_idle()
            # a dropped program a call still runs in is freed when idle (a later miss) or
            # at close
            self.retired = [p for p in (*self.retired, *dropped) if p.busy]
            return program

    def close(self) -> None:
        for device in self.devices.values():
            device.make_current()  # close may come from another thread than the calls
        for program in (*self.programs.values(), *self.sized_programs.values(), *self.retired):
            program.close()
        self.programs.clear()
        self.sized_programs.clear()
        self.retired.clear()
        for buffer in self.constants.values():
            buffer.device.release(buffer)
        self.constants.clear()
        self.executables.clear()
        for device in self.devices.values():
            device.close()


@dataclass
class Execution:
    """What one call produced: the entry's results (numpy arrays; `DeviceArray`s or the
    caller's `out=` device arrays for results kept on the device) and what its PRINTs
    printed."""

    outputs: tuple[Any, ...]
    printed: list[np.ndarray]
    output_names: tuple[str, ...] = ()  # as the module names them: none, or one per output

    @property
    def results(self) -> dict[str, Any]:
        """The results by name, in output order: the module's output names, or `output_0`,
        `output_1`, ... where it names none (the names `hexir-run --output=@FILE.npz` writes
        either way, so a file and a call agree)."""
        names = self.output_names or tuple(f"output_{i}" for i in range(len(self.outputs)))
        return dict(zip(names, self.outputs, strict=True))


@dataclass
class _Binding:
    """A buffer a command binds: on `device`, `nbytes` long; `constant` when it is rodata;
    `offset` its place in the device's arena when the module plans its memory."""

    device: Device
    nbytes: int
    constant: hal.Buffer | None = None
    offset: int | None = None


class Program:
    """An entry point's commands, resolved to buffers once; runs on a pool of arenas. A
    dynamic module's is one binding's (`sized`): its types, commands and launch geometry
    evaluated for those sizes (`sizes.specialize`)."""

    def __init__(self, resident: Resident, plan: EntryPlan, sized: sizes.Sized | None = None):
        self.resident, self.plan = resident, plan
        self.module_plan = sized.module if sized is not None else resident.plan
        self.sized = sized
        self.bindings: list[_Binding] = []
        self.reads: list[tuple[int, ...]] = []  # per command: the bindings it reads, then writes
        self.writes: list[int | None] = []
        current: dict[int, int] = {}  # slot -> binding, as of the command being resolved
        outputs: dict[int, tuple[int, TensorType]] = {}  # output index -> its binding, type
        for c in plan.commands:
            reads = tuple(current[s] for s in _read_slots(c))
            written = _written_slot(c)
            if written is not None:
                current[written] = self._binding(c, written, reads)
            elif c.op is Op.OUTPUT:
                outputs[c.index] = (reads[0], self.module_plan.tensor(c.slot))
            self.reads.append(reads)
            self.writes.append(current[written] if written is not None else None)
        self.outputs = [outputs[i] for i in range(len(outputs))]
        self.rezero = self._read_before_written()
        self.alias, self.views = self._reshapes_as_views()
        self.transfers = Transfers(plan.name, resident.devices, self.bindings, plan.commands,
                                   self.reads, self.writes, self.outputs)
        self.kernel_inputs = self._read_by_cpu_kernels_only()
        self._free: list[Arena] = []
        self._arenas: list[Arena] = []
        self._lock = threading.Lock()
        # string inputs (their index), string results (their place among the outputs), and
        # whether a call needs a string table at all (library kernels read one)
        signature = plan.signature
        self.string_inputs = [i for i, t in enumerate(signature.inputs)
                              if t.dtype is DType.STRING]
        self.string_outputs = [i for i, (_, t) in enumerate(self.outputs)
                               if t.dtype is DType.STRING]
        self.strings = bool(self.string_inputs or self.string_outputs) or any(
            self.module_plan.module.executables[i].kind is KernelKind.LIBRARY
            for i in plan.executables)
        used = {b.device for b in self.bindings} | {
            self.module_plan.module.executables[i].device for i in plan.executables}
        self.devices = [resident.devices[d] for d in sorted(used) if d in resident.devices]
        # A cuda context is current on one thread at a time: calls that touch cuda take turns.
        self._serial = threading.Lock() if Device.CUDA in used else None

    def _binding(self, c: Command, slot: int, reads: tuple[int, ...]) -> int:
        device = self.module_plan.slot_device(slot)
        if c.op is Op.CONST:
            buffer = self.resident.constant(device, c.rodata_offset, c.bytes)
            self.bindings.append(_Binding(device, c.bytes, buffer))
        elif c.op is Op.COPY:
            self.bindings.append(_Binding(device, self.bindings[reads[0]].nbytes,
                                          offset=self.plan.offsets.get(slot)))
        elif c.op is Op.INPUT:
            self.bindings.append(_Binding(device, self.module_plan.tensor(slot).static_nbytes))
        else:  # ALLOC
            self.bindings.append(_Binding(device, c.bytes, offset=self.plan.offsets.get(slot)))
        return len(self.bindings) - 1

    def _read_before_written(self) -> list[int]:
        """The ALLOC bindings some command reads before any command of the call writes them
        (a kernel that names its destination among its inputs, too, reads it first)."""
        written: set[int] = set()
        first_read: list[int] = []
        for c, reads, write in zip(self.plan.commands, self.reads, self.writes, strict=True):
            destination = reads[-1] if c.op is Op.DISPATCH else None
            for b in reads[:-1] if destination is not None else reads:
                if b not in written and self.bindings[b].constant is None:
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
        executables = self.module_plan.module.executables
        for i, (c, reads) in enumerate(zip(self.plan.commands, self.reads, strict=True)):
            if c.op is not Op.DISPATCH or executables[c.executable].kind is not KernelKind.RESHAPE:
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

    def _read_by_cpu_kernels_only(self) -> dict[int, tuple[int, list[int]]]:
        """input index -> its binding and the commands that read it, for the cpu inputs that
        nothing but cpu kernels read (a reshape's view of one counts as the input):
        candidates for a call that points the kernels at the caller's array
        (`arena.direct_inputs`)."""
        executables = self.module_plan.module.executables
        forwarded = self.transfers.forwarded
        inputs = {write: c.index for c, write in zip(self.plan.commands, self.writes, strict=True)
                  if c.op is Op.INPUT and write is not None and write not in forwarded
                  and self.bindings[write].device is Device.CPU}
        readers: dict[int, list[int]] = {write: [] for write in inputs}
        for i, (c, reads) in enumerate(zip(self.plan.commands, self.reads, strict=True)):
            if i in self.views:
                continue
            kernel = c.op is Op.DISPATCH and executables[c.executable].device is Device.CPU \
                and executables[c.executable].kind is not KernelKind.LIBRARY
            for b in {self.alias.get(b, b) for b in reads} & readers.keys():
                if kernel:
                    readers[b].append(i)
                else:  # an output, a copy, a print, a kernel elsewhere: it reads the buffer
                    inputs.pop(b, None)
        return {index: (write, readers[write]) for write, index in inputs.items()}

    # ---- arenas ------------------------------------------------------------------------------

    def _take(self) -> Arena:
        try:  # list.pop and list.append are atomic: no two calls ever get one arena
            return self._free.pop()
        except IndexError:
            pass
        buffers: list[hal.Buffer] = []
        arenas: dict[Device, hal.Buffer] = {}
        arena = Arena(buffers)
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
            self.transfers.read_back(arena)
        except DeviceError as e:
            self._release(arena)
            total = sum(b.nbytes for b in self.bindings if b.constant is None)
            raise ExecutionError(f"{self.plan.name}: allocating a call's buffers ({total} "
                                 f"bytes): {e}") from None
        arena.steps = graphs(arena, self.resident.devices, [s for s in steps if s is not None],
                             self._failed)
        arena.runs = sequences(arena.steps)
        direct = {index: (buffers[b].address, buffers[b].size)
                  for index, (b, readers) in self.kernel_inputs.items()
                  if all(getattr(steps[i], "job", None) is not None for i in readers)}
        if direct:
            arena.runs = direct_inputs(arena, direct)
        with self._lock:
            self._arenas.append(arena)
        return arena

    def _release(self, arena: Arena) -> None:
        for device, graph in arena.graphs:
            device.release_graph(graph)
        for i, (buffer, binding) in enumerate(zip(arena.buffers, self.bindings, strict=False)):
            if binding.constant is None and i not in self.alias:
                buffer.device.release(buffer)
        for buffer in (*arena.planned, *arena.staging.values()):
            buffer.device.release(buffer)

    @property
    def busy(self) -> bool:
        """Whether a call is running in one of its arenas (after `release_idle`, the arenas
        left are those)."""
        return bool(self._arenas)

    def release_idle(self) -> None:
        """Free the arenas no call is running in (a program the cache drops: a call still
        in one returns it, and the module's close frees it)."""
        while True:
            try:
                arena = self._free.pop()
            except IndexError:
                return
            self._release(arena)
            with self._lock:
                self._arenas.remove(arena)
            arena.steps.clear()
            arena.runs.clear()
            arena.buffers.clear()

    def close(self) -> None:
        for arena in self._arenas:
            self._release(arena)
            # the steps hold views of the buffers (and of the mapping) and the arena itself:
            # drop them now, so that closing the module can unmap the file at once
            arena.steps.clear()
            arena.runs.clear()
            arena.buffers.clear()
            arena.call = IDLE
        self._arenas.clear()
        self._free.clear()

    def _failed(self, label: str, e: DeviceError) -> ExecutionError:
        return ExecutionError(f"{self.plan.name}: {label}: {e}")

    def _bind(self, i: int, arena: Arena) -> Step | None:
        """Command `i` bound to an arena: what a call runs for it (a cpu kernel's is the
        foreign call itself); None for nothing to run (ALLOC and CONST bind a buffer the
        arena holds, OUTPUT is read at the end, a reshape may be a view)."""
        c, reads, write, buffers = self.plan.commands[i], self.reads[i], self.writes[i], \
            arena.buffers
        label = f"command {i} ({c.op})"
        if i in self.views:
            return None  # a reshape whose destination is its input's buffer
        if c.op is Op.DISPATCH:
            exe = self.module_plan.module.executables[c.executable]
            if exe.kind is KernelKind.LIBRARY:
                return self._bind_library(i, label, arena, exe, [buffers[b] for b in reads])
            loaded, kind = self.resident.executables[c.executable], exe.device
            device, bound = self.resident.devices[kind], [buffers[b] for b in reads]
            # a dynamic module's: this binding's types and geometry, and its size operands
            sized = () if self.sized is None else (exe, self.sized.scalars[c.executable])
            launch = device.bind(loaded, bound, *sized)
            if kind is Device.CPU:  # synchronous: nothing to wait for later
                job = device.job(loaded, bound, *sized) if isinstance(device, CpuDevice) else None
                return Step(label, launch, job=job)
            return Step(label, launch, kind, capturable=True)
        if c.op is Op.INPUT:
            assert write is not None, "an INPUT binds the slot it writes"
            step = self.transfers.bind_input(label, arena, c.index, write,
                                             self.plan.signature.inputs[c.index])
            return None if step is None else dataclasses.replace(step, input=c.index)
        if c.op is Op.COPY:
            assert write is not None, "a COPY binds the slot it writes"
            return self.transfers.bind_copy(label, arena, write, reads[0])
        if c.op is Op.PRINT:
            t = self.module_plan.slot_type(c.slot)
            flat = TensorType(t.dtype if t is not None else DType.F64, (c.rows * c.cols,))
            return self.transfers.bind_print(label, arena, reads[0], flat, (c.rows, c.cols))
        if c.op is Op.ALLOC and write in self.rezero:
            # read before any kernel writes it: zeroed where it is bound, since under a
            # memory plan its bytes may have held another buffer earlier in the call
            target = buffers[write]
            zero = functools.partial(target.device.zero, target)
            return Step(label, zero, target.device.kind,
                        capturable=target.device.kind is not Device.CPU)
        return None

    def _bind_library(self, i: int, label: str, arena: Arena, exe: Executable,
                      buffers: list[hal.Buffer]) -> Step:
        """A library kernel (`library`): run on the cpu, on typed views of its buffers and
        the call's string table."""
        views = [hal.typed_view(b.device.mapped(b), t)
                 for b, t in zip(buffers, exe.args, strict=True)]
        dispatch = sum(c.op is Op.DISPATCH for c in self.plan.commands[:i])
        where = f"kernel '{exe.name}' (dispatch {dispatch} of '{self.plan.name}')"

        def run() -> None:
            strings = arena.call.strings
            assert strings is not None, "a call of an entry with library kernels has a table"
            library.run(exe.name, strings, where, exe, views)
        return Step(label, run)

    # ---- a call ------------------------------------------------------------------------------

    def call(self, inputs: Sequence[Any], on_print: Printer | None,
             kept_on_device: frozenset[int] = frozenset()) -> Call:
        """A call of this program on checked `inputs`: where the entry has strings, with a
        string table of its own (the module's strings, then the string inputs', whose
        arrays become their handles)."""
        if not self.strings:
            return Call(inputs, on_print, kept_on_device=kept_on_device)
        strings = library.Strings(self.module_plan.module.strings)
        given = list(inputs)
        for i in self.string_inputs:
            x = given[i]
            given[i] = strings.add(x.reshape(-1).tolist()).reshape(x.shape)
        return Call(given, on_print, kept_on_device=kept_on_device, strings=strings)

    def _strings_out(self, call: Call, outputs: tuple[Any, ...]) -> tuple[Any, ...]:
        """The results with each string result's handles made its strings."""
        if not self.string_outputs:
            return outputs
        assert call.strings is not None, "an entry with string results has a table"
        found = list(outputs)
        names = self.plan.signature.output_names
        for i in self.string_outputs:
            where = f"{self.plan.name}: output {i}" + (f" ('{names[i]}')" if names else "")
            found[i] = call.strings.array(found[i], self.outputs[i][1], where)
        return tuple(found)

    def run(self, inputs: Sequence[Any], on_print: Printer | None,
            out: Sequence[Any] | None = None, on_device: bool = False) -> Execution:
        """Run with `inputs` (already checked against the signature: host arrays, or
        `DevicePointer`s); the results go into `out` (checked arrays or device pointers, one
        per output) when given, else into fresh arrays, or `DeviceArray`s for results a device
        holds when `on_device`."""
        if self._serial is None:
            return self._run(inputs, on_print, out, on_device)
        with self._serial:
            for device in self.devices:
                device.make_current()
            self.transfers.check(inputs, out)
            return self._run(inputs, on_print, out, on_device)

    def run_plain(self, inputs: Sequence[np.ndarray]) -> tuple[Any, ...]:
        """The results of the common call -- host arrays of the exact input types in, fresh
        host arrays out, nothing printed to anyone -- by the same steps as `run`, without
        the bookkeeping only the other calls need (on cuda: `run` itself)."""
        if self._serial is not None or self.strings:
            return self.run(inputs, None).outputs
        arena = self._take()
        arena.call = Call(inputs, None)
        try:
            self._steps(arena)
            return tuple(map(np.ndarray.copy, arena.result_views))
        finally:
            arena.call = IDLE
            self._free.append(arena)

    def run_reading(self, inputs: Sequence[np.ndarray],
                    read: Callable[[Sequence[np.ndarray]], Any]) -> Any:
        """`run_plain`'s call, its results given to `read` as views of the arena's buffers --
        valid only inside `read` -- rather than copied out: for a caller that keeps a part
        of a big result (the decode loop keeps one position of each grown cache)."""
        if self._serial is not None or self.strings:
            return read(self.run(inputs, None).outputs)
        arena = self._take()
        arena.call = Call(inputs, None)
        try:
            self._steps(arena)
            return read(arena.result_views)
        finally:
            arena.call = IDLE
            self._free.append(arena)

    def holding(self, use: Callable[[Arena], Any]) -> Any:
        """What `use` returns, given an arena of this program held for it alone: a caller
        that drives the arena's buffers itself (the decode loop, `native_steps`)."""
        arena = self._take()
        try:
            return use(arena)
        finally:
            arena.call = IDLE
            self._free.append(arena)

    def native_steps(self, arena: Arena) -> threads.Record | None:
        """The arena's steps but its inputs' as one native sequence, for a caller that
        writes the inputs into their buffers itself (`input_view`); None when a step has no
        native form (a kernel on another device, an interpreted or library kernel, a
        zeroing)."""
        if not arena.native_made:  # on the arena's first use for it
            jobs = [step.job for step in arena.steps if step.input is None]
            kernels = [job for job in jobs if job is not None]
            arena.native = threads.sequence(kernels) if len(kernels) == len(jobs) else None
            arena.native_made = True
        return arena.native

    def input_view(self, arena: Arena, index: int) -> np.ndarray | None:
        """Input `index`'s buffer in `arena`, typed (None where it is not host memory)."""
        for c, write in zip(self.plan.commands, self.writes, strict=True):
            if c.op is Op.INPUT and c.index == index and write is not None \
                    and write not in self.transfers.forwarded:
                buffer = arena.buffers[write]
                host = buffer.device.host_pointer(buffer)
                return None if host is None else hal.typed_view(
                    host, self.plan.signature.inputs[index])
        return None

    def _steps(self, arena: Arena) -> None:
        """Run the arena's steps for its call, noting the devices each leaves work on."""
        pending = arena.call.pending
        for step in arena.runs:
            try:
                step.run()
            except DeviceError as e:
                raise self._failed(step.label, e) from None
            if step.device is not None:
                pending.add(step.device)

    def _run(self, inputs: Sequence[Any], on_print: Printer | None,
             out: Sequence[Any] | None, on_device: bool) -> Execution:
        arena = self._take()
        call = arena.call = self.call(inputs, on_print,
                                      self.transfers.kept_on_device(out, on_device))
        try:
            self._steps(arena)
            try:
                outputs = self.transfers.results(arena, out, on_device)
            except DeviceError as e:
                raise ExecutionError(f"{self.plan.name}: command {len(self.plan.commands)} "
                                     f"(end): {e}") from None
            outputs = self._strings_out(call, outputs)
            return Execution(outputs, call.printed, self.plan.signature.output_names)
        finally:
            arena.call = IDLE  # the caller's arrays are not held past the call
            self._free.append(arena)


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
