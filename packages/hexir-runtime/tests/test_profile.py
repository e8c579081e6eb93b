"""`Module.profile` (what `hexir-run --profile` prints) and `Module.cpu_threads`."""

from __future__ import annotations

import numpy as np
import pytest

import hexir_runtime as hr
from conftest import FIXTURES
from hexir_format import Device, DType, Executable, KernelKind, Op, TensorType
from hexir_runtime import profile as prof


def test_the_mlp_profile_times_every_kernel_and_counts_the_matmuls_work():
    x = np.load(FIXTURES / "mlp-f32.npz")["input_0"]
    with hr.load(FIXTURES / "mlp-f32.hxb") as m:
        p = m.profile("main", x, calls=5)
        plan = m._resident.plan
        kernels = [plan.module.executables[c.executable].name  # the host's variant's
                   for c in plan.entries["main"].commands if c.op is Op.DISPATCH]
    assert [k.name for k in p.kernels] == kernels  # one per DISPATCH, in order
    assert p.calls == 5 and p.call_seconds > 0 and all(k.seconds > 0 for k in p.kernels)
    assert p.overhead_seconds == max(0.0, p.call_seconds - p.kernel_seconds)
    first = p.kernels[0]  # linear_add_relu_0: 8x784 @ 784x256
    assert first.flops == 2 * 8 * 784 * 256 and p.kernels[-1].flops is None  # the softmax
    assert first.nbytes == sum(t.nbytes for t in first.exe.args)
    assert first.gflops == pytest.approx(first.flops / first.seconds / 1e9)
    # f32 at the level of the host's variant, measured on the pool's threads
    assert first.peak_flops == p.peak_flops[first.exe.cpu_level, "f32"] > 0
    assert p.peak_threads == p.threads
    assert p.kernels[-1].bound == "memory" and first.bound in ("compute", "memory")
    text = str(p).splitlines()
    assert text[0] == f"profile       : main, 5 calls, {p.threads} cpu thread" + \
        "s" * (p.threads != 1)
    assert [line.split()[0] for line in text[-len(kernels):]] == kernels


@pytest.mark.parametrize("fast", [0, 2, 4], ids=["before", "between-calls", "after"])
def test_the_compute_peak_is_the_best_reading_around_and_between_the_calls(monkeypatch, fast):
    """A VM's neighbours take its cores for seconds: the peak loop runs before the kernels
    are timed, after each timed call and at the end, once per level, and the fastest
    reading is kept (a fake loop here: one reading fast, at index `fast`, the rest slow).
    """
    calls = []

    def peak(level, runs=prof.PEAK_RUNS):
        calls.append((level, runs))
        return 2, 300e9 if len(calls) - 1 == fast else 100e9

    monkeypatch.setattr(prof, "_compute_peak", peak)
    x = np.load(FIXTURES / "mlp-f32.npz")["input_0"]
    with hr.load(FIXTURES / "mlp-f32.hxb") as m:
        p = m.profile("main", x, calls=3)
    level = p.kernels[0].exe.cpu_level  # every kernel of the fixture at the host's level
    assert calls == [(level, prof.PEAK_RUNS), *[(level, 1)] * 3, (level, prof.PEAK_RUNS)]
    assert p.peak_flops == {(level, "f32"): 300e9} and p.peak_threads == 2
    assert p.kernels[0].peak_flops == 300e9


def test_work_is_counted_for_matmuls_and_convolutions_only():
    def exe(name, *shapes):
        return Executable(name, KernelKind.GENERIC, Device.CPU,
                          tuple(TensorType(DType.F32, s) for s in shapes))

    assert prof.work(exe("matmul_3", (2, 5, 7), (2, 7, 3), (2, 5, 3))) == 2 * 2 * 5 * 3 * 7
    assert prof.work(exe("linear_add_0", (7,), (7, 3), (3,), (3,))) == 2 * 3 * 7
    assert prof.work(exe("conv_add_relu_1", (1, 3, 8, 8), (4, 3, 3, 3), (4,), (1, 4, 6, 6))) \
        == 2 * 4 * 36 * 27
    assert prof.work(exe("relu_2", (4,), (4,))) is None
    # the weight packed by the compiler: [panels, *kernel, C/g, lanes], here 20 channels in
    # two panels of 16 (ResNet-18's convolutions, all of them, carry such weights)
    assert prof.work(exe("conv_add_relu_4", (1, 3, 8, 8), (2, 3, 3, 3, 16), (20, 1, 1),
                         (1, 20, 6, 6))) == 2 * 20 * 36 * 27
    assert prof.work(exe("conv_add_7", (1, 64, 8, 8), (8, 1, 1, 64, 16), (128, 1, 1),
                         (1, 128, 4, 4))) == 2 * 128 * 16 * 64
    # neither layout: panels that could not hold the channels, or one panel too many
    assert prof.work(exe("conv_9", (1, 3, 8, 8), (2, 4, 3, 3, 8), (1, 4, 6, 6))) is None
    assert prof.work(exe("conv_9", (1, 3, 8, 8), (1, 3, 3, 3, 16), (1, 20, 6, 6))) is None


def test_cpu_threads_is_hexir_cpu_threads(monkeypatch):
    with hr.load(FIXTURES / "builtin-cpu.hxb") as m:
        monkeypatch.setenv("HEXIR_CPU_THREADS", "3")
        assert m.cpu_threads == 3
        monkeypatch.setenv("HEXIR_CPU_THREADS", "0")
        with pytest.raises(hr.DeviceError,
                           match="HEXIR_CPU_THREADS='0': expected an integer from 1 to 1024"):
            m.cpu_threads  # noqa: B018
