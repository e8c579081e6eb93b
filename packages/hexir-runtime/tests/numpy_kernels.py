"""numpy bodies of every kernel kind: the tests' oracle, not the runtime's code.

The runtime runs compiled kernels (host images on cpu, device images on cuda) and keeps numpy
bodies only for the three version-3 descriptor kinds. The tests still need an independent
answer for every kind: the fake CUDA driver emulates a launch with these bodies, so a
module's cuda path can be checked against its cpu path on a machine without a GPU. Each body
has the numpy/ONNX meaning (relu and max propagate NaN; layer_norm divides by D).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from hexir_format import KernelKind

REDUCE_KINDS = frozenset({KernelKind.REDUCE_SUM, KernelKind.REDUCE_MEAN, KernelKind.REDUCE_MAX})


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
            np.maximum(x, 0, out=out)
        elif kind is KernelKind.SIGMOID:
            out[...] = _sigmoid(inputs[0])
        elif kind is KernelKind.GELU:
            out[...] = _gelu(inputs[0], bool(params and params[0]))
        elif kind is KernelKind.SOFTMAX:
            out[...] = _softmax(inputs[0], int(params[0]))
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
