"""Builders for linalg on tensors: the vocabulary hexir-lower-to-linalg writes ops in.

Kept apart from the pass so the pass reads as a table (graph op -> loops) and these read as
the loops: an indexing map per operand, iterator kinds, a scalar body. Every builder inserts
at the current insertion point and location.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Sequence

from hexir_compiler.mlir import arith, ir, linalg, math, tensor

Body = Callable[..., ir.Value]


# --- indexing maps -------------------------------------------------------------------------

def affine(n_dims: int, results: Sequence[int | None]) -> ir.AffineMap:
    """A map over `n_dims` loops; an int picks loop d<i>, None is the constant 0 (broadcast)."""
    exprs = [
        ir.AffineConstantExpr.get(0) if r is None else ir.AffineDimExpr.get(r) for r in results
    ]
    return ir.AffineMap.get(n_dims, 0, exprs)


def identity(rank: int) -> ir.AffineMap:
    return affine(rank, list(range(rank)))


def broadcast_dims(shape: Sequence[int], out: Sequence[int]) -> list[int | None]:
    """numpy broadcasting of `shape` into `out`, right-aligned: a 1 against a non-1 reads 0."""
    lead = len(out) - len(shape)
    return [None if d == 1 and out[lead + i] != 1 else lead + i for i, d in enumerate(shape)]


def broadcast_map(v: ir.Value, out: ir.RankedTensorType) -> ir.AffineMap:
    return affine(out.rank, broadcast_dims(ir.RankedTensorType(v.type).shape, out.shape))


def dropping(rank: int, axes: Sequence[int]) -> ir.AffineMap:
    """The map from `rank` loops to a tensor without the reduced `axes`."""
    return affine(rank, [d for d in range(rank) if d not in axes])


# --- ops -----------------------------------------------------------------------------------

def const(t: ir.Type, value: float) -> ir.Value:
    return arith.ConstantOp(t, ir.FloatAttr.get(t, value)).result


def filled(out: ir.RankedTensorType, value: float) -> ir.Value:
    """tensor.empty + linalg.fill: never a constant as a destination (bufferization copies it)."""
    empty = tensor.empty(out.shape, out.element_type)
    return linalg.fill(const(out.element_type, value), outs=[empty])


def zeros(out: ir.RankedTensorType) -> ir.Value:
    return filled(out, 0.0)


def generic(
    ins: Sequence[ir.Value],
    out: ir.RankedTensorType,
    maps: Sequence[ir.AffineMap],
    iterators: Sequence[str],
    body: Body,
    init: ir.Value | None = None,
) -> ir.Value:
    """A one-result linalg.generic; `body(*in_scalars, out_scalar)` returns the yielded value."""
    dest = init if init is not None else tensor.empty(out.shape, out.element_type)
    op = linalg.GenericOp_(
        list(ins),
        [dest],
        ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
        ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{it}>") for it in iterators]),
    )
    block = op.regions[0].blocks[0]
    with ir.InsertionPoint(block):
        linalg.YieldOp([body(*block.arguments)])
    return op.results[0]


def elementwise(ins: Sequence[ir.Value], out: ir.RankedTensorType, body: Body) -> ir.Value:
    maps = [broadcast_map(v, out) for v in ins] + [identity(out.rank)]
    return generic(ins, out, maps, ["parallel"] * out.rank, body)


# --- scalar bodies (arguments: the input elements, then the output element) ---------------

def relu(x: ir.Value, _out: ir.Value) -> ir.Value:
    return arith.maximumf(x, const(x.type, 0.0))


def sigmoid(x: ir.Value, _out: ir.Value) -> ir.Value:
    one = const(x.type, 1.0)
    return arith.divf(one, arith.addf(one, math.exp(arith.negf(x))))


def tanh(x: ir.Value, _out: ir.Value) -> ir.Value:
    return math.tanh(x)


def exp(x: ir.Value, _out: ir.Value) -> ir.Value:
    return math.exp(x)


def sqrt(x: ir.Value, _out: ir.Value) -> ir.Value:
    return math.sqrt(x)


def neg(x: ir.Value, _out: ir.Value) -> ir.Value:
    return arith.negf(x)


def gelu(approximate: str) -> Body:
    """x * 0.5 * (1 + erf(x / sqrt 2)), or the tanh form when `approximate` is "tanh"."""

    def exact(x: ir.Value, _out: ir.Value) -> ir.Value:
        inner = math.erf(arith.mulf(x, const(x.type, 1.0 / pymath.sqrt(2.0))))
        return _half_x_one_plus(x, inner)

    def tanh_form(x: ir.Value, _out: ir.Value) -> ir.Value:
        cube = arith.mulf(arith.mulf(x, x), x)
        poly = arith.addf(x, arith.mulf(const(x.type, 0.044715), cube))
        inner = math.tanh(arith.mulf(const(x.type, pymath.sqrt(2.0 / pymath.pi)), poly))
        return _half_x_one_plus(x, inner)

    return tanh_form if approximate == "tanh" else exact


def _half_x_one_plus(x: ir.Value, inner: ir.Value) -> ir.Value:
    one_plus = arith.addf(const(x.type, 1.0), inner)
    return arith.mulf(arith.mulf(x, const(x.type, 0.5)), one_plus)


def multiply_add(a: ir.Value, b: ir.Value, acc: ir.Value) -> ir.Value:
    return arith.addf(acc, arith.mulf(a, b))


BINARY_BODIES: dict[str, Body] = {
    "add": lambda a, b, _o: arith.addf(a, b),
    "sub": lambda a, b, _o: arith.subf(a, b),
    "mul": lambda a, b, _o: arith.mulf(a, b),
    "div": lambda a, b, _o: arith.divf(a, b),
}


# --- composite ops -------------------------------------------------------------------------

def reduce_into(x: ir.Value, axes: Sequence[int], combine: Body, start: float) -> ir.Value:
    """Reduce `x` over `axes` into a tensor without those axes, starting from `start`."""
    t = ir.RankedTensorType(x.type)
    kept = [d for i, d in enumerate(t.shape) if i not in axes]
    out = ir.RankedTensorType.get(kept, t.element_type)
    iters = ["reduction" if i in axes else "parallel" for i in range(t.rank)]
    maps = [identity(t.rank), dropping(t.rank, axes)]
    return generic([x], out, maps, iters, combine, init=filled(out, start))


def reduce(x: ir.Value, axes: Sequence[int], kind: str, out: ir.RankedTensorType) -> ir.Value:
    """reduce_sum / reduce_mean / reduce_max; keepdims is a reshape of the reduced tensor."""
    t = ir.RankedTensorType(x.type)
    if kind == "max":
        r = reduce_into(x, axes, lambda v, acc: arith.maximumf(v, acc), -pymath.inf)
    else:
        r = reduce_into(x, axes, lambda v, acc: arith.addf(v, acc), 0.0)
    if kind == "mean":
        count = pymath.prod(t.shape[a] for a in axes)
        rt = ir.RankedTensorType(r.type)
        r = elementwise([r], rt, lambda v, _o: arith.mulf(v, const(v.type, 1.0 / count)))
    if r.type == out:
        return r
    return tensor.ExpandShapeOp(out, r, _keepdims_groups(t.rank, axes), [], out.shape).result


def _keepdims_groups(rank: int, axes: Sequence[int]) -> ir.ArrayAttr:
    """Reassociation from the reduced shape to the keepdims shape: each 1 joins a neighbour."""
    groups: list[list[int]] = []
    pending: list[int] = []
    for i in range(rank):
        if i not in axes:
            groups.append(pending + [i])
            pending = []
        elif groups:
            groups[-1].append(i)
        else:
            pending.append(i)
    return _reassociation(groups)


def _reassociation(groups: Sequence[Sequence[int]]) -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get(
        [ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in g]) for g in groups]
    )


def softmax(x: ir.Value, axis: int) -> ir.Value:
    """exp(x - max) / sum(exp(x - max)) along `axis`: four generics, max first for stability."""
    t = ir.RankedTensorType(x.type)
    peak = reduce_into(x, [axis], lambda v, acc: arith.maximumf(v, acc), -pymath.inf)
    maps = [identity(t.rank), dropping(t.rank, [axis]), identity(t.rank)]
    par = ["parallel"] * t.rank
    shifted = generic([x, peak], t, maps, par, lambda v, m, _o: math.exp(arith.subf(v, m)))
    total = reduce_into(shifted, [axis], lambda v, acc: arith.addf(v, acc), 0.0)
    return generic([shifted, total], t, maps, par, lambda e, s, _o: arith.divf(e, s))


def layer_norm(x: ir.Value, gamma: ir.Value, beta: ir.Value, epsilon: float) -> ir.Value:
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis (biased variance)."""
    t = ir.RankedTensorType(x.type)
    last = t.rank - 1
    inv_d = 1.0 / t.shape[last]
    total = reduce_into(x, [last], lambda v, acc: arith.addf(v, acc), 0.0)
    row = dropping(t.rank, [last])

    def centred(v: ir.Value, s: ir.Value) -> ir.Value:
        return arith.subf(v, arith.mulf(s, const(v.type, inv_d)))

    def square_add(v: ir.Value, s: ir.Value, acc: ir.Value) -> ir.Value:
        c = centred(v, s)
        return arith.addf(acc, arith.mulf(c, c))

    rt = ir.RankedTensorType(total.type)
    iters = ["parallel"] * last + ["reduction"]
    var_sum = generic([x, total], rt, [identity(t.rank), row, row], iters, square_add,
                      init=filled(rt, 0.0))

    def normalize(v: ir.Value, s: ir.Value, q: ir.Value, g: ir.Value, b: ir.Value, _o) -> ir.Value:
        var = arith.addf(arith.mulf(q, const(v.type, inv_d)), const(v.type, epsilon))
        scaled = arith.divf(centred(v, s), math.sqrt(var))
        return arith.addf(arith.mulf(scaled, g), b)

    vec = affine(t.rank, [last])
    maps = [identity(t.rank), row, row, vec, vec, identity(t.rank)]
    return generic([x, total, var_sum, gamma, beta], t, maps, ["parallel"] * t.rank, normalize)


def transpose(x: ir.Value, perm: Sequence[int]) -> ir.Value:
    """out[i_0, ...] = x[...] with x's axis perm[j] read from output loop j."""
    t = ir.RankedTensorType(x.type)
    out = ir.RankedTensorType.get([t.shape[p] for p in perm], t.element_type)
    inverse = [0] * len(perm)
    for j, p in enumerate(perm):
        inverse[p] = j
    maps = [affine(t.rank, inverse), identity(t.rank)]
    return generic([x], out, maps, ["parallel"] * t.rank, lambda v, _o: v)


def reshape(x: ir.Value, out: ir.RankedTensorType) -> ir.Value:
    """Collapse to one dimension, then expand to the result: both are views after bufferization."""
    t = ir.RankedTensorType(x.type)
    if t == out:
        return x
    if t.rank == 0:
        return tensor.ExpandShapeOp(out, x, _reassociation([]), [], out.shape).result
    if out.rank == 0:
        return tensor.CollapseShapeOp(out, x, _reassociation([])).result
    flat_t = ir.RankedTensorType.get([pymath.prod(t.shape)], t.element_type)
    flat = x if t.rank == 1 else tensor.CollapseShapeOp(
        flat_t, x, _reassociation([list(range(t.rank))])).result
    if out.rank == 1:
        return flat
    return tensor.ExpandShapeOp(
        out, flat, _reassociation([list(range(out.rank))]), [], out.shape).result
