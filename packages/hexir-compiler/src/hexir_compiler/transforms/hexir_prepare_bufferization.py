"""hexir-prepare-bufferization: give the two graph ops that survive to linalg a buffer form.

One-shot bufferization only rewrites ops it has a model for, and a Python-defined dialect
cannot register one. So, just before bufferizing, the two graph ops left on tensors are put
into a shape bufferization understands:

- `hexir.print %t` reads a buffer: `%m = bufferization.to_buffer %t read_only` and the print
  takes `%m` (a memref), which is what the LLVM stage turns into printf calls.
- `hexir.transfer %t {src, dst}` is data moving between devices: a copy into a fresh buffer,
  `linalg.copy ins(%t) outs(tensor.empty)` carrying `src`, `dst` (and `device`), so the move
  stays visible at -emit=mlir-gpu. hexir-lower-cuda-to-gpu turns it into `memref.copy`, which
  the host view lowers to a plain memcpy: the LLVM host module has one address space, and the
  real device-to-device traffic is the runtime's job (the .hxb path).
"""

from __future__ import annotations

from hexir_compiler.mlir import bufferization, ir, linalg, tensor

PASS_NAME = "hexir-prepare-bufferization"

#: Attributes of a transfer that the copy keeps.
TRANSFER_ATTRS = ("src", "dst", "device")


def run(module: ir.Module) -> None:
    prints: list[ir.Operation] = []
    transfers: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "hexir.print" and isinstance(op.operands[0].type, ir.RankedTensorType):
            prints.append(op)
        elif op.name == "hexir.transfer":
            transfers.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in prints:
        _print_reads_buffer(op)
    for op in transfers:
        _transfer_as_copy(op)


def _print_reads_buffer(op: ir.Operation) -> None:
    t = ir.RankedTensorType(op.operands[0].type)
    with ir.InsertionPoint(op), op.location:
        buffer = bufferization.ToBufferOp(
            ir.MemRefType.get(t.shape, t.element_type), op.operands[0], read_only=True
        )
    op.operands[0] = buffer.result


def _transfer_as_copy(op: ir.Operation) -> None:
    t = ir.RankedTensorType(op.results[0].type)
    with ir.InsertionPoint(op), op.location:
        dest = tensor.empty(t.shape, t.element_type)
        copied = linalg.copy(op.operands[0], outs=[dest])
    for name in TRANSFER_ATTRS:
        if name in op.attributes:
            copied.owner.attributes[name] = op.attributes[name]
    op.results[0].replace_all_uses_with(copied)
    op.erase()
