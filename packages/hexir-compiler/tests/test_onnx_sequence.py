"""Sequence values inside a tensor graph (`frontend/onnx_sequence.py`), held to ONNX Runtime:
constant positions (a list of elements, which may differ in shape), runtime positions (one
stacked tensor; negative ones wrapped, out-of-range ones clamped), and the refusals."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper

import hexir_compiler
import hexir_runtime

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def _v(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _ours(model):
    return hexir_runtime.load(hexir_compiler.compile(model)).main


def _theirs(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _same(model, feeds, ours=None):
    ours = ours or _ours(model)
    got = ours(*feeds.values())
    got = got if isinstance(got, tuple | list) else (got,)
    want = _theirs(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        g = np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)


RNG = np.random.default_rng(5)
XYZW = {n: RNG.standard_normal((2, 3)).astype(np.float32) for n in "xyzw"}


def _runtime_positions_model():
    """Insert w at `ins` into (x, y, z), erase at `era`, read at `at`; the whole sequence
    after the erase is stacked out by ConcatFromSequence."""
    nodes = [helper.make_node("SequenceConstruct", list("xyz"), ["s"]),
             helper.make_node("SequenceInsert", ["s", "w", "ins"], ["s2"], name="insert"),
             helper.make_node("SequenceErase", ["s2", "era"], ["s3"], name="erase"),
             helper.make_node("SequenceAt", ["s2", "at"], ["picked"], name="at"),
             helper.make_node("ConcatFromSequence", ["s3"], ["all"], axis=0, new_axis=1),
             helper.make_node("SequenceLength", ["s3"], ["n"])]
    inputs = [_v(n, F, [2, 3]) for n in "xyzw"] + [_v(n, I64, []) for n in ("ins", "era", "at")]
    outputs = [_v("picked", F, [2, 3]), _v("all", F, [3, 2, 3]), _v("n", I64, [])]
    return _model(nodes, inputs, outputs)


def test_runtime_positions_negative_ones_included_match_onnx_runtime():
    model = _runtime_positions_model()
    ours = _ours(model)  # compiled once: the positions are runtime inputs
    for ins, era, at in itertools.product(range(-3, 4), (-4, -1, 0, 2, 3), (-4, -2, 0, 1, 3)):
        feeds = {**XYZW, "ins": np.array(ins, np.int64), "era": np.array(era, np.int64),
                 "at": np.array(at, np.int64)}
        _same(model, feeds, ours)


def test_out_of_range_runtime_positions_are_clamped_where_onnx_runtime_fails():
    model = _runtime_positions_model()
    feeds = {**XYZW, "ins": np.array(9, np.int64), "era": np.array(-9, np.int64),
             "at": np.array(7, np.int64)}
    with pytest.raises(Exception, match=r"(?i)invalid|out of|range|bound"):
        _theirs(model, feeds)
    picked, whole, n = _ours(model)(*feeds.values())
    y, z, w = (XYZW[k] for k in "yzw")
    # ins 9 -> appended (x, y, z, w); at 7 -> the last, w; era -9 -> the first erased
    np.testing.assert_array_equal(picked, w)
    np.testing.assert_array_equal(whole, np.stack([y, z, w], axis=0))
    assert int(n) == 3


def test_constant_positions_keep_elements_of_differing_shapes():
    # as onnx's test_sequence_model1, with the positions constants
    nodes = [helper.make_node("SequenceEmpty", [], ["e"]),
             helper.make_node("SequenceInsert", ["e", "x"], ["s1"]),
             helper.make_node("SequenceInsert", ["s1", "y"], ["s2"]),
             helper.make_node("SequenceInsert", ["s2", "z", "minus_one"], ["s3"]),
             helper.make_node("SequenceErase", ["s3"], ["s4"]),
             helper.make_node("SequenceAt", ["s4", "minus_one"], ["out"]),
             helper.make_node("ConcatFromSequence", ["s3"], ["cat"], axis=0)]
    model = _model(nodes, [_v("x", F, [2, 3]), _v("y", F, [1, 3]), _v("z", F, [3, 3])],
                   [_v("out", F, [3, 3]), _v("cat", F, [6, 3])],
                   [numpy_helper.from_array(np.array(-1, np.int64), "minus_one")])
    feeds = {"x": XYZW["x"], "y": XYZW["y"][:1], "z": np.ones((3, 3), np.float32)}
    _same(model, feeds)


@pytest.mark.parametrize("split, attrs", [
    (None, {"axis": 1}), (None, {"axis": -1, "keepdims": 0}), (None, {"axis": 0, "keepdims": 0}),
    (np.array(2, np.int64), {"axis": 1}),           # chunks of 2, the last one shorter
    (np.array([1, 3, 1], np.int64), {"axis": 1}),  # sizes
    (np.array([3, 2], np.int32), {"axis": -1, "keepdims": 0}),  # keepdims ignored with split
])
def test_split_to_sequence_and_concat_from_sequence(split, attrs):
    inputs = ["x"] if split is None else ["x", "split"]
    nodes = [helper.make_node("SplitToSequence", inputs, ["s"], **attrs),
             helper.make_node("SequenceLength", ["s"], ["n"]),
             helper.make_node("SequenceAt", ["s", "last"], ["tail"]),
             helper.make_node("ConcatFromSequence", ["s"], ["back"], axis=attrs["axis"]),
             helper.make_node("ConcatFromSequence", ["s"], ["stacked"], axis=0, new_axis=1)]
    inits = [numpy_helper.from_array(np.array(-1, np.int64), "last")]
    if split is not None:
        inits.append(numpy_helper.from_array(split, "split"))
    shapeless = [_v(n, F, None) for n in ("tail", "back", "stacked")]
    model = _model(nodes, [_v("x", F, [2, 5])], [_v("n", I64, []), *shapeless], inits)
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    if split is not None:  # these splits make parts of differing shapes: no new axis
        model.graph.output.pop()
        model.graph.node.pop()
    _same(model, {"x": x})


def test_a_runtime_position_after_constant_ones_and_int64_elements():
    # a runtime insert into a list made by constant ones, then constant positions on the
    # stacked result (its rows sliced out), of int64 elements
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
             helper.make_node("SequenceErase", ["s", "zero"], ["s1"]),
             helper.make_node("SequenceInsert", ["s1", "t", "p"], ["s2"]),
             helper.make_node("SequenceAt", ["s2", "zero"], ["first"]),
             helper.make_node("SequenceInsert", ["s2", "t", "zero"], ["s3"]),
             helper.make_node("ConcatFromSequence", ["s3"], ["all"], axis=0)]
    model = _model(nodes, [_v("x", I64, [4, 2]), _v("t", I64, [2]), _v("p", I64, [])],
                   [_v("first", I64, [2]), _v("all", I64, [10])],
                   [numpy_helper.from_array(np.array(0, np.int64), "zero")])
    ours = _ours(model)
    x = np.arange(8, dtype=np.int64).reshape(4, 2)
    for p in range(-3, 4):
        _same(model, {"x": x, "t": np.array([-1, -2], np.int64), "p": np.array(p, np.int64)},
              ours)


def _refusal(model) -> str:
    with pytest.raises(hexir_compiler.CompileError) as err:
        hexir_compiler.compile(model)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_runtime_position_into_elements_of_differing_shapes_is_refused_naming_the_node():
    nodes = [helper.make_node("SequenceConstruct", ["x", "y"], ["s"]),
             helper.make_node("SequenceAt", ["s", "p"], ["out"], name="pick")]
    model = _model(nodes, [_v("x", F, [2, 3]), _v("y", F, [1, 3]), _v("p", I64, [])],
                   [_v("out", F, None)])
    assert "node 'pick' (SequenceAt): a runtime position needs elements of one shape; " \
        "this sequence holds shapes [1, 3], [2, 3]" in _refusal(model)
    nodes = [helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
             helper.make_node("SequenceInsert", ["s", "y", "p"], ["s2"], name="ins"),
             helper.make_node("ConcatFromSequence", ["s2"], ["out"], axis=0)]
    model = _model(nodes, [_v("x", F, [2, 3]), _v("y", F, [1, 3]), _v("p", I64, [])],
                   [_v("out", F, None)])
    assert "node 'ins' (SequenceInsert): a runtime position needs elements of one shape; the " \
        "tensor is [1, 3], the sequence's elements [2, 3]" in _refusal(model)


def test_refusals_are_one_line_naming_the_node_or_output():
    x, p = _v("x", F, [2, 3]), _v("p", I64, [])
    seq = helper.make_node("SequenceConstruct", ["x", "x"], ["s"])
    three = [numpy_helper.from_array(np.array(3, np.int64), "three")]
    cases = [
        (_model([seq], [x], [helper.make_tensor_sequence_value_info("s", F, [2, 3])]),
         "graph output 's' is a sequence; Hexir's graphs return tensors"),
        (_model([seq, helper.make_node("Relu", ["s"], ["y"], name="r")], [x],
                [_v("y", F, [2, 3])]),
         "node 'r' (Relu): input 's' is a sequence; Relu takes tensors"),
        (_model([seq, helper.make_node("SequenceAt", ["s", "three"], ["y"], name="at")], [x],
                [_v("y", F, [2, 3])], three),
         "node 'at' (SequenceAt): position 3 is out of range [-2, 1] for a sequence of "
         "length 2"),
        (_model([helper.make_node("SequenceEmpty", [], ["e"]),
                 helper.make_node("SequenceAt", ["e", "p"], ["y"], name="at")], [p],
                [_v("y", F, [2, 3])]),
         "node 'at' (SequenceAt): SequenceAt of an empty sequence"),
        (_model([seq, helper.make_node("SequenceAt", ["x", "p"], ["y"], name="at")], [x, p],
                [_v("y", F, [2, 3])]),
         "node 'at' (SequenceAt): its sequence operand is a tensor; expected a sequence"),
        (_model([seq, helper.make_node("SequenceInsert", ["s", "p"], ["s2"], name="ins"),
                 helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0)], [x, p],
                [_v("y", F, None)]),
         "node 'ins' (SequenceInsert): the tensor is int64; the sequence holds float32"),
        (_model([helper.make_node("SplitToSequence", ["x", "p"], ["s"], name="split"),
                 helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)], [x, p],
                [_v("y", F, None)]),
         "node 'split' (SplitToSequence): its split operand must be known at compile time"),
    ]
    for model, expected in cases:
        assert expected in _refusal(model)
