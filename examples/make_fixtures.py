"""Compile the example programs into fixtures/ with an input and its expected output.

For each `examples/<name>.mlir` this writes `fixtures/<network>-<f32|f64>.hxb` (by running
`hexir -emit=hxb`) and `fixtures/<network>-<f32|f64>.npz` holding `input_0` (a random input
from a fixed seed, in the program's element type) and `output_0` (the numpy reference's
answer, computed in float64 and stored in the program's element type). The runtime's tests
run these fixtures without the compiler.

When `hexir_runtime` is importable the new modules are also run on the cpu and the relative
error against the reference is printed (and checked against `reference.TOLERANCE`).

    python examples/make_fixtures.py [--fixtures DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import subprocess
import sys
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parent
sys.path.insert(0, str(EXAMPLES))

import generate  # noqa: E402  (siblings in examples/, not a package)
import reference  # noqa: E402

SEED = 20_261_129


def fixture_name(filename: str) -> str:
    """`mlp.mlir` -> `mlp-f32`, `mlp-f64.mlir` -> `mlp-f64`."""
    network, elem = generate.PROGRAMS[filename]
    return f"{network.__name__}-{elem}"


def compile_program(program: Path, output: Path) -> None:
    """`hexir -emit=hxb -o output program`, through this interpreter's compiler."""
    cmd = [sys.executable, "-m", "hexir_compiler", "-emit=hxb", "-o", str(output), str(program)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"make_fixtures.py: error: {' '.join(cmd)} exited with "
                         f"{done.returncode}:\n{done.stderr.strip()}")


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    """Write atomically (temp file in the same directory, then rename)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(path)


def runtime_error(module: Path, x: np.ndarray, expected: np.ndarray) -> float | None:
    """The relative error of the compiled module on x, or None without hexir_runtime."""
    if importlib.util.find_spec("hexir_runtime") is None:
        return None
    import hexir_runtime

    out = hexir_runtime.load(module, device="cpu").main(x)
    return reference.relative_error(out, expected)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make_fixtures.py", description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=EXAMPLES.parent / "fixtures")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(SEED)
    failed = []
    for filename in generate.PROGRAMS:
        program = EXAMPLES / filename
        name = fixture_name(filename)
        module = args.fixtures / f"{name}.hxb"
        compile_program(program, module)
        x = reference.sample_input(program, rng)
        expected = reference.evaluate(program, x).astype(x.dtype)
        save_npz(args.fixtures / f"{name}.npz", input_0=x, output_0=expected)
        error = runtime_error(module, x, reference.evaluate(program, x))
        tolerance = reference.TOLERANCE[generate.PROGRAMS[filename][1]]
        verdict = "not run (no hexir_runtime)" if error is None else f"{error:.3e}"
        print(f"{name}: {module.stat().st_size} bytes, relative error {verdict} "
              f"(tolerance {tolerance:.0e})")
        if error is not None and not error <= tolerance:
            failed.append(name)
    if failed:
        print(f"make_fixtures.py: error: {', '.join(failed)} exceed the tolerance",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
