"""Device-resident inputs and results on the fake driver: arrays that stay on the GPU
between a caller's library and the module, checked like numpy inputs, copied device to
device, and results that own their memory."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
import modules
from conftest import FIXTURES
from fake_driver import CUresult, FakeDriver
from test_cuda_stream import inputs_of, on_fake, per_call


class FakeCudaArray:
    """A stand-in for a PyTorch or CuPy tensor on the GPU: `__cuda_array_interface__` v3 over
    memory the fake driver allocated, holding `array`'s bytes (entries of the interface can
    be overridden to make it wrong). What it proves: the runtime reads the protocol, checks it
    against the entry's signature and the driver's allocations, and copies device to device
    from (or into) the pointer it names, after the producer's stream. Not that a real
    library's tensor works: the `gpu` tests feed the runtime's own DeviceArray back instead."""

    def __init__(self, fake: FakeDriver, array: np.ndarray, **interface):
        self.fake, self.array = fake, np.ascontiguousarray(array)
        _, self.address = fake.cuMemAlloc(max(array.nbytes, 1))
        fake.memory[self.address][:array.nbytes] = self.array.tobytes()
        self.interface = {"shape": array.shape, "typestr": array.dtype.str,
                          "data": (self.address, False), "strides": None, "version": 3,
                          "stream": None, **interface}

    @property
    def __cuda_array_interface__(self) -> dict:
        return self.interface

    def read(self) -> np.ndarray:
        raw = bytes(self.fake.memory[self.address][:self.array.nbytes])
        return np.frombuffer(raw, self.array.dtype).reshape(self.array.shape)


def mlp():
    m, fake = on_fake("mlp-f32-cuda.hxb")
    cpu = hr.load(FIXTURES / "mlp-f32.hxb")
    return m, fake, cpu, inputs_of(cpu, 0)[0]


def identity(tmp_path, fake: FakeDriver | None = None):
    """main(x) = x for a 2x2 f64 that lives on cuda from INPUT to OUTPUT."""
    t = hf.TensorType(hf.DType.F64, (2, 2))
    main = hf.Function("main", (hf.Command.input(0, 0), hf.Command.output(0, 0)))
    path = modules.write(tmp_path, "id.hxb", hf.Module(4, (main,), b"", (),
                                                       (hf.Slot(hf.Device.CUDA, t),)))
    fake = fake or FakeDriver()
    return hr.load(path, device="cuda", driver=fake), fake


def test_a_device_input_goes_device_to_device_and_matches_the_host_input():
    m, fake, cpu, x = mlp()
    with m, cpu:
        want = m.main(x)
        dx = FakeCudaArray(fake, x)
        np.testing.assert_array_equal(m.main(dx), want)
        delta = per_call(m, fake, [dx])
    assert delta["cuMemcpyDtoDAsync"] == 1 and delta["cuMemcpyHtoDAsync"] == 0
    assert delta["cuMemcpyDtoHAsync"] == 1 and delta["cuStreamSynchronize"] == 1
    assert delta["cuMemGetAddressRange"] == 1  # the pointer checked against the driver
    assert delta["cuMemAlloc"] == delta["pageable copies"] == 0


def test_results_kept_on_the_device_are_device_arrays_of_their_own():
    m, fake, cpu, x = mlp()
    with m, cpu:
        want = m.main(x)
        y = m.main(x, results_on_device=True)
        other = m.main(x + 1, results_on_device=True)  # the arena is reused: y is not
        assert isinstance(y, hr.DeviceArray) and (y.shape, y.dtype) == ((8, 10), np.float32)
        cai = y.__cuda_array_interface__
        assert (cai["version"], cai["typestr"], cai["shape"], cai["strides"]) == (
            3, "<f4", (8, 10), None)
        assert cai["data"][0] in fake.memory and cai["stream"] in fake.streams
        np.testing.assert_array_equal(np.asarray(y), want)
        np.testing.assert_array_equal(other.numpy(), m.main(x + 1))
        host_in = per_call(m, fake, [x], results_on_device=True)
        device_in = per_call(m, fake, [FakeCudaArray(fake, x)], results_on_device=True)
    # per call: the result's own allocation (and the last one's, dropped, freed), no copy to
    # the host (the logits' COPY to the cpu is left out), and the host never waits for the
    # call itself; from a host input, it waits once before it rewrites the pinned buffer the
    # last call's upload may still be reading
    for delta in (host_in, device_in):
        assert delta["cuMemAlloc"] == delta["cuMemFree"] == 1
        assert delta["cuMemcpyDtoHAsync"] == 0 and delta["cuGraphLaunch"] == 1
    assert (host_in["cuStreamSynchronize"], host_in["cuMemcpyDtoDAsync"]) == (1, 1)
    assert (device_in["cuStreamSynchronize"], device_in["cuMemcpyDtoDAsync"]) == (0, 2)


def test_a_device_array_outlives_the_module_and_ends_its_context_when_released():
    m, fake, cpu, x = mlp()
    with m, cpu:
        want = m.main(x)
        y = m.main(x, results_on_device=True)
    assert fake.context_refs == 1 and len(fake.memory) == 1  # y alone keeps them
    np.testing.assert_array_equal(np.asarray(y), want)
    y.release()
    assert fake.held == dict.fromkeys(fake.held, 0)
    with pytest.raises(hr.DeviceError, match="this device array was released"):
        y.numpy()


def test_a_result_kept_on_the_device_feeds_the_next_call(tmp_path):
    m, fake = identity(tmp_path)
    with m:
        y = m.main(modules.A, results_on_device=True)
        z = m.main(y, results_on_device=True)
        np.testing.assert_array_equal(m.main(z), modules.A)
        del y, z
    assert fake.held == dict.fromkeys(fake.held, 0)


def test_results_go_into_a_callers_device_array():
    m, fake, cpu, x = mlp()
    with m, cpu:
        want = m.main(x)
        out = FakeCudaArray(fake, np.zeros((8, 10), np.float32))
        assert m.main(x, out=out) is out
        np.testing.assert_array_equal(out.read(), want)
        delta = per_call(m, fake, [x], out=[out])
    # device to device into the caller's memory, and one wait, so it is complete on return
    assert delta["cuMemcpyDtoDAsync"] == 1 and delta["cuMemcpyDtoHAsync"] == 0
    assert delta["cuStreamSynchronize"] == 1 and delta["cuMemAlloc"] == 0


def test_the_input_waits_for_its_producers_stream():
    """The producer has queued the input's bytes on its own stream: unless the runtime's
    stream waits for that stream (an event), the fake copies the zeros that are there now."""
    m, fake, cpu, x = mlp()
    with m, cpu:
        want = m.main(x)
        _, producer = fake.cuStreamCreate(1)
        dx = FakeCudaArray(fake, np.zeros_like(x), stream=producer)
        assert fake.cuMemcpyHtoDAsync(dx.address, x.ctypes.data, x.nbytes, producer)[0] == 0
        np.testing.assert_array_equal(m.main(dx), want)
        delta = per_call(m, fake, [dx])
        fake.cuStreamDestroy(producer)
    assert delta["cuEventRecord"] == delta["cuStreamWaitEvent"] == 1
    assert delta["cuStreamSynchronize"] == 1 and delta["cuEventSynchronize"] == 0
    assert fake.calls["cuEventCreate"] == fake.calls["cuEventDestroy"] == 1


def test_an_interface_without_a_stream_is_ordered_after_the_legacy_stream():
    """Version 2 (PyTorch's) names no stream: the producer's work may be queued on the
    legacy default stream, which a non-blocking stream does not wait for by itself."""
    m, fake, cpu, x = mlp()
    with m, cpu:
        dx = FakeCudaArray(fake, x, version=2)
        del dx.interface["stream"]
        np.testing.assert_array_equal(m.main(dx), m.main(x))
        delta = per_call(m, fake, [dx])
    assert delta["cuEventRecord"] == delta["cuStreamWaitEvent"] == 1
    assert delta["cuStreamSynchronize"] == 1


def test_an_unknown_producer_stream_is_a_one_line_error():
    m, fake, cpu, x = mlp()
    with m, cpu, pytest.raises(hr.ExecutionError) as info:
        m.main(FakeCudaArray(fake, x, stream=0xBAD))
    assert str(info.value) == ("main: command 1 (copy): cuEventRecord (the input's stream) "
                               "failed: CUDA_ERROR_INVALID_HANDLE")


def _bad_inputs(fake: FakeDriver, x: np.ndarray, host: np.ndarray) -> list:
    _, pinned = fake.cuMemHostAlloc(x.nbytes, 0)
    small = FakeCudaArray(fake, x[:4])
    return [
        (FakeCudaArray(fake, x.astype(np.float64)),
         "input 0 of main: expected 8x784xf32, got a float64 cuda array of shape 8x784"),
        (FakeCudaArray(fake, x.T.copy()),
         "input 0 of main: expected 8x784xf32, got a cuda array of shape 784x8"),
        (FakeCudaArray(fake, x, strides=(4, 32)),
         ("input 0 of main: expected 8x784xf32, got a non-contiguous cuda array: pass a "
          "contiguous one (x.contiguous() in PyTorch, cupy.ascontiguousarray(x))")),
        (FakeCudaArray(fake, x, data=(host.ctypes.data, False)),
         (f"input 0 of main: its pointer {host.ctypes.data:#x} is not device memory of cuda "
          "(Fake GPU) (cuMemGetAddressRange failed: CUDA_ERROR_NOT_FOUND)")),
        (FakeCudaArray(fake, x, data=(pinned, False)),
         (f"input 0 of main: its pointer {pinned:#x} is not device memory of cuda (Fake GPU) "
          "(cuMemGetAddressRange failed: CUDA_ERROR_NOT_FOUND)")),
        (FakeCudaArray(fake, x, data=(small.address, False)),
         (f"input 0 of main: its 25088 bytes at {small.address:#x} run past the end of their "
          f"allocation (12544 bytes at {small.address:#x})")),
        (FakeCudaArray(fake, x, stream=0),
         ("input 0 of main: its __cuda_array_interface__ names stream 0, which the protocol "
          "forbids (ambiguous between the legacy and per-thread default streams)")),
        (FakeCudaArray(fake, x, shape=None),
         ("input 0 of main: its __cuda_array_interface__ cannot be read (TypeError: "
          "'NoneType' object is not iterable)")),
    ]


def test_device_inputs_of_the_wrong_kind_are_refused_before_any_work():
    m, fake, cpu, x = mlp()
    host = np.zeros_like(x)
    with m, cpu:
        m.main(x)
        for bad, message in _bad_inputs(fake, x, host):
            before = fake.calls["cuGraphLaunch"] + fake.calls["cuMemcpyDtoDAsync"]
            with pytest.raises(hr.InputError) as info:
                m.main(bad)
            assert str(info.value) == message
            assert fake.calls["cuGraphLaunch"] + fake.calls["cuMemcpyDtoDAsync"] == before


def test_device_out_arrays_of_the_wrong_kind_are_refused():
    m, fake, cpu, x = mlp()
    with m, cpu:
        read_only = FakeCudaArray(fake, np.zeros((8, 10), np.float32))
        read_only.interface["data"] = (read_only.address, True)
        with pytest.raises(hr.InputError) as info:
            m.main(x, out=read_only)
        assert str(info.value) == ("out[0] of main: expected a writable C-contiguous "
                                   "8x10xf32 array, got a read-only float32 cuda array of "
                                   "shape 8x10")
        with pytest.raises(hr.InputError, match="got a float64 cuda array of shape 8x10"):
            m.main(x, out=FakeCudaArray(fake, np.zeros((8, 10))))
    mixed, fake = on_fake("mlp-f32-mixed.hxb")
    with mixed, pytest.raises(hr.InputError) as info:
        mixed.main(x, out=FakeCudaArray(fake, np.zeros((8, 10), np.float32)))
    assert str(info.value) == ("out[0] of main: this result is computed on the cpu; pass a "
                               "numpy array for it")


def test_a_cpu_load_refuses_device_arrays_and_keeps_results_on_the_host():
    fake = FakeDriver()
    with hr.load(FIXTURES / "mlp-f32.hxb", device="cuda", driver=fake) as m:
        x = inputs_of(m, 0)[0]
        with pytest.raises(hr.InputError) as info:
            m.main(FakeCudaArray(fake, x))
        assert isinstance(m.main(x, results_on_device=True), np.ndarray)
    assert str(info.value) == ("main got a cuda array, but it runs on the cpu alone in this "
                               "load: pass numpy arrays (or load a cuda module with "
                               "device='cuda')")


def test_a_device_input_a_cpu_kernel_reads_is_brought_to_the_host_first(tmp_path):
    """modules.hetero, with a second relu on the cpu that reads the input itself: the
    device input is copied into pinned memory and the host waits before that relu runs."""
    base = modules.hetero()
    main = hf.Function("main", (*base.function("main").commands, hf.Command.alloc(6, 32),
                                hf.Command.dispatch(1, (0, 6)), hf.Command.output(6, 2)))
    module = hf.Module(4, (main,), base.rodata, base.executables,
                       (*base.slots, hf.Slot(hf.Device.CPU, base.slots[0].type)))
    path = modules.write(tmp_path, "hetero2.hxb", module)
    fake = FakeDriver()
    x = np.array([[-1.0, 2.0], [3.0, -4.0]])
    with hr.load(path, device="cuda", driver=fake) as m:
        want = m.main(x)
        got = m.main(FakeCudaArray(fake, x))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[2], np.maximum(x, 0))
    assert fake.calls["cuMemcpyDtoDAsync"] == 0  # the input read back, not copied on device


def test_a_failing_device_copy_names_the_command():
    m, fake, cpu, x = mlp()
    with m, cpu:
        dx = FakeCudaArray(fake, x)
        fake.fail["cuMemcpyDtoDAsync"] = CUresult.CUDA_ERROR_INVALID_VALUE
        with pytest.raises(hr.ExecutionError) as info:
            m.main(dx)
    assert str(info.value) == ("main: command 1 (copy): device to device copy of 25088 bytes "
                               "(cuMemcpyDtoDAsync) failed: CUDA_ERROR_INVALID_VALUE")


def test_a_result_kept_on_the_device_holds_the_device_inputs_until_it_is_freed():
    """No wait ends such a call, so the input's copy may still be queued: the caller's
    array must stay alive (unreused) until then. Freeing the result waits for the device."""
    import gc
    import weakref

    m, fake, cpu, x = mlp()
    with m, cpu:
        dx = FakeCudaArray(fake, x)
        alive = weakref.ref(dx)
        y = m.main(dx, results_on_device=True)
        del dx
        gc.collect()
        assert alive() is not None
        y.release()
        gc.collect()
        assert alive() is None


class HostTensor:
    """Like a PyTorch cpu tensor: its class has `__cuda_array_interface__`, which raises
    AttributeError for it, and numpy reads it through `__array__`."""

    def __init__(self, array: np.ndarray):
        self.array = array

    @property
    def __cuda_array_interface__(self) -> dict:
        raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor")

    def __array__(self, dtype=None, copy=None):
        return self.array


def test_an_object_whose_interface_raises_is_a_host_array():
    m, _, cpu, x = mlp()
    with m, cpu:
        np.testing.assert_array_equal(m.main(HostTensor(x)), m.main(x))


class DLPackOnly:
    """Another library's tensor that speaks DLPack alone (no `__cuda_array_interface__`):
    it hands over the capsule of an array it wraps, here the runtime's own DeviceArray, so
    what this proves is that the capsule the runtime makes is one the runtime reads, with the
    streams ordered both ways; not that another library's capsule reads (the layout is the
    DLPack header's, `dlpack.py`)."""

    def __init__(self, array: hr.DeviceArray):
        self.array = array

    def __dlpack__(self, **kw):
        return self.array.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_a_dlpack_tensor_goes_device_to_device_with_its_streams_ordered(tmp_path):
    import gc

    from hexir_runtime import dlpack

    m, fake = identity(tmp_path)
    with m:
        y = m.main(modules.A, results_on_device=True)
        assert y.__dlpack_device__() == (2, 0)
        before = Counter(fake.calls)
        z = m.main(DLPackOnly(y))
        delta = Counter(fake.calls)
        delta.subtract(before)
        np.testing.assert_array_equal(z, modules.A)
        # the producer's (ours) recorded and the legacy stream waits for it; then ours
        # follows the legacy stream: two events recorded, two waits
        assert (delta["cuEventRecord"], delta["cuStreamWaitEvent"]) == (2, 2)
        assert delta["cuMemcpyDtoDAsync"] == 1
        gc.collect()
        assert dlpack._exported == {}  # the capsule died unconsumed: its tensor was freed
        capsule = y.__dlpack__(stream=-1)  # no ordering asked: no event
        assert fake.calls["cuEventRecord"] == before["cuEventRecord"] + 2
        assert len(dlpack._exported) == 1
        del capsule
        gc.collect()
        assert dlpack._exported == {}


def test_a_dlpack_tensor_of_the_wrong_type_is_refused(tmp_path):
    mlp_module, fake = on_fake("mlp-f32-cuda.hxb")
    m, _ = identity(tmp_path, fake)
    with m, mlp_module:
        y = m.main(modules.A, results_on_device=True)
        with pytest.raises(hr.InputError) as info:
            mlp_module.main(DLPackOnly(y))
    assert str(info.value) == ("input 0 of main: expected 8x784xf32, got a float64 cuda array "
                               "of shape 2x2")


def test_a_dlpack_consumer_that_calls_the_deleter_frees_the_export(tmp_path):
    """The consumed path: a consumer renames the capsule and calls the tensor's deleter."""
    import ctypes
    import gc

    from hexir_runtime import dlpack

    m, fake = identity(tmp_path)
    with m:
        y = m.main(modules.A, results_on_device=True)
        capsule = y.__dlpack__()
        kind, address, dtype, shape, strides = dlpack.read(capsule)
        assert (kind, dtype, shape, strides) == (2, np.float64, (2, 2), None)
        assert address == y.__cuda_array_interface__["data"][0]
        set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
            ("PyCapsule_SetName", ctypes.pythonapi))
        get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
            ("PyCapsule_GetPointer", ctypes.pythonapi))
        managed = dlpack.DLManagedTensor.from_address(get(capsule, b"dltensor"))
        set_name(capsule, b"used_dltensor")
        held = len(fake.memory)  # the arena's buffer and y's
        del y
        gc.collect()
        assert len(fake.memory) == held  # the consumer holds y: not freed
        managed.deleter(ctypes.addressof(managed))
        del capsule, managed
        gc.collect()
        assert dlpack._exported == {} and len(fake.memory) == held - 1
    assert fake.held == dict.fromkeys(fake.held, 0)
