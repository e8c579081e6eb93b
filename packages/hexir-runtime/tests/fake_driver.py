"""A fake CUDA driver: cuda-python's function names, `(CUresult, value...)` returns, no GPU.

"Device memory" is a bytearray per allocation, and every access is checked against its
allocation, so a runtime bug that would read or write out of bounds on a GPU fails here as
CUDA_ERROR_ILLEGAL_ADDRESS. Launches of kernels the fake was told about are emulated with
the numpy bodies of `numpy_kernels` (the tests' oracle) on that memory, so end-to-end results
compare with the cpu backend. `calls` counts every call by name; `fail` makes the next calls
of a name fail.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from enum import IntEnum

import numpy as np
from hexir_format import Device, Executable

import numpy_kernels


class CUresult(IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_INVALID_DEVICE = 101
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_LAUNCH_FAILED = 719


OK = CUresult.CUDA_SUCCESS
BASE = 0x7F0000000000
ALIGN = 256


class FakeDriver:
    def __init__(self, executables: tuple[Executable, ...] = (), memory_limit: int = 1 << 30):
        self.calls: Counter[str] = Counter()
        self.fail: dict[str, CUresult] = {}
        self.memory: dict[int, bytearray] = {}
        self.memory_limit = memory_limit
        self.modules: dict[int, bytes] = {}
        self.functions: dict[int, str] = {}
        self.kernels = {e.name: e for e in executables if e.device is Device.CUDA}
        self.launches: list[tuple[str, tuple[int, ...], tuple[int, ...]]] = []
        self.context_refs = 0
        self.fault: CUresult | None = None  # surfaced at the next synchronize
        self._next = BASE

    def __getattribute__(self, name: str):
        attr = object.__getattribute__(self, name)
        if name.startswith("cu"):
            self.calls[name] += 1
            failure = self.fail.get(name)
            if failure is not None:
                return lambda *a, **k: (failure,)
        return attr

    # ---- context -----------------------------------------------------------------------------

    def cuInit(self, flags):
        return (OK,)

    def cuDeviceGet(self, ordinal):
        return (OK, ordinal) if ordinal == 0 else (CUresult.CUDA_ERROR_INVALID_DEVICE,)

    def cuDeviceGetName(self, length, device):
        return (OK, b"Fake GPU".ljust(length, b"\0"))

    def cuDevicePrimaryCtxRetain(self, device):
        self.context_refs += 1
        return (OK, 0xC0)

    def cuDevicePrimaryCtxRelease(self, device):
        self.context_refs -= 1
        return (OK,)

    def cuCtxSetCurrent(self, ctx):
        return (OK,)

    def cuCtxSynchronize(self):
        fault, self.fault = self.fault, None
        return (fault or OK,)

    # ---- memory ------------------------------------------------------------------------------

    def _region(self, address: int, size: int) -> tuple[bytearray, int] | None:
        for base, mem in self.memory.items():
            if base <= address < base + max(len(mem), 1):
                offset = address - base
                return (mem, offset) if size <= len(mem) - offset else None
        return None

    def cuMemAlloc(self, size):
        if size == 0:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        if sum(map(len, self.memory.values())) + size > self.memory_limit:
            return (CUresult.CUDA_ERROR_OUT_OF_MEMORY,)
        address, self._next = self._next, self._next + -(-size // ALIGN) * ALIGN
        self.memory[address] = bytearray(b"\xcd" * size)  # not zeroed, like cuMemAlloc
        return (OK, address)

    def cuMemFree(self, address):
        if self.memory.pop(int(address), None) is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        return (OK,)

    def cuMemsetD8(self, address, value, count):
        region = self._region(int(address), count)
        if region is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        mem, offset = region
        mem[offset:offset + count] = bytes([value]) * count
        return (OK,)

    def cuMemcpyHtoD(self, dst, src, count):
        region = self._region(int(dst), count)
        if region is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        mem, offset = region
        mem[offset:offset + count] = ctypes.string_at(src, count)
        return (OK,)

    def cuMemcpyDtoH(self, dst, src, count):
        region = self._region(int(src), count)
        if region is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        mem, offset = region
        ctypes.memmove(dst, bytes(mem[offset:offset + count]), count)
        return (OK,)

    def cuMemcpyDtoD(self, dst, src, count):
        a, b = self._region(int(dst), count), self._region(int(src), count)
        if a is None or b is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        a[0][a[1]:a[1] + count] = b[0][b[1]:b[1] + count]
        return (OK,)

    # ---- modules and launches ----------------------------------------------------------------

    def cuModuleLoadData(self, image):
        data = bytes(image)
        if not data.rstrip(b"\0") or data.startswith(b"BAD"):
            return (CUresult.CUDA_ERROR_INVALID_IMAGE,)
        handle = 0x1000 + len(self.modules)
        self.modules[handle] = data
        return (OK, handle)

    def cuModuleUnload(self, module):
        return (OK,) if self.modules.pop(module, None) is not None else \
            (CUresult.CUDA_ERROR_INVALID_HANDLE,)

    def cuModuleGetFunction(self, module, name):
        if module not in self.modules or name not in self.modules[module]:
            return (CUresult.CUDA_ERROR_NOT_FOUND,)
        handle = 0x2000 + len(self.functions)
        self.functions[handle] = name.decode()
        return (OK, handle)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        name = self.functions.get(function)
        if name is None:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        exe = self.kernels.get(name)
        argc = len(exe.args) if exe is not None else 0
        pointers = (ctypes.c_uint64 * argc).from_address(params) if argc else []
        addresses = tuple(ctypes.c_uint64.from_address(p).value for p in pointers)
        self.launches.append((name, (gx, gy, gz, bx, by, bz), addresses))
        if exe is not None:
            self._emulate(exe, addresses)
        return (OK,)

    def _emulate(self, exe: Executable, addresses: tuple[int, ...]) -> None:
        views = []
        for address, t in zip(addresses, exe.args, strict=True):
            region = self._region(address, t.nbytes)
            if region is None:  # the kernel would have faulted: report it at the next sync
                self.fault = CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
                return
            mem, offset = region
            raw = np.frombuffer(mem, dtype=np.uint8, count=t.nbytes, offset=offset)
            views.append(raw.view(t.dtype.numpy).reshape(t.shape))
        *inputs, out = views
        numpy_kernels.run(exe.kind, exe.params, inputs, out)

    # ---- accounting --------------------------------------------------------------------------

    @property
    def copies(self) -> dict[str, int]:
        return {k: self.calls[k] for k in ("cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyDtoD")}
