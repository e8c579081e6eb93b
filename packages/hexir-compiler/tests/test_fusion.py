"""Fusion (hexir-fuse): fewer kernels, the same results, on both devices.

The example networks compiled fused and unfused give the same outputs on the cpu (the
runtime), and their all-cuda fused kernels, run thread by thread (`tir_graph`), match the
fixtures' numpy references. A fused kernel takes inputs of different types (a matrix, a
weight, a bias): each is its own operand group of `hexir.call_tir`.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import hexir_compiler
import hexir_format as hf
import hexir_runtime
import tir_graph
from hexir_compiler.pipeline import Options
from hexir_runtime.hal.hostcode import host_level

REPO = Path(__file__).resolve().parents[3]
NETWORKS = [("mlp", "f32"), ("mlp", "f64"), ("transformer_block", "f32"),
            ("transformer_block", "f64")]


def _source(net: str, dtype: str) -> Path:
    return REPO / "examples" / f"{net}{'' if dtype == 'f32' else '-f64'}.mlir"


@pytest.mark.parametrize("net, dtype", NETWORKS)
def test_fused_and_unfused_networks_agree_on_the_cpu(net, dtype):
    data = np.load(REPO / "fixtures" / f"{net}-{dtype}.npz")
    fused = hexir_compiler.compile(_source(net, dtype))
    unfused = hexir_compiler.compile(_source(net, dtype), fuse=False)
    assert len(hf.parse(fused).executables) < len(hf.parse(unfused).executables)
    a = hexir_runtime.load(fused).main(data["input_0"])
    b = hexir_runtime.load(unfused).main(data["input_0"])
    tolerance = 1e-6 if dtype == "f32" else 1e-14
    scale = np.abs(data["output_0"]).max()
    assert np.abs(a - b).max() <= tolerance * scale
    assert np.abs(a - data["output_0"]).max() <= 10 * tolerance * scale


def test_the_mlp_is_one_kernel_per_layer():
    text = hexir_compiler.compile(_source("mlp", "f32"), "mlir-tir")
    assert re.findall(r"callee = @(\w+)", text) == [
        "linear_add_relu_0", "linear_add_relu_1", "linear_add_2", "softmax_3"]


@pytest.mark.parametrize("net", ["mlp", "transformer_block"])
def test_fused_cuda_kernels_compute_the_network_thread_by_thread(net):
    data = np.load(REPO / "fixtures" / f"{net}-f32.npz")
    (got,) = tir_graph.run(str(_source(net, "f32")), [data["input_0"]],
                           Options("mlir-tir", {"*": "cuda"}))
    scale = np.abs(data["output_0"]).max()
    assert np.abs(got - data["output_0"]).max() <= 1e-5 * scale


def test_fusion_stops_at_a_device_boundary():
    text = hexir_compiler.compile(_source("mlp", "f32"), "mlir-tir",
                                  placement="hexir.linear=cuda")
    assert "linear_add" not in text and "callee = @linear_0" in text


PROLOGUES = """\
func.func @main(%x: tensor<4x{n}x{t}>, %y: tensor<{n}x{t}>, %g: tensor<{n}x{t}>,
                %b: tensor<{n}x{t}>) -> (tensor<4x{n}x{t}>, tensor<4x{t}>, tensor<4x{n}x{t}>) {{
  %0 = "hexir.add"(%x, %y) : (tensor<4x{n}x{t}>, tensor<{n}x{t}>) -> tensor<4x{n}x{t}>
  %1 = "hexir.layer_norm"(%0, %g, %b) {{epsilon = 1.0e-05 : f64}}
      : (tensor<4x{n}x{t}>, tensor<{n}x{t}>, tensor<{n}x{t}>) -> tensor<4x{n}x{t}>
  %2 = "hexir.mul"(%x, %x) : (tensor<4x{n}x{t}>, tensor<4x{n}x{t}>) -> tensor<4x{n}x{t}>
  %3 = "hexir.reduce_mean"(%2) {{axes = array<i64: 1>, keepdims = false}}
      : (tensor<4x{n}x{t}>) -> tensor<4x{t}>
  %4 = "hexir.sub"(%x, %y) : (tensor<4x{n}x{t}>, tensor<{n}x{t}>) -> tensor<4x{n}x{t}>
  %5 = "hexir.exp"(%4) : (tensor<4x{n}x{t}>) -> tensor<4x{n}x{t}>
  %6 = "hexir.softmax"(%5) {{axis = 1 : i64}} : (tensor<4x{n}x{t}>) -> tensor<4x{n}x{t}>
  return %1, %3, %6 : tensor<4x{n}x{t}>, tensor<4x{t}>, tensor<4x{n}x{t}>
}}
"""


def _prologue_reference(x, y, g, b):
    h = x + y
    mean = h.mean(-1, keepdims=True)
    norm = (h - mean) / np.sqrt(((h - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b
    e = np.exp(np.exp(x - y) - np.exp(x - y).max(-1, keepdims=True))
    return norm, (x * x).mean(-1), e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("n", [7, 100])  # rows of one thread each, and a block per row
@pytest.mark.parametrize("element", ["f32", "f64"])
def test_an_element_wise_prologue_fuses_into_each_reduction(tmp_path, n, element):
    source = tmp_path / "prologues.mlir"
    source.write_text(PROLOGUES.format(n=n, t=element))
    text = hexir_compiler.compile(source, "mlir-tir")
    assert re.findall(r"callee = @(\w+)", text) == [
        "add_layer_norm_0", "mul_reduce_mean_1", "sub_exp_softmax_2"]
    rng = np.random.default_rng(n)
    dtype = np.float32 if element == "f32" else np.float64
    inputs = [rng.standard_normal(s).astype(dtype) for s in ((4, n), (n,), (n,), (n,))]
    expected = _prologue_reference(*(a.astype(np.float64) for a in inputs))
    tolerance = 1e-5 if element == "f32" else 1e-12
    fused = hexir_runtime.load(hexir_compiler.compile(source)).main(*inputs)
    unfused = hexir_runtime.load(hexir_compiler.compile(source, fuse=False)).main(*inputs)
    on_cuda = tir_graph.run(str(source), inputs, Options("mlir-tir", {"*": "cuda"}))
    for results in (fused, unfused, on_cuda):
        for got, want in zip(results, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)



CNN = """\
func.func @main(%x: tensor<2x3x9x9x{t}>, %w: tensor<4x3x3x3x{t}>, %b: tensor<4x1x1x{t}>)
    -> tensor<2x4x4x4x{t}> {{
  %0 = "hexir.conv"(%x, %w) {{strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 0, 0>,
      dilations = array<i64: 1, 1>, group = 1 : i64}}
      : (tensor<2x3x9x9x{t}>, tensor<4x3x3x3x{t}>) -> tensor<2x4x4x4x{t}>
  %1 = "hexir.add"(%0, %b) : (tensor<2x4x4x4x{t}>, tensor<4x1x1x{t}>) -> tensor<2x4x4x4x{t}>
  %2 = "hexir.relu"(%1) : (tensor<2x4x4x4x{t}>) -> tensor<2x4x4x4x{t}>
  return %2 : tensor<2x4x4x4x{t}>
}}
"""


@pytest.mark.parametrize("element", ["f32", "f64"])
def test_a_conv_takes_its_bias_and_activation_as_its_epilogue(tmp_path, element):
    source = tmp_path / "cnn.mlir"
    source.write_text(CNN.format(t=element))
    assert re.findall(r"callee = @(\w+)", hexir_compiler.compile(source, "mlir-tir")) == [
        "conv_add_relu_0"]
    rng = np.random.default_rng(3)
    dtype = np.float32 if element == "f32" else np.float64
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in ((2, 3, 9, 9), (4, 3, 3, 3),
                                                              (4, 1, 1)))
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 0), (1, 0)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    expected = np.maximum(np.einsum("ncijkl,mckl->nmij", windows, w) + b, 0)
    tolerance = 1e-5 if element == "f32" else 1e-12
    fused = hexir_runtime.load(hexir_compiler.compile(source)).main(x, w, b)
    unfused = hexir_runtime.load(hexir_compiler.compile(source, fuse=False)).main(x, w, b)
    (on_cuda,) = tir_graph.run(str(source), [x, w, b], Options("mlir-tir", {"*": "cuda"}))
    for got in (fused, unfused, on_cuda):
        np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


def _concat_model(channels: list[int], axis: int):
    from onnx import helper

    names = [f"x{i}" for i in range(len(channels))]
    shapes = [[1, c, 3, 5] for c in channels]
    graph = helper.make_graph(
        [helper.make_node("Concat", names, ["y"], axis=axis),
         helper.make_node("Relu", ["y"], ["z"])], "g",
        [helper.make_tensor_value_info(n, 1, s) for n, s in zip(names, shapes, strict=True)],
        [helper.make_tensor_value_info("z", 1, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), shapes


@pytest.mark.parametrize("parts, kernels", [(3, 1), (8, 1), (9, 2), (25, 4)])
def test_an_n_way_concat_copies_each_part_once_per_eight(parts, kernels):
    # DenseNet's concats of every earlier feature map: a chain of two-operand concats would
    # copy the first part once per later one; a tree of eight-part nodes, each one kernel,
    # copies every element once per level (25 parts: three nodes of eight, then one of those
    # three and the last part)
    pytest.importorskip("onnx")
    model, shapes = _concat_model([1 + i % 4 for i in range(parts)], 1)
    text = hexir_compiler.compile(model, "mlir-tir")
    callees = re.findall(r"callee = @(\w+)", text)
    assert len([c for c in callees if c.startswith("concat")]) == kernels, callees
    assert callees[-1].startswith("relu")  # a concat's group takes nothing but concats
    rng = np.random.default_rng(parts)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    want = np.maximum(np.concatenate(xs, axis=1), 0)
    np.testing.assert_array_equal(hexir_runtime.load(hexir_compiler.compile(model)).main(*xs),
                                  want)
    (on_cuda,) = tir_graph.run(model, xs, Options("mlir-tir", {"*": "cuda"}))
    np.testing.assert_array_equal(on_cuda, want)


NESTED = """\
func.func @main(%a: tensor<2x3xf32>, %b: tensor<2x1xf32>, %c: tensor<2x2xf32>)
    -> (tensor<2x6xf32>, tensor<4x3xf32>) {
  %0 = "hexir.concat"(%b, %c) {axis = 1 : i64}
      : (tensor<2x1xf32>, tensor<2x2xf32>) -> tensor<2x3xf32>
  %1 = "hexir.concat"(%a, %0) {axis = -1 : i64}
      : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
  %2 = "hexir.concat"(%0, %a) {axis = 0 : i64}
      : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return %1, %2 : tensor<2x6xf32>, tensor<4x3xf32>
}
"""


def test_a_concat_joins_the_group_of_a_concat_of_its_axis_only(tmp_path):
    # %0 feeds concats along both axes: it is its own kernel, and each of them reads it
    source = tmp_path / "nested.mlir"
    source.write_text(NESTED)
    assert re.findall(r"callee = @(\w+)", hexir_compiler.compile(source, "mlir-tir")) == [
        "concat_0", "concat_1", "concat_2"]
    source.write_text(NESTED.replace("%2 = \"hexir.concat\"(%0, %a) {axis = 0 : i64}",
                                     "%2 = \"hexir.concat\"(%a, %a) {axis = 0 : i64}"))
    # now %0's one use is the concat of its axis (-1 is 1): one kernel, its leaves a, b, c
    assert re.findall(r"callee = @(\w+)", hexir_compiler.compile(source, "mlir-tir")) == [
        "concat_concat_0", "concat_1"]
    rng = np.random.default_rng(5)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (2, 1), (2, 2)))
    got, stacked = hexir_runtime.load(hexir_compiler.compile(source)).main(a, b, c)
    np.testing.assert_array_equal(got, np.concatenate([a, b, c], axis=1))
    np.testing.assert_array_equal(stacked, np.concatenate([a, a], axis=0))


VIEWS = """\
func.func @main(%x: tensor<6x40xf32>, %y: tensor<6x24xf32>, %w: tensor<24x16xf32>,
                %t: tensor<5x6x20xf32>, %i: tensor<i64>, %e: tensor<10x20xf32>,
                %j: tensor<6xi32>, %v: tensor<20x16xf32>, %u: tensor<6x30xf32>,
                %z: tensor<16xi64>, %zz: tensor<20xi64>)
    -> (tensor<6x16xf32>, tensor<6x20xf32>, tensor<6x20xf32>, tensor<6x16xf32>) {
  %a = "hexir.slice"(%x) {starts = array<i64: 0, 8>, steps = array<i64: 1, 1>}
      : (tensor<6x40xf32>) -> tensor<6x16xf32>
  %p = "hexir.linear"(%y, %w) : (tensor<6x24xf32>, tensor<24x16xf32>) -> tensor<6x16xf32>
  %a2 = "hexir.slice"(%x) {starts = array<i64: 0, 1>, steps = array<i64: 1, 2>}
      : (tensor<6x40xf32>) -> tensor<6x16xf32>
  %a3 = "hexir.gather"(%u, %z) {axis = 1 : i64} : (tensor<6x30xf32>, tensor<16xi64>)
      -> tensor<6x16xf32>
  %q = "hexir.add"(%p, %a) : (tensor<6x16xf32>, tensor<6x16xf32>) -> tensor<6x16xf32>
  %q2 = "hexir.add"(%q, %a2) : (tensor<6x16xf32>, tensor<6x16xf32>) -> tensor<6x16xf32>
  %q3 = "hexir.add"(%q2, %a3) : (tensor<6x16xf32>, tensor<6x16xf32>) -> tensor<6x16xf32>
  %r = "hexir.relu"(%q3) : (tensor<6x16xf32>) -> tensor<6x16xf32>
  %b = "hexir.slice"(%x) {starts = array<i64: 5, 39>, steps = array<i64: -1, -2>}
      : (tensor<6x40xf32>) -> tensor<6x20xf32>
  %c = "hexir.gather"(%t, %i) {axis = 0 : i64} : (tensor<5x6x20xf32>, tensor<i64>)
      -> tensor<6x20xf32>
  %d = "hexir.gather"(%e, %j) {axis = 0 : i64} : (tensor<10x20xf32>, tensor<6xi32>)
      -> tensor<6x20xf32>
  %m = "hexir.add"(%b, %c) : (tensor<6x20xf32>, tensor<6x20xf32>) -> tensor<6x20xf32>
  %n = "hexir.add"(%m, %d) : (tensor<6x20xf32>, tensor<6x20xf32>) -> tensor<6x20xf32>
  %o = "hexir.tanh"(%n) : (tensor<6x20xf32>) -> tensor<6x20xf32>
  %f = "hexir.slice"(%x) {starts = array<i64: 0, 20>, steps = array<i64: 1, 1>}
      : (tensor<6x40xf32>) -> tensor<6x20xf32>
  %g = "hexir.slice"(%x) {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>}
      : (tensor<6x40xf32>) -> tensor<6x20xf32>
  %f2 = "hexir.slice"(%x) {starts = array<i64: 0, 1>, steps = array<i64: 1, 2>}
      : (tensor<6x40xf32>) -> tensor<6x20xf32>
  %g2 = "hexir.gather"(%u, %zz) {axis = 1 : i64} : (tensor<6x30xf32>, tensor<20xi64>)
      -> tensor<6x20xf32>
  %h = "hexir.add"(%f, %g) : (tensor<6x20xf32>, tensor<6x20xf32>) -> tensor<6x20xf32>
  %h2 = "hexir.add"(%h, %f2) : (tensor<6x20xf32>, tensor<6x20xf32>) -> tensor<6x20xf32>
  %h3 = "hexir.add"(%h2, %g2) : (tensor<6x20xf32>, tensor<6x20xf32>) -> tensor<6x20xf32>
  %s = "hexir.softmax"(%h3) {axis = -1 : i64} : (tensor<6x20xf32>) -> tensor<6x20xf32>
  %k = "hexir.slice"(%x) {starts = array<i64: 0, 1>, steps = array<i64: 1, 2>}
      : (tensor<6x40xf32>) -> tensor<6x20xf32>
  %l = "hexir.linear"(%k, %v) : (tensor<6x20xf32>, tensor<20x16xf32>) -> tensor<6x16xf32>
  return %r, %o, %s, %l : tensor<6x16xf32>, tensor<6x20xf32>, tensor<6x20xf32>,
                          tensor<6x16xf32>
}
"""


def _views_reference(x, y, w, t, i, e, j, v, u, z, zz):
    return [np.maximum(y @ w + x[:, 8:24] + x[:, 1:32:2] + u[:, z], 0),
            np.tanh(x[5::-1, 39::-2] + t[i] + e[j]),
            _softmax(x[:, 20:40] + x[:, 0:20] + x[:, 1::2] + u[:, zz]),
            x[:, 1::2] @ v]


def _softmax(z):
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


@pytest.mark.parametrize("cpu", ["x86-64-v2", "x86-64-v3", "x86-64-v4"])
def test_slices_and_gathers_are_read_in_place_by_the_kernels_they_feed(tmp_path, cpu):
    # each slice and gather read by element-wise ops (a map, a linear's epilogue, a
    # softmax's prologue) is a leaf of their kernel, loaded where it maps the kernel's
    # coordinates (reversed and strided slices, a scalar and a vector of indices, negative
    # ones counting from the end; in the softmax's prologue, at v3 and v4 a vector along the
    # row: one load from a step-1 slice, lane by lane from a strided one and a gather along
    # the row); a slice a linear multiplies stays a kernel of its own
    source = tmp_path / "views.mlir"
    source.write_text(VIEWS)
    text = hexir_compiler.compile(source, "mlir-tir", target=f"cpu:{cpu}")
    assert re.findall(r"callee = @(\w+)", text) == [
        "linear_add_add_add_relu_0", "add_add_tanh_1", "add_add_add_softmax_2", "slice_3",
        "linear_4"]
    rng = np.random.default_rng(7)
    x, y, w, t, e, v, u = (rng.standard_normal(s).astype(np.float32) for s in (
        (6, 40), (6, 24), (24, 16), (5, 6, 20), (10, 20), (20, 16), (6, 30)))
    i, j = np.array(-2, np.int64), np.array([3, -1, 0, 9, 4, -10], np.int32)
    z, zz = rng.integers(-30, 30, 16), rng.integers(-30, 30, 20)
    inputs = [x, y, w, t, i, e, j, v, u, z, zz]
    want = _views_reference(*(a.astype(np.float64) if a.dtype == np.float32 else a
                              for a in inputs))
    if int(cpu[-1]) <= host_level():  # (this cpu runs the level's code)
        got = hexir_runtime.load(hexir_compiler.compile(source, target=f"cpu:{cpu}")).main(
            *inputs)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    on_cuda = tir_graph.run(str(source), inputs, Options("mlir-tir", {"*": "cuda"}))
    for a, b in zip(on_cuda, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
