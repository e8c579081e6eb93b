"""The `hexir` command in-process: exit codes, where output goes, no half-written files."""

import subprocess
import sys
from pathlib import Path

from hexir_compiler import cli
from hexir_compiler.placement import PLACEABLE

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def test_no_emit_prints_usage_and_exits_2(capsys):
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    first, blank, usage = err.split("\n", 2)
    assert first == "error: no -emit=<stage> given, so there is nothing to produce"
    assert blank == ""
    assert usage.startswith("usage: hexir [options] [input.mlir]")
    for op in PLACEABLE:
        assert f"  {op}  ->  cpu, cuda" in usage


def test_help_goes_to_stdout(capsys):
    assert cli.main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: hexir")


def test_mlir_goes_to_stdout(capsys):
    assert cli.main(["-emit=mlir"]) == 0
    out = capsys.readouterr()
    assert '"hexir.linear"' in out.out and out.err == ""


def test_hxb_is_written_and_announced(tmp_path, capsys):
    path = tmp_path / "m.hxb"
    assert cli.main(["-emit=hxb", "-o", str(path)]) == 0
    assert path.read_bytes() == (FIXTURES / "builtin-cpu.hxb").read_bytes()
    assert capsys.readouterr().err == f"wrote {path}\n"
    assert list(tmp_path.iterdir()) == [path]  # the temporary file is gone


def test_failed_compile_leaves_no_file_and_no_traceback(tmp_path, capsys):
    prog = tmp_path / "prog.mlir"
    prog.write_text(
        "func.func @main() {\n  %c = arith.constant dense<1.0> : tensor<2x2xf64>\n"
        '  "hexir.print"(%c) : (tensor<2x2xf64>) -> ()\n  return\n}\n'
    )
    out = tmp_path / "out.hxb"
    assert cli.main(["-emit=hxb", "-o", str(out), str(prog)]) == 1
    err = capsys.readouterr().err
    assert err == f"{prog}:2:8: error: cannot serialize this op into a host program\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.mlir"]


def test_python_dash_m_is_the_cli(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "hexir_compiler", "-emit=bogus"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: 'bogus' is not a stage")
    assert "Traceback" not in done.stderr


def test_missing_device_code_is_an_output_failure(tmp_path, capsys, monkeypatch):
    from hexir_compiler.errors import CompileError
    from hexir_compiler.target import cuda

    def no_toolkit(module, target=None):
        raise CompileError("no CUDA toolkit: looked for ptxas in $CUDA_HOME/bin, /usr/local/cuda")

    monkeypatch.setattr(cuda, "compile_kernels", no_toolkit)
    out = tmp_path / "gpu.hxb"
    assert cli.main(["-emit=hxb", "-placement=hexir.linear=cuda", "-o", str(out)]) == 1
    assert capsys.readouterr().err == (
        "error: no CUDA toolkit: looked for ptxas in $CUDA_HOME/bin, /usr/local/cuda\n"
    )
    assert not out.exists()
