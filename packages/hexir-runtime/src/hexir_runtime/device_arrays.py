"""Arrays that live on the GPU: what a caller hands in (another library's tensor) and what a
call hands back when its results stay on the device.

In: any object with `__cuda_array_interface__` (versions 2 and 3: PyTorch, CuPy, Numba) or
a DLPack tensor on a CUDA device (`__dlpack__`, `__dlpack_device__`: JAX, PyTorch, CuPy) is
read as a `DevicePointer`: its address, dtype, shape, whether it is C-contiguous and
read-only, and the stream its producer wrote it on. This module only reads the protocols;
the entry's signature is checked by `api`, the pointer against the device by `transfers`.

Out: a `DeviceArray` owns a device allocation of its own (not the arena's, which the next
call reuses), exposes `__cuda_array_interface__` v3 with the stream its data is written on (a
consumer waits for that stream, as the protocol asks), and copies to the host on
`np.asarray(a)` or `a.numpy()`. It frees its memory when it is dropped or `release`d; it
keeps its device's context alive past the module's close, and the call's device inputs alive
until it is freed (freeing waits for the device, so their copies have run by then). It is
also a DLPack tensor (`__dlpack__`, `__dlpack_device__`), handed over in place, never copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hexir_runtime import dlpack, hal
from hexir_runtime.errors import DeviceError, InputError

LEGACY_STREAM = 1  # CU_STREAM_LEGACY: what a DLPack producer orders against when given None


@dataclass(frozen=True)
class DevicePointer:
    """A caller's device array, as its `__cuda_array_interface__` describes it."""

    address: int
    dtype: np.dtype
    shape: tuple[int, ...]
    contiguous: bool
    read_only: bool
    stream: int | None  # the stream to wait for (the producer's); None: the data is ready
    owner: Any  # the caller's object, kept alive while the call uses its memory

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def is_device_array(x: Any, where: str = "an array") -> bool:
    """Whether `x` offers `__cuda_array_interface__` (asked of the object, not its type: a
    PyTorch cpu tensor's class has the property, which raises for it), or is a DLPack tensor
    on a CUDA device. A protocol of `x`'s own that raises is a one-line InputError naming
    `where` (the caller's object failed, not the call)."""
    protocol = "__cuda_array_interface__"
    try:
        if hasattr(x, protocol):
            return True
        protocol = "__dlpack_device__"
        device = getattr(x, protocol, None)
        try:
            return device is not None and hasattr(x, "__dlpack__") and \
                int(device()[0]) == dlpack.KDL_CUDA
        except (TypeError, ValueError, IndexError, BufferError):
            return False
    except Exception as e:  # noqa: BLE001 (whatever the caller's own code raises)
        raise InputError(f"{where}: its {protocol} raised {type(e).__name__}: {e}") from None


def pointer(where: str, x: Any) -> DevicePointer:
    """`x.__cuda_array_interface__` (or its DLPack capsule) read, or a one-line InputError
    where it is malformed."""
    if not hasattr(x, "__cuda_array_interface__"):
        return _from_dlpack(where, x)
    try:
        cai = x.__cuda_array_interface__
        shape = tuple(int(d) for d in cai["shape"])
        dtype = np.dtype(cai["typestr"])
        address, read_only = cai["data"]
        strides = cai.get("strides")
        # no "stream" at all (version 2, as PyTorch writes it): the data may still be in
        # flight on the legacy default stream, which the module's stream does not wait for
        # by itself; an explicit None says it is ready
        stream = cai.get("stream", LEGACY_STREAM)
    except Exception as e:  # noqa: BLE001 (malformed, or the caller's own code raised)
        raise InputError(f"{where}: its __cuda_array_interface__ cannot be read "
                          f"({type(e).__name__}: {e})") from None
    if cai.get("mask") is not None:
        raise InputError(f"{where}: a masked cuda array is not supported; its mask would be "
                         "ignored")
    if stream == 0:
        raise InputError(f"{where}: its __cuda_array_interface__ names stream 0, which the "
                         "protocol forbids (ambiguous between the legacy and per-thread "
                         "default streams)")
    return DevicePointer(int(address or 0), dtype, shape, _c_contiguous(shape, strides, dtype),
                         bool(read_only), None if stream is None else int(stream), x)


def _from_dlpack(where: str, x: Any) -> DevicePointer:
    """A DLPack tensor, asked for with stream None: its producer orders it against the
    legacy default stream, which the module's stream then follows."""
    try:
        capsule = x.__dlpack__(stream=None)
        kind, address, dtype, shape, strides = dlpack.read(capsule)
    except Exception as e:  # noqa: BLE001 (malformed, or the caller's own code raised)
        raise InputError(f"{where}: its DLPack tensor cannot be read "
                         f"({type(e).__name__}: {e})") from None
    if kind != dlpack.KDL_CUDA:
        raise InputError(f"{where}: its DLPack tensor is on device type {kind}, not cuda "
                         f"({dlpack.KDL_CUDA})")
    return DevicePointer(address, dtype, shape, _c_contiguous(shape, strides, dtype), False,
                         LEGACY_STREAM, (x, capsule))


def _c_contiguous(shape: tuple[int, ...], strides: Any, dtype: np.dtype) -> bool:
    """Row-major with no gaps; a dimension of extent 1 may have any stride."""
    if strides is None:
        return True
    expected = dtype.itemsize
    for extent, stride in reversed(list(zip(shape, strides, strict=True))):
        if extent != 1 and int(stride) != expected:
            return False
        expected *= extent
    return True


class DeviceArray:
    """A result in device memory of its own; `np.asarray(a)` copies it to the host."""

    def __init__(self, device: hal.Device, buffer: hal.Buffer, dtype: np.dtype,
                 shape: tuple[int, ...], holds: tuple[Any, ...] = ()):
        self.device, self._buffer, self._holds = device, buffer, holds
        self.dtype, self.shape = np.dtype(dtype), tuple(shape)

    @property
    def nbytes(self) -> int:
        return self._buffer.size

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        self._live()
        return {"shape": self.shape, "typestr": self.dtype.str,
                "data": (self._buffer.handle, False), "strides": None, "version": 3,
                "stream": int(self.device.stream)}

    def numpy(self) -> np.ndarray:
        """A host copy (waits for the call that wrote it)."""
        self._live()
        out = np.empty(self.shape, self.dtype)
        self.device.make_current()
        self.device.read(self._buffer, out=out.reshape(-1).view(np.uint8))
        return out

    def __dlpack_device__(self) -> tuple[int, int]:
        return dlpack.KDL_CUDA, self.device.ordinal

    def __dlpack__(self, *, stream: int | None = None, max_version: Any = None,
                   dl_device: Any = None, copy: bool | None = None) -> Any:
        """A "dltensor" capsule of this array's memory (never a copy); the consumer's
        `stream` (None: the legacy default stream; -1: none) is ordered after the call."""
        self._live()
        if copy:
            raise BufferError("a DeviceArray is handed over in place, never copied")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"a DeviceArray is on {self.__dlpack_device__()}, not {dl_device}")
        if stream != -1:
            self.device.make_current()
            self.device.signal(LEGACY_STREAM if stream is None else stream)
        return dlpack.capsule(self, self._buffer.handle, self.dtype, self.shape,
                              self.device.ordinal)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        host = self.numpy()
        return host if dtype is None else host.astype(dtype, copy=False)

    def release(self) -> None:
        """Free the device memory now (later uses raise DeviceError)."""
        if not self._buffer.released:
            self.device.release_export(self._buffer)
            self._holds = ()

    def __del__(self) -> None:
        try:
            self.release()
        except (DeviceError, AttributeError, TypeError):
            # nothing to report to at collection (and at interpreter exit the modules this
            # needs may be gone); the context ends with the process
            pass

    def _live(self) -> None:
        if self._buffer.released:
            raise DeviceError(f"{self.device.name}: this device array was released")

    def __repr__(self) -> str:
        dims = "x".join(map(str, self.shape)) or "scalar"
        state = ", released" if self._buffer.released else ""
        return f"<hexir_runtime.DeviceArray {dims} {self.dtype} on {self.device.name}{state}>"
