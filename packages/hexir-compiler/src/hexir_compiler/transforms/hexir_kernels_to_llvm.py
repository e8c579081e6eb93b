"""hexir-kernels-to-llvm: every kernel into the LLVM dialect, host and device alike.

- A cpu kernel (a `func.func` of loops) becomes an `llvm.func` of the same name taking one
  bare pointer per buffer and its range (`i64 lo, i64 hi`), and a routine it calls an
  `llvm.func` declaration: f32 exp, erf and tanh to arithmetic LLVM can vectorize
  (`target.host_math`), scf to cf, math to LLVM intrinsics (and libm calls, `erf`, ...,
  where LLVM has no intrinsic), the vector ops a schedule writes (loads, broadcasts, lane
  extracts: `KernelBuilder.load_vector`), memref, arith, cf and func to LLVM with the
  bare-pointer calling convention.
- A cuda kernel (a `gpu.module`) gets its NVVM targets (`sm_75`, and the chip the compile
  targets when that is newer, e.g. `sm_90`: the PTX is generated for each, so an sm_90
  image is sm_90 code, not sm_75 code assembled for sm_90; libdevice linked for the `__nv_*`
  math functions) and its body is converted to NVVM, also with bare pointers.

The conversions run on a scratch module holding only the kernels, so the graph (the entry
functions, still hexir ops on tensors) is untouched, and a kernel already in the LLVM dialect
is left as it is: the pass can run on its own output. Kernel attributes (`device`,
`hexir.kernel`, `hexir.params`, `hexir.grid`) are kept on the lowered op.
"""

from __future__ import annotations

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import ir, memref, passmanager
from hexir_compiler.target import host_math
from hexir_compiler.target.cuda import BASE_ARCH
from hexir_compiler.transforms.hextir_to_loops import (
    GRID,
    KERNEL_ATTRIBUTES,
    LOOP_ANNOTATION,
    is_kernel,
)

PASS_NAME = "hexir-kernels-to-llvm"
HOST = (
    "convert-scf-to-cf",
    "expand-strided-metadata",
    "convert-math-to-llvm",
    "convert-math-to-libm",
    "convert-vector-to-llvm",
    "finalize-memref-to-llvm",
    "convert-arith-to-llvm",
    "convert-index-to-llvm",
    "convert-cf-to-llvm",
    "convert-func-to-llvm{use-bare-ptr-memref-call-conv=1}",
    "reconcile-unrealized-casts",
    "canonicalize",
    "cse",
)
DEVICE = (
    "gpu.module(convert-scf-to-cf, expand-strided-metadata,"
    " convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},"
    " reconcile-unrealized-casts, canonicalize, cse)",
)


def run(module: ir.Module | ir.Operation, chips: tuple[int, ...] = (BASE_ARCH,)) -> None:
    """Lower every kernel of `module` not yet in the LLVM dialect, in place; cuda kernels get
    an NVVM target for each of `chips` (`target.cuda.architectures`)."""
    module = module.operation
    body = module.regions[0].blocks[0]
    ops = [view.operation for view in body.operations]
    host = [op for op in ops if op.name == "func.func" and is_kernel(op)]
    device = [op for op in ops if op.name == "gpu.module" and "targets" not in op.attributes]
    for kernel in host + [_gpu_func(op) for op in device]:
        _flatten_empty_buffers(kernel)
    for kernel in host:
        host_math.rewrite(kernel)
    if host:
        _convert(module, host, HOST)
        module.walk(_loop_annotations)
    if device:
        target = _nvvm_targets(chips)
        for op in device:
            op.attributes["targets"] = target
        _convert(module, device, DEVICE)
        for op in device:
            _dedupe_kernel_marker(op)


def _convert(module: ir.Operation, kernels: list[ir.Operation], passes: tuple[str, ...]) -> None:
    """Run `passes` on `kernels` moved to a scratch module, then move the results back."""
    body = module.regions[0].blocks[0]
    order = [_symbol(view.operation) for view in body.operations]
    attributes = {
        _symbol(op): {k: op.attributes[k] for k in (*KERNEL_ATTRIBUTES, GRID)
                      if k in op.attributes}
        for op in kernels
    }
    with module.context, module.location:
        scratch = ir.Module.create()
        if "gpu.container_module" in module.attributes:
            scratch.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
    for op in kernels:
        scratch.body.append(op)
    pm = passmanager.PassManager.parse(f"builtin.module({','.join(passes)})", module.context)
    try:
        pm.run(scratch.operation)
    except ir.MLIRError as err:
        first = err.error_diagnostics[0] if err.error_diagnostics else None
        message = first.message if first else str(err).splitlines()[0]
        raise CompileError(f"could not lower kernels to LLVM: {message}",
                           first.location if first else None) from None
    taken = set(order)
    for view in list(scratch.body.operations):
        op = view.operation
        name = _symbol(op)
        if name in attributes:
            for key, value in attributes[name].items():
                op.attributes[key] = value
        elif name in taken:  # a library declaration (expf, ...) another kernel brought
            op.erase()
            continue
        taken.add(name)
        body.append(op)
    _restore_order(body, order)


def _loop_annotations(op: ir.Operation) -> ir.WalkResult:
    """A back edge's loop annotation (scf-to-cf leaves it a discardable attribute) as the
    branch's own `loop_annotation`, which becomes `!llvm.loop` metadata."""
    if op.name == "llvm.br" and LOOP_ANNOTATION in op.attributes:
        op.attributes["loop_annotation"] = op.attributes[LOOP_ANNOTATION]
        del op.attributes[LOOP_ANNOTATION]
    return ir.WalkResult.ADVANCE


def _gpu_func(container: ir.Operation) -> ir.Operation:
    return next(v.operation for v in container.regions[0].blocks[0].operations
                if v.operation.name == "gpu.func")


def _flatten_empty_buffers(kernel: ir.Operation) -> None:
    """Take each buffer with no elements (`memref<2x0xf32>`) as a rank-1 `memref<0xf32>`,
    expanded back to its shape at entry: the bare-pointer convention converts a memref only
    when MLIR can give it strides, which it does not for a zero dimension in a higher rank.
    Nothing reads or writes such a buffer (every loop over it has no iteration)."""
    if not len(kernel.regions[0].blocks):  # a routine's declaration
        return
    block = kernel.regions[0].blocks[0]
    ftype = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value)
    buffers = list(block.arguments)[:len(ftype.inputs)]  # not a gpu.func's shared buffers
    for arg in buffers:
        t = arg.type
        if not isinstance(t, ir.MemRefType):
            continue
        t = ir.MemRefType(t)
        if t.rank < 2 or 0 not in t.shape:
            continue
        with kernel.context, kernel.location:
            flat = ir.MemRefType.get([0], t.element_type, memory_space=t.memory_space)
            first = next(iter(block.operations))
            view = memref.ExpandShapeOp(t, arg, [list(range(t.rank))], [], t.shape,
                                        ip=ir.InsertionPoint(first))
            arg.replace_all_uses_except(view.result, view.operation)
            arg.set_type(flat)
    with kernel.context:
        kernel.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in buffers], ftype.results))


def _restore_order(body: ir.Block, order: list[str]) -> None:
    """Library declarations first (by name), then every other op in the order it had."""
    rank = {name: i for i, name in enumerate(order)}
    ops = [view.operation for view in body.operations]
    ops.sort(key=lambda op: (1, rank[_symbol(op)], "") if _symbol(op) in rank
             else (0, 0, _symbol(op)))
    for op in ops:
        body.append(op)


def _dedupe_kernel_marker(container: ir.Operation) -> None:
    """convert-gpu-to-nvvm writes `gpu.kernel` twice into the kernel's attribute dictionary,
    which MLIR then cannot parse back: keep one, so the printed stage is a valid input."""
    for view in container.regions[0].blocks[0].operations:
        attributes = view.operation.attributes
        if "gpu.kernel" in attributes:
            while "gpu.kernel" in attributes:
                del attributes["gpu.kernel"]
            attributes["gpu.kernel"] = ir.UnitAttr.get(container.context)


def _nvvm_targets(chips: tuple[int, ...]) -> ir.Attribute:
    from hexir_compiler.target.cuda_toolkit import find_toolkit

    libdevice = str(find_toolkit().libdevice).replace("\\", "\\\\").replace('"', '\\"')
    targets = ", ".join(f'#nvvm.target<O = 3, chip = "sm_{chip}", link = ["{libdevice}"]>'
                        for chip in chips)
    return ir.Attribute.parse(f"[{targets}]")


def _symbol(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value if "sym_name" in op.attributes else ""
