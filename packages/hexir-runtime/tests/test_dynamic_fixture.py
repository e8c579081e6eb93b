"""A dynamic module the compiler made, run with the runtime alone at several sizes.

`fixtures/attention-dynamic.hxb` is attention over q, k, v of shape [batch, seq, 8] with both
sizes symbolic: its kernels take `batch` and `seq` as operands (a softmax over a row of `seq`
elements, a matmul whose columns and another whose depth are `seq`). One loaded module runs
every size, each against numpy; inputs that disagree on a size are refused in one line; and
`hexir-run` takes inputs of any size from an .npz and shows the symbolic signature.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import hexir_runtime as hr
from conftest import FIXTURES
from hexir_runtime.errors import InputError

MODULE = FIXTURES / "attention-dynamic.hxb"


def _attention(q, k, v):
    s = q @ k.transpose(0, 2, 1) * np.float32(0.35355339)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def test_one_module_runs_every_size():
    rng = np.random.default_rng(0)
    with hr.load(MODULE) as m:
        assert str(m.main.signature.inputs[0]) == "batchxseqx8xf32"
        for batch, seq in ((1, 1), (2, 5), (3, 17), (1, 64), (2, 5)):
            q, k, v = (rng.standard_normal((batch, seq, 8)).astype(np.float32)
                       for _ in range(3))
            got = m.main(q, k, v)
            assert got.shape == (batch, seq, 8)
            np.testing.assert_allclose(got, _attention(q, k, v), rtol=1e-5, atol=1e-6)


def test_inputs_that_disagree_on_a_size_are_refused_in_one_line():
    rng = np.random.default_rng(1)
    q, v = (rng.standard_normal((2, 5, 8)).astype(np.float32) for _ in range(2))
    k = rng.standard_normal((2, 6, 8)).astype(np.float32)
    with hr.load(MODULE) as m, pytest.raises(InputError) as caught:
        m.main(q, k, v)
    message = str(caught.value)
    assert "seq" in message and "\n" not in message, message


def test_hexir_run_takes_any_size(tmp_path):
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 3, 8)).astype(np.float32) for _ in range(3))
    np.savez(tmp_path / "in.npz", q=q, k=k, v=v)
    out = tmp_path / "out.npz"
    done = subprocess.run([sys.executable, "-m", "hexir_runtime", str(MODULE), "--quiet",
                           f"--input=@{tmp_path / 'in.npz'}", f"--output=@{out}"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (got,) = np.load(out).values()
    np.testing.assert_allclose(got, _attention(q, k, v), rtol=1e-5, atol=1e-6)
