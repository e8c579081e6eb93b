"""The example networks with every op on cuda (fixtures/<name>-cuda.hxb) against the cpu
modules (fixtures/<name>.hxb), on fresh random inputs.

On this machine the fake driver stands in for the GPU: it proves the modules are whole
(every kernel on cuda with a device image, weights uploaded once, only the input and the
output cross per call) and that the runtime drives them correctly. On a machine with a GPU
the `gpu` tests run the same comparison on the device and print the measured errors
(`pytest -s -m gpu`).
"""

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
from conftest import FIXTURES, gpu_or_skip
from fake_driver import FakeDriver

NAMES = ("mlp-f32", "mlp-f64", "transformer_block-f32", "transformer_block-f64")
TOLERANCE = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}
CALLS = 3


def random_inputs(cpu: hr.Module, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(t.shape).astype(t.dtype.numpy)
            for t in cpu["main"].signature.inputs]


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    want = want.astype(np.float64)
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


@pytest.mark.parametrize("name", NAMES)
def test_every_kernel_is_device_code(name):
    module = hf.parse((FIXTURES / f"{name}-cuda.hxb").read_bytes())
    assert module.executables
    for exe in module.executables:
        assert exe.device is hf.Device.CUDA and exe.image is not None, exe.name
        assert min(exe.grid) >= 1 and min(exe.block) >= 1 and max(exe.block) > 1, exe.name


@pytest.mark.parametrize("name", NAMES)
def test_all_cuda_module_on_the_fake_driver_matches_cpu(name):
    path = FIXTURES / f"{name}-cuda.hxb"
    module = hf.parse(path.read_bytes())
    fake = FakeDriver()
    weights = sum(c.op is hf.Op.CONST for c in module.function("main").commands)
    with hr.load(path, device="cuda", driver=fake) as gpu, \
            hr.load(FIXTURES / f"{name}.hxb") as cpu:
        for seed in range(CALLS):
            (x,) = random_inputs(cpu, seed)
            # The fake runs the module's PTX (tests/ptx_exec), the cpu its host images: the
            # same values up to rounding.
            want = cpu.main(x)
            assert relative_error(gpu.main(x), want) <= TOLERANCE[want.dtype]
    assert fake.copies == {"cuMemcpyHtoDAsync": weights + CALLS, "cuMemcpyDtoHAsync": CALLS,
                           "cuMemcpyDtoDAsync": 0}
    assert fake.calls["cuModuleLoadData"] == len(module.executables)



@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_all_cuda_module_on_the_gpu_matches_cpu(name):
    gpu_or_skip()
    with hr.load(FIXTURES / f"{name}-cuda.hxb", device="cuda") as gpu, \
            hr.load(FIXTURES / f"{name}.hxb") as cpu:
        errors = []
        for seed in range(5):
            (x,) = random_inputs(cpu, 100 + seed)
            got, want = gpu.main(x), cpu.main(x)
            errors.append(relative_error(got, want))
            assert errors[-1] <= TOLERANCE[want.dtype], (name, seed, errors[-1])
    print(f"\n{name}: cuda vs cpu max|diff|/max|cpu| over 5 random inputs: "
          f"max {max(errors):.3g}, median {float(np.median(errors)):.3g}")


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "cpu_name"), [("linear-relu-split.hxb", "linear-relu.hxb"),
                                                ("mlp-f32-mixed.hxb", "mlp-f32.hxb")])
def test_split_module_on_the_gpu_matches_cpu(name, cpu_name):
    gpu_or_skip()
    with hr.load(FIXTURES / name, device="cuda") as split, hr.load(FIXTURES / cpu_name) as cpu:
        if cpu["main"].signature.inputs:
            (x,) = random_inputs(cpu, 7)
            err = relative_error(split.main(x), cpu.main(x))
        else:
            err = relative_error(split.run()[0], cpu.run()[0])
    assert err <= 1e-5
    print(f"\n{name}: cuda+cpu vs cpu max|diff|/max|cpu|: {err:.3g}")
