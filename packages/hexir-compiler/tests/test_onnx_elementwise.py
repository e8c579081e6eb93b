"""The element-wise ONNX ops where the node tests miss a case, against values written here.

Each case is a one-node model run on the cpu (compiled, loaded by the runtime) and with every
op on cuda (its kernels run thread by thread by `tir_interp`). The node tests of And, Or, Xor
and Not are IR version 3 models Hexir does not read, Mod's have no zero or -1 divisors and no
wrapping MIN, Round's no halves of odd numbers, Softplus', Mish's and Softsign's no large
|x|.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper

import tir_graph
from hexir_compiler.pipeline import Options

TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
         np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64,
         np.dtype(np.bool_): TensorProto.BOOL}
I32_MIN = np.iinfo(np.int32).min


def _model(op: str, inputs: list[np.ndarray], opset: int = 20, **attrs):
    names = [f"x{i}" for i in range(len(inputs))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)], "g",
        [helper.make_tensor_value_info(n, TYPES[a.dtype], a.shape)
         for n, a in zip(names, inputs, strict=True)],
        [helper.make_tensor_value_info("y", 0, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(op: str, inputs: list, expected, device: str, rtol: float = 0, opset: int = 20,
           **attrs) -> None:
    import hexir_compiler
    import hexir_runtime

    inputs = [np.asarray(a) for a in inputs]
    model = _model(op, inputs, opset, **attrs)
    if device == "cpu":
        got = hexir_runtime.load(hexir_compiler.compile(model)).main(*inputs)
    else:
        (got,) = tir_graph.run(model, inputs, Options("mlir-tir", {"*": "cuda"}))
    expected = np.asarray(expected)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=rtol, equal_nan=True)


DEVICES = ["cpu", "cuda"]
# Dividends and divisors of every sign, zero and -1 divisors, and MIN, whose % -1 traps in
# hardware: x % 0 is 0 (numpy), MIN % -1 is 0.
X = [7, -7, 7, -7, 6, -6, 5, -5, I32_MIN, I32_MIN, 0]
Y = [3, 3, -3, -3, 3, -3, 0, -1, -1, 7, -4]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_mod_takes_the_divisors_sign_and_fmod_the_dividends(dtype, device):
    x, y = np.array(X, dtype), np.array(Y, dtype)
    mod = [1, 2, -2, -1, 0, 0, 0, 0, 0, 5, 0]
    fmod = [1, -1, 1, -1, 0, 0, 0, 0, 0, -2, 0]
    _check("Mod", [x, y], np.array(mod, dtype), device)
    _check("Mod", [x, y], np.array(fmod, dtype), device, fmod=1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_mod_is_c_fmod(dtype, device):
    x = np.array([5.5, -5.5, 5.5, -5.5, 1.0, np.inf], dtype)
    y = np.array([2.0, 2.0, -2.0, -2.0, 0.0, 2.0], dtype)
    _check("Mod", [x, y], np.array([1.5, -1.5, 1.5, -1.5, np.nan, np.nan], dtype), device,
           fmod=1)


def test_float_mod_without_fmod_is_refused_before_opset_28():
    import hexir_compiler

    x = np.ones(3, np.float32)
    with pytest.raises(hexir_compiler.CompileError, match="Mod of float32 needs fmod=1 before "
                                                          "opset 28"):
        hexir_compiler.compile(_model("Mod", [x, x]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_mod_from_opset_28_is_floor_modulo(dtype, device):
    # every sign, a remainder of 0 (kept), a zero divisor (NaN), infinite operands, a divisor
    # broadcast along the last axis
    x = np.array([[5.5, -5.5, 5.5, -5.5, 6.0, 1.0],
                  [np.inf, 3.0, -3.0, 3.0, -3.0, 0.25]], dtype)
    y = np.array([[2.0, 2.0, -2.0, -2.0, 3.0, 0.0], [2.0, np.inf, np.inf, -np.inf, -np.inf,
                                                      0.125]], dtype)
    want = np.array([[1.5, 0.5, -0.5, -1.5, 0.0, np.nan],
                     [np.nan, 3.0, np.inf, -np.inf, -3.0, 0.0]], dtype)
    _check("Mod", [x, y], want, device, opset=28)
    _check("Mod", [x, y[:1]], np.mod(x, y[:1]), device, opset=28)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_takes_halves_to_even_and_floor_ceil_sign_their_meaning(dtype, device):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 2.5001, -0.0, np.nan, 1e20],
                 dtype)
    _check("Round", [x], np.array([0, 2, 2, -0, -2, -2, 2, 3, -0, np.nan, 1e20], dtype),
           device)
    _check("Floor", [x], np.array([0, 1, 2, -1, -2, -3, 2, 2, -0, np.nan, 1e20], dtype),
           device)
    _check("Ceil", [x], np.array([1, 2, 3, -0, -1, -2, 3, 3, -0, np.nan, 1e20], dtype), device)
    _check("Sign", [x], np.array([1, 1, 1, -1, -1, -1, 1, 1, 0, np.nan, 1], dtype), device)


@pytest.mark.parametrize("device", DEVICES)
def test_sign_of_integers(device):
    x = np.array([5, 0, -3, I32_MIN, np.iinfo(np.int32).max], np.int32)
    _check("Sign", [x], np.array([1, 0, -1, -1, 1], np.int32), device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("attrs, expected", [
    ({}, [True, True, False, False, False]),
    ({"detect_negative": 0}, [True, False, False, False, False]),
    ({"detect_positive": 0}, [False, True, False, False, False]),
    ({"detect_positive": 0, "detect_negative": 0}, [False] * 5),
])
def test_isinf_detects_the_signs_it_is_asked_for(attrs, expected, device):
    x = np.array([np.inf, -np.inf, np.nan, 3.4e38, 0], np.float32)
    _check("IsInf", [x], np.array(expected), device, **attrs)


@pytest.mark.parametrize("device", DEVICES)
def test_isnan(device):
    x = np.array([np.nan, -np.nan, np.inf, 0, 1], np.float64)
    _check("IsNaN", [x], np.array([True, True, False, False, False]), device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softplus_mish_and_softsign_at_large_magnitudes(dtype, device):
    # softplus(x) = log(1 + e^x) and mish(x) = x tanh(softplus(x)): e^x overflows float32
    # from x = 89 and float64 from 710, where softplus and mish are x; far below zero they
    # are e^x and x e^x, tiny but not zero.
    x = np.array([1000, 100, 20, 1, 0, -1, -20, -50, -1000], dtype)
    wide = x.astype(np.float64)
    softplus = np.maximum(wide, 0) + np.log1p(np.exp(-np.abs(wide)))
    _check("Softplus", [x], softplus.astype(dtype), device, rtol=1e-5)
    _check("Mish", [x], (wide * np.tanh(softplus)).astype(dtype), device, rtol=1e-5)
    big = np.array([3e38, -3e38, 1e30, -1e-30, 0], dtype)
    _check("Softsign", [big], (big / (1 + np.abs(big.astype(np.float64)))).astype(dtype), device,
           rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_logical_ops_of_bools(device):
    a = np.array([True, True, False, False])
    b = np.array([[True, False, True, False], [False, False, False, False]])
    _check("And", [a, b], a & b, device)
    _check("Or", [a, b], a | b, device)
    _check("Xor", [a, b], a ^ b, device)
    _check("Not", [a], ~a, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_bitwise_ops_of_integers(dtype, device):
    a = np.array([12, -1, 0, np.iinfo(dtype).min, 5], dtype)
    b = np.array([10, 7, -1, -1, -6], dtype)
    _check("BitwiseAnd", [a, b], a & b, device)
    _check("BitwiseOr", [a, b], a | b, device)
    _check("BitwiseXor", [a, b], a ^ b, device)
    _check("BitwiseNot", [a], ~a, device)


def test_logical_ops_refuse_what_they_do_not_take():
    import hexir_compiler

    ints = np.ones(3, np.int32)
    with pytest.raises(hexir_compiler.CompileError, match="And of int32 is not supported"):
        hexir_compiler.compile(_model("And", [ints, ints]))
    with pytest.raises(hexir_compiler.CompileError, match="BitwiseNot of bool is not supported"):
        hexir_compiler.compile(_model("BitwiseNot", [np.ones(3, np.bool_)]))


@pytest.mark.parametrize("device", DEVICES)
def test_hardswish(device):
    x = np.array([-4, -3, -1, 0, 1, 3, 4], np.float32)
    _check("HardSwish", [x], x * np.clip(x / 6 + 0.5, 0, 1), device, rtol=1e-6)


def test_dropout_is_the_identity_with_an_all_true_mask():
    import hexir_compiler
    import hexir_runtime

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    graph = helper.make_graph(
        [helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.5)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", 0, None), helper.make_tensor_value_info("mask", 0,
                                                                                    None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    y, mask = hexir_runtime.load(hexir_compiler.compile(model)).main(x)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.shape == x.shape and mask.all()


@pytest.mark.parametrize("dtype, symbol", [(np.float32, "roundevenf"), (np.float64, "roundeven")])
def test_round_below_sse4_calls_libm_roundeven_which_the_runtime_loads(dtype, symbol):
    # x86-64 without SSE4.1 has no rounding instruction: the kernel calls libm, and the
    # runtime's loader must accept that symbol.
    import hexir_compiler
    import hexir_format as hf
    import hexir_runtime
    from hexir_format import elf

    x = np.array([0.5, 1.5, 2.5, -2.5, 3.7], dtype)
    hxb = hexir_compiler.compile(_model("Round", [x]), target="cpu:x86-64")
    (image,) = [e.image for e in hf.parse(hxb).executables if e.device is hf.Device.CPU]
    assert symbol in elf.parse_object(image).undefined
    np.testing.assert_array_equal(hexir_runtime.load(hxb).main(x), np.array([0, 2, 2, -2, 4],
                                                                             dtype))


@pytest.mark.parametrize(("exponent", "multiplies"), [
    (np.float32(3.0), True),  # a scalar initializer: x * x * x
    (np.full((1, 4), 2.0, np.float32), True),  # the same value everywhere, no broadcast of x
    (np.float32(2.5), False),
    (np.array([2.0, 3.0, 2.0, 2.0], np.float32), False),  # not one value
    (np.full((3, 2, 4), 3.0, np.float32), False),  # it broadcasts x: pow keeps the shape rule
])
def test_pow_by_a_constant_two_or_three_is_multiplies(exponent, multiplies):
    """As ONNX Runtime's kernel does; a pow is a libm call per element (a scalar loop)."""
    import hexir_compiler
    import hexir_runtime

    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    y = np.asarray(exponent)
    out_shape = np.broadcast_shapes(x.shape, y.shape)
    graph = helper.make_graph(
        [helper.make_node("Pow", ["x", "y"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, out_shape)],
        [onnx.numpy_helper.from_array(y, "y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    assert ('"hexir.pow"' not in hexir_compiler.compile(model, emit="mlir")) == multiplies
    got = hexir_runtime.load(hexir_compiler.compile(model)).main(x)
    with np.errstate(invalid="ignore"):  # a negative base to the power 2.5: NaN, as here
        want = np.power(x.astype(np.float64), y)
    np.testing.assert_allclose(got, want, rtol=4e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("constant", [True, False], ids=["constant-stats", "input-stats"])
def test_batch_norm_of_constant_statistics_is_one_multiply_add(dtype, constant):
    """BatchNormalization whose scale, bias, mean and variance are initializers is
    x * k + shift, k and shift computed at compile time (ONNX Runtime's form); statistics
    that are graph inputs keep the subtract, sqrt and divide. Both match float64 numpy."""
    import hexir_compiler
    import hexir_runtime

    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 3, 4)).astype(dtype)
    stats = {"s": rng.standard_normal(5), "b": rng.standard_normal(5),
             "m": rng.standard_normal(5), "v": rng.uniform(0.1, 2.0, 5)}
    stats = {k: v.astype(dtype) for k, v in stats.items()}
    element = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    given = [helper.make_tensor_value_info(k, element, (5,)) for k in stats]
    eps = 2.0**-10  # a float attribute is f32: exact there
    graph = helper.make_graph(
        [helper.make_node("BatchNormalization", ["x", *stats], ["y"], epsilon=eps)], "g",
        [helper.make_tensor_value_info("x", element, x.shape), *([] if constant else given)],
        [helper.make_tensor_value_info("y", element, x.shape)],
        [onnx.numpy_helper.from_array(v, k) for k, v in stats.items()] if constant else [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    text = hexir_compiler.compile(model, emit="mlir")
    assert ('"hexir.sqrt"' not in text and '"hexir.div"' not in text) == constant
    m = hexir_runtime.load(hexir_compiler.compile(model))
    got = m.main(x) if constant else m.main(x, *stats.values())
    s, b, mean, v = (stats[k].astype(np.float64).reshape(5, 1, 1) for k in "sbmv")
    want = (x - mean) / np.sqrt(v + eps) * s + b
    np.testing.assert_allclose(got, want, rtol=2e-6 if dtype == np.float32 else 1e-14,
                               atol=1e-6 if dtype == np.float32 else 1e-14)
