"""ONNX ops that Hexir imports as compositions of the hexir ops it has (no kernel of their own).

Split (slices), Tile (an expand between two reshapes), Trilu (a where on a constant mask),
OneHot (a comparison with a constant range), DepthToSpace and SpaceToDepth (reshape,
transpose, reshape), Einsum (diagonals as gathers, then per operand pair a matmul or a
broadcast multiply and reduce_sum), InstanceNormalization and GroupNormalization (a
layer_norm over the flattened group), ReduceL1/L2/LogSum/LogSumExp/SumSquare/Prod
(element-wise ops around a reduction), Pad (concat with a fill, or a gather of a constant
index table), Resize (per axis: a gather per tap of its constant index table, blended with
constant weights), and Range (which only folds).

The operands that decide shapes or index tables (split, repeats, k, depth, pads, axes, roi,
scales, sizes) must be known at compile time; the tables are computed here with numpy and
become constants. Each handler registers itself in `onnx_ops.HANDLERS` on import.
"""

from __future__ import annotations

import math

import numpy as np

from hexir_compiler.frontend.onnx import DTYPES, Tensor
from hexir_compiler.frontend.onnx_ops import (
    NodeError,
    _axis,
    _floats,
    _string,
    broadcast_shapes,
    const_ints,
    constant,
    handles,
    static,
)

# ---- helpers -------------------------------------------------------------------------------

def _slice(e, x: Tensor, axis: int, start: int, stop: int) -> Tensor:
    """x[start:stop] along `axis` (0 <= start <= stop <= extent)."""
    if (start, stop) == (0, x.shape[axis]):
        return x
    if x.const is not None:
        kept = np.take(np.asarray(x.const), range(start, stop), axis=axis)
        return constant(np.ascontiguousarray(kept))
    starts = [start if d == axis else 0 for d in range(len(x.shape))]
    shape = [stop - start if d == axis else n for d, n in enumerate(x.shape)]
    return e.op("slice", [x], shape, x.dtype, starts=starts, steps=[1] * len(x.shape))


def _permute(e, x: Tensor, perm) -> Tensor:
    return x if list(perm) == sorted(perm) else e.transpose(x, perm)


def _take(e, x: Tensor, indices: np.ndarray, axis: int) -> Tensor:
    """np.take(x, indices, axis) for a 1-D table of in-range indices."""
    indices = np.asarray(indices, np.int64)
    if np.array_equal(indices, np.arange(static(x.shape, "input")[axis])):
        return x
    if x.const is not None:
        return constant(np.ascontiguousarray(np.take(np.asarray(x.const), indices, axis=axis)))
    shape = [len(indices) if d == axis else n for d, n in enumerate(x.shape)]
    return e.op("gather", [x, constant(indices)], shape, x.dtype, axis=axis)


#: The most elements a fill of a known value is a constant of; a larger one (Trilu's zeros
#: beside a whole tensor) is an expand kernel, so the file holds no megabytes of one value.
FILL_CONSTANT_MAX = 4096


def _fill(e, value: Tensor, shape) -> Tensor:
    """A tensor of `shape` holding the scalar `value` everywhere."""
    if value.const is not None and math.prod(shape) <= FILL_CONSTANT_MAX:
        return constant(np.full(shape, value.const, value.dtype))
    return e.op("expand", [value], shape, value.dtype)


def _on_axis(values: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """A 1-D table shaped to broadcast along `axis` of a rank-`rank` tensor."""
    return values.reshape([-1 if d == axis else 1 for d in range(rank)])


def _const_floats(t: Tensor | None, what: str) -> list[float] | None:
    if t is None or (t.const is not None and np.asarray(t.const).size == 0):
        return None
    if t.const is None:
        raise NodeError(f"its {what} operand must be known at compile time (an initializer, a "
                        "Constant, or an input fixed with -fix-input)")
    return [float(v) for v in np.asarray(t.const).reshape(-1)]


def _scalar_of(e, t: Tensor, what: str) -> Tensor:
    if math.prod(t.shape) != 1:
        raise NodeError(f"its {what} operand has shape {list(t.shape)}; expected one value")
    return e.reshape(t, ())


# ---- data movement -------------------------------------------------------------------------

@handles("Split", 13, 18)
def _split(e, xs, a, v):
    x = xs[0]
    axis = _axis(a.get("axis", 0), len(x.shape))
    extent = x.shape[axis]
    sizes = const_ints(xs[1] if len(xs) > 1 else None, "split")
    if sizes is None:
        count = a.get("num_outputs", e.outputs)
        if count < 1:
            raise NodeError(f"splits into {count} parts")
        chunk = -(-extent // count)  # the last part is smaller when the extent does not divide
        sizes = [chunk] * (count - 1) + [extent - chunk * (count - 1)]
    if any(s < 0 for s in sizes) or sum(sizes) != extent:
        raise NodeError(f"cannot split axis {axis} of extent {extent} into parts {sizes}")
    if len(sizes) != e.outputs:
        raise NodeError(f"splits into {len(sizes)} parts but the node has {e.outputs} outputs")
    starts = np.cumsum([0, *sizes])
    return [_slice(e, x, axis, int(s), int(s) + n) for s, n in zip(starts, sizes, strict=False)]


@handles("Tile", 13)
def _tile(e, xs, a, v):
    x, repeats = xs[0], const_ints(xs[1], "repeats")
    if len(repeats) != len(x.shape) or any(r < 0 for r in repeats):
        raise NodeError(f"repeats {repeats} do not give one count >= 0 per axis of "
                        f"{list(x.shape)}")
    tiled = [d for d, r in enumerate(repeats) if r != 1]
    for pair in range(0, len(tiled), 2):  # two axes at a time: at most rank 5 on the way
        x = _tile_axes(e, x, [repeats[d] if d in tiled[pair:pair + 2] else 1
                              for d in range(len(x.shape))])
    return [x]


def _tile_axes(e, x: Tensor, repeats: list[int]) -> Tensor:
    """[d0, d1, d2] with repeats [r0, 1, r2] -> [1, d0 * d1, 1, d2] -> broadcast
    [r0, d0 * d1, r2, d2] -> [r0 * d0, d1, r2 * d2]."""
    single: list[int] = []
    spread: list[int] = []
    shape = static(x.shape, "input")
    for r, n in zip(repeats, shape, strict=False):
        if r != 1:
            single += [1, n]
            spread += [r, n]
        elif single:
            single[-1] *= n
            spread[-1] *= n
        else:
            single, spread = [n], [n]
    tiled = e.expand(e.reshape(x, single), spread)
    return e.reshape(tiled, [r * n for r, n in zip(repeats, shape, strict=False)])


@handles("Trilu", 14)
def _trilu(e, xs, a, v):
    x = xs[0]
    k = const_ints(xs[1] if len(xs) > 1 else None, "k") or [0]
    if len(x.shape) < 2:
        raise NodeError(f"input has rank {len(x.shape)}; expected at least 2")
    ones = np.ones(x.shape[-2:], bool)
    keep = np.triu(ones, k[0]) if a.get("upper", 1) else np.tril(ones, k[0])
    return [e.op("where", [constant(keep), x, _fill(e, e.scalar(0, x.dtype), x.shape)],
                 x.shape, x.dtype)]


@handles("OneHot", 11, 28)  # 28: more element types, the same op
def _one_hot(e, xs, a, v):
    indices, depth, values = xs
    count = const_ints(_scalar_of(e, depth, "depth"), "depth")[0]
    if count < 1:
        raise NodeError(f"depth {count} is not positive")
    if math.prod(values.shape) != 2:
        raise NodeError(f"values has shape {list(values.shape)}; expected [off, on]")
    if values.dtype == np.bool_:
        raise NodeError("bool on/off values are not supported")
    rank = len(indices.shape) + 1
    axis = _axis(a.get("axis", -1), rank)
    # as the reference: negative indices count from the end, others out of range match nothing
    wrapped = e.op("where", [e.elementwise("less", indices, e.scalar(0, indices.dtype),
                                           dtype=np.bool_),
                             e.binary("add", indices, e.scalar(count, indices.dtype)), indices],
                   indices.shape, indices.dtype)
    column = e.reshape(wrapped, (*indices.shape[:axis], 1, *indices.shape[axis:]))
    targets = constant(_on_axis(np.arange(count).astype(indices.dtype), axis, rank))
    hit = e.cast(e.binary("equal", column, targets, dtype=np.bool_), values.dtype)
    pair = e.reshape(values, (2,))
    off, on = (e.reshape(_slice(e, pair, 0, i, i + 1), ()) for i in (0, 1))
    return [e.binary("add", e.binary("mul", hit, e.binary("sub", on, off)), off)]


def _blocks(x: Tensor, size: int) -> tuple[int, int, int, int]:
    if len(x.shape) != 4:
        raise NodeError(f"input has rank {len(x.shape)}; expected [N, C, H, W]")
    if size < 1:
        raise NodeError(f"blocksize {size} is not positive")
    n, c, h, w = static(x.shape, "input")
    return n, c, h, w


@handles("DepthToSpace", 13, 28)  # 28: more element types
def _depth_to_space(e, xs, a, v):
    x, b = xs[0], a["blocksize"]
    n, c, h, w = _blocks(x, b)
    if c % (b * b):
        raise NodeError(f"{c} channels do not divide into blocks of {b} x {b}")
    if _string(a, "mode", "DCR") == "CRD":
        split, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    elif _string(a, "mode", "DCR") == "DCR":
        split, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    else:
        raise NodeError(f"mode '{_string(a, 'mode', 'DCR')}' is not DCR or CRD")
    moved = _permute(e, e.reshape(x, split), perm)
    return [e.reshape(moved, (n, c // (b * b), h * b, w * b))]


@handles("SpaceToDepth", 13, 28)
def _space_to_depth(e, xs, a, v):
    """DepthToSpace undone; 28 adds its `mode`: DCR (the only order before) puts a block's
    position before the channel in the output channel, CRD after it."""
    x, b = xs[0], a["blocksize"]
    n, c, h, w = _blocks(x, b)
    if h % b or w % b:
        raise NodeError(f"spatial size {h} x {w} does not divide into blocks of {b} x {b}")
    mode = _string(a, "mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise NodeError(f"mode '{mode}' is not DCR or CRD")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    moved = _permute(e, e.reshape(x, (n, c, h // b, b, w // b, b)), perm)
    return [e.reshape(moved, (n, c * b * b, h // b, w // b))]


@handles("Range", 11, 27)  # 27: stash_type, for 16-bit floats only
def _range(e, xs, a, v):
    raise NodeError("its start, limit and delta must be known at compile time (the length "
                    "of its output depends on their values)")


# ---- Einsum --------------------------------------------------------------------------------

@handles("Einsum", 12, 28)  # 28: more element types
def _einsum(e, xs, a, v):
    terms, output = _einsum_terms(_string(a, "equation", ""), xs)
    sizes: dict[str, int] = {}
    for term, x in zip(terms, xs, strict=False):
        for letter, n in zip(term, x.shape, strict=False):
            if sizes.setdefault(letter, n) != n and 1 not in (n, sizes[letter]):
                raise NodeError(f"index '{letter}' has extents {sizes[letter]} and {n}")
            sizes[letter] = max(sizes[letter], n)
    operands = [_diagonals(e, x, term) for term, x in zip(terms, xs, strict=False)]
    # an index in one operand only, and not in the output, is summed there first
    for i, (term, x) in enumerate(operands):
        others = output + "".join(t for j, (t, _) in enumerate(operands) if j != i)
        operands[i] = _sum_out(e, x, term, [c for c in term if c not in others])
    term, result = operands[0]
    for i, (other, y) in enumerate(operands[1:], start=2):
        needed = output + "".join(t for t, _ in operands[i:])
        term, result = _einsum_pair(e, term, result, other, y, needed)
    term, result = _sum_out(e, result, term, [c for c in term if c not in output])
    return [_permute(e, result, [term.index(c) for c in output])]


def _einsum_terms(equation: str, xs: list[Tensor]) -> tuple[list[str], str]:
    """The operands' index strings and the output's, each '...' spelled out as one index per
    broadcast dimension (characters that are not letters, so no equation uses them)."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(xs):
        raise NodeError(f"equation '{equation}' names {len(terms)} operands; the node has "
                        f"{len(xs)}")
    dots = max((len(x.shape) - len(t) + 3 for t, x in zip(terms, xs, strict=False) if "..." in t),
               default=0)
    spread = "".join(chr(0x100 + k) for k in range(dots))
    spelled = []
    for t, x in zip(terms, xs, strict=False):
        if "..." in t:
            t = t.replace("...", spread[dots - (len(x.shape) - len(t) + 3):], 1)
        if len(t) != len(x.shape) or not all(c.isalpha() for c in t):
            raise NodeError(f"equation term '{t}' does not index an operand of shape "
                            f"{list(x.shape)}")
        spelled.append(t)
    if arrow:
        output = rhs.replace("...", spread, 1)
    else:  # implicit: the broadcast dimensions, then the indices used once, sorted
        every = "".join(spelled)
        output = spread + "".join(sorted(c for c in set(every) if every.count(c) == 1
                                         and c not in spread))
    if not all(c.isalpha() and c in "".join(spelled) for c in output) or \
            len(set(output)) != len(output):
        raise NodeError(f"equation '{equation}': its output indices are not distinct indices "
                        "of the operands")
    return spelled, output


def _diagonals(e, x: Tensor, term: str) -> tuple[str, Tensor]:
    """x's diagonal along each index that its term repeats (ii -> i): the two axes made
    adjacent, merged, and every (n + 1)th element gathered."""
    while len(set(term)) != len(term):
        letter = next(c for c in term if term.count(c) > 1)
        p, q = term.index(letter), term.index(letter, term.index(letter) + 1)
        n = static(x.shape, "operand")[p]
        if x.shape[q] != n:
            raise NodeError(f"index '{letter}' has extents {n} and {x.shape[q]}")
        order = [d for d in range(len(term)) if d != q]
        order.insert(p + 1, q)
        x = _permute(e, x, order)
        merged = e.reshape(x, (*x.shape[:p], n * n, *x.shape[p + 2:]))
        x = _take(e, merged, np.arange(n) * (n + 1), p)
        term = term[:q] + term[q + 1:]
    return term, x


def _sum_out(e, x: Tensor, term: str, letters) -> tuple[str, Tensor]:
    if not letters:
        return term, x
    return "".join(c for c in term if c not in letters), \
        e.reduce("reduce_sum", x, [term.index(c) for c in letters], False)


def _einsum_pair(e, ta: str, a: Tensor, tb: str, b: Tensor, needed: str):
    """(indices, tensor) of the product of a and b summed over their shared indices that
    `needed` does not name: a batched matmul for floats, else a broadcast multiply and sum."""
    if a.dtype != b.dtype:
        raise NodeError(f"operands are {a.dtype} and {b.dtype}; expected one type")
    summed = [c for c in ta if c in tb and c not in needed]
    # a summed index of extent 1 on one side only (a broadcast) is no matmul's inner dimension
    inner = all(a.shape[ta.index(c)] == b.shape[tb.index(c)] for c in summed)
    if summed and inner and a.dtype.kind == "f":
        batch = [c for c in ta if c in tb and c not in summed]
        rows, cols = [c for c in ta if c not in tb], [c for c in tb if c not in ta]
        left = _permute(e, a, [ta.index(c) for c in batch + rows + summed])
        right = _permute(e, b, [tb.index(c) for c in batch + summed + cols])
        nb = len(batch)
        m, k = math.prod(left.shape[nb:nb + len(rows)]), math.prod(left.shape[nb + len(rows):])
        n = math.prod(right.shape[nb + len(summed):])
        left = e.reshape(left, (*left.shape[:nb], m, k))
        right = e.reshape(right, (*right.shape[:nb], k, n))
        outer = tuple(broadcast_shapes(left.shape[:nb], right.shape[:nb]))
        product = e.op("matmul", [left, right], (*outer, m, n), a.dtype)
        shape = (*outer, *(a.shape[ta.index(c)] for c in rows),
                 *(b.shape[tb.index(c)] for c in cols))
        return "".join(batch + rows + cols), e.reshape(product, shape)
    union = ta + "".join(c for c in tb if c not in ta)

    def aligned(t: str, x: Tensor) -> Tensor:
        x = _permute(e, x, [t.index(c) for c in union if c in t])
        return e.reshape(x, [x.shape[[c for c in union if c in t].index(c)] if c in t else 1
                             for c in union])

    product = e.binary("mul", aligned(ta, a), aligned(tb, b))
    return _sum_out(e, product, union, summed)


# ---- normalization -------------------------------------------------------------------------

def _normalized(e, x: Tensor, rows: int, epsilon: float) -> Tensor:
    """x as `rows` rows, each normalized to mean 0 and variance 1 (one layer_norm kernel with
    unit scale and zero shift), in x's shape."""
    depth = math.prod(static(x.shape, "input")) // rows if rows else 0
    flat = e.reshape(x, (rows, depth))
    y = e.op("layer_norm", [flat, constant(np.ones(depth, x.dtype)),
                            constant(np.zeros(depth, x.dtype))], flat.shape, x.dtype,
             epsilon=float(epsilon))
    return e.reshape(y, x.shape)


def _channels(x: Tensor, op: str) -> None:
    if len(x.shape) < 2:
        raise NodeError(f"{op} input has rank {len(x.shape)}; expected [N, C, ...]")


@handles("InstanceNormalization", 6, 22, floats=True)
def _instance_norm(e, xs, a, v):
    x, scale, bias = xs
    _channels(x, "InstanceNormalization")
    if scale.shape != x.shape[1:2] or bias.shape != x.shape[1:2]:
        raise NodeError(f"scale and bias have shapes {list(scale.shape)} and "
                        f"{list(bias.shape)}; expected [{x.shape[1]}]")
    per_channel = (x.shape[1],) + (1,) * (len(x.shape) - 2)
    y = _normalized(e, x, x.shape[0] * x.shape[1], a.get("epsilon", 1e-5))
    y = e.binary("mul", y, e.reshape(scale, per_channel))
    return [e.binary("add", y, e.reshape(bias, per_channel))]


@handles("GroupNormalization", 18, 21, floats=True)
def _group_norm(e, xs, a, v):
    x, scale, bias = xs
    _channels(x, "GroupNormalization")
    groups = a["num_groups"]
    n, c = x.shape[:2]
    if groups < 1 or c % groups:
        raise NodeError(f"{c} channels do not divide into {groups} groups")
    # version 18 scales per group, 21 per channel; 21 computes the statistics in stash_type
    per = groups if v == 18 else c
    if scale.shape != (per,) or bias.shape != (per,):
        raise NodeError(f"scale and bias have shapes {list(scale.shape)} and "
                        f"{list(bias.shape)}; version {v} expects [{per}]")
    stash = x.dtype if v == 18 else DTYPES.get(a.get("stash_type", 1))
    if stash is None or stash.kind != "f":
        raise NodeError(f"stash_type {a.get('stash_type')} is not FLOAT or DOUBLE")
    y = e.cast(_normalized(e, e.cast(x, stash), n * groups, a.get("epsilon", 1e-5)), x.dtype)
    spread = (groups, c // groups) if v == 18 else (c,)
    y = e.reshape(y, (n, *spread, math.prod(x.shape[2:])))
    at = (groups, 1, 1) if v == 18 else (c, 1)
    y = e.binary("add", e.binary("mul", y, e.reshape(scale, at)), e.reshape(bias, at))
    return [e.reshape(y, x.shape)]


# ---- reductions ----------------------------------------------------------------------------

def _composite_reduction(op: str, compose, floats: bool = False,
                         versions: tuple[int, ...] = (13, 18)):
    """A handler for `op`: `compose(e, x, reduce)` builds it from element-wise ops and
    `reduce(name, t)`, which reduces over the node's axes (none with noop_with_empty_axes:
    then only the element-wise part applies, as in the reference) keeping dims; the handler
    drops them after when keepdims=0."""
    def handler(e, xs, a, v):
        x = xs[0]
        if floats:
            _floats(x, op)
        if x.dtype == np.bool_:
            raise NodeError(f"{op} of bool is not supported")
        axes = a["axes"] if "axes" in a else const_ints(xs[1] if len(xs) > 1 else None, "axes")
        if not axes and not a.get("noop_with_empty_axes", 0):
            axes = list(range(len(x.shape)))
        axes = sorted({_axis(d, len(x.shape)) for d in axes or []})

        def reduce(name: str, t: Tensor) -> Tensor:
            return e.reduce(name, t, axes, True) if axes else t

        y = compose(e, x, reduce)
        if a.get("keepdims", 1) or not axes:
            return [y]
        return [e.reshape(y, [n for d, n in enumerate(x.shape) if d not in axes])]
    handles(op, *versions, floats=floats)(handler)


def _square(e, x):
    return e.binary("mul", x, x)


def _through_float(e, x: Tensor, f) -> Tensor:
    """f(x) computed in x's float type, or for integers in f64 and truncated back (the
    reference's astype)."""
    if x.dtype.kind == "f":
        return f(x)
    return e.cast(f(e.cast(x, np.float64)), x.dtype)


def _log_sum_exp(e, x, reduce):
    """log(sum(exp(x - m))) + m with m the maximum (0 where it is infinite, so an all -inf
    or a +inf row gives -inf or +inf, not NaN)."""
    peak = reduce("reduce_max", x)
    infinite = e.binary("equal", e.elementwise("abs", peak), e.scalar(np.inf, x.dtype),
                        dtype=np.bool_)
    shift = e.op("where", [infinite, _fill(e, e.scalar(0, x.dtype), peak.shape), peak],
                 peak.shape, x.dtype)
    total = reduce("reduce_sum", e.elementwise("exp", e.binary("sub", x, shift)))
    return e.binary("add", e.elementwise("log", total), shift)


_composite_reduction("ReduceL1", lambda e, x, r: r("reduce_sum", e.elementwise("abs", x)))
_composite_reduction("ReduceL2", lambda e, x, r: _through_float(
    e, x, lambda f: e.elementwise("sqrt", r("reduce_sum", _square(e, f)))))
_composite_reduction("ReduceSumSquare", lambda e, x, r: r("reduce_sum", _square(e, x)))
# (their version 28: more element types, the same op)
_composite_reduction("ReduceLogSum", lambda e, x, r: e.elementwise("log", r("reduce_sum", x)),
                     floats=True, versions=(13, 18, 28))
_composite_reduction("ReduceLogSumExp", _log_sum_exp, floats=True, versions=(13, 18, 28))
_composite_reduction("ReduceProd", lambda e, x, r: r("reduce_prod", x))


# ---- Pad -----------------------------------------------------------------------------------

@handles("Pad", 13, 18, 19, 21, 23, 24, 25)
def _pad(e, xs, a, v):
    x, pads = xs[0], const_ints(xs[1], "pads")
    value, axes = [*xs, None, None][2:4]
    rank = len(x.shape)
    axes = [_axis(d, rank) for d in const_ints(axes, "axes") or range(rank)]
    mode = _string(a, "mode", "constant")
    if mode not in ("constant", "reflect", "edge") + (("wrap",) if v >= 19 else ()):
        raise NodeError(f"mode '{mode}' is not constant, reflect, edge"
                        + (" or wrap" if v >= 19 else f" (wrap is version 19; this is {v})"))
    if len(pads) != 2 * len(axes) or len(set(axes)) != len(axes):
        raise NodeError(f"pads {pads} do not give a begin and an end for each of axes {axes}")
    if value is not None and value.dtype != x.dtype:
        raise NodeError(f"constant_value is {value.dtype}; the input is {x.dtype}")
    fill = e.scalar(0, x.dtype) if value is None else _scalar_of(e, value, "constant_value")
    for axis, before, after in zip(axes, pads, pads[len(axes):], strict=False):
        n = x.shape[axis]
        if n + before + after < 0 or min(before, 0) + n < 0:
            raise NodeError(f"pads {before}, {after} remove more than axis {axis}'s {n} "
                            "elements")
        # a negative pad crops the input first (as ONNX Runtime does), a positive one pads
        crop = max(0, -before)
        kept = n - crop - max(0, -after)
        before, after = max(0, before), max(0, after)
        if mode == "constant":
            x = _slice(e, x, axis, crop, crop + kept)
            sides = [[d if k != axis else p for k, d in enumerate(x.shape)]
                     for p in (before, after)]
            x = e.concat([_fill(e, fill, sides[0]), x, _fill(e, fill, sides[1])], axis)
        elif kept != n or before or after:
            if kept == 0 and before + after:
                raise NodeError(f"{mode} padding of axis {axis}, which is empty")
            x = _take(e, x, crop + _pad_table(mode, kept, before, after), axis)
    return [x]


def _pad_table(mode: str, n: int, before: int, after: int) -> np.ndarray:
    """Which element of an axis of `n` each padded position reads (np.pad's modes)."""
    at = np.arange(-before, n + after)
    if mode == "edge" or (mode == "reflect" and n == 1):
        return np.clip(at, 0, n - 1)
    if mode == "wrap":
        return at % n
    period = 2 * (n - 1)  # reflect: ... 2 1 | 0 1 2 ... n-1 | n-2 ...
    folded = at % period
    return np.where(folded >= n, period - folded, folded)


# ---- Resize --------------------------------------------------------------------------------

_COORDINATES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                "asymmetric", "tf_crop_and_resize")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@handles("Resize", 13, 18, 19)
def _resize(e, xs, a, v):
    x, roi, scales, sizes = (xs + [None] * 3)[:4]
    rank = len(x.shape)
    mode = _string(a, "mode", "nearest")
    coordinates = _string(a, "coordinate_transformation_mode", "half_pixel")
    nearest = _string(a, "nearest_mode", "round_prefer_floor")
    policy = _string(a, "keep_aspect_ratio_policy", "stretch")
    for what, got, allowed in (("mode", mode, ("nearest", "linear", "cubic")),
                               ("coordinate_transformation_mode", coordinates,
                                _COORDINATES[:1] + _COORDINATES[2:] if v < 19 else _COORDINATES),
                               ("nearest_mode", nearest, _NEAREST),
                               ("keep_aspect_ratio_policy", policy,
                                ("stretch", "not_larger", "not_smaller"))):
        if got not in allowed:
            raise NodeError(f"{what} '{got}' is not one of {', '.join(allowed)}")
    if a.get("antialias", 0):
        raise NodeError("antialias=1 is not supported")
    if mode != "nearest" and x.dtype.kind != "f":
        raise NodeError(f"{mode} Resize of {x.dtype} is not supported; it interpolates "
                        "float32 and float64")
    axes = [_axis(d, rank) for d in a.get("axes", range(rank))]
    factors, out = _resize_shape(x.shape, axes, _const_floats(scales, "scales"),
                                 const_ints(sizes, "sizes") if sizes is not None and
                                 sizes.shape != (0,) else None, policy)
    box = _const_floats(roi, "roi") if coordinates == "tf_crop_and_resize" else None
    if box is not None and len(box) != 2 * len(axes):
        raise NodeError(f"roi has {len(box)} values; expected 2 per axis ({2 * len(axes)})")
    for i, axis in enumerate(axes):
        start, end = (box[i], box[len(axes) + i]) if box else (0.0, 1.0)
        if math.isclose(factors[axis], 1.0) and out[axis] == x.shape[axis] and \
                math.isclose(start, 0.0) and math.isclose(end, 1.0):
            continue  # the identity along this axis, as the reference skips it
        indices, weights, outside = _resize_taps(
            x.shape[axis], out[axis], factors[axis], coordinates, (start, end), mode, nearest,
            float(a.get("cubic_coeff_a", -0.75)), bool(a.get("exclude_outside", 0)))
        x = _blend(e, x, axis, indices, weights)
        if outside.any():
            extrapolated = _fill(e, e.scalar(a.get("extrapolation_value", 0.0), x.dtype),
                                 x.shape)
            x = e.op("where", [constant(_on_axis(outside, axis, rank)), extrapolated, x],
                     x.shape, x.dtype)
    return [x]


def _resize_shape(shape, axes, scales, sizes, policy):
    """(the scale factor per axis, the output shape) as the reference derives them."""
    if (scales is None) == (sizes is None):
        raise NodeError("expected exactly one of scales and sizes")
    given = scales if sizes is None else sizes
    if len(given) != len(axes):
        raise NodeError(f"{'scales' if sizes is None else 'sizes'} has {len(given)} values; "
                        f"expected one per axis ({len(axes)})")
    factors, out = [1.0] * len(shape), list(shape)
    if scales is not None:
        for axis, s in zip(axes, scales, strict=False):
            if s <= 0:
                raise NodeError(f"scale {s} is not positive")
            factors[axis], out[axis] = s, int(s * shape[axis])
        return factors, out
    if any(shape[axis] == 0 for axis in axes):
        raise NodeError("cannot resize an empty axis to a size")
    ratios = [n / shape[axis] for axis, n in zip(axes, sizes, strict=False)]
    if policy == "stretch":
        for axis, n, r in zip(axes, sizes, ratios, strict=False):
            factors[axis], out[axis] = r, n
        return factors, out
    ratio = min(ratios) if policy == "not_larger" else max(ratios)
    for axis in axes:
        factors[axis], out[axis] = ratio, int(ratio * shape[axis] + 0.5)
    return factors, out


def _resize_taps(n: int, m: int, scale: float, coordinates: str, box, mode: str, nearest: str,
                 cubic_a: float, exclude_outside: bool):
    """For each of the `m` output positions along an axis of `n`: the input indices it reads
    ([m, taps]), their weights ([m, taps]) and whether it lies outside the crop box (then it
    is the extrapolation value). The coordinate transforms are the spec's, as ONNX Runtime
    computes them (the reference takes scale x n for the output length where the spec has
    the length itself), the coefficients and neighbour choice the reference's."""
    y = np.arange(m, dtype=np.float64)
    if coordinates == "align_corners":  # over the output's whole length, as ONNX Runtime
        x = np.zeros(m) if m == 1 else y * (n - 1) / (m - 1)
    elif coordinates == "asymmetric":
        x = y / scale
    elif coordinates == "tf_crop_and_resize":
        start, end = box
        x = np.full(m, (end - start) * (n - 1) / 2) if m == 1 else \
            y * (end - start) * (n - 1) / (m - 1)
        x = x + start * (n - 1)
    elif coordinates == "pytorch_half_pixel":
        x = np.zeros(m) if m == 1 else (y + 0.5) / scale - 0.5  # the spec's 0, not -0.5
    elif coordinates == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    else:  # half_pixel_symmetric
        x = n / 2 * (1 - m / (scale * n)) + (y + 0.5) / scale - 0.5
    outside = (x < 0) | (x > n - 1) if coordinates == "tf_crop_and_resize" else np.zeros(m, bool)
    floor = np.floor(x)
    ratio = np.where(x == floor, 1.0, x - floor)  # in (0, 1]: the left neighbour preferred
    if mode == "nearest":
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
              "floor": np.zeros(m, bool), "ceil": np.ones(m, bool)}[nearest]
        up = up | (ratio == 1.0)
        weights = np.stack([~up, up], axis=1).astype(np.float64)
    elif mode == "linear":
        weights = np.stack([1 - ratio, ratio], axis=1)
    else:
        A = cubic_a
        r, s = ratio + 1, 1 - ratio
        weights = np.stack([((A * r - 5 * A) * r + 8 * A) * r - 4 * A,
                            ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1,
                            ((A + 2) * s - (A + 3)) * s * s + 1,
                            ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A],
                           axis=1)
    taps = weights.shape[1]
    # the `taps` indices nearest x, ties to the smaller (the reference's neighbour search)
    pad = -(-taps // 2)
    shifted = x + pad
    base = np.floor(shifted)
    frac = shifted - base
    if taps % 2 == 0:
        first = base + np.where(frac == 0, -(taps // 2), -(taps // 2) + 1)
    else:
        first = base + np.where(frac <= 0.5, -((taps - 1) // 2), -((taps - 1) // 2) + 1)
    indices = first.astype(np.int64)[:, None] + np.arange(taps)[None, :] - pad
    if exclude_outside:
        weights = np.where((indices < 0) | (indices >= n), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(indices, 0, n - 1), weights, outside


def _blend(e, x: Tensor, axis: int, indices: np.ndarray, weights: np.ndarray) -> Tensor:
    """sum over taps t of x gathered at indices[:, t] along `axis`, times weights[:, t]."""
    result = None
    for t in range(indices.shape[1]):
        w = weights[:, t]
        if not w.any():
            continue
        term = _take(e, x, indices[:, t], axis)
        if not np.all(w == 1):
            term = e.binary("mul", term, constant(_on_axis(w.astype(x.dtype), axis,
                                                          len(x.shape))))
        result = term if result is None else e.binary("add", result, term)
    if result is None:  # every weight 0 (an empty output axis)
        result = _take(e, x, indices[:, 0], axis)
    return result
