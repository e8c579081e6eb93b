"""The training domain's Gradient differentiated at import (`frontend/onnx_gradient.py`), held
to central differences of the forward graph (float64, evaluated by ONNX's reference
implementation): each op's rule, broadcasting summed back, a tensor used twice, zs held
constant, an x y does not depend on, Gradient inputs other than the named tensors, and the
refusal of an op without a rule."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import hexir_compiler
import hexir_runtime

D = TensorProto.DOUBLE
TRAINING = "ai.onnx.preview.training"


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid(TRAINING, 1)])
    model.ir_version = 8
    return model


def _v(name, shape, elem=D):
    return helper.make_tensor_value_info(name, elem, shape)


def _numerical(forward, feeds: dict, x: str, eps: float = 1e-6) -> np.ndarray:
    """d sum(y) / d feeds[x] by central differences."""
    grad = np.zeros_like(feeds[x])
    for k in np.ndindex(feeds[x].shape):
        plus, minus = dict(feeds), dict(feeds)
        plus[x], minus[x] = feeds[x].copy(), feeds[x].copy()
        plus[x][k] += eps
        minus[x][k] -= eps
        grad[k] = (forward.run(None, plus)[0].sum() - forward.run(None, minus)[0].sum()) / (
            2 * eps)
    return grad


def check(nodes, shapes: dict, xs: list[str], zs=(), initializers=(), positive=()):
    """Differentiate y (the last node's output) w.r.t. xs with Hexir and numerically."""
    rng = np.random.default_rng(len(nodes) * 7 + len(xs))
    feeds = {n: rng.uniform(0.5, 1.5, s) if n in positive else rng.uniform(-1.5, 1.5, s)
             for n, s in shapes.items()}
    inputs = [_v(n, list(s)) for n, s in shapes.items()]
    forward = ReferenceEvaluator(_model(nodes, inputs, [_v("y", None)], initializers))
    grad = helper.make_node("Gradient", [*xs, *zs], [f"d_{x}" for x in xs], domain=TRAINING,
                            xs=xs, y="y", **({"zs": list(zs)} if zs else {}))
    model = _model([*nodes, grad], inputs, [_v(f"d_{x}", list(shapes[x])) for x in xs],
                   initializers)
    got = hexir_runtime.load(hexir_compiler.compile(model)).main(*feeds.values())
    got = got if isinstance(got, tuple | list) else (got,)
    for x, g in zip(xs, got, strict=True):
        np.testing.assert_allclose(g, _numerical(forward, feeds, x), rtol=1e-6, atol=1e-7,
                                   err_msg=f"d y / d {x}")


def n(op, inputs, output, **attrs):
    return helper.make_node(op, inputs, [output], **attrs)


def test_arithmetic_with_broadcasting_summed_back():
    # a [2,3], b [3], c [2,1]: every operand broadcast, the same tensor read twice
    check([n("Mul", ["a", "b"], "ab"), n("Sub", ["ab", "c"], "d"), n("Add", ["b", "c"], "bc"),
           n("Div", ["d", "bc"], "q"), n("Neg", ["q"], "nq"), n("Mul", ["nq", "a"], "y")],
          {"a": (2, 3), "b": (3,), "c": (2, 1)}, ["a", "b", "c"], positive="bc")


def test_unary_rules():
    check([n("Relu", ["a"], "r"), n("Sigmoid", ["r"], "s"), n("Tanh", ["a"], "t"),
           n("Exp", ["t"], "e"), n("Mul", ["s", "e"], "se"), n("Log", ["b"], "lb"),
           n("Sqrt", ["b"], "sb"), n("Add", ["lb", "sb"], "l"), n("Mul", ["se", "l"], "m"),
           n("Identity", ["m"], "y")],
          {"a": (2, 4), "b": (2, 4)}, ["a", "b"], positive="b")


def test_pow_by_a_constant_and_by_a_tensor():
    three = numpy_helper.from_array(np.array(3.0), "three")
    half = numpy_helper.from_array(np.array([0.5, 2.0], np.float64), "half")
    check([n("Pow", ["a", "three"], "p"), n("Pow", ["b", "half"], "q"),
           n("Pow", ["b", "e"], "r"), n("Add", ["p", "q"], "pq"), n("Add", ["pq", "r"], "y")],
          {"a": (3, 2), "b": (3, 2), "e": (3, 1)}, ["a", "b", "e"], initializers=[three, half],
          positive="b")


def test_matmul_plain_batched_and_vectors():
    check([n("MatMul", ["a", "b"], "y")], {"a": (3, 4), "b": (4, 2)}, ["a", "b"])
    check([n("MatMul", ["a", "b"], "y")], {"a": (2, 3, 4), "b": (4, 5)}, ["a", "b"])
    check([n("MatMul", ["a", "b"], "ab"), n("MatMul", ["ab", "v"], "y")],
          {"a": (4,), "b": (4, 3), "v": (3,)}, ["a", "b", "v"])


@pytest.mark.parametrize("attrs", [{}, {"transA": 1, "alpha": 0.5},
                                   {"transB": 1, "beta": -2.0},
                                   {"transA": 1, "transB": 1, "alpha": 1.5, "beta": 0.25}])
def test_gemm(attrs):
    a = (4, 3) if attrs.get("transA") else (3, 4)
    b = (2, 4) if attrs.get("transB") else (4, 2)
    check([n("Gemm", ["a", "b", "c"], "g", **attrs), n("Tanh", ["g"], "y")],
          {"a": a, "b": b, "c": (2,)}, ["a", "b", "c"])


def test_shape_ops_and_reductions():
    shape = numpy_helper.from_array(np.array([3, 4], np.int64), "shape")
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    check([n("Reshape", ["a", "shape"], "r"), n("Transpose", ["r"], "t", perm=[1, 0]),
           n("Mul", ["t", "t"], "tt"), n("ReduceSum", ["tt", "axes"], "s", keepdims=0),
           n("ReduceMean", ["tt", "axes"], "m"), n("Transpose", ["m"], "mt"),
           n("Sigmoid", ["mt"], "sm"), n("Flatten", ["sm"], "f", axis=0),
           n("ReduceMean", ["f"], "all", keepdims=0), n("Mul", ["s", "all"], "y")],
          {"a": (2, 6)}, ["a"], initializers=[shape, axes])


def test_zs_are_held_constant_and_an_unused_x_has_zero_gradient():
    nodes = [n("Mul", ["a", "z"], "y")]
    check(nodes, {"a": (2, 3), "z": (2, 3), "u": (3,)}, ["a", "u"], zs=["z"])
    got = hexir_runtime.load(hexir_compiler.compile(_model(
        [*nodes, helper.make_node("Gradient", ["u", "a", "z"], ["du"], domain=TRAINING,
                                  xs=["u", "a"], zs=["z"], y="y")],
        [_v("a", [2, 3]), _v("z", [2, 3]), _v("u", [3])], [_v("du", [3])]))).main(
            np.ones((2, 3)), np.ones((2, 3)), np.ones(3))
    np.testing.assert_array_equal(got, np.zeros(3))


def test_inputs_other_than_the_named_tensors_are_the_point_of_differentiation():
    # d/da sum(a * a * b) at a = a2 (= 3 a), not at a: 2 * a2 * b
    nodes = [n("Mul", ["a", "a"], "aa"), n("Mul", ["aa", "b"], "y"),
             n("Mul", ["a", "three"], "a2"),
             helper.make_node("Gradient", ["a2", "b"], ["da", "db"], domain=TRAINING,
                              xs=["a", "b"], y="y")]
    model = _model(nodes, [_v("a", [4]), _v("b", [4])], [_v("da", [4]), _v("db", [4])],
                   [numpy_helper.from_array(np.array(3.0), "three")])
    a, b = np.array([1.0, -2.0, 0.5, 3.0]), np.array([2.0, 1.0, -1.0, 0.25])
    da, db = hexir_runtime.load(hexir_compiler.compile(model)).main(a, b)
    np.testing.assert_allclose(da, 2 * (3 * a) * b)
    np.testing.assert_allclose(db, (3 * a) ** 2)


def _refusal(model) -> str:
    with pytest.raises(hexir_compiler.CompileError) as err:
        hexir_compiler.compile(model)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_an_op_without_a_rule_is_refused_naming_it_and_the_gradient_node():
    nodes = [n("Abs", ["a"], "b", name="abs"), n("Relu", ["b"], "y"),
             helper.make_node("Gradient", ["a"], ["da"], name="grad", domain=TRAINING,
                              xs=["a"], y="y")]
    text = _refusal(_model(nodes, [_v("a", [3])], [_v("da", [3])]))
    assert "node 'grad' (Gradient): the node 'abs' (Abs) between xs and y has no gradient " \
        "rule in Hexir (it has Add, Div, Exp, " in text
    # an op off the path needs no rule
    nodes = [n("Abs", ["z"], "c"), n("Mul", ["a", "c"], "y"),
             helper.make_node("Gradient", ["a", "z"], ["da"], domain=TRAINING, xs=["a"],
                              zs=["z"], y="y")]
    z = np.array([-1.0, 2.0, -3.0])
    got = hexir_runtime.load(hexir_compiler.compile(_model(
        nodes, [_v("a", [3]), _v("z", [3])], [_v("da", [3])]))).main(np.ones(3), z)
    np.testing.assert_array_equal(got, np.abs(z))


def test_malformed_gradient_nodes_are_one_line():
    base = [n("Mul", ["a", "a"], "y")]
    cases = [
        (helper.make_node("Gradient", ["a", "a"], ["da"], name="g", domain=TRAINING, xs=["a"],
                          y="y"), "node 'g' (Gradient): 2 inputs; expected one per name of xs"),
        (helper.make_node("Gradient", ["a"], ["da"], name="g", domain=TRAINING, xs=["a"],
                          y="nope"), "node 'g' (Gradient): 'nope' is not a tensor computed "
                                     "before it"),
        (helper.make_node("Gradient", ["a"], ["da"], name="g", domain=TRAINING, xs=["a"]),
         "node 'g' (Gradient): its xs and y attributes are required"),
    ]
    for grad, expected in cases:
        assert expected in _refusal(_model([*base, grad], [_v("a", [3])], [_v("da", [3])]))


def test_a_gradient_of_a_refused_node_adds_no_refusal_of_its_own():
    nodes = [n("Det", ["a"], "y", name="det"),
             helper.make_node("Gradient", ["a"], ["da"], name="grad", domain=TRAINING,
                              xs=["a"], y="y")]
    text = _refusal(_model(nodes, [_v("a", [3, 3])], [_v("da", [3, 3])]))
    assert "Det (1 node: 'det')" in text and "Gradient" not in text
