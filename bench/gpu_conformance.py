"""The ONNX node tests with every op on cuda, run on a GPU: `test_node_on_cuda` for a machine
that has a GPU but no compiler.

    python bench/gpu_conformance.py --build [--dir=build/gpu-conformance]   # here
    python bench/gpu_conformance.py --run [--dir=build/gpu-conformance]     # on the GPU

`--build` compiles every case `test_onnx_conformance.py` runs on cuda (`CUDA_CASES` less the
listed exceptions, as `test_node_on_cuda` takes them) with `-placement=cuda`, and writes
each module with its inputs (in the module's order) and expected outputs; `--run` loads each
with the runtime alone on the GPU and holds its outputs to the suite's tolerances
(`onnx_node_tests.TOLERANCE`: float32 rtol 1e-4 / atol 1e-5, float64 rtol 1e-7 / atol 1e-9,
the rest exact), printing each failure and the totals. (The suite's cuda cases also run here,
in CI, on the fake driver's PTX executor and in the thread-by-thread interpreter.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TOLERANCE = {np.dtype("float32"): (1e-4, 1e-5), np.dtype("float64"): (1e-7, 1e-9)}


def build(directory: Path) -> int:
    sys.path.insert(0, str(REPO / "packages" / "hexir-compiler" / "tests"))
    import onnx_node_tests as node
    import test_onnx_conformance as suite

    assert node.TOLERANCE == TOLERANCE, "the suite's tolerances moved: copy them here"
    directory.mkdir(parents=True, exist_ok=True)
    cases = [c for c in suite.CUDA_CASES if suite._exception(c.name) is None]
    for case in cases:
        module, names, (inputs, expected) = node.compile_case(case, placement="cuda")
        (directory / f"{case.name}.hxb").write_bytes(module)
        np.savez(directory / f"{case.name}.npz",
                 **{f"in{i}": inputs[n] for i, n in enumerate(names)},
                 **{f"out{i}": e for i, e in enumerate(expected)})
    print(f"built {len(cases)} cases into {directory}")
    return 0


def run(directory: Path) -> int:
    import hexir_runtime as hr

    failed, worst = [], 0.0
    cases = sorted(directory.glob("*.hxb"))
    for path in cases:
        with np.load(path.with_suffix(".npz")) as data:
            inputs = [data[f"in{i}"] for i in range(sum(k.startswith("in") for k in data))]
            expected = [data[f"out{i}"] for i in range(sum(k.startswith("out") for k in data))]
        try:
            with hr.load(path, device="cuda") as m:
                outputs = m.main(*inputs)
            outputs = outputs if isinstance(outputs, tuple | list) else (outputs,)
            for got, want in zip(outputs, expected, strict=True):
                got = np.asarray(got)
                assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype,
                                                                              got.shape)
                rtol, atol = TOLERANCE.get(want.dtype, (0, 0))
                np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
                if want.dtype in TOLERANCE and want.size:
                    finite = np.isfinite(want)
                    if finite.any():
                        scale = max(float(np.abs(want[finite]).max()), 1e-30)
                        worst = max(worst, float(np.abs(got[finite] - want[finite]).max())
                                    / scale)
        except (AssertionError, hr.RuntimeFailure) as e:
            failed.append(path.stem)
            print(f"FAILED {path.stem}: {str(e).strip().splitlines()[0]}")
    print(f"{len(cases) - len(failed)} of {len(cases)} node tests pass on the GPU with every "
          f"op on cuda; largest relative error of a float output {worst:.3g}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="store_true")
    parser.add_argument("--run", action="store_true")
    parser.add_argument("--dir", type=Path, default=REPO / "build" / "gpu-conformance")
    args = parser.parse_args(argv)
    if args.build == args.run:
        parser.error("give one of --build (here) and --run (on the GPU machine)")
    return build(args.dir) if args.build else run(args.dir)


if __name__ == "__main__":
    sys.exit(main())
