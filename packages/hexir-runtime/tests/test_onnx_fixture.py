"""A module the compiler made from an ONNX graph, run with the runtime alone.

`fixtures/onnx-types.hxb` gathers rows of a float32 tensor by int64 indices (one negative),
masks the positive values (bool), and counts them per row (int32); its inputs and outputs
carry the graph's names, and `onnx-types.npz` holds the inputs and numpy's outputs by those
names. Every element type of version 5 crosses the API and the CLI here.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np

import hexir_runtime as hr
from conftest import FIXTURES

MODULE, DATA = FIXTURES / "onnx-types.hxb", FIXTURES / "onnx-types.npz"


def test_runs_by_position_and_by_name_with_every_result_exact():
    data = np.load(DATA)
    with hr.load(MODULE) as m:
        assert m.main.signature.input_names == ("x", "rows")
        assert m.main.signature.output_names == ("positive", "count", "mask")
        by_position = m.main(data["x"], data["rows"])
        by_name = m.main.results(rows=data["rows"], x=data["x"])
    for got, name in zip(by_position, ("positive", "count", "mask"), strict=True):
        assert got.dtype == data[name].dtype
        np.testing.assert_array_equal(got, data[name])
        np.testing.assert_array_equal(by_name[name], data[name])


def test_hexir_run_reads_and_writes_npz_by_name(tmp_path):
    out = tmp_path / "y.npz"
    done = subprocess.run([sys.executable, "-m", "hexir_runtime", str(MODULE), "--quiet",
                           f"--input=@{DATA}", f"--output=@{out}"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    data, got = np.load(DATA), np.load(out)
    assert sorted(got.files) == ["count", "mask", "positive"]
    for name in got.files:
        np.testing.assert_array_equal(got[name], data[name])


def test_a_wrong_index_dtype_is_refused_in_one_line():
    data = np.load(DATA)
    with hr.load(MODULE) as m:
        try:
            m.main(data["x"], data["rows"].astype(np.int32))
        except hr.InputError as err:
            assert "rows" in str(err) and "2xi64" in str(err) and "\n" not in str(err)
        else:
            raise AssertionError("an int32 index array was accepted for an int64 input")
