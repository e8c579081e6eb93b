"""cpu transposes that move the innermost axis, by tiles through registers
(`transforms/tir/schedule.py`'s `register_transpose`), compiled at every x86-64 level this
CPU runs and compared with numpy bit for bit.

The permutations reach each part of the form: NCHW to NHWC and back (the axis that moves
has others around it in the grid), a plain matrix, extents the tile divides along neither
innermost axis (a partial last row of tiles, a partial last column of each row), a
permutation of every axis, and 4- and 8-byte elements, integers among them.
"""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest

import hexir_runtime
from hexir_compiler.pipeline import compile as compile_source
from hexir_runtime.hal.hostcode import host_level

DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}
LEVELS = [level for level in (2, 3, 4) if level <= host_level()]

CASES = {  # name: (shape, permutation)
    "nchw-to-nhwc": ((2, 24, 7, 9), (0, 2, 3, 1)),
    "nhwc-to-nchw": ((1, 6, 5, 40), (0, 3, 1, 2)),
    "matrix": ((48, 32), (1, 0)),
    "partial-tiles": ((37, 21), (1, 0)),
    "every-axis": ((2, 9, 5, 17), (3, 1, 0, 2)),
    "heads": ((3, 19, 4, 16), (0, 2, 3, 1)),
}


def _t(shape, element: str) -> str:
    return f"tensor<{''.join(f'{n}x' for n in shape)}{element}>"


def _program(shape, perm, element: str) -> str:
    out = tuple(shape[p] for p in perm)
    return (f"func.func @main(%x: {_t(shape, element)}) -> {_t(out, element)} {{\n"
            f'  %y = "hexir.transpose"(%x) {{permutation = array<i64: '
            f'{", ".join(map(str, perm))}>}} : ({_t(shape, element)}) -> {_t(out, element)}\n'
            f"  return %y : {_t(out, element)}\n}}\n")


@pytest.mark.parametrize("level", LEVELS, ids=lambda v: f"v{v}")
@pytest.mark.parametrize("element", list(DTYPES))
@pytest.mark.parametrize("name", list(CASES))
def test_a_cpu_transpose_matches_numpy(tmp_path, name, element, level) -> None:
    shape, perm = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = (rng.standard_normal(shape) * 1000).astype(DTYPES[element])
    source = tmp_path / "transpose.mlir"
    source.write_text(_program(shape, perm, element))
    with hexir_runtime.load(compile_source(source, "hxb", target=f"cpu:x86-64-v{level}")) as m:
        got = m.main(x)
    assert np.array_equal(got, x.transpose(perm))


@pytest.mark.parametrize(("shape", "perm", "tiles"), [
    ((2, 24, 7, 9), (0, 2, 3, 1), True), ((37, 21), (1, 0), True),
    ((4, 6, 32), (1, 0, 2), False), ((40, 5), (1, 0), False)])
def test_a_transpose_moving_the_innermost_axis_goes_through_registers(
        tmp_path, shape, perm, tiles) -> None:
    """Tiles where the innermost axis moves and both innermost extents hold a tile (8 f32 at
    x86-64-v3); element by element where it stays (rows copied whole) or an extent is
    narrower than a tile."""
    source = tmp_path / "transpose.mlir"
    source.write_text(_program(shape, perm, "f32"))
    tir = compile_source(source, "mlir-tir", target="cpu:x86-64-v3")
    (kernel,) = [k for k in re.split(r'(?=  "hextir.prim_func"\(\))', tir)
                 if 'sym_name = "transpose_' in k]
    assert ("vector.shuffle" in kernel and "vector<8xf32>" in kernel) == tiles, kernel
