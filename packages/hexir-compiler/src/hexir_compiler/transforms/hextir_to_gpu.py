"""`hextir-to-gpu`: turn each cuda `hextir.prim_func` into a `gpu.module` holding its kernel.

For a prim func `@f` the pass appends `gpu.module @f_module { gpu.func @f(...) kernel }` with
the same buffers (one memref each, later one device pointer each: the bare-pointer calling
convention) and rewrites the body on the way:

- `hextir.for kind="thread_binding" bind="blockIdx.x"` (or threadIdx, x/y/z) disappears: its
  induction variable becomes `lb + gpu.block_id x * step`, and its trip count is the launch
  size on that axis. Axes no loop binds have size 1. The geometry is recorded on the
  gpu.module as `hexir.grid` / `hexir.block` (x, y, z) and on the gpu.func as
  `known_grid_size` / `known_block_size`, which lets NVVM know the index ranges.
- every other `hextir.for` kind becomes `scf.for` (carried values included): in one thread
  serial, parallel, vectorized and unrolled all mean "run the iterations in order";
- `hextir.if` -> `scf.if`, `hextir.block` is inlined, `buffer_load/store` ->
  `memref.load/store`, `alloc_buffer` -> `memref.alloca`, `hextir.return` -> `gpu.return`;
  arith and math ops move over unchanged.

The prim func itself stays (the graph's `hexir.call_tir` still names it) and is marked
`hexir.lowered_to_gpu`, so running the pass twice lowers nothing twice. cpu prim funcs are
left alone: the runtime brings their bodies.
"""

from dataclasses import dataclass, field

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import arith, gpu, ir, memref, scf

PASS_NAME = "hextir-to-gpu"
LOWERED = "hexir.lowered_to_gpu"
# CUDA's launch limits: threads per block, and blocks per grid on x, y, z.
MAX_THREADS_PER_BLOCK = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)


@dataclass
class Geometry:
    """Launch sizes found so far, and which loop bound each axis (to reject a second one)."""

    grid: list[int] = field(default_factory=lambda: [1, 1, 1])
    block: list[int] = field(default_factory=lambda: [1, 1, 1])
    bound: set[str] = field(default_factory=set)


def run(module: ir.Module | ir.Operation) -> None:
    """Lower every cuda prim func of `module` not lowered yet, in place. A kernel it cannot
    lower raises CompileError at the op's location (the module is then half-rewritten)."""
    module = module.operation
    body = module.regions[0].blocks[0]
    kernels = [op.operation for op in body.operations if _is_cuda_kernel(op.operation)]
    for kernel in kernels:
        _lower_prim_func(kernel, body)
    if kernels:
        module.attributes["gpu.container_module"] = ir.UnitAttr.get()


def _is_cuda_kernel(op: ir.Operation) -> bool:
    return (
        op.name == "hextir.prim_func"
        and _string(op, "device") == "cuda"
        and LOWERED not in op.attributes
    )


def _lower_prim_func(prim_func: ir.Operation, module_body: ir.Block) -> None:
    name = _string(prim_func, "sym_name")
    ftype = ir.TypeAttr(prim_func.attributes["function_type"]).value
    for index, arg in enumerate(ftype.inputs):
        if not (isinstance(arg, ir.MemRefType) and arg.has_static_shape):
            raise CompileError(
                f"kernel argument {index} is {arg}; expected a memref with a static shape",
                prim_func.location,
            )
    if len(prim_func.regions[0].blocks) != 1:
        raise CompileError("expected a prim func body of one block", prim_func.location)

    loc = prim_func.location
    with ir.InsertionPoint(module_body), loc:
        gpu_module = gpu.GPUModuleOp(f"{name}_module")
        gpu_module.regions[0].blocks.append()
    with ir.InsertionPoint(gpu_module.regions[0].blocks[0]), loc:
        kernel = gpu.GPUFuncOp(ftype, sym_name=name, kernel=True)
    entry = kernel.add_entry_block()

    copy = prim_func.clone(ip=ir.InsertionPoint(module_body))
    source = copy.regions[0].blocks[0]
    for old, new in zip(source.arguments, entry.arguments, strict=True):
        old.replace_all_uses_with(new)
    moved = list(source.operations)
    for op in moved:
        entry.append(op.operation)
    copy.erase()

    geometry = Geometry()
    _lower_ops(moved, geometry)
    _check_launch_limits(prim_func, geometry)
    gpu_module.attributes["hexir.grid"] = ir.DenseI64ArrayAttr.get(geometry.grid)
    gpu_module.attributes["hexir.block"] = ir.DenseI64ArrayAttr.get(geometry.block)
    kernel.attributes["known_grid_size"] = ir.DenseI32ArrayAttr.get(geometry.grid)
    kernel.attributes["known_block_size"] = ir.DenseI32ArrayAttr.get(geometry.block)
    prim_func.attributes[LOWERED] = ir.UnitAttr.get()


def _lower_ops(ops: list, geometry: Geometry) -> None:
    """Rewrite `ops` (a snapshot; they may move or vanish) and everything nested in them."""
    for view in ops:
        op = view.operation
        lower = _LOWERINGS.get(op.name)
        if lower is not None:
            lower(op, geometry)
        elif op.name.startswith("hextir."):
            raise CompileError(
                f"'{op.name}' cannot be lowered to the gpu dialect here", op.location
            )
        else:
            for region in op.regions:
                for block in region.blocks:
                    _lower_ops(list(block.operations), geometry)


def _lower_for(op: ir.Operation, geometry: Geometry) -> None:
    if _string(op, "kind") == "thread_binding":
        _lower_thread_binding(op, geometry)
        return
    lb, ub, step, *inits = op.operands
    with ir.InsertionPoint(op), op.location:
        loop = scf.ForOp(lb, ub, step, inits)
    body = _take_body(op, loop.body, loop.body.arguments)
    with ir.InsertionPoint(loop.body), _terminator(op).location:
        scf.YieldOp(list(_terminator(op).operands))
    _replace_and_erase(op, loop.results)
    _lower_ops(body, geometry)


def _lower_thread_binding(op: ir.Operation, geometry: Geometry) -> None:
    axis = _string(op, "bind")  # the verifier admits only blockIdx.x ... threadIdx.z
    kind, _, dim = axis.partition(".")
    if axis in geometry.bound:
        raise CompileError(f"axis '{axis}' is bound by two loops of this kernel", op.location)
    if len(op.operands) > 3:
        raise CompileError("a thread_binding loop cannot carry values", op.location)
    lb, ub, step = (_constant_index(op, v) for v in op.operands)
    if step <= 0 or ub <= lb:
        raise CompileError(
            f"thread_binding loop over an empty range [{lb}, {ub}) step {step}", op.location
        )

    geometry.bound.add(axis)
    sizes = geometry.grid if kind == "blockIdx" else geometry.block
    sizes["xyz".index(dim)] = -(-(ub - lb) // step)
    dimension = ir.Attribute.parse(f"#gpu<dim {dim}>")
    with ir.InsertionPoint(op), op.location:
        iv = (gpu.block_id if kind == "blockIdx" else gpu.thread_id)(dimension)
        if step != 1:
            iv = arith.muli(iv, arith.constant(ir.IndexType.get(), step))
        if lb != 0:
            iv = arith.addi(iv, arith.constant(ir.IndexType.get(), lb))
    body = _take_body(op, None, [iv])
    _replace_and_erase(op, [])
    _lower_ops(body, geometry)


def _lower_if(op: ir.Operation, geometry: Geometry) -> None:
    with ir.InsertionPoint(op), op.location:
        branch = scf.IfOp(op.operands[0])
    body = _take_body(op, branch.then_block, [])
    with ir.InsertionPoint(branch.then_block), op.location:
        scf.YieldOp([])
    _replace_and_erase(op, [])
    _lower_ops(body, geometry)


def _lower_block(op: ir.Operation, geometry: Geometry) -> None:
    body = _take_body(op, None, [])
    _replace_and_erase(op, [])
    _lower_ops(body, geometry)


def _lower_load(op: ir.Operation, geometry: Geometry) -> None:
    buffer, *indices = op.operands
    with ir.InsertionPoint(op), op.location:
        value = memref.load(buffer, indices)
    _replace_and_erase(op, [value])


def _lower_store(op: ir.Operation, geometry: Geometry) -> None:
    value, buffer, *indices = op.operands
    with ir.InsertionPoint(op), op.location:
        memref.store(value, buffer, indices)
    _replace_and_erase(op, [])


def _lower_alloc(op: ir.Operation, geometry: Geometry) -> None:
    with ir.InsertionPoint(op), op.location:
        buffer = memref.alloca(op.results[0].type, [], [])
    _replace_and_erase(op, [buffer])


def _lower_return(op: ir.Operation, geometry: Geometry) -> None:
    with ir.InsertionPoint(op), op.location:  # the verifier admits no values here
        gpu.ReturnOp([])
    _replace_and_erase(op, [])


_LOWERINGS = {
    "hextir.for": _lower_for,
    "hextir.if": _lower_if,
    "hextir.block": _lower_block,
    "hextir.buffer_load": _lower_load,
    "hextir.buffer_store": _lower_store,
    "hextir.alloc_buffer": _lower_alloc,
    "hextir.return": _lower_return,
}


def _take_body(op: ir.Operation, dest: ir.Block | None, args) -> list:
    """Move the body of `op` (all but its terminator) to the end of `dest`, or in front of
    `op` when `dest` is None; the body's block arguments become `args`. Returns the ops moved."""
    source = op.regions[0].blocks[0]
    for old, new in zip(source.arguments, args, strict=True):
        old.replace_all_uses_with(new)
    moved = [view.operation for view in source.operations][:-1]
    for moving in moved:
        if dest is None:
            moving.move_before(op)
        else:
            dest.append(moving)
    return moved


def _terminator(op: ir.Operation) -> ir.Operation:
    ops = op.regions[0].blocks[0].operations
    return ops[len(ops) - 1].operation


def _replace_and_erase(op: ir.Operation, values) -> None:
    for old, new in zip(op.results, values, strict=True):
        old.replace_all_uses_with(new)
    op.erase()


def _check_launch_limits(prim_func: ir.Operation, geometry: Geometry) -> None:
    threads = geometry.block[0] * geometry.block[1] * geometry.block[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise CompileError(
            f"a block of {'x'.join(map(str, geometry.block))} = {threads} threads exceeds "
            f"CUDA's limit of {MAX_THREADS_PER_BLOCK}",
            prim_func.location,
        )
    for dim, size, limit in zip("xyz", geometry.grid, MAX_GRID, strict=True):
        if size > limit:
            raise CompileError(
                f"grid size {size} on {dim} exceeds CUDA's limit of {limit}", prim_func.location
            )


def _constant_index(op: ir.Operation, value: ir.Value) -> int:
    owner = value.owner
    if isinstance(owner, ir.OpView):
        owner = owner.operation
    if not isinstance(owner, ir.Operation) or owner.name != "arith.constant":
        raise CompileError("thread_binding loop needs a constant extent", op.location)
    return ir.IntegerAttr(owner.attributes["value"]).value


def _string(op: ir.Operation, name: str) -> str | None:
    if name not in op.attributes:
        return None
    return ir.StringAttr(op.attributes[name]).value
