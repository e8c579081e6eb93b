"""Reference kernels in numpy: the bodies of cpu kernel descriptors, and their type rules.

A cpu executable in a `.hxb` is a description (kind, argument types, params); the runtime
supplies the body. `signature_problem` is the type rule of each kind, checked before anything
runs so a body only ever sees arguments of the shapes it was declared with; `run` is the
body. The same bodies are the oracle the CUDA backend is tested against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from hexir_format import BINARY_KINDS, KernelKind, TensorType

UNARY_KINDS = frozenset({KernelKind.RELU, KernelKind.SIGMOID, KernelKind.TANH, KernelKind.EXP,
                         KernelKind.SQRT, KernelKind.NEG, KernelKind.GELU, KernelKind.SOFTMAX})
REDUCE_KINDS = frozenset({KernelKind.REDUCE_SUM, KernelKind.REDUCE_MEAN, KernelKind.REDUCE_MAX})


# ---- type rules ------------------------------------------------------------------------------

def _ints(params: Sequence[float], what: str) -> tuple[int, ...]:
    for p in params:
        if not math.isfinite(p) or p != int(p):
            raise ValueError(f"{what} {p!r} is not an integer")
    return tuple(int(p) for p in params)


def _reduce_shape(x: tuple[int, ...], params: Sequence[float]) -> tuple[int, ...]:
    if not params:
        raise ValueError("reduction has no keepdims param")
    keepdims, *axes = _ints(params, "reduction param")
    if keepdims not in (0, 1):
        raise ValueError(f"keepdims {keepdims} is not 0 or 1")
    axes = axes or list(range(len(x)))
    if any(not 0 <= a < len(x) for a in axes) or len(set(axes)) != len(axes):
        raise ValueError(f"axes {axes} are not distinct axes of a rank-{len(x)} tensor")
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in axes)


def expected_destination(kind: KernelKind, inputs: Sequence[TensorType],
                         params: Sequence[float]) -> tuple[int, ...]:
    """The destination shape the kind computes from its inputs; ValueError when none fits."""
    shapes = [t.shape for t in inputs]
    if kind is KernelKind.MATMUL:
        # numpy's rule: a vector operand (a [K] or b [K]) gains a unit row / column, which the
        # result then drops; `hexir.linear` of an [K] input is the common case.
        a, b = shapes
        if not a or not b:
            raise ValueError(f"matmul needs rank >= 1 operands, got {inputs[0]} and {inputs[1]}")
        a2, b2 = (a if len(a) > 1 else (1, *a)), (b if len(b) > 1 else (*b, 1))
        if a2[-1] != b2[-2]:
            raise ValueError(f"matmul inner dimensions differ: {a2[-1]} vs {b2[-2]}")
        rows, cols = ((a2[-2],) if len(a) > 1 else ()), ((b2[-1],) if len(b) > 1 else ())
        return (*np.broadcast_shapes(a2[:-2], b2[:-2]), *rows, *cols)
    if kind in BINARY_KINDS:
        return np.broadcast_shapes(*shapes)
    x = shapes[0]
    if kind is KernelKind.GELU and not (len(params) <= 1 and set(params) <= {0.0, 1.0}):
        raise ValueError(f"gelu takes one param, approximate 0 or 1; got {list(params)}")
    if kind is KernelKind.SOFTMAX:
        if len(params) > 1:
            raise ValueError(f"softmax takes one param, the axis; got {list(params)}")
        (axis,) = _ints(params, "softmax axis") if params else (len(x) - 1,)
        if not 0 <= axis < len(x):
            raise ValueError(f"softmax axis {axis} is not an axis of a rank-{len(x)} tensor")
    if kind in UNARY_KINDS:
        return x
    if kind is KernelKind.LAYER_NORM:
        if not x or shapes[1] != (x[-1],) or shapes[2] != (x[-1],):
            raise ValueError(f"layer_norm of {inputs[0]} needs gamma and beta of shape "
                             f"[{x[-1] if x else '?'}], got {inputs[1]} and {inputs[2]}")
        if len(params) != 1 or not (math.isfinite(params[0]) and params[0] >= 0):
            raise ValueError(f"layer_norm takes one finite epsilon >= 0, got {list(params)}")
        return x
    if kind is KernelKind.TRANSPOSE:
        perm = _ints(params, "permutation entry")
        if sorted(perm) != list(range(len(x))):
            raise ValueError(f"{list(perm)} is not a permutation of {len(x)} axes")
        return tuple(x[p] for p in perm)
    if kind in REDUCE_KINDS:
        return _reduce_shape(x, params)
    raise ValueError(f"no type rule for {kind}")


def signature_problem(kind: KernelKind, args: Sequence[TensorType],
                      params: Sequence[float]) -> str | None:
    """Why `args` (inputs then destination) and `params` do not fit `kind`, or None."""
    if len(args) != kind.arity + 1:
        return f"{kind} takes {kind.arity + 1} arguments, not {len(args)}"
    dtypes = {t.dtype for t in args}
    if len(dtypes) != 1:
        return f"{kind} mixes element types: {', '.join(map(str, args))}"
    *inputs, out = args
    if kind is KernelKind.RESHAPE:
        if inputs[0].size != out.size:
            return f"reshape of {inputs[0]} to {out} changes the element count"
        return None
    if kind is KernelKind.REDUCE_MAX and inputs[0].size == 0:
        return f"reduce_max of the empty tensor {inputs[0]} has no value"
    try:
        want = expected_destination(kind, inputs, params)
    except ValueError as e:
        return str(e)
    if tuple(want) != out.shape:
        shape = "x".join(map(str, want)) or "scalar"
        return f"{kind} of {', '.join(map(str, inputs))} gives {shape}, destination is {out}"
    return None


# ---- bodies ----------------------------------------------------------------------------------

_SQRT_PI = math.sqrt(math.pi)
_ERF_SPLIT = 2.5  # series below, continued fraction above: each accurate to ~1e-15 there
_ERFC_TERMS = 24


def erf(x: np.ndarray) -> np.ndarray:
    """erf in float64, vectorized, within ~2e-15 relative of `math.erf`.

    |x| < 2.5: erf(x) = 2/sqrt(pi) e^(-x^2) sum_n (2x^2)^n x / (2n+1)!!, all terms positive
    (no cancellation); 2.5 <= |x| < 6: 1 - erfc(x) with erfc's continued fraction
    e^(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))); beyond 6, erf is 1 in f64.
    """
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    out = np.ones_like(a)
    near = a < _ERF_SPLIT
    s = a[near]
    term, total, two_s2 = s.copy(), s.copy(), 2 * s * s
    n = 1
    while np.any(term > 1e-17 * total):
        term *= two_s2 / (2 * n + 1)
        total += term
        n += 1
    out[near] = (2 / _SQRT_PI) * np.exp(-s * s) * total
    mid = ~near & (a < 6)
    b = a[mid]
    f = b.copy()
    for k in range(_ERFC_TERMS, 0, -1):
        f = b + (k / 2) / f
    out[mid] = 1 - np.exp(-b * b) / _SQRT_PI / f
    out = np.copysign(out, x)
    out[np.isnan(x)] = np.nan
    return out


def _gelu(x: np.ndarray, approximate: bool) -> np.ndarray:
    x64 = x.astype(np.float64)
    if approximate:
        inner = math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)
        return 0.5 * x64 * (1 + np.tanh(inner))
    return 0.5 * x64 * (1 + erf(x64 / math.sqrt(2)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # 1/(1+e^-x) for x >= 0 and e^x/(1+e^x) below, so neither side overflows.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return shifted / np.sum(shifted, axis=axis, keepdims=True)


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _reduce(kind: KernelKind, x: np.ndarray, params: Sequence[float]) -> np.ndarray:
    keepdims, *axes = (int(p) for p in params)
    axis = tuple(axes) if axes else None
    fn = {KernelKind.REDUCE_SUM: np.sum, KernelKind.REDUCE_MEAN: np.mean,
          KernelKind.REDUCE_MAX: np.max}[kind]
    return fn(x, axis=axis, keepdims=bool(keepdims))


_ELEMENTWISE = {
    KernelKind.ADD: np.add, KernelKind.SUB: np.subtract, KernelKind.MUL: np.multiply,
    KernelKind.DIV: np.divide, KernelKind.TANH: np.tanh, KernelKind.EXP: np.exp,
    KernelKind.SQRT: np.sqrt, KernelKind.NEG: np.negative,
}


def run(kind: KernelKind, params: Sequence[float], inputs: Sequence[np.ndarray],
        out: np.ndarray) -> None:
    """Compute `kind` of `inputs` into `out`, whose shapes passed `signature_problem`."""
    with np.errstate(all="ignore"):  # inf/nan are results here, not errors
        if kind is KernelKind.MATMUL:
            np.matmul(inputs[0], inputs[1], out=out)
        elif kind in _ELEMENTWISE:
            _ELEMENTWISE[kind](*inputs, out=out)
        elif kind is KernelKind.RELU:
            x = inputs[0]
            out[...] = np.where(x > 0, x, 0)  # NaN -> 0, like the C reference `x > 0 ? x : 0`
        elif kind is KernelKind.SIGMOID:
            out[...] = _sigmoid(inputs[0])
        elif kind is KernelKind.GELU:
            out[...] = _gelu(inputs[0], bool(params and params[0]))
        elif kind is KernelKind.SOFTMAX:
            out[...] = _softmax(inputs[0], int(params[0]) if params else -1)
        elif kind is KernelKind.LAYER_NORM:
            out[...] = _layer_norm(*inputs, params[0])
        elif kind is KernelKind.TRANSPOSE:
            out[...] = np.transpose(inputs[0], [int(p) for p in params])
        elif kind is KernelKind.RESHAPE:
            out[...] = inputs[0].reshape(out.shape)
        elif kind in REDUCE_KINDS:
            out[...] = _reduce(kind, inputs[0], params)
        else:
            raise ValueError(f"no reference body for {kind}")
