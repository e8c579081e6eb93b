"""Compiler-built modules split across cpu and cuda (fixtures/*-split, *-mixed): the runtime
performs exactly the transfers the compiler inserted, and the numbers equal the all-cpu
module's. The fake driver stands in for the GPU and counts every copy."""

import subprocess
import sys

import numpy as np
import pytest

import hexir_runtime as hr
from conftest import FIXTURES
from fake_driver import FakeDriver

CALLS = 4


def on_fake_cuda(name: str):
    path = FIXTURES / name
    fake = FakeDriver()
    return hr.load(path, device="cuda", driver=fake), fake


def test_readme_example_linear_on_cuda_relu_on_cpu():
    split, fake = on_fake_cuda("linear-relu-split.hxb")
    with split, hr.load(FIXTURES / "linear-relu.hxb") as cpu:
        assert [d.name for d in split.devices_used()] == ["cpu", "cuda (Fake GPU)"]
        for _ in range(CALLS):
            (got,) = split.run()
            (want,) = cpu.run()
            np.testing.assert_array_equal(got, want)
    assert want.tolist() == [[8.0, 17.0], [12.0, 14.0]]
    # A and W go to the GPU once per load; the product comes back once per run, for the relu.
    assert fake.copies == {"cuMemcpyHtoDAsync": 2, "cuMemcpyDtoHAsync": CALLS,
                           "cuMemcpyDtoDAsync": 0}
    assert [name for name, *_ in fake.launches] == ["linear_0"] * CALLS


def test_mlp_with_its_layers_on_cuda_and_softmax_on_cpu():
    mixed, fake = on_fake_cuda("mlp-f32-mixed.hxb")
    rng = np.random.default_rng(5)
    with mixed, hr.load(FIXTURES / "mlp-f32.hxb") as cpu:
        for _ in range(CALLS):
            x = rng.standard_normal((8, 784)).astype(np.float32)
            # cuda kernels emulated in numpy (the fake), cpu kernels compiled: rounding apart
            # (the cpu sums 784 products in k order, numpy's BLAS in blocks: logits 1e-6
            # apart, probabilities up to 6e-7)
            np.testing.assert_allclose(mixed.main(x), cpu.main(x), rtol=1e-5, atol=1e-6)
        expected = np.load(FIXTURES / "mlp-f32.npz")
        got = mixed.main(expected["input_0"])
    np.testing.assert_allclose(got, expected["output_0"], rtol=1e-5, atol=1e-7)
    # Six weights and biases uploaded once; per call the input goes up and the logits come
    # back for the softmax, and nothing else crosses.
    assert fake.copies == {"cuMemcpyHtoDAsync": 6 + CALLS + 1, "cuMemcpyDtoHAsync": CALLS + 1,
                           "cuMemcpyDtoDAsync": 0}


@pytest.mark.parametrize(("name", "inputs", "kernel"), [
    ("linear-relu-split.hxb", [], "linear_0"),
    ("mlp-f32-mixed.hxb", ["--input=8x784xf32=0"], "linear_add_relu_0")])
def test_split_module_on_cpu_only_is_refused_naming_the_first_cuda_kernel(name, inputs, kernel):
    proc = subprocess.run([sys.executable, "-m", "hexir_runtime", "--device=cpu", "--quiet",
                           str(FIXTURES / name), *inputs], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (f"hexir-run: kernel '{kernel}' is placed on cuda but the active "
                           "device is cpu: run it with --device=cuda (device='cuda' in Python), "
                           "or compile it for the cpu\n")
