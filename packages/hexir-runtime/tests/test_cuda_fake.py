"""The cuda backend's logic on a CPU machine: the fake driver counts and emulates."""

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
import modules
from fake_driver import CUresult, FakeDriver


def load(tmp_path, module, **kw):
    path = modules.write(tmp_path, "m.hxb", module)
    fake = FakeDriver(**kw)
    return hr.load(path, device="cuda", driver=fake), fake


def test_builtin_on_cuda_loads_once_uploads_once_syncs_where_read(tmp_path):
    m, fake = load(tmp_path, modules.builtin(modules.CUDA))
    with m:
        for _ in range(5):
            assert m.run()[0].tolist() == [[8.0, 17.0], [12.0, 14.0]]
        assert [d.name for d in m.devices_used()] == ["cuda (Fake GPU)"]
    c = fake.calls
    assert (c["cuModuleLoadData"], c["cuModuleGetFunction"], c["cuModuleUnload"]) == (1, 1, 1)
    assert c["cuMemcpyHtoDAsync"] == 2  # the two constants, once per load
    assert c["cuMemcpyDtoHAsync"] == 5  # one PRINT per run
    # the kernel captured once into a graph, replayed per run; the host waits at the PRINT
    # (and once at close), never for the whole context
    assert c["cuLaunchKernel"] == 1 and c["cuGraphLaunch"] == 5
    assert c["cuStreamSynchronize"] == 5 + 1 and c["cuCtxSynchronize"] == 0
    # Per call nothing is allocated, zeroed or freed: the constants and the product's buffer
    # (the call's arena) and the PRINT's pinned buffer are made once per load, freed at close.
    assert c["cuMemAlloc"] == c["cuMemFree"] == 2 + 1 and fake.memory == {}
    assert c["cuMemHostAlloc"] == c["cuMemFreeHost"] == 1 and fake.pageable_copies == 2
    assert c["cuMemsetD8Async"] == 1
    name, geometry, addresses = fake.launches[0]
    assert name == "linear_0" and geometry == (1, 1, 1, 128, 1, 1) and len(addresses) == 3


def test_mlp_on_cuda_matches_cpu(tmp_path):
    rng = np.random.default_rng(1)
    cpu = hr.load(modules.write(tmp_path, "cpu.hxb", modules.mlp()))
    gpu_module = modules.mlp(modules.CUDA)
    m, fake = load(tmp_path, gpu_module)
    with m, cpu:
        for _ in range(4):
            x = rng.standard_normal((2, 3)).astype(np.float32)
            np.testing.assert_array_equal(m.main(x), cpu.main(x))
    c = fake.calls
    assert c["cuModuleLoadData"] == 3  # three kernels, each once
    assert c["cuMemcpyHtoDAsync"] == 2 + 4  # W and b once, x per call
    assert c["cuMemcpyDtoHAsync"] == 2 * 4  # the output and the PRINT per call


def test_heterogeneous_copies_exactly_what_crosses_devices(tmp_path):
    m, fake = load(tmp_path, modules.hetero())
    with m:
        names = [d.name for d in m.devices_used()]
        for _ in range(3):
            _relu, product = m.main(modules.A)
    assert names == ["cpu", "cuda (Fake GPU)"]
    assert product.tolist() == (modules.A @ modules.W).tolist()
    # per call: x to cuda (COPY); product back (COPY) and output 1 read; W uploaded once.
    assert fake.copies == {"cuMemcpyHtoDAsync": 1 + 3, "cuMemcpyDtoHAsync": 2 * 3,
                           "cuMemcpyDtoDAsync": 0}
    # per call the host waits where it reads: for the relu's input, and for output 1
    assert fake.calls["cuStreamSynchronize"] == 2 * 3 + 1  # and once at close


def test_heterogeneous_module_without_cuda_is_refused_naming_the_kernel(tmp_path):
    path = modules.write(tmp_path, "h.hxb", modules.hetero())
    with hr.load(path) as m, pytest.raises(hr.PlacementError) as info:
        m.main(modules.A)
    assert str(info.value) == ("kernel 'linear_0' is placed on cuda but the active device is "
                               "cpu: run it with --device=cuda (device='cuda' in Python), or "
                               "compile it for the cpu")


def test_launch_failure_names_entry_command_and_cuda_error(tmp_path):
    m, fake = load(tmp_path, modules.builtin(modules.CUDA))
    fake.fail["cuLaunchKernel"] = CUresult.CUDA_ERROR_LAUNCH_FAILED
    with m:
        with pytest.raises(hr.ExecutionError) as info:
            m.run()
        assert len(fake.memory) == 3  # the constants and the call's arena stay, for the next
        assert not fake.capturing  # the failed capture was ended
    assert str(info.value) == ("main: command 3 (dispatch): launch of 'linear_0' "
                               "(cuLaunchKernel) failed: CUDA_ERROR_LAUNCH_FAILED")
    assert fake.memory == {}


def test_fault_surfaces_at_the_next_read(tmp_path):
    m, fake = load(tmp_path, modules.builtin(modules.CUDA))
    fake.kernels = {}  # no emulation: inject a fault instead
    fake.fault = CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    with m, pytest.raises(hr.ExecutionError, match=r"main: command 4 \(print\): device "
                                                   r"synchronize \(cuStreamSynchronize\) "
                                                   "failed: CUDA_ERROR_ILLEGAL_ADDRESS"):
        m.run()


def test_bad_image_and_missing_function(tmp_path):
    module = modules.builtin(modules.CUDA)
    exe = module.executables[0]
    bad = hf.Executable(exe.name, exe.kind, exe.device, exe.args, (), b"BAD image", exe.grid,
                        exe.block)
    m, fake = load(tmp_path, hf.Module(3, module.functions, module.rodata, (bad,)))
    with m, pytest.raises(hr.ExecutionError, match=r"main: loading the device image of "
                                                  r"'linear_0' .* CUDA_ERROR_INVALID_IMAGE"):
        m.run()
    other = hf.Executable(exe.name, exe.kind, exe.device, exe.args, (), b"// no such kernel",
                          exe.grid, exe.block)
    m, fake = load(tmp_path, hf.Module(3, module.functions, module.rodata, (other,)))
    with m, pytest.raises(hr.ExecutionError, match=r"looking up kernel 'linear_0' .* "
                                                  r"CUDA_ERROR_NOT_FOUND"):
        m.run()
    assert fake.calls["cuLaunchKernel"] == 0 and fake.calls["cuMemAlloc"] == 0


def test_out_of_memory_is_an_execution_error(tmp_path):
    m, fake = load(tmp_path, modules.builtin(modules.CUDA), memory_limit=64)
    with m, pytest.raises(hr.ExecutionError, match=r"main: allocating a call's buffers \(32 "
                                                   r"bytes\): cuMemAlloc\(32\) failed: "
                                                   "CUDA_ERROR_OUT_OF_MEMORY"):
        m.run()
    assert fake.memory == {}


def test_cpu_module_with_cuda_available_stays_on_cpu(builtin_hxb):
    fake = FakeDriver()
    with hr.load(builtin_hxb, device="cuda", driver=fake) as m:
        assert m.run()[0].tolist() == [[8.0, 17.0], [12.0, 14.0]]
        assert [d.name for d in m.devices_used()] == ["cpu"]
    assert fake.calls["cuMemAlloc"] == 0 and fake.calls["cuLaunchKernel"] == 0


def test_the_compilers_cuda_fixture_runs_on_the_fake_driver(builtin_hxb):
    """fixtures/builtin-cuda.hxb (v4, written by hexir-compiler): constants on the GPU, the
    product copied to the cpu for the PRINT."""
    path = builtin_hxb.parent / "builtin-cuda.hxb"
    fake = FakeDriver()
    with hr.load(path, device="cuda", driver=fake) as m:
        for _ in range(2):
            assert m.run()[0].tolist() == [[8.0, 17.0], [12.0, 14.0]]
    assert fake.copies == {"cuMemcpyHtoDAsync": 2, "cuMemcpyDtoHAsync": 2,
                           "cuMemcpyDtoDAsync": 0}
    assert fake.calls["cuModuleLoadData"] == 1 and fake.calls["cuStreamSynchronize"] == 2 + 1


def test_a_v3_entry_without_kernels_still_needs_the_modules_device(tmp_path):
    """v3 buffers live on the device of the module's kernels, even in an entry that
    dispatches none of them."""
    module = modules.builtin(modules.CUDA)
    consts = hf.Function("consts", (hf.Command.const(0, 0, 32), hf.Command.print(0, 2, 2)))
    path = modules.write(tmp_path, "two.hxb", hf.Module(3, (*module.functions, consts),
                                                       module.rodata, module.executables))
    with hr.load(path) as m, pytest.raises(hr.PlacementError) as info:
        m.run("consts")
    assert str(info.value) == ("slot 0 (command 0, const) is placed on cuda but the active "
                               "device is cpu: run it with --device=cuda (device='cuda' in "
                               "Python), or compile it for the cpu")
    fake = FakeDriver()
    with hr.load(path, device="cuda", driver=fake) as m:
        assert m.run("consts")[0].tolist() == modules.A.tolist()
        assert [d.name for d in m.devices_used("consts")] == ["cuda (Fake GPU)"]


def test_reading_results_back_fails_with_entry_and_command(tmp_path):
    t = hf.TensorType(hf.DType.F64, (2, 2))
    main = hf.Function("main", (hf.Command.input(0, 0), hf.Command.output(0, 0)))
    m, fake = load(tmp_path, hf.Module(4, (main,), b"", (), (hf.Slot(hf.Device.CUDA, t),)))
    with m:
        assert m.main(modules.A).tolist() == modules.A.tolist()  # up and back down
        fake.fail["cuMemcpyDtoHAsync"] = CUresult.CUDA_ERROR_INVALID_VALUE
        with pytest.raises(hr.ExecutionError) as info:
            m.main(modules.A)
    assert str(info.value) == ("main: command 2 (end): device to host copy of 32 bytes "
                               "(cuMemcpyDtoHAsync) failed: CUDA_ERROR_INVALID_VALUE")
    assert fake.memory == {}


def test_a_kernel_argument_off_the_16_byte_promise_is_refused_before_any_launch():
    """Kernels may load 16 bytes at a time (hexir_format.plan.DEVICE_ARGUMENT_ALIGNMENT):
    binding a launch to an address that breaks it is a one-line DeviceError, and nothing
    was launched. (The runtime never makes such a buffer; a view 4 bytes in stands for one.)"""
    from hexir_runtime.hal import cuda

    module = modules.builtin(modules.CUDA)
    fake = FakeDriver()
    device = cuda.create(fake)
    try:
        kernel = device.load_executable(module.executables[0])
        whole = device.allocate(64)
        aligned = [device.view(whole, 0, 32), device.view(whole, 32, 32), whole]
        device.bind(kernel, aligned)
        skewed = [device.view(whole, 4, 16), *aligned[1:]]
        with pytest.raises(hr.DeviceError) as info:
            device.bind(kernel, skewed)
        assert str(info.value) == ("cuda (Fake GPU): argument #0 of 'linear_0' is at "
                                        f"{whole.handle + 4:#x}, not a multiple of 16 bytes "
                                        "as a cuda kernel may assume")
        assert fake.calls["cuLaunchKernel"] == 0
        device.release(whole)
    finally:
        device.close()


def test_a_dynamic_module_launches_each_binding_with_its_sizes_and_graph(tmp_path):
    """The kernel gets `batch` after its buffers and a grid evaluated for the call; each
    binding has its own program, captured as its own graph once and replayed after."""
    m, fake = load(tmp_path, modules.dynamic_relu_cuda())
    rng = np.random.default_rng(1)
    with m:
        for n in (2, 50, 2, 50, 2):
            x = rng.standard_normal((n, 3)).astype(np.float32)
            np.testing.assert_array_equal(m.main(x), np.maximum(x, 0))
        assert m.cache_info == (3, 2, 2)
    c = fake.calls
    assert c["cuLaunchKernel"] == 2 and c["cuGraphLaunch"] == 5  # one capture per binding
    # every run (a graph replays its launch): the geometry and `batch` of its call's sizes
    geometries = [(geometry, addresses[2:]) for _, geometry, addresses in fake.launches]
    small, large = ((1, 1, 1, 128, 1, 1), (2,)), ((2, 1, 1, 128, 1, 1), (50,))
    assert geometries == [small, large, small, large, small]
