"""Run a whole module at `mlir-tir` with `tir_interp`: the entry's graph, kernel by kernel.

Evidence without a GPU that a model's cuda kernels compute it: each `hexir.call_tir` runs its
`hextir.prim_func` as its launch would (every thread of the grid, races and out-of-bounds
accesses as failures), constants are their elements, transfers are copies. Bool tensors are
one byte per element in the kernels' buffers, as in a `.hxb`.
"""

from __future__ import annotations

import numpy as np

from hexir_compiler import packing, symbolic
from hexir_compiler.dialects import context
from hexir_compiler.mlir import ir
from hexir_compiler.pipeline import Options, load, lower
from hexir_format import dims
from tir_interp import Kernel

NUMPY = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "i1": np.int8}


def run(source, inputs: list[np.ndarray], options: Options) -> list[np.ndarray]:
    """The entry `main`'s results for `inputs`, computed by interpreting its kernels."""
    with context():
        module = lower(load(source, options), options, "mlir-tir")
        kernels = {ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation
                   for op in module.body.operations if op.operation.name == "hextir.prim_func"}
        (entry,) = [op.operation for op in module.body.operations
                    if op.operation.name == "func.func"]
        block = entry.regions[0].blocks[0]
        values: dict = {}
        # a module of symbolic sizes: the symbols' values the inputs' shapes give
        sizes = dims.bind([dims.Given(f"#{i}", axis, d, n)
                           for i, (arg, array) in enumerate(zip(block.arguments, inputs,
                                                                strict=True))
                           for axis, (d, n) in enumerate(zip(symbolic.shape_of(arg.type),
                                                             np.shape(array), strict=True))],
                          {})
        for arg, array in zip(block.arguments, inputs, strict=True):
            values[arg] = _storage(np.asarray(array), arg.type, sizes=sizes)
        compiled: dict[str, Kernel] = {}
        for view in block.operations:
            op = view.operation
            if op.name == "hexir.constant":
                values[op.results[0]] = _storage(
                    packing.value(op, np.asarray(op.attributes["value"]).dtype),
                    op.results[0].type, splat=True)
            elif op.name == "hexir.transfer":
                values[op.results[0]] = values[op.operands[0]].copy()
            elif op.name == "hexir.call_tir":
                name = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                kernel = compiled.setdefault(name, Kernel(kernels[name]))
                out = np.zeros(_shape(op.results[0].type, sizes), _dtype(op.results[0].type))
                kernel(*(values[v] for v in op.operands), out,
                       sizes={n: sizes[n] for n in kernel.symbols})
                values[op.results[0]] = out
            elif op.name == "func.return":
                return [_tensor(values[v], v.type) for v in op.operands]
            else:
                raise AssertionError(f"tir_graph: no semantics for {op.name}")
    raise AssertionError("the entry has no return")


def _shape(t: ir.Type, sizes: dict[str, int] | None = None) -> tuple[int, ...]:
    """`t`'s shape, its symbolic dims evaluated for `sizes`."""
    return tuple(dims.evaluate(d, sizes or {}) for d in symbolic.shape_of(t))


def _dtype(t: ir.Type):
    return NUMPY[str(ir.RankedTensorType(t).element_type)]


def _storage(array: np.ndarray, t: ir.Type, splat: bool = False,
             sizes: dict[str, int] | None = None) -> np.ndarray:
    shape = _shape(t, sizes)
    if splat and array.shape != shape:  # a splat's one element, or a scalar as [1]
        array = array.reshape(shape) if array.size == np.prod(shape) else \
            np.broadcast_to(array.reshape(-1)[0], shape)
    return np.array(array, dtype=_dtype(t), order="C")  # (ascontiguousarray makes 0-d 1-d)


def _tensor(array: np.ndarray, t: ir.Type) -> np.ndarray:
    return array.astype(bool) if str(ir.RankedTensorType(t).element_type) == "i1" else array
