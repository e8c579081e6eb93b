"""arg_max, arg_min, top_k, cumsum, gather_elements, scatter_elements and scatter_nd: the
cases the ONNX node tests leave out, on both devices, checked thread by thread.

Each is a one-op program lowered by hexir-lower-to-tir and run by `tir_interp` under its own
schedule (a cuda kernel as every thread of its grid: races and out-of-bounds accesses fail),
against numpy: ties, NaN, negative and out-of-range indices, duplicate scatter indices, rows
long enough for the cuda block-per-row schedule, and scatter_nd's row blocks. Then the ops'
verifiers (one-line errors) and the importer, end to end through the runtime.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference.ops.op_topk import topk_sorted_implementation

from hexir_compiler.dialects import context
from hexir_compiler.mlir import ir
from test_typed_kernels import DEVICES, NUMPY, _random, _run

RNG = np.random.default_rng(25)


def _flags(**flags) -> str:
    return ", ".join(f"{k} = {str(v).lower()}" for k, v in flags.items())


def _ties_and_nans(shape, element: str) -> np.ndarray:
    """Few distinct values (many ties); floats with some NaN."""
    x = RNG.integers(-3, 3, shape).astype(NUMPY[element])
    if element in ("f32", "f64"):
        x[RNG.random(shape) < 0.1] = np.nan
    return x


def _numpy_arg(x: np.ndarray, op: str, axis: int, last: bool) -> np.ndarray:
    """numpy's argmax / argmin (a NaN is the extreme, the first one found), from the end
    with `last` (the ONNX reference's select_last_index)."""
    fn = np.argmax if op == "arg_max" else np.argmin
    if not last:
        return fn(x, axis=axis)
    return x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("extent", [5, 100])  # 100: a block per row on cuda
@pytest.mark.parametrize("element", ["f32", "f64", "i32", "i64"])
@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("op", ["arg_max", "arg_min"])
def test_arg_extremes_break_ties_by_position_and_take_nan_first(op, last, element, extent,
                                                                 device):
    x = _ties_and_nans((3, extent), element)
    if element == "f32":
        x[1] = 1.0  # a row of equal values
        x[2, : extent // 2] = np.nan  # a row that starts with NaNs
    for axis, keepdims in ((1, False), (0, True)):
        want = _numpy_arg(x, op, axis, last)
        shape = np.expand_dims(want, axis).shape if keepdims else want.shape
        attrs = f"axis = {axis} : i64, {_flags(keepdims=keepdims, select_last_index=last)}"
        got = _run(op, [x], shape, "i64", device, attrs)
        np.testing.assert_array_equal(got.reshape(want.shape), want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("extent, k", [(7, 3), (7, 7), (80, 5), (80, 0)])
@pytest.mark.parametrize("element", ["f32", "i64"])
@pytest.mark.parametrize("largest", [True, False])
def test_top_k_puts_ties_in_index_order_and_nan_above_every_number(largest, element, extent,
                                                                   k, device):
    x = _ties_and_nans((2, extent, 3), element)
    _, want = topk_sorted_implementation(x, k, 1, int(largest))
    got = _run("top_k", [x], want.shape, "i64", device,
               f"k = {k} : i64, axis = 1 : i64, {_flags(largest=largest)}")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("element", ["f64", "i32"])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_exclusive_and_reverse(reverse, exclusive, element, device):
    x = _random((3, 6, 2), element)
    flipped = np.flip(x, 1) if reverse else x
    want = np.cumsum(flipped, axis=1, dtype=x.dtype)
    if exclusive:
        want = np.concatenate([np.zeros_like(want[:, :1]), want[:, :-1]], axis=1)
    want = np.flip(want, 1) if reverse else want
    got = _run("cumsum", [x], x.shape, element, device,
               f"axis = 1 : i64, {_flags(exclusive=exclusive, reverse=reverse)}")
    np.testing.assert_array_equal(got, want)


def _safe(indices: np.ndarray, extent: int) -> np.ndarray:
    """What the kernels make of an index: from the end when negative, then clamped."""
    return np.clip(np.where(indices < 0, indices + extent, indices), 0, extent - 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index", ["i32", "i64"])
@pytest.mark.parametrize("axis", [0, 1])
def test_gather_elements_counts_negative_indices_from_the_end_and_clamps(axis, index, device):
    data = _random((4, 5), "f32")
    indices = RNG.integers(-7, 9, (3, 4)).astype(NUMPY[index])  # some past either end
    covered = data[:, :4] if axis == 0 else data[:3]  # the indices' extent off the axis
    want = np.take_along_axis(covered, _safe(indices, data.shape[axis]), axis)
    got = _run("gather_elements", [data, indices], want.shape, "f32", device,
               f"axis = {axis} : i64")
    np.testing.assert_array_equal(got, want)


COMBINE = {"none": lambda a, b: b, "add": np.add, "mul": np.multiply, "max": np.maximum,
           "min": np.minimum}


def _scatter_elements(data, indices, updates, axis, reduction):
    out = data.copy()
    for p in np.ndindex(indices.shape):  # row-major: duplicates meet in this order
        target = list(p)
        target[axis] = _safe(indices[p], data.shape[axis])
        out[tuple(target)] = COMBINE[reduction](out[tuple(target)], updates[p])
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", list(COMBINE))
@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_elements_combines_duplicate_indices_in_order(axis, reduction, device):
    data = _random((4, 5), "f32")
    indices = RNG.integers(-4, 4, (3, 4)).astype(np.int64)
    indices[:, 0] = 1  # every update of column / row 0 to one place: duplicates
    indices[0, 1] = 9  # out of range: clamped
    updates = _random(indices.shape, "f32")
    want = _scatter_elements(data, indices, updates, axis, reduction)
    got = _run("scatter_elements", [data, indices, updates], data.shape, "f32", device,
               f'axis = {axis} : i64, reduction = "{reduction}"')
    np.testing.assert_allclose(got, want, rtol=1e-6)


def _scatter_nd(data, indices, updates, reduction):
    out = data.copy()
    depth = indices.shape[-1]
    for m in np.ndindex(indices.shape[:-1]):
        target = tuple(int(_safe(indices[m][d], data.shape[d])) for d in range(depth))
        out[target] = COMBINE[reduction](out[target], updates[m])
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", list(COMBINE))
@pytest.mark.parametrize("data_shape, indices_shape", [
    ((6, 5, 3), (2, 2)),  # few updates into many rows: rows in blocks of 4, 2 x 3 columns
    ((4, 3), (7, 1)),  # more updates than rows: one block, each iteration a column
    ((3, 4), (10, 2)),  # single elements, duplicates certain
    ((2, 3), (2, 0)),  # k = 0: each update is the whole tensor
])
def test_scatter_nd_combines_duplicate_tuples_in_order(data_shape, indices_shape, reduction,
                                                       device):
    data = _random(data_shape, "i64")
    depth = indices_shape[-1]
    high = min(data_shape[:depth], default=1)
    indices = RNG.integers(-high, high, indices_shape).astype(np.int32)
    if indices.size:
        indices[-1] = indices[0]  # a duplicate
    updates = _random((*indices_shape[:-1], *data_shape[depth:]), "i64")
    want = _scatter_nd(data, indices, updates, reduction)
    got = _run("scatter_nd", [data, indices, updates], data.shape, "i64", device,
               f'reduction = "{reduction}"')
    np.testing.assert_array_equal(got, want)


T = "tensor<3x4xf32>"
ARG = "keepdims = false, select_last_index = false"
TYPES = {"%x": T, "%i": "tensor<2x5xi64>", "%j": "tensor<2x4xi64>", "%k": "tensor<2x1xi64>",
         "%u": "tensor<2x4xf32>"}


@pytest.mark.parametrize(("op", "operands", "attrs", "result", "error"), [
    ("arg_max", "%x", f"axis = 1 : i64, {ARG}", "tensor<3xi32>",
     "result must have element type i64, got tensor<3xi32>"),
    ("arg_min", "%x", f"axis = 2 : i64, {ARG}", "tensor<3xi64>",
     "axis 2 is out of range for rank 2; expected -2..1"),
    ("arg_max", "%x", "axis = 1 : i64, keepdims = 1 : i64, select_last_index = false",
     "tensor<3x1xi64>", "attribute 'keepdims' must be true or false, got 1 : i64"),
    ("top_k", "%x", "k = 5 : i64, axis = 1 : i64, largest = true", "tensor<3x5xi64>",
     "k = 5 is not in 0..4, the extent of axis 1"),
    ("cumsum", "%x", "axis = 0 : i64, exclusive = false, reverse = false", "tensor<3x4xf64>",
     f"result type tensor<3x4xf64> differs from the input type {T}"),
    ("gather_elements", "%x, %i", "axis = 0 : i64", "tensor<2x5xf32>",
     "indices 2x5 exceed data 3x4 on axis 1, which is not the indexed axis 0"),
    ("scatter_elements", "%x, %i, %x", 'axis = 0 : i64, reduction = "none"', T,
     "indices 2x5 and updates 3x4 differ in shape"),
    ("scatter_elements", "%x, %j, %u", 'axis = 0 : i64, reduction = "sum"', T,
     'reduction must be one of none, add, mul, max, min, got "sum"'),
    ("scatter_nd", "%x, %j, %u", 'reduction = "add"', T,
     "index tuples of 4 coordinates do not fit the rank-2 data"),
    ("scatter_nd", "%x, %k, %x", 'reduction = "add"', T,
     "updates have shape 3x4; indices 2x1 into data 3x4 expect 2x4"),
])
def test_verifiers_refuse_bad_shapes_in_one_line(op, operands, attrs, result, error) -> None:
    types = ", ".join(TYPES[name] for name in operands.split(", "))
    args = ", ".join(f"{name}: {t}" for name, t in TYPES.items())
    text = (f"func.func @main({args}) {{\n"
            f'  %r = "hexir.{op}"({operands}) {{{attrs}}} : ({types}) -> {result}\n'
            "  return\n}\n")
    with context(), pytest.raises(ir.MLIRError) as err:
        ir.Module.parse(text)
    (diagnostic,) = err.value.error_diagnostics
    assert diagnostic.message == f"'hexir.{op}' op {error}"


def _model(node, inputs, outputs, initializers=()):
    from onnx import helper

    graph = helper.make_graph([node], "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_scatter_nd_add_accumulates_duplicates_through_the_runtime():
    from onnx import TensorProto, helper, numpy_helper

    import hexir_compiler
    import hexir_runtime

    indices = np.array([[1], [3], [1], [1]], np.int64)
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="add")
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2]),
                          helper.make_tensor_value_info("u", TensorProto.FLOAT, [4, 2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [numpy_helper.from_array(indices, "i")])
    x, u = np.ones((5, 2), np.float32), np.arange(8, dtype=np.float32).reshape(4, 2)
    y = hexir_runtime.load(hexir_compiler.compile(model)).main(x=x, u=u)
    np.testing.assert_array_equal(y, [[1, 1], [11, 14], [1, 1], [3, 4], [1, 1]])


def test_top_k_gives_values_and_indices_through_the_runtime():
    from onnx import TensorProto, helper, numpy_helper

    import hexir_compiler
    import hexir_runtime

    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1, largest=1)
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                   [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
                    helper.make_tensor_value_info("i", TensorProto.INT64, None)],
                   [numpy_helper.from_array(np.array([3], np.int64), "k")])
    x = np.array([[1, 3, 3, 0, 2], [np.nan, 1, 5, 5, -1]], np.float32)
    values, indices = hexir_runtime.load(hexir_compiler.compile(model)).main(x=x)
    np.testing.assert_array_equal(indices, [[1, 2, 4], [0, 2, 3]])
    np.testing.assert_array_equal(values, [[3, 3, 2], [np.nan, 5, 5]])


def test_known_out_of_range_indices_are_refused_at_import():
    from onnx import TensorProto, helper, numpy_helper

    import hexir_compiler

    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [numpy_helper.from_array(np.array([[0, 3]], np.int64), "i")])
    with pytest.raises(hexir_compiler.CompileError,
                       match="index 3 is out of range for an axis of extent 3"):
        hexir_compiler.compile(model)


def test_a_pytorch_export_of_these_ops_matches_onnx_runtime_on_both_devices():
    """A CLIP-style pooler (ArgMax), position ids from a mask (CumSum), topk, gather,
    scatter_add and an index assignment (ScatterND), exported by torch.onnx: the cpu module
    through the runtime and the all-cuda kernels interpreted, both against ONNX Runtime."""
    torch = pytest.importorskip("torch")
    import io

    import onnx
    import onnxruntime

    import hexir_compiler
    import hexir_runtime
    import tir_graph
    from hexir_compiler.pipeline import Options

    class Ops(torch.nn.Module):
        def forward(self, x, ids, idx):
            pooled = x[torch.arange(x.shape[0]), ids.argmax(dim=-1)]
            positions = torch.cumsum((ids > 0).to(torch.int64), dim=1) - 1
            values, indices = torch.topk(x.sum(-1), 3, dim=-1)
            taken = torch.gather(x, 2, idx)
            added = torch.zeros_like(x).scatter_add(2, idx, taken)
            y = x.clone()
            y[:, 1] = 7.0
            return pooled, positions, values, indices, taken, added, y, x.argmin(1)

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 4, generator=gen)
    ids = torch.tensor([[3, 9, 9, 2, 0], [1, 1, 0, 0, 0]])
    idx = torch.randint(0, 4, (2, 5, 3), generator=gen)  # duplicates along the last axis
    buffer = io.BytesIO()
    torch.onnx.export(Ops().eval(), (x, ids, idx), buffer, dynamo=False, opset_version=17,
                      input_names=["x", "ids", "idx"])
    model = onnx.load_from_string(buffer.getvalue())
    assert {"ArgMax", "ArgMin", "CumSum", "TopK", "GatherElements", "ScatterElements",
            "ScatterND"} <= {n.op_type for n in model.graph.node}
    feeds = {"x": x.numpy(), "ids": ids.numpy(), "idx": idx.numpy()}
    want = onnxruntime.InferenceSession(buffer.getvalue()).run(None, feeds)
    on_cpu = hexir_runtime.load(hexir_compiler.compile(model)).main(**feeds)
    on_cuda = tir_graph.run(model, list(feeds.values()), Options("mlir-tir", {"*": "cuda"}))
    for got in (on_cpu, on_cuda):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-6)


def _program(op: str, inputs: list[np.ndarray], out_shape, out_element: str, attrs: str) -> str:
    """A one-op cuda program of `hexir.<op>`, as `test_typed_kernels._run` writes it."""
    def tensor(shape, element):
        return f"tensor<{''.join(f'{d}x' for d in shape)}{element}>"
    elements = [next(k for k, v in NUMPY.items() if v == a.dtype) for a in inputs]
    types = [tensor(a.shape, e) for a, e in zip(inputs, elements, strict=True)]
    result = tensor(out_shape, out_element)
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
    operands = ", ".join(f"%a{i}" for i in range(len(inputs)))
    return (f"func.func @main({args}) -> {result} {{\n"
            f'  %0 = "hexir.{op}"({operands}) {{device = "cuda", {attrs}}} : '
            f"({', '.join(types)}) -> {result}\n  return %0 : {result}\n}}\n")


GPU_CASES = [
    ("arg_max", [_ties_and_nans((3, 100), "f32")], (3,), "i64",
     f"axis = 1 : i64, {_flags(keepdims=False, select_last_index=True)}"),
    ("top_k", [_ties_and_nans((2, 70), "f64")], (2, 4), "i64",
     f"k = 4 : i64, axis = 1 : i64, {_flags(largest=False)}"),
    ("top_k", [_ties_and_nans((5, 20), "f32")], (5, 6), "i64",
     f"k = 6 : i64, axis = 1 : i64, {_flags(largest=True)}"),
    ("cumsum", [_random((4, 9), "i32")], (4, 9), "i32",
     f"axis = 0 : i64, {_flags(exclusive=True, reverse=True)}"),
    ("gather_elements", [_random((4, 5), "f32"), RNG.integers(-6, 6, (4, 3))], (4, 3), "f32",
     "axis = 1 : i64"),
    ("scatter_elements", [_random((4, 5), "f32"), RNG.integers(-5, 5, (2, 5)),
                          _random((2, 5), "f32")], (4, 5), "f32",
     'axis = 0 : i64, reduction = "add"'),
    ("scatter_nd", [_random((40, 3), "f64"), RNG.integers(-40, 40, (2, 1)),
                    _random((2, 3), "f64")], (40, 3), "f64", 'reduction = "mul"'),
]


@pytest.mark.parametrize("case", GPU_CASES,
                         ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1][0].shape))}")
def test_the_gpu_lowering_keeps_each_kernel(case):
    """After hextir-to-loops and hexir-kernels-to-gpu, the gpu.func (run by gpu_interp over
    the grid the pass recorded) gives exactly what the hextir kernel gives."""
    from gpu_interp import GpuKernel
    from tir_programs import Lowered, to_gpu

    op, inputs, shape, element, attrs = case
    lowered = Lowered(_program(op, inputs, shape, element, attrs))
    (kernel,) = lowered.kernels
    expected, actual = np.zeros(shape, NUMPY[element]), np.ones(shape, NUMPY[element])
    with lowered.context:
        kernel(*inputs, expected)
        gpu_kernel = GpuKernel(to_gpu(lowered))
        gpu_kernel(*inputs, actual)
    assert (gpu_kernel.grid, gpu_kernel.block) == (kernel.grid, kernel.block)
    np.testing.assert_array_equal(actual, expected)
