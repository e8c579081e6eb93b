"""Hostile input beyond the module's bytes: names that would forge lines, files that are not
files or that change while loaded, inputs too big or of the wrong kind, and interrupted
writes. Each is a one-line refusal (or a defined outcome), never a traceback, hang or crash."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
import modules
from hexir_runtime.cli import main


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(map(str, argv)), out, err)
    return code, out.getvalue(), err.getvalue()


def test_names_from_the_file_cannot_forge_lines_or_drive_the_terminal(tmp_path):
    module = modules.mlp()
    bad = hf.Executable("evil\n\x1b[2J", module.executables[0].kind, hf.Device.CPU,
                        (hf.TensorType(hf.DType.F32, (3, 3)), *module.executables[0].args[1:]))
    path = modules.write(tmp_path, "evil.hxb", hf.Module(
        4, module.functions, module.rodata, (bad, *module.executables[1:]), module.slots))
    with pytest.raises(hf.HexirError) as info:
        hr.load(path)
    message = str(info.value)
    assert "\n" not in message and "\x1b" not in message and "evil\\n\\x1b[2J" in message
    code, _, err = run(path)
    assert code == 1 and err.count("\n") == 1 and "\x1b" not in err


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "null"])
def test_what_is_not_a_regular_file_is_refused_before_anything_waits_on_it(tmp_path, kind):
    path = {"fifo": tmp_path / "pipe.hxb", "directory": tmp_path, "device": "/dev/zero",
            "null": "/dev/null"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    what = {"fifo": "a FIFO", "directory": "a directory", "device": "a character device",
            "null": "a character device"}[kind]
    with pytest.raises(hr.LoadError, match=f"io error: it is {what}, not a regular file"):
        hr.load(path)  # a FIFO would block forever in open() without the check
    code, _, err = run(path)
    assert code == 1 and f"it is {what}, not a regular file" in err
    code, _, err = run(modules.write(tmp_path, "m.hxb", modules.mlp()), f"--input=@{path}")
    assert code == 2 and f"--input=@{path}: cannot read: it is {what}" in err  # an argument


def test_a_file_changed_in_place_is_refused_at_the_next_call(tmp_path, builtin_hxb):
    path = tmp_path / "m.hxb"
    shutil.copy(builtin_hxb, path)
    with hr.load(path) as m:
        assert m.run()[0].tolist() == [[8, 17], [12, 14]]
        assert all(isinstance(e.image, bytes | None) for e in m._mapped.module.executables)
        with open(path, "r+b") as f:  # what `cp smaller.hxb m.hxb` or a truncation does
            f.truncate(100)
        with pytest.raises(hr.LoadError, match="changed on disk after it was loaded"):
            m.run()  # without the check: SIGBUS when the kernel reads the weights


def test_a_file_renamed_over_leaves_the_loaded_one_running(tmp_path, builtin_hxb):
    path = tmp_path / "m.hxb"
    shutil.copy(builtin_hxb, path)
    with hr.load(path) as m:
        (tmp_path / "other.hxb").write_bytes(b"not a module")
        os.replace(tmp_path / "other.hxb", path)  # the mapping still holds the old file
        assert m.run()[0].tolist() == [[8, 17], [12, 14]]


def test_copy_reads_the_file_whole_so_it_may_change(tmp_path, builtin_hxb):
    path = tmp_path / "m.hxb"
    shutil.copy(builtin_hxb, path)
    with hr.load(path, copy=True) as m:
        path.write_bytes(b"")
        assert m.run()[0].tolist() == [[8, 17], [12, 14]]


@pytest.mark.parametrize("call, message", [
    (lambda path: hr.load(path, device=None), "device must be 'cpu' or 'cuda', not None"),
    (lambda path: hr.load(path).execute("main", None),
     "main: inputs must be a list or tuple of arrays, not a NoneType"),
    (lambda path: hr.load(path).main(np.ma.masked_array(np.ones((2, 3), np.float32))),
     "got a masked array; its mask would be ignored"),
])
def test_api_misuse_is_a_one_line_refusal(tmp_path, call, message):
    path = modules.write(tmp_path, "m.hxb", modules.mlp())
    with pytest.raises(hf.HexirError) as info:
        call(path)
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["4611686018427387904x0xf32=", "99999999999x99999999999xf32=1",
                                   "100000x100000xf32=1"])
def test_an_input_too_big_to_make_is_refused_before_it_is_made(tmp_path, value):
    code, _, err = run(modules.write(tmp_path, "m.hxb", modules.mlp()), f"--input={value}")
    assert code == 2 and err.count("\n") == 1  # a bad argument
    assert "spans more than 17179869184 bytes, the most one run may allocate" in err


def test_output_of_an_entry_that_returns_nothing_is_refused_and_writes_nothing(tmp_path,
                                                                               builtin_hxb):
    code, out, err = run(builtin_hxb, f"--output=@{tmp_path / 'y.npz'}")
    assert code == 1 and "main returns nothing, so there is nothing to write" in err
    assert list(tmp_path.iterdir()) == [] and "8.000000" not in out


WRITER = textwrap.dedent("""
    import os, signal, sys
    from hexir_format.files import atomic_write, terminate_as_interrupt
    terminate_as_interrupt()
    try:
        with atomic_write(sys.argv[1]) as out:
            out.write(b"half")
            os.kill(os.getpid(), getattr(signal, sys.argv[2]))
    except KeyboardInterrupt:
        sys.exit(130)
""")


@pytest.mark.parametrize("signame, code", [("SIGTERM", 130), ("SIGINT", 130),
                                           ("SIGKILL", -signal.SIGKILL)])
def test_a_write_interrupted_by_any_signal_leaves_nothing(tmp_path, signame, code):
    target = tmp_path / "out.npz"
    done = subprocess.run([sys.executable, "-c", WRITER, str(target), signame],
                          capture_output=True, text=True)
    assert done.returncode == code, done.stderr
    assert list(tmp_path.iterdir()) == []  # no target, no temporary file
