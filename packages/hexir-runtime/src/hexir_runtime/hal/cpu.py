"""The cpu backend: buffers are numpy byte arrays; kernels are compiled x86-64 code.

Every buffer is host memory, so it is reported HOST_VISIBLE whatever was asked for, and
`host_pointer` is the array itself. A constant is bound in place: the buffer is a read-only
view of the module's mapping, so weights are never copied; each of its pages is read once
when it is bound (`_map_pages`).

A version-5 cpu executable carries a host image: `hostcode` loads it once per load, and a
launch calls it with one bare pointer per buffer (then, for a dynamic module's kernel, its
size operands as int64s: on x86-64 an int64 takes a pointer's slot), its cpu grid split
across the shared thread pool when the kernel is big enough to gain (`PARALLEL_GRAIN`,
`PARALLEL_BYTES`).
Every kernel is the image's own loops: the runtime offers an image no routine of its own, so
the pool's threads are the only ones a call runs on (an image of an older compiler that
calls back for its matmul, `hexir_rt_matmul`, is refused at load, see `hostcode`). Versions
3 and 4 describe cpu kernels instead; the runtime runs the three kinds version 3 has
(`kernels`).
"""

from __future__ import annotations

import functools
import mmap
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hexir_format import CPU_LEVELS, Executable
from hexir_format import Device as DeviceKind
from hexir_format.plan import ARENA_ALIGNMENT
from hexir_runtime import kernels
from hexir_runtime.errors import DeviceError
from hexir_runtime.hal import Buffer, Device, MemoryKind, hostcode, threads, typed_view

# A kernel whose destination has fewer elements than this runs on the calling thread: below
# it, splitting gained nothing measurable (grains of 4096 and 1024 elements: bench/README.md).
PARALLEL_GRAIN = 1 << 14
#: ... unless its arguments are at least this many bytes: a kernel with a small result may
#: read much (a matrix-vector product, one row of a decoding step: 1 x 256 x 768 f32 reads
#: 768 KiB for 768 outputs).
PARALLEL_BYTES = 1 << 18


def _address(host: np.ndarray) -> int:
    return host.__array_interface__["data"][0]


def _map_pages(host: np.ndarray) -> None:
    """Read one byte of each page of `host` (a constant: a view of the mapped module), so
    every page of it is mapped before a kernel reads it. A kernel may read a constant only
    through AVX-512 masked loads -- LLVM makes one of a select between a load and another
    value, `where(isnan(x), zeros, x)` -- and a masked load from a page never read takes a
    microcode assist (the page fault it must suppress) each time, every call: MobileBERT's
    NaN guard after its softmax, 4096 masked loads of a 256 KiB constant of zeros, took
    330 us a kernel, 9 us with the pages mapped (bench/README.md). The pages read are those
    the kernels read anyway, once per load: bound at a call's first use, not at load."""
    if host.size:
        host[::mmap.PAGESIZE].max(), host[-1]  # read, and nothing kept


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
        threads.cpu_threads(), threads.spin_cycles()  # settings refused at once, not when a
        # kernel first needs the pool (which a small module never does)

    def constant(self, data: bytes | memoryview) -> Buffer:
        host = np.frombuffer(data, dtype=np.uint8)
        if host.flags.writeable:  # a caller's bytearray: never let a kernel write rodata
            host = host.view()
            host.flags.writeable = False
        _map_pages(host)
        return Buffer(self, len(host), MemoryKind.HOST_VISIBLE, host, read_only=True,
                      address=_address(host))

    def wait(self) -> None:
        """Kernels run synchronously on the calling thread: nothing to wait for."""

    def _allocate(self, size: int, memory: MemoryKind, zeroed: bool) -> Buffer:
        """Host bytes that start on an ARENA_ALIGNMENT (64-byte) boundary; numpy aligns to 16
        only. So every planned offset is a whole cache line into its arena, as the plan
        promises: a kernel's vector loads and stores do not straddle lines."""
        try:
            raw = (np.zeros if zeroed else np.empty)(size + ARENA_ALIGNMENT - 1, dtype=np.uint8)
        except MemoryError:
            raise DeviceError(f"cpu: out of memory allocating {size} bytes") from None
        skip = -_address(raw) % ARENA_ALIGNMENT
        host = raw[skip:skip + size]
        return Buffer(self, size, MemoryKind.HOST_VISIBLE, host, address=_address(host))

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

    def _view(self, parent: Buffer, offset: int, size: int) -> Buffer:
        return Buffer(self, size, parent.memory, parent.handle[offset:offset + size],
                      address=parent.address + offset, parent=parent.parent or parent)

    def _load_executable(self, exe: Executable) -> CpuKernel:
        if exe.image is None:
            return CpuKernel(exe)
        usable = hostcode.usable_level()
        if exe.cpu_level > usable:
            need, have = CPU_LEVELS[exe.cpu_level], CPU_LEVELS[usable]
            cpu = f"this CPU ({have})" if usable == hostcode.host_level() else \
                f"{hostcode.LEVEL_SETTING}={have}"
            raise DeviceError(f"host image of kernel '{exe.name}' is code for {need}, which "
                              f"{cpu} cannot run; compile with -target=cpu:{have}")
        code = hostcode.load(exe.image, exe.name, len(exe.args) + len(exe.operands),
                             what=f"host image of kernel '{exe.name}'")
        self._loaded.append(code)
        return CpuKernel(exe, code)

    def bind(self, loaded: CpuKernel, buffers: list[Buffer], sized: Executable | None = None,
             scalars: Sequence[int] = ()):
        """The launch with its pointers (or, for a descriptor, its typed views) made once;
        `sized` and `scalars` as `Device.bind` says."""
        for b in buffers:
            self._check(b, 0, 0, "pass")
        exe = sized or loaded.exe
        if loaded.code is not None:
            # to_end: compiled kernels clamp their range, so a damaged grid cannot cut it short
            return loaded.code.bind(*self._launch(exe, buffers, scalars), to_end=True)
        *inputs, out = [typed_view(b.handle, t) for b, t in zip(buffers, exe.args, strict=True)]
        return functools.partial(kernels.run, exe.kind, inputs, out)

    def job(self, loaded: CpuKernel, buffers: list[Buffer], sized: Executable | None = None,
            scalars: Sequence[int] = ()) -> hostcode.Job | None:
        """`bind`'s launch as a record for a native sequence (`threads.sequence`); None for
        a kernel without one (a descriptor, or a launch that refuses)."""
        if loaded.code is None:
            return None
        return loaded.code.job(*self._launch(sized or loaded.exe, buffers, scalars),
                               to_end=True, buffers=len(buffers))

    @staticmethod
    def _launch(exe: Executable, buffers: list[Buffer], scalars: Sequence[int]):
        """A compiled kernel's launch: its pointers (and size operands), extent and pool."""
        extent, size = exe.grid[0], exe.destination.size
        assert isinstance(extent, int) and isinstance(size, int), "sized for the call"
        big = size >= PARALLEL_GRAIN or sum(b.size for b in buffers) >= PARALLEL_BYTES
        pool = threads.shared() if big else None
        return [*(b.address for b in buffers), *scalars], extent, pool

    def close(self) -> None:
        for code in self._loaded:
            code.close()
        self._loaded.clear()


def create() -> CpuDevice:
    return CpuDevice()
