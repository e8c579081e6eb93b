"""The runtime's library: the bodies of LIBRARY kernels (version 6), and a call's strings.

A LIBRARY executable names a function of `hexir_format.library`, whose table holds each
function's rule (argument types, params); validation has held the kernel to it, so a body
sees arguments of the declared types only. The bodies run on the cpu, on the calling thread,
as a step of the interpreter like any kernel, but they also read the call's string table.

A string tensor's elements are int64 handles (`DType.STRING`): handle h names `table[h]`, the
call's table, which starts as the module's strings (`Module.strings`, so a string constant's
handles name those) and to which the call appends its string inputs and what its kernels
make. Each call has a table of its own (`Strings`, in the call's `arena.Call`), so calls on
several threads never see one another's strings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hexir_format import Executable, TensorType
from hexir_format.library import CASE_ACTIONS
from hexir_runtime.errors import ExecutionError


class Strings:
    """One call's string table: the module's strings, then the call's own."""

    __slots__ = ("table",)

    def __init__(self, module_strings: Sequence[str]):
        self.table: list[str] = list(module_strings)

    def add(self, strings: Sequence[str]) -> np.ndarray:
        """Append `strings`; their handles, in order (an int64 array)."""
        start = len(self.table)
        self.table.extend(strings)
        return np.arange(start, len(self.table), dtype=np.int64)

    def read(self, handles: np.ndarray, where: str, what: str) -> list[str]:
        """The strings `handles` name, in order; a one-line ExecutionError for a handle
        outside the table (which a sound module cannot make: no compiled kernel takes
        strings, and a constant's handles are checked at load, but a zeroed buffer or a
        damaged kernel could hand one over)."""
        table, flat = self.table, handles.reshape(-1).tolist()
        try:
            if min(flat, default=0) >= 0:
                return [table[h] for h in flat]
        except IndexError:
            pass
        bad = next(k for k, h in enumerate(flat) if not 0 <= h < len(table))
        raise ExecutionError(f"{where}: {what} element {bad} is handle {flat[bad]}, which names "
                             f"no string (the call has {len(table)})")

    def array(self, handles: np.ndarray, t: TensorType, where: str) -> np.ndarray:
        """A string result as the caller gets it: a numpy str array of the output's shape
        (`<U1` when it is empty)."""
        found = self.read(handles, where, "the result's")
        return np.array(found, dtype=str).reshape(t.static_shape)


def strings_of(where: str, x: Any, t: TensorType) -> np.ndarray | str:
    """A caller's string input as an object array of `str` of `t`'s shape, or why not (one
    line, for the caller to prefix with the input): a numpy array of str (`<U`), of bytes
    (`S`, UTF-8) or of objects that are str, or what numpy makes such an array of (a list)."""
    if not isinstance(x, np.ndarray):
        try:
            x = np.asarray(x)
        except Exception as e:  # noqa: BLE001 (x's own conversion raised)
            return f"got {type(x).__name__} numpy cannot convert ({type(e).__name__}: {e})"
    if isinstance(x, np.ma.MaskedArray):
        return "got a masked array; pass x.filled(value) to say what masked elements hold"
    shape = "x".join(map(str, x.shape)) or "scalar"
    if x.dtype.kind not in "USO":
        return f"got a {x.dtype} array of shape {shape}; strings are given as str (<U), bytes " \
               "(S, UTF-8) or object arrays holding str"
    if x.shape != t.shape:
        return f"got shape {shape}"
    flat = x.reshape(-1).tolist()
    if x.dtype.kind == "S":
        for k, b in enumerate(flat):
            try:
                flat[k] = b.decode("utf-8")
            except UnicodeDecodeError as e:
                return f"element {k} ({b[:32]!r}) is not UTF-8 (byte {e.start}: {e.reason})"
    elif x.dtype.kind == "O":
        for k, v in enumerate(flat):
            if type(v) is not str:
                return f"element {k} is {type(v).__name__} {str(v)[:32]!r}, not a str"
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(x.shape)


# ---- the functions ---------------------------------------------------------------------------

def _string_normalizer(strings: Strings, where: str, exe: Executable, x: np.ndarray,
                       stopwords: np.ndarray, out: np.ndarray) -> None:
    """ONNX StringNormalizer (`hexir_format.library.STRING_NORMALIZER`)."""
    action, sensitive = CASE_ACTIONS[int(exe.params[0])], bool(exe.params[1])
    words = strings.read(x, where, "x")
    stop = strings.read(stopwords, where, "stopwords")
    if sensitive:
        drop = set(stop)
        kept = [w for w in words if w not in drop]
    else:
        drop = {w.casefold() for w in stop}
        kept = [w for w in words if w.casefold() not in drop]
    if action == "LOWER":
        kept = [w.lower() for w in kept]
    elif action == "UPPER":
        kept = [w.upper() for w in kept]
    count = len(kept)
    kept = kept or [""]  # ONNX: nothing left is one empty string
    if len(kept) != out.size:
        raise ExecutionError(f"{where} kept {count} of {len(words)} strings; the module was "
                             f"compiled for {out.size} (the model's declared output shape)")
    out.reshape(-1)[:] = strings.add(kept)


Body = Callable[..., None]

#: Each library function's body, by name: (strings, where, exe, *inputs, out).
FUNCTIONS: dict[str, Body] = {"string_normalizer": _string_normalizer}


def run(name: str, strings: Strings, where: str, exe: Executable, args: Sequence[np.ndarray]
        ) -> None:
    """Run library function `name` on `args` (typed views: a string tensor's handles), which
    validation has checked against its rule."""
    FUNCTIONS[name](strings, where, exe, *args)

