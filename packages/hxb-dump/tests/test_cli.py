"""The command line: arguments, exit codes, `python -m hxb_dump`, the console script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import dump_samples
import hexir_format as hf
from dump_samples import BUILTIN
from hxb_dump import __version__


@pytest.mark.parametrize("argv", [
    [],                                              # no file
    ["--bogus", str(BUILTIN)],                       # unknown flag
    [str(BUILTIN), "-o", "out.bin"],                 # -o without --image
    [str(BUILTIN), "--image"],                       # --image without a kernel
    [str(BUILTIN), str(BUILTIN)],                    # two files
])
def test_bad_arguments_exit_2(dump, argv):
    r = dump(*argv)
    assert r.rc == 2
    assert r.out == ""
    assert r.err.splitlines()[-1].startswith("hxb-dump: error: ")


def test_version_and_help(dump):
    r = dump("--version")
    assert (r.rc, r.out) == (0, f"hxb-dump {__version__}\nhexir-format {hf.__version__}\n")
    r = dump("--help")
    assert r.rc == 0
    assert "--image KERNEL" in r.out and "--sass KERNEL" in r.out


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def test_python_dash_m(dump):
    done = run(sys.executable, "-m", "hxb_dump", str(BUILTIN), "--rodata")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == dump(BUILTIN, "--rodata").out


def test_console_script():
    script = Path(sys.executable).with_name("hxb-dump")
    if not script.exists():
        pytest.skip("hxb-dump is not installed next to this interpreter")
    done = run(str(script), str(BUILTIN))
    assert done.returncode == 0
    assert "  linear_0         matmul cpu     2x2x2  elem=8B" in done.stdout.splitlines()


def test_damaged_file_from_the_shell(tmp_path):
    """Exit 1, one line on stderr and no traceback, in a real process too."""
    path = tmp_path / "cut.hxb"
    path.write_bytes(BUILTIN.read_bytes()[:200])
    done = run(sys.executable, "-m", "hxb_dump", str(path))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        ("hxb-dump: error: section 1 (program): offset 160 + size 176 runs past the end of the "
        "200-byte file")]
    assert done.stdout == f"{path}  (200 bytes)\n"


def test_closed_pipe_is_not_an_error(tmp_path):
    """`hxb-dump big.hxb --rodata | head -1` must not end in a BrokenPipeError traceback."""
    path = tmp_path / "mlp.hxb"
    path.write_bytes(hf.build(dump_samples.mlp()))
    proc = subprocess.Popen([sys.executable, "-m", "hxb_dump", str(path), "--rodata"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().decode().startswith(str(path))
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 0
    assert err == ""
