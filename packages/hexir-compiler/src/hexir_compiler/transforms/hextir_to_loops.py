"""hextir-to-loops: every `hextir.prim_func` becomes a `func.func` of loop nests on buffers.

The kernel keeps its name (so `hexir.call_tir @name` now calls the function), its buffers
(one memref each, inputs then the destination) and its attributes (`device`, `hexir.kernel`,
`hexir.params`). The schedule written in the hextir loops becomes the loops that run it:

- `serial` loops become `scf.for` (carried values included);
- a `thread_binding` loop (cuda) becomes a one-dimensional `scf.parallel` whose `mapping`
  names the GPU processor it is bound to (`#gpu.loop_dim_map<processor = block_x ...>`),
  the form `hexir-kernels-to-gpu` reads;
- a loop with `lanes` (cpu) is marked so that LLVM's loop vectorizer leaves it alone (its
  iterations are vectorized one at a time, by the SLP vectorizer);
- `parallel` loops (cpu) become `scf.for` marked `hexir.loop = "parallel"`, and the kernel's
  outermost one is its *cpu grid*: a cpu kernel takes two more arguments, `%lo` and `%hi`
  (index), and runs only iterations [lo, hi) of that loop, so the runtime can hand disjoint
  ranges of it to a thread pool. Its extent is recorded as `hexir.grid` (x, y, z). A kernel
  whose body is not one parallel loop runs inside a loop of one iteration, grid (1, 1, 1);
- `hextir.if` becomes `scf.if`, `buffer_load`/`buffer_store` become `memref.load`/
  `memref.store`, `hextir.return` a `func.return`; arith and math ops move over unchanged;
- a cuda kernel's shared buffer (`hextir.alloc_buffer`) becomes a `memref.alloc` in the
  workgroup address space (hexir-kernels-to-gpu makes it the gpu.func's workgroup
  attribution), and `hextir.barrier` becomes `gpu.barrier`.

A module without prim funcs is left as it is, so the pass can run on its own output.
"""

from __future__ import annotations

from hexir_compiler.dialects.hextir import SYMBOLS
from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import arith, defining_op, func, gpu, ir, memref, scf
from hexir_compiler.transforms.tir.builder import EXTENT

PASS_NAME = "hextir-to-loops"
GRID = "hexir.grid"
LOOP = "hexir.loop"
#: What scf-to-cf carries from a loop to its back edge (hexir-kernels-to-llvm makes it the
#: branch's `loop_annotation`, LLVM's `!llvm.loop` metadata).
LOOP_ANNOTATION = "llvm.loop_annotation"
#: The attributes a kernel keeps at every level below mlir-tir.
KERNEL_ATTRIBUTES = ("device", "hexir.kernel", "hexir.params", SYMBOLS)
PROCESSORS = {
    f"{kind}.{dim}": f"{prefix}_{dim}"
    for kind, prefix in (("blockIdx", "block"), ("threadIdx", "thread"))
    for dim in "xyz"
}


def run(module: ir.Module | ir.Operation) -> None:
    """Rewrite every prim func of `module` in place; CompileError at a kernel that cannot be."""
    module = module.operation
    body = module.regions[0].blocks[0]
    for view in list(body.operations):
        if view.operation.name == "hextir.prim_func":
            _lower_prim_func(view.operation)


def is_kernel(op: ir.Operation) -> bool:
    """A kernel at any level below the graph (it carries its format kind), not an entry point."""
    return "hexir.kernel" in op.attributes


def _lower_prim_func(prim: ir.Operation) -> None:
    name = ir.StringAttr(prim.attributes["sym_name"]).value
    arguments = list(ir.FunctionType(ir.TypeAttr(prim.attributes["function_type"]).value).inputs)
    sizes = len(prim.attributes[SYMBOLS]) if SYMBOLS in prim.attributes else 0
    for index, buffer in enumerate(arguments[:len(arguments) - sizes]):
        if not (isinstance(buffer, ir.MemRefType) and (
                buffer.has_static_shape or (sizes and buffer.rank == 1))):
            raise CompileError(
                f"kernel @{name}: buffer #{index} is {buffer}; expected a memref of static "
                "shape, or a flat one (memref<?xT>) in a kernel that takes its sizes",
                prim.location,
            )
    cpu = _string(prim, "device") != "cuda"
    with ir.InsertionPoint(prim), prim.location:
        index = ir.IndexType.get()
        # A flat buffer becomes memref<1xT>: the bare-pointer calling convention takes only
        # static shapes, and the kernel indexes its view, never the argument itself.
        arguments = [ir.MemRefType.get([1], ir.MemRefType(t).element_type)
                     if isinstance(t, ir.MemRefType) and not t.has_static_shape else t
                     for t in arguments]
        kernel = func.FuncOp(name, ir.FunctionType.get([*arguments, *([index] * 2 * cpu)], []))
        for attribute in KERNEL_ATTRIBUTES:
            if attribute in prim.attributes:
                kernel.attributes[attribute] = prim.attributes[attribute]
    with prim.location:
        entry = kernel.add_entry_block()
    moved = move_body(prim, entry)
    _lower_ops(moved)
    if cpu:
        lo, hi = list(entry.arguments)[-2:]
        extent = _split_outermost(entry, lo, hi)
        if isinstance(extent, int):
            kernel.attributes[GRID] = ir.DenseI64ArrayAttr.get([extent, 1, 1])
        else:  # a symbolic extent: the runtime computes the grid for the call's sizes
            kernel.attributes[GRID] = ir.ArrayAttr.get(
                [ir.StringAttr.get(d) for d in (extent, "1", "1")])


def move_body(kernel: ir.Operation, entry: ir.Block) -> list[ir.Operation]:
    """Move every op of `kernel`'s body into `entry` (whose leading arguments take the place of
    the body's), erase `kernel`, and return the ops moved."""
    source = kernel.regions[0].blocks[0]
    for old, new in zip(source.arguments, entry.arguments, strict=False):
        old.replace_all_uses_with(new)
    moved = [view.operation for view in source.operations]
    for op in moved:
        entry.append(op)
    kernel.erase()
    return moved


#: The ops besides arith's a kernel computes at its top, once per range it is handed.
_AT_TOP = ("memref.reinterpret_cast", "memref.load")


def _split_outermost(entry: ir.Block, lo: ir.Value, hi: ir.Value) -> int | str:
    """Make the outermost parallel loop run [lo, min(hi, extent)); returns the extent (the cpu
    grid): an int, or a symbolic one as `hexir_format.dims` writes it. The clamp keeps the
    kernel inside its buffers whatever range it is handed."""
    ops = [view.operation for view in entry.operations]
    loops = [op for op in ops if op.name == "scf.for"]
    # Only a body that is the loop and nothing else (code before or after it must run once,
    # not once per range; the sizes and views a kernel computes from its symbols at the top,
    # and the scalars it loads there (`KernelBuilder.load_once`), are pure and cheap, so they
    # may run once per range).
    alone = all(op.name in ("scf.for", "func.return", *_AT_TOP)
                or op.name.startswith("arith.") for op in ops)
    if alone and len(loops) == 1 and _string(loops[0], LOOP) == "parallel":
        loop = loops[0]
        extent: int | str = _string(loop, EXTENT) or (
            _constant(loop.operands[1]) - _constant(loop.operands[0]))
        with ir.InsertionPoint(loop), loop.location:
            loop.operands[0] = arith.addi(loop.operands[0], lo)
            loop.operands[1] = arith.minui(hi, loop.operands[1])
        return extent
    # Not one parallel loop: the whole body (all but the return) is one iteration.
    body = [op for op in ops if op.name != "arith.constant"][:-1]
    while body and (body[0].name.startswith("arith.") or body[0].name in _AT_TOP):
        body.pop(0)  # the sizes, views and scalars computed at the top stay there
    with ir.InsertionPoint(body[0] if body else ops[-1]), ops[-1].location:
        zero, one = (arith.constant(ir.IndexType.get(), v) for v in (0, 1))
        loop = scf.ForOp(arith.addi(zero, lo), arith.minui(hi, one), one)
    for op in body:
        loop.body.append(op)
    with ir.InsertionPoint(loop.body), ops[-1].location:
        scf.YieldOp([])
    loop.attributes[LOOP] = ir.StringAttr.get("parallel")
    return 1


def _lower_ops(ops: list[ir.Operation]) -> None:
    """Rewrite `ops` (a snapshot; they may move or vanish) and everything nested in them."""
    for op in ops:
        lower = _LOWERINGS.get(op.name)
        if lower is not None:
            lower(op)
        elif op.name.startswith("hextir."):
            raise CompileError(f"'{op.name}' has no lowering to loops", op.location)
        else:
            for region in op.regions:
                for block in region.blocks:
                    _lower_ops([view.operation for view in block.operations])


def _lower_for(op: ir.Operation) -> None:
    kind = _string(op, "kind")
    lb, ub, step, *inits = op.operands
    with ir.InsertionPoint(op), op.location:
        if kind == "thread_binding":
            if inits:
                raise CompileError("a thread_binding loop cannot carry values", op.location)
            loop = scf.ParallelOp([], [lb], [ub], [step], [])
            block = loop.regions[0].blocks.append(ir.IndexType.get())
            processor = PROCESSORS[ir.StringAttr(op.attributes["bind"]).value]
            loop.attributes["mapping"] = ir.Attribute.parse(
                f"[#gpu.loop_dim_map<processor = {processor}, "
                "map = (d0) -> (d0), bound = (d0) -> (d0)>]"
            )
        else:
            loop = scf.ForOp(lb, ub, step, inits)
            block = loop.body
            if kind == "parallel":
                loop.attributes[LOOP] = ir.StringAttr.get(kind)
                if EXTENT in op.attributes:
                    loop.attributes[EXTENT] = op.attributes[EXTENT]
            if "lanes" in op.attributes:  # LLVM's loop vectorizer would gather across them
                loop.attributes[LOOP_ANNOTATION] = ir.Attribute.parse(
                    "#llvm.loop_annotation<vectorize = #llvm.loop_vectorize<disable = true>>")
    body = _take_body(op, block, list(block.arguments))
    # read after the move, the terminator alone in the block: its operands name the new arguments
    end = op.regions[0].blocks[0].operations[0].operation
    with ir.InsertionPoint(block), end.location:
        if kind == "thread_binding":
            scf.ReduceOp([], 0)
        else:
            scf.YieldOp(list(end.operands))
    _replace_and_erase(op, loop.results)
    _lower_ops(body)


def _lower_if(op: ir.Operation) -> None:
    with ir.InsertionPoint(op), op.location:
        branch = scf.IfOp(op.operands[0])
    body = _take_body(op, branch.then_block, [])
    with ir.InsertionPoint(branch.then_block), op.location:
        scf.YieldOp([])
    _replace_and_erase(op, [])
    _lower_ops(body)


def _in_place(make):
    """A lowering that builds `make(op)` where the op was and erases the op; an op with a
    result is replaced by the value `make` returns."""

    def lower(op: ir.Operation) -> None:
        with ir.InsertionPoint(op), op.location:
            made = make(op)
        _replace_and_erase(op, [made] if len(op.results) else [])

    return lower


_LOWERINGS = {
    "hextir.for": _lower_for,
    "hextir.if": _lower_if,
    "hextir.buffer_load": _in_place(
        lambda op: memref.load(op.operands[0], list(op.operands)[1:])),
    "hextir.buffer_store": _in_place(
        lambda op: memref.store(op.operands[0], op.operands[1], list(op.operands)[2:])),
    "hextir.return": _in_place(lambda op: func.ReturnOp([])),
    "hextir.alloc_buffer": _in_place(lambda op: memref.alloc(op.results[0].type, [], [])),
    "hextir.barrier": _in_place(lambda op: gpu.barrier()),
}


def _take_body(op: ir.Operation, dest: ir.Block, args) -> list[ir.Operation]:
    """Move the body of `op` (all but its terminator) to the end of `dest`; the body's block
    arguments become `args`. Returns the ops moved."""
    source = op.regions[0].blocks[0]
    for old, new in zip(source.arguments, args, strict=True):
        old.replace_all_uses_with(new)
    moved = [view.operation for view in source.operations][:-1]
    for moving in moved:
        dest.append(moving)
    return moved


def _replace_and_erase(op: ir.Operation, values) -> None:
    for old, new in zip(op.results, values, strict=True):
        old.replace_all_uses_with(new)
    op.erase()


def _constant(value: ir.Value) -> int:
    owner = defining_op(value)
    assert owner is not None, "a loop bound defined by an arith.constant"
    return ir.IntegerAttr(owner.attributes["value"]).value


def _string(op: ir.Operation, name: str) -> str | None:
    return ir.StringAttr(op.attributes[name]).value if name in op.attributes else None
