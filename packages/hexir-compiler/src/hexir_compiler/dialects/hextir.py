"""The kernel dialect `hextir`: one device kernel on memrefs, each loop carrying its schedule.

A `prim_func` is a kernel in destination-passing style (the last buffer is the output), reached
only through `hexir.call_tir`. A `for` loop says how it runs (`kind`): serial, parallel (the
cpu splits its outermost one across threads), or bound to a GPU axis (`thread_binding` +
`bind`), so a scheduling decision is written in the IR rather than implied by which pass ran.
A cuda kernel may stage data in its block's shared memory (`alloc_buffer`, a memref in the
GPU's workgroup address space, one per block) and order its threads' accesses to it with
`barrier`. Generic form only, like `hexir`; the verifiers check what the IRDL declaration
cannot.
"""

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hexir_compiler.dialects._bases import Dialect
from hexir_compiler.dialects._verify import (
    DEVICES,
    Invalid,
    memref,
    string_attr,
    verify,
)
from hexir_compiler.mlir import ext, ir
from hexir_format import KernelKind

LOOP_KINDS = ("serial", "parallel", "thread_binding")
AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")
# The kernel kinds a `.hxb` can name, in the format's order: one list, owned by the format.
KERNELS = tuple(str(kind) for kind in KernelKind)
#: The memory space of a block's shared buffers (`alloc_buffer`).
WORKGROUP = "#gpu.address_space<workgroup>"
#: A kernel's attribute naming the symbols whose values it takes after its buffers.
SYMBOLS = "hexir.symbols"


class Hextir(Dialect, name="hextir"):
    pass


if TYPE_CHECKING:
    from hexir_compiler.dialects._bases import Operation as _Operation
else:
    _Operation = Hextir.Operation


class HextirOp(_Operation):
    """Base of every hextir op (no name: not an op itself)."""

    def check(self) -> None:
        """Raise `Invalid` when the op breaks a rule; see `_verify`."""

    def verify_invariants(self) -> bool:
        return verify(self)


def _entry_block(op) -> ir.Block:
    region = op.regions[0]
    if len(region.blocks) != 1:
        raise Invalid(f"expected a body of one block, got {len(region.blocks)}")
    return region.blocks[0]


def _types(values) -> list[str]:
    return [str(v.type) for v in values]


def _one_of(attrs, name: str, allowed: tuple[str, ...], noun: str) -> str:
    """The string attribute `name`, which must be one of `allowed` (`noun` says what they are)."""
    value = string_attr(attrs[name], name)
    if value not in allowed:
        raise Invalid(f"{name} '{value}' is not {noun}; expected one of {', '.join(allowed)}")
    return value


class PrimFuncOp(HextirOp, name="prim_func", traits=[ir.NoTerminatorTrait]):
    """A kernel: `function_type` = (memref..., memref_dst, index...) -> (), body ends in
    hextir.return. The index arguments are the values of the symbols `hexir.symbols` names,
    in order: a kernel whose sizes are symbolic takes each buffer as a flat `memref<?xT>`
    and indexes the view of it that those values shape (`KernelBuilder`).

    Discardable attributes, checked when present: `device`, `hexir.kernel` (one of KERNELS),
    `hexir.params` (array<f64>: the kernel's parameters as the format README lists them).
    """

    sym_name: ir.StringAttr
    function_type: ir.TypeAttr
    body: ext.Region

    def check(self) -> None:
        attrs = self.operation.attributes
        ftype = ir.TypeAttr(attrs["function_type"]).value
        if not isinstance(ftype, ir.FunctionType):
            raise Invalid(f"function_type must be a function type, got {ftype}")
        ftype = ir.FunctionType(ftype)
        if ftype.results:
            raise Invalid("a kernel returns nothing; it writes its last buffer")
        symbols = attrs[SYMBOLS] if SYMBOLS in attrs else None
        if symbols is not None and not (isinstance(symbols, ir.ArrayAttr) and all(
                isinstance(s, ir.StringAttr) for s in symbols)):
            raise Invalid(f"{SYMBOLS} must be an array of strings, got {symbols}")
        sizes = len(symbols) if symbols is not None else 0
        buffers = list(ftype.inputs)[:len(ftype.inputs) - sizes]
        if not buffers:
            raise Invalid("a kernel takes at least its destination buffer")
        for i, t in enumerate(buffers):
            memref(t, f"buffer #{i}", dynamic=sizes > 0)
        for t in list(ftype.inputs)[len(buffers):]:
            if not isinstance(t, ir.IndexType):
                raise Invalid(f"a kernel's {sizes} size argument{'s' * (sizes != 1)} "
                              f"({SYMBOLS}) come{'s' * (sizes == 1)} after its buffers as "
                              f"index values; found {t}")
        block = _entry_block(self)
        if _types(block.arguments) != [str(t) for t in ftype.inputs]:
            raise Invalid(
                f"entry block arguments ({', '.join(_types(block.arguments))}) do not match "
                f"function_type {ftype}"
            )
        ops = list(block.operations)
        if not ops or ops[-1].operation.name != "hextir.return":
            raise Invalid("body must end with hextir.return")
        if "hexir.kernel" in attrs:
            _one_of(attrs, "hexir.kernel", KERNELS, "a kernel kind")
        if "hexir.params" in attrs and not isinstance(attrs["hexir.params"], ir.DenseF64ArrayAttr):
            raise Invalid(f"hexir.params must be array<f64: ...>, got {attrs['hexir.params']}")


class ReturnOp(HextirOp, name="return", traits=[ir.IsTerminatorTrait]):
    """Terminator of a prim_func (no values: the result is in the destination buffer)."""

    def check(self) -> None:
        parent = self.operation.parent
        if parent is None or parent.name != "hextir.prim_func":
            raise Invalid("expects its parent to be a hextir.prim_func")
        if len(self.operands):
            raise Invalid("a kernel returns no values")


class ForOp(HextirOp, name="for"):
    """for %iv = lb to ub step s, carrying values (`init_args` -> results).

    The body's block arguments are (%iv: index, %carried...), and its hextir.yield gives the
    next carried values. IRDL binds a variadic operand's constraint once, so all carried
    values share one type (one accumulator, or several of one element type). A parallel loop
    may say `lanes = N`: each iteration owns N neighbouring elements (`schedule.lanes`), to
    be one vector within the iteration, never a vector across iterations.
    """

    lower_bound: ext.Operand[Any]
    upper_bound: ext.Operand[Any]
    step: ext.Operand[Any]
    init_args: Sequence[ext.Operand[Any]]
    kind: ir.StringAttr
    results_: Sequence[ext.Result[Any]]
    body: ext.Region

    def check(self) -> None:
        for name, v in (
            ("lower bound", self.lower_bound),
            ("upper bound", self.upper_bound),
            ("step", self.step),
        ):
            if not isinstance(v.type, ir.IndexType):
                raise Invalid(f"{name} must be an index, got {v.type}")
        attrs = self.operation.attributes
        kind = _one_of(attrs, "kind", LOOP_KINDS, "a loop kind")
        if kind == "thread_binding":
            if "bind" not in attrs:
                raise Invalid("a thread_binding loop needs 'bind' (blockIdx.x ... threadIdx.z)")
            _one_of(attrs, "bind", AXES, "a GPU axis")
        elif "bind" in attrs:
            raise Invalid(f"only a thread_binding loop takes 'bind'; this one is {kind}")
        lanes = attrs["lanes"] if "lanes" in attrs else None
        if lanes is not None and (kind != "parallel" or not isinstance(lanes, ir.IntegerAttr)
                                  or ir.IntegerAttr(lanes).value < 2):
            raise Invalid(f"'lanes' is an integer >= 2 on a parallel loop; found {lanes} on a "
                          f"{kind} loop")
        carried = _types(self.init_args)
        if _types(self.results) != carried:
            raise Invalid(
                f"results ({', '.join(_types(self.results))}) must match the "
                f"init_args ({', '.join(carried)})"
            )
        block = _entry_block(self)
        if _types(block.arguments) != ["index", *carried]:
            raise Invalid(
                f"body arguments ({', '.join(_types(block.arguments))}) must be "
                f"(index{''.join(', ' + t for t in carried)})"
            )
        _check_yield(block, carried)


def _check_yield(block: ir.Block, carried: list[str]) -> None:
    ops = list(block.operations)
    if not ops or ops[-1].operation.name != "hextir.yield":
        raise Invalid("body must end with hextir.yield")
    yielded = _types(ops[-1].operands)
    if yielded != carried:
        raise Invalid(
            f"hextir.yield gives ({', '.join(yielded)}) but the loop carries ({', '.join(carried)})"
        )


class IfOp(HextirOp, name="if"):
    """Run the body when `cond` (i1) holds: the bounds guard of a thread-bound loop nest."""

    cond: ext.Operand[Any]
    body: ext.Region

    def check(self) -> None:
        t = self.operands[0].type
        if not (isinstance(t, ir.IntegerType) and ir.IntegerType(t).width == 1):
            raise Invalid(f"condition must be i1, got {t}")
        _check_yield(_entry_block(self), [])


class YieldOp(HextirOp, name="yield", traits=[ir.IsTerminatorTrait]):
    """Terminator of for / if; for a loop, the next carried values."""

    values: Sequence[ext.Operand[Any]]

    def check(self) -> None:
        parent = self.operation.parent
        if parent is None or parent.name not in ("hextir.for", "hextir.if"):
            raise Invalid("expects its parent to be hextir.for or hextir.if")


class AllocBufferOp(HextirOp, name="alloc_buffer"):
    """A buffer in the block's shared (workgroup) memory: one per thread block, its contents
    undefined until a thread writes them, visible to the block's other threads after a
    `barrier`. Only cuda kernels have it; the GPU lowering makes it a workgroup attribution."""

    result: ext.Result[Any]

    def check(self) -> None:
        t = self.results[0].type
        memref(t, "a shared buffer")
        if str(ir.MemRefType(t).memory_space) != WORKGROUP:
            raise Invalid(f"a shared buffer lives in {WORKGROUP}, got {t}")
        if _kernel_device(self) != "cuda":
            raise Invalid("only a cuda kernel has shared memory")


class BarrierOp(HextirOp, name="barrier"):
    """Wait until every thread of the block reaches this barrier; what each wrote before it
    (to shared or global memory) is visible to all after it. Every thread of a block must
    reach the same barriers: one inside a guard that some threads skip is undefined."""

    def check(self) -> None:
        if _kernel_device(self) != "cuda":
            raise Invalid("only a cuda kernel has barriers")


def _kernel_device(op) -> str | None:
    node = op.operation.parent
    while node is not None and node.name != "hextir.prim_func":
        node = node.parent
    if node is None or "device" not in node.attributes:
        return None
    return ir.StringAttr(node.attributes["device"]).value


def _element(buffer: ir.Value, indices: list[ir.Value]) -> ir.Type:
    """The element type of `buffer`, indexed by `indices` (one index per axis)."""
    shape, _ = memref(buffer, "buffer", dynamic=True)
    if len(indices) != len(shape):
        raise Invalid(f"a rank-{len(shape)} buffer needs {len(shape)} indices, got {len(indices)}")
    for i, v in enumerate(indices):
        if not isinstance(v.type, ir.IndexType):
            raise Invalid(f"index #{i} must be an index, got {v.type}")
    return ir.MemRefType(buffer.type).element_type


class BufferLoadOp(HextirOp, name="buffer_load"):
    """buffer[indices...] -> element."""

    buffer: ext.Operand[Any]
    indices: Sequence[ext.Operand[Any]]
    result: ext.Result[Any]

    def check(self) -> None:
        buffer, *indices = self.operands
        elem = _element(buffer, indices)
        if self.results[0].type != elem:
            raise Invalid(f"result type {self.results[0].type} is not the element type {elem}")


class BufferStoreOp(HextirOp, name="buffer_store"):
    """buffer[indices...] = value."""

    value: ext.Operand[Any]
    buffer: ext.Operand[Any]
    indices: Sequence[ext.Operand[Any]]

    def check(self) -> None:
        value, buffer, *indices = self.operands
        elem = _element(buffer, indices)
        if value.type != elem:
            raise Invalid(f"stored value type {value.type} is not the element type {elem}")


__all__ = ["AXES", "DEVICES", "KERNELS", "LOOP_KINDS", "WORKGROUP"]
