"""The two Hexir dialects, and the context every compiler stage works in.

`context()` gives an `ir.Context` with `hexir` and `hextir` loaded next to the upstream
dialects (func, arith, math, memref, scf, tensor, linalg, gpu, llvm, ...), which the bindings
register in every context. Python-defined verifiers run on the calling thread, so the context
is single-threaded: diagnostics then come out in program order.
"""

import ctypes
import ctypes.util
from typing import Any

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

    The freed attributes are mostly in the C heap's middle, where `free` keeps them for the
    process (ViT-B/16: 330 MB); glibc's `malloc_trim` hands those pages back, so what the
    caller does next (the `.hxb`'s bytes) reuses them instead of growing the peak.
    """
    ours: tuple[Any, ...] = (Hexir, Hextir)  # (`_load.load` sets the attribute; untyped)
    for dialect in ours:
        dialect._mlir_module = None
    trim_heap()


def trim_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's `malloc_trim`; elsewhere
    nothing): after a big free in the heap's middle (a context's attributes; an imported
    model's protobuf and arrays, ViT-L/16: 100 MB of holes), so the next big allocations do
    not grow the peak past the pages `free` kept."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _libc():
    """glibc, where it has `malloc_trim` (musl and others: None)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


_LIBC = _libc()


__all__ = ["Hexir", "Hextir", "context", "release", "trim_heap"]
