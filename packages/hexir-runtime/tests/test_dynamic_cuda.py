"""A dynamic module with every op on cuda, run at several sizes from one load.

`fixtures/attention-dynamic-cuda.hxb` is `attention-dynamic.hxb` compiled with every op on
cuda: its kernels stride over a fixed grid and take `batch` and `seq` as operands. Each
binding (a call's sizes) gets its own program, arena and CUDA graphs, captured on its first
call and replayed by every later call of the same sizes. On this machine the fake driver runs
the kernels' PTX thread by thread (it proves the runtime's binding, capture and replay logic
and the kernels' indexing, not the GPU's numerics); on a machine with a GPU the `gpu` test
runs the same sizes on the device and prints the measured errors.
"""

from __future__ import annotations

import numpy as np
import pytest

import hexir_runtime as hr
from conftest import FIXTURES, gpu_or_skip
from fake_driver import FakeDriver
from hexir_runtime.hal import cuda

MODULE = FIXTURES / "attention-dynamic-cuda.hxb"
#: Sizes in call order: three distinct bindings, then each again.
SIZES = ((2, 5), (3, 17), (1, 64), (2, 5), (3, 17), (1, 64))


def _attention(q, k, v):
    s = q.astype(np.float64) @ k.transpose(0, 2, 1) * 0.35355339
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def _run_sizes(monkeypatch, **load) -> list[float]:
    """Every size of SIZES through one load, checked against numpy; the graphs captured are
    counted: one set per binding, none on a repeated size."""
    captured: list[int] = []
    original = cuda.CudaDevice.capture

    def capture(self, steps):
        captured.append(len(steps))
        return original(self, steps)

    monkeypatch.setattr(cuda.CudaDevice, "capture", capture)
    rng = np.random.default_rng(0)
    errors, per_binding = [], {}
    with hr.load(MODULE, device="cuda", **load) as m:
        assert str(m.main.signature.inputs[0]) == "batchxseqx8xf32"
        for batch, seq in SIZES:
            q, k, v = (rng.standard_normal((batch, seq, 8)).astype(np.float32)
                       for _ in range(3))
            before = len(captured)
            got = m.main(q, k, v)
            assert got.shape == (batch, seq, 8)
            want = _attention(q, k, v)
            errors.append(float(np.abs(got - want).max() / np.abs(want).max()))
            assert errors[-1] <= 1e-5, (batch, seq, errors[-1])
            per_binding.setdefault((batch, seq), []).append(len(captured) - before)
        assert m.cache_info == (3, 3, 3)
    for size, counts in per_binding.items():
        assert counts[0] >= 1 and counts[1:] == [0], (size, counts)
    return errors


def test_the_fake_driver_runs_every_size_with_a_graph_per_binding(monkeypatch):
    fake = FakeDriver()
    _run_sizes(monkeypatch, driver=fake)
    assert fake.calls["cuGraphLaunch"] == len(SIZES)



@pytest.mark.gpu
def test_on_the_gpu_every_size_matches_numpy_with_a_graph_per_binding(monkeypatch):
    gpu_or_skip()
    errors = _run_sizes(monkeypatch)
    print(f"\nattention-dynamic-cuda: {len(SIZES)} calls at {len(set(SIZES))} sizes, "
          f"max|diff|/max|numpy| max {max(errors):.3g}")
