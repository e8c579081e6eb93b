"""The tests' numpy oracle (numpy_kernels, which the fake driver runs) against direct numpy
expressions, and validation applying the
kernel kinds' signature rule (hexir_format.signatures) before any of them runs."""

import math

import hexir_format as hf
import modules
import numpy as np
import numpy_kernels as kernels
import pytest
from hexir_format import Command, Device, DType, Function, KernelKind, Slot, signature_problem
from hexir_format import TensorType as T
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

from hexir_runtime import validate
from hexir_runtime.errors import ValidationError

K = KernelKind
RNG = np.random.default_rng(7)


def run(kind, params, *inputs, out_shape, dtype):
    args = [T(DType.F32 if dtype == np.float32 else DType.F64, x.shape) for x in inputs]
    args.append(T(args[0].dtype, out_shape))
    assert signature_problem(kind, args, params) is None
    out = np.full(out_shape, np.nan, dtype=dtype)
    kernels.run(kind, params, [x.astype(dtype) for x in inputs], out)
    return out


def rand(*shape):
    return RNG.standard_normal(shape)


DTYPES = [np.float32, np.float64]
TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 3), (3, 4)), ((7, 13), (13, 5)), ((4, 1, 5, 6), (3, 6, 2)), ((5, 6), (2, 6, 3)),
    ((1, 1), (1, 1)), ((3,), (3, 4)), ((4, 2, 3), (3,)), ((5,), (2, 5, 3)),
])
def test_matmul_broadcasts_batch_dims(dtype, a_shape, b_shape):
    a, b = rand(*a_shape), rand(*b_shape)
    want = np.matmul(a.astype(dtype), b.astype(dtype))
    got = run(K.MATMUL, (), a, b, out_shape=want.shape, dtype=dtype)
    np.testing.assert_allclose(got, want, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind,fn", [(K.ADD, np.add), (K.SUB, np.subtract),
                                     (K.MUL, np.multiply), (K.DIV, np.divide)])
@pytest.mark.parametrize("a_shape,b_shape", [((3, 5), (3, 5)), ((4, 1, 7), (5, 1)),
                                             ((), (2, 3)), ((6,), (3, 1))])
def test_binary_ops_broadcast_like_numpy(dtype, kind, fn, a_shape, b_shape):
    a, b = rand(*a_shape), rand(*b_shape) + 3
    want = fn(a.astype(dtype), b.astype(dtype))
    got = run(kind, (), a, b, out_shape=want.shape, dtype=dtype)
    np.testing.assert_allclose(got, want, **TOL[dtype])


def _gelu_erf(x):
    return np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.ravel()]).reshape(
        x.shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind,params,fn", [
    (K.RELU, (), lambda x: np.maximum(x, 0)),
    (K.SIGMOID, (), lambda x: 1 / (1 + np.exp(-x))),
    (K.TANH, (), np.tanh), (K.EXP, (), np.exp), (K.NEG, (), np.negative),
    (K.SQRT, (), lambda x: np.sqrt(np.abs(x))),
    (K.GELU, (0.0,), _gelu_erf),
    (K.GELU, (1.0,), lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi)
                                                      * (x + 0.044715 * x**3)))),
])
def test_unary_ops(dtype, kind, params, fn):
    x = rand(3, 17, 5) * 3
    if kind is K.SQRT:
        x = np.abs(x)
    want = fn(x.astype(np.float64)).astype(dtype)
    got = run(kind, params, x, out_shape=x.shape, dtype=dtype)
    np.testing.assert_allclose(got, want, **TOL[dtype])


def test_relu_propagates_nan_like_numpy_and_onnx():
    got = run(K.RELU, (), np.array([np.nan, -1.0, 2.0]), out_shape=(3,), dtype=np.float64)
    np.testing.assert_array_equal(got, [np.nan, 0.0, 2.0])


def test_sigmoid_does_not_overflow():
    got = run(K.SIGMOID, (), np.array([-1000.0, 1000.0]), out_shape=(2,), dtype=np.float64)
    assert got.tolist() == [0.0, 1.0]


def test_erf_matches_math_erf_to_1e_12_relative():
    x = np.concatenate([np.linspace(-7, 7, 100_001), np.logspace(-300, 1, 2000),
                        -np.logspace(-300, 1, 2000), [0.0, -0.0, np.inf, -np.inf]])
    want = np.array([math.erf(v) for v in x])
    got = kernels.erf(x)
    rel = np.abs(got - want) / np.maximum(np.abs(want), np.finfo(float).tiny)
    assert rel.max() < 1e-14
    assert np.signbit(kernels.erf(np.array([-0.0]))[0])
    assert np.isnan(kernels.erf(np.array([np.nan]))[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", [((4, 9), 1), ((4, 9), 0), ((2, 3, 5), 1)])
def test_softmax_is_stable(dtype, shape, axis):
    x = rand(*shape) * 50 + 1000  # exp(1000) overflows without the max shift
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    want = e / e.sum(axis=axis, keepdims=True)
    got = run(K.SOFTMAX, (float(axis),), x, out_shape=shape, dtype=dtype)
    assert np.isfinite(got).all()
    # Probabilities live in [0, 1]: an absolute floor keeps f32 subnormals from failing on
    # a relative error of one ulp.
    tol = dict(rtol=1e-4, atol=1e-7) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(got, want.astype(dtype), **tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_over_the_last_dim(dtype):
    x, g, b = rand(3, 4, 10), rand(10), rand(10)
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    want = (x - mean) / np.sqrt(var + 1e-5) * g + b
    got = run(K.LAYER_NORM, (1e-5,), x, g, b, out_shape=x.shape, dtype=dtype)
    np.testing.assert_allclose(got, want.astype(dtype), rtol=1e-4 if dtype == np.float32 else 1e-10,
                               atol=1e-5 if dtype == np.float32 else 1e-12)


def test_transpose_and_reshape():
    x = rand(2, 3, 4)
    got = run(K.TRANSPOSE, (2.0, 0.0, 1.0), x, out_shape=(4, 2, 3), dtype=np.float64)
    np.testing.assert_array_equal(got, np.transpose(x, (2, 0, 1)))
    got = run(K.RESHAPE, (), x, out_shape=(6, 4), dtype=np.float64)
    np.testing.assert_array_equal(got, x.reshape(6, 4))


@pytest.mark.parametrize("kind,fn", [(K.REDUCE_SUM, np.sum), (K.REDUCE_MEAN, np.mean),
                                     (K.REDUCE_MAX, np.max)])
@pytest.mark.parametrize("keepdims,axes", [(0, (1,)), (1, (0, 2)), (0, ())])
def test_reductions(kind, fn, keepdims, axes):
    x = rand(3, 5, 7)
    want = fn(x, axis=axes or None, keepdims=bool(keepdims))
    got = run(kind, (float(keepdims), *map(float, axes)), x, out_shape=np.shape(want),
              dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-12)


# ---- validation applies the shared signature rule (hexir_format.signatures) ------------------

def one_kernel(kind, args, params):
    """A v4 module: the inputs -> one kernel -> its destination as the output. The kernel is a
    (fake-image) cuda one, where any kind may be; validation touches no device."""
    *ins, out = args
    commands = (*(Command.input(i, i) for i in range(len(ins))),
                Command.alloc(len(ins), out.nbytes), Command.dispatch(0, tuple(range(len(args)))),
                Command.output(len(ins), 0))
    exe = modules.fake_image_exe(f"{kind}_0", kind, tuple(args), params)
    return hf.Module(4, (Function("main", commands),), b"", (exe,),
                     tuple(Slot(Device.CUDA, a) for a in args))


X, V = T(DType.F64, (2, 3)), T(DType.F64, (3,))


@pytest.mark.parametrize("kind,args,params", [
    (K.LAYER_NORM, [X, V, V, X], (0.0,)),  # epsilon 0 is allowed
    (K.REDUCE_SUM, [X, T(DType.F64, ())], (0.0,)),  # no axes: every axis
    (K.REDUCE_MAX, [X, T(DType.F64, (1, 1))], (1.0,)),
    (K.GELU, [V, V], ()),  # erf when the param is absent
    (K.SOFTMAX, [X, X], (1.0,)),
])
def test_validation_accepts_what_the_rule_accepts(kind, args, params):
    assert signature_problem(kind, args, params) is None
    assert validate.check_module(one_kernel(kind, args, params)).entries["main"].executables == (0,)


@pytest.mark.parametrize("kind,args,params,message", [
    (K.SOFTMAX, [X, X], (), "softmax has 0 params; expected 1 (the axis)"),  # axis required
    (K.LAYER_NORM, [X, V, V, X], (-1.0,), "layer_norm epsilon is -1"),
    (K.REDUCE_MEAN, [X, X], (0.0,), "reduce_mean of 2x3xf64 gives scalar"),
    (K.GELU, [V, V], (2.0,), "gelu approximate is 2"),
    (K.MATMUL, [X, T(DType.F64, (2, 2)), T(DType.F64, (2, 2))], (),
     "matmul inner dimensions differ: 3 vs 2"),
])
def test_validation_refuses_what_the_rule_refuses(kind, args, params, message):
    problem = signature_problem(kind, args, params)
    assert problem is not None and problem.startswith(message)
    with pytest.raises(ValidationError) as caught:
        validate.check_module(one_kernel(kind, args, params))
    assert str(caught.value) == f"executable 0 ('{kind}_0'), args: {problem}"


# ---- random shapes ---------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=7),
       kind=st.sampled_from([K.ADD, K.SUB, K.MUL, K.DIV]), dtype=st.sampled_from(DTYPES))
def test_random_broadcasts(shapes, kind, dtype):
    (a_shape, b_shape), out_shape = shapes.input_shapes, shapes.result_shape
    a, b = rand(*a_shape), rand(*b_shape) + 4
    fn = {K.ADD: np.add, K.SUB: np.subtract, K.MUL: np.multiply, K.DIV: np.divide}[kind]
    got = run(kind, (), a, b, out_shape=out_shape, dtype=dtype)
    np.testing.assert_allclose(got, fn(a.astype(dtype), b.astype(dtype)), **TOL[dtype])


@settings(max_examples=40, deadline=None)
@given(batch=mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3),
       m=st.integers(1, 17), n=st.integers(1, 17), k=st.integers(1, 17),
       dtype=st.sampled_from(DTYPES))
def test_random_batched_matmuls(batch, m, n, k, dtype):
    (ba, bb), bo = batch.input_shapes, batch.result_shape
    a, b = rand(*ba, m, k), rand(*bb, k, n)
    got = run(K.MATMUL, (), a, b, out_shape=(*bo, m, n), dtype=dtype)
    np.testing.assert_allclose(got, np.matmul(a.astype(dtype), b.astype(dtype)), **TOL[dtype])
