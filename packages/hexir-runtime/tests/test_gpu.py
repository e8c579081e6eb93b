"""On a machine with a GPU: the cuda backend for real, against the cpu backend.

Skipped cleanly where there is no CUDA driver or no cuda-python. The modules carry the
hand-written PTX matmul of `modules.ptx_matmul`, which the driver JIT-compiles for the GPU.
"""

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
import modules
from conftest import gpu_or_skip
from hexir_format import Command, Function, Slot
from hexir_runtime import hal

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def gpu():
    gpu_or_skip()


def test_selftest_roundtrip():
    device = hal.create_device("cuda")
    try:
        buf = device.allocate(32)
        device.write(buf, np.arange(4.0))
        device.wait()
        assert device.read(buf).view(np.float64).tolist() == [0.0, 1.0, 2.0, 3.0]
        device.release(buf)
    finally:
        device.close()


def test_builtin_on_the_gpu_matches_the_cpu(tmp_path, builtin_hxb):
    path = modules.write(tmp_path, "gpu.hxb", modules.builtin(modules.CUDA))
    with hr.load(path, device="cuda") as gpu, hr.load(builtin_hxb) as cpu:
        for _ in range(3):
            np.testing.assert_array_equal(gpu.run()[0], cpu.run()[0])


def test_the_compilers_cuda_fixture(builtin_hxb):
    with hr.load(builtin_hxb.parent / "builtin-cuda.hxb", device="cuda") as m:
        assert m.run()[0].tolist() == [[8.0, 17.0], [12.0, 14.0]]


@pytest.mark.parametrize("m,n,k", [(37, 53, 29), (128, 1, 300), (1, 257, 3), (64, 64, 64)])
def test_random_matmuls_match_the_cpu(tmp_path, m, n, k):
    """Inputs on the cpu, copied to the GPU, multiplied there, copied back."""
    exe = modules.matmul_exe("linear_0", m, n, k, modules.CUDA)
    a, b, c = exe.args
    slots = (Slot(modules.CPU, a), Slot(modules.CPU, b), Slot(modules.CUDA, a),
             Slot(modules.CUDA, b), Slot(modules.CUDA, c), Slot(modules.CPU, c))
    main = Function("main", (Command.input(0, 0), Command.input(1, 1), Command.copy(2, 0),
                             Command.copy(3, 1), Command.alloc(4, c.nbytes),
                             Command.dispatch(0, (2, 3, 4)), Command.copy(5, 4),
                             Command.output(5, 0)))
    path = modules.write(tmp_path, "mm.hxb", hf.Module(4, (main,), b"", (exe,), slots))
    rng = np.random.default_rng(m * n * k)
    with hr.load(path, device="cuda") as gpu:
        for _ in range(3):  # fresh inputs every call, the image loaded once
            x, y = rng.standard_normal(a.shape), rng.standard_normal(b.shape)
            np.testing.assert_allclose(gpu.main(x, y), x @ y, rtol=1e-12, atol=1e-12)


def test_a_fault_or_bad_image_is_a_one_line_error(tmp_path):
    module = modules.builtin(modules.CUDA)
    exe = module.executables[0]
    bad = hf.Executable(exe.name, exe.kind, exe.device, exe.args, (), b"not an image at all",
                        exe.grid, exe.block)
    path = modules.write(tmp_path, "bad.hxb", hf.Module(3, module.functions, module.rodata,
                                                        (bad,)))
    with hr.load(path, device="cuda") as m, pytest.raises(hr.ExecutionError) as info:
        m.run()
    assert "cuModuleLoadData" in str(info.value) and "CUDA_ERROR_" in str(info.value)


def test_graphs_on_and_off_agree_on_the_gpu():
    """The compiler's all-cuda MLP, each run of kernels one captured graph or launched one by
    one: the same bits, and the cpu module's values."""
    from conftest import FIXTURES

    rng = np.random.default_rng(2)
    with hr.load(FIXTURES / "mlp-f32-cuda.hxb", device="cuda") as on, \
            hr.load(FIXTURES / "mlp-f32-cuda.hxb", device="cuda", cuda_graphs=False) as off, \
            hr.load(FIXTURES / "mlp-f32.hxb") as cpu:
        for _ in range(3):
            x = rng.standard_normal((8, 784)).astype(np.float32)
            a, b = on.main(x), off.main(x)
            np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(a, cpu.main(x), rtol=1e-4, atol=1e-5)


def test_a_result_kept_on_the_gpu_feeds_the_next_call_and_an_out_array(tmp_path):
    """The runtime's own DeviceArray is a real `__cuda_array_interface__` producer: fed back
    as an input (device to device) and as an `out=` target."""
    t = hf.TensorType(hf.DType.F64, (2, 2))
    main = Function("main", (Command.input(0, 0), Command.output(0, 0)))
    path = modules.write(tmp_path, "id.hxb", hf.Module(4, (main,), b"", (),
                                                       (Slot(modules.CUDA, t),)))
    with hr.load(path, device="cuda") as m:
        y = m.main(modules.A, results_on_device=True)
        z = m.main(y, results_on_device=True)
        np.testing.assert_array_equal(np.asarray(z), modules.A)
        target = m.main(np.zeros((2, 2)), results_on_device=True)
        assert m.main(y, out=target) is target
        np.testing.assert_array_equal(target.numpy(), modules.A)
    np.testing.assert_array_equal(y.numpy(), modules.A)  # after close: y keeps its memory
