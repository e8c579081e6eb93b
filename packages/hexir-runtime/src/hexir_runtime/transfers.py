"""Bytes across the host-device boundary within a call: inputs in, COPYs between the cpu and
a device, PRINTs and results out.

Each crossing goes through a pinned (HOST_VISIBLE) buffer of the arena, made once with it:
the host writes an input there and the device copies it in asynchronously; a device copies a
result there and the host reads it after one wait. The host waits only where it reads: a COPY
whose destination a cpu kernel reads, a PRINT, the results. Where a buffer on the cpu only
passes bytes along, it is skipped: an input that only COPYs read goes from the caller's array
straight into pinned memory (`forwarded`); a COPY whose destination only OUTPUT reads stays
queued until the results are read (`deferred`), and is left out when the result stays on the
device. Device arrays (`DevicePointer`) go device to device, after their producer's stream;
a result kept on the device is a `DeviceArray` with memory of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hexir_format import Command, Device, Op, TensorType
from hexir_runtime import hal
from hexir_runtime.arena import Arena, Call, Step
from hexir_runtime.device_arrays import DeviceArray, DevicePointer
from hexir_runtime.errors import DeviceError, InputError


class Transfers:
    """The crossings of one entry, resolved once: which to skip, and the steps for each."""

    def __init__(self, name: str, devices: dict[Device, hal.Device], bindings: Sequence[Any],
                 commands: Sequence[Command], reads: list[tuple[int, ...]],
                 writes: list[int | None], outputs: list[tuple[int, TensorType]]):
        self.name, self.devices, self.bindings, self.outputs = name, devices, bindings, outputs
        self.forwarded, self.deferred = self._crossings(commands, reads, writes)

    def _crossings(self, commands: Sequence[Command], reads: list[tuple[int, ...]],
                   writes: list[int | None]) -> tuple[dict[int, int], dict[int, int]]:
        """Input bindings on the cpu that only COPYs to a device read (-> input index), and
        COPY destinations on the cpu that only OUTPUT reads (-> the COPY's source)."""
        readers: dict[int, list[tuple[Op, int | None]]] = {}
        for c, read, write in zip(commands, reads, writes, strict=True):
            for b in read:
                readers.setdefault(b, []).append((c.op, write))

        def on_cpu(b: int) -> bool:
            return self.bindings[b].device is Device.CPU

        forwarded: dict[int, int] = {}
        deferred: dict[int, int] = {}
        for c, read, write in zip(commands, reads, writes, strict=True):
            if write is None:  # OUTPUT, PRINT: nothing bound here
                continue
            uses = readers.get(write, [])
            if c.op is Op.INPUT and on_cpu(write) and uses and all(
                    op is Op.COPY and dst is not None and not on_cpu(dst) for op, dst in uses):
                forwarded[write] = c.index
            if c.op is Op.COPY and on_cpu(write) and not on_cpu(read[0]) and uses and all(
                    op is Op.OUTPUT for op, _ in uses):
                deferred[write] = read[0]
        return forwarded, deferred

    def staging(self, arena: Arena, binding: int) -> hal.Buffer:
        """Binding's pinned buffer in this arena (made once), for the bytes it sends or
        receives across (pinned memory is the cuda device's, the one device a host crosses
        to here)."""
        buffer = arena.staging.get(binding)
        if buffer is None:
            buffer = arena.staging[binding] = self.devices[Device.CUDA].allocate(
                self.bindings[binding].nbytes, hal.MemoryKind.HOST_VISIBLE, zeroed=False)
        return buffer

    # ---- steps -------------------------------------------------------------------------------

    def bind_input(self, label: str, arena: Arena, index: int, write: int,
                   t: TensorType) -> Step | None:
        """An input into its buffer: on the cpu, written there (a device array read back
        through pinned memory); on a device, staged through pinned memory (a device array
        copied device to device). An input only copied to a device is left to the COPY."""
        if write in self.forwarded:
            return None
        target = arena.buffers[write]
        host = target.device.host_pointer(target)
        if host is not None:
            typed = hal.typed_view(host, t)

            def to_host() -> None:
                x = arena.call.inputs[index]
                if x.__class__ is DevicePointer:
                    self._device_to_host(arena, write, x, host)
                else:  # a checked array: this exact type, contiguous
                    typed[...] = x
            return Step(label, to_host)
        staged = self.staging(arena, write)
        pinned = staged.device.mapped(staged)

        def to_device() -> None:
            self._upload(arena, target, arena.call.inputs[index], staged, pinned)
        return Step(label, to_device, target.device.kind)

    def bind_copy(self, label: str, arena: Arena, write: int, read: int) -> Step:
        dst, src = arena.buffers[write], arena.buffers[read]
        if dst.device is src.device:
            copy = functools.partial(dst.device.copy, dst, src)
            return Step(label, copy, dst.device.kind, capturable=dst.device.kind is not Device.CPU)
        host = src.device.host_pointer(src)
        staged = self.staging(arena, write)
        pinned = staged.device.mapped(staged)
        if host is not None:  # host to device, through pinned memory
            index = self.forwarded.get(read)
            if index is None:
                def up() -> None:
                    self._settle(arena)
                    pinned[:] = host[:src.size]
                    dst.device.copy(dst, staged)
            else:  # the caller's input itself, never written to the cpu buffer
                def up() -> None:
                    self._upload(arena, dst, arena.call.inputs[index], staged, pinned)
            return Step(label, up, dst.device.kind)
        if write in self.deferred:  # left queued: the host reads it with the results
            def down_later() -> None:
                if write not in arena.call.kept_on_device:
                    src.device.copy(staged, src)
            return Step(label, down_later, src.device.kind)
        target = dst.device.mapped(dst)

        def down() -> None:  # device to host, for a cpu kernel: the host waits here
            _fetch(arena.call, staged, src)
            target[:src.size] = pinned
        return Step(label, down)

    def bind_print(self, label: str, arena: Arena, read: int, flat: TensorType,
                   shape: tuple[int, int]) -> Step:
        source = arena.buffers[read]
        staged = None if source.device.host_pointer(source) is not None else \
            self.staging(arena, read)
        return Step(label, functools.partial(_print, arena, source, staged, flat, shape))

    def read_back(self, arena: Arena) -> None:
        """How this arena's results reach the host, made once: a typed view of the host
        bytes each is copied out of (its cpu buffer, or the pinned buffer a device copies it
        into) and, for a result a device holds, that copy (a deferred COPY queues its own)."""
        for b, t in self.outputs:
            buffer, copy = arena.buffers[b], None
            host = buffer.device.host_pointer(buffer)
            if b in self.deferred or host is None:
                staged = self.staging(arena, b)
                host = staged.device.mapped(staged)
                if b not in self.deferred:
                    copy = (functools.partial(buffer.device.copy, staged, buffer),
                            buffer.device.kind)
            arena.result_views.append(hal.typed_view(host, t))
            arena.result_copies.append(copy)

    def _upload(self, arena: Arena, target: hal.Buffer, x: Any, staged: hal.Buffer,
                pinned: np.ndarray) -> None:
        """An input onto its device: a host array through the pinned buffer (`pinned`, its
        bytes), a device array device to device (after its producer's stream)."""
        device = target.device
        if isinstance(x, np.ndarray):
            self._settle(arena)
            pinned[:] = x.reshape(-1).view(np.uint8)
            device.copy(target, staged)
            return
        if x.stream is not None:
            device.follow(x.stream)
        device.copy(target, device.borrow(x.address, x.nbytes))

    def _device_to_host(self, arena: Arena, binding: int, x: DevicePointer,
                        host: np.ndarray) -> None:
        """A caller's device array into a cpu buffer: the host waits for it here."""
        staged = self.staging(arena, binding)
        device = staged.device
        if x.stream is not None:
            device.follow(x.stream)
        _fetch(arena.call, staged, device.borrow(x.address, x.nbytes))
        host[:x.nbytes] = device.mapped(staged)

    def _settle(self, arena: Arena) -> None:
        """Before the host rewrites a pinned buffer of this arena: wait for the copies the
        last call here left queued (it kept its results on the device and did not wait)."""
        for kind in arena.unwaited:
            self.devices[kind].wait()
        arena.unwaited.clear()

    # ---- a call's device arrays and results --------------------------------------------------

    def check(self, inputs: Sequence[Any], out: Sequence[Any] | None) -> None:
        """Device arrays given for inputs and `out=`: device memory of this load's device
        that holds them whole, and for `out=` a result that a device computes (a one-line
        InputError otherwise)."""
        where = [(f"input {i}", x) for i, x in enumerate(inputs)] + \
            [(f"out[{i}]", y) for i, y in enumerate(out or ())]
        for label, x in where:
            if not isinstance(x, DevicePointer) or not x.nbytes:
                continue
            device = self.devices[Device.CUDA]
            try:
                base, size = device.address_range(x.address)
            except DeviceError as e:
                raise InputError(f"{label} of {self.name}: its pointer {x.address:#x} is not "
                                 f"device memory of {device.name} ({e})") from None
            if x.address + x.nbytes > base + size:
                raise InputError(f"{label} of {self.name}: its {x.nbytes} bytes at "
                                 f"{x.address:#x} run past the end of their allocation "
                                 f"({size} bytes at {base:#x})")
        for i, y in enumerate(out or ()):
            b = self.outputs[i][0]
            if isinstance(y, DevicePointer) and self.bindings[b].device is Device.CPU and \
                    b not in self.deferred:
                raise InputError(f"out[{i}] of {self.name}: this result is computed on the "
                                 "cpu; pass a numpy array for it")

    def kept_on_device(self, out: Sequence[Any] | None, on_device: bool) -> frozenset[int]:
        """The output bindings every result of which stays in device memory this call."""
        if out is None and not on_device:
            return _NOTHING
        targets = out if out is not None else [None] * len(self.outputs)
        kept = [on_device or isinstance(y, DevicePointer) for y in targets]
        return frozenset({b for (b, _), k in zip(self.outputs, kept, strict=True) if k} -
                         {b for (b, _), k in zip(self.outputs, kept, strict=True) if not k})

    def results(self, arena: Arena, out: Sequence[Any] | None,
                on_device: bool) -> tuple[Any, ...]:
        """The outputs: results a device holds are queued into pinned memory (or, kept on
        the device, into device memory of their own or the caller's); the host waits once
        per device where it reads one, or where a caller's device array must be complete
        when the call returns, then copies the results out of pinned memory."""
        call = arena.call
        if out is None and not on_device:  # the common case: fresh host arrays
            for queued in arena.result_copies:
                if queued is not None:
                    queued[0]()
                    call.pending.add(queued[1])
            for kind in sorted(call.pending):
                self.devices[kind].wait()
            return tuple(view.copy() for view in arena.result_views)
        reads: list[Callable[[], Any]] = []
        wait = not self.outputs  # a call without results ends when its work has
        for i, (b, t) in enumerate(self.outputs):
            target = out[i] if out is not None else None
            source = arena.buffers[self.deferred.get(b, b)]
            if isinstance(target, DevicePointer) or (on_device and source.device.kind
                                                     is not Device.CPU):
                reads.append(_keep(source, target, t, call.inputs))
                call.pending.add(source.device.kind)
                wait = wait or target is not None
                continue
            queued = arena.result_copies[i]
            if queued is not None:
                copy, kind = queued
                copy()
                call.pending.add(kind)
            wait = wait or b in self.deferred or source.device.kind is not Device.CPU
            reads.append(functools.partial(_host_result, arena.result_views[i], target))
        if wait:
            for kind in sorted(call.pending):
                self.devices[kind].wait()
        else:  # results kept on the device: nothing for the host to wait for now
            arena.unwaited = set(call.pending)
        return tuple(read() for read in reads)


_NOTHING: frozenset[int] = frozenset()


def _keep(source: hal.Buffer, target: DevicePointer | None, t: TensorType,
          inputs: Sequence[Any]) -> Callable[[], Any]:
    """A result kept on the device: queued device to device into the caller's array, or
    into a `DeviceArray` of its own; returns what the call hands back for it. The host does
    not wait for such a call, so the array holds the call's device inputs: their copies may
    still be queued, and the caller's library must not reuse their memory before they run."""
    device = source.device
    if target is not None:
        device.copy(device.borrow(target.address, t.static_nbytes), source)
        return lambda: target.owner
    kept = device.export(t.static_nbytes)
    try:
        device.copy(kept, source)
    except DeviceError:
        device.release_export(kept)
        raise
    holds = tuple(x.owner for x in inputs if isinstance(x, DevicePointer))
    array = DeviceArray(device, kept, np.dtype(t.dtype.storage), t.static_shape, holds)
    return lambda: array


def _host_result(view: np.ndarray, target: np.ndarray | None) -> np.ndarray:
    """A result copied out of host memory (a cpu buffer or a pinned one), once the host has
    waited, into `target` or a fresh array."""
    if target is None:
        return view.copy()
    target[...] = view
    return target


def _fetch(call: Call, staged: hal.Buffer, source: hal.Buffer) -> None:
    """Copy `source` off its device into its pinned buffer and wait for it (the host reads
    the pinned bytes next): that device has nothing of this call's left pending."""
    device = source.device
    device.copy(staged, source)
    device.wait()
    call.pending.discard(device.kind)


def _print(arena: Arena, buffer: hal.Buffer, staged: hal.Buffer | None, flat: TensorType,
           shape: tuple[int, int]) -> None:
    call = arena.call
    if staged is None:
        host = buffer.device.mapped(buffer)
    else:  # off a device through its pinned buffer: the host waits here
        _fetch(call, staged, buffer)
        host = staged.device.mapped(staged)
    array = host[:flat.nbytes].view(flat.dtype.storage).reshape(shape).copy()
    call.printed.append(array)
    if call.on_print is not None:
        call.on_print(array)
