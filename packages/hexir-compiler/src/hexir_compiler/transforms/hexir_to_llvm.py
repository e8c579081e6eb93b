"""hexir-to-llvm: the host program to the LLVM dialect; `hexir.print` becomes printf calls.

A print of a buffer becomes a loop nest that calls `printf("%f ", element)` for every element
(f32 widened to double, as C varargs require) and `printf("\\n")` after each innermost row:
the same text the runtime's PRINT prints, rows x columns, six decimals and a space after each
value. Rank 0 and rank 1 print one line.

Then the host is converted with the upstream patterns, in dependency order: scf to cf (the
print loops and linalg's loops), math (intrinsics where LLVM has them, libm calls for the rest:
erf, tanh), memref (strided metadata first), arith, index, cf, func. GPU ops are left alone:
the GPU part is lowered by convert-gpu-to-nvvm / gpu-to-llvm around this pass.
"""

from __future__ import annotations

from hexir_compiler.mlir import arith, ir, llvm, memref, passmanager, scf

PASS_NAME = "hexir-to-llvm"

#: The upstream conversions after the print rewrite, in order.
HOST_PIPELINE = (
    "convert-scf-to-cf",
    "convert-math-to-llvm",
    "convert-math-to-libm",
    "expand-strided-metadata",
    "finalize-memref-to-llvm",
    "convert-arith-to-llvm",
    "convert-index-to-llvm",
    "convert-cf-to-llvm",
    "convert-func-to-llvm",
    "reconcile-unrealized-casts",
)

PRINTF = "printf"
FORMAT = "frmt_spec"
NEWLINE = "nl"
DECLARATIONS = (
    f"llvm.func @{PRINTF}(!llvm.ptr, ...) -> i32",
    f'llvm.mlir.global internal constant @{FORMAT}("%f \\00") {{addr_space = 0 : i32}}',
    f'llvm.mlir.global internal constant @{NEWLINE}("\\0A\\00") {{addr_space = 0 : i32}}',
)


def run(module: ir.Module) -> None:
    """Rewrite every print, then convert the host to the LLVM dialect (raises ir.MLIRError)."""
    prints_to_printf(module)
    pm = passmanager.PassManager.parse(f"builtin.module({','.join(HOST_PIPELINE)})")
    pm.run(module.operation)


def prints_to_printf(module: ir.Module) -> None:
    prints: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "hexir.print":
            prints.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if not prints:
        return
    _declare(module)
    for op in prints:
        with ir.InsertionPoint(op), op.location:
            _print_buffer(op.operands[0])
        op.erase()


def _declare(module: ir.Module) -> None:
    """printf and its two format strings, once per module, at the top of the body."""
    existing = {
        ir.StringAttr(op.attributes["sym_name"]).value
        for op in module.body.operations
        if "sym_name" in op.attributes
    }
    first = module.body.operations[0] if len(module.body.operations) else None
    for text in DECLARATIONS:
        op = ir.Operation.parse(text)
        if ir.StringAttr(op.attributes["sym_name"]).value in existing:
            continue
        if first is None:
            ir.InsertionPoint(module.body).insert(op)
        else:
            ir.InsertionPoint(first).insert(op)


def _print_buffer(buffer: ir.Value) -> None:
    t = buffer.type
    if not isinstance(t, ir.MemRefType):
        raise TypeError(f"hexir.print reaches {PASS_NAME} on {t}; bufferize first")
    shape = list(t.shape)
    _nest(buffer, shape, [])


def _nest(buffer: ir.Value, shape: list[int], ivs: list[ir.Value]) -> None:
    """One scf.for per dimension; the innermost prints its elements, then a newline."""
    depth = len(ivs)
    if depth == len(shape):
        _printf(FORMAT, _as_double(memref.load(buffer, ivs)))
        if depth == 0:
            _printf(NEWLINE)
        return
    index = ir.IndexType.get()
    loop = scf.ForOp(
        arith.ConstantOp(index, 0).result,
        arith.ConstantOp(index, shape[depth]).result,
        arith.ConstantOp(index, 1).result,
    )
    with ir.InsertionPoint(loop.body):
        _nest(buffer, shape, [*ivs, loop.induction_variable])
        scf.YieldOp([])
    if depth == len(shape) - 1:
        _printf(NEWLINE)


def _as_double(value: ir.Value) -> ir.Value:
    f64 = ir.F64Type.get()
    return value if value.type == f64 else arith.extf(f64, value)


def _printf(fmt: str, *args: ir.Value) -> None:
    ptr = ir.Type.parse("!llvm.ptr")
    address = llvm.AddressOfOp(ptr, fmt).result
    llvm.call(
        ir.IntegerType.get_signless(32),
        [address, *args],
        [],
        [],
        callee=PRINTF,
        var_callee_type=ir.TypeAttr.get(ir.Type.parse("!llvm.func<i32 (ptr, ...)>")),
    )
