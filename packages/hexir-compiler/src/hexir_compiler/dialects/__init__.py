"""The two Hexir dialects, and the context every compiler stage works in.

`context()` gives an `ir.Context` with `hexir` and `hextir` loaded next to the upstream
dialects (func, arith, math, memref, scf, tensor, linalg, gpu, llvm, ...), which the bindings
register in every context. Python-defined verifiers run on the calling thread, so the context
is single-threaded: diagnostics then come out in program order.
"""

from hexir_compiler.dialects._load import load, without_segment_sizes
from hexir_compiler.dialects.hexir import Hexir
from hexir_compiler.dialects.hextir import Hextir
from hexir_compiler.dialects._load import mark_loaded
from hexir_compiler.mlir import ir

mark_loaded(Hexir, Hextir)
for _op in (*Hexir.operations, *Hextir.operations):
    if _op.OPERATION_NAME != "hexir.call_tir":  # one group per input: it has segment sizes
        without_segment_sizes(_op)


def context() -> ir.Context:
    """A fresh context with both dialects loaded (use it as `with context():`)."""
    ctx = ir.Context()
    ctx.enable_multithreading(False)
    with ctx, ir.Location.unknown():
        load(Hexir)
        load(Hextir)
    return ctx


__all__ = ["Hexir", "Hextir", "context"]
