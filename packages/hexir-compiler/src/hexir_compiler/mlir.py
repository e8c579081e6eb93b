"""The one place that imports the MLIR Python bindings.

Today they come from `numba-cuda-mlir` (pinned exactly in pyproject.toml), which bundles a
complete upstream build as `numba_cuda_mlir._mlir`. When the LLVM project's own wheels reach
PyPI, only this module changes. Everything else imports `ir`, `passmanager`, the upstream
dialects and so on from here. `ext` (Python-defined dialects) is re-exported for
`hexir_compiler.dialects` only: that API is young, and keeping it in one folder keeps its
churn there.
"""

from numba_cuda_mlir._mlir import ir, passmanager, rewrite
from numba_cuda_mlir._mlir.dialects import (
    arith,
    bufferization,
    builtin,
    cf,
    ext,
    func,
    gpu,
    linalg,
    llvm,
    math,
    memref,
    nvvm,
    scf,
    tensor,
)

PROVIDER = "numba_cuda_mlir._mlir"

__all__ = [
    "PROVIDER",
    "arith",
    "bufferization",
    "builtin",
    "cf",
    "ext",
    "func",
    "gpu",
    "ir",
    "linalg",
    "llvm",
    "math",
    "memref",
    "nvvm",
    "passmanager",
    "rewrite",
    "scf",
    "tensor",
]
