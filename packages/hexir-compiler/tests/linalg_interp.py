"""A test-only interpreter for the linalg path's IR: numbers where there is no JIT.

The bindings have no ExecutionEngine, so the linalg path cannot be run. This evaluates its
MLIR directly on numpy arrays instead, at two levels:

- `mlir-linalg` / `mlir-hetero`: linalg ops on tensors (each op computes a fresh array from
  its `outs`), tensor reshapes, `hexir.transfer` (a copy), `hexir.print` (recorded).
- `mlir-gpu`: buffers (memref.alloc/get_global/copy/load/store, views) and `gpu.launch`,
  run thread by thread: every (block, thread) pair of the grid executes the body once with
  its own ids, `scf.if` guards honoured. A launch in which two threads store to the same
  element, or an access out of bounds, fails: that is what a wrong guard or a wrong
  delinearization would do on a GPU.

A linalg op is evaluated from its definition (indexing maps, the output map deciding which
loops are reductions, the scalar body run at each point in loop order), independently of how
hexir-lower-cuda-to-gpu turns it into threads, so the two check each other.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from hexir_compiler.mlir import ir

DTYPES = {"f32": np.float32, "f64": np.float64}


class InterpError(AssertionError):
    """The IR did something a machine would not survive: a race, out of bounds, unknown op."""


def dtype(t: ir.Type) -> type:
    return DTYPES[str(t)]


def run(module: ir.Module, args: list[np.ndarray], func: str = "main") -> tuple[list, list]:
    """(results, printed arrays) of calling `func` with `args`."""
    interp = _Interp(module)
    return interp.call(_function(module, func), args), interp.printed


def stdout(module: ir.Module, args: list[np.ndarray], func: str = "main") -> str:
    """What calling `func` writes with printf (after hexir-to-llvm's print rewrite)."""
    interp = _Interp(module)
    interp.call(_function(module, func), args)
    return interp.stdout


def _function(module: ir.Module, name: str) -> ir.Operation:
    for op in module.body.operations:
        if op.operation.name != "func.func":
            continue
        if ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    raise InterpError(f"no function @{name}")


class _Interp:
    def __init__(self, module: ir.Module) -> None:
        self.printed: list[np.ndarray] = []
        self.stdout = ""
        self.globals: dict[str, np.ndarray | str] = {}
        for op in module.body.operations:
            if op.operation.name == "llvm.mlir.global":
                name = ir.StringAttr(op.attributes["sym_name"]).value
                self.globals[name] = ir.StringAttr(op.attributes["value"]).value
            if op.operation.name == "memref.global":
                t = ir.MemRefType(ir.TypeAttr(op.attributes["type"]).value)
                self.globals[ir.StringAttr(op.attributes["sym_name"]).value] = _dense(
                    op.attributes["initial_value"], t)
        self.writes: dict[tuple[int, tuple], tuple] | None = None
        self.thread: tuple = ()

    def call(self, func: ir.Operation, args: list[np.ndarray]) -> list:
        block = func.regions[0].blocks[0]
        env = {a: np.array(v) for a, v in zip(block.arguments, args)}
        return self.block(block, env)

    def block(self, block: ir.Block, env: dict) -> list:
        for op in block.operations:
            if op.name in ("func.return", "scf.yield", "linalg.yield"):
                return [env[v] for v in op.operands]
            if op.name == "gpu.terminator":
                return []
            results = self.op(op, env)
            for r, v in zip(op.results, results or []):
                env[r] = v
        return []

    # --- ops ------------------------------------------------------------------------------

    def op(self, op: ir.Operation, env: dict) -> list | None:
        name = op.name
        a = [env.get(v) for v in op.operands]
        rt = op.results[0].type if op.results else None
        if name in _SCALAR:
            return [_SCALAR[name](op, *a)]
        if name == "arith.constant":
            return [_constant(op.attributes["value"], rt)]
        if name in ("tensor.empty", "memref.alloc", "bufferization.alloc_tensor"):
            return [np.zeros(rt.shape, dtype(rt.element_type))]
        if name in ("tensor.collapse_shape", "tensor.expand_shape"):
            return [a[0].reshape(rt.shape).copy()]
        if name in ("memref.collapse_shape", "memref.expand_shape"):
            view = a[0].reshape(rt.shape)
            if not np.shares_memory(view, a[0]) and a[0].size:
                raise InterpError(f"{name} would copy")
            return [view]
        if name == "bufferization.to_buffer":
            return [a[0]]
        if name == "memref.get_global":
            return [self.globals[ir.FlatSymbolRefAttr(op.attributes["name"]).value]]
        if name == "memref.copy":
            np.copyto(a[1], a[0])
            return None
        if name == "memref.load":
            return [a[0][self._at(a[0], a[1:])]]
        if name == "memref.store":
            at = self._at(a[1], a[2:])
            self._record_write(a[1], at)
            a[1][at] = a[0]
            return None
        if name == "hexir.transfer":
            return [a[0].copy()]
        if name == "llvm.mlir.addressof":
            return [self.globals[ir.FlatSymbolRefAttr(op.attributes["global_name"]).value]]
        if name == "llvm.call":
            return [self.printf(op, a)]
        if name == "hexir.print":
            self.printed.append(a[0].copy())
            return None
        if name.startswith("linalg."):
            return self.linalg(op, a, env)
        if name == "scf.if":
            if a[0]:
                self.block(op.regions[0].blocks[0], env)
            return None
        if name == "scf.for":
            return self.loop(op, a, env)
        if name == "gpu.launch":
            self.launch(op, a, env)
            return None
        raise InterpError(f"the interpreter does not know '{name}'")

    def printf(self, op: ir.Operation, a: list) -> int:
        """C printf for the formats hexir-to-llvm emits ("%f ", "\\n"): glibc and Python agree."""
        if ir.FlatSymbolRefAttr(op.attributes["callee"]).value != "printf":
            raise InterpError(f"call to an unknown function: {op}")
        fmt, *values = a
        if not fmt.endswith("\0"):
            raise InterpError(f"format {fmt!r} is not NUL-terminated")
        if any(not isinstance(v, np.float64) for v in values):
            raise InterpError("printf %f takes doubles (varargs promote float)")
        text = fmt[:-1] % tuple(float(v) for v in values)
        self.stdout += text
        return len(text)

    def _at(self, buf: np.ndarray, idx: list) -> tuple:
        at = tuple(int(i) for i in idx)
        if len(at) != buf.ndim or any(not 0 <= i < d for i, d in zip(at, buf.shape)):
            raise InterpError(f"index {at} out of bounds of {buf.shape} (thread {self.thread})")
        return at

    def _record_write(self, buf: np.ndarray, at: tuple) -> None:
        if self.writes is None:
            return
        key = (id(buf), at)
        if key in self.writes and self.writes[key] != self.thread:
            raise InterpError(f"threads {self.writes[key]} and {self.thread} both store {at}")
        self.writes[key] = self.thread

    def loop(self, op: ir.Operation, a: list, env: dict) -> list:
        lb, ub, step, carried = a[0], a[1], a[2], a[3:]
        body = op.regions[0].blocks[0]
        for iv in range(lb, ub, step):
            inner = dict(env)
            inner[body.arguments[0]] = iv
            for arg, v in zip(body.arguments[1:], carried):
                inner[arg] = v
            carried = self.block(body, inner)
        return carried

    def launch(self, op: ir.Operation, a: list, env: dict) -> None:
        grid, block = a[0:3], a[3:6]
        body = op.regions[0].blocks[0]
        self.writes = {}
        try:
            for bid in itertools.product(*(range(n) for n in grid)):
                for tid in itertools.product(*(range(n) for n in block)):
                    self.thread = (bid, tid)
                    inner = dict(env)
                    for arg, v in zip(body.arguments, (*bid, *tid, *grid, *block)):
                        inner[arg] = v
                    self.block(body, inner)
        finally:
            self.writes, self.thread = None, ()

    def linalg(self, op: ir.Operation, a: list, env: dict) -> list | None:
        """Every point of the iteration space in order; the body sees the outer values too."""
        n_in, _ = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])
        ins, out = a[:n_in], a[n_in]
        shaped = [isinstance(v.type, ir.ShapedType) for v in op.operands]
        on_tensors = bool(op.results)
        dest = out.copy() if on_tensors else out
        maps = _maps(op, shaped, dest.ndim)
        extents: dict[int, int] = {}
        for value, m, is_shaped in zip([*ins, dest], maps, shaped):
            if not is_shaped:
                continue
            for pos, e in enumerate(m.results):
                if isinstance(e, ir.AffineDimExpr):
                    extents.setdefault(e.position, np.shape(value)[pos])
        body = op.regions[0].blocks[0]
        for point in itertools.product(*(range(extents[d]) for d in range(len(extents)))):
            for arg, value, m, is_shaped in zip(body.arguments, [*ins, dest], maps, shaped):
                env[arg] = value[_index(m, point)] if is_shaped else value
            out_at = _index(maps[-1], point)
            env[body.arguments[-1]] = dest[out_at]
            (result,) = self.block(body, env)
            dest[out_at] = result
        return [dest] if on_tensors else None


def _maps(op: ir.Operation, shaped: list[bool], rank: int) -> list[ir.AffineMap]:
    if "indexing_maps" in op.attributes:
        return [m.value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if op.name == "linalg.matmul":
        d = [ir.AffineDimExpr.get(i) for i in range(3)]
        return [ir.AffineMap.get(3, 0, [d[0], d[2]]), ir.AffineMap.get(3, 0, [d[2], d[1]]),
                ir.AffineMap.get(3, 0, [d[0], d[1]])]
    return [ir.AffineMap.get_identity(rank) if s else ir.AffineMap.get(rank, 0, []) for s in shaped]


def _index(m: ir.AffineMap, point: tuple) -> tuple:
    return tuple(point[e.position] if isinstance(e, ir.AffineDimExpr) else e.value
                 for e in m.results)


def _dense(attr: ir.Attribute, t: ir.ShapedType) -> np.ndarray:
    dt = dtype(t.element_type)
    if attr.is_splat:
        return np.full(t.shape, attr.get_splat_value().value, dt)
    return np.array(attr, dtype=dt).reshape(t.shape).copy()


def _constant(attr: ir.Attribute, t: ir.Type):
    if isinstance(t, (ir.RankedTensorType, ir.MemRefType)):
        return _dense(attr, t)
    if isinstance(t, (ir.IndexType, ir.IntegerType)):
        return ir.IntegerAttr(attr).value
    return dtype(t)(ir.FloatAttr(attr).value)


def _float(fn):
    return lambda op, *xs: type(xs[0])(fn(*xs))


def _erf(x):
    return type(x)(math.erf(float(x)))


_CMP = {"ult": lambda x, y: x < y, "slt": lambda x, y: x < y, "eq": lambda x, y: x == y}

_SCALAR = {
    "arith.addf": _float(lambda x, y: x + y),
    "arith.subf": _float(lambda x, y: x - y),
    "arith.mulf": _float(lambda x, y: x * y),
    "arith.divf": _float(lambda x, y: x / y),
    "arith.maximumf": _float(lambda x, y: np.maximum(x, y)),
    "arith.negf": _float(lambda x: -x),
    "math.exp": _float(np.exp),
    "math.tanh": _float(np.tanh),
    "math.sqrt": _float(np.sqrt),
    "math.erf": lambda op, x: _erf(x),
    "arith.extf": lambda op, x: np.float64(x),
    "arith.addi": lambda op, x, y: x + y,
    "arith.muli": lambda op, x, y: x * y,
    "arith.remui": lambda op, x, y: x % y,
    "arith.divui": lambda op, x, y: x // y,
    "arith.cmpi": lambda op, x, y: _CMP[_predicate(op)](x, y),
}


def _predicate(op: ir.Operation) -> str:
    names = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
    return names[ir.IntegerAttr(op.attributes["predicate"]).value]
