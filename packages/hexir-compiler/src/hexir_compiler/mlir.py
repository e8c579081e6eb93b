"""The one place that imports the MLIR Python bindings.

Today they come from `numba-cuda-mlir` (pinned exactly in pyproject.toml), which bundles a
complete upstream build as `numba_cuda_mlir._mlir`. When the LLVM project's own wheels reach
PyPI, only this module changes. Everything else imports `ir`, `passmanager` and the upstream
dialects it builds ops of from here (only those: the passes reach every other dialect by
name). `ext` (Python-defined dialects) is re-exported for
`hexir_compiler.dialects` only: that API is young, and keeping it in one folder keeps its
churn there.
"""

from numba_cuda_mlir._mlir import ir, passmanager
from numba_cuda_mlir._mlir.dialects import (
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

__all__ = ["PROVIDER", "arith", "ext", "func", "gpu", "ir", "llvm", "math", "memref",
           "passmanager", "scf", "vector"]
