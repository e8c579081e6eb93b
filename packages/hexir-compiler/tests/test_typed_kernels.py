"""The kernels of the ONNX-era ops, on both devices, checked thread by thread.

Integer and boolean element types, comparisons, where, cast, expand, concat, slice, gather,
conv and pooling: each case is a one-op program, lowered by hexir-lower-to-tir and run by
`tir_interp` under its own schedule (a cuda kernel as every thread of its grid, with races and
out-of-bounds accesses as failures), compared with a numpy reference written here. A bool
buffer holds one byte per element, as the format says, so the kernels see int8 arrays.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ieee import extremum
from tir_programs import Lowered

NUMPY = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "i1": np.bool_}
STORE = {"i1": np.int8}  # how a kernel's buffer holds a bool


def _tensor(shape, element: str) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{element}>"


def _run(op: str, inputs: list[np.ndarray], out_shape, out_element: str, device: str,
         attrs: str = "") -> np.ndarray:
    """Lower `hexir.<op>` of `inputs` on `device`, run its kernel, return its result."""
    elements = [next(k for k, v in NUMPY.items() if v == a.dtype) for a in inputs]
    types = [_tensor(a.shape, e) for a, e in zip(inputs, elements, strict=True)]
    result = _tensor(out_shape, out_element)
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
    operands = ", ".join(f"%a{i}" for i in range(len(inputs)))
    extra = f", {attrs}" if attrs else ""
    text = (f"func.func @main({args}) -> {result} {{\n"
            f'  %0 = "hexir.{op}"({operands}) {{device = "{device}"{extra}}} : '
            f"({', '.join(types)}) -> {result}\n  return %0 : {result}\n}}\n")
    lowered = Lowered(text)
    (kernel,) = lowered.kernels
    buffers = [a.astype(STORE.get(e, a.dtype)) for a, e in zip(inputs, elements, strict=True)]
    store = STORE.get(out_element, NUMPY[out_element])
    out = np.zeros(out_shape, store)
    with lowered.context:
        kernel(*buffers, out)
    return out.astype(NUMPY[out_element])


def _ints(values) -> str:
    return f"array<i64{': ' if len(values) else ''}{', '.join(map(str, values))}>"


DEVICES = ["cpu", "cuda"]
RNG = np.random.default_rng(11)


def _random(shape, element: str, rng=RNG) -> np.ndarray:
    if element == "i1":
        return rng.random(shape) < 0.5
    if element in ("i32", "i64"):
        return rng.integers(-50, 50, shape).astype(NUMPY[element])
    return rng.standard_normal(shape).astype(NUMPY[element])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("element", ["i32", "i64"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "max", "min"])
def test_integer_arithmetic(op, element, device):
    a, b = _random((3, 5), element), _random((5,), element)
    b[0] = 0  # division by zero gives 0
    if op == "div":
        a[0, 1], b[1] = np.iinfo(NUMPY[element]).min, -1  # wraps instead of trapping
    got = _run(op, [a, b], (3, 5), element, device)
    with np.errstate(all="ignore"):
        expected = {"add": a + b, "sub": a - b, "mul": a * b, "max": np.maximum(a, b),
                    "min": np.minimum(a, b),
                    "div": np.where(b == 0, 0, np.trunc(a.astype(np.float64) / np.where(
                        b == 0, 1, b)).astype(np.int64).astype(a.dtype))}[op]
    np.testing.assert_array_equal(got, expected)


SPECIALS = [np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 6.0, 1e-45]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("element", ["f32", "f64"])
@pytest.mark.parametrize("op", ["max", "min"])
def test_float_max_and_min_are_ieee_maximum_and_minimum(op, element, device):
    """Every pair of NaN, -NaN, zeros of both signs, infinities and numbers, the second
    operand a tensor and a scalar (a clip's bound, which the kernel loads once), NaN and
    the sign of zero checked bit for bit."""
    values = np.array(SPECIALS, NUMPY[element])
    a = np.repeat(values, len(values)).reshape(len(values), len(values))
    b = a.T.copy()
    cases = [(b, a)] + [(np.array(v, NUMPY[element]), values[:, None] * np.ones((1, 3)))
                        for v in values]
    for second, first in cases:
        first = first.astype(NUMPY[element])
        got = _run(op, [first, second], first.shape, element, device)
        want = np.vectorize(lambda x, y: extremum(op, x, y))(first, second).astype(got.dtype)
        assert (np.isnan(got) == np.isnan(want)).all(), (first, second, got)
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(got[ok], want[ok])
        assert (np.signbit(got[ok]) == np.signbit(want[ok])).all(), (first, second, got)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("element", ["f32", "i64", "i1"])
@pytest.mark.parametrize("op", ["equal", "less", "greater"])
def test_comparisons_give_bools(op, element, device):
    if element == "i1" and op != "equal":
        pytest.skip("only equal takes bools")
    a, b = _random((4, 3), element), _random((1, 3), element)
    if element == "f32":
        a[0, 0] = np.nan
        b[0, 1] = a[1, 1]
    got = _run(op, [a, b], (4, 3), "i1", device)
    np.testing.assert_array_equal(got, {"equal": np.equal, "less": np.less,
                                        "greater": np.greater}[op](a, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("element", ["f64", "i32", "i1"])
def test_where_broadcasts_its_condition(element, device):
    c, x, y = _random((1, 6), "i1"), _random((4, 6), element), _random((4, 6), element)
    np.testing.assert_array_equal(_run("where", [c, x, y], (4, 6), element, device),
                                  np.where(c, x, y))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("source, target", [
    (s, t) for s in ("f32", "f64", "i32", "i64", "i1") for t in ("f32", "f64", "i32", "i64", "i1")
    if s != t])
def test_cast_is_numpy_astype(source, target, device):
    x = _random((2, 7), source)
    if source in ("f32", "f64"):
        x = (x * 20).astype(x.dtype)
        x[0, :3] = [0.0, -0.0, np.nan] if target == "i1" else [0.0, -0.5, 2.75]
    got = _run("cast", [x], (2, 7), target, device)
    np.testing.assert_array_equal(got, x.astype(NUMPY[target]))


@pytest.mark.parametrize("device", DEVICES)
def test_expand_is_broadcast_to(device):
    x = _random((3, 1), "i64")
    np.testing.assert_array_equal(_run("expand", [x], (2, 3, 4), "i64", device),
                                  np.broadcast_to(x, (2, 3, 4)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis, device):
    a, b = _random((2, 3, 4), "f32"), _random((2, 3, 4), "f32")
    b = np.concatenate([b, b], axis=axis)
    shape = np.concatenate([a, b], axis=axis).shape
    np.testing.assert_array_equal(
        _run("concat", [a, b], shape, "f32", device, f"axis = {axis} : i64"),
        np.concatenate([a, b], axis=axis))


@pytest.mark.parametrize("device", DEVICES)
def test_concat_with_an_empty_operand(device):
    a, b = _random((2, 0), "i32"), _random((2, 3), "i32")
    np.testing.assert_array_equal(
        _run("concat", [a, b], (2, 3), "i32", device, "axis = 1 : i64"), b)


@pytest.mark.parametrize("device", DEVICES)
def test_slice_with_negative_and_large_steps(device):
    x = _random((5, 7, 3), "f64")
    view = x[4:0:-2, 1:7:3, :]
    got = _run("slice", [x], view.shape, "f64", device,
               f"starts = {_ints([4, 1, 0])}, steps = {_ints([-2, 3, 1])}")
    np.testing.assert_array_equal(got, view)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index", ["i32", "i64"])
@pytest.mark.parametrize("axis", [0, 1])
def test_gather_takes_negative_indices_and_clamps_out_of_range_ones(axis, index, device):
    data = _random((4, 5), "f32")
    indices = np.array([[0, -1], [3, 2], [9, -9]], NUMPY[index])
    extent = data.shape[axis]
    safe = np.clip(np.where(indices < 0, indices + extent, indices), 0, extent - 1)
    expected = np.take(data, safe, axis=axis)
    got = _run("gather", [data, indices], expected.shape, "f32", device, f"axis = {axis} : i64")
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("element", ["i64", "i1"])
@pytest.mark.parametrize("op", ["reduce_max", "reduce_min"])
def test_reductions_of_integers_and_bools(op, element, device):
    x = _random((3, 4, 2), element)
    fn = {"reduce_max": np.max, "reduce_min": np.min}[op]
    got = _run(op, [x], (3, 2), element, device, f"axes = {_ints([1])}, keepdims = false")
    np.testing.assert_array_equal(got, fn(x, axis=1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("element, shape", [("i32", (3, 5, 2)), ("i64", (2, 90, 3)),
                                            ("f32", (4, 7, 2)), ("f64", (2, 200, 1))])
def test_reduce_prod_short_and_long_rows(element, shape, device):
    """Rows of 90 and 200 run a block per row on cuda (the shared-memory tree of products);
    the values are near 1 (or small integers, which wrap as numpy's do) so no product
    overflows to infinity."""
    if element[0] == "i":
        x = RNG.integers(-3, 4, shape).astype(NUMPY[element])
    else:
        x = RNG.uniform(0.9, 1.1, shape).astype(NUMPY[element])
    got = _run("reduce_prod", [x], (shape[0], shape[2]), element, device,
               f"axes = {_ints([1])}, keepdims = false")
    want = np.prod(x, axis=1, dtype=x.dtype)
    if element[0] == "i":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_reductions_of_nothing_are_their_identity(device):
    x = np.zeros((2, 0), np.float32)
    attrs = f"axes = {_ints([1])}, keepdims = false"
    np.testing.assert_array_equal(_run("reduce_max", [x], (2,), "f32", device, attrs),
                                  [-np.inf, -np.inf])
    np.testing.assert_array_equal(_run("reduce_min", [x], (2,), "f32", device, attrs),
                                  [np.inf, np.inf])
    np.testing.assert_array_equal(_run("reduce_sum", [x.astype(np.int32)], (2,), "i32", device,
                                       attrs), [0, 0])
    np.testing.assert_array_equal(_run("reduce_prod", [x], (2,), "f32", device, attrs), [1, 1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op, fn", [("log", np.log), ("erf", np.vectorize(math.erf)),
                                    ("pow", np.power)])
def test_float_math(op, fn, device):
    x = np.abs(_random((3, 5), "f32")) + np.float32(0.1)
    inputs = [x, _random((5,), "f32")] if op == "pow" else [x]
    got = _run(op, inputs, (3, 5), "f32", device)
    np.testing.assert_allclose(got, fn(*[i.astype(np.float64) for i in inputs]), rtol=2e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["neg", "abs"])
def test_integer_neg_and_abs(op, device):
    x = _random((9,), "i32")
    np.testing.assert_array_equal(_run(op, [x], (9,), "i32", device), getattr(np, {
        "neg": "negative", "abs": "abs"}[op])(x))


# ---- windows ------------------------------------------------------------------------------

def _conv_reference(x, w, group, strides, pads, dilations):
    n, _c, *spatial = x.shape
    m, per, *kernel = w.shape
    rank = len(spatial)
    out = [(s + pads[d] + pads[rank + d] - dilations[d] * (k - 1) - 1) // strides[d] + 1
           for d, (s, k) in enumerate(zip(spatial, kernel, strict=True))]
    y = np.zeros((n, m, *out))
    for b, o in itertools.product(range(n), range(m)):
        g = o // (m // group)
        for pos in itertools.product(*(range(e) for e in out)):
            total = 0.0
            for ci, ks in itertools.product(range(per), itertools.product(*map(range, kernel))):
                at = [p * s - pads[d] + k * dl for d, (p, s, k, dl) in
                      enumerate(zip(pos, strides, ks, dilations, strict=True))]
                if all(0 <= a < e for a, e in zip(at, spatial, strict=True)):
                    total += x[(b, g * per + ci, *at)] * w[(o, ci, *ks)]
            y[(b, o, *pos)] = total
    return y


def _pool_reference(x, kind, kernel, strides, pads, dilations, out, include_pad):
    n, c, *spatial = x.shape
    rank = len(spatial)
    y = np.zeros((n, c, *out))
    for b, ch in itertools.product(range(n), range(c)):
        for pos in itertools.product(*(range(e) for e in out)):
            values, count = [], 0
            for ks in itertools.product(*map(range, kernel)):
                at = [p * s - pads[d] + k * dl for d, (p, s, k, dl) in
                      enumerate(zip(pos, strides, ks, dilations, strict=True))]
                if all(0 <= a < e for a, e in zip(at, spatial, strict=True)):
                    values.append(x[(b, ch, *at)])
                if all(a < e + pads[rank + d]
                       for d, (a, e) in enumerate(zip(at, spatial, strict=True))):
                    count += 1
            if kind == "max":
                y[(b, ch, *pos)] = max(values)
            else:
                y[(b, ch, *pos)] = sum(values) / (count if include_pad else len(values))
    return y


CONVS = [  # (input shape, weight shape, group, strides, pads, dilations)
    ((1, 2, 9), (3, 2, 3), 1, [2], [1, 0], [1]),
    ((2, 4, 6, 5), (4, 2, 3, 2), 2, [1, 2], [1, 1, 0, 1], [1, 1]),
    ((1, 3, 7, 7), (2, 3, 3, 3), 1, [2, 2], [0, 0, 0, 0], [2, 1]),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(CONVS)))
def test_conv(case, device):
    xs, ws, group, strides, pads, dilations = CONVS[case]
    x, w = _random(xs, "f64"), _random(ws, "f64")
    expected = _conv_reference(x, w, group, strides, pads, dilations)
    attrs = (f"strides = {_ints(strides)}, pads = {_ints(pads)}, dilations = "
             f"{_ints(dilations)}, group = {group} : i64")
    got = _run("conv", [x, w], expected.shape, "f64", device, attrs)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


POOLS = [  # (input shape, kind, kernel, strides, pads, dilations, ceil_mode, count_include_pad)
    ((1, 2, 5, 5), "max", [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], False, False),
    ((1, 1, 6, 7), "average", [2, 3], [2, 2], [0, 1, 1, 0], [1, 1], True, False),
    ((2, 1, 5), "average", [3], [2], [1, 1], [1], True, True),
    ((1, 1, 7, 7), "max", [2, 2], [3, 3], [0, 0, 0, 0], [2, 1], True, False),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(POOLS)))
def test_pool(case, device):
    from hexir_format import signatures

    xs, kind, kernel, strides, pads, dilations, ceil, include = POOLS[case]
    x = _random(xs, "f32")
    out = signatures.window(xs[2:], kernel, strides, pads, dilations, ceil)
    expected = _pool_reference(x.astype(np.float64), kind, kernel, strides, pads, dilations,
                               out, include)
    attrs = (f'kind = "{kind}", kernel = {_ints(kernel)}, strides = {_ints(strides)}, '
             f"pads = {_ints(pads)}, dilations = {_ints(dilations)}, "
             f"ceil_mode = {str(ceil).lower()}, count_include_pad = {str(include).lower()}")
    got = _run("pool", [x], expected.shape, "f32", device, attrs)
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-6)
