"""Symbolic sizes through the ONNX import (issue 27): a model's dynamic axes become named
symbols in the graph's tensor types, the shape arithmetic an exporter writes is folded over
them, and the kernels take them as operands: one module runs at any size, and
`-input-shape` still specializes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import hexir_compiler
import hexir_format
from hexir_compiler import cli, dialects, symbolic
from hexir_compiler.frontend import onnx as frontend
from hexir_compiler.mlir import ir
from hexir_format import dims

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _heads_model():
    """x [batch, seq, 8] -> [batch, seq, 2, 4] -> transposed to [batch, 2, seq, 4], with the
    reshape's target computed as exporters do: Shape, Gather, Unsqueeze, Concat."""
    shape_nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["b1", "n1", "heads"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    consts = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
              helper.make_tensor("one", TensorProto.INT64, [], [1]),
              helper.make_tensor("axes", TensorProto.INT64, [1], [0]),
              helper.make_tensor("heads", TensorProto.INT64, [2], [2, 4])]
    x = helper.make_tensor_value_info("x", F, ["batch", "seq", 8])
    y = helper.make_tensor_value_info("y", F, None)
    return _model(shape_nodes, [x], [y], consts)


def _printed(model) -> str:
    with dialects.context():
        return str(frontend.import_model(model))


def test_dynamic_axes_become_symbols_and_the_exported_shape_arithmetic_folds():
    text = _printed(_heads_model())
    assert 'tensor<?x?x8xf32, ["batch", "seq"]> {hexir.name = "x"}' in text
    assert '"hexir.reshape"' in text and 'tensor<?x?x2x4xf32, ["batch", "seq"]>' in text
    # the transposed result keeps each symbol on its axis
    assert '-> (tensor<?x2x?x4xf32, ["batch", "seq"]> {hexir.name = "y"})' in text


def test_an_expression_dim_param_is_read_and_an_unnamed_dim_gets_a_symbol():
    x = helper.make_tensor_value_info("x", F, ["past + 1", 4])
    unnamed = helper.make_tensor_value_info("z", F, [None, 4])
    unnamed.type.tensor_type.shape.dim[0].Clear()
    model = _model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["z"], ["w"])],
                   [x, unnamed], [helper.make_tensor_value_info("y", F, None),
                                  helper.make_tensor_value_info("w", F, None)])
    text = _printed(model)
    assert 'tensor<?x4xf32, ["past + 1"]> {hexir.name = "x"}' in text
    assert 'tensor<?x4xf32, ["z_0"]> {hexir.name = "z"}' in text


def test_a_type_reads_back_the_dims_it_was_made_of():
    with ir.Context(), ir.Location.unknown():
        seq = dims.Expr.symbol("seq")
        shape = (dims.Expr.symbol("batch"), 2 * seq + 1, 64)
        t = symbolic.tensor_type(shape, ir.F32Type.get())
        assert str(t) == 'tensor<?x?x64xf32, ["batch", "2 * seq + 1"]>'
        assert symbolic.shape_of(t) == shape
        with pytest.raises(dims.DimError, match="its encoding must list"):
            symbolic.shape_of(ir.Type.parse("tensor<?x2xf32>"))


def test_a_symbolic_model_compiles_once_runs_at_any_size_and_input_shape_still_specializes(
        tmp_path, capsys):
    path = tmp_path / "m.onnx"
    path.write_bytes(_heads_model().SerializeToString())
    out = tmp_path / "m.hxb"
    assert cli.main(["-emit=hxb", "-o", str(out), str(path)]) == 0
    import hexir_runtime

    def want(x):
        n, s, _ = x.shape
        return np.maximum(x.reshape(n, s, 2, 4).transpose(0, 2, 1, 3), 0)

    rng = np.random.default_rng(0)
    with hexir_runtime.load(out) as m:
        assert [s.name for s in hexir_format.parse(out.read_bytes()).symbols] == ["batch", "seq"]
        for shape in ((3, 5, 8), (1, 1, 8), (4, 9, 8)):
            x = rng.standard_normal(shape).astype(np.float32)
            np.testing.assert_array_equal(m.main(x), want(x))
    assert cli.main(["-emit=hxb", "-input-shape=x=3x5x8", "-o", str(out), str(path)]) == 0
    assert not hexir_format.parse(out.read_bytes()).symbols
    x = rng.standard_normal((3, 5, 8)).astype(np.float32)
    with hexir_runtime.load(out) as m:
        np.testing.assert_array_equal(m.main(x), want(x))


def test_a_symbolic_size_used_as_data_is_refused_naming_it(tmp_path):
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Cast", ["s"], ["f"], to=F),
             helper.make_node("Mul", ["f", "f"], ["y"], name="square")]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, ["batch", 3])],
                   [helper.make_tensor_value_info("y", F, None)])
    with pytest.raises(frontend.ModelError,
                       match="node 1 \\(Cast\\): casts symbolic sizes to a non-integer type"):
        hexir_compiler.compile(model)


def test_slicing_a_constant_by_a_symbolic_end_bounds_the_symbol_and_sizes_become_data():
    """BERT's pattern: the first `seq` of a buffer of 16 positions, and a size used as data
    (`arange(batch) * seq`): the symbol is held to [1, 16] (the slice, and a gather of
    position 0 along `seq`), and its value at run time is a `hexir.sizes`."""
    i64 = TensorProto.INT64
    nodes = [
        helper.make_node("Shape", ["ids"], ["s"]),
        helper.make_node("Slice", ["s", "one", "two"], ["n"]),           # [seq]
        helper.make_node("Slice", ["positions", "zero", "n", "one"], ["p"], name="first"),
        helper.make_node("Gather", ["ids", "zero_scalar"], ["head"], axis=1),
        helper.make_node("Mul", ["head", "n"], ["scaled"], name="by_seq"),
        helper.make_node("Add", ["p", "one"], ["y"]),
    ]
    consts = [helper.make_tensor("positions", i64, [1, 16], list(range(16))),
              helper.make_tensor("zero", i64, [1], [0]),
              helper.make_tensor("one", i64, [1], [1]),
              helper.make_tensor("two", i64, [1], [2]),
              helper.make_tensor("zero_scalar", i64, [], [0])]
    model = _model(nodes, [helper.make_tensor_value_info("ids", i64, ["batch", "seq"])],
                   [helper.make_tensor_value_info("y", i64, None),
                    helper.make_tensor_value_info("scaled", i64, None)], consts)
    text = _printed(model)
    assert "hexir.ranges = {seq = array<i64: 1, 16>}" in text
    assert '"hexir.slice"(%0) {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : ' \
           '(tensor<1x16xi64>) -> tensor<1x?xi64, ["seq"]>' in text
    assert '"hexir.sizes"() {values = ["seq"]} : () -> tensor<1xi64>' in text
    import hexir_runtime

    module = hexir_compiler.compile(model)
    assert [(s.name, s.lo, s.hi) for s in hexir_format.parse(module).symbols] == [
        ("batch", 1, 2**31 - 1), ("seq", 1, 16)]
    with hexir_runtime.load(module) as m:
        for batch, seq in ((1, 1), (2, 7), (3, 16)):
            ids = np.arange(batch * seq, dtype=np.int64).reshape(batch, seq)
            y, scaled = m.main(ids)
            np.testing.assert_array_equal(y, np.arange(seq)[None] + 1)
            np.testing.assert_array_equal(scaled, ids[:, 0] * seq)


def test_a_slice_no_size_allows_is_refused():
    nodes = [helper.make_node("Slice", ["x", "zero", "n"], ["y"], name="past_the_end")]
    consts = [helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
              helper.make_tensor("n", TensorProto.INT64, [1], [5])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [3])],
                   [helper.make_tensor_value_info("y", F, None)], consts)
    # a static axis keeps numpy's clamping; a symbolic one is held to the slice instead
    assert "tensor<3xf32>" in _printed(model)
    x = helper.make_tensor_value_info("x", F, ["n_x"])
    nodes = [helper.make_node("Slice", ["x", "two", "one"], ["y"], name="backwards")]
    consts = [helper.make_tensor("two", TensorProto.INT64, [1], [2]),
              helper.make_tensor("one", TensorProto.INT64, [1], [1])]
    model = _model(nodes, [x], [helper.make_tensor_value_info("y", F, None)], consts)
    with pytest.raises(frontend.ModelError,
                       match="node 'backwards' \\(Slice\\): needs 2 <= 1, which no size gives"):
        _printed(model)


def test_input_shapes_may_bound_and_name_symbols_and_the_runtime_holds_a_call_to_them():
    import hexir_runtime
    from hexir_runtime.errors import RuntimeFailure

    module = hexir_compiler.compile(_heads_model(), input_shapes={"x": ("1..4", "len:2..9", 8)})
    assert [(s.name, s.lo, s.hi) for s in hexir_format.parse(module).symbols] == [
        ("batch", 1, 4), ("len", 2, 9)]
    rng = np.random.default_rng(0)
    with hexir_runtime.load(module) as m:
        x = rng.standard_normal((4, 9, 8)).astype(np.float32)
        np.testing.assert_array_equal(
            m.main(x), np.maximum(x.reshape(4, 9, 2, 4).transpose(0, 2, 1, 3), 0))
        for shape, symbol in (((5, 3, 8), "batch"), ((2, 1, 8), "len")):
            with pytest.raises(RuntimeFailure, match=f"'{symbol}'"):
                m.main(rng.standard_normal(shape).astype(np.float32))
    with pytest.raises(hexir_compiler.CompileError, match=r"'4\.\.1' is an empty range"):
        hexir_compiler.compile(_heads_model(), input_shapes={"x": ("4..1", "seq", 8)})


def test_an_explicit_range_may_start_at_0_and_a_size_of_0_runs():
    """A dimension is at least 1 unless -input-shape says 0 may be: the lower bound given is
    the symbol's own (it was raised to the default 1 silently), and an empty call runs (a
    decoder's prefill: its past cache empty)."""
    import hexir_runtime

    module = hexir_compiler.compile(_heads_model(), input_shapes={"x": ("batch", "seq:0..9", 8)})
    assert [(s.name, s.lo, s.hi) for s in hexir_format.parse(module).symbols] == [
        ("batch", 1, 2**31 - 1), ("seq", 0, 9)]
    rng = np.random.default_rng(0)
    with hexir_runtime.load(module) as m:
        for shape in ((2, 0, 8), (2, 3, 8)):
            x = rng.standard_normal(shape).astype(np.float32)
            got = m.main(x)
            assert got.shape == (shape[0], 2, shape[1], 4)
            np.testing.assert_array_equal(
                got, np.maximum(x.reshape(shape[0], shape[1], 2, 4).transpose(0, 2, 1, 3), 0))
