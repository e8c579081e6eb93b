"""The shape rules and each kernel kind's signature rule, with the meanings settled on numpy's
and ONNX's: what the compiler's verifiers and the runtime's validation both apply."""

from __future__ import annotations

import pytest

from hexir_format import (
    CODE_KINDS,
    DType,
    HexirError,
    KernelKind,
    ShapeError,
    signature_problem,
    signatures,
)
from hexir_format import TensorType as T

K = KernelKind
F32, F64 = DType.F32, DType.F64
NAN, INF = float("nan"), float("inf")


def t(*shape: int, dtype: DType = F64) -> T:
    return T(dtype, shape)


def refused(rule, *args, **kwargs) -> str:
    with pytest.raises(ShapeError) as caught:
        rule(*args, **kwargs)
    return str(caught.value)


def test_a_shape_error_is_a_value_error_and_a_hexir_error():
    assert issubclass(ShapeError, ValueError) and issubclass(ShapeError, HexirError)


def test_fmt():
    assert signatures.fmt((2, 3)) == "2x3"
    assert signatures.fmt(()) == "scalar"


# ---- shape rules -----------------------------------------------------------------------------

@pytest.mark.parametrize("a, b, out", [
    ((2, 3), (2, 3), (2, 3)),
    ((2, 3), (3,), (2, 3)),
    ((2, 1, 4), (3, 1), (2, 3, 4)),
    ((), (5,), (5,)),
    ((0,), (1,), (0,)),  # a 1 takes the other extent, 0 too (numpy's rule)
    ((1, 3), (0, 1), (0, 3)),
])
def test_broadcast(a, b, out):
    assert signatures.broadcast(a, b) == out
    assert signatures.broadcast(b, a) == out


@pytest.mark.parametrize("a, b", [((2, 3), (4, 3)), ((0,), (2,)), ((3,), (2, 2))])
def test_broadcast_refuses(a, b):
    assert "are not broadcast-compatible" in refused(signatures.broadcast, a, b)


@pytest.mark.parametrize("a, b, out", [
    ((2, 3), (3, 4), (2, 4)),
    ((4, 1, 5, 6), (3, 6, 2), (4, 3, 5, 2)),
    ((5, 6), (2, 6, 3), (2, 5, 3)),
    ((3,), (3, 4), (4,)),  # a vector lhs: a unit row, dropped
    ((4, 2, 3), (3,), (4, 2)),  # a vector rhs: a unit column, dropped
    ((5,), (2, 5, 3), (2, 3)),
    ((3,), (3,), ()),
])
def test_matmul_is_numpys(a, b, out):
    assert signatures.matmul(a, b) == out


def test_matmul_refuses():
    assert refused(signatures.matmul, (2, 3), (2, 2)) == "inner dimensions differ: 3 vs 2"
    assert refused(signatures.matmul, (3,), (2,)) == "inner dimensions differ: 3 vs 2"
    assert refused(signatures.matmul, (), (2,)) == "expected a lhs of rank 1 or more, got rank 0"
    assert refused(signatures.matmul, (3, 2, 4), (2, 4, 5)) == (
        "batch dimensions 3 and 2 are not broadcast-compatible")


def test_matmul_without_vectors_is_hexir_matmul():
    assert signatures.matmul((2, 3, 4), (1, 4, 5), vectors=False) == (2, 3, 5)
    assert refused(signatures.matmul, (3,), (3, 4), vectors=False) == (
        "expected a lhs of rank 2 or more, got rank 1")
    assert refused(signatures.matmul, (2, 3), (3,), vectors=False) == (
        "expected a rhs of rank 2 or more, got rank 1")


def test_linear():
    assert signatures.linear((2, 3), (3, 4)) == (2, 4)
    assert signatures.linear((5, 2, 3), (3, 4)) == (5, 2, 4)
    assert signatures.linear((3,), (3, 4)) == (4,)
    assert refused(signatures.linear, (2, 3), (2, 2)) == "inner dimensions differ: 3 vs 2"
    assert refused(signatures.linear, (), (3, 4)) == (
        "expected an input of rank 1 or more, got a scalar")
    assert refused(signatures.linear, (2, 3), (2, 3, 4)) == (
        "expected a rank-2 weight [K, N], got rank 3")


def test_normalize_axis():
    assert [signatures.normalize_axis(a, 3) for a in (-3, -1, 0, 2)] == [0, 2, 0, 2]
    assert refused(signatures.normalize_axis, 2, 2) == (
        "axis 2 is out of range for rank 2; expected -2..1")
    assert "out of range" in refused(signatures.normalize_axis, -3, 2)


def test_transpose():
    assert signatures.transpose((2, 3, 4), (2, 0, 1)) == (4, 2, 3)
    assert signatures.transpose((), ()) == ()
    assert refused(signatures.transpose, (2, 3, 4), (0, 2, 2)) == (
        "permutation [0, 2, 2] is not a permutation of 0..2")
    assert "not a permutation" in refused(signatures.transpose, (2, 3), (0,))


def test_reshape():
    assert signatures.reshape((2, 3), (3, 1, 2)) == (3, 1, 2)
    assert signatures.reshape((), (1, 1)) == (1, 1)
    assert refused(signatures.reshape, (2, 3), (4, 2)) == (
        "cannot reshape 2x3 (6 elements) to 4x2 (8 elements)")


@pytest.mark.parametrize("axes, keepdims, out", [
    ((1,), False, (2, 4)),
    ((1,), True, (2, 1, 4)),
    ((0, -1), False, (3,)),
    ((-1, 0), True, (1, 3, 1)),
    ((), False, ()),  # no axes: every axis (ONNX), not numpy's "none of them"
    ((), True, (1, 1, 1)),
])
def test_reduce(axes, keepdims, out):
    assert signatures.reduce((2, 3, 4), axes, keepdims) == out


def test_reduce_axes_are_normalized_sorted_and_default_to_every_axis():
    assert signatures.reduce_axes((-1, 0), 3) == (0, 2)
    assert signatures.reduce_axes((), 3) == (0, 1, 2)
    assert signatures.reduce_axes((), 0) == ()
    assert refused(signatures.reduce_axes, (1, -1), 2) == "axes [1, -1] name an axis twice"
    assert "out of range" in refused(signatures.reduce_axes, (3,), 3)


def test_layer_norm():
    assert signatures.layer_norm((2, 4), (4,), (4,), 1e-5) == (2, 4)
    assert refused(signatures.layer_norm, (2, 4), (3,), (4,), 1e-5) == (
        "gamma has shape 3; expected 4 (the last dimension)")
    assert "beta has shape 4x1" in refused(signatures.layer_norm, (2, 4), (4,), (4, 1), 1e-5)
    assert refused(signatures.layer_norm, (), (), (), 1e-5) == (
        "expected an input of rank 1 or more, got a scalar")


@pytest.mark.parametrize("epsilon", [0.0, 1e-12, 1e-5, 1.0])
def test_layer_norm_epsilon_may_be_zero(epsilon):
    assert signatures.layer_norm((3,), (3,), (3,), epsilon) == (3,)


@pytest.mark.parametrize("epsilon, text", [(-1e-9, "-1e-09"), (-1.0, "-1"), (INF, "inf"),
                                           (-INF, "-inf"), (NAN, "nan")])
def test_layer_norm_epsilon_must_be_finite_and_not_negative(epsilon, text):
    assert refused(signatures.layer_norm, (3,), (3,), (3,), epsilon) == (
        f"epsilon is {text}; expected a finite value >= 0")


# ---- kernel kinds: one accepted signature each -----------------------------------------------

GOOD = {
    K.MATMUL: ([t(2, 3), t(3, 4), t(2, 4)], ()),
    K.ADD: ([t(2, 3), t(3), t(2, 3)], ()),
    K.RELU: ([t(2, 3), t(2, 3)], ()),
    K.SUB: ([t(2, 1), t(1, 3), t(2, 3)], ()),
    K.MUL: ([t(), t(4), t(4)], ()),
    K.DIV: ([t(5), t(5), t(5)], ()),
    K.SIGMOID: ([t(7), t(7)], ()),
    K.TANH: ([t(), t()], ()),
    K.EXP: ([t(2, 2, dtype=F32), t(2, 2, dtype=F32)], ()),
    K.SQRT: ([t(3), t(3)], ()),
    K.NEG: ([t(0, 3), t(0, 3)], ()),
    K.GELU: ([t(2, 3), t(2, 3)], (1.0,)),
    K.SOFTMAX: ([t(2, 3), t(2, 3)], (1.0,)),
    K.LAYER_NORM: ([t(2, 3), t(3), t(3), t(2, 3)], (1e-5,)),
    K.TRANSPOSE: ([t(2, 3, 4), t(4, 2, 3)], (2.0, 0.0, 1.0)),
    K.RESHAPE: ([t(2, 3), t(3, 2)], ()),
    K.REDUCE_SUM: ([t(2, 3, 4), t(2, 1, 1)], (1.0, 1.0, 2.0)),
    K.REDUCE_MEAN: ([t(2, 3, 4), t(3)], (0.0, 0.0, 2.0)),
    K.REDUCE_MAX: ([t(2, 3), t(2)], (0.0, 1.0)),
    K.MAP: ([t(2, 3), t(2, 3)], ()),
    K.GENERIC: ([t(2, 3), t(6)], ()),
}


def test_every_kind_has_a_rule():
    """Every kind but LIBRARY, whose rule is each library function's (test_library.py)."""
    assert set(GOOD) == set(KernelKind) - {K.LIBRARY}


def test_code_kinds_may_mix_element_types_and_generic_has_no_shape_rule():
    i1, i64 = DType.BOOL, DType.I64
    assert signature_problem(K.MAP, [t(2, 3, dtype=i1), t(3), t(2, 1), t(2, 3)], ()) is None
    assert signature_problem(K.GENERIC, [t(5), t(2, dtype=i64), t(2)], ()) is None
    assert signature_problem(K.GENERIC, [t(5), t(5)], (1.0,)) == (
        "generic has 1 params; expected 0")
    assert signature_problem(K.ADD, [t(2, dtype=i64), t(2), t(2)], ()) == (
        "add mixes element types: 2xi64, 2xf64, 2xf64")


def test_map_takes_any_number_of_inputs_broadcast_to_the_destination():
    assert signature_problem(K.MAP, [t(2, 1), t(3), t(1, 1), t(2, 3)], ()) is None
    assert signature_problem(K.MAP, [t(2, 3), t(4), t(2, 3)], ()) == (
        "map shapes 4 and 2x3 are not broadcast-compatible")
    assert signature_problem(K.MAP, [t(3), t(2, 3)], ()) is None  # an expand
    assert signature_problem(K.MAP, [t(2, 3), t(3)], ()) == (
        "map input 2x3 does not broadcast to the destination 3xf64")


@pytest.mark.parametrize("kind", list(GOOD), ids=str)
def test_accepted(kind):
    args, params = GOOD[kind]
    assert signature_problem(kind, args, params) is None


@pytest.mark.parametrize("kind", list(GOOD), ids=str)
def test_every_kind_checks_arity_element_types_and_the_destination(kind):
    args, params = GOOD[kind]
    least = "at least " if kind.arity is None else ""
    fewest = kind.least_args
    assert signature_problem(kind, args[:fewest - 1], params) == (
        f"{kind} takes {least}{fewest} arguments, not {fewest - 1}")
    mixed = [*args[:-1], T(F32 if args[-1].dtype is F64 else F64, args[-1].shape)]
    if kind in CODE_KINDS:  # their code says what each argument is
        assert signature_problem(kind, mixed, params) is None
    else:
        assert signature_problem(kind, mixed, params).startswith(f"{kind} mixes element types: ")
    wrong = T(args[-1].dtype, (*args[-1].shape, 9))
    problem = signature_problem(kind, [*args[:-1], wrong], params)
    if kind is K.GENERIC:  # no shape rule: the code indexes only the types it declares
        assert problem is None
    elif kind is K.MAP:  # the destination is its shape: each input must broadcast to it
        assert problem == "map shapes 2x3 and 2x3x9 are not broadcast-compatible"
    elif kind is K.RESHAPE:  # the destination is its shape: only the count can be wrong
        assert problem == "reshape cannot reshape 2x3 (6 elements) to 3x2x9 (54 elements)"
    else:
        assert problem == (f"{kind} of {', '.join(map(str, args[:-1]))} gives "
                           f"{signatures.fmt(args[-1].shape)}, destination is {wrong}")


@pytest.mark.parametrize("kind", [k for k, (_, params) in GOOD.items() if not params], ids=str)
def test_kinds_without_params_take_none(kind):
    args, _ = GOOD[kind]
    assert signature_problem(kind, args, (0.0,)) == f"{kind} has 1 params; expected 0"


@pytest.mark.parametrize("kind, args, params, message", [
    (K.MATMUL, [t(2, 3), t(2, 2), t(2, 2)], (), "matmul inner dimensions differ: 3 vs 2"),
    (K.MATMUL, [t(2, 2), t(2, 2), t(2, 3)], (), "gives 2x2, destination is 2x3xf64"),
    (K.MATMUL, [t(), t(2), t(2)], (), "matmul expected a lhs of rank 1 or more, got rank 0"),
    (K.ADD, [t(2), t(3), t(3)], (), "add shapes 2 and 3 are not broadcast-compatible"),
    (K.ADD, [T(F32, (2,)), t(2), t(2)], (), "mixes element types"),
    (K.RELU, [t(2), t(2), t(2)], (), "relu takes 2 arguments, not 3"),
    (K.TRANSPOSE, [t(2, 3), t(3, 2)], (0.0, 0.0), "permutation [0, 0] is not a permutation"),
    (K.TRANSPOSE, [t(2, 3), t(3, 2)], (1.0,), "transpose has 1 params; expected 2"),
    (K.TRANSPOSE, [t(2, 3), t(3, 2)], (1.0, 2.0), "permutation entry 2 is not an axis"),
    (K.TRANSPOSE, [t(2, 3), t(3, 2)], (1.0, 0.5), "permutation entry 0.5 is not an axis"),
    (K.RESHAPE, [t(2, 3), t(7)], (), "reshape cannot reshape 2x3 (6 elements) to 7"),
    (K.LAYER_NORM, [t(2, 3), t(2), t(3), t(2, 3)], (1e-5,),
     "layer_norm gamma has shape 2; expected 3 (the last dimension)"),
    (K.LAYER_NORM, [t(2, 3), t(3), t(3), t(2, 3)], (),
     "layer_norm has 0 params; expected 1 (epsilon)"),
    (K.LAYER_NORM, [t(2, 3), t(3), t(3), t(2, 3)], (1e-5, 0.0), "layer_norm has 2 params"),
    (K.REDUCE_SUM, [t(2, 3), t(2)], (), "reduce_sum has no params; expected keepdims"),
    (K.REDUCE_SUM, [t(2, 3), t(2)], (2.0, 1.0), "reduce_sum keepdims is 2; expected 0 or 1"),
    (K.REDUCE_SUM, [t(2, 3), t(2)], (0.0, 5.0),
     "reduce_sum axis 5 is not an axis of its rank-2 input; expected an integer in 0..1"),
    (K.REDUCE_MEAN, [t(2, 3), t(2)], (0.0, -1.0), "axis -1 is not an axis"),
    (K.REDUCE_MEAN, [t(2, 3), t(2)], (0.0, 1.5), "axis 1.5 is not an axis"),
    (K.REDUCE_MAX, [t(2, 3), t()], (0.0, 1.0, 1.0), "reduce_max axes [1, 1] name an axis twice"),
])
def test_refused(kind, args, params, message):
    problem = signature_problem(kind, args, params)
    assert problem is not None and message in problem, problem


# ---- the settled meanings --------------------------------------------------------------------

LN = [t(2, 3), t(3), t(3), t(2, 3)]


@pytest.mark.parametrize("epsilon", [0.0, 1e-5])
def test_layer_norm_kernel_epsilon_zero_is_allowed(epsilon):
    assert signature_problem(K.LAYER_NORM, LN, (epsilon,)) is None


@pytest.mark.parametrize("epsilon", [-1e-9, INF, NAN])
def test_layer_norm_kernel_epsilon_negative_or_not_finite_is_refused(epsilon):
    problem = signature_problem(K.LAYER_NORM, LN, (epsilon,))
    assert problem == f"layer_norm epsilon is {epsilon:g}; expected a finite value >= 0"


@pytest.mark.parametrize("params, message", [
    ((), "softmax has 0 params; expected 1 (the axis)"),
    ((1.0, 1.0), "softmax has 2 params; expected 1 (the axis)"),
    ((2.0,), "softmax axis 2 is not an axis of its rank-2 input; expected an integer in 0..1"),
    ((-1.0,), "softmax axis -1 is not an axis"),
    ((0.5,), "softmax axis 0.5 is not an axis"),
    ((NAN,), "softmax axis nan is not an axis"),
])
def test_softmax_axis_is_required_non_negative_and_below_the_rank(params, message):
    problem = signature_problem(K.SOFTMAX, [t(2, 3), t(2, 3)], params)
    assert problem is not None and problem.startswith(message), problem


def test_softmax_of_a_scalar_has_no_axis():
    problem = signature_problem(K.SOFTMAX, [t(), t()], (0.0,))
    assert problem == ("softmax axis 0 is not an axis of its rank-0 input; expected none: the "
                       "input is a scalar")


@pytest.mark.parametrize("kind", sorted(signatures.REDUCE_KINDS), ids=str)
@pytest.mark.parametrize("keepdims, out", [(0.0, ()), (1.0, (1, 1, 1))])
def test_no_reduction_axes_means_every_axis(kind, keepdims, out):
    assert signature_problem(kind, [t(2, 3, 4), t(*out)], (keepdims,)) is None
    assert signature_problem(kind, [t(2, 3, 4), t(2, 3, 4)], (keepdims,)) is not None


def test_reductions_of_an_empty_tensor_are_their_identity_as_in_onnx():
    assert signature_problem(K.REDUCE_MAX, [t(0, 3), t()], (0.0,)) is None
    assert signature_problem(K.REDUCE_SUM, [t(0, 3), t()], (0.0,)) is None
    assert signature_problem(K.REDUCE_MEAN, [t(0, 3), t(3)], (0.0, 0.0)) is None


@pytest.mark.parametrize("params", [(), (0.0,), (1.0,)])
def test_gelu_takes_no_param_or_the_approximation(params):
    assert signature_problem(K.GELU, [t(3), t(3)], params) is None


@pytest.mark.parametrize("params, message", [
    ((2.0,), "gelu approximate is 2; expected 0 (erf) or 1 (tanh)"),
    ((0.5,), "gelu approximate is 0.5"),
    ((NAN,), "gelu approximate is nan"),
    ((0.0, 1.0), "gelu has 2 params; expected at most 1 (approximate)"),
])
def test_gelu_refuses_other_params(params, message):
    problem = signature_problem(K.GELU, [t(3), t(3)], params)
    assert problem is not None and problem.startswith(message), problem


def test_the_shape_rules_agree_with_the_kernel_rules():
    """A kernel kind's rule is its op's shape rule: the same answer, not a second copy."""
    for a, b in [((3,), (3, 4)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4,))]:
        out = signatures.matmul(a, b)
        assert signature_problem(K.MATMUL, [t(*a), t(*b), t(*out)], ()) is None
    x = (2, 3, 4)
    for axes, keepdims in [((), True), ((0, 2), False), ((1,), True)]:
        out = signatures.reduce(x, axes, keepdims)
        params = (float(keepdims), *map(float, axes))
        assert signature_problem(K.REDUCE_SUM, [t(*x), t(*out)], params) is None
