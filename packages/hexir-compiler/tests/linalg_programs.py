"""One-op graph programs and their numpy meaning, shared by the linalg-path tests.

Each case is a graph op with its operand shapes and attributes; `program` writes it as a
`func.func @main` taking the operands and returning the result, and `reference` computes the
result with numpy in the same precision, so a lowering is checked by running it (see
linalg_interp) on random inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hexir_compiler import shapes


@dataclass(frozen=True)
class Case:
    op: str
    inputs: tuple[tuple[int, ...], ...]
    attrs: str = ""
    params: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        dims = "_".join("x".join(map(str, s)) or "scalar" for s in self.inputs)
        return f"{self.op}-{dims}{'-' + self.attrs if self.attrs else ''}"


CASES = [
    Case("linear", ((2, 2), (2, 2))),
    Case("linear", ((3, 4, 5), (5, 6))),
    Case("matmul", ((3, 4), (4, 2))),
    Case("matmul", ((2, 3, 4), (1, 4, 5))),
    Case("add", ((3, 4), (3, 4))),
    Case("add", ((3, 4), (4,))),
    Case("sub", ((2, 1, 3), (4, 1))),
    Case("mul", ((5,), (2, 5))),
    Case("div", ((3, 1), (1, 4))),
    *(Case(u, ((3, 5),)) for u in ("relu", "sigmoid", "tanh", "exp", "neg")),
    Case("sqrt", ((4, 3),), params={"positive": True}),
    Case("gelu", ((3, 4),)),
    Case("gelu", ((3, 4),), 'approximate = "tanh"', {"approximate": "tanh"}),
    Case("softmax", ((3, 5),), "axis = -1 : i64", {"axis": -1}),
    Case("softmax", ((2, 3, 4),), "axis = 1 : i64", {"axis": 1}),
    Case("layer_norm", ((3, 6), (6,), (6,)), "epsilon = 1.0e-05 : f64", {"epsilon": 1e-5}),
    Case("transpose", ((2, 3, 4),), "permutation = array<i64: 2, 0, 1>", {"perm": (2, 0, 1)}),
    Case("reshape", ((2, 3, 4),), params={"to": (4, 6)}),
    Case("reshape", ((6,),), params={"to": (2, 1, 3)}),
    Case("reduce_sum", ((2, 3, 4),), "axes = array<i64: 1>, keepdims = true",
         {"axes": (1,), "keepdims": True}),
    Case("reduce_mean", ((2, 3, 4),), "axes = array<i64: 0, -1>, keepdims = false",
         {"axes": (0, -1), "keepdims": False}),
    Case("reduce_max", ((2, 3),), "axes = array<i64: 0, 1>, keepdims = false",
         {"axes": (0, 1), "keepdims": False}),
]


def result_shape(case: Case) -> tuple[int, ...]:
    a = case.inputs
    p = case.params
    match case.op:
        case "linear":
            return shapes.linear(*a)
        case "matmul":
            return shapes.matmul(*a)
        case "add" | "sub" | "mul" | "div":
            return shapes.broadcast(*a)
        case "transpose":
            return shapes.transpose(a[0], p["perm"])
        case "reshape":
            return tuple(p["to"])
        case "reduce_sum" | "reduce_mean" | "reduce_max":
            return shapes.reduce(a[0], p["axes"], p["keepdims"])
    return a[0]


def program(case: Case, elem: str) -> str:
    def t(shape: tuple[int, ...]) -> str:
        return f"tensor<{''.join(f'{d}x' for d in shape)}{elem}>"

    args = ", ".join(f"%a{i}: {t(s)}" for i, s in enumerate(case.inputs))
    operands = ", ".join(f"%a{i}" for i in range(len(case.inputs)))
    in_types = ", ".join(t(s) for s in case.inputs)
    out = t(result_shape(case))
    attrs = f" {{{case.attrs}}}" if case.attrs else ""
    return (
        f"func.func @main({args}) -> {out} {{\n"
        f'  %r = "hexir.{case.op}"({operands}){attrs} : ({in_types}) -> {out}\n'
        f"  return %r : {out}\n}}\n"
    )


def inputs(case: Case, elem: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    dt = np.float32 if elem == "f32" else np.float64
    arrays = [rng.uniform(-2.0, 2.0, s).astype(dt) for s in case.inputs]
    if case.params.get("positive"):
        arrays = [np.abs(x) + dt(0.1) for x in arrays]
    if case.op == "div":
        arrays[1] = np.where(np.abs(arrays[1]) < 0.25, dt(0.5), arrays[1]).astype(dt)
    return arrays


def reference(case: Case, xs: list[np.ndarray]) -> np.ndarray:
    p = case.params
    x = xs[0]
    match case.op:
        case "linear" | "matmul":
            return np.matmul(xs[0], xs[1])
        case "add":
            return xs[0] + xs[1]
        case "sub":
            return xs[0] - xs[1]
        case "mul":
            return xs[0] * xs[1]
        case "div":
            return xs[0] / xs[1]
        case "relu":
            return np.maximum(x, 0)
        case "sigmoid":
            return 1 / (1 + np.exp(-x))
        case "tanh":
            return np.tanh(x)
        case "exp":
            return np.exp(x)
        case "sqrt":
            return np.sqrt(x)
        case "neg":
            return -x
        case "gelu" if p.get("approximate") == "tanh":
            return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
        case "gelu":
            erf = np.vectorize(math.erf, otypes=[x.dtype])
            return 0.5 * x * (1 + erf(x / x.dtype.type(math.sqrt(2))))
        case "softmax":
            e = np.exp(x - x.max(axis=p["axis"], keepdims=True))
            return e / e.sum(axis=p["axis"], keepdims=True)
        case "layer_norm":
            mean = x.mean(axis=-1, keepdims=True)
            var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
            return (x - mean) / np.sqrt(var + p["epsilon"]) * xs[1] + xs[2]
        case "transpose":
            return np.transpose(x, p["perm"])
        case "reshape":
            return x.reshape(p["to"])
        case "reduce_sum":
            return x.sum(axis=p["axes"], keepdims=p["keepdims"])
        case "reduce_mean":
            return x.mean(axis=p["axes"], keepdims=p["keepdims"])
        case "reduce_max":
            return x.max(axis=p["axes"], keepdims=p["keepdims"])
    raise AssertionError(case.op)


def tolerance(elem: str) -> dict:
    return {"rtol": 2e-5, "atol": 2e-5} if elem == "f32" else {"rtol": 1e-12, "atol": 1e-12}
