"""The two Hexir dialects, and the context every compiler stage works in.

`context()` gives an `ir.Context` with `hexir` and `hextir` loaded next to the upstream
dialects (func, arith, math, memref, scf, tensor, linalg, gpu, llvm, ...), which the bindings
register in every context. Python-defined verifiers run on the calling thread, so the context
is single-threaded: diagnostics then come out in program order.
"""

from hexir_compiler.dialects._load import load, mark_loaded, without_segment_sizes
from hexir_compiler.dialects.hexir import Hexir
from hexir_compiler.dialects.hextir import Hextir
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


def release() -> None:
    """Let go of the last `context()`'s dialect definitions, so that context can be freed.

    Each dialect keeps its IRDL definition (a module in that context, which its verifiers
    use) on its class, and so keeps the context alive, and with it every attribute ever made
    in it: a compiled model's weights, twice where a matmul's are packed. Call it once the
    context is no longer used; the next `context()` loads the dialects again.
    """
    for dialect in (Hexir, Hextir):
        dialect._mlir_module = None


__all__ = ["Hexir", "Hextir", "context", "release"]
