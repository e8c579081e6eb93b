"""The HAL contract, one suite for every backend: `cpu`, `cuda-fake` (the cuda backend over
the fake driver, whose launches run the kernels' PTX) and `cuda` (a GPU; skipped without
one): buffers, copies and views, then dispatch and replay through a module."""

import mmap
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from fake_driver import CUresult, FakeDriver
from hexir_format.plan import ARENA_ALIGNMENT
from hexir_runtime import hal
from hexir_runtime.errors import DeviceError
from hexir_runtime.hal import MemoryKind
from hexir_runtime.hal import cuda as cuda_backend

#: `cuda` is marked gpu: bench/gpu-session.sh runs it, unchanged, on a lent GPU.
BACKENDS = ["cpu", "cuda-fake", pytest.param("cuda", marks=pytest.mark.gpu)]


def _open(backend: str) -> dict:
    """hexir_runtime.load's device arguments for `backend` (skips `cuda` without a GPU)."""
    if backend == "cpu":
        return {"device": "cpu"}
    if backend == "cuda-fake":
        return {"device": "cuda", "driver": FakeDriver()}
    try:
        hal.create_device("cuda").close()
    except DeviceError as err:
        pytest.skip(f"no usable CUDA device: {err}")
    return {"device": "cuda"}


@pytest.fixture(params=BACKENDS)
def device(request):
    options = _open(request.param)
    d = hal.create_device(options["device"], **({"driver": options["driver"]}
                                                 if "driver" in options else {}))
    yield d
    d.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_dispatch_and_replay_through_a_module(backend):
    """The built-in program with its linear on the backend: loaded once, dispatched (on cuda
    captured into a graph, then replayed) on every call, the same answer each time."""
    import hexir_runtime as hr

    options = _open(backend)
    name = "builtin-cpu.hxb" if backend == "cpu" else "builtin-cuda.hxb"
    with hr.load(FIXTURES / name, **options) as m:
        for _ in range(3):
            assert m.run()[0].tolist() == [[8.0, 17.0], [12.0, 14.0]]
        used = {d.kind.name.lower() for d in m.devices_used()}
        assert used == ({"cpu"} if backend == "cpu" else {"cpu", "cuda"})


def test_roundtrip_and_memory_kind(device):
    data = np.arange(4, dtype=np.float64)
    buf = device.allocate(32)
    assert device.read(buf).tolist() == [0] * 32  # zeroed, even on cuda
    device.write(buf, data)
    device.wait()
    assert device.read(buf).view(np.float64).tolist() == [0.0, 1.0, 2.0, 3.0]
    if device.kind.name == "CPU":
        assert buf.memory is MemoryKind.HOST_VISIBLE and device.host_pointer(buf) is not None
    else:
        assert buf.memory is MemoryKind.DEVICE_LOCAL and device.host_pointer(buf) is None
    device.release(buf)
    device.release(buf)  # releasing twice is harmless


def test_out_of_bounds_write_and_read_are_refused(device):
    buf = device.allocate(16)
    with pytest.raises(DeviceError, match="write of 24 bytes at offset 0 does not fit a 16-byte"):
        device.write(buf, bytes(24))
    with pytest.raises(DeviceError, match="write of 8 bytes at offset 12"):
        device.write(buf, bytes(8), offset=12)
    with pytest.raises(DeviceError, match="read of 17 bytes"):
        device.read(buf, 17)
    device.release(buf)
    with pytest.raises(DeviceError, match="released buffer"):
        device.read(buf)


def test_a_view_of_a_view_is_the_root_bytes_it_covers(device):
    root = device.allocate(64)
    device.write(root, np.arange(8, dtype=np.float64))
    outer = device.view(root, 16, 32)  # elements 2..5
    inner = device.view(outer, 8, 16)  # elements 3..4 of the root
    assert inner.parent is root
    assert device.read(inner).view(np.float64).tolist() == [3.0, 4.0]
    device.write(inner, np.array([-1.0]), offset=8)
    device.wait()
    assert device.read(root).view(np.float64).tolist() == [0, 1, 2, 3, -1, 5, 6, 7]
    with pytest.raises(DeviceError, match="view of 24 bytes at offset 16 does not fit a 32-byte"):
        device.view(outer, 16, 24)
    device.release(root)
    with pytest.raises(DeviceError, match="cannot view a released buffer"):
        device.view(outer, 0, 8)


def test_constants_are_read_only(device):
    buf = device.constant(memoryview(bytes(range(16))))
    assert device.read(buf).tolist() == list(range(16))
    with pytest.raises(DeviceError, match="read-only"):
        device.write(buf, bytes(4))


def test_copy_and_buffers_of_another_device(device):
    a, b = device.allocate(8), device.allocate(8)
    device.write(a, np.array([7.0]))
    device.copy(b, a)
    assert device.read(b).view(np.float64)[0] == 7.0
    foreign = hal.create_device("cpu").allocate(8)  # another device, even of the same kind
    with pytest.raises(DeviceError, match="cannot write a buffer of cpu"):
        device.write(foreign, bytes(8))


@pytest.mark.parametrize("size", [1, 100, 4096, 1 << 20])
def test_cpu_buffers_start_on_a_cache_line(size):
    """Every planned offset is a whole ARENA_ALIGNMENT into its arena, so the arena must
    start on one too: numpy aligns to 16 bytes only (a 1 MiB array lands at page + 16)."""
    device = hal.create_device("cpu")
    for _ in range(8):
        buf = device.allocate(size)
        host = device.host_pointer(buf)
        assert buf.address % ARENA_ALIGNMENT == 0
        assert host.__array_interface__["data"][0] == buf.address
        assert buf.size == len(host) == size and not host.any()


def test_cpu_constant_is_a_view_not_a_copy():
    data = bytearray(b"\x01" * 16)
    buf = hal.create_device("cpu").constant(memoryview(data))
    data[0] = 9
    assert buf.handle[0] == 9 and not buf.handle.flags.writeable


def _resident_bytes(address: int) -> int:
    """The resident bytes (`Rss`) of this process's mapping that holds `address`."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(v, 16) for v in head.split("-"))
            inside = start <= address < end
        elif inside and head == "Rss:":
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux's smaps")
def test_a_cpu_constant_of_a_mapped_file_has_its_pages_mapped(tmp_path):
    """Binding a constant reads each of its pages once (`cpu._map_pages`): a kernel that
    reads it only through masked loads would otherwise take a fault-suppressing assist per
    load, every call. The file's pages are in the page cache (just written) and none is
    mapped before the binding; after it, the mapping's resident size covers the range."""
    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)[100:(1 << 20) - 100]  # starts and ends inside a page
        address = np.frombuffer(view, np.uint8).__array_interface__["data"][0]
        assert _resident_bytes(address) < 1 << 20
        buffer = hal.create_device("cpu").constant(view)
        assert _resident_bytes(address) == 1 << 20
        del buffer, view


def test_unknown_backend():
    with pytest.raises(DeviceError, match="unknown device 'tpu'; expected cpu or cuda"):
        hal.create_device("tpu")


def test_cuda_errors_carry_the_error_name():
    fake = FakeDriver(memory_limit=64)
    device = hal.create_device("cuda", driver=fake)
    assert device.name == "cuda (Fake GPU)"
    with pytest.raises(DeviceError, match=r"cuMemAlloc\(128\) failed: CUDA_ERROR_OUT_OF_MEMORY"):
        device.allocate(128)
    fake.fail["cuMemcpyHtoDAsync"] = CUresult.CUDA_ERROR_INVALID_VALUE
    buf = device.allocate(8)
    with pytest.raises(DeviceError, match=r"host to device copy of 8 bytes "
                                          r"\(cuMemcpyHtoDAsync\) failed: "
                                          "CUDA_ERROR_INVALID_VALUE"):
        device.write(buf, bytes(8))
    fake.fault = CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(DeviceError, match=r"synchronize .* failed: CUDA_ERROR_ILLEGAL_ADDRESS"):
        device.wait()


def test_cuda_device_fails_cleanly_when_init_fails():
    fake = FakeDriver()
    fake.fail["cuInit"] = CUresult.CUDA_ERROR_INVALID_DEVICE
    with pytest.raises(DeviceError, match="cuInit failed: CUDA_ERROR_INVALID_DEVICE"):
        hal.create_device("cuda", driver=fake)


def test_cuda_device_releases_its_context_and_frees_on_release():
    fake = FakeDriver()
    device = hal.create_device("cuda", driver=fake)
    buf = device.allocate(64)
    device.release(buf)
    pinned = device.allocate(64, hal.MemoryKind.HOST_VISIBLE)
    device.host_pointer(pinned)[:] = 7
    device.release(pinned)
    device.close()
    device.close()
    assert fake.memory == {} and fake.context_refs == 0
    assert fake.held == dict.fromkeys(fake.held, 0)  # pinned memory, the stream: all given back


def test_missing_cuda_python_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda", None)  # `import cuda...` raises ImportError
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(DeviceError, match=r"pip install 'cuda-bindings>=13'"):
        cuda_backend.load_driver()


class _NoLibcuda:
    def cuInit(self, flags):
        raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found via\n'
                           "system search.")


def test_missing_libcuda_is_one_line():
    with pytest.raises(DeviceError) as info:
        hal.create_device("cuda", driver=_NoLibcuda())
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("cannot use cuda: the NVIDIA driver library (libcuda) could not")


@pytest.mark.parametrize("make", [
    lambda: np.arange(12, dtype=np.float32).reshape(3, 4),
    lambda: np.arange(12, dtype=np.float64)[2:],  # a view past its base's start
    lambda: np.frombuffer(bytes(64), np.int64),  # read-only, of a bytes object
    lambda: np.zeros((0, 3), np.float32),
])
def test_aligned_address_is_numpys_address(make):
    """A call's hot path reads an input's address from the array interface's C struct
    (`hal.aligned_address`): numpy's own address, for arrays it owns, views of them and
    read-only ones."""
    x = make()
    assert x.flags.aligned and hal.aligned_address(x) == x.ctypes.data


def test_aligned_address_is_none_off_the_element_alignment():
    raw = np.zeros(4 * 8 + 1, np.uint8)
    x = raw[1:].view(np.float32)
    assert not x.flags.aligned and hal.aligned_address(x) is None
    assert hal.aligned_address(raw[1:]) == raw.ctypes.data + 1  # bytes align anywhere
