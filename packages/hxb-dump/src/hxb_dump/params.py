"""A kernel's params (f64 values on disk) read back as the named attributes they encode.

The format stores params as a bare list of doubles; what each one means depends on the kernel
kind (see the format README). Naming them here is what lets a listing say `axis=1` instead of
`1.0`, and checking them here is what catches a corrupted value the reader cannot judge.
"""

from __future__ import annotations

from hexir_format import KernelKind

from hxb_dump.errors import DumpError

Param = int | float | bool | str | list[int]

REDUCTIONS = frozenset({KernelKind.REDUCE_SUM, KernelKind.REDUCE_MEAN, KernelKind.REDUCE_MAX})


def decode(kind: KernelKind, params: tuple[float, ...], rank: int) -> dict[str, Param]:
    """The named params of a `kind` kernel whose first argument has rank `rank`.

    Raises DumpError saying what the kind expects when the values do not fit it.
    """
    if kind is KernelKind.GELU:
        (mode,) = _count(kind, params, 1)
        if mode not in (0.0, 1.0):
            raise DumpError(f"gelu approximate is {mode:g}; expected 0 (erf) or 1 (tanh)")
        return {"approximate": "tanh" if mode else "erf"}
    if kind is KernelKind.SOFTMAX:
        (axis,) = _count(kind, params, 1)
        return {"axis": _axis(kind, "axis", axis, rank)}
    if kind is KernelKind.LAYER_NORM:
        (epsilon,) = _count(kind, params, 1)
        if not epsilon >= 0.0 or epsilon == float("inf"):
            raise DumpError(f"layer_norm epsilon is {epsilon:g}; expected a finite value >= 0")
        return {"epsilon": epsilon}
    if kind is KernelKind.TRANSPOSE:
        perm = [_axis(kind, "permutation entry", p, rank) for p in _count(kind, params, rank)]
        if sorted(perm) != list(range(rank)):
            raise DumpError(f"transpose permutation {_ints(perm)} is not a permutation of "
                            f"0..{rank - 1}")
        return {"permutation": perm}
    if kind in REDUCTIONS:
        if not params:
            raise DumpError(f"{kind} has no params; expected keepdims (0 or 1) then its axes")
        keepdims, *rest = params
        if keepdims not in (0.0, 1.0):
            raise DumpError(f"{kind} keepdims is {keepdims:g}; expected 0 or 1")
        axes = [_axis(kind, "axis", a, rank) for a in rest]
        if len(set(axes)) != len(axes):
            raise DumpError(f"{kind} axes {_ints(axes)} name an axis twice")
        return {"keepdims": bool(keepdims), "axes": axes}
    _count(kind, params, 0)
    return {}


def _count(kind: KernelKind, params: tuple[float, ...], expected: int) -> tuple[float, ...]:
    if len(params) != expected:
        raise DumpError(f"{kind} has {len(params)} params; expected {expected}")
    return params


def _axis(kind: KernelKind, what: str, value: float, rank: int) -> int:
    if not float(value).is_integer() or not 0 <= value < rank:
        raise DumpError(f"{kind} {what} {value:g} is not an axis of its rank-{rank} input; "
                        f"expected an integer in 0..{rank - 1}")
    return int(value)


def _ints(values: list[int]) -> str:
    return ",".join(map(str, values))


def render(params: dict[str, Param]) -> str:
    """`axis=1`, `epsilon=1e-05`, `permutation=0,2,1,3`, `keepdims=true axes=1`."""
    parts = []
    for name, value in params.items():
        if isinstance(value, bool):
            text = str(value).lower()
        elif isinstance(value, list):
            text = _ints(value) or "none"
        elif isinstance(value, float):
            text = f"{value:g}"
        else:
            text = str(value)
        parts.append(f"{name}={text}")
    return " ".join(parts)
