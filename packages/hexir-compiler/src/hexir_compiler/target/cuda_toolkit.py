"""Find the CUDA toolkit pieces device-code generation needs: ptxas, fatbinary, libdevice.

MLIR's NVPTX backend turns a kernel into PTX by itself; turning PTX into a CUBIN (`ptxas`),
wrapping images into a fatbin (`fatbinary`) and resolving the `__nv_*` math functions
(`libdevice.10.bc`) need the toolkit. Where it lives differs by distribution, so the lookup
is explicit and its misses are reported in full:

1. The first of `CUDA_ROOT`, `CUDA_HOME`, `CUDA_PATH` that is set (and not empty) is the only
   place looked at: a user who names a toolkit gets that toolkit or an error, never a
   silent substitute.
2. Otherwise the usual locations, in order: /usr/local/cuda, /usr/lib/nvidia-cuda-toolkit
   (Debian/Ubuntu), /usr/lib/cuda, /opt/cuda; then `ptxas` / `fatbinary` on PATH.

Each piece is looked up on its own, because distributions split them (Debian keeps ptxas in
/usr/bin and libdevice under /usr/lib/nvidia-cuda-toolkit/libdevice).
"""

import functools
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from hexir_compiler.errors import CompileError

ENV_VARS = ("CUDA_ROOT", "CUDA_HOME", "CUDA_PATH")
USUAL_ROOTS = ("/usr/local/cuda", "/usr/lib/nvidia-cuda-toolkit", "/usr/lib/cuda", "/opt/cuda")
LIBDEVICE = "libdevice.10.bc"
# Inside a root: the toolkit layout, then Debian's flat one.
LIBDEVICE_DIRS = ("nvvm/libdevice", "libdevice")


@dataclass(frozen=True)
class Lookup:
    """Where the toolkit is searched: candidate roots, whether PATH counts, and why."""

    roots: tuple[Path, ...]
    use_path: bool
    origin: str  # "CUDA_ROOT=/x" or "the usual locations", for error messages


def lookup_from(env: Mapping[str, str]) -> Lookup:
    """The search the environment asks for (see the module docstring)."""
    for var in ENV_VARS:
        if env.get(var):
            return Lookup((Path(env[var]),), use_path=False, origin=f"{var}={env[var]}")
    return Lookup(tuple(Path(r) for r in USUAL_ROOTS), use_path=True, origin="the usual locations")


def find_tool(name: str, env: Mapping[str, str] | None = None) -> Path:
    """The toolkit executable `name` (ptxas, fatbinary), or a CompileError listing the misses."""
    env = os.environ if env is None else env
    lookup = lookup_from(env)
    candidates = [root / "bin" / name for root in lookup.roots]
    for path in candidates:
        if os.access(path, os.X_OK) and path.is_file():
            return path
    if lookup.use_path and (found := shutil.which(name, path=env.get("PATH"))):
        return Path(found)
    _missing(name, candidates, lookup)


def find_libdevice(env: Mapping[str, str] | None = None) -> Path:
    """libdevice.10.bc, which f32/f64 math functions (erf, tanh, exp ...) are linked from."""
    env = os.environ if env is None else env
    lookup = lookup_from(env)
    candidates = [root / d / LIBDEVICE for root in lookup.roots for d in LIBDEVICE_DIRS]
    if lookup.use_path and (ptxas := shutil.which("ptxas", path=env.get("PATH"))):
        # A toolkit found through PATH keeps libdevice next to its bin/ directory.
        root = Path(ptxas).resolve().parent.parent
        candidates += [root / d / LIBDEVICE for d in LIBDEVICE_DIRS]
    for path in candidates:
        if path.is_file():
            return path
    _missing(LIBDEVICE, candidates, lookup)


def _missing(name: str, candidates: list[Path], lookup: Lookup) -> NoReturn:
    looked = ", ".join(str(c) for c in candidates)
    if lookup.use_path and name != LIBDEVICE:
        looked += f", and '{name}' on PATH"
    hint = "point CUDA_ROOT at a CUDA toolkit"
    if lookup.use_path:
        hint = "install the CUDA toolkit or " + hint
    raise CompileError(
        f"CUDA toolkit: {name} not found (searched {lookup.origin}: {looked}); {hint}"
    )


@dataclass(frozen=True)
class CudaToolkit:
    """The three pieces, resolved together so a compile fails before it starts."""

    ptxas: Path
    fatbinary: Path
    libdevice: Path


def find_toolkit(env: Mapping[str, str] | None = None) -> CudaToolkit:
    """Resolve ptxas, fatbinary and libdevice; cached per environment and search list."""
    env = os.environ if env is None else env
    return _find_cached(tuple(env.get(var, "") for var in _KEY_VARS), USUAL_ROOTS)


_KEY_VARS = (*ENV_VARS, "PATH")


@functools.cache
def _find_cached(values: tuple[str, ...], usual_roots: tuple[str, ...]) -> CudaToolkit:
    # usual_roots only keys the cache (lookup_from reads USUAL_ROOTS), so tests may patch it.
    env = dict(zip(_KEY_VARS, values, strict=True))
    return CudaToolkit(find_tool("ptxas", env), find_tool("fatbinary", env), find_libdevice(env))
