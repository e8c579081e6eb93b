"""Tensors on the command line and in files, with `iree-run-module`'s conventions.

`--input=2x2xf32=1,2,3,4` (values separated by commas or spaces; one value fills the tensor),
`--input=f64=3` (a scalar), `--input=@x.npy` (one array), `--input=@inputs.npz` (its arrays
named `input_0`, `input_1`, ... in that order when it has any, so one file can hold a test's
inputs and its expected `output_<i>`; else every array, in file order). `--output=@out.npz`
writes every result as `output_0`, `output_1`, ...; `@out.npy` the only result. Both go to
a temporary file beside the target, renamed into place, so a failed run never leaves half a
file.
"""

from __future__ import annotations

import math
import os
import re
import zipfile
from collections.abc import Sequence

import numpy as np
from hexir_format import TensorType
from hexir_format.files import atomic_write, open_regular

from hexir_runtime.errors import InputError
from hexir_runtime.validate import DEFAULT_MAX_ALLOC_BYTES


def parse_input(text: str) -> list[np.ndarray]:
    """The arrays one `--input=` value stands for."""
    if text.startswith("@"):
        return _load_file(text[1:])
    spec, sep, values = text.partition("=")
    if not sep:
        raise InputError(f"--input={text}: expected TYPE=VALUES (e.g. 2x2xf32=1,2,3,4) or "
                         "@FILE.npy / @FILE.npz")
    try:
        t = TensorType.parse(spec)
    except ValueError as e:
        raise InputError(f"--input={text}: {e}") from None
    if math.prod(max(d, 1) for d in t.shape) * t.dtype.itemsize > DEFAULT_MAX_ALLOC_BYTES:
        raise InputError(f"--input={text}: {spec} spans more than {DEFAULT_MAX_ALLOC_BYTES} "
                         "bytes, the most one run may allocate (counting a 0 dimension as 1)")
    words = values.replace(",", " ").split()
    try:
        flat = np.array([float(w) for w in words], dtype=t.dtype.numpy)
    except ValueError:
        raise InputError(f"--input={text}: values must be numbers separated by commas") from None
    if len(flat) == 1 and t.size != 1:
        try:
            flat = np.full(t.size, flat[0], dtype=flat.dtype)
        except MemoryError:
            raise InputError(f"--input={text}: cannot allocate the {t.nbytes} bytes of a "
                             f"{spec}") from None
    if len(flat) != t.size:
        raise InputError(f"--input={text}: {t} holds {t.size} values, {len(flat)} given")
    return [flat.reshape(t.shape)]


def _load_file(path: str) -> list[np.ndarray]:
    try:
        with open_regular(path) as f:
            return _arrays(path, np.load(f, allow_pickle=False))
    except OSError as e:
        raise InputError(f"--input=@{path}: cannot read: {e.strerror or e}") from None
    except (ValueError, EOFError, zipfile.BadZipFile) as e:
        raise InputError(f"--input=@{path}: not a .npy or .npz file ({e})") from None
    except MemoryError:
        raise InputError(f"--input=@{path}: cannot allocate its arrays") from None


def _arrays(path: str, loaded) -> list[np.ndarray]:
    if isinstance(loaded, np.ndarray):
        return [loaded]
    with loaded:
        named = sorted((int(n[6:]), n) for n in loaded.files if re.fullmatch(r"input_\d+", n))
        if named and [i for i, _ in named] != list(range(len(named))):
            raise InputError(f"--input=@{path}: arrays {', '.join(n for _, n in named)} skip "
                             f"an index; expected input_0 to input_{len(named) - 1}")
        return [loaded[name] for name in ([n for _, n in named] or loaded.files)]


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


def write_outputs(target: str, arrays: Sequence[np.ndarray]) -> None:
    """Write results to `@path.npz` (as `output_<i>`) or `@path.npy` atomically."""
    path = output_path(target)
    if path.endswith(".npy") and len(arrays) != 1:
        raise InputError(f"--output={target}: a .npy file holds one array, the entry returned "
                         f"{len(arrays)}; use a .npz file")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        with atomic_write(path) as out:
            if path.endswith(".npy"):
                np.save(out, arrays[0])
            else:
                np.savez(out, **{f"output_{i}": a for i, a in enumerate(arrays)})
    except OSError as e:
        raise InputError(f"--output={target}: cannot write in {directory}: "
                         f"{e.strerror or e}") from None
