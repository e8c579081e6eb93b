"""Compiled cpu kernels (version-5 host images) against numpy, with no compiler present.

The example networks' modules were compiled by examples/make_fixtures.py; here they run on
fresh random inputs against examples/reference.py, the networks written in numpy (float64),
which reads the weights from the example programs' text: f32 within 1e-5, f64 within 1e-12,
norm-wise. The mixed module (layers on cuda, softmax on the cpu) runs on the fake driver,
whose kernels are numpy, so its cpu part is the compiled code checked here.
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
from conftest import FIXTURES
from fake_driver import FakeDriver
from hexir_runtime.errors import DeviceError
from hexir_runtime.hal import cpu, hostcode, threads

EXAMPLES = FIXTURES.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import reference

PROGRAMS = {"mlp-f32": "mlp.mlir", "mlp-f64": "mlp-f64.mlir",
            "transformer_block-f32": "transformer_block.mlir",
            "transformer_block-f64": "transformer_block-f64.mlir"}
TOLERANCE = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}
SEEDS = (11, 12, 13)


@pytest.mark.parametrize("name", PROGRAMS)
def test_every_cpu_kernel_is_compiled_code(name):
    module = hf.parse((FIXTURES / f"{name}.hxb").read_bytes())
    assert module.version == 6  # a variant per x86-64 level, hexir's default
    assert sorted({e.cpu_level for e in module.executables}) == [2, 3, 4]
    for exe in module.executables:
        assert exe.device is hf.Device.CPU and bytes(exe.image[:4]) == b"\x7fELF", exe.name


@pytest.mark.parametrize("name", PROGRAMS)
def test_example_matches_numpy_on_fresh_inputs(name):
    program = EXAMPLES / PROGRAMS[name]
    with hr.load(FIXTURES / f"{name}.hxb") as module:
        for seed in SEEDS:
            x = reference.sample_input(program, np.random.default_rng(seed))
            got = module.main(x)
            assert got.dtype == x.dtype
            assert reference.relative_error(got, reference.evaluate(program, x)) \
                <= TOLERANCE[x.dtype]


def test_mixed_mlp_matches_numpy_on_fresh_inputs():
    path = FIXTURES / "mlp-f32-mixed.hxb"
    fake = FakeDriver()
    program = EXAMPLES / "mlp.mlir"
    with hr.load(path, device="cuda", driver=fake) as module:
        for seed in SEEDS:
            x = reference.sample_input(program, np.random.default_rng(seed))
            assert reference.relative_error(module.main(x), reference.evaluate(program, x)) \
                <= 1e-5


def test_splitting_the_cpu_grid_over_threads_changes_no_bit(monkeypatch):
    """Every kernel split across a three-thread pool (the grain forced to 0) gives bit for
    bit what the calling thread alone gives: the chunks are disjoint rows of the same loops."""
    path, program = FIXTURES / "transformer_block-f32.hxb", EXAMPLES / "transformer_block.mlir"
    x = reference.sample_input(program, np.random.default_rng(5))
    monkeypatch.setattr(cpu, "PARALLEL_GRAIN", 1 << 62)
    with hr.load(path) as module:
        alone = module.main(x)
    monkeypatch.setattr(cpu, "PARALLEL_GRAIN", 0)
    pool = threads.Pool(3)
    monkeypatch.setattr(threads, "shared", lambda: pool)
    try:
        with hr.load(path) as module:
            np.testing.assert_array_equal(module.main(x), alone)
            per_call = pool.jobs
            for _ in range(19):
                np.testing.assert_array_equal(module.main(x), alone)
    finally:
        pool.close()
    assert per_call > 0 and pool.jobs == 20 * per_call  # every split kernel, every call


def test_a_module_that_calls_back_for_its_matmul_is_refused_in_one_line(tmp_path):
    """`matmul-callback.hxb` was compiled before every matmul became loops: its kernel calls
    `hexir_rt_matmul`, the runtime's BLAS callback, which no longer exists. Loading its image is
    refused with a line that says to recompile; so is loading the module through the API or
    hexir-run (the validator applies the same linking rule), and nothing runs. A small matmul's
    image needs nothing (the built-in program)."""
    from hexir_runtime import cli
    module = hf.parse((FIXTURES / "matmul-callback.hxb").read_bytes())
    (exe,) = module.executables
    recompile = "calls 'hexir_rt_matmul', the runtime routine .* recompile the module$"
    with pytest.raises(DeviceError, match=recompile):
        cpu.CpuDevice().load_executable(exe)
    x = np.ones((32, 32), np.float32)
    with pytest.raises(hr.HexirError) as e:
        hr.load(FIXTURES / "matmul-callback.hxb")
    assert "\n" not in str(e.value) and "recompile the module" in str(e.value)
    np.save(tmp_path / "x.npy", x)
    out, err = io.StringIO(), io.StringIO()
    status = cli.main([str(FIXTURES / "matmul-callback.hxb"), f"--input=@{tmp_path}/x.npy"],
                      out, err)
    assert status != 0 and out.getvalue() == "" and err.getvalue().count("\n") == 1
    assert "host image of kernel 'linear_0': calls 'hexir_rt_matmul'" in err.getvalue()
    small, *_ = hf.parse((FIXTURES / "builtin-cpu.hxb").read_bytes()).executables
    hostcode.load(small.image, small.name, len(small.args), what="the built-in linear").close()
    with hr.load(FIXTURES / "builtin-cpu.hxb") as m:
        (printed,) = m.run("main")
    assert printed.tolist() == [[8.0, 17.0], [12.0, 14.0]]


def test_an_image_for_a_newer_cpu_level_is_refused_before_it_runs(monkeypatch):
    """The module records the x86-64 level each host image was compiled for; a machine below
    it is told so in one line instead of dying of an illegal instruction."""
    exe, *_ = hf.parse((FIXTURES / "builtin-cpu.hxb").read_bytes()).executables
    assert exe.cpu_level == 2  # the lowest of the compiler's default levels
    newer = hf.Executable(exe.name, exe.kind, exe.device, exe.args, exe.params, exe.image,
                          exe.grid, exe.block, cpu_level=4)
    monkeypatch.setattr(hostcode, "host_level", lambda: 3)
    with pytest.raises(DeviceError) as caught:
        cpu.CpuDevice().load_executable(newer)
    assert str(caught.value) == ("host image of kernel 'linear_0' is code for x86-64-v4, which "
                                 "this CPU (x86-64-v3) cannot run; compile with "
                                 "-target=cpu:x86-64-v3")


def test_this_machine_runs_at_least_the_default_level():
    assert hostcode.host_level() >= 2


@pytest.mark.parametrize("name", PROGRAMS)
def test_every_level_the_host_runs_gives_the_same_answer(name, monkeypatch):
    """Each variant of a default module (x86-64-v2, -v3, -v4), picked by capping the level
    with HEXIR_CPU_LEVEL, matches numpy; the levels this CPU cannot run are skipped."""
    data = np.load(FIXTURES / f"{name}.npz")
    x, want = data["input_0"], data["output_0"]
    ran = []
    for level in (2, 3, 4):
        if level > hostcode.host_level():
            continue
        monkeypatch.setenv("HEXIR_CPU_LEVEL", f"x86-64-v{level}")
        with hr.load(FIXTURES / f"{name}.hxb") as m:
            assert m.cpu_code("main").startswith(f"x86-64-v{level} (of x86-64-v2, ")
            plan = m._resident.plan
            assert {plan.module.executables[i].cpu_level
                    for i in plan.entries["main"].executables} == {level}
            got = m.main(x)
        scale = np.abs(want).max()
        assert np.abs(got - want).max() <= TOLERANCE[want.dtype] * scale, level
        ran.append(level)
    assert 2 in ran


def test_a_cpu_level_setting_that_is_no_level_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("HEXIR_CPU_LEVEL", "v3")
    with pytest.raises(DeviceError, match=r"^HEXIR_CPU_LEVEL='v3': expected one of x86-64, "
                                          r"x86-64-v2, x86-64-v3, x86-64-v4$"):
        hr.load(FIXTURES / "builtin-cpu.hxb")


def test_hexir_run_says_which_host_code_it_runs(monkeypatch):
    from hexir_runtime import cli

    monkeypatch.setenv("HEXIR_CPU_LEVEL", "x86-64-v2")
    out, err = io.StringIO(), io.StringIO()
    assert cli.main([str(FIXTURES / "builtin-cpu.hxb")], out, err) == 0
    device = next(line for line in err.getvalue().splitlines() if line.startswith("device"))
    assert device.endswith(", host code x86-64-v2 (of x86-64-v2, x86-64-v3, x86-64-v4)")
