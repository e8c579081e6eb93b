"""The hardware abstraction layer: one small interface that every backend implements.

The interpreter talks only to `Device` and `Buffer`, so the host program is replayed the same
way whether a buffer lives in host memory (cpu) or device memory (cuda). The base class does
the argument checking and bookkeeping; a backend fills in the `_`-prefixed hooks
(the template-method pattern) and `bind`, a launch made once. Backends are found by name
through a lazy registry, so a cpu-only process never imports the CUDA bindings.
"""

from __future__ import annotations

import ctypes
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from hexir_format import Device as DeviceKind
from hexir_format import Executable, TensorType
from hexir_runtime.errors import DeviceError


class MemoryKind(IntEnum):
    """Where a buffer lives, which decides how the host reaches it."""

    HOST_LOCAL = 0  # host RAM
    DEVICE_LOCAL = 1  # device memory: only write/read reach it (explicit transfers)
    HOST_VISIBLE = 2  # device-accessible memory the host can address directly

    def __str__(self) -> str:
        return self.name


@dataclass(eq=False)
class Buffer:
    """A device allocation. `handle` is the backend's: a numpy array (cpu) or an address (cuda)."""

    device: Device
    size: int
    memory: MemoryKind
    handle: Any
    read_only: bool = False
    address: int = 0  # cpu: the host address a compiled kernel is handed (set once)
    released: bool = field(default=False, repr=False)
    parent: Buffer | None = field(default=None, repr=False)  # a view's: the buffer it is in
    owned: bool = field(default=True, repr=False)  # False: a caller's memory, never freed here

    def __repr__(self) -> str:
        ro = ", read-only" if self.read_only else ""
        return f"<Buffer {self.size} bytes {self.memory} on {self.device.name}{ro}>"


class Device(ABC):
    """A device of one backend: allocate, write, read, load executables, launch, wait."""

    kind: DeviceKind
    name: str
    graphs: bool = False  # whether `capture` can record launches for replay (cuda graphs)
    ordinal: int = 0  # its index among the devices of its kind
    stream: Any = None  # the queue its work is enqueued on (cuda: a CUstream); None: none

    def __repr__(self) -> str:
        return f"<hexir_runtime.hal.Device {self.name!r} kind={self.kind}>"

    # ---- buffers ---------------------------------------------------------------------------

    def allocate(self, size: int, memory: MemoryKind = MemoryKind.DEVICE_LOCAL, *,
                 zeroed: bool = True) -> Buffer:
        """A fresh buffer of `size` bytes, zeroed unless the caller is about to overwrite it."""
        if size < 0:
            raise DeviceError(f"{self.name}: cannot allocate {size} bytes")
        return self._allocate(size, MemoryKind(memory), zeroed)

    def view(self, parent: Buffer, offset: int, size: int) -> Buffer:
        """`size` bytes of `parent` from `offset`, as a buffer of their own (a memory plan's
        place in an arena); releasing a view frees nothing, releasing its parent frees both."""
        self._check(parent, offset, size, "view")
        if parent.parent is not None:  # a view of a view: made in (and checked against) its root
            self._check(parent.parent, 0, 0, "view")
        return self._view(parent, offset, size)

    def constant(self, data: bytes | memoryview) -> Buffer:
        """A read-only buffer holding `data`. Backends that can address host memory bind it
        in place; the others upload it (the caller keeps the buffer for the whole load)."""
        buffer = self.allocate(len(data), zeroed=False)
        self.write(buffer, data)
        buffer.read_only = True
        return buffer

    def write(self, buffer: Buffer, data: Any, offset: int = 0) -> None:
        """Copy host bytes into the buffer (host to device on a device-local buffer)."""
        view = memoryview(data).cast("B")
        self._check(buffer, offset, len(view), "write")
        self._write(buffer, view, offset)

    def read(self, buffer: Buffer, size: int | None = None,
             out: np.ndarray | None = None) -> np.ndarray:
        """The first `size` bytes of the buffer (device to host on a device-local buffer),
        into `out` (a contiguous uint8 host array) or a fresh array."""
        size = (buffer.size if out is None else len(out)) if size is None else size
        self._check(buffer, 0, size, "read")
        if out is None:
            out = np.empty(size, dtype=np.uint8)
        elif out.dtype != np.uint8 or out.ndim != 1 or len(out) < size \
                or not out.flags.c_contiguous or not out.flags.writeable:
            raise DeviceError(f"{self.name}: read needs a writable contiguous uint8 array of "
                              f"at least {size} bytes")
        self._read(buffer, out[:size])
        return out[:size]

    def copy(self, dst: Buffer, src: Buffer) -> None:
        """Copy `src` into `dst`, both on this device and of the same size."""
        self._check(src, 0, src.size, "copy from")
        self._check(dst, 0, src.size, "copy to")
        self._copy(dst, src)

    def host_pointer(self, buffer: Buffer) -> np.ndarray | None:
        """The buffer's bytes as a host array, or None when only write/read reach it."""
        self._check(buffer, 0, 0, "map")
        return self._host_pointer(buffer)

    def mapped(self, buffer: Buffer) -> np.ndarray:
        """`host_pointer` of a buffer the host reaches by construction (a cpu buffer, a
        pinned one): a DeviceError where it does not."""
        host = self.host_pointer(buffer)
        if host is None:
            raise DeviceError(f"{self.name}: a {buffer.memory} buffer has no host mapping")
        return host

    def release(self, buffer: Buffer) -> None:
        if buffer.released:
            return
        if buffer.device is not self:
            raise DeviceError(f"{self.name}: cannot release a buffer of {buffer.device.name}")
        buffer.released = True
        if buffer.parent is None and buffer.owned:
            self._release(buffer)

    def zero(self, buffer: Buffer) -> None:
        """Fill the buffer with zeros, in order with the work launched before."""
        self._check(buffer, 0, buffer.size, "write")
        self._zero(buffer)

    def _check(self, buffer: Buffer, offset: int, size: int, what: str) -> None:
        if buffer.device is not self:
            raise DeviceError(f"{self.name}: cannot {what} a buffer of {buffer.device.name}")
        if buffer.released:
            raise DeviceError(f"{self.name}: cannot {what} a released buffer")
        if buffer.read_only and what in ("write", "copy to"):
            raise DeviceError(f"{self.name}: cannot {what} a read-only buffer")
        if offset < 0 or size < 0 or size > buffer.size - offset:
            raise DeviceError(f"{self.name}: {what} of {size} bytes at offset {offset} does not "
                              f"fit a {buffer.size}-byte buffer")

    # ---- executables -----------------------------------------------------------------------

    def load_executable(self, exe: Executable) -> Any:
        """Prepare a kernel for launching; the caller loads each executable once per device."""
        if exe.device is not self.kind:
            raise DeviceError(f"kernel '{exe.name}' is placed on {exe.device} but was loaded "
                              f"on {self.name}")
        return self._load_executable(exe)

    def launch(self, loaded: Any, buffers: list[Buffer]) -> None:
        """Run a loaded kernel on the buffers (inputs, then the destination). Asynchronous:
        results are guaranteed only after `wait()`."""
        self.bind(loaded, buffers)()

    @abstractmethod
    def bind(self, loaded: Any, buffers: list[Buffer], sized: Executable | None = None,
             scalars: Sequence[int] = ()) -> Callable[[], None]:
        """`launch(loaded, buffers)` made once, to be called per run: the arguments checked
        and packed now, the launch each time it is called. For a dynamic module's kernel,
        `sized` is the executable with one call's sizes (its types and launch geometry
        evaluated, `sizes.Sizes`) and `scalars` the values of its operands, passed as int64s
        after the buffers."""

    @abstractmethod
    def wait(self) -> None:
        """Block until all launched work has finished; device faults surface here."""

    def make_current(self) -> None:  # noqa: B027 -- optional: nothing to do by default
        """Make the device usable from the calling thread (a cuda context is current on one
        thread at a time); a no-op where nothing is per thread."""

    def capture(self, steps: list[Callable[[], None]]) -> Any:
        """The steps, each of which only enqueues work on this device, recorded once as one
        graph (run by `replay`, freed by `release_graph`); only where `graphs` is true."""
        raise DeviceError(f"{self.name}: cannot capture a graph")

    def replay(self, graph: Any) -> None:
        """Enqueue a captured graph: its recorded work, with the buffers it was captured on."""
        raise DeviceError(f"{self.name}: cannot replay a graph")

    def release_graph(self, graph: Any) -> None:
        raise DeviceError(f"{self.name}: cannot release a graph")

    # ---- memory shared with other libraries (device arrays) ----------------------------------
    # Only a device with memory of its own that callers address (cuda) shares it; the others
    # refuse, so the runtime's device-array paths type-check against any device.

    def follow(self, stream: Any) -> None:
        """Order this device's work after the work enqueued so far on `stream`."""
        raise DeviceError(f"{self.name}: cannot order its work after another stream")

    def signal(self, stream: Any) -> None:
        """Order `stream` after the work enqueued so far on this device."""
        raise DeviceError(f"{self.name}: cannot order another stream after its work")

    def export(self, size: int) -> Buffer:
        """A buffer that outlives the load's arenas, released with `release_export`."""
        raise DeviceError(f"{self.name}: cannot export device memory")

    def release_export(self, buffer: Buffer) -> None:
        raise DeviceError(f"{self.name}: cannot release exported device memory")

    def borrow(self, address: int, size: int) -> Buffer:
        """A caller's device memory as a buffer this device reads but never frees."""
        raise DeviceError(f"{self.name}: cannot borrow a caller's device memory")

    def address_range(self, address: int) -> tuple[int, int]:
        """The allocation that holds `address`: (base, size)."""
        raise DeviceError(f"{self.name}: has no device memory that callers address")

    def close(self) -> None:  # noqa: B027 -- optional: nothing to do by default
        """Give back everything the device holds (contexts, loaded images)."""

    # ---- backend hooks ---------------------------------------------------------------------

    @abstractmethod
    def _allocate(self, size: int, memory: MemoryKind, zeroed: bool) -> Buffer: ...

    @abstractmethod
    def _write(self, buffer: Buffer, data: memoryview, offset: int) -> None: ...

    @abstractmethod
    def _read(self, buffer: Buffer, out: np.ndarray) -> None: ...

    @abstractmethod
    def _copy(self, dst: Buffer, src: Buffer) -> None: ...

    @abstractmethod
    def _host_pointer(self, buffer: Buffer) -> np.ndarray | None: ...

    @abstractmethod
    def _release(self, buffer: Buffer) -> None: ...

    def _zero(self, buffer: Buffer) -> None:
        self._write(buffer, memoryview(bytes(buffer.size)), 0)

    @abstractmethod
    def _view(self, parent: Buffer, offset: int, size: int) -> Buffer:
        """A view of `parent` (itself a view, or a root), whose `parent` is the root."""

    @abstractmethod
    def _load_executable(self, exe: Executable) -> Any: ...


def typed_view(host: np.ndarray, t: TensorType) -> np.ndarray:
    """The first `t.nbytes` bytes of a host byte array, seen as a tensor of type `t`."""
    return host[:t.static_nbytes].view(t.dtype.storage).reshape(t.static_shape)


class _ArrayInterface(ctypes.Structure):
    """numpy's array interface in its C form (`__array_struct__`'s PyArrayInterface)."""
    _fields_ = [("two", ctypes.c_int), ("nd", ctypes.c_int), ("typekind", ctypes.c_char),
                ("itemsize", ctypes.c_int), ("flags", ctypes.c_int),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("data", ctypes.c_void_p), ("descr", ctypes.c_void_p)]


_ALIGNED = 0x100  # NPY_ARRAY_ALIGNED, in the interface's flags
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.argtypes, _capsule_pointer.restype = (ctypes.py_object, ctypes.c_char_p), \
    ctypes.c_void_p


def aligned_address(x: np.ndarray) -> int | None:
    """The address of `x`'s data, None where it is not aligned to its element: read from
    the array interface's C struct, both in one step, for a call's hot path (numpy's
    `x.ctypes.data` builds a Python object per read: 35-40 us with the cache cold)."""
    capsule = x.__array_struct__  # held while its struct is read: it frees the struct
    interface = _ArrayInterface.from_address(_capsule_pointer(capsule, None))
    return interface.data if interface.flags & _ALIGNED else None


# name -> module that defines `create(**options) -> Device`; imported on first use only.
_BACKENDS = {"cpu": "hexir_runtime.hal.cpu", "cuda": "hexir_runtime.hal.cuda"}
DEVICE_NAMES = tuple(_BACKENDS)


def create_device(name: str, **options: Any) -> Device:
    """Create a device by backend name (`cpu`, `cuda`; `gpu` is an alias of `cuda`)."""
    key = {"gpu": "cuda"}.get(name, name)
    if key not in _BACKENDS:
        raise DeviceError(f"unknown device '{name}'; expected {' or '.join(DEVICE_NAMES)}")
    backend = importlib.import_module(_BACKENDS[key])
    return backend.create(**options)


__all__ = ["DEVICE_NAMES", "Buffer", "Device", "MemoryKind", "aligned_address", "create_device",
           "typed_view"]
