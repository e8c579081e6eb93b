"""A fake CUDA driver: cuda-python's function names, `(CUresult, value...)` returns, no GPU.

"Device memory" is a bytearray per allocation, and every access is checked against its
allocation, so a runtime bug that would read or write out of bounds on a GPU fails here as
CUDA_ERROR_ILLEGAL_ADDRESS. A launch runs the kernel's own PTX, read from the image the runtime
loaded, on that memory (`ptx_exec`): its parameters unpacked from kernelParams as the kernel's
signature lays them out, its grid and block as given, its loads and stores checked (a fault is
reported at the next synchronize, as CUDA_ERROR_ILLEGAL_ADDRESS or
CUDA_ERROR_MISALIGNED_ADDRESS; `faults` says what each did). So end-to-end results compare the
compiled device code with the cpu backend; a race or a divergent barrier fails the test with
`ptx_exec`'s error, and PTX the executor cannot parse or run (damaged, or an instruction it does
not know) is refused as the driver refuses bad PTX, CUDA_ERROR_INVALID_PTX, with the executor's
reason, naming the instruction, in `image_errors`. `calls` counts every call by name; `fail`
makes the next calls of a name fail.

Streams, events, graphs and pinned memory behave as the driver's do, as far as a host-only fake
can. Stream-ordered work (launches, async copies, memsets) is checked when it is enqueued but
runs only when the host synchronizes (cuStreamSynchronize, cuEventSynchronize, a call that
synchronizes implicitly such as cuMemFree), so a runtime that reads a result, or rewrites a
pinned buffer a copy has yet to read, before it waits gets stale bytes here, as it could on a
GPU. A stream being captured records that work instead, and cuGraphLaunch enqueues the
recording, on the addresses it was captured with. Pinned memory (cuMemHostAlloc, cuMemAllocHost)
is a real host buffer numpy and ctypes can address, read or written when the copy runs; an async
copy from or to pageable host memory behaves as the driver's (the source is staged at the call;
a copy to pageable memory completes before the call returns) and is counted in `pageable_copies`
(on a GPU it would not overlap). Streams, events, graphs and graph instances are handles: using
one that is unknown or destroyed fails with CUDA_ERROR_INVALID_HANDLE, synchronizing a stream
that is being captured with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, as the real driver does. Only
the synchronous calls the runtime must no longer make (cuMemcpyHtoD, cuCtxSynchronize, ...) are
absent: a call of one fails the test with an AttributeError.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

import ptx_exec


class CUresult(IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_INVALID_DEVICE = 101
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_INVALID_PTX = 218
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_MISALIGNED_ADDRESS = 716
    CUDA_ERROR_LAUNCH_FAILED = 719
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900
    CUDA_ERROR_ILLEGAL_STATE = 401


class CUstreamCaptureMode(IntEnum):
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
    CU_STREAM_CAPTURE_MODE_RELAXED = 2


OK = CUresult.CUDA_SUCCESS
BASE = 0x7F0000000000
ALIGN = 256
SPECIAL_STREAMS = (0, 1, 2)  # the NULL stream, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD


class CUmemorytype(IntEnum):
    CU_MEMORYTYPE_HOST = 1
    CU_MEMORYTYPE_DEVICE = 2


@dataclass
class CUDA_MEMCPY2D:  # the driver's names
    """The fields of cuda-python's struct that cuMemcpy2DAsync reads here (device to device,
    no offsets)."""

    srcMemoryType: int = 0
    srcDevice: int = 0
    srcPitch: int = 0
    dstMemoryType: int = 0
    dstDevice: int = 0
    dstPitch: int = 0
    WidthInBytes: int = 0
    Height: int = 0


class FakeDriver:
    CUstreamCaptureMode = CUstreamCaptureMode
    CUmemorytype = CUmemorytype
    CUDA_MEMCPY2D = CUDA_MEMCPY2D

    def __init__(self, memory_limit: int = 1 << 30):
        self.calls: Counter[str] = Counter()
        self.fail: dict[str, CUresult] = {}
        self.memory: dict[int, bytearray] = {}
        self.memory_limit = memory_limit
        self.modules: dict[int, ptx_exec.Module] = {}
        self.functions: dict[int, tuple[ptx_exec.Module, str]] = {}
        self.faults: list[str] = []  # what each faulting launch did, for the test's message
        self.image_errors: list[str] = []  # why each refused PTX image was refused
        self.launches: list[tuple[str, tuple[int, ...], tuple[int, ...]]] = []
        self.context_refs = 0
        self.fault: CUresult | None = None  # surfaced at the next synchronize
        self.pinned: dict[int, ctypes.Array] = {}  # page-locked host buffers by address
        self.pageable_copies = 0
        self.streams: set[int] = set()
        self.capturing: dict[int, list] = {}  # stream -> the work recorded so far
        self.queued: dict[int, list] = {}  # stream -> the work enqueued, not yet run
        self.event_streams: dict[int, int] = {}  # event -> the stream it was last recorded on
        self.events: set[int] = set()
        self.graphs: dict[int, list] = {}
        self.instances: dict[int, list] = {}
        self._next = BASE
        self._globals_next = ptx_exec.GLOBALS_WINDOW  # each loaded module's variables go here
        self._handles = 0x5000

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
        self._drain()
        self.context_refs -= 1
        return (OK,)

    def cuCtxSetCurrent(self, ctx):
        return (OK,)

    def _handle(self) -> int:
        self._handles += 1
        return self._handles

    def _surface(self) -> tuple:
        fault, self.fault = self.fault, None
        return (fault or OK,)

    # ---- streams and events ------------------------------------------------------------------

    def _stream_ok(self, stream) -> bool:
        return int(stream) in self.streams or int(stream) in SPECIAL_STREAMS

    def _enqueue(self, stream, work) -> tuple:
        """Queue stream-ordered `work` (a callable), or record it into a capture."""
        if not self._stream_ok(stream):
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self.capturing.get(int(stream), self.queued.setdefault(int(stream), [])).append(work)
        return (OK,)

    def _drain(self, stream=None) -> None:
        """Run the queued work of `stream` (of every stream when None), in order."""
        for s in [int(stream)] if stream is not None else list(self.queued):
            work, self.queued[s] = self.queued.get(s, []), []
            for step in work:
                step()

    def cuStreamCreate(self, flags):
        handle = self._handle()
        self.streams.add(handle)
        return (OK, handle)

    def cuStreamDestroy(self, stream):
        if int(stream) not in self.streams:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self._drain(stream)  # its work still completes
        self.streams.discard(int(stream))
        self.capturing.pop(int(stream), None)
        return (OK,)

    def cuStreamSynchronize(self, stream):
        if not self._stream_ok(stream):
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        if int(stream) in self.capturing:
            return (CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
        self._drain(stream)
        return self._surface()

    def cuEventCreate(self, flags):
        handle = self._handle()
        self.events.add(handle)
        return (OK, handle)

    def cuEventDestroy(self, event):
        if int(event) not in self.events:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self.events.discard(int(event))
        return (OK,)

    def cuEventRecord(self, event, stream):
        if int(event) not in self.events or not self._stream_ok(stream):
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self.event_streams[int(event)] = int(stream)
        return (OK,)

    def cuEventSynchronize(self, event):
        if int(event) not in self.events:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self._drain(self.event_streams.get(int(event), 0))
        return self._surface()

    def cuStreamWaitEvent(self, stream, event, flags):
        if int(event) not in self.events or not self._stream_ok(stream):
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        # the event's work runs before anything enqueued after this on `stream`: running
        # it now is one order the device could choose
        self._drain(self.event_streams.get(int(event), 0))
        return (OK,)

    # ---- graphs ------------------------------------------------------------------------------

    def cuStreamBeginCapture(self, stream, mode):
        if int(stream) not in self.streams:  # the legacy stream cannot be captured
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        if int(stream) in self.capturing:
            return (CUresult.CUDA_ERROR_ILLEGAL_STATE,)
        if not isinstance(mode, CUstreamCaptureMode):
            raise TypeError("cuStreamBeginCapture: mode must be a CUstreamCaptureMode, as in "
                            "cuda-python, not an int")
        self.capturing[int(stream)] = []
        return (OK,)

    def cuStreamEndCapture(self, stream):
        if int(stream) not in self.capturing:
            return (CUresult.CUDA_ERROR_ILLEGAL_STATE,)
        handle = self._handle()
        self.graphs[handle] = self.capturing.pop(int(stream))
        return (OK, handle)

    def cuGraphInstantiate(self, graph, flags):
        if int(graph) not in self.graphs:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        handle = self._handle()
        self.instances[handle] = list(self.graphs[int(graph)])
        return (OK, handle)

    def cuGraphLaunch(self, instance, stream):
        work = self.instances.get(int(instance))
        if work is None:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)

        def replay() -> None:
            for step in work:
                step()
        return self._enqueue(stream, replay)

    def cuGraphExecDestroy(self, instance):
        return (OK,) if self.instances.pop(int(instance), None) is not None else \
            (CUresult.CUDA_ERROR_INVALID_HANDLE,)

    def cuGraphDestroy(self, graph):
        return (OK,) if self.graphs.pop(int(graph), None) is not None else \
            (CUresult.CUDA_ERROR_INVALID_HANDLE,)

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
        self._drain()  # cuMemFree synchronizes: work in flight finishes first
        if self.memory.pop(int(address), None) is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        return (OK,)

    def cuMemGetAddressRange(self, address):
        for base, mem in self.memory.items():
            if base <= int(address) < base + max(len(mem), 1):
                return (OK, base, len(mem))
        return (CUresult.CUDA_ERROR_NOT_FOUND,)

    def cuMemHostAlloc(self, size, flags):
        if size == 0:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        buffer = (ctypes.c_uint8 * size)()
        address = ctypes.addressof(buffer)
        self.pinned[address] = buffer
        return (OK, address)

    def cuMemAllocHost(self, size):
        return self.cuMemHostAlloc(size, 0)

    def cuMemFreeHost(self, address):
        self._drain()
        if self.pinned.pop(int(address), None) is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        return (OK,)

    def _pinned(self, address: int, count: int) -> bool:
        """Whether host memory lies inside a pinned buffer; counts the copies that do not."""
        for base, buffer in self.pinned.items():
            if base <= address and address + count <= base + len(buffer):
                return True
        self.pageable_copies += 1
        return False

    def cuMemsetD8Async(self, address, value, count, stream):
        region = self._region(int(address), count)
        if region is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        mem, offset = region

        def work() -> None:
            mem[offset:offset + count] = bytes([value]) * count
        return self._enqueue(stream, work)

    def cuMemcpyHtoDAsync(self, dst, src, count, stream):
        region = self._region(int(dst), count)
        if region is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        mem, offset = region
        staged = None if self._pinned(int(src), count) else ctypes.string_at(src, count)

        def work() -> None:
            mem[offset:offset + count] = staged if staged is not None else \
                ctypes.string_at(src, count)
        return self._enqueue(stream, work)

    def cuMemcpyDtoHAsync(self, dst, src, count, stream):
        region = self._region(int(src), count)
        if region is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        mem, offset = region

        def work() -> None:
            ctypes.memmove(dst, bytes(mem[offset:offset + count]), count)
        if self._pinned(int(dst), count) or int(stream) in self.capturing:
            return self._enqueue(stream, work)
        if not self._stream_ok(stream):
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self._drain(stream)  # to pageable memory: done, in stream order, when it returns
        work()
        return (OK,)

    def cuMemcpyDtoDAsync(self, dst, src, count, stream):
        a, b = self._region(int(dst), count), self._region(int(src), count)
        if a is None or b is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)

        def work() -> None:
            a[0][a[1]:a[1] + count] = b[0][b[1]:b[1] + count]
        return self._enqueue(stream, work)

    def cuMemcpy2DAsync(self, copy, stream):
        """Device to device only (all the runtime asks for): each row checked as one copy."""
        device = CUmemorytype.CU_MEMORYTYPE_DEVICE
        if copy.srcMemoryType != device or copy.dstMemoryType != device or \
                copy.srcPitch < copy.WidthInBytes or copy.dstPitch < copy.WidthInBytes:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        rows = []
        for r in range(copy.Height):
            a = self._region(int(copy.dstDevice) + r * copy.dstPitch, copy.WidthInBytes)
            b = self._region(int(copy.srcDevice) + r * copy.srcPitch, copy.WidthInBytes)
            if a is None or b is None:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            rows.append((a, b))
        n = copy.WidthInBytes

        def work() -> None:
            for (dm, do), (sm, so) in rows:
                dm[do:do + n] = sm[so:so + n]
        return self._enqueue(stream, work)

    # ---- modules and launches ----------------------------------------------------------------

    def cuModuleLoadData(self, image):
        data = bytes(image)
        if not data.rstrip(b"\0") or data.startswith(b"BAD"):
            return (CUresult.CUDA_ERROR_INVALID_IMAGE,)
        try:
            program = ptx_exec.Module(data, self._globals_next)
        except ptx_exec.UnsupportedError as err:
            if "neither PTX" in str(err) or "no PTX" in str(err):
                return (CUresult.CUDA_ERROR_INVALID_IMAGE,)
            # PTX the executor cannot run (damaged, or an instruction it does not know): the
            # driver's refusal of bad PTX; `image_errors` says what, for the failing test
            self.image_errors.append(str(err))
            return (CUresult.CUDA_ERROR_INVALID_PTX,)
        except Exception as err:  # noqa: BLE001  (a damaged image breaks the parser anywhere: still bad PTX)
            self.image_errors.append(f"{type(err).__name__}: {err}")
            return (CUresult.CUDA_ERROR_INVALID_PTX,)
        self._globals_next = max(self._globals_next, program.globals_end)
        handle = 0x1000 + len(self.modules)
        self.modules[handle] = program
        return (OK, handle)

    def cuModuleUnload(self, module):
        self._drain()
        return (OK,) if self.modules.pop(module, None) is not None else \
            (CUresult.CUDA_ERROR_INVALID_HANDLE,)

    def cuModuleGetFunction(self, module, name):
        if module not in self.modules or name.decode() not in self.modules[module].kernels:
            return (CUresult.CUDA_ERROR_NOT_FOUND,)
        handle = 0x2000 + len(self.functions)
        self.functions[handle] = (self.modules[module], name.decode())
        return (OK, handle)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        if function not in self.functions:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        program, name = self.functions[function]
        kernel = program.kernels[name]
        if bx * by * bz > 1024 or min(gx, gy, gz, bx, by, bz) < 1:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        # the driver reads the parameters when the launch is made (or captured), as the
        # kernel's signature lays them out: kernelParams[i] points at parameter i's bytes
        pointers = (ctypes.c_uint64 * len(kernel.params)).from_address(params) \
            if kernel.params else []
        buffer = bytearray()
        for (_, size), pointer in zip(kernel.params, pointers, strict=True):
            buffer += b"\0" * (-len(buffer) % min(size, 8))
            buffer += ctypes.string_at(pointer, size)
        packed = bytes(buffer)
        addresses = tuple(int(v) for v in np.frombuffer(packed, np.uint64)) \
            if all(size == 8 for _, size in kernel.params) else ()

        def work() -> None:
            self.launches.append((name, (gx, gy, gz, bx, by, bz), addresses))
            try:
                program.launch(name, (gx, gy, gz), (bx, by, bz), packed,
                               ptx_exec.Memory(self.memory))
            except ptx_exec.FaultError as err:  # the kernel faulted: report it at the next sync
                self.fault = CUresult.CUDA_ERROR_MISALIGNED_ADDRESS if "MISALIGNED" in \
                    str(err) else CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
                self.faults.append(str(err))
        return self._enqueue(stream, work)

    # ---- accounting --------------------------------------------------------------------------

    @property
    def copies(self) -> dict[str, int]:
        """The copy calls made (a graph's recorded copies are not calls)."""
        return {k: self.calls[k] for k in ("cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync",
                                           "cuMemcpyDtoDAsync")}

    @property
    def held(self) -> dict[str, int]:
        """What is still allocated or alive: all zero once every module is closed."""
        return {"memory": len(self.memory), "pinned": len(self.pinned),
                "streams": len(self.streams), "events": len(self.events),
                "graphs": len(self.graphs), "instances": len(self.instances),
                "modules": len(self.modules), "contexts": self.context_refs}


def main(argv: list[str] | None = None) -> int:
    """`python fake_driver.py run MODULE.hxb [hexir-run's options]`: hexir-run with this
    fake as the cuda driver, so a module's cuda kernels run their PTX on the executor, as
    `hexir-run --device=cuda` runs them on a GPU (`--device=cuda` is implied)."""
    import sys

    from hexir_runtime import cli
    from hexir_runtime.hal import cuda

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "run":
        print("usage: python fake_driver.py run MODULE.hxb [hexir-run's options]",
              file=sys.stderr)
        return 2
    fake = FakeDriver()
    cuda.load_driver = lambda: fake
    options = argv[1:]
    if not any(a.startswith("--device") for a in options):
        options.append("--device=cuda")
    return cli.main(options)


if __name__ == "__main__":
    raise SystemExit(main())
