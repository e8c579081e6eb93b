"""Reductions that keep the innermost axis, by columns (`transforms/tir/reduction.py`'s
`_reduce_columns`), compiled for the cpu at every x86-64 level this CPU runs and compared
with numpy.

The shapes reach each part of the form: a kept width that blocks of COLUMN_BLOCK divide
(several blocks), one that only a smaller multiple of COLUMN_MIN divides, one that none does
(the whole width one block: a vector loop and its remainder), kept axes before the reduced
ones (parallel beside the blocks), reduced axes with a kept one between them, several kept
inner axes (the column's coordinates from its flat index), and the squares of the input
fused before the sum (ConvNeXt V2's global response norm).
"""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest

import hexir_runtime
from hexir_compiler.pipeline import compile as compile_source
from hexir_compiler.transforms.tir.reduction import COLUMN_MIN
from hexir_runtime.hal.hostcode import host_level

DTYPES = {"f32": np.float32, "f64": np.float64}
LEVELS = [level for level in (2, 3, 4) if level <= host_level()]
NUMPY = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max,
         "reduce_min": np.min, "reduce_prod": np.prod}

CASES = {  # name: (op, shape, axes, keepdims, squared first)
    "nhwc-plane-squares": ("reduce_sum", (1, 12, 10, 384), (1, 2), True, True),
    "nhwc-plane-mean": ("reduce_mean", (2, 7, 9, 96), (1, 2), False, False),
    "leading-axis-max": ("reduce_max", (50, 200), (0,), False, False),
    "width-no-block-divides": ("reduce_min", (3, 11, 130), (1,), True, False),
    "nchw-channel-mean": ("reduce_mean", (2, 24, 5, 13), (1,), True, False),
    "split-axes": ("reduce_sum", (3, 4, 5, 6, 64), (0, 2), False, True),
    "prod": ("reduce_prod", (4, 3, 40), (1,), False, False),
}


def _t(shape, element: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{element}>"


def _program(case, element: str) -> str:
    op, shape, axes, keepdims, squared = case
    out = tuple(1 if d in axes else n for d, n in enumerate(shape) if keepdims or d not in axes)
    x = _t(shape, element)
    lines = [f"func.func @main(%x: {x}) -> {_t(out, element)} {{"]
    data = "%x"
    if squared:
        lines.append(f'  %s = "hexir.mul"(%x, %x) : ({x}, {x}) -> {x}')
        data = "%s"
    lines += [f'  %y = "hexir.{op}"({data}) {{axes = array<i64: {", ".join(map(str, axes))}>, '
              f"keepdims = {str(keepdims).lower()}}} : ({x}) -> {_t(out, element)}",
              f"  return %y : {_t(out, element)}", "}"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("level", LEVELS, ids=lambda v: f"v{v}")
@pytest.mark.parametrize("element", ["f32", "f64"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_column_reduction_matches_numpy(tmp_path, name, element, level) -> None:
    op, shape, axes, keepdims, squared = case = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = rng.uniform(0.5, 1.5, shape) if op == "reduce_prod" else rng.standard_normal(shape)
    x = x.astype(DTYPES[element])
    source = tmp_path / "reduce.mlir"
    source.write_text(_program(case, element))
    with hexir_runtime.load(compile_source(source, "hxb", target=f"cpu:x86-64-v{level}")) as m:
        got = m.main(x)
    data = x.astype(np.float64) ** 2 if squared else x.astype(np.float64)
    want = NUMPY[op](data, axis=axes, keepdims=keepdims)
    assert got.shape == want.shape
    scale = max(np.abs(want).max(initial=0), 1.0)
    assert np.abs(got - want).max(initial=0) / scale <= (1e-5 if element == "f32" else 1e-12)


def _reduction_kernel(tir: str) -> str:
    """The text of the one `reduce_*` (or fused `*_reduce_*`) kernel in `tir`."""
    kernels = re.split(r'(?=  "hextir.prim_func"\(\))', tir)
    (kernel,) = [k for k in kernels if re.search(r'sym_name = "\w*reduce_\w+"', k)]
    return kernel


@pytest.mark.parametrize("name", list(CASES))
def test_a_reduction_that_keeps_the_innermost_axis_runs_by_columns(tmp_path, name) -> None:
    """The column form carries no accumulator in a loop (each output adds rows in memory),
    where the one-output form carries one through every reduced loop."""
    source = tmp_path / "reduce.mlir"
    source.write_text(_program(CASES[name], "f32"))
    kernel = _reduction_kernel(compile_source(source, "mlir-tir", target="cpu:x86-64-v3"))
    carried = re.findall(r'"hextir.for"\(%\w+, %\w+, %\w+, %', kernel)
    assert '{kind = "parallel"}' in kernel and not carried, kernel


@pytest.mark.parametrize(("shape", "axes"), [((40, 6, 200), (1, 2)), ((30, 7), (0,)),
                                             ((9, 16, 3), (1,))])
def test_a_reduction_over_the_innermost_axis_or_a_narrow_one_carries_its_sums(
        tmp_path, shape, axes) -> None:
    """The one-output form stays where the innermost axis is reduced, or the kept width is
    under COLUMN_MIN elements (a row of fewer than one vector)."""
    assert shape[-1] < COLUMN_MIN or len(shape) - 1 in axes
    source = tmp_path / "reduce.mlir"
    source.write_text(_program(("reduce_sum", shape, axes, False, False), "f32"))
    kernel = _reduction_kernel(compile_source(source, "mlir-tir", target="cpu:x86-64-v3"))
    assert re.search(r'"hextir.for"\(%\w+, %\w+, %\w+, %', kernel), kernel
