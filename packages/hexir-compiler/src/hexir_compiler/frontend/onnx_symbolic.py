"""Shape arithmetic on symbolic sizes, folded at import.

An exported model computes its reshapes' targets from its inputs' shapes: `Shape`, then
`Gather`, `Unsqueeze`, `Concat`, `Mul`, `Div`, ... down to a `Reshape`. With static inputs
the ONNX reference evaluator folds that chain to integers. With a symbolic batch or sequence
the values are `dims.Dim`s held in numpy object arrays, which the reference evaluator does
not take, so the ops such chains use are folded here with numpy's own indexing and the
`dims` algebra: the `Reshape` at the end then reads `[batch, seq, 4, 16]`. An op that would
turn a symbolic size into data (a `Cast` to float, a `Range` over `seq`) is refused naming
the symbol; `ConstantOfShape` and `Expand` of a symbolic shape make runtime tensors of that
shape.
"""

from __future__ import annotations

import functools
import operator

import numpy as np

from hexir_compiler import symbolic
from hexir_format import dims
from hexir_format.dims import Dim, DimError, Expr


def _decided(a, b) -> bool:
    """a == b for two sizes, when the symbols cannot change the answer (a size is never
    negative, so `batch == -1`, an exporter's test for an inferred axis, is false)."""
    if a == b:
        return True
    for x, y in ((a, b), (b, a)):
        try:
            if dims.less(x, y):
                return False
        except DimError:
            pass
    raise DimError(f"whether {dims.render(a)} equals {dims.render(b)} depends on the sizes")


def _elementwise(fn, *arrays: np.ndarray) -> np.ndarray:
    return np.frompyfunc(fn, len(arrays), 1)(*arrays)


def _attrs(onnx, node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _ints(t, what: str) -> list[int]:
    from hexir_compiler.frontend.onnx_ops import const_ints

    return const_ints(t, what)


def fold(e, node, inputs: list, where: str) -> list:
    """The node's outputs, some of whose constant inputs hold symbolic sizes."""
    from hexir_compiler.frontend.onnx import ModelError, Tensor
    from hexir_compiler.frontend.onnx_ops import NodeError, constant

    if node.op_type not in FOLDS:
        named = sorted(symbolic.symbols(v for t in inputs if t is not None and t.const is not None
                                        for v in t.const.reshape(-1) if isinstance(v, Expr)))
        raise ModelError(f"{where}: computes with the symbolic size "
                         f"{', '.join(repr(n) for n in named)}, which {node.op_type} does not "
                         "take at import (bind it with -input-shape)")
    attrs = _attrs(e.onnx, node)
    try:
        outputs = FOLDS[node.op_type](e, inputs, attrs)
    except (DimError, NodeError) as err:
        raise ModelError(f"{where}: {err}") from None
    return [t if isinstance(t, Tensor) else constant(np.asarray(t, object)) for t in outputs]


def _gather(e, xs, a):
    data, indices = xs[0].const, np.asarray(xs[1].const).astype(np.int64)
    axis = a.get("axis", 0) % data.ndim
    return [np.take(data, np.where(indices < 0, indices + data.shape[axis], indices), axis)]


def _unsqueeze(e, xs, a):
    data = xs[0].const
    axes = sorted(x % (data.ndim + len(_ints(xs[1], "axes")))
                  for x in _ints(xs[1], "axes"))
    for axis in axes:
        data = np.expand_dims(data, axis)
    return [data]


def _squeeze(e, xs, a):
    data = xs[0].const
    axes = _ints(xs[1], "axes") if len(xs) > 1 and xs[1] is not None else None
    return [np.squeeze(data, tuple(x % data.ndim for x in axes) if axes else None)]


def _concat(e, xs, a):
    parts = [np.asarray(x.const, object) for x in xs if x is not None]
    return [np.concatenate(parts, a["axis"] % parts[0].ndim)]


def _slice(e, xs, a):
    from hexir_compiler.frontend.onnx_ops import HANDLERS

    if any(x is not None and x.const.dtype == object for x in xs[1:3]):
        # symbolic bounds: a runtime slice of symbolic length (of a constant, too)
        return HANDLERS["Slice"](e, xs, a, 13)
    data = xs[0].const
    starts, ends = _ints(xs[1], "starts"), _ints(xs[2], "ends")
    axes = _ints(xs[3], "axes") if len(xs) > 3 and xs[3] is not None else \
        list(range(len(starts)))
    steps = _ints(xs[4], "steps") if len(xs) > 4 and xs[4] is not None else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        index[axis % data.ndim] = slice(start, end, step)
    return [data[tuple(index)]]


def _binary(fn):
    return lambda e, xs, a: [_elementwise(fn, np.asarray(xs[0].const, object),
                                          np.asarray(xs[1].const, object))]


def _variadic(fn):
    return lambda e, xs, a: [functools.reduce(
        lambda p, q: _elementwise(fn, p, q), (np.asarray(x.const, object) for x in xs))]


def _cast(e, xs, a):
    from hexir_compiler.frontend.onnx import DTYPES

    to = DTYPES.get(a["to"])
    if to is None or to.kind != "i":
        raise DimError("casts symbolic sizes to a non-integer type")
    return [xs[0].const]


def _equal(e, xs, a):
    return [_elementwise(_decided, np.asarray(xs[0].const, object),
                         np.asarray(xs[1].const, object)).astype(bool)]


def _where(e, xs, a):
    condition = np.asarray(xs[0].const)
    if condition.dtype == object:
        raise DimError("selects by a symbolic condition")
    return [np.where(condition, np.asarray(xs[1].const, object),
                     np.asarray(xs[2].const, object))]


def _product(values) -> Dim:
    total: Dim = 1
    for v in values:
        total = dims.mul(total, v)
    return total


def _reduce_prod(e, xs, a):
    data = np.asarray(xs[0].const, object)
    axes = _ints(xs[1], "axes") if len(xs) > 1 and xs[1] is not None else \
        list(a.get("axes", range(data.ndim)))
    keep = bool(a.get("keepdims", 1))
    out = data
    for axis in sorted((x % data.ndim for x in axes), reverse=True):
        out = np.apply_along_axis(_product, axis, out)
        if keep:
            out = np.expand_dims(out, axis)
    return [np.asarray(out, object)]


def _constant_of_shape(e, xs, a):
    from hexir_compiler.frontend.onnx_ops import constant

    fill = a.get("value")
    value = e.onnx.numpy_helper.to_array(fill).reshape(()) if fill is not None else \
        np.array(0.0, np.float32)
    return [e.expand(constant(value), [v for v in xs[0].const.reshape(-1)])]


def _expand(e, xs, a):
    from hexir_compiler.frontend.onnx_ops import HANDLERS

    return HANDLERS["Expand"](e, xs, a, 13)


def _reshape(e, xs, a):
    data = np.asarray(xs[0].const, object)
    shape = _ints(xs[1], "shape")
    shape = [data.shape[d] if n == 0 and not a.get("allowzero", 0) else n
             for d, n in enumerate(shape)]
    return [data.reshape(shape)]


def _range(e, xs, a):
    """start, start + delta, ... below limit: a runtime tensor where its length is symbolic,
    made as an exclusive running sum of ones (0, 1, ..., n - 1) scaled and shifted."""
    from hexir_compiler.frontend.onnx_ops import constant

    start, limit, delta = (np.asarray(x.const).reshape(()).item() for x in xs)
    if not isinstance(start, int) or not isinstance(delta, int) or delta == 0:
        raise DimError("a Range over symbolic sizes needs a constant start and a nonzero "
                       "constant delta")
    span = dims.ceildiv(dims.add(limit, -start), delta)
    try:
        n = span if not dims.less(span, 0) else 0
    except DimError:
        n = dims.maximum(span, 0)
    dtype = xs[0].dtype
    ones = e.expand(constant(np.array(1, dtype)), [n])
    values = e.op("cumsum", [ones], (n,), dtype, axis=0, exclusive=True, reverse=False)
    if delta != 1:
        values = e.binary("mul", values, constant(np.array(delta, dtype)))
    if start:
        values = e.binary("add", values, constant(np.array(start, dtype)))
    return [values]


def _identity(e, xs, a):
    return [xs[0].const]


FOLDS = {
    "Identity": _identity, "Gather": _gather, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze,
    "Concat": _concat, "Slice": _slice, "Cast": _cast, "Equal": _equal, "Where": _where,
    "Add": _binary(dims.add), "Sub": _binary(lambda p, q: dims.add(p, dims.mul(q, -1))),
    "Mul": _binary(dims.mul), "Div": _binary(dims.floordiv), "Mod": _binary(dims.mod),
    "Max": _variadic(dims.maximum), "Min": _variadic(dims.minimum),
    "Neg": lambda e, xs, a: [_elementwise(operator.neg, np.asarray(xs[0].const, object))],
    "ReduceProd": _reduce_prod, "ConstantOfShape": _constant_of_shape, "Expand": _expand,
    "Reshape": _reshape, "Range": _range,
}
