"""Replay an entry point's commands on HAL devices.

The interpreter is the same for every backend: slots resolve to `hal.Buffer`s on the device
the slot lives on, DISPATCH launches on the kernel's device, COPY moves bytes between devices.
It runs only plans that `validate` produced, so it never range-checks a command itself.

What outlives one run lives in `Resident` (one per load): the devices, each executable loaded
once per device, and each constant bound (cpu) or uploaded (cuda) once. Launches are
asynchronous; a device is waited for only where its results are read (PRINT, a COPY off it,
the end of the run).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hexir_format import Command, Device, DType, TensorType

from hexir_runtime import hal
from hexir_runtime.errors import DeviceError, ExecutionError
from hexir_runtime.validate import EntryPlan, ModulePlan, check_placement


@dataclass
class Resident:
    """Everything a load keeps between runs."""

    plan: ModulePlan
    devices: dict[Device, hal.Device]
    executables: dict[int, Any] = field(default_factory=dict)
    constants: dict[tuple[Device, int, int], hal.Buffer] = field(default_factory=dict)

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

    def close(self) -> None:
        for buffer in self.constants.values():
            buffer.device.release(buffer)
        self.constants.clear()
        self.executables.clear()
        for device in self.devices.values():
            device.close()


@dataclass
class Execution:
    """What one run produced: the entry's results and what its PRINTs printed."""

    outputs: tuple[np.ndarray, ...]
    printed: list[np.ndarray]


Printer = Callable[[np.ndarray], None]


def prepare(resident: Resident, plan: EntryPlan) -> None:
    """Refuse a plan this load cannot place, and load its executables (once per load)."""
    check_placement(plan, set(resident.devices))
    for index in plan.executables:
        try:
            resident.executable(index)
        except DeviceError as e:
            raise ExecutionError(f"{plan.name}: {e}") from None


def execute(resident: Resident, plan: EntryPlan, inputs: Sequence[np.ndarray],
            on_print: Printer | None = None) -> Execution:
    """Run `plan` with `inputs` (already checked against its signature)."""
    prepare(resident, plan)  # before the first command runs
    return _Run(resident, plan, on_print).go(inputs)


@dataclass
class _Run:
    resident: Resident
    plan: EntryPlan
    on_print: Printer | None
    buffers: dict[int, hal.Buffer] = field(default_factory=dict)
    owned: list[hal.Buffer] = field(default_factory=list)
    pending: set[Device] = field(default_factory=set)
    outputs: dict[int, tuple[hal.Buffer, TensorType]] = field(default_factory=dict)
    printed: list[np.ndarray] = field(default_factory=list)
    results: tuple[np.ndarray, ...] = ()
    inputs: Sequence[np.ndarray] = ()

    def go(self, inputs: Sequence[np.ndarray]) -> Execution:
        self.inputs = inputs
        try:
            for i, command in enumerate(self.plan.commands):
                self._step(i, command)
            self._step(len(self.plan.commands), Command.end())
            return Execution(self.results, self.printed)
        finally:
            self._release()

    def _step(self, i: int, command: Command) -> None:
        """Run one command through its handler, named after the op (`_alloc`, `_copy`, ...)."""
        try:
            getattr(self, f"_{command.op}")(command)
        except DeviceError as e:
            raise ExecutionError(f"{self.plan.name}: command {i} ({command.op}): {e}") from None

    def _device(self, slot: int) -> hal.Device:
        return self.resident.devices[self.resident.plan.slot_device(slot)]

    def _own(self, slot: int, buffer: hal.Buffer) -> None:
        self.owned.append(buffer)
        self.buffers[slot] = buffer

    def _wait(self, device: hal.Device) -> None:
        if device.kind in self.pending:
            self.pending.discard(device.kind)
            device.wait()

    def _tensor(self, buffer: hal.Buffer, t: TensorType) -> np.ndarray:
        """A host copy of the first `t.nbytes` bytes of `buffer`, as a `t`."""
        self._wait(buffer.device)
        raw = buffer.device.read(buffer, t.nbytes)
        return raw.view(t.dtype.numpy).reshape(t.shape)

    def _release(self) -> None:
        for buffer in self.owned:
            try:
                buffer.device.release(buffer)
            except DeviceError:
                pass  # the run already failed or finished; freeing is best effort after a fault
        self.owned.clear()

    # ---- commands --------------------------------------------------------------------------

    def _end(self, c: Command) -> None:
        """Wait for every device still working, then read the results back to the host."""
        for kind in sorted(self.pending):
            self._wait(self.resident.devices[kind])
        self.results = tuple(self._tensor(*self.outputs[i]) for i in range(len(self.outputs)))

    def _alloc(self, c: Command) -> None:
        self._own(c.slot, self._device(c.slot).allocate(c.bytes))

    def _const(self, c: Command) -> None:
        device = self.resident.plan.slot_device(c.slot)
        self.buffers[c.slot] = self.resident.constant(device, c.rodata_offset, c.bytes)

    def _dispatch(self, c: Command) -> None:
        exe = self.resident.plan.module.executables[c.executable]
        device = self.resident.devices[exe.device]
        device.launch(self.resident.executable(c.executable), [self.buffers[s] for s in c.slots])
        self.pending.add(exe.device)

    def _print(self, c: Command) -> None:
        t = self.resident.plan.slot_type(c.slot)
        dtype = t.dtype if t is not None else DType.F64
        values = self._tensor(self.buffers[c.slot], TensorType(dtype, (c.rows * c.cols,)))
        array = values.reshape(c.rows, c.cols)
        self.printed.append(array)
        if self.on_print is not None:
            self.on_print(array)

    def _input(self, c: Command) -> None:
        array = self.inputs[c.index]
        device = self._device(c.slot)
        buffer = device.allocate(array.nbytes, zeroed=False)
        self._own(c.slot, buffer)
        device.write(buffer, array.reshape(-1).view(np.uint8))

    def _output(self, c: Command) -> None:
        self.outputs[c.index] = (self.buffers[c.slot], self.resident.plan.slot_type(c.slot))

    def _copy(self, c: Command) -> None:
        src = self.buffers[c.src]
        dst_device, src_device = self._device(c.dst), src.device
        dst = dst_device.allocate(src.size, zeroed=False)
        self._own(c.dst, dst)
        if dst_device is src_device:
            dst_device.copy(dst, src)
            return
        host = src_device.host_pointer(src)
        if host is not None:  # host-addressable source: one host-to-device write
            dst_device.write(dst, host[:src.size])
            return
        self._wait(src_device)
        target = dst_device.host_pointer(dst)
        if target is not None:  # device to host, straight into the destination
            src_device.read(src, out=target[:src.size])
        else:
            dst_device.write(dst, src_device.read(src))
