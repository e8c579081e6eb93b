"""What the hexir graph ops are, by mnemonic: the one registry the layers above share.

The dialect (`dialects/hexir.py`) declares a plain element-wise op from its entry in `UNARY`
or `BINARY` (the element types it takes and gives), placement places every op in
`KERNEL_OPS`, `hexir-fuse` groups by the categories below, and the kernel generators
(`transforms/tir`) give each op of `KERNEL_OPS` its kernel (`PLANS`, with the scalar formula
of each plain element-wise op). This module knows names and type rules only, so each of
those imports it and none of them imports another for what an op is.
"""

from __future__ import annotations

from dataclasses import dataclass

from hexir_compiler.element_types import BITS, ELEMENTS, FLOATS, INTEGERS, NUMBERS


@dataclass(frozen=True)
class Elementwise:
    """The type rule of a plain element-wise op: all operands of one element type in `takes`;
    the result is of that type too, or `gives` (comparisons: i1)."""

    takes: tuple[str, ...] = FLOATS
    gives: str | None = None


#: f(x), the result of x's type.
UNARY: dict[str, Elementwise] = {
    **dict.fromkeys(("relu", "sigmoid", "tanh", "exp", "log", "sqrt", "erf", "round",
                     "softplus", "mish", "floor", "ceil", "sin", "cos", "tan", "asin", "acos",
                     "atan", "sinh", "cosh", "asinh", "acosh", "atanh"), Elementwise()),
    **dict.fromkeys(("neg", "abs", "sign"), Elementwise(NUMBERS)),
    # bitwise on integers, logical on bools
    "not": Elementwise(BITS),
}

#: x op y with numpy broadcasting.
BINARY: dict[str, Elementwise] = {
    **dict.fromkeys(("add", "sub", "mul", "div", "max", "min", "fmod"), Elementwise(NUMBERS)),
    "pow": Elementwise(),
    "mod": Elementwise(INTEGERS),
    **dict.fromkeys(("and", "or", "xor"), Elementwise(BITS)),
    "equal": Elementwise(ELEMENTS, "i1"),
    **dict.fromkeys(("less", "greater"), Elementwise(NUMBERS, "i1")),
    # activations whose parameter is the second operand (a scalar, or PRelu's slope)
    **dict.fromkeys(("elu", "prelu", "thresholded_relu"), Elementwise()),
}

#: gelu's `approximate` attribute -> the number its kernel's param records.
GELU_APPROXIMATIONS = {"none": 0, "tanh": 1}

#: Ops whose result element is a formula of the operands' elements at its (broadcast)
#: coordinates: one kernel can compute a chain of them at each element (`hexir-fuse`).
ELEMENTWISE = frozenset({*UNARY, *BINARY, "where", "cast", "gelu"})
#: Ops that can head a fusion group: their kernel computes an output, then the group's
#: element-wise epilogue on it.
CONTRACTIONS = frozenset({"matmul", "linear", "conv"})
#: Ops that reduce their data operand along axes; a fusion group can end in one, which reads
#: that operand through the group's element-wise prologue.
REDUCTIONS = frozenset({"softmax", "layer_norm", "reduce_sum", "reduce_prod", "reduce_mean",
                        "reduce_max", "reduce_min"})
#: Every op that has a kernel (and so is placeable, on either device): the categories above,
#: expand (a map, never fused), the data movers, indexing, scan and selection ops, and sizes
#: (a dynamic module's sizes as data, computed by a kernel from the call's sizes).
KERNEL_OPS = ELEMENTWISE | CONTRACTIONS | REDUCTIONS | frozenset({
    "expand", "transpose", "reshape", "concat", "slice", "gather", "pool", "gather_elements",
    "scatter_elements", "scatter_nd", "cumsum", "arg_max", "arg_min", "top_k", "sizes",
})
