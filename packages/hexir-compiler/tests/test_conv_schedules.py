"""The cpu conv schedules (`transforms/tir/convolution.py`) against torch, at every x86-64
level this CPU runs.

Each case is a conv (and, fused, + bias -> relu -> + residual) compiled with its weight a
constant (packed at compile time: the channel-panel schedule's [panels, *K, Cg, width]) and
with its weight an input (read where it lies), run through the runtime and compared with
`torch.nn.functional.conv{1,2,3}d` in f64. The shapes reach the schedules' every branch: a
pixel count the block does not divide (a short block), output channels the panel width does
not divide (a group's short last panel), groups, depthwise (the pixel-vector schedule),
channel multipliers, 1x1 (the plain GEMM: no window, no padding), a deep channel sum, padding
on one side only, strides, dilations, windows wider than the input, 1-D and 3-D.
"""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest
import torch

import hexir_format as hf
import hexir_runtime
from hexir_compiler.pipeline import compile as compile_source
from hexir_runtime.hal import hostcode
from hexir_runtime.hal.hostcode import host_level

DTYPES = {"f32": np.float32, "f64": np.float64}
LEVELS = [level for level in (2, 3, 4) if level <= host_level()]

CASES = {  # name: (x shape, weight shape, group, strides, pads (begins, ends), dilations)
    "3x3-pad1": ((1, 5, 11, 9), (20, 5, 3, 3), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
    "3x3-stride2": ((2, 3, 13, 12), (17, 3, 3, 3), 1, (2, 2), (1, 1, 1, 1), (1, 1)),
    "7x7-stride2-pad3": ((1, 3, 23, 23), (16, 3, 7, 7), 1, (2, 2), (3, 3, 3, 3), (1, 1)),
    "1x1": ((1, 24, 7, 7), (40, 24, 1, 1), 1, (1, 1), (0, 0, 0, 0), (1, 1)),
    "deep-3x3": ((1, 96, 6, 5), (20, 96, 3, 3), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
    # a 64-channel v4 tile and a 36-channel last one (three vectors, the third partly past)
    "wide-3x3": ((1, 6, 7, 6), (100, 6, 3, 3), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
    # each group's packed panels after the last one's: 72 = 64 + 8 channels a group
    "groups-tail": ((1, 8, 5, 6), (144, 4, 3, 3), 2, (1, 1), (1, 1, 1, 1), (1, 1)),
    # pixel vectors along rows of 37 at v2 (the plane, 111 pixels, fills too few of its
    # vectors' lanes at v3 and v4: channel panels there), a 16 + 4 channel split at v4
    "1x1-rows": ((1, 12, 3, 37), (20, 12, 1, 1), 1, (1, 1), (0, 0, 0, 0), (1, 1)),
    # pixel vectors at every level, the plane's 136 pixels 8 x 16 + 8 at v4
    "1x1-plane": ((2, 12, 8, 17), (20, 12, 1, 1), 1, (1, 1), (0, 0, 0, 0), (1, 1)),
    "1x1-groups": ((2, 8, 2, 20), (12, 4, 1, 1), 2, (1, 1), (0, 0, 0, 0), (1, 1)),
    "1x1-stride2": ((1, 8, 9, 9), (16, 8, 1, 1), 1, (2, 2), (0, 0, 0, 0), (1, 1)),
    "dilation2": ((1, 4, 12, 10), (9, 4, 3, 3), 1, (1, 1), (2, 2, 2, 2), (2, 2)),
    # atrous: dilations wider than most of the input, so a border block's loops run only the
    # offsets that reach the input (`Geometry.reached`): rows whose windows read nothing
    # (the first), blocks across rows, a stride, pads uneven on both axes
    "atrous": ((1, 6, 9, 7), (12, 6, 3, 3), 1, (1, 2), (11, 5, 4, 6), (5, 6)),
    # a causal dilated conv1d (WaveNet-style: all the padding before)
    "conv1d-causal-dilated": ((1, 6, 30), (8, 6, 3), 1, (1,), (8, 0), (4,)),
    "uneven-pads": ((1, 3, 8, 9), (5, 3, 3, 2), 1, (1, 2), (0, 2, 1, 0), (1, 1)),
    "groups": ((1, 8, 7, 7), (12, 4, 3, 3), 2, (1, 1), (1, 1, 1, 1), (1, 1)),
    "groups-wide": ((1, 64, 5, 5), (64, 16, 3, 3), 4, (1, 1), (1, 1, 1, 1), (1, 1)),
    "depthwise": ((1, 6, 19, 37), (6, 1, 3, 3), 6, (1, 1), (1, 1, 1, 1), (1, 1)),
    "depthwise-stride2": ((2, 5, 14, 15), (5, 1, 3, 3), 5, (2, 2), (1, 1, 1, 1), (1, 1)),
    "depthwise-5x5": ((1, 3, 9, 9), (3, 1, 5, 5), 3, (1, 1), (2, 2, 2, 2), (1, 1)),
    # whole-plane pixel vectors (small planes, stride 1, rows as wide as the input's): rows
    # padded unevenly (an output taller than the input), a dilated window, and two input
    # channels per single-output group
    "depthwise-uneven": ((1, 4, 9, 7), (4, 1, 3, 3), 4, (1, 1), (2, 1, 1, 1), (1, 1)),
    "depthwise-dilated": ((1, 3, 10, 8), (3, 1, 3, 3), 3, (1, 1), (2, 2, 2, 2), (2, 2)),
    # pixel vectors with a window (few multiply-adds per output, rows of a vector or more):
    # a first conv's stride 2, padded (a 16 + 4 channel split at v4) and not, and stride 1
    "stem-3x3-stride2": ((1, 3, 37, 35), (20, 3, 3, 3), 1, (2, 2), (1, 1, 1, 1), (1, 1)),
    "stem-3x3-stride2-unpadded": ((1, 3, 39, 41), (16, 3, 3, 3), 1, (2, 2), (0, 0, 0, 0),
                                  (1, 1)),
    "few-inputs-3x3": ((1, 2, 9, 21), (8, 2, 3, 3), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
    # a window too wide to unroll (a loop over its offsets; the border lanes gathered)
    "depthwise-7x7-stride2": ((1, 2, 14, 13), (2, 1, 7, 7), 2, (2, 2), (3, 3, 3, 3), (1, 1)),
    "groups-one-output": ((1, 6, 7, 7), (3, 2, 3, 3), 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    "multiplier2": ((1, 3, 6, 6), (6, 1, 3, 3), 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    "window-past-input": ((1, 2, 3, 3), (4, 2, 5, 5), 1, (1, 1), (2, 2, 2, 2), (1, 1)),
    "conv1d": ((2, 4, 50), (10, 4, 5), 1, (2,), (2, 1), (1,)),
    "conv1d-depthwise": ((1, 8, 70), (8, 1, 3), 8, (1,), (1, 1), (2,)),
    "conv3d": ((1, 3, 5, 6, 7), (18, 3, 3, 3, 3), 1, (1, 2, 1), (1, 1, 1, 1, 0, 1), (1, 1, 1)),
}


def _t(shape, element: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{element}>"


def _out_shape(x, w, strides, pads, dilations) -> tuple[int, ...]:
    rank = len(x) - 2
    return (x[0], w[0], *((x[2 + d] + pads[d] + pads[rank + d] - dilations[d] * (w[2 + d] - 1)
                           - 1) // strides[d] + 1 for d in range(rank)))


def _program(case, element: str, w: np.ndarray, constant: bool, fused: bool) -> str:
    x_shape, w_shape, group, strides, pads, dilations = case
    out = _out_shape(x_shape, w_shape, strides, pads, dilations)
    bias_shape = (w_shape[0], *([1] * (len(x_shape) - 2)))
    args = [f"%x: {_t(x_shape, element)}"]
    lines = []
    if constant:
        lines.append(f'  %w = "hexir.constant"() {{value = dense<"0x{w.tobytes().hex()}"> : '
                     f"{_t(w_shape, element)}}} : () -> {_t(w_shape, element)}")
    else:
        args.append(f"%w: {_t(w_shape, element)}")
    if fused:
        args += [f"%b: {_t(bias_shape, element)}", f"%r: {_t(out, element)}"]
    ints = lambda v: f"array<i64: {', '.join(map(str, v))}>"
    lines.append(f'  %c = "hexir.conv"(%x, %w) {{strides = {ints(strides)}, pads = {ints(pads)}, '
                 f"dilations = {ints(dilations)}, group = {group} : i64}} : "
                 f"({_t(x_shape, element)}, {_t(w_shape, element)}) -> {_t(out, element)}")
    result = "%c"
    if fused:
        o = _t(out, element)
        lines += [f'  %s = "hexir.add"(%c, %b) : ({o}, {_t(bias_shape, element)}) -> {o}',
                  f'  %a = "hexir.relu"(%s) : ({o}) -> {o}',
                  f'  %y = "hexir.add"(%a, %r) : ({o}, {o}) -> {o}']
        result = "%y"
    head = f"func.func @main({', '.join(args)}) -> {_t(out, element)} {{"
    return "\n".join([head, *lines, f"  return {result} : {_t(out, element)}", "}"]) + "\n"


def _reference(x, w, group, strides, pads, dilations) -> np.ndarray:
    rank = x.ndim - 2
    padding = []
    for d in reversed(range(rank)):  # torch's F.pad: last axis first, (begin, end) pairs
        padding += [pads[d], pads[rank + d]]
    xt = torch.nn.functional.pad(torch.from_numpy(x.astype(np.float64)), padding)
    conv = (torch.nn.functional.conv1d, torch.nn.functional.conv2d,
            torch.nn.functional.conv3d)[rank - 1]
    return conv(xt, torch.from_numpy(w.astype(np.float64)), stride=strides,
                dilation=dilations, groups=group).numpy()


@pytest.mark.parametrize("level", LEVELS, ids=lambda v: f"v{v}")
@pytest.mark.parametrize("element", ["f32", "f64"])
@pytest.mark.parametrize(("weight", "fused"), [("constant", True), ("input", False)],
                         ids=["packed-bias-relu-residual", "input-weight-plain"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_cpu_conv_matches_torch(tmp_path, name, weight, fused, element, level) -> None:
    case = CASES[name]
    x_shape, w_shape, group, strides, pads, dilations = case
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    dtype = DTYPES[element]
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    source = tmp_path / "conv.mlir"
    source.write_text(_program(case, element, w, weight == "constant", fused))
    target = f"cpu:x86-64-v{level}"
    want = _reference(x, w, group, strides, pads, dilations)
    args = [x] if weight == "constant" else [x, w]
    if fused:
        bias = rng.standard_normal((w_shape[0], *([1] * (len(x_shape) - 2)))).astype(dtype)
        residual = rng.standard_normal(want.shape).astype(dtype)
        args += [bias, residual]
        want = np.maximum(want + bias, 0) + residual
    with hexir_runtime.load(compile_source(source, "hxb", target=target)) as module:
        got = module.main(*args)
    assert got.shape == want.shape
    scale = max(np.abs(want).max(initial=0), 1.0)
    assert np.abs(got - want).max(initial=0) / scale <= (1e-5 if element == "f32" else 1e-12)


@pytest.mark.parametrize("level", [2, 3, 4], ids=lambda v: f"v{v}")
def test_a_constant_conv_weight_is_packed_into_channel_panels(tmp_path, level) -> None:
    """At every level a 20-channel weight [20, 5, 3, 3] is read as the same two 16-channel
    panels [2, 3, 3, 5, 16] (zeros past channel 20: one packed copy serves a module's
    programs for all levels): its constant names that layout and keeps the value (packed as
    the `.hxb` is written, `packing`), and the unpacked constant goes; a depthwise weight
    stays as it is (its schedule broadcasts one weight at a time)."""
    case = CASES["3x3-pad1"]
    w = np.ones(case[1], np.float32)
    source = tmp_path / "conv.mlir"
    source.write_text(_program(case, "f32", w, True, False))
    tir = compile_source(source, "mlir-tir", target=f"cpu:x86-64-v{level}")
    assert ('packing = ["conv", 1, 16], value = dense<1.000000e+00> : tensor<20x5x3x3xf32>} : '
            "() -> tensor<2x3x3x5x16xf32>") in tir and "-> tensor<20x5x3x3xf32>" not in tir
    case = CASES["depthwise"]
    source.write_text(_program(case, "f32", np.ones(case[1], np.float32), True, False))
    tir = compile_source(source, "mlir-tir", target=f"cpu:x86-64-v{level}")
    assert "tensor<6x1x3x3xf32>" in tir


def test_v4_conv_kernels_compile(tmp_path) -> None:
    """Every schedule has an x86-64-v4 form (run above where the CPU has AVX-512)."""
    for name in ("3x3-pad1", "depthwise", "conv3d"):
        case = CASES[name]
        source = tmp_path / "conv.mlir"
        source.write_text(_program(case, "f32", np.ones(case[1], np.float32), True, True))
        assert compile_source(source, "hxb", target="cpu:x86-64-v4")


ACTIVATIONS = {"relu": lambda v: np.maximum(v, 0), "tanh": np.tanh, "sin": np.sin}


@pytest.mark.parametrize(("activation", "vectors"), [("relu", True), ("tanh", True),
                                                     ("sin", False)])
def test_a_depthwise_epilogue_runs_on_vectors_where_its_formulas_take_them(
        tmp_path, activation, vectors) -> None:
    """bias + relu (or tanh: `target.host_math` makes a vector's tanh arithmetic) + residual
    on a depthwise conv is evaluated and stored a vector of pixels at a time; an epilogue with
    an op that only takes scalars (sin: a libm call) stays lane by lane, and all match torch."""
    case = CASES["depthwise"]
    x_shape, w_shape, group, strides, pads, dilations = case
    rng = np.random.default_rng(3)
    w = rng.standard_normal(w_shape).astype(np.float32)
    source = tmp_path / "conv.mlir"
    source.write_text(_program(case, "f32", w, True, True).replace(
        '"hexir.relu"', f'"hexir.{activation}"'))
    target = f"cpu:x86-64-v{LEVELS[-1]}"
    tir = compile_source(source, "mlir-tir", target=target)
    assert ("vector.store" in tir) == vectors
    x = rng.standard_normal(x_shape).astype(np.float32)
    out = _out_shape(x_shape, w_shape, strides, pads, dilations)
    bias = rng.standard_normal((w_shape[0], 1, 1)).astype(np.float32)
    residual = rng.standard_normal(out).astype(np.float32)
    with hexir_runtime.load(compile_source(source, "hxb", target=target)) as module:
        got = module.main(x, bias, residual)
    conv = _reference(x, w, group, strides, pads, dilations) + bias
    want = ACTIVATIONS[activation](conv) + residual
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("level", LEVELS, ids=lambda v: f"v{v}")
@pytest.mark.parametrize("name", ["3x3-pad1", "wide-3x3", "1x1-rows", "1x1-plane",
                                  "depthwise"])
def test_a_silu_epilogue_is_one_kernel_with_the_conv(tmp_path, name, level) -> None:
    """conv + bias -> x * sigmoid(x) (SiLU: the sum has two uses, both in the epilogue) is
    one kernel in every schedule -- channel panels (its epilogue on vectors of channels,
    a last tile's partial vector lane by lane), pixel panels, pixel vectors -- and matches
    torch."""
    case = CASES[name]
    x_shape, w_shape, group, strides, pads, dilations = case
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    w = rng.standard_normal(w_shape).astype(np.float32)
    source = tmp_path / "conv.mlir"
    out = _t(_out_shape(x_shape, w_shape, strides, pads, dilations), "f32")
    source.write_text(_program(case, "f32", w, True, True).replace(
        f'  %a = "hexir.relu"(%s) : ({out}) -> {out}\n',
        f'  %g = "hexir.sigmoid"(%s) : ({out}) -> {out}\n'
        f'  %a = "hexir.mul"(%s, %g) : ({out}, {out}) -> {out}\n'))
    target = f"cpu:x86-64-v{level}"
    tir = compile_source(source, "mlir-tir", target=target)
    assert re.findall(r"callee = @(\w+)", tir) == ["conv_add_sigmoid_mul_add_0"]
    x = rng.standard_normal(x_shape).astype(np.float32)
    bias = rng.standard_normal((w_shape[0], 1, 1)).astype(np.float32)
    conv = _reference(x, w, group, strides, pads, dilations) + bias
    residual = rng.standard_normal(conv.shape).astype(np.float32)
    with hexir_runtime.load(compile_source(source, "hxb", target=target)) as module:
        got = module.main(x, bias, residual)
    want = conv / (1 + np.exp(-conv)) + residual
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_pixel_vector_forms_grids(tmp_path) -> None:
    """A stride-1 depthwise conv whose output plane is small takes the whole-plane form (its
    grid: batch x channels); a strided one keeps a row per iteration (batch x channels x
    rows); a first conv on three channels takes pixel vectors with a window (channel tiles
    of 16 and 4 x rows)."""
    for name, grid in (("depthwise-5x5", 3), ("depthwise-stride2", 2 * 5 * 7),
                       ("stem-3x3-stride2", 2 * 19)):
        case = CASES[name]
        source = tmp_path / "conv.mlir"
        source.write_text(_program(case, "f32", np.ones(case[1], np.float32), True, False))
        image = hf.parse(compile_source(source, "hxb", target="cpu:x86-64-v4"))
        (conv,) = [e for e in image.executables if e.name.startswith("conv")]
        assert conv.grid[0] == grid, name


#: name: (x shape, weight shape, whether the cpu grid runs its pixel chunks outside its channel
#: tiles), each at x86-64-v3: 3 channel tiles x 4 pixel chunks, or 4 tiles x 4 chunks.
PARTITIONS = {
    "projection": ((1, 48, 8, 8), (40, 48, 1, 1), True),  # channel panels, input > weight
    "expansion-pixel-vectors": ((1, 16, 8, 16), (24, 16, 1, 1), True),
    "weight-heavy-3x3": ((1, 16, 8, 8), (64, 16, 3, 3), False),
}


@pytest.mark.skipif(host_level() < 3, reason="x86-64-v3 code; this CPU is below v3")
@pytest.mark.parametrize("name", list(PARTITIONS))
def test_a_conv_grids_first_half_is_part_of_the_plane_or_some_channels(tmp_path, name) -> None:
    """The pool gives each thread a contiguous range of a kernel's cpu grid. A conv whose
    input is at least as large as its weight runs its pixel chunks outside its channel
    tiles, so the first half of its grid writes every channel of the plane's first part
    (a thread reads that part of the input, not all of it); a conv with the larger weight
    runs its tiles outside, so the first half writes the first channels over the whole
    plane (a thread reads half the weight). Observed by running the kernel's host image on
    the first half of its grid alone, into an output filled with NaN."""
    x_shape, w_shape, pixels_outside = PARTITIONS[name]
    case = (x_shape, w_shape, 1, (1, 1), (1, 1, 1, 1) if w_shape[2] == 3 else (0,) * 4,
            (1, 1))
    source = tmp_path / "conv.mlir"
    source.write_text(_program(case, "f32", np.ones(w_shape, np.float32), False, False))
    image = hf.parse(compile_source(source, "hxb", target="cpu:x86-64-v3"))
    (conv,) = image.executables
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    out = np.full(_out_shape(x_shape, w_shape, (1, 1), case[4], (1, 1)), np.nan, np.float32)
    with hostcode.load(conv.image, conv.name, 3, what=name) as kernel:
        hostcode.call_kernel(kernel.entry, 3)(x.ctypes.data, w.ctypes.data, out.ctypes.data,
                                              0, conv.grid[0] // 2)
    written = ~np.isnan(out[0].reshape(out.shape[1], -1))  # channels x plane
    channels, plane = written.any(axis=1), written.any(axis=0)
    assert written.sum() == channels.sum() * plane.sum(), "not a block of channels x pixels"
    if pixels_outside:
        assert channels.all() and 0 < plane.sum() < plane.size, plane
        assert plane[: plane.sum()].all(), "not the plane's first pixels"
    else:
        assert plane.all() and 0 < channels.sum() < channels.size, channels
        assert channels[: channels.sum()].all(), "not the first channels"
    want = _reference(x, w, 1, (1, 1), case[4], (1, 1))[0].reshape(written.shape)
    np.testing.assert_allclose(out[0].reshape(written.shape)[written], want[written],
                               rtol=1e-5, atol=1e-5)


def test_a_1x1_conv_with_wide_rows_runs_as_pixel_vectors(tmp_path) -> None:
    """A 1x1 stride-1 conv whose plane fills its vectors stores whole vectors along it (its
    correctness: the 1x1-rows, 1x1-plane and 1x1-groups cases above), and so does a
    stride-2 one with few input channels (pixel vectors with a window): a register's lanes,
    4 at x86-64-v2, 16 at v4. A conv with many multiply-adds per output keeps the channel
    panels, and so does a 1x1 conv on a 7x7 plane at v4 (49 pixels: four vectors, 77% of
    their lanes), whose stores are a block's pixels of one channel (2 at v2, 8 at v4:
    `schedule.CONV_TILES`)."""
    source = tmp_path / "conv.mlir"
    for name, level, vectors in (("1x1-rows", 2, True), ("1x1-stride2", 2, True),
                                 ("deep-3x3", 2, False), ("1x1-plane", 4, True),
                                 ("1x1", 4, False)):
        case = CASES[name]
        source.write_text(_program(case, "f32", np.ones(case[1], np.float32), True, True))
        tir = compile_source(source, "mlir-tir", target=f"cpu:x86-64-v{level}")
        stores = set(re.findall(r"vector\.store .*, vector<(\d+)xf32>", tir))
        lanes, rows = (4, 2) if level == 2 else (16, 8)
        assert str(lanes) in stores if vectors else stores == {str(rows)}, (name, stores)


#: The input of a strided conv whose last windows end at the input's last element (each row
#: 2 x 8 + 1 wide, unpadded): depthwise 3x3 and 5x5 at stride 2, and a first conv on three
#: channels (pixel vectors with a window).
GUARDED = {
    "depthwise-3x3-stride2": ((1, 3, 9, 17), (3, 1, 3, 3), 3, (2, 2), (0, 0, 0, 0), (1, 1)),
    "depthwise-5x5-stride2": ((1, 2, 11, 19), (2, 1, 5, 5), 2, (2, 2), (0, 0, 0, 0), (1, 1)),
    "stem-3x3-stride2": ((1, 3, 9, 33), (8, 3, 3, 3), 1, (2, 2), (0, 0, 0, 0), (1, 1)),
}

_GUARDED_RUN = """
import ctypes, mmap, sys
import numpy as np
import hexir_runtime
x = np.load(sys.argv[2])
page = mmap.PAGESIZE
pages = -(-x.nbytes // page) + 1
mapped = mmap.mmap(-1, pages * page)
start = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
assert libc.mprotect(start + (pages - 1) * page, page, 0) == 0  # PROT_NONE
guarded = np.frombuffer(mapped, x.dtype, x.size, (pages - 1) * page - x.nbytes).reshape(x.shape)
guarded[...] = x
with hexir_runtime.load(sys.argv[1]) as module:
    np.save(sys.argv[3], module.main(guarded))
    program = module._resident.programs["main"]
    (arena,) = program._arenas
    assert not program.input_view(arena, 0).any(), "the input was copied into the arena"
"""


@pytest.mark.parametrize("level", LEVELS, ids=lambda v: f"v{v}")
@pytest.mark.parametrize("name", list(GUARDED))
def test_a_strided_conv_reads_nothing_past_its_input(tmp_path, name, level) -> None:
    """A one-conv module's kernel reads the caller's array where it lies
    (`arena.direct_inputs`); here that array ends where a page no one may read begins, so a
    vector load past its last element -- a strided run read as whole registers, its last
    one reaching beyond the run (`KernelBuilder.load_strided`) -- kills the process. The
    answer is torch's."""
    import subprocess
    import sys

    case = GUARDED[name]
    x_shape, w_shape, group, strides, pads, dilations = case
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    (tmp_path / "conv.mlir").write_text(_program(case, "f32", w, True, False))
    module = tmp_path / "conv.hxb"
    module.write_bytes(compile_source(tmp_path / "conv.mlir", "hxb",
                                      target=f"cpu:x86-64-v{level}"))
    np.save(tmp_path / "x.npy", x)
    done = subprocess.run([sys.executable, "-c", _GUARDED_RUN, str(module),
                           str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                          capture_output=True, text=True)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    want = _reference(x, w, group, strides, pads, dilations)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-5, atol=1e-5)
