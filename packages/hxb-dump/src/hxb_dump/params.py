"""A kernel's params (f64 values on disk) read back as the named attributes they encode.

The format stores params as a bare list of doubles; what each one means depends on the kernel
kind (see the format README). Naming them here is what lets a listing say `axis=1` instead of
`1.0`. Whether they are valid is `hexir_format.signatures`' question (the runtime's), asked
first: only params that fit their kind are named.
"""

from __future__ import annotations

from hexir_format import KernelKind, library
from hexir_format.signatures import REDUCE_KINDS

Param = int | float | bool | str | list[int]


def decode(kind: KernelKind, params: tuple[float, ...], name: str = "") -> dict[str, Param]:
    """The named params of a `kind` kernel whose params fit its signature rule (a library
    kernel's: those of the library function `name`, as `hexir_format.library` names them)."""
    if kind is KernelKind.LIBRARY:
        return dict(library.FUNCTIONS[name].decode(params))
    if kind is KernelKind.GELU:
        return {"approximate": "tanh" if params and params[0] else "erf"}
    if kind is KernelKind.SOFTMAX:
        return {"axis": int(params[0])}
    if kind is KernelKind.LAYER_NORM:
        return {"epsilon": params[0]}
    if kind is KernelKind.TRANSPOSE:
        return {"permutation": [int(p) for p in params]}
    if kind in REDUCE_KINDS:
        return {"keepdims": bool(params[0]), "axes": [int(a) for a in params[1:]]}
    return {}


def render(params: dict[str, Param]) -> str:
    """`axis=1`, `epsilon=1e-05`, `permutation=0,2,1,3`, `keepdims=true axes=1`,
    `case_change_action=UPPER is_case_sensitive=1`."""
    parts = []
    for name, value in params.items():
        if isinstance(value, bool):
            text = str(value).lower()
        elif isinstance(value, list):
            text = ",".join(map(str, value)) or "none"
        elif isinstance(value, float):
            text = f"{value:g}"
        else:
            text = str(value)
        parts.append(f"{name}={text}")
    return " ".join(parts)
