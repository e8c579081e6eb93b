"""f32 exp, erf and tanh in cpu kernels (`target.host_math`) against numpy in f64.

Each op is compiled for every level this machine runs, from plain x86-64 (SSE2: no rounding
instruction, so nothing may become a libm call) to the best (the polynomials' multiply-adds
are FMAs there), run by the runtime on a dense sweep of [-12, 12],
the values where the formulas switch branches or saturate, and the specials (signed zeros,
subnormals, the largest finite values, infinities, NaN), and compared element by element:
within 4e-7 relative (about 3 ulp) plus one subnormal step, each in both forms: on scalars
(a map kernel) and on vectors (a conv's fused epilogue). The LLVM IR must hold no call of the
libm function it replaces, in either form.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import hexir_runtime as hr
from hexir_compiler.pipeline import Options, compile_file
from hexir_runtime.hal import hostcode
from ieee import extremum

F32 = np.finfo(np.float32)
SPECIAL = [0.0, -0.0, F32.smallest_subnormal, -F32.smallest_subnormal, F32.tiny, 1e-30, -1e-8,
           0.55, -0.55, 0.5499999, 1.0, -1.0, 0.9999999, 4.0, -4.0, 9.0, 88.72, 88.73, 89.0,
           -87.3, -103.5, -104.0, -150.0, F32.max, -F32.max, math.inf, -math.inf, math.nan]
REFERENCE = {
    "exp": np.exp,
    "erf": np.vectorize(math.erf, otypes=[np.float64]),
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}
LEVELS = ["x86-64", "x86-64-v2", *(["x86-64-v3"] if hostcode.host_level() >= 3 else []),
          *(["x86-64-v4"] if hostcode.host_level() >= 4 else [])]


def _inputs() -> np.ndarray:
    sweep = np.linspace(-12, 12, 40_000, dtype=np.float32)
    return np.concatenate([sweep, np.float32(SPECIAL),
                           np.random.default_rng(0).standard_normal(4_000).astype(np.float32)])


def _source(tmp_path, op: str, size: int, form: str, element: str = "f32"):
    """A module of `op` on `size` values: a map kernel (`scalar`: its formulas on scalars),
    or (`vector`) the epilogue of a 1x1 depthwise conv by 1 over [1, 1, 1, size], which runs
    it on vectors of 16, 8, ... 1 neighbours (the conv's sum of x * 1 is x, but a -0 is +0)."""
    source = tmp_path / f"{op}.mlir"
    if form == "scalar":
        t = f"tensor<{size}x{element}>"
        source.write_text(f'func.func @main(%x: {t}) -> {t} {{\n  %y = "hexir.{op}"(%x) : '
                          f"({t}) -> {t}\n  return %y : {t}\n}}\n")
        return source
    t, w = f"tensor<1x1x1x{size}x{element}>", f"tensor<1x1x1x1x{element}>"
    ints = "array<i64: 1, 1>"
    source.write_text(
        f'func.func @main(%x: {t}) -> {t} {{\n'
        f'  %w = "hexir.constant"() {{value = dense<1.0> : {w}}} : () -> {w}\n'
        f'  %c = "hexir.conv"(%x, %w) {{strides = {ints}, pads = array<i64: 0, 0, 0, 0>, '
        f"dilations = {ints}, group = 1 : i64}} : ({t}, {w}) -> {t}\n"
        f'  %y = "hexir.{op}"(%c) : ({t}) -> {t}\n  return %y : {t}\n}}\n')
    return source


@pytest.mark.parametrize("form", ["scalar", "vector"])
@pytest.mark.parametrize("cpu", LEVELS)
@pytest.mark.parametrize("op", sorted(REFERENCE))
def test_f32_math_matches_numpy_in_f64(tmp_path, op: str, cpu: str, form: str) -> None:
    x = _inputs()
    image = compile_file(_source(tmp_path, op, x.size, form), Options("hxb", cpu=cpu))
    with hr.load(image) as m:
        got = m.main(x if form == "scalar" else x.reshape(1, 1, 1, -1))
    got = got.reshape(-1).astype(np.float64)
    with np.errstate(all="ignore"):
        want = REFERENCE[op](x.astype(np.float64))
    assert np.array_equal(np.isnan(got), np.isnan(want)), \
        f"{op}: NaN at {x[np.isnan(got) != np.isnan(want)][:5]}"
    finite = ~np.isnan(want)
    with np.errstate(all="ignore"):
        want32 = want.astype(np.float32).astype(np.float64)  # what f32 can hold: inf, 0, ...
        error = np.abs(got[finite] - want32[finite])
    error[got[finite] == want32[finite]] = 0  # infinities
    bound = 4e-7 * np.abs(want[finite]) + 2 * F32.smallest_subnormal
    worst = int(np.argmax(error - bound))
    assert error[worst] <= bound[worst], (
        f"{op} at {cpu}: x = {x[finite][worst]!r} gives {got[finite][worst]!r}, "
        f"expected {want[finite][worst]!r}")


@pytest.mark.parametrize("form", ["scalar", "vector"])
@pytest.mark.parametrize("cpu", LEVELS)
@pytest.mark.parametrize("op", ["erf", "tanh"])
def test_erf_and_tanh_are_exactly_one_where_f32_rounds_them_to_one(tmp_path, op: str,
                                                                   cpu: str, form: str) -> None:
    """Past erfc(x) = 2^-25 (x = 3.91921) and 1 - tanh(x) = 2^-25 (x = 9.01091) the f32 nearest
    erf(x) and tanh(x) is 1, which a GELU's 1 + erf(x) and x (1 + erf(x)) / 2 keep exactly:
    the relative bound of the test above would let 1 - 2^-24 by."""
    start = {"erf": 3.9193, "tanh": 9.011}[op]
    x = np.concatenate([np.linspace(start, 40, 2_000, dtype=np.float32),
                        np.float32([F32.max, math.inf])])
    x = np.concatenate([x, -x])
    image = compile_file(_source(tmp_path, op, x.size, form), Options("hxb", cpu=cpu))
    with hr.load(image) as m:
        got = m.main(x if form == "scalar" else x.reshape(1, 1, 1, -1)).reshape(-1)
    want = np.sign(x)
    assert np.array_equal(got, want), \
        f"{op} at {cpu}: x = {x[got != want][:3]} gives {got[got != want][:3]}, not +-1"


@pytest.mark.parametrize("form", ["scalar", "vector"])
@pytest.mark.parametrize("op", ["exp", "erf", "tanh"])
def test_f32_math_is_arithmetic_not_a_libm_call(tmp_path, op: str, form: str) -> None:
    text = compile_file(_source(tmp_path, op, 64, form), Options("llvm"))
    text = text.decode() if isinstance(text, bytes) else text
    assert f"@{op}f(" not in text and f"@llvm.{op}." not in text, \
        f"the f32 {op} kernel ({form}) still calls libm's {op}f"
    text = compile_file(_source(tmp_path, op, 64, form, "f64"), Options("llvm"))
    text = text.decode() if isinstance(text, bytes) else text
    assert f"@{op}(" in text or f"@llvm.{op}." in text, f"an f64 {op} should stay libm's {op}"


def _clip_source(tmp_path, size: int, form: str):
    """max(x, lo) then min(., hi), lo and hi scalars given at run time (a clip's bounds): a
    map kernel (`scalar`), or the epilogue of a 1x1 depthwise conv by 1 (`vector`)."""
    source = tmp_path / "clip.mlir"
    s = "tensor<f32>"
    if form == "scalar":
        t = f"tensor<{size}xf32>"
        head, x = [], "%x"
    else:
        t, w = f"tensor<1x1x1x{size}xf32>", "tensor<1x1x1x1xf32>"
        ints = "array<i64: 1, 1>"
        head = [f'  %w = "hexir.constant"() {{value = dense<1.0> : {w}}} : () -> {w}',
                f'  %c = "hexir.conv"(%x, %w) {{strides = {ints}, pads = array<i64: 0, 0, 0, 0>, '
                f"dilations = {ints}, group = 1 : i64}} : ({t}, {w}) -> {t}"]
        x = "%c"
    source.write_text("\n".join([
        f"func.func @main(%x: {t}, %lo: {s}, %hi: {s}) -> {t} {{", *head,
        f'  %m = "hexir.max"({x}, %lo) : ({t}, {s}) -> {t}',
        f'  %y = "hexir.min"(%m, %hi) : ({t}, {s}) -> {t}',
        f"  return %y : {t}", "}", ""]))
    return source


@pytest.mark.parametrize("form", ["scalar", "vector"])
@pytest.mark.parametrize("cpu", LEVELS)
def test_a_clip_with_bounds_given_at_run_time_is_ieee_max_then_min(tmp_path, cpu: str,
                                                                     form: str) -> None:
    """Every pair of bounds among NaN, signed zeros, infinities and numbers, on every such x
    (and a sweep): the kernel loads the bounds once, at its top, and computes the corrections
    for NaN and zero bounds there (`elementwise._extremum`); NaN and the sign of zero are
    checked bit for bit. (In the vector form x is the conv's sum x * 1, where -0 is +0.)"""
    bounds = [math.nan, 0.0, -0.0, math.inf, -math.inf, -1.0, 6.0, 1e-45]
    x = np.concatenate([np.float32([*bounds, 1.0, -6.0, 7.0, -1e-45]),
                        np.linspace(-8, 8, 61, dtype=np.float32)])
    image = compile_file(_clip_source(tmp_path, x.size, form), Options("hxb", cpu=cpu))
    seen = x if form == "scalar" else x + np.float32(0)  # the conv's -0 is +0
    with hr.load(image) as m:
        for lo in bounds:
            for hi in bounds:
                got = m.main(x if form == "scalar" else x.reshape(1, 1, 1, -1),
                             np.float32(lo), np.float32(hi)).reshape(-1)
                want = np.float32([extremum("min", extremum("max", v, lo), hi)
                                   for v in seen.tolist()])
                where = f"clip({form}, {cpu}) with bounds {lo}, {hi}"
                assert np.array_equal(np.isnan(got), np.isnan(want)), where
                ok = ~np.isnan(want)
                assert np.array_equal(got[ok], want[ok]), (where, x[ok], got[ok])
                assert np.array_equal(np.signbit(got[ok]), np.signbit(want[ok])), \
                    (where, x[ok], got[ok])
