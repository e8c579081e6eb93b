"""Constant weights in the layout a cpu kernel reads them in, made as the `.hxb` is written.

hexir-lower-to-tir points a cpu matmul or conv whose schedule reads its weight in panels at a
`hexir.constant` that keeps the weight's value as given and names its layout in `packing`
(`["columns", width]`, `["conv", group, width]`); its result type is the packed shape. The
packed elements exist only while the serializer writes them (`pack`, one weight at a time):
made at lowering, as attributes, they lived as long as the MLIR context, beside the originals
-- ViT-L/16's 1.2 GB of weights held twice until the module was written (a 2.86 GB peak).

Layouts:
- columns: a [K, N] matrix as [ceil(N / width), K, width] column panels, zeros past N
  (`contraction.PANEL`: a tile's rhs rows are whole vectors, each panel one run);
- conv: a weight [M, Cg, *kernel] as [group x panels, *kernel, Cg, width], panel
  g * panels + q holding channels g * Mg + q * width + t, zeros past a group's Mg output
  channels (`convolution`'s channel-panel schedule).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from hexir_compiler.mlir import ir

ATTRIBUTE = "packing"


class PackingError(ValueError):
    """A `packing` attribute that names no layout, or one the value's shape does not fit."""


def _columns(shape: tuple[int, ...], width: int) -> tuple[int, ...]:
    if len(shape) != 2:
        raise PackingError(f"columns packs a [K, N] matrix, not a value of shape {list(shape)}")
    depth, cols = shape
    return (-(-cols // width), depth, width)


def _conv(shape: tuple[int, ...], group: int, width: int) -> tuple[int, ...]:
    if len(shape) < 3 or shape[0] % group:
        raise PackingError(f"conv packs a weight [M, Cg, *kernel] whose M the group {group} "
                           f"divides, not a value of shape {list(shape)}")
    m, cg, *kernel = shape
    return (group * -(-(m // group) // width), *kernel, cg, width)


def _column_panels(array: np.ndarray, width: int) -> np.ndarray:
    depth, cols = array.shape
    panels = -(-cols // width)
    padded = np.zeros((depth, panels * width), array.dtype)
    padded[:, :cols] = array
    return np.ascontiguousarray(padded.reshape(depth, panels, width).transpose(1, 0, 2))


def _conv_panels(array: np.ndarray, group: int, width: int) -> np.ndarray:
    m, cg, *kernel = array.shape
    mg = m // group
    panels = -(-mg // width)
    padded = np.zeros((group, panels * width, cg, *kernel), array.dtype)
    padded[:, :mg] = array.reshape(group, mg, cg, *kernel)
    tiles = padded.reshape(group * panels, width, cg, *kernel)
    return np.ascontiguousarray(tiles.transpose(0, *range(3, 3 + len(kernel)), 2, 1))


#: layout -> (its parameters' names, the packed shape of an unpacked one, the packing)
LAYOUTS: dict[str, tuple[tuple[str, ...], Callable[..., tuple[int, ...]],
                         Callable[..., np.ndarray]]] = {
    "columns": (("width",), _columns, _column_panels),
    "conv": (("group", "width"), _conv, _conv_panels),
}


def attribute(layout: str, params: tuple[int, ...]) -> ir.ArrayAttr:
    """The `packing` attribute naming `layout` with `params`."""
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.StringAttr.get(layout),
                             *(ir.IntegerAttr.get(i64, p) for p in params)])


def of(op: ir.Operation) -> tuple[str, tuple[int, ...]] | None:
    """A constant's layout and parameters, None where it holds its value as it is; raises
    PackingError where `packing` is malformed."""
    if ATTRIBUTE not in op.attributes:
        return None
    attr = op.attributes[ATTRIBUTE]
    entries = list(ir.ArrayAttr(attr)) if isinstance(attr, ir.ArrayAttr) else []
    if not entries or not isinstance(entries[0], ir.StringAttr) or \
            ir.StringAttr(entries[0]).value not in LAYOUTS:
        raise PackingError(f"packing must be [layout, params...] with layout one of "
                           f"{', '.join(LAYOUTS)}, found {attr}")
    layout = ir.StringAttr(entries[0]).value
    names = LAYOUTS[layout][0]
    params = entries[1:]
    if len(params) != len(names) or not all(isinstance(p, ir.IntegerAttr) and
                                            ir.IntegerAttr(p).value > 0 for p in params):
        raise PackingError(f"packing {layout} takes {len(names)} positive integers "
                           f"({', '.join(names)}), found {attr}")
    return layout, tuple(ir.IntegerAttr(p).value for p in params)


def packed_shape(layout: str, params: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of a value of `shape` packed in `layout`."""
    return LAYOUTS[layout][1](tuple(shape), *params)


def pack(layout: str, params: tuple[int, ...], array: np.ndarray) -> np.ndarray:
    """`array` packed in `layout` (a new C-contiguous array)."""
    return LAYOUTS[layout][2](array, *params)


def elements(value: ir.Attribute, dtype: np.dtype) -> np.ndarray:
    """A dense attribute's elements as `dtype`, a splat's expanded (a view where it can be)."""
    shape = tuple(ir.ShapedType(value.type).shape)
    array = np.asarray(value).astype(dtype, copy=False)
    return np.broadcast_to(array.reshape(()) if array.size == 1 and math.prod(shape) != 1
                           else array.reshape(shape), shape)


def value(op: ir.Operation, dtype: np.dtype) -> np.ndarray:
    """A `hexir.constant`'s elements as `dtype` in its result's layout: packed where it says
    (a new array), else a view of its attribute where it can be."""
    data = elements(op.attributes["value"], dtype)
    layout = of(op)
    return data if layout is None else pack(*layout, data)
