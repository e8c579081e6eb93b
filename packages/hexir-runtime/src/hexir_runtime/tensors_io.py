"""Tensors on the command line and in files, with `iree-run-module`'s conventions.

`--input=2x2xf32=1,2,3,4` (values separated by commas or spaces; one value fills the tensor;
integers for i32 and i64, 1/0 or true/false for i1, words for str), `--input=f64=3` (a scalar),
`--input=@x.npy` (one array), `--input=@inputs.npz` (its arrays named as the entry's inputs,
when the module names them and the file has any of those names; else its arrays `input_0`,
`input_1`, ... in that order when it has any, so one file can hold a test's inputs and its
expected outputs; else every array, in file order). `NAME=` in front of a typed literal or
an `@FILE.npy` gives the input NAME. `--output=@out.npz` writes every result under the
entry's output names (`output_0`, `output_1`, ... where the module names none); `@out.npy`
the only result. Both go to an unnamed file beside the target, linked into place, so a failed
run never leaves half a file.
"""

from __future__ import annotations

import math
import os
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from hexir_format import DType, TensorType
from hexir_format.files import atomic_write, open_regular
from hexir_runtime.errors import InputError
from hexir_runtime.validate import DEFAULT_MAX_ALLOC_BYTES

#: What a text literal of each kind of element type takes (i1: 1/0 or true/false).
WORDS = {"f": "numbers", "i": "integers in the range of {dtype}", "b": "1, 0, true or false"}
BOOLS = {"1": True, "0": False, "true": True, "false": False}


@dataclass(frozen=True)
class Given:
    """What one `--input=` stands for: arrays for the next inputs by position, or one for the
    input `name`; or a .npz's arrays by key (`archive`), which only the entry's input names
    can place, so they are placed once the module is loaded (`gather`)."""

    text: str
    arrays: tuple[np.ndarray, ...] = ()
    name: str | None = None
    archive: Mapping[str, np.ndarray] | None = None


def parse_input(text: str) -> Given:
    """What one `--input=` value stands for: `[NAME=]TYPE=VALUES`, `[NAME=]@FILE.npy` or
    `@FILE.npz` (a name, before the last two `=` of a literal, may itself hold `=`)."""
    name, at, path = (None, "@", text[1:]) if text.startswith("@") else text.partition("=@")
    if at:
        loaded = _load_file(text, path)
        if isinstance(loaded, np.ndarray):
            return Given(text, (loaded,), name)
        if name is not None:
            raise InputError(f"--input={text}: a .npz holds several arrays, placed by their "
                             f"names; give it as --input=@{path}")
        return Given(text, archive=loaded)
    parts = text.rsplit("=", 2)
    if len(parts) < 2 or not all(parts[:-1]):
        raise InputError(f"--input={text}: expected [NAME=]TYPE=VALUES (e.g. 2x2xf32=1,2,3,4) "
                         "or [NAME=]@FILE.npy / @FILE.npz")
    *named, spec, values = parts
    try:
        t = TensorType.parse(spec)
    except ValueError as e:
        raise InputError(f"--input={text}: {e}") from None
    if not t.is_static:
        raise InputError(f"--input={text}: {spec} has a symbolic dimension; give each size "
                         "(e.g. 2x3xf32=...)")
    shape = t.static_shape
    if math.prod(max(d, 1) for d in shape) * t.dtype.itemsize > DEFAULT_MAX_ALLOC_BYTES:
        raise InputError(f"--input={text}: {spec} spans more than {DEFAULT_MAX_ALLOC_BYTES} "
                         "bytes, the most one run may allocate (counting a 0 dimension as 1)")
    flat = _values(text, values.replace(",", " ").split(), t.dtype)
    size = math.prod(shape)
    if len(flat) == 1 and size != 1:
        try:
            flat = np.full(size, flat[0], dtype=flat.dtype)
        except MemoryError:
            raise InputError(f"--input={text}: cannot allocate the {t.nbytes} bytes of a "
                             f"{spec}") from None
    if len(flat) != size:
        raise InputError(f"--input={text}: {t} holds {size} values, {len(flat)} given")
    return Given(text, (flat.reshape(shape),), named[0] if named else None)


def _values(text: str, words: list[str], dtype: DType) -> np.ndarray:
    """The words of a literal as `dtype` values, each exact: an integer type takes integers
    within its range, i1 takes 1, 0, true or false."""
    if dtype is DType.STRING:  # words without commas or spaces: any other in a .npy
        return np.array(words, dtype=str)
    kind = np.dtype(dtype.numpy).kind
    try:
        if kind == "b":
            return np.array([BOOLS[w.lower()] for w in words], dtype=bool)
        convert = float if kind == "f" else int
        return np.array([convert(w) for w in words], dtype=dtype.numpy)
    except (KeyError, ValueError, OverflowError):
        what = WORDS[kind].format(dtype=dtype.numpy)
        raise InputError(f"--input={text}: values must be {what} separated by commas") from None


def _load_file(text: str, path: str) -> np.ndarray | dict[str, np.ndarray]:
    """A .npy's array, or every array of a .npz by key, in file order."""
    try:
        with open_regular(path) as f:
            loaded = np.load(f, allow_pickle=False)
            if isinstance(loaded, np.ndarray):
                return loaded
            with loaded:
                return {key: loaded[key] for key in loaded.files}
    except OSError as e:
        raise InputError(f"--input={text}: cannot read: {e.strerror or e}") from None
    except (ValueError, EOFError, zipfile.BadZipFile) as e:
        raise InputError(f"--input={text}: not a .npy or .npz file ({e})") from None
    except MemoryError:
        raise InputError(f"--input={text}: cannot allocate its arrays") from None


def gather(given: list[Given], names: tuple[str, ...]
           ) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """The `--input`s as an entry with input `names` takes them: by position, in order,
    and by name (`EntryPoint.check_inputs` refuses a name the entry does not have)."""
    positional: list[np.ndarray] = []
    named: dict[str, np.ndarray] = {}
    for g in given:
        pairs = [(g.name, a) for a in g.arrays] if g.archive is None else \
            _from_archive(g.text, g.archive, names)
        for name, array in pairs:
            if name is None:
                positional.append(array)
            elif name in named:
                raise InputError(f"--input={g.text}: input '{name}' is given twice")
            else:
                named[name] = array
    return positional, named


def _from_archive(text: str, archive: Mapping[str, np.ndarray], names: tuple[str, ...]
                  ) -> list[tuple[str | None, np.ndarray]]:
    """A .npz's arrays: those named as the entry's inputs (by name), else `input_<i>` (by
    position), else every array in file order (by position)."""
    if keyed := [key for key in archive if key in names]:
        return [(key, archive[key]) for key in keyed]
    indexed = sorted((int(n[6:]), n) for n in archive if re.fullmatch(r"input_\d+", n))
    if indexed and [i for i, _ in indexed] != list(range(len(indexed))):
        raise InputError(f"--input={text}: arrays {', '.join(n for _, n in indexed)} skip "
                         f"an index; expected input_0 to input_{len(indexed) - 1}")
    return [(None, archive[key]) for key in ([n for _, n in indexed] or archive)]


def output_path(target: str) -> str:
    """The file an `--output=@FILE` names, checked before anything runs."""
    path = target[1:]
    if not target.startswith("@") or not path.endswith((".npy", ".npz")):
        raise InputError(f"--output={target}: expected @FILE.npz or @FILE.npy")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise InputError(f"--output={target}: cannot write in {directory}: no such directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"--output={target}: cannot write in {directory}: permission denied")
    return path


def write_outputs(target: str, results: Mapping[str, np.ndarray]) -> None:
    """Write results to `@path.npz` (each under its name) or `@path.npy` atomically."""
    path = output_path(target)
    if path.endswith(".npy") and len(results) != 1:
        raise InputError(f"--output={target}: a .npy file holds one array, the entry returned "
                         f"{len(results)}; use a .npz file")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        with atomic_write(path) as out:
            if path.endswith(".npy"):
                (only,) = results.values()
                np.save(out, only)
            else:
                _savez(out, results)
    except OSError as e:
        raise InputError(f"--output={target}: cannot write in {directory}: "
                         f"{e.strerror or e}") from None


def _savez(out, arrays: Mapping[str, np.ndarray]) -> None:
    """`np.savez(out, **arrays)`, whose own parameters (`file`, `allow_pickle`) an output's
    name from the module could otherwise be taken for."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)
