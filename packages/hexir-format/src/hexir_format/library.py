"""The runtime's library: the functions a LIBRARY kernel (version 6) names, and their rules.

A LIBRARY executable has no image: the runtime computes it (`hexir_runtime.library`), chosen
by the executable's name, on the cpu. What the compiler may ask of each function -- the
argument types (inputs, then the destination) and the f64 params, which are its attributes
-- is written here once, so that the validator, the runtime and hxb-dump hold a module to
the same rule and name its params alike. Names need not be unique in a module: two string
normalizers with different params are two executables named `string_normalizer`.

Each checker raises `ShapeError` with the diagnostic text (the caller says where); a
function whose signature fits only ever sees arguments of the types it was declared with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hexir_format.dims import Dim
from hexir_format.model import DType, TensorType
from hexir_format.signatures import ShapeError

#: A named param's value as a listing shows it: a number, or the name of an enumerator.
Named = int | str


@dataclass(frozen=True)
class LibraryFunction:
    """One function: its name, what it computes (`doc`), its arguments' names, its params'
    names, and its rule (`check`) and the params' names for values (`decode`, for params
    `check` accepted)."""

    name: str
    doc: str
    args: tuple[str, ...]
    params: tuple[str, ...]
    check: Callable[[tuple[TensorType, ...], tuple[float, ...]], None]
    decode: Callable[[tuple[float, ...]], dict[str, Named]]


# ---- string_normalizer -----------------------------------------------------------------------

#: ONNX StringNormalizer's case_change_action, by the number a param records.
CASE_ACTIONS = {0: "NONE", 1: "LOWER", 2: "UPPER"}


def _strings(what: str, t: TensorType, ranks: tuple[int, ...]) -> None:
    if t.dtype is not DType.STRING or t.rank not in ranks:
        rank = " or ".join(map(str, ranks))
        raise ShapeError(f"{what} is {t}; expected a rank-{rank} tensor of str")


def _row(what: str, t: TensorType) -> Dim:
    """The count of a [C] or [1, C] tensor of strings."""
    _strings(what, t, (1, 2))
    if t.rank == 2 and t.shape[0] != 1:
        raise ShapeError(f"{what} is {t}; a rank-2 one is [1, C]")
    return t.shape[-1]


def _check_string_normalizer(args: tuple[TensorType, ...], params: tuple[float, ...]) -> None:
    if len(args) != 3:
        raise ShapeError(f"takes 3 arguments (x, stopwords, out), not {len(args)}")
    x, stopwords, out = args
    count = _row("x", x)
    _strings("stopwords", stopwords, (1,))
    kept = _row("out", out)
    if out.rank != x.rank:
        raise ShapeError(f"out is {out}; expected the rank of x ({x})")
    if not isinstance(kept, int) or kept < 1 or (isinstance(count, int) and kept > max(count, 1)):
        limit = max(count, 1) if isinstance(count, int) else count
        raise ShapeError(f"out keeps {kept} strings; expected a fixed count from 1 to {limit} "
                         f"(x holds {count}; none left is one empty string)")
    if len(params) != 2:
        raise ShapeError(f"has {len(params)} params; expected 2 (case_change_action, "
                         "is_case_sensitive)")
    action, sensitive = params
    if action not in CASE_ACTIONS:
        raise ShapeError(f"case_change_action is {action:g}; expected 0 (NONE), 1 (LOWER) or "
                         "2 (UPPER)")
    if sensitive not in (0.0, 1.0):
        raise ShapeError(f"is_case_sensitive is {sensitive:g}; expected 0 or 1")


def _decode_string_normalizer(params: tuple[float, ...]) -> dict[str, Named]:
    return {"case_change_action": CASE_ACTIONS[int(params[0])],
            "is_case_sensitive": int(params[1])}


STRING_NORMALIZER = LibraryFunction(
    "string_normalizer",
    "ONNX StringNormalizer: x [C] or [1, C] without the elements equal to a stopword (compared "
    "by casefold() unless is_case_sensitive), each changed to case_change_action's case; none "
    "left is one empty string. The count kept depends on the data: the module fixes it (out's "
    "shape) and a call whose data keep another count is refused.",
    ("x", "stopwords", "out"),
    ("case_change_action", "is_case_sensitive"),
    _check_string_normalizer,
    _decode_string_normalizer,
)

#: Every library function, by the name its executables carry.
FUNCTIONS: dict[str, LibraryFunction] = {f.name: f for f in (STRING_NORMALIZER,)}


def problem(name: str, args: Sequence[TensorType], params: Sequence[float]) -> str | None:
    """Why a LIBRARY kernel named `name` cannot take `args` and `params`, or None: the message
    starts with the function (`library string_normalizer x is 4xf32; ...`)."""
    function = FUNCTIONS.get(name)
    if function is None:
        known = ", ".join(FUNCTIONS)
        return f"library function '{name}' is not one of the runtime's ({known})"
    try:
        function.check(tuple(args), tuple(params))
    except ShapeError as e:
        return f"library {name} {e}"
    return None
