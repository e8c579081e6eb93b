"""Bad models through `hexir`: one line naming the node or tensor, a non-zero exit, no
traceback and no output file."""

from __future__ import annotations

import numpy as np
import pytest

import hexir_format

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from hexir_compiler import cli


def _model(nodes, inputs, outputs, initializers=(), opset=17, ir_version=8):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])


def _short_initializer():
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    w.raw_data = w.raw_data[:8]
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [X], [Y], [w])


BAD = {
    "missing input": (_model([helper.make_node("Relu", ["nope"], ["y"], name="r")], [X], [Y]),
                      "node 'r' (Relu): input 'nope' is computed by no earlier node"),
    "unknown op": (_model([helper.make_node("Det", ["x"], ["y"], name="d")], [X], [Y]),
                   "bad.onnx: 1 op Hexir does not import: Det (1 node: 'd')"),
    "IR version too old": (_model([helper.make_node("Relu", ["x"], ["y"])], [X], [Y],
                                  ir_version=2), "IR version 2 is outside the 3-14"),
    "IR version too new": (_model([helper.make_node("Relu", ["x"], ["y"])], [X], [Y],
                                  ir_version=15), "IR version 15 is outside the 3-14"),
    "opset out of range": (_model([helper.make_node("Relu", ["x"], ["y"])], [X], [Y], opset=29),
                           "opset 29 is outside the 1-28 Hexir reads"),
    "old opset the converter cannot upgrade": (
        _model([helper.make_node("Relu", ["x"], ["h"]),
                helper.make_node("BatchNormalization", ["h", "s", "b", "m", "v"], ["y"],
                                 spatial=0)],
               [X, *(helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in "sbmv")],
               [Y], opset=8, ir_version=3),
        "node 1 (BatchNormalization): cannot upgrade it from opset 8 to 13: Attribute spatial "
        "must have value 1"),
    "old opset, an op it does not define (the converter passes it on)": (
        _model([helper.make_node("Gelu", ["x"], ["y"], name="g")], [X], [Y], opset=9,
               ir_version=4),
        "1 op that is not an op of opset 13: Gelu (1 node: 'g')"),
    "a size the export fixed where the input's is symbolic": (
        _model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])], [Y],
               [numpy_helper.from_array(np.array([2, 3], np.int64), "shape")]),
        "node 'r' (Reshape): cannot reshape [batch, 3] (3 * batch elements) to [2, 3] (the "
        "export fixed a size the input leaves dynamic)"),
    "short initializer": (_short_initializer(),
                          "initializer 'w' (shape [2, 3]): its data does not hold its shape"),
    "unsupported element type": (
        _model([helper.make_node("Relu", ["x"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2])], [Y]),
        "input 'x' has element type FLOAT16"),
    "comparison of shapes that do not broadcast": (
        _model([helper.make_node("Equal", ["x", "z"], ["b"], name="eq")],
               [X, helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 3])],
               [helper.make_tensor_value_info("b", TensorProto.BOOL, [2, 3])]),
        "node 'eq' (Equal): shapes [2, 3] and [4, 3] do not broadcast"),
    "version newer than any handler": (
        _model([helper.make_node("Gelu", ["x"], ["y"], name="g")], [X], [Y], opset=17),
        "1 op that is not an op of opset 17: Gelu (1 node: 'g')"),
    "domain it does not read": (
        _model([helper.make_node("FusedGemm", ["x"], ["y"], name="f", domain="com.microsoft")],
               [X], [Y]), "1 domain Hexir does not read: 'com.microsoft' (1 node: 'f')"),
    "Dropout in training mode": (
        _model([helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="d")], [X], [Y],
               [numpy_helper.from_array(np.array(0.25, np.float32), "r"),
                numpy_helper.from_array(np.array(True), "t")]),
        "node 'd' (Dropout): training_mode is true (ratio 0.25); Hexir compiles inference"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_model_is_one_line_and_no_file(case, tmp_path, capsys):
    model, message = BAD[case]
    path = tmp_path / "bad.onnx"
    path.write_bytes(model.SerializeToString())
    out = tmp_path / "out.hxb"
    assert cli.main(["-emit=hxb", "-o", str(out), str(path)]) == cli.EXIT_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert message in err
    assert not out.exists() and list(tmp_path.iterdir()) == [path]


def test_the_ir_version_onnx_helper_writes_by_default_is_read():
    import hexir_compiler

    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                                [X], [Y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    assert hexir_format.parse(hexir_compiler.compile(model)).functions[0].inputs == ("x",)


def test_a_malformed_protobuf_is_refused(tmp_path, capsys):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x0a\xff\xff\xff\xff\x0fgarbage")
    assert cli.main(["-emit=hxb", "-o", str(tmp_path / "o.hxb"), str(path)]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an ONNX model" in err and "Traceback" not in err
    assert not (tmp_path / "o.hxb").exists()


def test_input_shape_binds_a_symbolic_dimension_and_fix_input_fixes_an_axes_operand(tmp_path):
    import hexir_runtime

    data = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    axes = helper.make_tensor_value_info("axes", TensorProto.INT64, [1])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = _model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
                   [data, axes], [out])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    hxb = tmp_path / "m.hxb"
    assert cli.main(["-emit=hxb", "-input-shape=x=4x3", "-fix-input=axes=1", "-o", str(hxb),
                     str(path)]) == 0
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(hexir_runtime.load(str(hxb)).main(x), x.sum(1))


@pytest.mark.parametrize("flag, message", [
    ("-input-shape=x", "invalid -input-shape entry 'x'"),
    ("-input-shape=x=2x3..1", "invalid -input-shape entry 'x=2x3..1'"),
    ("-input-shape=x=2x-q", "invalid -input-shape entry 'x=2x-q'"),
    ("-fix-input=axes=a", "invalid -fix-input entry 'axes=a'"),
])
def test_malformed_flags_are_usage_errors(flag, message, capsys):
    assert cli.main(["-emit=mlir", flag, "m.onnx"]) == 2
    assert message in capsys.readouterr().err


def _refused(model, tmp_path, capsys) -> list[str]:
    """The lines `hexir` prints for `model`, checked to leave no output file and exit 255."""
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    out = tmp_path / "out.hxb"
    assert cli.main(["-emit=hxb", "-o", str(out), str(path)]) == cli.EXIT_INPUT
    assert not out.exists()
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return [line.replace(f"{path}: ", "") for line in err.splitlines()]


def test_every_refusal_of_a_model_is_listed_in_one_run(tmp_path, capsys):
    # Five Det nodes (one unnamed), a Unique that reads one, a Reshape whose shape does not
    # fit, a node of a domain Hexir does not read, and an Add and a Shape that read refused
    # values (neither is a problem of its own): each problem once, the unsupported ops grouped
    # with (at most three of) their nodes.
    shape = numpy_helper.from_array(np.array([5, 5], np.int64), "shape")
    nodes = [helper.make_node("Det", ["x"], [f"d{i}"], name=f"det{i}") for i in range(4)]
    nodes += [helper.make_node("Unique", ["d0"], ["u"], name="unique"),
              helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
              helper.make_node("FusedGemm", ["x"], ["f"], name="fused", domain="com.microsoft"),
              helper.make_node("Add", ["u", "f"], ["y"], name="add"),
              helper.make_node("Shape", ["u"], ["s"], name="shape"),
              helper.make_node("Det", ["x"], ["e"])]
    model = _model(nodes, [X], [Y, helper.make_tensor_value_info("r", TensorProto.FLOAT, None),
                                helper.make_tensor_value_info("e", TensorProto.FLOAT, None)],
                   [shape])
    assert _refused(model, tmp_path, capsys) == [
        ("error: 2 ops Hexir does not import: Det (5 nodes: 'det0', 'det1', 'det2', ...), "
         "Unique (1 node: 'unique')"),
        "error: node 'reshape' (Reshape): cannot reshape [2, 3] (6 elements) to [5, 5]",
        "error: 1 domain Hexir does not read: 'com.microsoft' (1 node: 'fused')",
    ]


def test_an_op_hexir_does_not_import_is_no_refusal_where_it_folds():
    import hexir_compiler
    import hexir_runtime

    # Det of an initializer is computed at import; so is the Unique of that.
    m = numpy_helper.from_array(np.array([[2, 1], [1, 3]], np.float32), "m")
    model = _model([helper.make_node("Det", ["m"], ["d"]),
                    helper.make_node("Unique", ["d"], ["u"]),
                    helper.make_node("Mul", ["x", "u"], ["y"])], [X], [Y], [m])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(hexir_runtime.load(hexir_compiler.compile(model)).main(x), x * 5)


def test_an_op_version_without_a_handler_is_refused_by_version(monkeypatch, tmp_path, capsys):
    from hexir_compiler.frontend import onnx_ops

    monkeypatch.setitem(onnx_ops.VERSIONS, "Relu", (13,))
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [X], [Y], opset=14)
    assert _refused(model, tmp_path, capsys) == [
        ("error: 1 op version (of opset 14) Hexir does not implement: Relu 14 (Hexir has 13; "
         "1 node: 'r')")]
