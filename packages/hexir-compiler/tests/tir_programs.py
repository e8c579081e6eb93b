"""Test helpers for hexir-lower-to-tir: one-op programs, lowering them, and a numpy oracle.

`reference` is written from the format README's kernel table (the semantics the runtime's
numpy bodies implement), independently of the compiler's kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hexir_compiler.dialects import context
from hexir_compiler.mlir import ir, passmanager
from hexir_compiler.transforms import hexir_kernels_to_gpu, hextir_to_loops
from hexir_compiler.transforms import hexir_lower_to_tir as lower_to_tir
from hexir_compiler.transforms.hexir_lower_to_tir import PASS_NAME, hexir_lower_to_tir
from tir_interp import Kernel

DTYPES = {"f32": np.float32, "f64": np.float64}


def tensor(shape: tuple[int, ...], element: str) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{element}>"


@dataclass
class Case:
    """One graph op on given shapes: `attrs` is the MLIR text of its attributes."""

    op: str
    inputs: list[tuple[int, ...]]
    output: tuple[int, ...]
    attrs: dict[str, str] = field(default_factory=dict)

    def program(self, element: str, device: str) -> str:
        args = ", ".join(f"%a{i}: {tensor(s, element)}" for i, s in enumerate(self.inputs))
        operands = ", ".join(f"%a{i}" for i in range(len(self.inputs)))
        types = ", ".join(tensor(s, element) for s in self.inputs)
        result = tensor(self.output, element)
        attrs = ", ".join([f'device = "{device}"', *(f"{k} = {v}" for k, v in self.attrs.items())])
        return (
            f"func.func @main({args}) -> {result} {{\n"
            f'  %0 = "hexir.{self.op}"({operands}) {{{attrs}}} : ({types}) -> {result}\n'
            f"  return %0 : {result}\n}}\n"
        )


class Lowered:
    """A program after hexir-lower-to-tir, with its kernels ready to interpret."""

    def __init__(self, text: str, cpu: str | None = None) -> None:
        """`cpu`: the host CPU level cpu kernels are scheduled for (None: the pass's own
        default, run as a pass)."""
        self.context = context()
        with self.context:
            self.module = ir.Module.parse(text)
            if cpu is None:
                pm = passmanager.PassManager()
                pm.add(hexir_lower_to_tir, name=PASS_NAME)
                pm.run(self.module.operation)
            else:
                lower_to_tir.run(self.module, cpu)
            self.module.operation.verify()
            self.text = str(self.module)
            self.kernels = [
                Kernel(op)
                for op in self.module.body.operations
                if op.operation.name == "hextir.prim_func"
            ]


def to_gpu(lowered: Lowered) -> ir.Operation:
    """The one gpu.module of `lowered` after hextir-to-loops and hexir-kernels-to-gpu (in its
    context); the hextir kernels are gone from the module after this."""
    hextir_to_loops.run(lowered.module)
    hexir_kernels_to_gpu.run(lowered.module)
    (gpu_module,) = [op.operation for op in lowered.module.body.operations
                     if op.operation.name == "gpu.module"]
    return gpu_module


def sample(case: Case, element: str, rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs for `case`: N(0, 1), positive for sqrt, bounded away from 0 as divisors."""
    arrays = [rng.standard_normal(shape) for shape in case.inputs]
    if case.op == "sqrt":
        arrays = [np.abs(a) for a in arrays]
    if case.op == "div":
        arrays[1] = rng.uniform(0.5, 2.0, case.inputs[1]) * rng.choice([-1, 1], case.inputs[1])
    return [np.asarray(a, dtype=DTYPES[element]) for a in arrays]


def reference(case: Case, inputs: list[np.ndarray]) -> np.ndarray:
    """The op's value in float64."""
    xs = [x.astype(np.float64) for x in inputs]
    x = xs[0]
    attr = case.attrs
    match case.op:
        case "linear" | "matmul":
            return np.matmul(xs[0], xs[1])
        case "add" | "sub" | "mul" | "div":
            return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[
                case.op
            ](xs[0], xs[1])
        case "relu":
            return np.where(x > 0, x, 0.0)
        case "sigmoid":
            return 1 / (1 + np.exp(-x))
        case "tanh" | "exp" | "sqrt" | "abs":
            return getattr(np, case.op)(x)
        case "neg":
            return -x
        case "gelu" if attr.get("approximate") == '"tanh"':
            return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
        case "gelu":
            return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
        case "softmax":
            axis = int(attr["axis"].split(":")[0])
            e = np.exp(x - x.max(axis=axis, keepdims=True))
            return e / e.sum(axis=axis, keepdims=True)
        case "layer_norm":
            eps = float(attr["epsilon"].split(":")[0])
            mean = x.mean(-1, keepdims=True)
            var = ((x - mean) ** 2).mean(-1, keepdims=True)
            return (x - mean) / np.sqrt(var + eps) * xs[1] + xs[2]
        case "transpose":
            return np.transpose(x, _ints(attr["permutation"]))
        case "reshape":
            return x.reshape(case.output)
        case "reduce_sum" | "reduce_mean" | "reduce_max":
            fn = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max}[case.op]
            return fn(x, axis=tuple(_ints(attr["axes"])), keepdims=attr["keepdims"] == "true")
    raise AssertionError(f"no reference for {case.op}")


def _ints(text: str) -> list[int]:
    """The values of `array<i64: 1, 0>`."""
    body = text.split(":", 1)[1].rstrip(">") if ":" in text else ""
    return [int(v) for v in body.split(",") if v.strip()]


TOLERANCE = {"f32": (2e-5, 2e-6), "f64": (1e-12, 1e-13)}


def assert_close(actual: np.ndarray, expected: np.ndarray, element: str) -> None:
    rtol, atol = TOLERANCE[element]
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol * scale)
