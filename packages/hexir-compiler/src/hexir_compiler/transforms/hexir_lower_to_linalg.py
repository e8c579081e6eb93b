"""hexir-lower-to-linalg: every graph op becomes loops on tensors (linalg, tensor, arith).

This is the level a person reads to see *what* each op computes as a loop nest, before
buffers exist. Matrix products of two rank-2 operands and same-shape binary ops use the named
linalg ops (`linalg.matmul`, `linalg.add` ...), which read best; everything else is a
`linalg.generic` whose indexing maps say the broadcasting, the reduction axes and the
permutation. Composite ops (softmax, layer_norm, gelu) are written as a few generics, as a
numerically careful reference would (softmax subtracts the row max first).

`hexir.print` and `hexir.transfer` stay: they are not computations, and the later stages
lower them (print to printf calls, a transfer to a copy into a fresh buffer).

The op's `device` (written by hexir-partition) is copied onto every op created for it that
makes or computes a tensor, so the placement travels with the op into bufferization and the
GPU lowering. Scalar constants (a fill's zero) are not placed: they are immediates, and
canonicalization shares one among ops of both devices.
"""

from __future__ import annotations

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import arith, ir, linalg, tensor
from hexir_compiler.transforms import linalg_build as lb

PASS_NAME = "hexir-lower-to-linalg"

#: Graph ops the later stages lower themselves.
KEPT = frozenset({"hexir.print", "hexir.transfer"})

UNARY = {
    "hexir.relu": lb.relu,
    "hexir.sigmoid": lb.sigmoid,
    "hexir.tanh": lb.tanh,
    "hexir.exp": lb.exp,
    "hexir.sqrt": lb.sqrt,
    "hexir.neg": lb.neg,
}
BINARY = {"hexir.add": "add", "hexir.sub": "sub", "hexir.mul": "mul", "hexir.div": "div"}
NAMED_BINARY = {"add": linalg.add, "sub": linalg.sub, "mul": linalg.mul, "div": linalg.div}
REDUCTIONS = ("hexir.reduce_sum", "hexir.reduce_mean", "hexir.reduce_max")


def run(module: ir.Module) -> None:
    """Lower every graph op in `module` in place; `CompileError` names the first op it cannot."""
    for op in _graph_ops(module):
        _lower(op)


def _graph_ops(module: ir.Module) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("hexir.") and op.name not in KEPT:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def _lower(op: ir.Operation) -> None:
    block = op.block
    before = len(block.operations)
    position = _index_in_block(op)
    with ir.InsertionPoint(op), op.location:
        result = _build(op)
    created = len(block.operations) - before
    if "device" in op.attributes:
        for i in range(position, position + created):
            new = block.operations[i]
            if any(isinstance(r.type, ir.ShapedType) for r in new.results):
                new.attributes["device"] = op.attributes["device"]
    op.results[0].replace_all_uses_with(result)
    op.erase()


def _index_in_block(op: ir.Operation) -> int:
    for i, candidate in enumerate(op.block.operations):
        if candidate == op:
            return i
    raise AssertionError("an op is always in its own block")


def _build(op: ir.Operation) -> ir.Value:
    name = op.name
    xs = list(op.operands)
    out = ir.RankedTensorType(op.results[0].type) if op.results else None
    if name == "hexir.constant":
        return arith.ConstantOp(out, op.attributes["value"]).result
    if name in UNARY:
        return lb.elementwise([xs[0]], out, UNARY[name])
    if name in BINARY:
        return _binary(BINARY[name], xs[0], xs[1], out)
    if name == "hexir.gelu":
        return lb.elementwise([xs[0]], out, lb.gelu(_approximate(op)))
    if name == "hexir.linear":
        return _linear(xs[0], xs[1], out)
    if name == "hexir.matmul":
        return _matmul(xs[0], xs[1], out)
    if name == "hexir.softmax":
        axis = ir.IntegerAttr(op.attributes["axis"]).value % out.rank
        return lb.softmax(xs[0], axis)
    if name == "hexir.layer_norm":
        return lb.layer_norm(xs[0], xs[1], xs[2], ir.FloatAttr(op.attributes["epsilon"]).value)
    if name == "hexir.transpose":
        return lb.transpose(xs[0], list(ir.DenseI64ArrayAttr(op.attributes["permutation"])))
    if name == "hexir.reshape":
        return lb.reshape(xs[0], out)
    if name in REDUCTIONS:
        rank = ir.RankedTensorType(xs[0].type).rank
        axes = sorted({a % rank for a in ir.DenseI64ArrayAttr(op.attributes["axes"])})
        return lb.reduce(xs[0], axes, name.removeprefix("hexir.reduce_"), out)
    raise CompileError(
        f"{PASS_NAME} cannot lower '{name}'; the linalg path takes graph ops only (call_tir "
        "belongs to the kernel-level branch: -emit=mlir-tir or -emit=hxb)", op.location
    )


def _approximate(op: ir.Operation) -> str:
    if "approximate" not in op.attributes:
        return "none"
    return ir.StringAttr(op.attributes["approximate"]).value


def _binary(kind: str, a: ir.Value, b: ir.Value, out: ir.RankedTensorType) -> ir.Value:
    """Same shapes: the named op; otherwise a generic whose maps say the broadcast."""
    if a.type == out and b.type == out:
        return NAMED_BINARY[kind](a, b, outs=[tensor.empty(out.shape, out.element_type)])
    maps = [lb.broadcast_map(v, out) for v in (a, b)] + [lb.identity(out.rank)]
    return lb.generic([a, b], out, maps, ["parallel"] * out.rank, lb.BINARY_BODIES[kind])


def _linear(x: ir.Value, w: ir.Value, out: ir.RankedTensorType) -> ir.Value:
    """x [..., K] . w [K, N]: loops d0.. over the output, the last loop over K."""
    if ir.RankedTensorType(x.type).rank == 2:
        return linalg.matmul(x, w, outs=[lb.zeros(out)])
    r = out.rank
    k = r
    x_map = lb.affine(r + 1, [*range(r - 1), k])
    w_map = lb.affine(r + 1, [k, r - 1])
    o_map = lb.affine(r + 1, list(range(r)))
    iters = ["parallel"] * r + ["reduction"]
    maps = [x_map, w_map, o_map]
    return lb.generic([x, w], out, maps, iters, lb.multiply_add, init=lb.zeros(out))


def _matmul(a: ir.Value, b: ir.Value, out: ir.RankedTensorType) -> ir.Value:
    """a [..., M, K] . b [..., K, N] with numpy-broadcast batch dimensions."""
    ta, tb = ir.RankedTensorType(a.type), ir.RankedTensorType(b.type)
    if ta.rank == 2 and tb.rank == 2:
        return linalg.matmul(a, b, outs=[lb.zeros(out)])
    r = out.rank
    k = r
    batch_out = list(out.shape[:-2])
    a_map = lb.affine(r + 1, [*lb.broadcast_dims(ta.shape[:-2], batch_out), r - 2, k])
    b_map = lb.affine(r + 1, [*lb.broadcast_dims(tb.shape[:-2], batch_out), k, r - 1])
    o_map = lb.affine(r + 1, list(range(r)))
    iters = ["parallel"] * r + ["reduction"]
    maps = [a_map, b_map, o_map]
    return lb.generic([a, b], out, maps, iters, lb.multiply_add, init=lb.zeros(out))
