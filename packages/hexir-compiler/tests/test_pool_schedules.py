"""The cpu pools (`window.plan_pool`: a row of outputs in blocks of a vector's lanes, each
window row read as one contiguous run and the offsets along the row shuffled out of it; the
blocks inside the row in a loop, the edge blocks unrolled with the padding's lanes -inf or 0)
at every x86-64 level this CPU runs: max pools against torch, average pools (with and without
count_include_pad) against ONNX's definition written in numpy.

The shapes reach each kind of block: windows in the padding at both ends, interior blocks
after an edge block and from the row's start, a short last block (a 14-wide row: at 16
lanes one block of 14), rows shorter than a vector, unpadded rows (SqueezeNet's 3x3/2, no
condition anywhere), strides 1 to 3, a dilation, ceil mode's last window past the end, rows
in the padding along the other axes, 1-D and 3-D, and NaNs, which a max pool propagates as
torch's does (and a sum does).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper

import hexir_compiler
import hexir_runtime
from hexir_runtime.hal.hostcode import host_level

LEVELS = [level for level in (2, 3, 4) if level <= host_level()]
NAMES = {2: "x86-64-v2", 3: "x86-64-v3", 4: "x86-64-v4"}
TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}

CASES = {  # name: (x shape, kernel, strides, pads (begins, ends), dilations, ceil_mode)
    "resnet-stem": ((1, 3, 40, 75), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0),
    "stride1-pad1": ((2, 2, 9, 37), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 0),
    "short-rows": ((1, 4, 6, 5), (2, 2), (1, 1), (1, 0, 0, 1), (1, 1), 0),
    "stride3-uneven": ((1, 2, 11, 70), (3, 4), (3, 3), (0, 2, 1, 1), (1, 1), 0),
    "dilated": ((1, 3, 12, 50), (3, 3), (1, 2), (2, 2, 2, 2), (2, 2), 0),
    "ceil-past-end": ((1, 2, 14, 52), (3, 3), (2, 2), (1, 1, 0, 0), (1, 1), 1),
    "googlenet-14": ((1, 3, 14, 14), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    "tails-8-4-2": ((1, 2, 5, 33), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 0),
    "1d": ((2, 3, 90), (5,), (2,), (2, 2), (1,), 0),
    "unpadded-3x3s2": ((1, 3, 27, 111), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), 1),
    "unpadded-wide": ((1, 2, 4, 70), (2, 2), (1, 1), (0, 0, 0, 0), (1, 1), 0),
    "3d": ((1, 2, 5, 6, 40), (3, 3, 3), (1, 1, 2), (1, 1, 1, 1, 1, 1), (1, 1, 1), 0),
}


def _model(x: np.ndarray, kernel, strides, pads, dilations, ceil: int):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=list(kernel),
                            strides=list(strides), pads=list(pads),
                            dilations=list(dilations), ceil_mode=ceil)
    graph = helper.make_graph([node], "pool",
                              [helper.make_tensor_value_info("x", TYPES[x.dtype.type], x.shape)],
                              [helper.make_tensor_value_info("y", TYPES[x.dtype.type], None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _torch(x: np.ndarray, kernel, strides, pads, dilations, ceil: int) -> np.ndarray:
    rank = len(kernel)
    begins, ends = pads[:rank], pads[rank:]
    # torch pads symmetrically: pad explicitly with -inf, then pool without padding
    widths = [w for d in reversed(range(rank)) for w in (begins[d], ends[d])]
    padded = torch.nn.functional.pad(torch.from_numpy(x), widths, value=float("-inf"))
    pool = getattr(torch.nn.functional, f"max_pool{rank}d")
    return pool(padded, kernel, strides, 0, dilations, ceil_mode=bool(ceil)).numpy()


@pytest.mark.parametrize("level", LEVELS, ids=[NAMES[v] for v in LEVELS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", CASES)
def test_a_max_pool_matches_torch(name, dtype, level) -> None:
    shape, *geometry = CASES[name]
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(dtype)
    x.reshape(-1)[rng.choice(x.size, 3, replace=False)] = np.nan
    module = hexir_compiler.compile(_model(x, *geometry), target=f"cpu:{NAMES[level]}")
    got = hexir_runtime.load(module).main(x)
    np.testing.assert_array_equal(got, _torch(x, *geometry))


def _average_model(x: np.ndarray, kernel, strides, pads, dilations, ceil: int, include: int):
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=list(kernel),
                            strides=list(strides), pads=list(pads), dilations=list(dilations),
                            ceil_mode=ceil, count_include_pad=include)
    graph = helper.make_graph([node], "pool",
                              [helper.make_tensor_value_info("x", TYPES[x.dtype.type], x.shape)],
                              [helper.make_tensor_value_info("y", TYPES[x.dtype.type], None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _average(x: np.ndarray, kernel, strides, pads, dilations, ceil: int, include: int,
             out_shape) -> np.ndarray:
    """ONNX's AveragePool in numpy, written from its definition: the sum of each window's
    positions in the input over how many of its positions count (those in the input, or
    with count_include_pad those in the padded extent; never those past it, where ceil mode's
    last window may reach)."""
    rank = len(kernel)
    begins, ends = pads[:rank], pads[rank:]
    reach = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in
             zip(out_shape[2:], strides, kernel, dilations, strict=True)]
    extra = [max(0, r - (size + b + e)) for r, size, b, e in
             zip(reach, x.shape[2:], begins, ends, strict=True)]
    widths = [(0, 0), (0, 0)] + [(b, e + more) for b, e, more in
                                 zip(begins, ends, extra, strict=True)]
    padded = np.pad(x.astype(np.float64), widths)
    counts = np.pad(np.ones(x.shape[2:]), widths[2:])
    if include:  # the padded extent counts, not what lies past it
        counts = np.pad(np.ones([size + b + e for size, b, e in
                                 zip(x.shape[2:], begins, ends, strict=True)]),
                        [(0, more) for more in extra])
    total = np.zeros(out_shape)
    number = np.zeros(out_shape[2:])
    for offsets in np.ndindex(*kernel):
        at = tuple(slice(k * d, k * d + (o - 1) * s + 1, s) for k, d, o, s in
                   zip(offsets, dilations, out_shape[2:], strides, strict=True))
        total += padded[(slice(None), slice(None), *at)]
        number += counts[at]
    return total / number


AVERAGE_CASES = {**{name: CASES[name] for name in (
    "resnet-stem", "stride1-pad1", "short-rows", "stride3-uneven", "dilated", "ceil-past-end",
    "googlenet-14", "1d", "3d", "unpadded-3x3s2")},
    "densenet-2x2s2": ((1, 4, 28, 56), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), 0),
    "inception-3x3s1": ((1, 3, 17, 35), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 0),
}


@pytest.mark.parametrize("level", LEVELS, ids=[NAMES[v] for v in LEVELS])
@pytest.mark.parametrize("include", [0, 1], ids=["exclude-pad", "include-pad"])
@pytest.mark.parametrize("name", AVERAGE_CASES)
def test_an_average_pool_matches_its_definition(name, include, level) -> None:
    shape, *geometry = AVERAGE_CASES[name]
    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[rng.choice(x.size, 2, replace=False)] = np.nan
    module = hexir_compiler.compile(_average_model(x, *geometry, include),
                                    target=f"cpu:{NAMES[level]}")
    got = hexir_runtime.load(module).main(x)
    want = _average(x, *geometry, include, got.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
