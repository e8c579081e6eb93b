"""The program `hexir` compiles when given no input file.

The earlier C++ compiler built it in `Builder.cpp`; it is kept op for op, including the
unused 1x2 constant (the serializer skips constants nobody uses, which this exercises), so
`hexir -emit=hxb` still writes the 488-byte module of `fixtures/builtin.hxb`:

    A = [[3, 1], [2, 2]], B = [[1, 5], [5, 2]], print(linear(A, B))  ->  [[8, 17], [12, 14]]
"""

from __future__ import annotations

import numpy as np

from hexir_compiler.dialects import hexir
from hexir_compiler.mlir import func, ir

UNUSED = [[3.0, 1.0]]
A = [[3.0, 1.0], [2.0, 2.0]]
B = [[1.0, 5.0], [5.0, 2.0]]


def _constant(rows: list[list[float]]) -> ir.Value:
    f64 = ir.F64Type.get()
    ttype = ir.RankedTensorType.get([len(rows), len(rows[0])], f64)
    value = ir.DenseFPElementsAttr.get(np.asarray(rows, dtype=np.float64), type=ttype)
    return hexir.ConstantOp(value, result=ttype).result


def build() -> ir.Module:
    """The built-in module, in the current context (which must have the dialects loaded)."""
    with ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            main = func.FuncOp("main", ir.FunctionType.get([], []))
            with ir.InsertionPoint(main.add_entry_block()):
                _constant(UNUSED)
                a = _constant(A)
                b = _constant(B)
                product = hexir.LinearOp(a, b, result=a.type).result
                hexir.PrintOp(product)
                func.ReturnOp([])
    return module
