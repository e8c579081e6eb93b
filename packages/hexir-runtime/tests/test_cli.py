"""hexir-run in-process: arguments, exit codes, inputs and outputs (lit covers the texts)."""

import io
import os
import stat
from pathlib import Path

import numpy as np
import pytest

import modules
from hexir_runtime.cli import main


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(map(str, argv)), out, err)
    return code, out.getvalue(), err.getvalue()


def test_quiet_run_prints_only_the_program_output(builtin_hxb):
    assert run("--quiet", builtin_hxb) == (0, "8.000000 17.000000 \n12.000000 14.000000 \n", "")


def test_stdout_has_the_output_and_the_results_and_stderr_the_banner(tmp_path):
    """Results print unless --output takes them, --quiet or not; the banner (what was
    loaded, on which devices) goes to stderr, and --quiet leaves it out."""
    path = modules.write(tmp_path, "mlp.hxb", modules.mlp())
    code, out, err = run(path, "--input=2x3xf32=1", "--quiet")
    assert (code, err) == (0, "") and "\nresult[0]: 2x4xf32\n[[" in out
    code, loud, banner = run(path, "--input=2x3xf32=1")
    assert code == 0 and loud == out
    assert banner.startswith(f"module        : {path}\n") and banner.endswith("--\n")


@pytest.mark.parametrize("argv,message", [
    ((), "no module given"),
    (("--device=tpu", "x.hxb"), "unknown device 'tpu'; expected cpu or cuda"),
    (("--bogus", "x.hxb"), "unknown option '--bogus'"),
    (("a.hxb", "b.hxb"), "one module at a time"),
    (("--entry", "x.hxb"), "--entry needs a value"),
])
def test_bad_arguments_exit_2_with_one_line(argv, message):
    code, out, err = run(*argv)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("hexir-run: ") and message in err


def test_help_names_every_form_of_input_and_output(builtin_hxb):
    code, out, _ = run("--help")
    assert code == 0 and out.startswith("usage: hexir-run <module.hxb>")
    synopsis, explained = out.split("\n\n", 1)
    for form in ("--input=[NAME=]TYPE=VALUES", "--input=[NAME=]@FILE.npy", "--input=@FILE.npz",
                 "--output=@FILE.npz", "--output=@FILE.npy", "--version", "--selftest"):
        assert form in synopsis, form
    for form in ("--input=TYPE=VALUES", "--input=@FILE.npy", "--input=NAME=TYPE=VALUES",
                 "--input=NAME=@FILE.npy", "--input=@FILE.npz", "--output=@FILE.npz",
                 "--output=@FILE.npy", "--version", "--selftest"):
        assert form in explained, form


def test_version():
    import hexir_format
    import hexir_runtime

    code, out, err = run("--version")
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"hexir-run {hexir_runtime.__version__} (hexir-runtime)",
                                f"hexir-format {hexir_format.__version__}",
                                f"numpy {np.__version__}"]


def test_inputs_from_text_and_npy_and_outputs_to_npz(tmp_path):
    module = modules.mlp()
    path = modules.write(tmp_path, "mlp.hxb", module)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 3
    np.save(tmp_path / "x.npy", x)
    want = modules.mlp_reference(x, module)
    values = ",".join(str(float(v)) for v in x.ravel())
    for arg in (f"--input=@{tmp_path / 'x.npy'}", f"--input=2x3xf32={values}"):
        code, out, err = run(path, arg, f"--output=@{tmp_path / 'y.npz'}", "--quiet")
        assert (code, err) == (0, "")
        with np.load(tmp_path / "y.npz") as z:
            assert z.files == ["output_0"]
            np.testing.assert_allclose(z["output_0"], want, rtol=1e-6)
    code, out, err = run(path, f"--input=@{tmp_path / 'x.npy'}")
    assert code == 0 and "result[0]: 2x4xf32\n[[" in out
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".hexir-run-")] == []


@pytest.mark.parametrize("arg,message", [
    ("--input=2x3xf64=1", "input 0 of main: expected 2x3xf32, got a float64 array of shape 2x3"),
    ("--input=3x2xf32=1", "input 0 of main: expected 2x3xf32, got shape 3x2"),
    ("--entry=main", "main takes 1 input (2x3xf32), got 0"),
    ("--entry=other", "other failed: not found: no entry point 'other'"),
])
def test_bad_inputs_exit_1_with_one_line(tmp_path, arg, message):
    path = modules.write(tmp_path, "mlp.hxb", modules.mlp())
    code, _, err = run(path, arg, "--quiet")
    assert code == 1 and err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize("arg, message", [
    ("--input=2x3xq8=1", "'q8' is not an element type"),
    ("--input=12", "expected [NAME=]TYPE=VALUES"),
    ("--input=2x3xf32=1,2", "--input=2x3xf32=1,2: 2x3xf32 holds 6 values, 2 given"),
    ("--input=2x3xf32=a", "values must be numbers"),
    ("--input=@/nonexistent.npy", "cannot read: No such file or directory"),
])
def test_a_malformed_input_argument_exits_2_with_one_line(tmp_path, arg, message):
    """A bad --input is a bad argument (exit 2, as documented), not a failed run."""
    path = modules.write(tmp_path, "mlp.hxb", modules.mlp())
    code, out, err = run(path, arg, "--quiet")
    assert (code, out) == (2, "") and err.count("\n") == 1 and message in err, err


def test_asking_for_cuda_for_a_module_with_no_cuda_kernels_says_so(builtin_hxb):
    """The user asked for the GPU: never a silent cpu run."""
    code, out, err = run("--device=cuda", builtin_hxb)
    assert (code, out) == (1, "")
    assert err == (f"hexir-run: --device=cuda: '{builtin_hxb}' has no cuda kernels (its entry "
                   "main runs on the cpu alone); compile it with -placement=cuda (or "
                   "-placement=OP=cuda) to run on the GPU, or leave out --device=cuda\n")


def test_a_cuda_module_on_the_cpu_says_what_to_do(builtin_hxb):
    code, out, err = run(builtin_hxb.parent / "builtin-cuda.hxb")
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert err.endswith("placed on cuda but the active device is cpu: run it with "
                        "--device=cuda (device='cuda' in Python), or compile it for the cpu\n")


def test_output_to_npy_needs_exactly_one_result(tmp_path):
    path = modules.write(tmp_path, "mlp.hxb", modules.mlp())
    code, _, err = run(path, "--input=2x3xf32=1", f"--output=@{tmp_path / 'y.npy'}", "-q")
    assert code == 0 and np.load(tmp_path / "y.npy").shape == (2, 4)
    code, _, err = run(path, "--input=2x3xf32=1", f"--output={tmp_path / 'y.npy'}", "-q")
    assert code == 1 and "expected @FILE.npz or @FILE.npy" in err


def test_unwritable_output_is_refused_before_anything_runs(tmp_path):
    path = modules.write(tmp_path, "mlp.hxb", modules.mlp())
    code, out, err = run(path, "--input=2x3xf32=1", f"--output=@{tmp_path / 'no' / 'y.npz'}")
    assert code == 1 and out == ""  # no banner: the run never started
    assert err == f"hexir-run: --output=@{tmp_path / 'no' / 'y.npz'}: cannot write in " \
                  f"{tmp_path / 'no'}: no such directory\n"


def _threads() -> str:
    """The banner's count of the cpu pool's threads (HEXIR_CPU_THREADS, else the cores)."""
    from hexir_runtime.hal import threads

    n = threads.cpu_threads()
    return f"{n} thread" + ("s" if n != 1 else "")


_THREADS = _threads()


def test_banner_is_byte_exact(builtin_hxb):
    code, _, err = run(builtin_hxb)
    assert code == 0
    assert err.splitlines()[3:8] == [
        "  [0] symbols      offset=120        size=40",
        "  [1] program      offset=160        size=176",
        "  [2] rodata       offset=336        size=64",
        "  [3] executables  offset=400        size=88",
        f"device        : cpu, {_THREADS}",
    ]


def test_print_uses_c_percent_f():
    from hexir_runtime.cli import print_rows
    out = io.StringIO()
    print_rows(np.array([[-0.0, 1e20, 1 / 3], [np.inf, -np.inf, np.nan]]), out)
    assert out.getvalue() == ("-0.000000 100000000000000000000.000000 0.333333 \n"
                              "inf -inf nan \n")


def test_cuda_paths_of_the_cli_over_the_fake_driver(monkeypatch, builtin_hxb):
    """What lit/cuda-device.test checks on a GPU, here with the fake driver."""
    from fake_driver import FakeDriver
    from hexir_runtime.hal import cuda as cuda_backend

    path = builtin_hxb.parent / "builtin-cuda.hxb"
    fake = FakeDriver()
    monkeypatch.setattr(cuda_backend, "load_driver", lambda: fake)
    code, out, err = run("--device=cuda", path)
    assert code == 0 and out == "8.000000 17.000000 \n12.000000 14.000000 \n"
    assert err.splitlines()[-3:] == [f"device        : cpu, {_THREADS}",
                                     "device        : cuda (Fake GPU)",
                                     "--"]
    assert run("--selftest", "--device=cuda") == (
        0, "device        : cuda (Fake GPU)\nhal roundtrip : ok (32 bytes)\n", "")
    assert fake.memory == {} and fake.context_refs == 0


def test_a_fixture_npz_feeds_back_and_the_output_names_its_arrays_the_same_way(tmp_path):
    """`input_<i>` arrays are the inputs (the expected `output_<i>` beside them are not), and
    --output writes `output_<i>`: the file a run writes compares with the fixture by name."""
    fixtures = Path(__file__).resolve().parents[3] / "fixtures"
    y = tmp_path / "y.npz"
    code, _, err = run(fixtures / "mlp-f32.hxb", f"--input=@{fixtures / 'mlp-f32.npz'}",
                       f"--output=@{y}", "--quiet")
    assert (code, err) == (0, "")
    with np.load(y) as got, np.load(fixtures / "mlp-f32.npz") as want:
        assert got.files == ["output_0"]
        np.testing.assert_allclose(got["output_0"], want["output_0"], rtol=1e-5)


def test_npz_inputs_are_taken_by_index_and_a_gap_is_refused(tmp_path):
    module = modules.mlp()
    path = modules.write(tmp_path, "mlp.hxb", module)
    x = np.ones((2, 3), np.float32)
    np.savez(tmp_path / "named.npz", output_0=np.zeros(1), input_0=x)
    np.savez(tmp_path / "plain.npz", x)
    for name in ("named.npz", "plain.npz"):
        code, _, err = run(path, f"--input=@{tmp_path / name}", "--quiet")
        assert (code, err) == (0, ""), name
    np.savez(tmp_path / "gap.npz", input_1=x)
    code, _, err = run(path, f"--input=@{tmp_path / 'gap.npz'}")
    assert code == 1 and "arrays input_1 skip an index; expected input_0 to input_0" in err


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_output_files_follow_the_umask(tmp_path, umask):
    path = modules.write(tmp_path, "mlp.hxb", modules.mlp())
    old = os.umask(umask)
    try:
        code, _, err = run(path, "--input=2x3xf32=1", f"--output=@{tmp_path / 'y.npz'}", "-q")
    finally:
        os.umask(old)
    assert (code, err) == (0, "")
    assert stat.S_IMODE((tmp_path / "y.npz").stat().st_mode) == 0o666 & ~umask


def _run_limited(*argv: str, env: dict[str, str], address_space: int | None = None):
    """hexir-run in a fresh process (the thread pool is made once per process), optionally
    under an address-space limit."""
    import resource
    import subprocess
    import sys

    def limit():
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    return subprocess.run([sys.executable, "-m", "hexir_runtime", *argv], check=False,
                          env={**os.environ, **env}, preexec_fn=limit, capture_output=True,
                          text=True, timeout=300)


MLP = Path(__file__).resolve().parents[3] / "fixtures/mlp-f32.hxb"
MLP_INPUT = f"--input=@{MLP.with_suffix('.npz')}"


@pytest.mark.parametrize("name, value, allowed", [
    ("HEXIR_CPU_THREADS", "1000000000", "an integer from 1 to 1024"),
    ("HEXIR_CPU_THREADS", "0", "an integer from 1 to 1024"),
    ("HEXIR_CPU_THREADS", "many", "an integer from 1 to 1024"),
    ("HEXIR_CPU_SPIN", str(2**70), "an integer from 0 to 4294967296"),
    ("HEXIR_CPU_SPIN", "-1", "an integer from 0 to 4294967296"),
])
def test_a_setting_out_of_its_range_is_one_line_naming_it(name, value, allowed):
    done = _run_limited(str(MLP), MLP_INPUT, env={name: value})
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr == f"hexir-run: {name}={value!r}: expected {allowed}\n"


def test_threads_that_cannot_start_are_one_device_error():
    """1,000 threads' stacks do not fit a 2 GiB address space: the pool says so in one
    DeviceError (which hexir-run prints as its one line), having stopped the workers it
    started."""
    import subprocess
    import sys

    script = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
              "from hexir_runtime.hal import threads\n"
              "from hexir_runtime.errors import DeviceError\n"
              "try:\n    threads.Pool(1000)\nexcept DeviceError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True,
                          text=True, timeout=300)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.startswith("cpu: cannot start the thread pool's 999 workers "
                                  "(HEXIR_CPU_THREADS=1000): "), done.stdout
    assert done.stdout.endswith("; set HEXIR_CPU_THREADS lower\n") and \
        done.stdout.count("\n") == 1


def test_running_out_of_memory_is_one_line(monkeypatch, builtin_hxb):
    """Wherever memory runs out (here, a call), the run ends with one line, not a traceback."""
    from hexir_runtime.api import Module

    def exhausted(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(Module, "execute", exhausted)
    code, _, err = run(builtin_hxb, "--quiet")
    assert (code, err) == (1, f"hexir-run: out of memory running '{builtin_hxb}'\n")
