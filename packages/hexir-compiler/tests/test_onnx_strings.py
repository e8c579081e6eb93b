"""String tensors end to end: ONNX StringNormalizer models compiled by `hexir_compiler.compile`
and run by `hexir_runtime`, against the operator's specification.

The oracle is the spec's text (`_spec`): drop the elements equal to a stopword (ignoring case
unless is_case_sensitive), change the rest's case, and nothing left is one empty string.
Neither ONNX engine at hand is one: `onnx.reference`'s StringNormalizer strips accents, drops
empty strings and removes stopwords *inside* space-separated strings (its docstring says it
is not the operator), and ONNX Runtime refuses the op unless the host has the en_US.UTF-8
locale installed (this machine has not). Case changes are Unicode's full mapping, Python's
(`'straße'.upper() == 'STRASSE'`). The ONNX project's own StringNormalizer models run in
`test_onnx_model_suites.py`; the lit test `onnx-strings.test` shows the CLI's text.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper

import hexir_compiler
import hexir_runtime as hr
from hexir_compiler import CompileError

WORDS = ["Monday", "monday", "MONDAY", "tuesday", "Tuesday", "été", "ÉTÉ", "straße", "x", ""]


def _spec(words: list[str], action: str, sensitive: bool, stopwords: list[str]) -> list[str]:
    fold = (lambda w: w) if sensitive else str.casefold
    stops = {fold(w) for w in stopwords}
    change = {"LOWER": str.lower, "UPPER": str.upper}.get(action, lambda w: w)
    return [change(w) for w in words if fold(w) not in stops] or [""]


def _model(shape, out_shape, **attrs) -> onnx.ModelProto:
    node = helper.make_node("StringNormalizer", ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "strnorm", [helper.make_tensor_value_info("x", TensorProto.STRING, shape)],
        [helper.make_tensor_value_info("y", TensorProto.STRING, out_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("action,sensitive,stopwords,rank", list(itertools.product(
    ("NONE", "LOWER", "UPPER"), (0, 1), ([], ["monday", "été"]), (1, 2))))
def test_string_normalizer_meets_the_spec(action, sensitive, stopwords, rank):
    x = np.array(WORDS)
    want = np.array(_spec(WORDS, action, bool(sensitive), stopwords))
    if rank == 2:
        x, want = x.reshape(1, -1), want.reshape(1, -1)
    attrs = dict(case_change_action=action, is_case_sensitive=sensitive)
    if stopwords:
        attrs["stopwords"] = stopwords
    model = _model(list(x.shape), list(want.shape), **attrs)
    with hr.load(hexir_compiler.compile(model)) as m:
        got = m.main(x)
    assert got.dtype.kind == "U" and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_every_string_a_stopword_leaves_one_empty_string():
    model = _model([3], [1], stopwords=["a", "B"], case_change_action="LOWER")
    with hr.load(hexir_compiler.compile(model)) as m:
        got = m.main(np.array(["A", "b", "a"]))
    np.testing.assert_array_equal(got, np.array([""]))


def test_a_call_keeping_another_count_is_refused():
    """The kept count depends on the data; the module holds it to the declared one."""
    model = _model([4], [2], stopwords=["a"], is_case_sensitive=1)
    with hr.load(hexir_compiler.compile(model)) as m:
        got = m.main(np.array(["a", "b", "a", "c"]))
        np.testing.assert_array_equal(got, np.array(["b", "c"]))
        with pytest.raises(hr.HexirError, match="kept 3 of 4 strings; the module was "
                                                "compiled for 2"):
            m.main(np.array(["a", "b", "c", "d"]))


def test_stage_text_names_the_string_type():
    model = _model([2], [2], case_change_action="UPPER")
    text = hexir_compiler.compile(model, emit="mlir")
    assert "tensor<2x!hexir.string>" in text and '"hexir.string_normalizer"' in text


@pytest.mark.parametrize("graph,shows", [
    ("undeclared", "with stopwords its result's length depends on the data"),
    ("cast", "input 'x' is a string tensor; Hexir computes strings only with"),
    ("rank3", r"input has shape \[1, 1, 2\]; StringNormalizer takes \[C\] or \[1, C\]"),
    ("action", "case_change_action 'TITLE' is not one of NONE, LOWER, UPPER"),
])
def test_refusals_are_one_line(graph, shows):
    S = TensorProto.STRING
    if graph == "undeclared":
        model = _model([2], None, stopwords=["a"])
    elif graph == "rank3":
        model = _model([1, 1, 2], [1, 1, 2])
    elif graph == "action":
        model = _model([2], [2], case_change_action="TITLE")
    else:
        node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)
        model = helper.make_model(helper.make_graph(
            [node], "cast", [helper.make_tensor_value_info("x", S, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]),
            opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(CompileError, match=shows) as err:
        hexir_compiler.compile(model)
    assert "\n" not in str(err.value)
