"""What the ONNX frontend keeps and folds: external data, names, constants, shape arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

import hexir_format as hf

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import hexir_compiler
import hexir_runtime


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _value(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def test_external_data_is_read_next_to_the_model(tmp_path):
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                   [_value("x", TensorProto.FLOAT, [2, 3])],
                   [_value("y", TensorProto.FLOAT, [2, 4])], [numpy_helper.from_array(w, "w")])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="w.bin",
              size_threshold=0)
    assert (tmp_path / "w.bin").stat().st_size == w.nbytes
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(hexir_runtime.load(hexir_compiler.compile(path)).main(x), x @ w)


def test_a_missing_external_data_file_is_one_line(tmp_path):
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])],
                   [_value("x", TensorProto.FLOAT, [4])], [_value("y", TensorProto.FLOAT, [4])],
                   [numpy_helper.from_array(np.ones(4, np.float32), "w")])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="w.bin",
              size_threshold=0)
    (tmp_path / "w.bin").unlink()
    with pytest.raises(hexir_compiler.CompileError) as err:
        hexir_compiler.compile(path)
    assert "\n" not in str(err.value) and "external data" in str(err.value)


def test_shape_arithmetic_folds_and_no_kernel_computes_it():
    # y = reshape(x, concat(shape(x)[:1], [-1])): Shape, Slice and Concat fold at import.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["zero"], value_ints=[0]),
        helper.make_node("Constant", [], ["one"], value_ints=[1]),
        helper.make_node("Slice", ["s", "zero", "one"], ["lead"]),
        helper.make_node("Constant", [], ["rest"], value_ints=[-1]),
        helper.make_node("Concat", ["lead", "rest"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    model = _model(nodes, [_value("x", TensorProto.FLOAT, [2, 3, 4])],
                   [_value("y", TensorProto.FLOAT, None)])
    text = hexir_compiler.compile(model, "mlir")
    assert "hexir.concat" not in text and "hexir.slice" not in text
    assert '"hexir.reshape"' in text and "tensor<2x12xf32>" in text


def test_a_gather_elements_of_known_values_along_a_long_axis_folds():
    """As a BERT embedding picks its buffered token type ids (1 x 128) for 40 positions;
    onnx.reference's GatherElements fails past 64 along the axis, so this is numpy's."""
    data = np.arange(2 * 128, dtype=np.int64).reshape(2, 128)
    index = np.array([list(range(40)), [-1 - i for i in range(40)]], np.int64)
    nodes = [helper.make_node("GatherElements", ["d", "i"], ["g"], axis=1),
             helper.make_node("Add", ["x", "g"], ["y"])]
    inits = [numpy_helper.from_array(data, "d"), numpy_helper.from_array(index, "i")]
    model = _model(nodes, [_value("x", TensorProto.INT64, [2, 40])],
                   [_value("y", TensorProto.INT64, None)], inits)
    assert "gather_elements" not in hexir_compiler.compile(model, "mlir")
    x = np.ones((2, 40), np.int64)
    np.testing.assert_array_equal(hexir_runtime.load(hexir_compiler.compile(model)).main(x),
                                  x + np.take_along_axis(data, index % 128, 1))
    bad = np.array([[0, 128]], np.int64)
    model.graph.initializer[1].CopyFrom(numpy_helper.from_array(bad, "i"))
    with pytest.raises(hexir_compiler.CompileError, match=r"GatherElements.*index 128 is out "
                                                          r"of range for an axis of extent 128"):
        hexir_compiler.compile(model)


def test_outputs_that_are_inputs_or_constants_and_unused_inputs():
    nodes = [helper.make_node("Identity", ["x"], ["same"]),
             helper.make_node("Constant", [], ["seven"], value_int=7)]
    model = _model(nodes, [_value("x", TensorProto.INT32, [3]),
                           _value("unused", TensorProto.BOOL, [2])],
                   [_value("same", TensorProto.INT32, [3]), _value("seven", TensorProto.INT64, [])])
    module = hexir_runtime.load(hexir_compiler.compile(model))
    x = np.array([1, -2, 3], np.int32)
    results = module.main.results(x=x, unused=np.array([True, False]))
    np.testing.assert_array_equal(results["same"], x)
    assert results["seven"].dtype == np.int64 and results["seven"] == 7


def test_names_survive_every_mlir_stage():
    model = _model([helper.make_node("Relu", ["input.1"], ["logits"])],
                   [_value("input.1", TensorProto.FLOAT, [2])],
                   [_value("logits", TensorProto.FLOAT, [2])])
    direct = hexir_compiler.compile(model)
    entries = hf.parse(direct).functions  # a variant per x86-64 level, each named alike
    assert [(e.inputs, e.outputs) for e in entries] == [(("input.1",), ("logits",))] * 3
    assert '{hexir.name = "input.1"}' in hexir_compiler.compile(model, "mlir-llvm")


#: (input, weight, strides, pads, dilations, group, the weight's window after the import):
#: offsets that only ever read zero padding are cut, the output's size kept.
CROPPED_CONVS = [
    ((1, 6, 14, 14), (4, 6, 3, 3), [1, 1], [36, 36, 36, 36], [36, 36], 1, (1, 1)),  # ASPP
    ((1, 6, 14, 14), (4, 6, 3, 3), [1, 1], [12, 12, 12, 12], [12, 12], 1, (3, 3)),  # all read
    ((1, 6, 14, 14), (6, 1, 3, 3), [1, 1], [24, 24, 24, 24], [24, 24], 6, (1, 1)),  # depthwise
    ((1, 6, 9, 13), (4, 6, 3, 5), [2, 3], [20, 1, 7, 30], [10, 8], 1, (2, 2)),
    ((2, 3, 20), (5, 3, 5), [1], [24, 24], [12], 1, (3,)),
    ((1, 4, 6, 6), (4, 4, 3, 3), [4, 4], [5, 0, 0, 5], [5, 5], 1, (2, 2)),
]


@pytest.mark.parametrize("case", CROPPED_CONVS, ids=lambda c: "x".join(map(str, c[-1])))
def test_a_conv_offset_that_only_reads_padding_is_cut_from_the_weight(case):
    shape, wshape, strides, pads, dilations, group, window = case
    rng = np.random.default_rng(3)
    w = rng.standard_normal(wshape).astype(np.float32)
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], strides=strides, pads=pads,
                                     dilations=dilations, group=group)],
                   [_value("x", TensorProto.FLOAT, list(shape))],
                   [_value("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    text = hexir_compiler.compile(model, "mlir")
    assert f"x{'x'.join(map(str, window))}xf32>) -> tensor<" in text
    x = rng.standard_normal(shape).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = hexir_runtime.load(hexir_compiler.compile(model, target="cpu:x86-64-v2")).main(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
