"""One kernel for a fusion group (`hexir-fuse`): element-wise chains, contraction epilogues.

A group's values all have its output's shape, so its kernel is one pass over the output: at
each element it loads the group's inputs (numpy-broadcast, each once), evaluates the ops in
program order with their scalar formulas (`elementwise.formula`, the ones their own kernels
use) and stores the last op's value. A group headed by a contraction is its matmul kernel
with that evaluation as the epilogue of each product (on the cpu, where the matmul is the
host BLAS, a pass over the product in place right after the call).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hexir_compiler.mlir import ir
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.contraction import plan_matmul
from hexir_compiler.transforms.tir.elementwise import formula
from hexir_compiler.transforms.tir.kernel import GraphOp, Kernel, broadcast_indices
from hexir_compiler.transforms.tir.schedule import parallel

CONTRACTIONS = ("matmul", "linear")


@dataclass(frozen=True)
class Step:
    """One op of the group: its graph op and where each operand comes from: ("input", i) --
    the kernel's i-th input -- or ("step", j), the j-th step's value."""

    op: GraphOp
    operands: tuple[tuple[str, int], ...]


def plan_group(steps: Sequence[Step], inputs: Sequence[tuple[int, ...]],
               output: tuple[int, ...]) -> Kernel:
    """The kernel of a group whose inputs have shapes `inputs` (a contraction's two first)."""
    head = next((i for i, s in enumerate(steps) if s.op.mnemonic in CONTRACTIONS), None)
    rest = [(i, s) for i, s in enumerate(steps) if i != head]
    formulas = {i: formula(s.op) for i, s in rest}

    def evaluate(b: KernelBuilder, coords: list[ir.Value], product: ir.Value | None):
        buffers = b.args[:-1]
        loaded: dict[int, ir.Value] = {}
        values: dict[int, ir.Value] = {} if head is None else {head: product}

        def operand(source: tuple[str, int]) -> ir.Value:
            kind, index = source
            if kind == "step":
                return values[index]
            if index not in loaded:
                at = broadcast_indices(b, coords, inputs[index], output)
                loaded[index] = b.load(buffers[index], at)
            return loaded[index]

        for i, step in rest:
            values[i] = formulas[i](b, *(operand(s) for s in step.operands))
        return values[len(steps) - 1]

    if head is not None:
        return plan_matmul(steps[head].op, lambda b, product, at: evaluate(b, at, product))

    def emit(b: KernelBuilder) -> None:
        out = b.args[-1]
        with b.building(), parallel(b, output) as coords:
            b.store(evaluate(b, coords, None), out, coords)

    return Kernel("map", emit)
