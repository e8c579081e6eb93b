"""IEEE 754-2019 maximum and minimum, the meaning of `arith.maximumf` / `minimumf` (and of
hexir's float `max` / `min`): the reference the kernels' tests compare with."""

from __future__ import annotations

import math


def extremum(op: str, x: float, y: float) -> float:
    """`op` ("max" or "min") of x and y: a NaN wins; of two zeros, max takes +0 and min -0."""
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if x == y == 0:
        signs = {math.copysign(1, x), math.copysign(1, y)}
        if op == "max":
            return 0.0 if 1 in signs else -0.0
        return -0.0 if -1 in signs else 0.0
    return max(x, y) if op == "max" else min(x, y)
