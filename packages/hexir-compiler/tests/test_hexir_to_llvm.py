"""hexir-to-llvm: prints become printf calls that write what hexir-run writes.

Without a JIT the LLVM module cannot run, so the print rewrite is checked one step before the
upstream conversions: linalg_interp runs the scf loops and emulates the printf calls, and the
text is compared with the runtime's PRINT format (each value `%f` and a space, a newline per
row). Then the whole pass must leave nothing but the LLVM dialect.
"""

from __future__ import annotations

import numpy as np
import pytest

import linalg_interp
from hexir_compiler.dialects import context
from hexir_compiler.mlir import ir
from hexir_compiler.transforms import hexir_to_llvm


def print_program(shape: tuple[int, ...], elem: str) -> str:
    t = f"memref<{''.join(f'{d}x' for d in shape)}{elem}>"
    return f'func.func @main(%m: {t}) {{\n  "hexir.print"(%m) : ({t}) -> ()\n  return\n}}\n'


def runtime_format(x: np.ndarray) -> str:
    """hexir-run's PRINT: rows x columns (a scalar or vector is one row)."""
    rows = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    return "".join("".join(f"{float(v):f} " for v in row) + "\n" for row in rows)


@pytest.mark.parametrize("elem", ["f32", "f64"])
@pytest.mark.parametrize("shape", [(), (4,), (2, 2), (2, 3, 2)], ids=str)
def test_printf_text_is_the_runtime_print_format(shape, elem) -> None:
    dt = np.float32 if elem == "f32" else np.float64
    x = np.random.default_rng(2).normal(size=shape).astype(dt) * 100
    with context():
        module = ir.Module.parse(print_program(shape, elem))
        hexir_to_llvm.prints_to_printf(module)
        text = linalg_interp.stdout(module, [x])
    assert text == runtime_format(x)


def test_two_by_two_program_output() -> None:
    with context():
        module = ir.Module.parse(print_program((2, 2), "f64"))
        hexir_to_llvm.prints_to_printf(module)
        text = linalg_interp.stdout(module, [np.array([[8.0, 17.0], [12.0, 14.0]])])
    assert text == "8.000000 17.000000 \n12.000000 14.000000 \n"


def test_declarations_are_made_once_for_many_prints() -> None:
    text = """func.func @main(%a: memref<2xf32>, %b: memref<3xf64>) {
      "hexir.print"(%a) : (memref<2xf32>) -> ()
      "hexir.print"(%b) : (memref<3xf64>) -> ()
      "hexir.print"(%a) : (memref<2xf32>) -> ()
      return
    }"""
    with context():
        module = ir.Module.parse(text)
        hexir_to_llvm.run(module)
        names = [op.operation.name for op in module.body.operations]
        out = str(module)
    assert names.count("llvm.mlir.global") == 2
    assert out.count("llvm.func @printf(") == 1
    assert out.count("llvm.call @printf(") == 6  # per print: the element call and the newline


def test_only_the_llvm_dialect_is_left() -> None:
    text = """func.func @main(%a: memref<4x5xf32>, %b: memref<4x5xf32>) -> memref<4x5xf32> {
      %c0 = arith.constant 0 : index
      %x = memref.load %a[%c0, %c0] : memref<4x5xf32>
      %e = math.erf %x : f32
      %t = math.tanh %e : f32
      memref.store %t, %a[%c0, %c0] : memref<4x5xf32>
      memref.copy %a, %b : memref<4x5xf32> to memref<4x5xf32>
      "hexir.print"(%b) : (memref<4x5xf32>) -> ()
      return %b : memref<4x5xf32>
    }"""
    with context():
        module = ir.Module.parse(text)
        hexir_to_llvm.run(module)
        dialects = set()
        module.operation.walk(
            lambda op: dialects.add(op.name.split(".")[0]) or ir.WalkResult.ADVANCE)
    assert dialects == {"builtin", "llvm"}
