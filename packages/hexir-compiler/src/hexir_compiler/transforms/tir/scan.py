"""The running-sum kernel: cumsum along one axis (ONNX's CumSum, exclusive and reverse).

Schedule: one iteration (cpu loops, cuda thread) per line along the axis, walking it with a
serial loop that carries the sum, so each element is the sum of those before it (after it,
`reverse`) in order, as numpy's cumsum adds them; `exclusive` stores the sum before adding
the element. A cuda line is one thread's loop: the lines of the models that use CumSum
(position ids from an attention mask) are a sequence long. No format kind (`generic`).
"""

from __future__ import annotations

from hexir_compiler.mlir import arith, ir
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.kernel import GraphOp, Kernel
from hexir_compiler.transforms.tir.movement import GENERIC
from hexir_compiler.transforms.tir.schedule import parallel
from hexir_format import signatures


def plan_cumsum(op: GraphOp) -> Kernel:
    (shape,) = op.inputs
    op.expect_output(shape)
    axis = signatures.normalize_axis(op.int_attr("axis"), len(shape))
    exclusive, reverse = op.bool_attr("exclusive", False), op.bool_attr("reverse", False)
    extent = shape[axis]
    add = arith.addf if op.elements[0] in ("f32", "f64") else arith.addi

    def emit(b: KernelBuilder) -> None:
        x, out = b.args
        with b.building(), parallel(b, [e for d, e in enumerate(shape) if d != axis]) as coords:

            def step(ks: list[ir.Value], carried: list[ir.Value]) -> list[ir.Value]:
                k = arith.subi(b.index(extent - 1), ks[0]) if reverse else ks[0]
                at = [*coords[:axis], k, *coords[axis:]]
                total = add(carried[0], b.load(x, at))
                b.store(carried[0] if exclusive else total, out, at)
                return [total]

            b.fold([extent], [b.constant(0.0, b.element)], step)

    return Kernel(GENERIC, emit)
