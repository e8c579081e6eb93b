"""The example networks end to end: compile examples/*.mlir, run, compare with numpy.

Each program is compiled with the `hexir` CLI (in process), run on the cpu runtime with a
fresh random input (the seed is in the failure message), and compared with the float64
numpy reference of examples/reference.py, which reads only the weights from the program.
With every op placed on cuda the same programs must compile to device code: each executable
carries an image. The checked-in programs and fixtures must be what the scripts and the
compiler produce now.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime
from hexir_compiler import cli
from hexir_runtime.hal.hostcode import host_level

ROOT = pathlib.Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "fixtures"


def _load(name: str):
    """A script of examples/ as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


reference = _load("reference")
generate = _load("generate")
PROGRAMS = tuple(generate.PROGRAMS)


def compile_program(program: pathlib.Path, output: pathlib.Path, *flags: str) -> None:
    rc = cli.main(["-emit=hxb", "-o", str(output), *flags, str(program)])
    assert rc == 0, f"hexir {' '.join(flags)} {program.name} exited with {rc}"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, pathlib.Path]:
    """Every example compiled for the cpu, once."""
    out = tmp_path_factory.mktemp("examples")
    modules = {}
    for filename in PROGRAMS:
        modules[filename] = out / f"{filename}.hxb"
        compile_program(EXAMPLES / filename, modules[filename])
    return modules


@pytest.mark.parametrize("filename", PROGRAMS)
def test_matches_numpy_on_fresh_inputs(compiled, filename):
    _check_fresh_inputs(filename, compiled[filename])


BEST_LEVEL = hf.CPU_LEVELS[max(3, min(4, host_level()))]


@pytest.mark.skipif(host_level() < 3, reason="this CPU runs no x86-64-v3 code")
@pytest.mark.parametrize("filename", PROGRAMS)
def test_matches_numpy_compiled_for_this_cpu(tmp_path, filename):
    """At the level of this CPU (FMA and wide registers): small matmuls are loops there."""
    output = tmp_path / f"{filename}.hxb"
    compile_program(EXAMPLES / filename, output, f"-target=cpu:{BEST_LEVEL}")
    _check_fresh_inputs(filename, output)


def _check_fresh_inputs(filename: str, path: pathlib.Path) -> None:
    seed = np.random.SeedSequence().entropy
    rng = np.random.default_rng(seed)
    program = EXAMPLES / filename
    module = hexir_runtime.load(path, device="cpu")
    elem = generate.PROGRAMS[filename][1]
    for _ in range(2):
        x = reference.sample_input(program, rng)
        out = module.main(x)
        assert out.dtype == x.dtype
        error = reference.relative_error(out, reference.evaluate(program, x))
        assert error <= reference.TOLERANCE[elem], (
            f"{filename}: relative error {error:.3e} with seed {seed}"
        )


def _placed_ops(program: pathlib.Path) -> list[str]:
    ops = set(re.findall(r'"(hexir\.\w+)"\(', program.read_text()))
    return sorted(ops - {"hexir.constant"})


@pytest.mark.parametrize("filename", PROGRAMS)
def test_every_op_on_cuda_compiles_to_device_code(tmp_path, filename):
    program = EXAMPLES / filename
    placement = ",".join(f"{op}=cuda" for op in _placed_ops(program))
    output = tmp_path / "cuda.hxb"
    compile_program(program, output, f"-placement={placement}", "-fusion=off")
    module = hf.parse(output.read_bytes())
    # unfused: one per op, ops alike but for their values' names sharing one
    ops = {re.sub(r"%[\w#:.$-]+", "%", line.strip()) for line in program.read_text().splitlines()
           if re.search(r'"hexir\.(?!constant)\w+"\(', line)}
    assert len(module.executables) == len(ops)
    for exe in module.executables:
        assert exe.device is hf.Device.CUDA, exe.name
        assert exe.image is not None and len(exe.image) > 0, f"{exe.name} has no image"
        assert min(exe.grid) >= 1 and min(exe.block) >= 1, (exe.name, exe.grid, exe.block)


def test_checked_in_programs_are_up_to_date():
    assert generate.main(["--check"]) == 0, "run python examples/generate.py"


def fixture_name(filename: str) -> str:
    network, elem = generate.PROGRAMS[filename]
    return f"{network.__name__}-{elem}"


@pytest.mark.parametrize("filename", PROGRAMS)
def test_checked_in_module_is_what_the_compiler_writes(compiled, filename):
    fixture = FIXTURES / f"{fixture_name(filename)}.hxb"
    assert fixture.read_bytes() == compiled[filename].read_bytes(), (
        f"{fixture.name} is stale: run python examples/make_fixtures.py"
    )


@pytest.mark.parametrize("filename", PROGRAMS)
def test_checked_in_fixture_expects_the_reference(filename):
    """fixtures/<name>.npz holds the reference's answer for the current weights."""
    with np.load(FIXTURES / f"{fixture_name(filename)}.npz", allow_pickle=False) as data:
        x, expected = data["input_0"], data["output_0"]
    want = reference.evaluate(EXAMPLES / filename, x)
    # The differences allowed: expected's rounding to the element type, and the order in which
    # this machine's BLAS sums the float64 matmuls (it differs between CPUs: a few ulps).
    assert reference.relative_error(expected, want) <= 16 * np.finfo(expected.dtype).eps
