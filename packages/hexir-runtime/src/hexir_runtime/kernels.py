"""The numpy bodies of the cpu kernel descriptors that version 3 has: matmul, add, relu.

Since version 5 a cpu kernel carries compiled code (a host image); versions 3 and 4 only
describe it (kind, argument types) and leave the body to the runtime. The runtime keeps the
bodies of the three kinds version 3 can describe, so the seed's modules (the 488-byte
built-in program among them) still run; validation refuses a descriptor of any other kind
before anything runs. Each body has the numpy meaning (relu of NaN is NaN).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hexir_format import KernelKind

BODIES: dict[KernelKind, Callable[..., Any]] = {
    KernelKind.MATMUL: np.matmul,
    KernelKind.ADD: np.add,
    KernelKind.RELU: lambda x, out: np.maximum(x, 0, out=out),
}


def run(kind: KernelKind, inputs: Sequence[np.ndarray], out: np.ndarray) -> None:
    """Compute `kind` of `inputs` into `out`, whose types validation has checked."""
    with np.errstate(all="ignore"):  # inf/nan are results here, not errors
        BODIES[kind](*inputs, out=out)
