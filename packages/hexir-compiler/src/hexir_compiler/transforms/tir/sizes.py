"""The kernel of `hexir.sizes`: a dynamic module's sizes as data.

A model that computes with the shape of a dynamic tensor (`Shape`, then arithmetic on it:
GPT-2's position ids, `arange(batch) * seq`) reads sizes the module only knows per call. The
importer folds what it can and leaves the rest as `hexir.sizes`, an i64 tensor whose
elements are expressions over the symbols; its kernel takes the symbols' values (after its
destination, as every kernel of symbolic sizes does) and stores each expression's value. It
has no inputs, runs once (one iteration: a handful of stores), and has no format kind of
its own (`generic`).
"""

from __future__ import annotations

from hexir_compiler.mlir import ir
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.kernel import GraphOp, Kernel
from hexir_compiler.transforms.tir.movement import GENERIC
from hexir_format import dims


def plan_sizes(op: GraphOp) -> Kernel:
    values = [dims.parse(ir.StringAttr(v).value) for v in ir.ArrayAttr(op.attributes["values"])]
    op.expect_output(op.output)  # (static, its element count checked by the op's verifier)

    def emit(b: KernelBuilder) -> None:
        (out,) = b.args
        i64 = ir.IntegerType.get_signless(64)
        with b.building():
            for i, value in enumerate(values):
                b.store(b.constant(value, i64), out, b.delinearize(b.index(i), op.output))

    names = sorted(set().union(*(dims.free_symbols(v) for v in values)))
    return Kernel(GENERIC, emit, symbols=tuple(names))
