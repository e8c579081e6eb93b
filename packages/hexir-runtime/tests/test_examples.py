"""The example networks (examples/: an MLP and a transformer block, f32 and f64) on the cpu.

Runtime only: each `fixtures/<name>.hxb` was compiled by examples/make_fixtures.py, and
`fixtures/<name>.npz` holds its input (`input_0`) and the float64 numpy reference's output
(`output_0`, stored in the module's element type). No compiler is involved here.

Accuracy is norm-wise, as in examples/README.md: max|out - ref| <= tol * max|ref|.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime
from hexir_runtime import cli

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures"
NAMES = ("mlp-f32", "mlp-f64", "transformer_block-f32", "transformer_block-f64")
TOLERANCE = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}
SHAPES = {"mlp": ((8, 784), (8, 10)), "transformer_block": ((2, 16, 64), (2, 16, 64))}


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    ref = ref.astype(np.float64)
    return float(np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max())


def fixture(name: str) -> tuple[pathlib.Path, np.ndarray, np.ndarray]:
    with np.load(FIXTURES / f"{name}.npz", allow_pickle=False) as data:
        return FIXTURES / f"{name}.hxb", data["input_0"], data["output_0"]


@pytest.fixture(scope="module", params=NAMES)
def example(request):
    """(name, loaded module, input, expected output); loaded once per fixture."""
    path, x, expected = fixture(request.param)
    module = hexir_runtime.load(path, device="cpu")
    yield request.param, module, x, expected


def test_fixture_files_are_what_the_examples_promise(example):
    name, _, x, expected = example
    network, elem = name.rsplit("-", 1)
    assert x.dtype == expected.dtype == np.dtype(hf.DType.from_name(elem).numpy)
    assert (x.shape, expected.shape) == SHAPES[network]


def test_weights_are_rodata_and_main_takes_one_input(example):
    name, _, _, _ = example
    module = hf.parse((FIXTURES / f"{name}.hxb").read_bytes())
    main = module.function("main")
    assert main is not None
    ops = [c.op for c in main.commands]
    assert ops.count(hf.Op.INPUT) == 1 and ops.count(hf.Op.OUTPUT) == 1
    assert ops.count(hf.Op.CONST) >= 6  # every weight and bias is a constant
    assert len(module.rodata) > 100_000


def test_output_matches_the_reference(example):
    name, module, x, expected = example
    out = module.main(x)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    error = relative_error(out, expected)
    assert error <= TOLERANCE[expected.dtype], f"{name}: relative error {error:.3e}"


def test_a_different_input_does_not_match(example):
    """The tolerance discriminates: the batch in reverse order gives other outputs."""
    name, module, x, expected = example
    out = module.main(np.ascontiguousarray(x[::-1]))
    assert relative_error(out, expected) > 1e3 * TOLERANCE[expected.dtype], name


def test_hexir_run_writes_the_output(tmp_path):
    """The README's command line: `hexir-run <module> --input=@x.npy --output=@out.npz`."""
    path, x, expected = fixture("transformer_block-f64")
    np.save(tmp_path / "x.npy", x)
    rc = cli.main([str(path), f"--input=@{tmp_path / 'x.npy'}",
                   f"--output=@{tmp_path / 'out.npz'}", "--quiet"])
    assert rc == 0
    with np.load(tmp_path / "out.npz", allow_pickle=False) as data:
        (out,) = (data[key] for key in data.files)
    assert relative_error(out, expected) <= TOLERANCE[expected.dtype]
