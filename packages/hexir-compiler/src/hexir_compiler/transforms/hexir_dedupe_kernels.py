"""hexir-dedupe-kernels: one kernel for each set of kernels that are the same but for their name.

A transformer repeats its layer: ViT-B/16's 428 kernels are 12 copies of one layer's kernels
plus a few, identical op for op (the weights are arguments, not part of the code). Every pass
below mlir-tir and the backend (LLVM at -O3, once per host CPU level) would otherwise do the
same work on each copy, and the `.hxb` would carry each copy's code. Runs right after
hexir-lower-to-tir: each kernel whose text, with its own name set aside, equals an earlier
kernel's is erased, and its calls name the earlier one, so one executable serves every dispatch
of that code.

The comparison is the kernel op as printed (generic form, no locations), so two kernels are
merged only when every op, type and attribute in them agrees; a kernel whose text names itself
(a gpu.module's inner function) is then never merged with another, which is only a lost saving.
Running the pass again changes nothing.
"""

from __future__ import annotations

from hexir_compiler.mlir import ir
from hexir_compiler.transforms.hextir_to_loops import is_kernel

PASS_NAME = "hexir-dedupe-kernels"
_ANONYMOUS = "hexir.dedupe.kernel"  # the name every kernel has while it is printed for comparison


def run(module: ir.Module | ir.Operation) -> dict[str, str]:
    """Merge `module`'s identical kernels; returns each erased kernel's name -> the kept one."""
    module = module.operation
    merged: dict[str, str] = {}
    with module.context, ir.Location.unknown():
        body = module.regions[0].blocks[0]
        ops = [view.operation for view in body.operations]
        scratch = ir.Module.create()
        kept: dict[str, str] = {}  # a kernel's text without its name -> the first one's name
        for i, op in enumerate(ops):
            if not is_kernel(op) or "sym_name" not in op.attributes:
                continue
            name = ir.StringAttr(op.attributes["sym_name"]).value
            first = kept.setdefault(_text(op, scratch), name)
            if first != name:
                merged[name] = first
                op.erase()
            elif i + 1 < len(ops):
                op.move_before(ops[i + 1])
            else:
                ir.InsertionPoint(body).insert(op.detach_from_parent())
        if merged:
            for view in body.operations:
                if not is_kernel(view.operation):
                    view.operation.walk(lambda op: _recall(op, merged))
    return merged


def _text(kernel: ir.Operation, scratch: ir.Module) -> str:
    """`kernel` printed without its name, moved into the empty module `scratch`: printed in
    place, each op would cost a walk of the whole module (its weights included), 8 ms a
    kernel of ViT-B/16, 20x its cost alone."""
    ir.InsertionPoint(scratch.body).insert(kernel.detach_from_parent())
    name = kernel.attributes["sym_name"]
    kernel.attributes["sym_name"] = ir.StringAttr.get(_ANONYMOUS)
    text = kernel.get_asm(assume_verified=True, use_local_scope=True)
    kernel.attributes["sym_name"] = name
    return text


def _recall(op: ir.Operation, merged: dict[str, str]) -> ir.WalkResult:
    """Point a call of an erased kernel at the kept one."""
    if op.name == "hexir.call_tir":
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        if callee in merged:
            op.attributes["callee"] = ir.FlatSymbolRefAttr.get(merged[callee])
    return ir.WalkResult.ADVANCE
