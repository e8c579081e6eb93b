"""The `hexir` command in-process: exit codes, where output goes, no half-written files."""

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hexir_compiler import cli
from hexir_compiler.placement import PLACEABLE

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


@pytest.mark.parametrize("argv, message", [
    ([], "no -emit=<stage> given, so there is nothing to produce"),
    (["-emt=hxb"], "unknown option '-emt=hxb'"),
    (["-emit=hxb", "-builtin", "prog.mlir"],
     "-builtin compiles the built-in program; got an input too ('prog.mlir')"),
])
def test_a_bad_command_line_is_one_line_that_points_at_help_and_exit_2(capsys, argv, message):
    assert cli.main(argv) == 2
    out = capsys.readouterr()
    assert out.err == f"error: {message}; see 'hexir --help'\n" and out.out == ""


def test_help_lists_every_placeable_op_and_the_default_device(capsys):
    assert cli.main(["--help"]) == 0
    usage = capsys.readouterr().out
    for op in PLACEABLE:
        assert f"  {op}  ->  cpu, cuda" in usage
    assert "-placement=<dev>       a bare device (or *=<dev>) is the default" in usage


@pytest.mark.parametrize("flag", ["--version", "-version"])
def test_version_names_every_component(capsys, flag):
    from importlib.metadata import version

    import llvmlite

    import hexir_compiler
    import hexir_format

    assert cli.main([flag]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"hexir {hexir_compiler.__version__} (hexir-compiler)"
    assert lines[1] == f"hexir-format {hexir_format.__version__}"
    assert lines[2] == f"MLIR bindings: numba-cuda-mlir {version('numba-cuda-mlir')}"
    assert lines[3].startswith(f"llvmlite {llvmlite.__version__} (LLVM 2")


def test_dash_reads_the_program_from_stdin_and_builtin_has_its_own_flag(tmp_path):
    program = (FIXTURES / "linear-relu.mlir").read_text()
    hexir = [sys.executable, "-m", "hexir_compiler"]
    piped = subprocess.run([*hexir, "-emit=mlir", "-"], input=program, capture_output=True,
                           text=True, check=True).stdout
    direct = subprocess.run([*hexir, "-emit=mlir", str(FIXTURES / "linear-relu.mlir")],
                            capture_output=True, text=True, check=True).stdout
    assert piped == direct and '"hexir.relu"' in piped
    builtin = subprocess.run([*hexir, "-emit=mlir", "-builtin"], input=program,
                             capture_output=True, text=True, check=True).stdout
    assert '"hexir.relu"' not in builtin and builtin == subprocess.run(
        [*hexir, "-emit=mlir"], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("program, located, verdict", [
    ('func.func @main() {\n  %a = "hexir.relu"() : () -> tensor<2xf32>\n  return\n}\n',
     "-:2:8: error: 'hexir.relu' op expects 1 operand, got 0",
     "error: the program on stdin does not verify"),
    ("func.func @main() {\n  %a = bogus\n}\n",
     "-:2:8: error: custom op 'bogus' is unknown",
     "error: could not parse the program on stdin"),
])
def test_a_program_that_parses_but_breaks_a_rule_does_not_verify(program, located, verdict):
    done = subprocess.run([sys.executable, "-m", "hexir_compiler", "-emit=hxb", "-"],
                          input=program, capture_output=True, text=True)
    assert done.returncode == 255
    first, second = done.stderr.splitlines()
    assert first.startswith(located) and second == verdict


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


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_hxb_and_text_outputs_follow_the_umask(tmp_path, umask):
    import os
    import stat

    old = os.umask(umask)
    try:
        assert cli.main(["-emit=hxb", "-o", str(tmp_path / "m.hxb")]) == 0
        assert cli.main(["-emit=mlir", "-o", str(tmp_path / "m.mlir")]) == 0
    finally:
        os.umask(old)
    for name in ("m.hxb", "m.mlir"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask


def _relu_onnx() -> bytes:
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]) \
        .SerializeToString()


def test_an_onnx_model_on_stdin_is_read_as_onnx(tmp_path):
    """`-` takes what it is given: an ONNX model (protobuf) or MLIR text, told apart by their
    bytes; the model compiles as it does from its file."""
    model = _relu_onnx()
    (tmp_path / "relu.onnx").write_bytes(model)
    hexir = [sys.executable, "-m", "hexir_compiler", "-emit=mlir"]
    piped = subprocess.run([*hexir, "-"], input=model, capture_output=True, check=False)
    assert (piped.returncode, piped.stderr) == (0, b""), piped.stderr
    direct = subprocess.run([*hexir, str(tmp_path / "relu.onnx")], capture_output=True,
                            check=True)
    assert b"hexir.relu" in piped.stdout
    assert piped.stdout == direct.stdout.replace(str(tmp_path / "relu.onnx").encode(), b"-")


def test_stdin_data_with_no_input_named_is_refused_not_ignored(tmp_path):
    """`hexir -emit=hxb -o x.hxb < model.onnx` (no `-`) would compile the built-in program
    and drop the model: refused, saying to name `-`; nothing is written."""
    done = subprocess.run([sys.executable, "-m", "hexir_compiler", "-emit=hxb", "-o",
                           str(tmp_path / "x.hxb")], input=_relu_onnx(), capture_output=True,
                          check=False)
    assert done.returncode == 2 and not (tmp_path / "x.hxb").exists()
    assert done.stderr.decode() == (
        "error: stdin has data, but no input was named, so the built-in program would be "
        "compiled and stdin ignored: name '-' to compile stdin (or -builtin for the built-in "
        "program); see 'hexir --help'\n")


def test_a_compiled_module_as_input_is_named_as_one(capsys):
    assert cli.main(["-emit=mlir", str(FIXTURES / "builtin.hxb")]) == 255
    assert capsys.readouterr().err == (
        f"error: {FIXTURES / 'builtin.hxb'} is a compiled module (.hxb), not a program to "
        "compile: run it with hexir-run, or list it with hxb-dump\n")


def test_a_program_named_by_a_pipe_is_compiled_whole(tmp_path):
    """`hexir <(...)` and a FIFO: the check for a compiled module reads no byte of a pipe
    (it read the first eight, and the parser saw the rest)."""
    fifo = tmp_path / "program.mlir"
    os.mkfifo(fifo)
    text = (Path(__file__).resolve().parents[3] / "examples" / "mlp.mlir").read_bytes()
    # (opening a FIFO to write waits for its reader: the compiler, started next)
    writer = threading.Thread(target=fifo.write_bytes, args=(text,), daemon=True)
    writer.start()
    done = subprocess.run([sys.executable, "-m", "hexir_compiler", "-emit=mlir", str(fifo)],
                          capture_output=True, check=False, timeout=120)
    writer.join(timeout=10)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().startswith("module")


def test_the_python_api_names_its_own_argument_for_a_missing_shape(tmp_path):
    """`hexir_compiler.compile` takes `input_shapes=`; its error says so, not the CLI flag."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import hexir_compiler

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(hexir_compiler.CompileError) as e:
        hexir_compiler.compile(helper.make_model(graph,
                                                 opset_imports=[helper.make_opsetid("", 17)]))
    assert "input_shapes={'x': (d0, d1, ...)}" in str(e.value)
    assert "-input-shape" not in str(e.value)


STARTUP_PROBE = """
import sys
import hexir_compiler.cli
import numba_cuda_mlir as package
jit = sorted(m for m in sys.modules if m.startswith("numba_cuda_mlir.numba_cuda"))
deepbind = len(package._mlir_deepbind_handles)
from numba_cuda_mlir import carray  # the re-export still there, imported on first use
print(jit, deepbind, carray.__module__, package.__version__)
"""


def test_the_command_starts_without_numba_cudas_jit_and_keeps_the_deepbind_preload():
    """`hexir_compiler.mlir` registers the bindings' package without its CUDA JIT (1.9 s of
    a 2.5 s start); the bundled libraries are still preloaded with RTLD_DEEPBIND and the
    package's JIT re-exports still import on demand."""
    from importlib.metadata import version

    out = subprocess.run([sys.executable, "-c", STARTUP_PROBE], check=True,
                         capture_output=True, text=True).stdout.split()
    assert out[0] == "[]" and int(out[1]) >= 1
    assert out[2].startswith("numba_cuda_mlir.numba_cuda") and out[3] == version("numba-cuda-mlir")
