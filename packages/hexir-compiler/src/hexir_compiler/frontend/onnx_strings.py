"""ONNX's string ops: StringNormalizer, as `hexir.string_normalizer`.

A string tensor is a graph input or output, or a value these ops compute; the runtime
computes them (its library kernels: `hexir_format.library`), and no compiled kernel reads a
string, so every other op that reads one is refused naming it (`onnx_ops.TAKES_STRINGS`).

StringNormalizer's result length depends on the data (the stopwords it drops), and a module's
sizes come from its inputs' shapes only: with stopwords, the result has the length the model
declares for it (its graph output's or value_info's shape), and the runtime refuses a call
whose data gives another; a model that declares none is refused here. With no stopwords the
result is the input's shape.
"""

from __future__ import annotations

from hexir_compiler.dialects.hexir import CASE_CHANGE_ACTIONS
from hexir_compiler.frontend.onnx import STRING_DTYPE
from hexir_compiler.frontend.onnx_ops import TAKES_STRINGS, NodeError, _string, handles
from hexir_compiler.mlir import ir

TAKES_STRINGS.add("StringNormalizer")

#: The locales whose case mapping is Unicode's default, which the runtime applies (Python's
#: `str.lower`/`upper`); another (a Turkish dotted i) would be computed differently.
_LOCALES = ("", "C", "POSIX", "en", "en_US", "en_US.UTF-8", "en-US")


@handles("StringNormalizer", 10)
def _string_normalizer(e, xs, a, v):
    x = xs[0]
    if x.dtype != STRING_DTYPE:
        raise NodeError(f"input is {x.dtype}; StringNormalizer takes strings")
    action = _string(a, "case_change_action", "NONE")
    if action not in CASE_CHANGE_ACTIONS:
        raise NodeError(f"case_change_action '{action}' is not one of "
                        f"{', '.join(CASE_CHANGE_ACTIONS)}")
    locale = _string(a, "locale", "")
    if locale not in _LOCALES:
        raise NodeError(f"locale '{locale}': Hexir changes case by Unicode's default mapping "
                        f"(the en_US one), not that locale's")
    words = [w.decode() if isinstance(w, bytes) else w for w in a.get("stopwords", [])]
    if len(x.shape) not in (1, 2) or (len(x.shape) == 2 and x.shape[0] != 1):
        raise NodeError(f"input has shape {list(x.shape)}; StringNormalizer takes [C] or [1, C]")
    shape = tuple(x.shape) if not words else _declared_length(e, x)
    return [e.op("string_normalizer", [x], shape, STRING_DTYPE, case_change_action=action,
                 is_case_sensitive=bool(a.get("is_case_sensitive", 0)),
                 stopwords=ir.ArrayAttr.get([ir.StringAttr.get(w) for w in words]))]


def _declared_length(e, x) -> tuple[int, ...]:
    """The result's shape as the model declares it: [C'] or [1, C'], C' a number."""
    name = e.current.output[0]
    declared = e.importer.declared.get(name)
    dims = [d.dim_value if d.HasField("dim_value") else None for d in declared.dim] \
        if declared is not None else None
    if dims is None or len(dims) != len(x.shape) or None in dims or (
            len(dims) == 2 and dims[0] != 1):
        found = "declares none" if dims is None else \
            f"declares {['?' if d is None else d for d in dims]}"
        raise NodeError(f"with stopwords its result's length depends on the data; Hexir takes "
                        f"it from the shape the model declares for '{name}' "
                        f"({'[1, C]' if len(x.shape) == 2 else '[C]'}, C a number), and the "
                        f"model {found}")
    return tuple(d for d in dims if d is not None)  # (none is: checked above)
