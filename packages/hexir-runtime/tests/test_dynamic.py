"""Dynamic modules: one loaded module run at many sizes, each call's sizes bound from its
inputs, checked, and planned (once per distinct binding) before anything is allocated."""

from __future__ import annotations

import io

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
from hexir_runtime import sizes
from hexir_runtime.cli import main as hexir_run
from hexir_runtime.hal import cpu, hostcode
from modules import W43, dynamic_cache, dynamic_linear

pytestmark = pytest.mark.skipif(hostcode.usable_level() < 3,
                                reason="the test kernels are x86-64-v3 code")


@pytest.fixture
def linear():
    with hr.load(hf.build(dynamic_linear())) as m:
        yield m


def reference(x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ W43, 0)


def test_one_module_runs_every_batch_size(linear):
    rng = np.random.default_rng(0)
    for n in (1, 7, 2, 7, 300, 1 << 15):  # the last one splits across the thread pool
        x = rng.standard_normal((n, 4)).astype(np.float32)
        y = linear.main(x)
        assert y.shape == (n, 3) and y.dtype == np.float32
        np.testing.assert_allclose(y, reference(x), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(linear.main.results(x=x)["y"], reference(x), rtol=1e-6,
                                   atol=1e-6)


def test_a_binding_is_planned_once_and_reused(linear):
    x3, x5 = np.ones((3, 4), np.float32), np.ones((5, 4), np.float32)
    for x in (x3, x5, x3, x3, x5):
        linear.main(x)
    linear.execute("main", [x3])
    hits, misses, kept = linear.cache_info
    assert (hits, misses, kept) == (4, 2, 2)


def test_the_cache_keeps_the_last_bindings_only(linear, monkeypatch):
    monkeypatch.setattr(sizes, "CACHED_BINDINGS", 3)
    for n in (1, 2, 3, 4, 1):
        np.testing.assert_allclose(linear.main(np.full((n, 4), n, np.float32)),
                                   reference(np.full((n, 4), n, np.float32)), rtol=1e-6)
    hits, misses, kept = linear.cache_info
    assert (hits, misses, kept) == (0, 5, 3)  # 1 was dropped before it came back


def test_outputs_into_out_arrays_of_the_calls_size(linear):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = np.empty((2, 3), np.float32)
    assert linear.main(x, out=out) is out
    np.testing.assert_allclose(out, reference(x), rtol=1e-6)
    with pytest.raises(hr.InputError, match=r"out\[0\] of main: expected a writable "
                                            r"C-contiguous 2x3xf32 array"):
        linear.main(x, out=np.empty((3, 3), np.float32))


def test_a_profile_runs_at_the_calls_sizes(linear):
    x = np.ones((300, 4), np.float32)
    profile = linear.profile("main", x, calls=3)
    assert [k.name for k in profile.kernels] == ["rows_matmul", "rows_relu"]
    assert [k.nbytes for k in profile.kernels] == [300 * 16 + 48 + 300 * 12, 2 * 300 * 12]


def test_a_huge_batch_is_refused_before_anything_is_allocated(linear, monkeypatch):
    def no(*args, **kwargs):
        raise AssertionError("allocated")

    class Huge:  # an array-like that claims 2**40 rows; it is never read
        shape = (1 << 40, 4)
        dtype = np.dtype(np.float32)

    monkeypatch.setattr(cpu.CpuDevice, "_allocate", no)
    # its arena: h and y (y over h, in place), 12 bytes a row; its input x, 16
    with pytest.raises(hr.InputError, match=r"^main with batch = 1099511627776: a call would "
                                            r"allocate 30786325577728 bytes \(the cpu arena "
                                            r"13194139533312, inputs 17592186044416\), more "
                                            r"than the cap of 17179869184 bytes "
                                            r"\(max_alloc_bytes\)$"):
        linear.main(Huge())
    assert linear.cache_info == (0, 0, 0)


def test_sizes_outside_the_range_or_of_another_rank_are_one_line():
    with hr.load(hf.build(dynamic_linear(hi=8))) as m:
        with pytest.raises(hr.InputError, match=r"^main: input 'x' dim 0 is 'batch' = 9, which "
                                                r"makes 'batch' = 9; the module allows 1 to 8$"):
            m.main(np.ones((9, 4), np.float32))
        with pytest.raises(hr.InputError, match=r"^main: input 'x' dim 1 is 4, got 5$"):
            m.main(np.ones((2, 5), np.float32))
        with pytest.raises(hr.InputError, match=r"^input 0 \('x'\) of main: expected "
                                                r"batchx4xf32, got shape 2x4x1$"):
            m.main(np.ones((2, 4, 1), np.float32))
        with pytest.raises(hr.InputError, match=r"expected 2x4xf32, got an int64 array"):
            m.main(np.ones((2, 4), np.int64))
        with pytest.raises(hr.InputError, match="main takes 1 input"):
            m.main()


def test_two_inputs_that_disagree_are_named_both():
    with hr.load(hf.build(dynamic_cache())) as m:
        ids = np.arange(6).reshape(2, 3)
        mask = np.ones((2, 7), bool)
        got_mask, got_ids = m.main(ids, mask)  # past = 4, solved from the mask
        assert np.array_equal(got_ids, ids) and np.array_equal(got_mask, mask)
        with pytest.raises(hr.InputError, match=r"^main: input 'mask' dim 0 is 'batch' = 3, "
                                                r"but input 'ids' dim 0 gave 'batch' = 2$"):
            m.main(ids, np.ones((3, 7), bool))
        with pytest.raises(hr.InputError, match=r"'past \+ seq' = 2, which makes 'past' = -1; "
                                                r"the module allows 0 to 4096"):
            m.main(ids, np.ones((2, 2), bool))


def test_the_api_and_the_command_line_show_symbolic_shapes(tmp_path):
    path = tmp_path / "dyn.hxb"
    path.write_bytes(hf.build(dynamic_linear(hi=64)))
    with hr.load(path) as m:
        assert str(m.main) == "main(x: batchx4xf32) -> (y: batchx3xf32)"
        assert "batch" in repr(m) and m.symbols == (hf.model.Symbol("batch", 1, 64),)
    out, err = io.StringIO(), io.StringIO()
    assert hexir_run([str(path)], out, err) == 1
    assert err.getvalue() == ("hexir-run: main takes 1 input (x: batchx4xf32), got 0; its "
                              "sizes: batch in 1..64\n")
    np.savez(tmp_path / "x.npz", x=np.ones((5, 4), np.float32))
    out, err = io.StringIO(), io.StringIO()
    assert hexir_run([str(path), f"--input=@{tmp_path / 'x.npz'}"], out, err) == 0, err
    assert "result[0] y: 5x3xf32" in out.getvalue()


def test_prepare_and_check_inputs_of_a_dynamic_entry(linear):
    assert linear.prepare("main") is linear.main  # kernels loaded, no program yet
    assert linear.cache_info == (0, 0, 0)
    (x,) = linear.main.check_inputs([[1, 2, 3, 4]])  # a list, converted at its sizes
    assert x.shape == (1, 4) and x.dtype == np.float32


def test_calls_of_several_sizes_from_several_threads(linear, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(sizes, "CACHED_BINDINGS", 2)  # bindings dropped while others run

    def call(n: int) -> bool:
        x = np.full((n, 4), n / 7, np.float32)
        return np.allclose(linear.main(x), reference(x), rtol=1e-6, atol=1e-6)

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(call, [1 + i % 5 for i in range(200)]))
    hits, misses, kept = linear.cache_info
    assert hits + misses == 200 and kept == 2
