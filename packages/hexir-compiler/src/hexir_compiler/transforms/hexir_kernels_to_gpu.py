"""hexir-kernels-to-gpu: every cuda kernel `func.func` becomes a `gpu.module` with its kernel.

For a cuda kernel `@f` (after hextir-to-loops) the pass puts `gpu.module @f { gpu.func @f(...)
kernel }` in its place, with the same buffers (one memref each, later one device pointer each:
the bare-pointer calling convention). The graph's `hexir.call_tir @f` now names the gpu.module,
which carries the kernel's attributes (`device`, `hexir.kernel`, `hexir.params`) and its launch
geometry (`hexir.grid`, `hexir.block`: x, y, z).

Each `scf.parallel` mapped to a GPU processor disappears: its induction variable becomes
`lb + gpu.block_id x * step` (or `gpu.thread_id`, y, z) and its trip count is the launch size
on that axis; axes no loop binds have size 1. The gpu.func records the sizes as
`known_grid_size` / `known_block_size`, which lets NVVM know the index ranges, and each
buffer argument `llvm.align` (the format's DEVICE_ARGUMENT_ALIGNMENT), which lets LLVM merge
neighbouring accesses into 128-bit ones. A shared
buffer (a `memref.alloc` in the workgroup address space) becomes one of the gpu.func's
workgroup attributions: one per block, placed in shared memory by the NVVM lowering.
Everything else (scf.for, scf.if, gpu.barrier, memref, arith, math) stays: in one thread it
runs as written.

cpu kernels are left alone: they stay loops, and run on the host (hexir-kernels-to-llvm).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hexir_compiler.dialects.hextir import WORKGROUP
from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import arith, defining_op, gpu, ir
from hexir_compiler.transforms.hextir_to_loops import KERNEL_ATTRIBUTES, is_kernel, move_body
from hexir_format import MAX_BLOCK, MAX_BLOCK_THREADS, MAX_GRID
from hexir_format.plan import DEVICE_ARGUMENT_ALIGNMENT

PASS_NAME = "hexir-kernels-to-gpu"


@dataclass
class Geometry:
    """Launch sizes found so far, and which loop bound each axis (to reject a second one)."""

    grid: list[int] = field(default_factory=lambda: [1, 1, 1])
    block: list[int] = field(default_factory=lambda: [1, 1, 1])
    bound: set[str] = field(default_factory=set)


def run(module: ir.Module | ir.Operation) -> None:
    """Move every cuda kernel of `module` into a gpu.module, in place."""
    module = module.operation
    body = module.regions[0].blocks[0]
    kernels = [
        view.operation
        for view in body.operations
        if view.operation.name == "func.func"
        and is_kernel(view.operation)
        and ir.StringAttr(view.operation.attributes["device"]).value == "cuda"
    ]
    for kernel in kernels:
        _outline(kernel)
    if kernels:
        module.attributes["gpu.container_module"] = ir.UnitAttr.get()


def _outline(kernel: ir.Operation) -> None:
    name = ir.StringAttr(kernel.attributes["sym_name"]).value
    ftype = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value)
    with ir.InsertionPoint(kernel), kernel.location:
        container = gpu.GPUModuleOp(name)
        container.regions[0].blocks.append()
        for attribute in KERNEL_ATTRIBUTES:
            if attribute in kernel.attributes:  # (hexir.symbols: a kernel of symbolic sizes)
                container.attributes[attribute] = kernel.attributes[attribute]
    with ir.InsertionPoint(container.regions[0].blocks[0]), kernel.location:
        device_func = gpu.GPUFuncOp(ftype, sym_name=name, kernel=True)
        entry = device_func.add_entry_block()
    moved = move_body(kernel, entry)
    _attribute_shared_buffers(device_func, entry)
    geometry = Geometry()
    _lower_ops(moved, geometry)
    _check_launch_limits(container, geometry)
    container.attributes["hexir.grid"] = ir.DenseI64ArrayAttr.get(geometry.grid)
    container.attributes["hexir.block"] = ir.DenseI64ArrayAttr.get(geometry.block)
    device_func.attributes["known_grid_size"] = ir.DenseI32ArrayAttr.get(geometry.grid)
    device_func.attributes["known_block_size"] = ir.DenseI32ArrayAttr.get(geometry.block)
    aligned = ir.DictAttr.get({"llvm.align": ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64), DEVICE_ARGUMENT_ALIGNMENT)})
    device_func.attributes["arg_attrs"] = ir.ArrayAttr.get([aligned] * len(ftype.inputs))


def _attribute_shared_buffers(device_func: gpu.GPUFuncOp, entry: ir.Block) -> None:
    """Each workgroup `memref.alloc` of the body -> a workgroup attribution of the gpu.func."""
    shared: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "memref.alloc" and str(ir.MemRefType(op.results[0].type).memory_space) \
                == WORKGROUP:
            shared.append(op)
        return ir.WalkResult.ADVANCE

    device_func.operation.walk(visit)
    for alloc in shared:
        alloc.results[0].replace_all_uses_with(entry.add_argument(alloc.results[0].type,
                                                                  alloc.location))
        alloc.erase()
    if shared:
        device_func.operation.attributes["workgroup_attributions"] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), len(shared))


def _lower_ops(ops: list[ir.Operation], geometry: Geometry) -> None:
    for op in ops:
        if op.name == "scf.parallel" and "mapping" in op.attributes:
            _bind(op, geometry)
        elif op.name == "func.return":
            with ir.InsertionPoint(op), op.location:
                gpu.ReturnOp([])
            op.erase()
        else:
            for region in op.regions:
                for block in region.blocks:
                    _lower_ops([view.operation for view in block.operations], geometry)


def _bind(op: ir.Operation, geometry: Geometry) -> None:
    """A mapped one-dimensional scf.parallel -> a block or thread index; its body inlined."""
    mapping = str(ir.ArrayAttr(op.attributes["mapping"])[0])
    processor = mapping.split("processor = ")[1].split(",")[0]  # block_x ... thread_z
    kind, _, dim = processor.partition("_")
    if processor in geometry.bound:
        raise CompileError(f"GPU processor {processor} is bound by two loops", op.location)
    if len(op.operands) != 3:
        raise CompileError("only a one-dimensional scf.parallel maps to a GPU axis", op.location)
    lb, ub, step = (_constant_index(op, v) for v in op.operands)
    if step <= 0 or ub <= lb:
        raise CompileError(f"GPU loop over an empty range [{lb}, {ub}) step {step}", op.location)
    geometry.bound.add(processor)
    sizes = geometry.grid if kind == "block" else geometry.block
    sizes["xyz".index(dim)] = -(-(ub - lb) // step)
    dimension = ir.Attribute.parse(f"#gpu<dim {dim}>")
    with ir.InsertionPoint(op), op.location:
        iv = (gpu.block_id if kind == "block" else gpu.thread_id)(dimension)
        if step != 1:
            iv = arith.muli(iv, arith.constant(ir.IndexType.get(), step))
        if lb != 0:
            iv = arith.addi(iv, arith.constant(ir.IndexType.get(), lb))
    source = op.regions[0].blocks[0]
    source.arguments[0].replace_all_uses_with(iv)
    body = [view.operation for view in source.operations][:-1]  # all but scf.reduce
    for moving in body:
        moving.move_before(op)
    op.erase()
    _lower_ops(body, geometry)


def _check_launch_limits(container: ir.Operation, geometry: Geometry) -> None:
    threads = geometry.block[0] * geometry.block[1] * geometry.block[2]
    if threads > MAX_BLOCK_THREADS:
        raise CompileError(
            f"a block of {'x'.join(map(str, geometry.block))} = {threads} threads exceeds "
            f"CUDA's limit of {MAX_BLOCK_THREADS}",
            container.location,
        )
    for what, sizes, limits in (("grid", geometry.grid, MAX_GRID),
                                ("block", geometry.block, MAX_BLOCK)):
        for dim, size, limit in zip("xyz", sizes, limits, strict=True):
            if size > limit:
                raise CompileError(f"{what} size {size} on {dim} exceeds CUDA's limit of {limit}",
                                   container.location)


def _constant_index(op: ir.Operation, value: ir.Value) -> int:
    owner = defining_op(value)
    if owner is None or owner.name != "arith.constant":
        raise CompileError("a GPU-mapped loop needs constant bounds", op.location)
    return ir.IntegerAttr(owner.attributes["value"]).value
