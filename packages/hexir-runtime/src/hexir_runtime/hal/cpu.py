"""The cpu backend: buffers are numpy byte arrays; kernels are compiled x86-64 code.

Every buffer is host memory, so it is reported HOST_VISIBLE whatever was asked for, and
`host_pointer` is the array itself. A constant is bound in place: the buffer is a read-only
view of the module's mapping, so weights are never copied.

A cpu executable of a version-5 module carries a host image (an ELF relocatable object):
`hostcode` loads it once per load, and a launch calls it with one bare pointer per buffer,
its cpu grid split across the shared thread pool (ctypes releases the GIL for the call).
Versions 3 and 4 describe cpu kernels instead of carrying code; of those, the runtime still
runs the three kinds version 3 has (matmul, add, relu, in numpy: `kernels`), so the seed's
modules keep running. Validation refuses any other descriptor before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hexir_format import Device as DeviceKind
from hexir_format import Executable, TensorType

from hexir_runtime import kernels
from hexir_runtime.errors import DeviceError
from hexir_runtime.hal import Buffer, Device, MemoryKind, hostcode


def typed_view(host: np.ndarray, t: TensorType) -> np.ndarray:
    """The first `t.nbytes` bytes of a host byte array, seen as a tensor of type `t`."""
    return host[:t.nbytes].view(t.dtype.numpy).reshape(t.shape)


@dataclass(frozen=True)
class CpuKernel:
    """A loaded cpu executable: its compiled code, or (v3/v4) the descriptor `kernels` runs."""

    exe: Executable
    code: hostcode.HostKernel | None = None


class CpuDevice(Device):
    kind = DeviceKind.CPU
    name = "cpu"

    def __init__(self) -> None:
        self._loaded: list[hostcode.HostKernel] = []

    def constant(self, data: memoryview) -> Buffer:
        host = np.frombuffer(data, dtype=np.uint8)
        if host.flags.writeable:  # a caller's bytearray: never let a kernel write rodata
            host = host.view()
            host.flags.writeable = False
        return Buffer(self, len(host), MemoryKind.HOST_VISIBLE, host, read_only=True)

    def wait(self) -> None:
        """Kernels run synchronously on the calling thread: nothing to wait for."""

    def _allocate(self, size: int, memory: MemoryKind, zeroed: bool) -> Buffer:
        try:
            host = (np.zeros if zeroed else np.empty)(size, dtype=np.uint8)
        except MemoryError:
            raise DeviceError(f"cpu: out of memory allocating {size} bytes") from None
        return Buffer(self, size, MemoryKind.HOST_VISIBLE, host)

    def _write(self, buffer: Buffer, data: memoryview, offset: int) -> None:
        buffer.handle[offset:offset + len(data)] = np.frombuffer(data, dtype=np.uint8)

    def _read(self, buffer: Buffer, out: np.ndarray) -> None:
        out[:] = buffer.handle[:len(out)]

    def _copy(self, dst: Buffer, src: Buffer) -> None:
        dst.handle[:src.size] = src.handle

    def _host_pointer(self, buffer: Buffer) -> np.ndarray:
        return buffer.handle

    def _release(self, buffer: Buffer) -> None:
        buffer.handle = None

    def _load_executable(self, exe: Executable) -> CpuKernel:
        if exe.image is None:
            return CpuKernel(exe)
        code = hostcode.load(exe.image, exe.name, len(exe.args),
                             what=f"host image of kernel '{exe.name}'")
        self._loaded.append(code)
        return CpuKernel(exe, code)

    def _launch(self, loaded: CpuKernel, buffers: list[Buffer]) -> None:
        exe = loaded.exe
        if loaded.code is not None:
            loaded.code.run([b.handle.ctypes.data for b in buffers], exe.grid[0],
                            hostcode.cpu_pool())
            return
        views = [typed_view(b.handle, t) for b, t in zip(buffers, exe.args, strict=True)]
        *inputs, out = views
        kernels.run(exe.kind, inputs, out)

    def close(self) -> None:
        for code in self._loaded:
            code.close()
        self._loaded.clear()


def create() -> CpuDevice:
    return CpuDevice()
