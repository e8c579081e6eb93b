"""hexir-lower-cuda-to-gpu: each cuda-placed linalg op on buffers becomes one `gpu.launch`.

Runs after bufferization. The launch is truly parallel: the op's parallel loops are flattened
and spread over `ceil(total / block)` blocks of `block` threads (256, or fewer rounded up to a
warp when the op is small); thread `blockIdx.x * block + threadIdx.x` computes one output
element, guarded by `scf.if idx < total` because the total rarely divides evenly. Reduction
loops (a matmul's K, a softmax's row sum) stay serial inside the thread, carrying the
accumulator the way linalg defines it: start from the output element, fold every step in.

One rule covers every linalg op, named or generic: a loop that appears in the output's
indexing map is parallel, any other is a reduction. Named elementwise ops and `linalg.fill`
carry no maps; theirs are the identity (scalars read no index). The op's scalar body is cloned
into the launch with its block arguments bound to loaded elements, so whatever
hexir-lower-to-linalg wrote (gelu, layer_norm's normalisation ...) runs unchanged on the GPU.

The launch carries the op's `device = "cuda"` and names its kernel after the op and a
module-wide counter (`matmul_1`), which outlining keeps for the gpu.module, the kernel and
the device binary. A transfer (a `linalg.copy` with `src`/`dst`, see
hexir-prepare-bufferization) becomes `memref.copy` with those attributes: data movement,
never a kernel. Every fresh buffer gets the `device` of the op that fills it.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Sequence

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import arith, gpu, ir, memref, scf

PASS_NAME = "hexir-lower-cuda-to-gpu"

#: Threads per block for ops with at least this many output elements.
BLOCK = 256
WARP = 32

#: Named ops whose implicit maps are the identity (a scalar operand reads no index).
IDENTITY_NAMED = frozenset(
    {"linalg.fill", "linalg.copy", "linalg.add", "linalg.sub", "linalg.mul", "linalg.div"}
)


def run(module: ir.Module) -> None:
    """Launch every cuda-placed linalg op, copy every transfer, place every fresh buffer."""
    work: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("linalg.") and not op.results:
            _place_destination(op)
        if op.name.startswith("linalg.") and (_is_transfer(op) or _device(op) == "cuda"):
            work.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    kernels = 0
    for op in work:
        if _is_transfer(op):
            _transfer(op)
        else:
            _launch(op, f"{op.name.removeprefix('linalg.')}_{kernels}")
            kernels += 1


def _device(op: ir.Operation) -> str | None:
    if "device" not in op.attributes:
        return None
    return ir.StringAttr(op.attributes["device"]).value


def _place_destination(op: ir.Operation) -> None:
    """A fresh buffer lives where the op that fills it runs (a transfer's: its `dst`).

    Bufferization drops the `device` that tensor.empty carried; this puts it back on the
    allocation, so the buffer view shows which buffers are device memory.
    """
    key = "dst" if _is_transfer(op) else "device"
    owner = op.operands[-1].owner
    if key not in op.attributes or isinstance(owner, ir.Block):
        return
    device = op.attributes[key]
    alloc = owner.operation
    if alloc.name == "memref.alloc" and "device" not in alloc.attributes:
        alloc.attributes["device"] = device


def _is_transfer(op: ir.Operation) -> bool:
    return op.name == "linalg.copy" and "src" in op.attributes


def _transfer(op: ir.Operation) -> None:
    source, dest = _memref_operands(op)
    with ir.InsertionPoint(op), op.location:
        copy = memref.CopyOp(source, dest)
    for name in ("src", "dst"):
        copy.attributes[name] = op.attributes[name]
    op.erase()


def _memref_operands(op: ir.Operation) -> list[ir.Value]:
    if op.results:
        raise CompileError(
            f"{PASS_NAME}: '{op.name}' still returns a tensor; expected the bufferized form "
            "(run one-shot-bufferize first)", op.location
        )
    return list(op.operands)


def _maps(op: ir.Operation, operands: Sequence[ir.Value], out: ir.MemRefType) -> list[ir.AffineMap]:
    """The op's indexing maps: written on it, or the defaults of the named ops we emit."""
    if "indexing_maps" in op.attributes:
        return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if op.name == "linalg.matmul":
        return [ir.AffineMap.get(3, 0, [ir.AffineDimExpr.get(a), ir.AffineDimExpr.get(b)])
                for a, b in ((0, 2), (2, 1), (0, 1))]
    if op.name not in IDENTITY_NAMED:
        raise CompileError(
            f"{PASS_NAME}: unsupported cuda linalg op '{op.name}'; expected linalg.generic, "
            f"linalg.matmul or one of {', '.join(sorted(IDENTITY_NAMED))}", op.location
        )
    identity = ir.AffineMap.get_identity(out.rank)
    scalar = ir.AffineMap.get(out.rank, 0, [])
    return [identity if isinstance(v.type, ir.MemRefType) else scalar for v in operands]


def _launch(op: ir.Operation, name: str) -> None:
    """Replace `op` by a launch whose kernel gpu-kernel-outlining will call `name`."""
    operands = _memref_operands(op)
    n_in, n_out = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])
    if n_out != 1:
        raise CompileError(f"{PASS_NAME}: '{op.name}' has {n_out} outputs; expected 1", op.location)
    out_t = ir.MemRefType(operands[n_in].type)
    if not out_t.has_static_shape:
        raise CompileError(f"{PASS_NAME}: expected a static-shape output, got {out_t}", op.location)
    maps = _maps(op, operands, out_t)
    kernel = _Kernel(op, operands, maps, _loop_extents(op, operands, maps))
    block = BLOCK if kernel.total >= BLOCK else max(WARP, -(-kernel.total // WARP) * WARP)
    grid = -(-kernel.total // block)
    with ir.InsertionPoint(op), op.location:
        launch = gpu.LaunchOp((grid, 1, 1), (block, 1, 1))
        launch.attributes["device"] = op.attributes["device"]
        launch.attributes["module"] = ir.FlatSymbolRefAttr.get(name)
        launch.attributes["function"] = ir.FlatSymbolRefAttr.get(name)
        body = launch.regions[0].blocks[0]
        with ir.InsertionPoint(body):
            kernel.thread(body, block)
            gpu.TerminatorOp()
    op.erase()


def _dim(expr: ir.AffineExpr, op: ir.Operation) -> int:
    if not isinstance(expr, ir.AffineDimExpr):
        raise CompileError(f"{PASS_NAME}: output indexing map is not a projection", op.location)
    return expr.position


def _loop_extents(
    op: ir.Operation, operands: Sequence[ir.Value], maps: Sequence[ir.AffineMap]
) -> list[int]:
    """Each loop's trip count, read off the first operand dimension it indexes."""
    extents: dict[int, int] = {}
    for value, amap in zip(operands, maps):
        if not isinstance(value.type, ir.MemRefType):
            continue
        shape = ir.MemRefType(value.type).shape
        for pos, expr in enumerate(amap.results):
            if isinstance(expr, ir.AffineDimExpr):
                extents.setdefault(expr.position, shape[pos])
    n = maps[0].n_dims
    if sorted(extents) != list(range(n)):
        raise CompileError(f"{PASS_NAME}: some loop of '{op.name}' indexes no operand", op.location)
    return [extents[d] for d in range(n)]


class _Kernel:
    """What one thread of the launch does for `op`: one output element, reductions serial."""

    def __init__(self, op: ir.Operation, operands: list[ir.Value], maps: list[ir.AffineMap],
                 extents: list[int]) -> None:
        self.op, self.operands, self.maps, self.extents = op, operands, maps, extents
        self.out_dims = [_dim(e, op) for e in maps[-1].results]
        self.reductions = [d for d in range(len(extents)) if d not in self.out_dims]
        self.total = pymath.prod(extents[d] for d in self.out_dims)
        self.body = op.regions[0].blocks[0]
        self._consts: dict[int, ir.Value] = {}
        self._launch_body: ir.Block | None = None

    def index(self, v: int) -> ir.Value:
        """An index constant, made once at the top of the launch body (it dominates all uses)."""
        if v not in self._consts:
            with ir.InsertionPoint.at_block_begin(self._launch_body):
                self._consts[v] = arith.ConstantOp(ir.IndexType.get(), v).result
        return self._consts[v]

    def thread(self, launch_body: ir.Block, block: int) -> None:
        """Flat id, guard, delinearize, reduce, store."""
        self._launch_body = launch_body
        block_id, thread_id = launch_body.arguments[0], launch_body.arguments[3]
        flat = arith.addi(arith.muli(block_id, self.index(block)), thread_id)
        inside = arith.cmpi(arith.CmpIPredicate.ult, flat, self.index(self.total))
        guard = scf.IfOp(inside)
        with ir.InsertionPoint(guard.then_block):
            ivs = self._delinearize(flat)
            out = self.operands[-1]
            out_idx = self._indices(self.maps[-1], ivs)
            reads_out = self.reductions or _used(self.body.arguments[-1])
            acc = memref.load(out, out_idx) if reads_out else None
            memref.store(self._reduce(self.reductions, ivs, acc), out, out_idx)
            scf.YieldOp([])

    def _delinearize(self, flat: ir.Value) -> dict[int, ir.Value]:
        """Row-major: the innermost output loop varies fastest (coalesced stores)."""
        ivs: dict[int, ir.Value] = {}
        rest = flat
        for n, d in enumerate(reversed(self.out_dims)):
            if n == len(self.out_dims) - 1:
                ivs[d] = rest
                break
            ivs[d] = arith.remui(rest, self.index(self.extents[d]))
            rest = arith.divui(rest, self.index(self.extents[d]))
        return ivs

    def _reduce(
        self, reductions: list[int], ivs: dict[int, ir.Value], acc: ir.Value | None
    ) -> ir.Value:
        if not reductions:
            return self._scalar_body(ivs, acc)
        d, inner = reductions[0], reductions[1:]
        loop = scf.ForOp(self.index(0), self.index(self.extents[d]), self.index(1), [acc])
        with ir.InsertionPoint(loop.body):
            ivs = {**ivs, d: loop.induction_variable}
            scf.YieldOp([self._reduce(inner, ivs, loop.body.arguments[1])])
        return loop.results[0]

    def _indices(self, amap: ir.AffineMap, ivs: dict[int, ir.Value]) -> list[ir.Value]:
        return [
            ivs[e.position] if isinstance(e, ir.AffineDimExpr) else self.index(e.value)
            for e in amap.results
        ]

    def _scalar_body(self, ivs: dict[int, ir.Value], acc: ir.Value | None) -> ir.Value:
        """Clone the linalg body with its arguments bound to this thread's elements."""
        bound: dict[ir.Value, ir.Value] = {}
        for arg, value, amap in zip(self.body.arguments[:-1], self.operands[:-1], self.maps[:-1]):
            if not isinstance(value.type, ir.MemRefType):
                bound[arg] = value
            elif _used(arg):
                bound[arg] = memref.load(value, self._indices(amap, ivs))
        if acc is not None:
            bound[self.body.arguments[-1]] = acc
        for inner in self.body.operations:
            if inner.name == "linalg.yield":
                return bound.get(inner.operands[0], inner.operands[0])
            if inner.name == "linalg.index":
                bound[inner.results[0]] = ivs[ir.IntegerAttr(inner.attributes["dim"]).value]
                continue
            clone = inner.clone(ip=ir.InsertionPoint.current)
            for i, operand in enumerate(clone.operands):
                clone.operands[i] = bound.get(operand, operand)
            for old, new in zip(inner.results, clone.results):
                bound[old] = new
        raise AssertionError("a linalg body ends with linalg.yield")


def _used(value: ir.Value) -> bool:
    return any(True for _ in value.uses)
