"""Kernel generators used by `hexir-lower-to-tir`, one plan per graph op mnemonic.

`PLANS[mnemonic](GraphOp) -> Kernel`, for every op of `ops.KERNEL_OPS`; the pass owns walking
the graph and rewriting call sites, these modules own what each kernel computes and how its
loops are scheduled.
"""

from __future__ import annotations

from collections.abc import Callable

from hexir_compiler.ops import ELEMENTWISE
from hexir_compiler.transforms.tir.contraction import plan_matmul
from hexir_compiler.transforms.tir.elementwise import plan_map, plan_reshape, plan_transpose
from hexir_compiler.transforms.tir.indexing import (
    plan_gather_elements,
    plan_scatter_elements,
    plan_scatter_nd,
)
from hexir_compiler.transforms.tir.kernel import GraphOp, Kernel
from hexir_compiler.transforms.tir.movement import plan_concat, plan_gather, plan_slice
from hexir_compiler.transforms.tir.reduction import (
    plan_layer_norm,
    plan_reduce,
    plan_softmax,
)
from hexir_compiler.transforms.tir.scan import plan_cumsum
from hexir_compiler.transforms.tir.selection import plan_arg, plan_top_k
from hexir_compiler.transforms.tir.sizes import plan_sizes
from hexir_compiler.transforms.tir.window import plan_conv, plan_pool

PLANS: dict[str, Callable[[GraphOp], Kernel]] = {
    "linear": plan_matmul,
    "matmul": plan_matmul,
    **dict.fromkeys((*ELEMENTWISE, "expand"), plan_map),
    "softmax": plan_softmax,
    "layer_norm": plan_layer_norm,
    "transpose": plan_transpose,
    "reshape": plan_reshape,
    **dict.fromkeys(("reduce_sum", "reduce_prod", "reduce_mean", "reduce_max", "reduce_min"),
                    plan_reduce),
    "concat": plan_concat,
    "slice": plan_slice,
    "gather": plan_gather,
    "conv": plan_conv,
    "pool": plan_pool,
    "gather_elements": plan_gather_elements,
    "scatter_elements": plan_scatter_elements,
    "scatter_nd": plan_scatter_nd,
    "cumsum": plan_cumsum,
    "arg_max": plan_arg,
    "arg_min": plan_arg,
    "top_k": plan_top_k,
    "sizes": plan_sizes,
}

__all__ = ["PLANS", "GraphOp", "Kernel"]
