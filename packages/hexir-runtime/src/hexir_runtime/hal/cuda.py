"""The cuda backend: device memory, pinned staging and kernel launches on one stream, through
the CUDA driver API.

The driver comes from cuda-python (`from cuda.bindings import driver`), imported only when a
cuda device is created, so `import hexir_runtime` never touches it; without the `cuda`
extra, or on a machine without libcuda, creating the device fails with one line that says
which. Every driver call returns `(CUresult, value...)` and goes through `_check`, which
raises `DeviceError` naming the call and the error. Tests inject a fake driver object with
the same function names.

All work of a device is ordered on its own stream (cuStreamCreate, non-blocking, so it never
serializes with other libraries' work on the legacy default stream): every launch, copy and
memset is enqueued on it, and `wait` (cuStreamSynchronize) is called only where the host
reads. DEVICE_LOCAL buffers are device memory (`host_pointer` is None); HOST_VISIBLE
buffers are pinned host memory (cuMemHostAlloc), which the host reads and writes in place
and the copy engine reaches asynchronously: `copy` between a pinned and a device buffer is
one cuMemcpyHtoDAsync or cuMemcpyDtoHAsync. The interpreter stages a call's inputs and
results through pinned buffers made once per arena; `write` and `read` from pageable memory
remain for what is done once per load (constants), for `DeviceArray.numpy` and for tools.

Kernel parameters are packed once per bound launch (`bind`), not per call. With `graphs`
(the default) `capture` records a run of bound launches by stream capture and instantiates
it once; `replay` is then one cuGraphLaunch for the whole run. Images are loaded once per
device and functions looked up once.

Results a caller keeps on the device (`export`) own their memory: closing the device frees
everything else, and the stream and context go when the last exported buffer is released.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hexir_format import Device as DeviceKind
from hexir_format import Executable
from hexir_format.plan import DEVICE_ARGUMENT_ALIGNMENT
from hexir_runtime.errors import DeviceError
from hexir_runtime.hal import Buffer, Device, MemoryKind

# What the runtime's `cuda` extra installs, as a line that works wherever pip does (the
# package itself is installed from a checkout until it is published).
EXTRA_HINT = "pip install 'cuda-bindings>=13'"
CU_STREAM_NON_BLOCKING = 0x1
CU_EVENT_DISABLE_TIMING = 0x2


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _check(result: Any, what: str) -> Any:
    """Unpack a driver call's `(CUresult, value...)`, raising DeviceError on failure."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        # the CUresult enum has the names (CUDA_ERROR_OUT_OF_MEMORY): no driver call needed
        name = getattr(err, "name", None) or f"CUresult {int(err)}"
        raise DeviceError(f"{what} failed: {name}")
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


@dataclass
class CudaGraph:
    """A captured run of launches: the graph and its executable instance."""

    graph: Any
    instance: Any


class CudaDevice(Device):
    kind = DeviceKind.CUDA

    def __init__(self, driver: Any, ordinal: int = 0, graphs: bool = True):
        self._cu = driver
        try:
            init = driver.cuInit(0)
        except Exception as e:  # noqa: BLE001 (cuda-python's loader error has no stable type)
            raise DeviceError(f"cannot use cuda: the NVIDIA driver library (libcuda) could not "
                              f"be loaded: {_one_line(e)}") from None
        _check(init, "cuInit")
        self._device = _check(driver.cuDeviceGet(ordinal), f"cuDeviceGet({ordinal})")
        raw = _check(driver.cuDeviceGetName(128, self._device), "cuDeviceGetName")
        label = bytes(raw).split(b"\0", 1)[0].decode(errors="replace").strip()
        self.name = f"cuda ({label})" if label else "cuda"
        self.ordinal, self.graphs = ordinal, graphs
        self._context = _check(driver.cuDevicePrimaryCtxRetain(self._device),
                               "cuDevicePrimaryCtxRetain")
        try:
            _check(driver.cuCtxSetCurrent(self._context), "cuCtxSetCurrent")
            self.stream = _check(driver.cuStreamCreate(CU_STREAM_NON_BLOCKING),
                                 "cuStreamCreate")
        except DeviceError:
            driver.cuDevicePrimaryCtxRelease(self._device)
            raise
        self._event = None  # made on the first ordering with another stream (`follow`)
        self._thread = threading.local()
        self._thread.current = True
        self._kernels: list[CudaKernel] = []
        self._host_views: dict[int, np.ndarray] = {}  # pinned buffer address -> its bytes
        self._exported = 0
        self._lock = threading.Lock()
        self._closed = False

    # ---- ordering --------------------------------------------------------------------------

    def wait(self) -> None:
        _check(self._cu.cuStreamSynchronize(self.stream), "device synchronize "
               "(cuStreamSynchronize)")

    def make_current(self) -> None:
        if not getattr(self._thread, "current", False):
            _check(self._cu.cuCtxSetCurrent(self._context), "cuCtxSetCurrent")
            self._thread.current = True

    def follow(self, stream: Any) -> None:
        """Order this device's stream after the work enqueued so far on `stream` (another
        library's: a device input's producer), by an event, without blocking the host."""
        _check(self._cu.cuEventRecord(self._ordering_event(), stream),
               "cuEventRecord (the input's stream)")
        _check(self._cu.cuStreamWaitEvent(self.stream, self._event, 0), "cuStreamWaitEvent")

    def signal(self, stream: Any) -> None:
        """Order `stream` (a consumer's) after the work enqueued so far on this device's."""
        _check(self._cu.cuEventRecord(self._ordering_event(), self.stream), "cuEventRecord")
        _check(self._cu.cuStreamWaitEvent(stream, self._event, 0),
               "cuStreamWaitEvent (the consumer's stream)")

    def _ordering_event(self) -> Any:
        if self._event is None:
            self._event = _check(self._cu.cuEventCreate(CU_EVENT_DISABLE_TIMING),
                                 "cuEventCreate")
        return self._event

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.make_current()  # close may come from another thread than the calls
        self.wait()  # nothing in flight may use what is freed next
        for k in self._kernels:
            _check(self._cu.cuModuleUnload(k.module), f"cuModuleUnload ('{k.exe.name}')")
        self._kernels.clear()
        if self._event is not None:
            _check(self._cu.cuEventDestroy(self._event), "cuEventDestroy")
            self._event = None
        with self._lock:
            if self._exported:
                return  # results the caller keeps: the last one released ends the context
        self._end()

    def _end(self) -> None:
        _check(self._cu.cuStreamDestroy(self.stream), "cuStreamDestroy")
        _check(self._cu.cuDevicePrimaryCtxRelease(self._device), "cuDevicePrimaryCtxRelease")

    # ---- memory ----------------------------------------------------------------------------

    def export(self, size: int) -> Buffer:
        """A device buffer that outlives the load's arenas (a result kept on the device),
        released with `release_export`."""
        buffer = self.allocate(size, zeroed=False)
        with self._lock:
            self._exported += 1
        return buffer

    def release_export(self, buffer: Buffer) -> None:
        self.make_current()
        self.release(buffer)
        with self._lock:
            self._exported -= 1
            last = self._closed and not self._exported
        if last:
            self._end()

    def borrow(self, address: int, size: int) -> Buffer:
        """A caller's device memory as a buffer this device reads but never frees."""
        return Buffer(self, size, MemoryKind.DEVICE_LOCAL, address, owned=False)

    def address_range(self, address: int) -> tuple[int, int]:
        """The device allocation that holds `address`: (base, size); a DeviceError where it
        is not device memory of this context (a host pointer, a freed allocation)."""
        base, size = _check(self._cu.cuMemGetAddressRange(address), "cuMemGetAddressRange")
        return int(base), int(size)

    def _allocate(self, size: int, memory: MemoryKind, zeroed: bool) -> Buffer:
        if memory is MemoryKind.HOST_LOCAL:
            raise DeviceError(f"{self.name}: only DEVICE_LOCAL and HOST_VISIBLE (pinned) "
                              f"buffers are supported, not {memory}")
        if size == 0:
            return Buffer(self, 0, memory, 0)
        if memory is MemoryKind.HOST_VISIBLE:
            address = int(_check(self._cu.cuMemHostAlloc(size, 0), f"cuMemHostAlloc({size})"))
            host = (ctypes.c_uint8 * size).from_address(address)
            self._host_views[address] = np.ctypeslib.as_array(host)
        else:
            address = int(_check(self._cu.cuMemAlloc(size), f"cuMemAlloc({size})"))
        buffer = Buffer(self, size, memory, address)
        if zeroed:
            try:
                self._zero(buffer)
            except DeviceError:
                self.release(buffer)
                raise
        return buffer

    def _write(self, buffer: Buffer, data: memoryview, offset: int) -> None:
        if not len(data):
            return
        host = np.frombuffer(data, dtype=np.uint8)
        if buffer.memory is MemoryKind.HOST_VISIBLE:
            self._pinned(buffer)[offset:offset + len(host)] = host
            return
        # from pageable memory the driver stages the bytes before the call returns, so the
        # caller's data may change at once; the copy itself is in stream order
        _check(self._cu.cuMemcpyHtoDAsync(buffer.handle + offset, host.ctypes.data, len(host),
                                          self.stream),
               f"host to device copy of {len(host)} bytes (cuMemcpyHtoDAsync)")

    def _read(self, buffer: Buffer, out: np.ndarray) -> None:
        if not len(out):
            return
        if buffer.memory is MemoryKind.HOST_VISIBLE:
            out[:] = self._pinned(buffer)[:len(out)]
            return
        _check(self._cu.cuMemcpyDtoHAsync(out.ctypes.data, buffer.handle, len(out),
                                          self.stream),
               f"device to host copy of {len(out)} bytes (cuMemcpyDtoHAsync)")
        self.wait()

    def _copy(self, dst: Buffer, src: Buffer) -> None:
        """Asynchronous, in stream order: pinned to device, device to pinned, device to
        device (both pinned: a host copy, for a caller that has waited)."""
        n = src.size
        if not n:
            return
        pinned = MemoryKind.HOST_VISIBLE
        if dst.memory is pinned and src.memory is pinned:
            self._pinned(dst)[:n] = self._pinned(src)
        elif src.memory is pinned:
            _check(self._cu.cuMemcpyHtoDAsync(dst.handle, src.handle, n, self.stream),
                   f"host to device copy of {n} bytes (cuMemcpyHtoDAsync)")
        elif dst.memory is pinned:
            _check(self._cu.cuMemcpyDtoHAsync(dst.handle, src.handle, n, self.stream),
                   f"device to host copy of {n} bytes (cuMemcpyDtoHAsync)")
        else:
            _check(self._cu.cuMemcpyDtoDAsync(dst.handle, src.handle, n, self.stream),
                   f"device to device copy of {n} bytes (cuMemcpyDtoDAsync)")

    def copy_rows(self, dst: int, dst_pitch: int, src: int, src_pitch: int, width: int,
                  rows: int) -> None:
        """`rows` blocks of `width` bytes from device address `src`, `src_pitch` apart, to
        `dst`, `dst_pitch` apart: one cuMemcpy2DAsync, in stream order (a cache position of
        every head at once, `hexir_runtime.generate`)."""
        cu = self._cu
        copy = cu.CUDA_MEMCPY2D()
        copy.srcMemoryType = copy.dstMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
        copy.srcDevice, copy.srcPitch, copy.dstDevice, copy.dstPitch = src, src_pitch, dst, \
            dst_pitch
        copy.WidthInBytes, copy.Height = width, rows
        _check(cu.cuMemcpy2DAsync(copy, self.stream),
               f"device to device copy of {rows} x {width} bytes (cuMemcpy2DAsync)")

    def _zero(self, buffer: Buffer) -> None:
        if buffer.memory is MemoryKind.HOST_VISIBLE:
            self._pinned(buffer)[:] = 0
        elif buffer.size:
            _check(self._cu.cuMemsetD8Async(buffer.handle, 0, buffer.size, self.stream),
                   f"cuMemsetD8Async({buffer.size})")

    def _host_pointer(self, buffer: Buffer) -> np.ndarray | None:
        if buffer.memory is not MemoryKind.HOST_VISIBLE:
            return None
        return self._pinned(buffer)

    def _pinned(self, buffer: Buffer) -> np.ndarray:
        """The host mapping of a HOST_VISIBLE buffer."""
        if not buffer.size:
            return np.empty(0, dtype=np.uint8)
        root = buffer.parent or buffer
        start = buffer.handle - root.handle
        return self._host_views[root.handle][start:start + buffer.size]

    def _release(self, buffer: Buffer) -> None:
        if buffer.handle and buffer.memory is MemoryKind.HOST_VISIBLE:
            del self._host_views[buffer.handle]
            _check(self._cu.cuMemFreeHost(buffer.handle), "cuMemFreeHost")
        elif buffer.handle:
            _check(self._cu.cuMemFree(buffer.handle), "cuMemFree")
        buffer.handle = 0

    def _view(self, parent: Buffer, offset: int, size: int) -> Buffer:
        return Buffer(self, size, parent.memory, parent.handle + offset,
                      parent=parent.parent or parent)

    # ---- kernels and graphs ----------------------------------------------------------------

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

    def bind(self, loaded: CudaKernel, buffers: list[Buffer], sized: Executable | None = None,
             scalars: Sequence[int] = ()):
        """The launch with its parameters packed once: the bare-pointer convention, one
        device address per argument, then (a dynamic module's kernel) one int64 per size
        operand, kernelParams an array of pointers to those values (both arrays live as long
        as the returned launch); the launch geometry is `sized`'s, evaluated for the call.
        Every address must keep the format's promise to the kernel, DEVICE_ARGUMENT_ALIGNMENT:
        its code may load and store 16 bytes at a time."""
        for number, b in enumerate(buffers):
            self._check(b, 0, 0, "pass")
            if b.handle % DEVICE_ARGUMENT_ALIGNMENT:
                raise DeviceError(
                    f"{self.name}: argument #{number} of '{loaded.exe.name}' is at {b.handle:#x}, "
                    f"not a multiple of {DEVICE_ARGUMENT_ALIGNMENT} bytes as a cuda kernel may "
                    "assume")
        exe = sized or loaded.exe
        values = np.array([*(b.handle for b in buffers), *scalars], dtype=np.uint64)
        params = values.ctypes.data + 8 * np.arange(len(values), dtype=np.uint64)
        arguments = (loaded.function, *exe.grid, *exe.block, 0, self.stream,
                     params.ctypes.data, 0)
        what = f"launch of '{exe.name}' (cuLaunchKernel)"

        def launch(_keep=(values, params)) -> None:
            _check(self._cu.cuLaunchKernel(*arguments), what)
        return launch

    def capture(self, steps: list) -> CudaGraph:
        mode = self._cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        _check(self._cu.cuStreamBeginCapture(self.stream, mode), "cuStreamBeginCapture")
        try:
            for step in steps:
                step()
        except BaseException:
            # end the capture (the stream is usable again) and keep the step's error
            err, *graph = self._cu.cuStreamEndCapture(self.stream)
            if int(err) == 0 and graph:
                self._cu.cuGraphDestroy(graph[0])
            raise
        graph = _check(self._cu.cuStreamEndCapture(self.stream), "cuStreamEndCapture")
        try:
            instance = _check(self._cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        except DeviceError:
            self._cu.cuGraphDestroy(graph)
            raise
        return CudaGraph(graph, instance)

    def replay(self, graph: CudaGraph) -> None:
        _check(self._cu.cuGraphLaunch(graph.instance, self.stream), "graph launch "
               "(cuGraphLaunch)")

    def release_graph(self, graph: CudaGraph) -> None:
        _check(self._cu.cuGraphExecDestroy(graph.instance), "cuGraphExecDestroy")
        _check(self._cu.cuGraphDestroy(graph.graph), "cuGraphDestroy")


def create(driver: Any = None, ordinal: int = 0, graphs: bool = True) -> CudaDevice:
    """A cuda device on GPU `ordinal`, using `driver` (cuda-python's by default); `graphs`
    replays each run of launches as one captured cuda graph."""
    return CudaDevice(driver if driver is not None else load_driver(), ordinal, graphs)
