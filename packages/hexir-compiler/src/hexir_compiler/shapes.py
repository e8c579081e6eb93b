"""Shape rules of the graph ops, as plain functions on tuples.

The verifiers, the lowering to kernels and the serializer all need the same answers (what
shape does a broadcast give, is this a permutation), so they live here once, free of MLIR.
Each check returns the result shape or raises `ShapeError` with the message a verifier shows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


class ShapeError(ValueError):
    """A shape rule broken; the message is the diagnostic text."""


def fmt(shape: Sequence[int]) -> str:
    """`2x3` (or `scalar` for rank 0), as shapes are written in diagnostics."""
    return "x".join(str(d) for d in shape) if shape else "scalar"


def broadcast(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """numpy broadcasting: align from the right; each pair equal or one of them 1."""
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + tuple(a)
    pb = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y):
            raise ShapeError(f"shapes {fmt(a)} and {fmt(b)} are not broadcast-compatible")
        out.append(max(x, y) if 1 in (x, y) else x)
    return tuple(out)


def linear(x: Sequence[int], w: Sequence[int]) -> tuple[int, ...]:
    """input [..., K] times weight [K, N] -> [..., N]."""
    if len(x) < 1:
        raise ShapeError("expected an input of rank 1 or more, got a scalar")
    if len(w) != 2:
        raise ShapeError(f"expected a rank-2 weight [K, N], got rank {len(w)}")
    if x[-1] != w[0]:
        raise ShapeError(f"inner dimensions differ: {x[-1]} vs {w[0]}")
    return (*x[:-1], w[1])


def matmul(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """a [..., M, K] times b [..., K, N] -> [..., M, N], batch dimensions broadcast."""
    for name, s in (("lhs", a), ("rhs", b)):
        if len(s) < 2:
            raise ShapeError(f"expected a {name} of rank 2 or more, got rank {len(s)}")
    if a[-1] != b[-2]:
        raise ShapeError(f"inner dimensions differ: {a[-1]} vs {b[-2]}")
    try:
        batch = broadcast(a[:-2], b[:-2])
    except ShapeError:
        raise ShapeError(
            f"batch dimensions {fmt(a[:-2])} and {fmt(b[:-2])} are not broadcast-compatible"
        ) from None
    return (*batch, a[-2], b[-1])


def normalize_axis(axis: int, rank: int) -> int:
    """A possibly negative axis as an index in [0, rank)."""
    if not -rank <= axis < rank:
        raise ShapeError(
            f"axis {axis} is out of range for rank {rank}; expected {-rank}..{rank - 1}"
        )
    return axis % rank


def transpose(x: Sequence[int], perm: Sequence[int]) -> tuple[int, ...]:
    if sorted(perm) != list(range(len(x))):
        raise ShapeError(
            f"permutation [{', '.join(map(str, perm))}] is not a permutation of 0..{len(x) - 1}"
        )
    return tuple(x[p] for p in perm)


def reshape(x: Sequence[int], to: Sequence[int]) -> tuple[int, ...]:
    if math.prod(x) != math.prod(to):
        raise ShapeError(
            f"cannot reshape {fmt(x)} ({math.prod(x)} elements) "
            f"to {fmt(to)} ({math.prod(to)} elements)"
        )
    return tuple(to)


def reduce(x: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    """Reduce over `axes` (negative allowed, each at most once, at least one).

    An empty list is refused rather than given a meaning: numpy reads it as "reduce nothing"
    and ONNX as "reduce everything", and a program should not depend on which one we chose.
    """
    if not axes:
        raise ShapeError("axes is empty; name at least one axis to reduce")
    norm = [normalize_axis(a, len(x)) for a in axes]
    if len(set(norm)) != len(norm):
        raise ShapeError(f"axes [{', '.join(map(str, axes))}] name an axis twice")
    if keepdims:
        return tuple(1 if i in norm else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in norm)


def layer_norm(x: Sequence[int], gamma: Sequence[int], beta: Sequence[int]) -> tuple[int, ...]:
    if len(x) < 1:
        raise ShapeError("expected an input of rank 1 or more, got a scalar")
    for name, s in (("gamma", gamma), ("beta", beta)):
        if tuple(s) != (x[-1],):
            raise ShapeError(f"{name} has shape {fmt(s)}; expected {x[-1]} (the last dimension)")
    return tuple(x)
