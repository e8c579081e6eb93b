"""The one place that imports the MLIR Python bindings.

Today they come from `numba-cuda-mlir` (pinned exactly in pyproject.toml), which bundles a
complete upstream build as `numba_cuda_mlir._mlir`. When the LLVM project's own wheels reach
PyPI, only this module changes. Everything else imports `ir`, `passmanager` and the upstream
dialects it builds ops of from here (only those: the passes reach every other dialect by
name). `ext` (Python-defined dialects) is re-exported for
`hexir_compiler.dialects` only: that API is young, and keeping it in one folder keeps its
churn there.
"""

import ctypes
import importlib.util
import os
import sys
from pathlib import Path

#: The numba-cuda-mlir release whose package `__init__` `_bindings_only` stands in for (the
#: exact pin in pyproject.toml); any other release is imported as it is.
_KNOWN_RELEASE = "0.6.0"

#: The bundled libraries that release's `__init__` preloads, in its order.
_DEEPBIND = ("libMLIRPythonCAPI.so", "libMLIRPythonSupport-numba_cuda_mlir.so",
             "libMLIRToLLVM70.so", "libMLIRModernToNVVM.so")


def _bindings_only() -> None:
    """Registers the `numba_cuda_mlir` package with only what its MLIR bindings need.

    The package's `__init__` does three things: it preloads the bundled LLVM/MLIR libraries
    with RTLD_DEEPBIND (so llvmlite's LLVM, in the same process, cannot preempt their
    symbols), lets Python classes derive from nanobind's metaclass (`numba_cuda_mlir.mlir`),
    and imports its CUDA JIT to re-export `carray` and `farray`. The last is 1.9 s of the 2.5 s
    a `hexir` command took to start, for names Hexir never uses. So where the package is not
    imported yet and is the release this was checked against, the package module is made
    here with the first two steps (the third stays reachable: `carray` and `farray` import it
    on first use); anything else imports the package as it is."""
    if "numba_cuda_mlir" in sys.modules:
        return
    spec = importlib.util.find_spec("numba_cuda_mlir")
    if spec is None or spec.origin is None:
        return  # not installed: the import below says so
    root = Path(spec.origin).parent
    try:
        release = (root / "VERSION").read_text().strip()
    except OSError:
        return
    if release != _KNOWN_RELEASE or not sys.platform.startswith("linux"):
        return
    package = importlib.util.module_from_spec(spec)
    mode = os.RTLD_NOW | os.RTLD_LOCAL | getattr(os, "RTLD_DEEPBIND", 0)
    handles = [ctypes.CDLL(str(lib), mode=mode)
               for lib in (root / "_mlir" / "_mlir_libs" / name for name in _DEEPBIND)
               if lib.exists()]
    vars(package).update(__version__=release, __getattr__=_jit_names,
                         _mlir_deepbind_handles=handles)
    sys.modules["numba_cuda_mlir"] = package
    importlib.import_module("numba_cuda_mlir.mlir")  # the metaclass step, on import


def _jit_names(name: str) -> object:
    """The package's JIT re-exports, imported when first asked for."""
    if name in ("carray", "farray"):
        support = importlib.import_module("numba_cuda_mlir.numba_cuda.np.numpy_support")
        return getattr(support, name)
    raise AttributeError(f"module 'numba_cuda_mlir' has no attribute {name!r}")


_bindings_only()

from numba_cuda_mlir._mlir import ir, passmanager  # noqa: E402
from numba_cuda_mlir._mlir.dialects import (  # noqa: E402
    arith,
    ext,
    func,
    gpu,
    llvm,
    math,
    memref,
    scf,
    vector,
)

PROVIDER = "numba_cuda_mlir._mlir"


def defining_op(value: ir.Value) -> ir.Operation | None:
    """The op that defines `value`, None for a block argument. The bindings give an op
    result's `owner` as an OpView where its dialect has Python classes and as an Operation
    where not, and a block argument's as its Block."""
    owner = value.owner
    owner = owner.operation if isinstance(owner, ir.OpView) else owner
    return owner if isinstance(owner, ir.Operation) else None


__all__ = ["PROVIDER", "arith", "defining_op", "ext", "func", "gpu", "ir", "llvm", "math",
           "memref", "passmanager", "scf", "vector"]
