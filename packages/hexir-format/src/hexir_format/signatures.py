"""The shape and type rules of Hexir's ops and kernel kinds, written once.

Three readers ask the same questions: the compiler's op verifiers and kernel planners (what
shape does a broadcast give, is this a permutation), the runtime's validation of an untrusted
`.hxb` (do these argument types and params fit a softmax), and hxb-dump before it lists a
file. Answering them here, free of MLIR and numpy, is what keeps every module the compiler
writes one the runtime runs and hxb-dump lists, and a rule changing in one place only.

The shape rules take and return plain tuples and raise `ShapeError`, whose message is the
diagnostic text. A dimension may be an int or a symbolic `dims.Expr` (a dynamic module's
`batch`, `past + seq`): the rules hold for both, and where a rule must compare sizes it
decides with `dims.less` for every non-negative value of the symbols, or refuses when the
answer depends on them; the caller says where (the compiler prefixes the op, the runtime the
executable). `signature_problem` is each kernel kind's rule over the argument types and f64
params an executable records (the format README's table), built from the shape rules. The
meanings are numpy's, and ONNX's where numpy has none: an empty reduction axes list means
every axis.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TypeVar

from hexir_format import dims
from hexir_format.dims import Dim, DimError
from hexir_format.errors import HexirError
from hexir_format.model import BINARY_KINDS, CODE_KINDS, DType, KernelKind, TensorType

#: A shape's dimensions: ints, or ints and symbolic expressions; a rule gives what it takes.
#: (Shapes are joined with `+`: mypy cannot type a star-unpacked tuple of a constrained
#: TypeVar, hence the RUF005 exceptions.)
D = TypeVar("D", int, Dim)
Shape = tuple[int, ...]

REDUCE_KINDS = frozenset({KernelKind.REDUCE_SUM, KernelKind.REDUCE_MEAN, KernelKind.REDUCE_MAX})


class ShapeError(HexirError, ValueError):
    """A shape or type rule broken; the message is the diagnostic text.

    A ValueError because the caller's values do not fit the rule; a HexirError so that one
    reaching a command line is reported as a refusal in one line, not as a bug.
    """


def fmt(shape: Sequence[Dim]) -> str:
    """`2x3` (or `scalar` for rank 0), as shapes are written in diagnostics."""
    return "x".join(str(d) for d in shape) if shape else "scalar"


# ---- shape rules -----------------------------------------------------------------------------

def _may_be_at_most(a: Dim, b: Dim) -> bool:
    """Whether a <= b, as `_may_be_less` answers."""
    try:
        return dims.less_equal(a, b)
    except DimError:
        return True


def _may_be_less(a: Dim, b: Dim) -> bool:
    """Whether a < b: exactly for ints; for symbolic dims False only when it fails for every
    size, since what depends on the sizes is checked again with each call's (the runtime
    holds a dynamic module's kernels to these rules for the sizes it binds)."""
    try:
        return dims.less(a, b)
    except DimError:
        return True

def broadcast(a: Sequence[D], b: Sequence[D]) -> tuple[D, ...]:
    """numpy broadcasting: align from the right; each pair equal or one of them 1.

    A 1 takes the other extent, 0 included (numpy gives 0 for 0 against 1, not 1).
    """
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + tuple(a)
    pb = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb, strict=True):
        if x != y and 1 not in (x, y):
            raise ShapeError(f"shapes {fmt(a)} and {fmt(b)} are not broadcast-compatible")
        out.append(y if x == 1 else x)
    return tuple(out)


def matmul(a: Sequence[D], b: Sequence[D], *, vectors: bool = True) -> tuple[D, ...]:
    """numpy's matmul: a [..., M, K] times b [..., K, N] -> [..., M, N], batch dims broadcast.

    A vector operand (a [K] or b [K]) gains a unit row or column, which the result then drops;
    that is how the format's `matmul` kernel runs `hexir.linear` of a [K] input. `vectors=False`
    is `hexir.matmul`, whose operands name their row and column axes.
    """
    least = 1 if vectors else 2
    for name, s in (("lhs", a), ("rhs", b)):
        if len(s) < least:
            raise ShapeError(f"expected a {name} of rank {least} or more, got rank {len(s)}")
    one: tuple[D, ...] = (1,)
    a2 = tuple(a) if len(a) > 1 else one + tuple(a)
    b2 = tuple(b) if len(b) > 1 else tuple(b) + one
    if a2[-1] != b2[-2]:
        raise ShapeError(f"inner dimensions differ: {a2[-1]} vs {b2[-2]}")
    try:
        batch = broadcast(a2[:-2], b2[:-2])
    except ShapeError:
        raise ShapeError(
            f"batch dimensions {fmt(a2[:-2])} and {fmt(b2[:-2])} are not broadcast-compatible"
        ) from None
    rows = a2[-2:-1] if len(a) > 1 else ()
    cols = b2[-1:] if len(b) > 1 else ()
    return batch + rows + cols


def linear(x: Sequence[D], w: Sequence[D]) -> tuple[D, ...]:
    """input [..., K] times weight [K, N] -> [..., N]: a matmul whose rhs is one matrix."""
    if len(x) < 1:
        raise ShapeError("expected an input of rank 1 or more, got a scalar")
    if len(w) != 2:
        raise ShapeError(f"expected a rank-2 weight [K, N], got rank {len(w)}")
    return matmul(x, w)


def normalize_axis(axis: int, rank: int) -> int:
    """A possibly negative axis as an index in [0, rank)."""
    if not -rank <= axis < rank:
        raise ShapeError(
            f"axis {axis} is out of range for rank {rank}; expected {-rank}..{rank - 1}"
        )
    return axis % rank


def transpose(x: Sequence[D], perm: Sequence[int]) -> tuple[D, ...]:
    """Result dim i is input dim perm[i]; perm names every input axis once."""
    if sorted(perm) != list(range(len(x))):
        raise ShapeError(
            f"permutation [{', '.join(map(str, perm))}] is not a permutation of 0..{len(x) - 1}"
        )
    return tuple(x[p] for p in perm)


def reshape(x: Sequence[D], to: Sequence[D]) -> tuple[D, ...]:
    """The same elements in row-major order: only the element count must agree."""
    if math.prod(x) != math.prod(to):
        raise ShapeError(
            f"cannot reshape {fmt(x)} ({math.prod(x)} elements) "
            f"to {fmt(to)} ({math.prod(to)} elements)"
        )
    return tuple(to)


def reduce_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """The reduced axes, normalized and sorted; none listed means every axis.

    ONNX's reading of an empty list, and the format's: numpy's `axis=()` would reduce nothing,
    which no program asks a reduction for.
    """
    norm = [normalize_axis(a, rank) for a in axes]
    if len(set(norm)) != len(norm):
        raise ShapeError(f"axes [{', '.join(map(str, axes))}] name an axis twice")
    return tuple(sorted(norm)) if norm else tuple(range(rank))


def reduce(x: Sequence[D], axes: Sequence[int], keepdims: bool) -> tuple[D, ...]:
    """Reduce over `axes` (negative allowed, each at most once, none listed: every axis)."""
    reduced = reduce_axes(axes, len(x))
    if keepdims:
        return tuple(1 if i in reduced else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in reduced)


def layer_norm(x: Sequence[D], gamma: Sequence[D], beta: Sequence[D],
               epsilon: float) -> tuple[D, ...]:
    """Normalize over the last dimension D, scaled by gamma [D] and shifted by beta [D].

    epsilon may be 0 (ONNX allows it; a constant row then divides by zero, as numpy would),
    but it must be a finite number: an infinite or NaN one makes every output NaN or 0.
    """
    if len(x) < 1:
        raise ShapeError("expected an input of rank 1 or more, got a scalar")
    for name, s in (("gamma", gamma), ("beta", beta)):
        if tuple(s) != (x[-1],):
            raise ShapeError(f"{name} has shape {fmt(s)}; expected {x[-1]} (the last dimension)")
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ShapeError(f"epsilon is {epsilon:g}; expected a finite value >= 0")
    return tuple(x)


def concat(shapes: Sequence[Sequence[D]], axis: int) -> tuple[D, ...]:
    """numpy's concatenate: every operand of one rank, equal except along `axis`."""
    if not shapes:
        raise ShapeError("expected at least one operand")
    first: tuple[D, ...] = tuple(shapes[0])
    if not first:
        raise ShapeError("cannot concatenate scalars")
    axis = normalize_axis(axis, len(first))
    for s in shapes[1:]:
        if len(s) != len(first) or any(a != b for d, (a, b) in
                                         enumerate(zip(s, first, strict=True)) if d != axis):
            raise ShapeError(f"shapes {fmt(first)} and {fmt(s)} differ off axis {axis}")
    total = first[axis]
    for s in shapes[1:]:
        total = total + s[axis]
    return first[:axis] + (total,) + first[axis + 1:]  # noqa: RUF005 (see D)


def slice_(x: Sequence[D], starts: Sequence[D], steps: Sequence[int],
           out: Sequence[D]) -> tuple[D, ...]:
    """Result element i along each axis d is input element starts[d] + i * steps[d]; every
    element read lies inside the input (a step is never 0, and may be negative)."""
    if not len(x) == len(starts) == len(steps) == len(out):
        raise ShapeError(f"starts and steps must name every axis of {fmt(x)} once, got "
                         f"{len(starts)} starts and {len(steps)} steps")
    for d, (extent, start, step, n) in enumerate(zip(x, starts, steps, out, strict=True)):
        last = dims.add(start, dims.mul(dims.add(n, -1), step))
        inside = all(_may_be_less(i, extent) and _may_be_less(-1, i) for i in (start, last))
        if step == 0 or (n != 0 and not inside):
            raise ShapeError(f"axis {d}: {n} elements from {start} in steps of {step} do not lie "
                             f"inside 0..{dims.render(dims.add(extent, -1))}")
    return tuple(out)


def gather(data: Sequence[D], indices: Sequence[D], axis: int) -> tuple[D, ...]:
    """numpy's take along `axis`: data[:axis] + indices + data[axis + 1:]."""
    if not data:
        raise ShapeError("cannot gather from a scalar")
    axis = normalize_axis(axis, len(data))
    return tuple(data[:axis]) + tuple(indices) + tuple(data[axis + 1:])


def gather_elements(data: Sequence[D], indices: Sequence[D], axis: int) -> tuple[D, ...]:
    """numpy's take_along_axis without broadcasting: the result has the indices' shape; off
    `axis` every extent of the indices is at most the data's, so each position names an element
    of the data (along `axis` the index value does)."""
    _along_axis("indices", data, indices, axis)
    return tuple(indices)


def scatter_elements(data: Sequence[D], indices: Sequence[D], updates: Sequence[D],
                     axis: int) -> tuple[D, ...]:
    """The data with updates[p] written at p with p[axis] = indices[p]: indices and updates of
    one shape, which `gather_elements` allows; the result has the data's shape."""
    if tuple(indices) != tuple(updates):
        raise ShapeError(f"indices {fmt(indices)} and updates {fmt(updates)} differ in shape")
    _along_axis("indices", data, indices, axis)
    return tuple(data)


def scatter_nd(data: Sequence[D], indices: Sequence[D], updates: Sequence[D]) -> tuple[D, ...]:
    """The data with updates[m] written at data[indices[m]]: indices [..., k] (k <= the data's
    rank) name slices data.shape[k:], so the updates are indices.shape[:-1] + data.shape[k:]."""
    if not indices:
        raise ShapeError("indices must have rank 1 or more: [..., k]")
    k = indices[-1]
    if not isinstance(k, int):
        raise ShapeError(f"index tuples of {k} coordinates: their length must be static")
    if k > len(data):
        raise ShapeError(f"index tuples of {k} coordinates do not fit the rank-{len(data)} data")
    want = tuple(indices[:-1]) + tuple(data[k:])
    if tuple(updates) != want:
        raise ShapeError(f"updates have shape {fmt(updates)}; indices {fmt(indices)} into data "
                         f"{fmt(data)} expect {fmt(want)}")
    return tuple(data)


def top_k(x: Sequence[D], k: int, axis: int) -> tuple[D, ...]:
    """The k first elements along `axis` in an order: the input's shape with k on `axis`."""
    if not x:
        raise ShapeError("cannot take the top k of a scalar")
    axis = normalize_axis(axis, len(x))
    if k < 0 or not _may_be_at_most(k, x[axis]):
        raise ShapeError(f"k = {k} is not in 0..{x[axis]}, the extent of axis {axis}")
    return tuple(x[:axis]) + (k,) + tuple(x[axis + 1:])  # noqa: RUF005 (see D)


def _along_axis(what: str, data: Sequence[D], indices: Sequence[D], axis: int) -> None:
    if not data:
        raise ShapeError("cannot index a scalar along an axis")
    axis = normalize_axis(axis, len(data))
    if len(indices) != len(data):
        raise ShapeError(f"{what} {fmt(indices)} and data {fmt(data)} differ in rank")
    for d, (i, e) in enumerate(zip(indices, data, strict=True)):
        if d != axis and not _may_be_at_most(i, e):
            raise ShapeError(f"{what} {fmt(indices)} exceed data {fmt(data)} on axis {d}, "
                             f"which is not the indexed axis {axis}")


def window(x: Sequence[D], kernel: Sequence[int], strides: Sequence[int],
           pads: Sequence[int], dilations: Sequence[int], ceil_mode: bool = False
           ) -> tuple[D, ...]:
    """The spatial output extents of a sliding window over the spatial dims `x`: pads are
    (begins..., ends...); with `ceil_mode` a partial last window counts unless it would start
    in the end padding (ONNX's and PyTorch's rule)."""
    rank = len(x)
    for name, values, want in (("kernel", kernel, rank), ("strides", strides, rank),
                               ("pads", pads, 2 * rank), ("dilations", dilations, rank)):
        if len(values) != want:
            raise ShapeError(f"{name} has {len(values)} values; expected {want} for "
                             f"{rank} spatial dimensions")
    if any(v < 1 for v in (*kernel, *strides, *dilations)) or any(p < 0 for p in pads):
        raise ShapeError("kernel, strides and dilations must be >= 1 and pads >= 0")
    out: list[D] = []
    for d in range(rank):
        span = x[d] + (pads[d] + pads[rank + d] - dilations[d] * (kernel[d] - 1) - 1)
        if not _may_be_at_most(0, span):
            raise ShapeError(f"spatial dimension {d}: a window of {kernel[d]} (dilation "
                             f"{dilations[d]}) does not fit {x[d]} plus the padding")
        if isinstance(span, int):
            n = -(-span // strides[d]) + 1 if ceil_mode else span // strides[d] + 1
            if ceil_mode and (n - 1) * strides[d] >= span - (pads[rank + d] - dilations[d] *
                                                              (kernel[d] - 1) - 1):
                n -= 1  # the last window would start in the end padding
            out.append(n)
        elif ceil_mode:
            raise ShapeError(f"spatial dimension {d} is {x[d]}: ceil_mode needs a static "
                             "extent")
        else:
            out.append(dims.floordiv(span, strides[d]) + 1)
    return tuple(out)


def conv(x: Sequence[D], w: Sequence[D], group: int, strides: Sequence[int],
         pads: Sequence[int], dilations: Sequence[int]) -> tuple[D, ...]:
    """x [N, C, *S] convolved with w [M, C / group, *K] -> [N, M, *out]."""
    if len(x) < 3 or len(w) != len(x):
        raise ShapeError(f"expected an input [N, C, spatial...] and a weight [M, C/group, "
                         f"kernel...] of the same rank >= 3, got {fmt(x)} and {fmt(w)}")
    if group < 1 or x[1] != w[1] * group or w[0] % group:
        raise ShapeError(f"group {group}: input channels {x[1]} must be {w[1]} x group and "
                         f"output channels {w[0]} a multiple of group")
    kernel = [k for k in w[2:] if isinstance(k, int)]
    if len(kernel) != len(w) - 2:
        raise ShapeError(f"the weight {fmt(w)} must have a static kernel")
    return (x[0], w[0]) + window(x[2:], kernel, strides, pads, dilations)  # noqa: RUF005 (see D)


# ---- kernel kinds ----------------------------------------------------------------------------

def signature_problem(kind: KernelKind, args: Sequence[TensorType],
                      params: Sequence[float], name: str = "") -> str | None:
    """Why `args` (inputs then destination) and `params` do not fit `kind`, or None.

    The message starts with the kind (`matmul inner dimensions differ: 3 vs 2`). A kernel
    whose signature fits only ever sees arguments of the shapes it was declared with, so its
    body (numpy or device code) cannot index outside them. A LIBRARY kernel is the library
    function `name` (`hexir_format.library`), and only those take strings.
    """
    if kind is KernelKind.LIBRARY:
        from hexir_format import library  # (it builds on this module's rules)

        return library.problem(name, args, params)
    if strings := [j for j, t in enumerate(args) if t.dtype is DType.STRING]:
        j = strings[0]
        return (f"{kind} takes argument {j} of type {args[j]}; only library kernels take "
                "strings")
    try:
        _check(kind, tuple(args), tuple(params))
    except ShapeError as e:
        return f"{kind} {e}"
    return None


def _check(kind: KernelKind, args: tuple[TensorType, ...], params: tuple[float, ...]) -> None:
    if not kind.takes(len(args)):
        expected = f"at least {kind.least_args}" if kind.arity is None else str(kind.arity + 1)
        raise ShapeError(f"takes {expected} arguments, not {len(args)}")
    if kind not in CODE_KINDS and len({t.dtype for t in args}) != 1:
        raise ShapeError(f"mixes element types: {', '.join(map(str, args))}")
    *inputs, out = args
    if kind is KernelKind.GENERIC:
        _count(params, 0)
        return  # its code is its meaning; the runtime binds buffers of the declared types
    want = _destination(kind, inputs, out, params)
    if want != out.shape:
        raise ShapeError(f"of {', '.join(map(str, inputs))} gives {fmt(want)}, "
                         f"destination is {out}")


def _destination(kind: KernelKind, inputs: list[TensorType], out: TensorType,
                 params: tuple[float, ...]) -> tuple[Dim, ...]:
    """The destination shape `kind` computes from `inputs` and `params` (the rules hold for
    a dynamic module's symbolic shapes as for ints)."""
    shapes: list[tuple[Dim, ...]] = [t.shape for t in inputs]
    x = shapes[0]
    if kind is KernelKind.GELU:
        if len(params) > 1:
            raise ShapeError(f"has {len(params)} params; expected at most 1 (approximate)")
        if params and params[0] not in (0.0, 1.0):
            raise ShapeError(f"approximate is {params[0]:g}; expected 0 (erf) or 1 (tanh)")
        return x
    if kind is KernelKind.SOFTMAX:
        _count(params, 1, "the axis")
        _axis(params[0], len(x), "axis")
        return x
    if kind is KernelKind.LAYER_NORM:
        _count(params, 1, "epsilon")
        return layer_norm(shapes[0], shapes[1], shapes[2], params[0])
    if kind is KernelKind.TRANSPOSE:
        _count(params, len(x), "a permutation of the input's axes")
        return transpose(x, [_axis(p, len(x), "permutation entry") for p in params])
    if kind in REDUCE_KINDS:
        if not params:
            raise ShapeError("has no params; expected keepdims (0 or 1), then its axes")
        keepdims, *axes = params
        if keepdims not in (0.0, 1.0):
            raise ShapeError(f"keepdims is {keepdims:g}; expected 0 or 1")
        return reduce(x, [_axis(a, len(x), "axis") for a in axes], bool(keepdims))
    _count(params, 0)
    if kind is KernelKind.MATMUL:
        return matmul(*shapes)
    if kind is KernelKind.MAP:  # each input broadcasts to the destination
        for shape in shapes:
            if broadcast(shape, out.shape) != out.shape:
                raise ShapeError(f"input {fmt(shape)} does not broadcast to the destination {out}")
        return out.shape
    if kind in BINARY_KINDS:
        return functools.reduce(broadcast, shapes)
    if kind is KernelKind.RESHAPE:
        return reshape(x, out.shape)
    return x  # relu, sigmoid, tanh, exp, sqrt, neg: element-wise


def _count(params: tuple[float, ...], expected: int, what: str = "") -> None:
    if len(params) != expected:
        named = f" ({what})" if what else ""
        raise ShapeError(f"has {len(params)} params; expected {expected}{named}")


def _axis(value: float, rank: int, what: str) -> int:
    """An axis as a .hxb records it: a non-negative integer below the rank (the compiler
    writes axes normalized, so a negative one is damage, not a choice)."""
    if not (float(value).is_integer() and 0 <= value < rank):
        expected = f"an integer in 0..{rank - 1}" if rank else "none: the input is a scalar"
        raise ShapeError(f"{what} {value:g} is not an axis of its rank-{rank} input; "
                         f"expected {expected}")
    return int(value)
