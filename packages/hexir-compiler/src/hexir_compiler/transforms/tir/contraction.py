"""`hexir.linear` and `hexir.matmul`: both the format's `matmul` kernel.

np.matmul semantics: a [..., M, K] @ b [..., K, N] -> [..., M, N] with the batch dimensions
broadcast. `linear` is input [..., K] @ weight [K, N]: its leading input dimensions are the
batch and rows, and a vector input [K] has no row axis in the result. On cuda every output
element is one iteration of `schedule.matrix`, with a serial k loop carrying the accumulator;
on the cpu the schedule calls the runtime's matmul routine instead (`schedule.uses_library`).
"""

from __future__ import annotations

from collections.abc import Callable

from hexir_format import signatures

from hexir_compiler.mlir import arith, ir
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.kernel import GraphOp, Kernel, broadcast_indices
from hexir_compiler.transforms.tir.schedule import matrix, parallel, uses_library


#: An element-wise epilogue: (builder, the product at an output element, its coordinates)
#: -> the value to store there (`tir.fusion` makes them).
Epilogue = Callable[[KernelBuilder, ir.Value, list[ir.Value]], ir.Value]


def plan_matmul(op: GraphOp, epilogue: Epilogue | None = None) -> Kernel:
    """The matmul kernel of `op`, applying `epilogue` to each product before it is stored
    (the kernel's arguments are then lhs, rhs, the epilogue's inputs, the destination)."""
    a, w = op.inputs[:2]
    if op.mnemonic == "linear":
        op.expect_output(signatures.linear(a, w))
    else:
        op.expect_output(signatures.matmul(a, w, vectors=False))
    has_rows = len(a) >= 2
    a_batch, w_batch = a[:-2], w[:-2]
    batch = signatures.broadcast(a_batch, w_batch)
    rows, cols, depth = (a[-2] if has_rows else 1), w[-1], a[-1]

    def emit(b: KernelBuilder) -> None:
        lhs, rhs, *_, out = b.args
        if uses_library(b):
            with b.building():
                b.library_call("matmul", [lhs, rhs, out])
                if epilogue is not None:  # then over the product, in place
                    with parallel(b, op.output) as coords:
                        b.store(epilogue(b, b.load(out, coords), coords), out, coords)
            return
        with b.building(), matrix(b, batch, rows, cols) as (coords, i, j):
            row = [i] if has_rows else []
            lhs_at = [*broadcast_indices(b, coords, a_batch, batch), *row]
            rhs_at = broadcast_indices(b, coords, w_batch, batch)

            def step(k: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
                term = arith.mulf(b.load(lhs, [*lhs_at, *k]), b.load(rhs, [*rhs_at, *k, j]))
                return [arith.addf(acc[0], term)]

            (total,) = b.fold([depth], [b.float(0.0)], step)
            at = [*coords, *row, j]
            b.store(total if epilogue is None else epilogue(b, total, at), out, at)

    return Kernel("matmul" if epilogue is None else "generic", emit)
