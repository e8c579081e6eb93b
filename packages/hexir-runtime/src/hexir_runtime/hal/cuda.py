"""The cuda backend: device memory and kernel launches through the CUDA driver API.

The driver comes from cuda-python (`from cuda.bindings import driver`), imported only when a
cuda device is created, so `import hexir_runtime` never touches it; without the `cuda`
extra, or on a machine without libcuda, creating the device fails with one line that says
which. Every driver call returns `(CUresult, value...)` and goes through `_check`, which
raises `DeviceError` carrying the error's name. Tests inject a fake driver object with the
same function names.

Buffers are DEVICE_LOCAL: `host_pointer` is None and write/read are the host-to-device and
device-to-host copies. Images are loaded once per device (`load_executable`, cached by the
caller) and functions looked up once; launches are asynchronous on the default stream and
`wait` (cuCtxSynchronize) is called only where a result is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hexir_format import Device as DeviceKind
from hexir_format import Executable

from hexir_runtime.errors import DeviceError
from hexir_runtime.hal import Buffer, Device, MemoryKind

EXTRA_HINT = "pip install 'hexir-runtime[cuda]'"


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def error_name(err: Any) -> str:
    """`CUDA_ERROR_OUT_OF_MEMORY` for a CUresult; needs no driver (the enum has the names)."""
    return getattr(err, "name", None) or f"CUresult {int(err)}"


def _check(result: Any, what: str) -> Any:
    """Unpack a driver call's `(CUresult, value...)`, raising DeviceError on failure."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise DeviceError(f"{what} failed: {error_name(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def load_driver() -> Any:
    """The cuda-python driver module, or a one-line DeviceError naming the extra to install."""
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise DeviceError(f"the cuda device needs the CUDA Python bindings, which are not "
                          f"installed ({_one_line(e)}); install them with: {EXTRA_HINT}") from None
    return driver


@dataclass
class CudaKernel:
    """A loaded cuda executable: its module (kept for unloading) and its function handle."""

    exe: Executable
    module: Any
    function: Any


class CudaDevice(Device):
    kind = DeviceKind.CUDA

    def __init__(self, driver: Any, ordinal: int = 0):
        self._cu = driver
        try:
            init = driver.cuInit(0)
        except Exception as e:
            raise DeviceError(f"cannot use cuda: the NVIDIA driver library (libcuda) could not "
                              f"be loaded: {_one_line(e)}") from None
        _check(init, "cuInit")
        self._device = _check(driver.cuDeviceGet(ordinal), f"cuDeviceGet({ordinal})")
        raw = _check(driver.cuDeviceGetName(128, self._device), "cuDeviceGetName")
        label = bytes(raw).split(b"\0", 1)[0].decode(errors="replace").strip()
        self.name = f"cuda ({label})" if label else "cuda"
        self._context = _check(driver.cuDevicePrimaryCtxRetain(self._device),
                               "cuDevicePrimaryCtxRetain")
        _check(driver.cuCtxSetCurrent(self._context), "cuCtxSetCurrent")
        self._kernels: list[CudaKernel] = []
        self._closed = False

    def wait(self) -> None:
        _check(self._cu.cuCtxSynchronize(), "device synchronize (cuCtxSynchronize)")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for k in self._kernels:
            _check(self._cu.cuModuleUnload(k.module), f"cuModuleUnload ('{k.exe.name}')")
        self._kernels.clear()
        _check(self._cu.cuDevicePrimaryCtxRelease(self._device), "cuDevicePrimaryCtxRelease")

    def _allocate(self, size: int, memory: MemoryKind, zeroed: bool) -> Buffer:
        if memory is not MemoryKind.DEVICE_LOCAL:
            raise DeviceError(f"{self.name}: only DEVICE_LOCAL buffers are supported, not "
                              f"{memory}")
        if size == 0:
            return Buffer(self, 0, memory, 0)
        address = int(_check(self._cu.cuMemAlloc(size), f"cuMemAlloc({size})"))
        buffer = Buffer(self, size, memory, address)
        if not zeroed:
            return buffer
        try:
            _check(self._cu.cuMemsetD8(address, 0, size), f"cuMemsetD8({size})")
        except DeviceError:
            self.release(buffer)
            raise
        return buffer

    def _write(self, buffer: Buffer, data: memoryview, offset: int) -> None:
        if not len(data):
            return
        host = np.frombuffer(data, dtype=np.uint8)
        _check(self._cu.cuMemcpyHtoD(buffer.handle + offset, host.ctypes.data, len(host)),
               f"host to device copy of {len(host)} bytes (cuMemcpyHtoD)")

    def _read(self, buffer: Buffer, out: np.ndarray) -> None:
        if not len(out):
            return
        _check(self._cu.cuMemcpyDtoH(out.ctypes.data, buffer.handle, len(out)),
               f"device to host copy of {len(out)} bytes (cuMemcpyDtoH)")

    def _copy(self, dst: Buffer, src: Buffer) -> None:
        if src.size:
            _check(self._cu.cuMemcpyDtoD(dst.handle, src.handle, src.size),
                   f"device to device copy of {src.size} bytes (cuMemcpyDtoD)")

    def _host_pointer(self, buffer: Buffer) -> None:
        return None

    def _release(self, buffer: Buffer) -> None:
        if buffer.handle:
            _check(self._cu.cuMemFree(buffer.handle), "cuMemFree")
        buffer.handle = 0

    def _view(self, parent: Buffer, offset: int, size: int) -> Buffer:
        return Buffer(self, size, parent.memory, parent.handle + offset, parent=parent)

    def _offset_in_parent(self, view: Buffer) -> int:
        return view.handle - view.parent.handle

    def _load_executable(self, exe: Executable) -> CudaKernel:
        if exe.image is None:
            raise DeviceError(f"kernel '{exe.name}' is placed on cuda, but the module carries a "
                              "kernel descriptor rather than device code, and there is nothing "
                              "to launch")
        # PTX is read up to a NUL, which a slice of the mapping need not have: add one.
        image = bytes(exe.image) + b"\0"
        module = _check(self._cu.cuModuleLoadData(image),
                        f"loading the device image of '{exe.name}' (cuModuleLoadData)")
        try:
            function = _check(self._cu.cuModuleGetFunction(module, exe.name.encode()),
                              f"looking up kernel '{exe.name}' in its device image "
                              "(cuModuleGetFunction)")
        except DeviceError:
            self._cu.cuModuleUnload(module)
            raise
        kernel = CudaKernel(exe, module, function)
        self._kernels.append(kernel)
        return kernel

    def _launch(self, loaded: CudaKernel, buffers: list[Buffer]) -> None:
        exe = loaded.exe
        # Bare-pointer convention: one device address per argument; kernelParams is an
        # array of pointers to those addresses.
        values = np.array([b.handle for b in buffers], dtype=np.uint64)
        params = values.ctypes.data + 8 * np.arange(len(values), dtype=np.uint64)
        _check(self._cu.cuLaunchKernel(loaded.function, *exe.grid, *exe.block, 0, 0,
                                       params.ctypes.data, 0),
               f"launch of '{exe.name}' (cuLaunchKernel)")


def create(driver: Any = None, ordinal: int = 0) -> CudaDevice:
    """A cuda device on GPU `ordinal`, using `driver` (cuda-python's by default)."""
    return CudaDevice(driver if driver is not None else load_driver(), ordinal)
