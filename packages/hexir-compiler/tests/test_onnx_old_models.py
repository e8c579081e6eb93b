"""Older ONNX files (IR 3-6, opsets 1-12, upgraded to opset 13 at import), and the ops the
ONNX project's model suites brought: ConvTranspose in every form against PyTorch, PRelu's
per-channel slope before opset 7, and the random ops that are refused instead of folded."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper, numpy_helper

import hexir_compiler
import hexir_format
import hexir_runtime
from hexir_compiler.frontend.onnx import ModelError


def _model(nodes, inputs, outputs, initializers=(), opset=13, ir_version=7):
    if ir_version < 4:  # IR 3 lists every initializer among the inputs too
        listed = {i.name for i in inputs}
        inputs = [*inputs, *(helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                             for t in initializers if t.name not in listed)]
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def _value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _run(model, *inputs):
    return hexir_runtime.load(hexir_compiler.compile(model)).main(*inputs)


def test_an_ir3_model_reads_an_input_with_an_initializer_as_that_constant():
    """IR 3 lists every initializer among the graph inputs too; like ONNX Runtime, Hexir
    takes such an input as its constant: the module's only input is x."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2), "w")
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                   [_value("x", [2, 3])], [_value("y", [2, 2])], [w],
                   opset=6, ir_version=3)
    hxb = hexir_compiler.compile(model)
    assert hexir_format.parse(hxb).functions[0].inputs == ("x",)
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(hexir_runtime.load(hxb).main(x), x @ numpy_helper.to_array(w))


@pytest.mark.parametrize("opset", [1, 6, 9, 12])
def test_an_old_opset_is_upgraded_with_its_meaning(opset):
    """Reshape's shape was an attribute before opset 5; Add broadcast only with broadcast=1
    before opset 7: the version converter's adapters turn both into today's forms."""
    add = dict(broadcast=1) if opset < 7 else {}
    reshape = helper.make_node("Reshape", ["h"], ["y"], shape=[3, 2]) if opset < 5 else \
        helper.make_node("Reshape", ["h", "s"], ["y"])
    shape = [numpy_helper.from_array(np.array([3, 2], np.int64), "s")] if opset >= 5 else []
    model = _model([helper.make_node("Add", ["x", "b"], ["h"], **add), reshape],
                   [_value("x", [2, 3])], [_value("y", [3, 2])],
                   [numpy_helper.from_array(np.float32([1, 2, 3]), "b"), *shape],
                   opset=opset, ir_version=3)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(_run(model, x), (x + np.float32([1, 2, 3])).reshape(3, 2))


def test_prelu_before_opset_7_takes_one_slope_per_channel():
    slope = np.float32([0.1, 0.2, 0.3])
    model = _model([helper.make_node("PRelu", ["x", "s"], ["y"])], [_value("x", [2, 3, 4])],
                   [_value("y", [2, 3, 4])], [numpy_helper.from_array(slope, "s")], opset=6,
                   ir_version=3)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(_run(model, x), np.where(x < 0, x * slope[:, None], x))


@pytest.mark.parametrize("op", ["RandomNormalLike", "RandomUniformLike"])
def test_a_random_op_is_refused_even_when_its_input_is_known(op):
    """Folding it would bake numpy's draws into the module; no runtime would agree."""
    model = _model([helper.make_node(op, ["c"], ["r"], name="rand", seed=1.0),
                    helper.make_node("Add", ["x", "r"], ["y"])], [_value("x", [2])],
                   [_value("y", [2])], [numpy_helper.from_array(np.zeros(2, np.float32), "c")])
    with pytest.raises(ModelError, match=f"node 'rand' \\({op}\\): {op} draws random values"):
        hexir_compiler.compile(model)


CONV_TRANSPOSE = {  # name -> (input shape, weight shape, attributes)
    "1d": ((2, 3, 7), (3, 4, 3), {}),
    "2d strides pads": ((1, 2, 5, 6), (2, 3, 3, 2), dict(strides=[2, 3], pads=[1, 0, 2, 1])),
    "2d groups dilations": ((2, 4, 5, 5), (4, 2, 3, 3), dict(group=2, dilations=[2, 1])),
    "2d output_padding": ((1, 3, 4, 4), (3, 2, 3, 3),
                          dict(strides=[2, 2], output_padding=[1, 0], pads=[1, 1, 1, 1])),
    "3d": ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), dict(strides=[1, 2, 2], pads=[0, 1, 0, 0, 1, 0])),
    "pads wider than the kernel": ((1, 1, 6, 6), (1, 1, 2, 2),
                                   dict(strides=[2, 2], pads=[2, 3, 2, 1])),
}


@pytest.mark.parametrize("case", sorted(CONV_TRANSPOSE))
@pytest.mark.parametrize("weight_known", [True, False], ids=["constant-weight", "input-weight"])
def test_conv_transpose_matches_torch(case, weight_known):
    xshape, wshape, attrs = CONV_TRANSPOSE[case]
    rng = np.random.default_rng(1)
    x = rng.standard_normal(xshape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    b = rng.standard_normal(wshape[1] * attrs.get("group", 1)).astype(np.float32)
    spatial = len(xshape) - 2
    pads = attrs.get("pads", [0] * 2 * spatial)
    crop = [(pads[d], pads[spatial + d]) for d in range(spatial)]
    # torch pads symmetrically: pad by the smaller side there, crop the rest off the other
    fn = (torch.nn.functional.conv_transpose1d, torch.nn.functional.conv_transpose2d,
          torch.nn.functional.conv_transpose3d)[spatial - 1]
    full = fn(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
              stride=attrs.get("strides", 1), output_padding=attrs.get("output_padding", 0),
              groups=attrs.get("group", 1), dilation=attrs.get("dilations", 1)).numpy()
    want = full[(..., *(slice(lo, full.shape[2 + d] - hi) for d, (lo, hi) in enumerate(crop)))]
    initializers = [numpy_helper.from_array(b, "b")]
    inputs = [_value("x", list(xshape))]
    if weight_known:
        initializers.append(numpy_helper.from_array(w, "w"))
    else:
        inputs.append(_value("w", list(wshape)))
    model = _model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)],
                   inputs, [_value("y", None)], initializers)
    got = _run(model, x) if weight_known else _run(model, x, w)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_transpose_auto_pad_and_output_shape_give_the_shape_asked(auto_pad):
    """SAME_*: the output is input x stride, the padding split as auto_pad says (the ONNX
    reference's reading); output_shape: that shape, padding added where it falls short."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    w = numpy_helper.from_array(rng.standard_normal((2, 3, 3, 3)).astype(np.float32), "w")
    for attrs in (dict(auto_pad=auto_pad, strides=[2, 2]),
                  dict(output_shape=[10, 12], strides=[2, 2]),
                  dict(auto_pad=auto_pad, output_shape=[8, 9], strides=[2, 2])):
        model = _model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)],
                       [_value("x", [1, 2, 4, 5])], [_value("y", None)], [w])
        (want,) = ReferenceEvaluator(model).run(None, {"x": x})
        got = _run(model, x)
        assert got.shape == want.shape, attrs
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(attrs))
