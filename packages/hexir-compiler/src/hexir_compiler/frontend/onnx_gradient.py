"""The training domain's Gradient (ai.onnx.preview.training), differentiated at import.

`Gradient(xs, zs, y)` outputs dy/dx for each tensor named in `xs`: the sum over y's
elements of their derivatives (the seed dy is ones of y's shape, as ONNX's spec and its
reference runner give), with the tensors in `zs` held constant. Hexir computes it by
reverse-mode differentiation of the nodes that compute `y` from `xs` and `zs`, at import:
each node on the path has a rule (`RULES`) that writes its inputs' gradients as ONNX nodes
of the default domain, which the emitter then translates like any other (or folds, where
they are constants), so the gradient is a set of ordinary graph values. A tensor reached
from several nodes sums their contributions; an input broadcast by an element-wise op has
its gradient summed over the broadcast axes back to its own shape. An x that y does not
depend on has a zero gradient.

The Gradient node's inputs give the values of xs and zs at which to differentiate. When
they are the tensors xs and zs name (the usual case), the forward values the graph already
computed are reused; otherwise the nodes between xs, zs and y are emitted again on the
given values first.

Rules: Add, Sub, Mul, Div, Neg, Identity, Relu, Sigmoid, Tanh, Exp, Log, Sqrt, Pow (both
operands), MatMul (with its 1-D and batch-broadcast forms), Gemm (transA, transB, alpha,
beta, C), Reshape, Flatten, Squeeze, Unsqueeze, Transpose, ReduceSum, ReduceMean. A node on
the path whose op has none is refused in one line naming it and the Gradient node.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hexir_compiler.frontend.onnx import ModelError, Tensor
from hexir_compiler.frontend.onnx_ops import broadcast_shapes, constant, static


class _Builder:
    """Writes the gradient's nodes, under fresh names, through the emitter."""

    def __init__(self, emitter, where: str) -> None:
        self.e, self.where = emitter, where
        self.values = emitter.importer.values
        self.helper = emitter.onnx.helper
        self.count = 0
        #: the tensors that depend on xs (whose gradients are wanted)
        self.active: set[str] = set()

    def fresh(self) -> str:
        while True:
            self.count += 1
            name = f"{self.where}/grad_{self.count}"
            if name not in self.values:
                return name

    def tensor(self, name: str) -> Tensor:
        value = self.values[name]
        if not isinstance(value, Tensor):
            raise ModelError(f"{self.where}: '{name}' is a sequence; Gradient differentiates "
                             "tensors")
        return value

    def shape(self, name: str) -> tuple[int, ...]:
        return static(self.tensor(name).shape, f"'{name}'")

    def const(self, array, like: str | None = None) -> str:
        """A constant (of `like`'s element type, when given) under a fresh name."""
        array = np.asarray(array, dtype=self.tensor(like).dtype if like else None)
        name = self.fresh()
        self.values[name] = constant(array)
        return name

    def node(self, op_type: str, *inputs: str, **attrs) -> str:
        """The output of a default-domain node of `inputs`, emitted now."""
        out = self.fresh()
        node = self.helper.make_node(op_type, list(inputs), [out], **attrs)
        label = f"{self.where}: {op_type} of its gradient"
        outputs = self.e._node(node, label, label)
        if outputs is None:
            raise ModelError(f"{label}: Hexir cannot emit it")
        self.values[out] = outputs[0]
        return out

    def copy(self, node, rename: dict[str, str]) -> list[str]:
        """`node` emitted again with its inputs renamed; its outputs' new names."""
        outs = [self.fresh() if n else "" for n in node.output]
        again = self.helper.make_node(node.op_type, [rename.get(n, n) for n in node.input],
                                      outs, domain=node.domain)
        again.attribute.extend(node.attribute)
        label = f"{self.where}: {node.op_type} '{node.name or node.output[0]}' on its inputs"
        outputs = self.e._node(again, label, label)
        if outputs is None:
            raise ModelError(f"{label}: Hexir cannot emit it")
        for name, tensor in zip(outs, outputs, strict=False):
            if name:
                self.values[name] = tensor
        return outs

    def unbroadcast(self, g: str, shape: tuple[int, ...]) -> str:
        """`g` summed over the axes a broadcast to its shape added or widened from 1."""
        have = self.shape(g)
        if have == shape:
            return g
        lead = len(have) - len(shape)
        axes = [*range(lead), *(lead + d for d, n in enumerate(shape)
                                if n == 1 and have[lead + d] != 1)]
        if axes:
            g = self.node("ReduceSum", g, self.const(np.array(axes, np.int64)), keepdims=1)
        return self.node("Reshape", g, self.const(np.array(shape, np.int64)))

    def to_shape(self, g: str, shape: tuple[int, ...]) -> str:
        return g if self.shape(g) == shape else \
            self.node("Reshape", g, self.const(np.array(shape, np.int64)))


# A rule: (builder, the node, its inputs' names, its outputs' names, y's gradient) -> each
# input's gradient (None: none flows to it), for the inputs the caller asks for.
Rule = Callable[[_Builder, object, list[str], list[str], str], list[str | None]]
RULES: dict[str, Rule] = {}


def rule(*ops: str):
    def register(fn: Rule) -> Rule:
        for op in ops:
            RULES[op] = fn
        return fn
    return register


def _attrs(b: _Builder, node) -> dict:
    return {a.name: b.helper.get_attribute_value(a) for a in node.attribute}


@rule("Add", "Sub")
def _add(b, node, x, y, g):
    other = b.node("Neg", g) if node.op_type == "Sub" else g
    return [b.unbroadcast(g, b.shape(x[0])), b.unbroadcast(other, b.shape(x[1]))]


@rule("Mul")
def _mul(b, node, x, y, g):
    return [b.unbroadcast(b.node("Mul", g, x[1]), b.shape(x[0])),
            b.unbroadcast(b.node("Mul", g, x[0]), b.shape(x[1]))]


@rule("Div")
def _div(b, node, x, y, g):
    # d(a/b)/da = 1/b; d(a/b)/db = -a/b^2 = -(a/b)/b
    return [b.unbroadcast(b.node("Div", g, x[1]), b.shape(x[0])),
            b.unbroadcast(b.node("Neg", b.node("Div", b.node("Mul", g, y[0]), x[1])),
                          b.shape(x[1]))]


@rule("Neg")
def _neg(b, node, x, y, g):
    return [b.node("Neg", g)]


@rule("Identity")
def _identity(b, node, x, y, g):
    return [g]


@rule("Relu")
def _relu(b, node, x, y, g):
    zero = b.const(0, like=x[0])
    return [b.node("Where", b.node("Greater", x[0], zero), g, zero)]


@rule("Sigmoid")
def _sigmoid(b, node, x, y, g):
    return [b.node("Mul", g, b.node("Mul", y[0], b.node("Sub", b.const(1, like=y[0]), y[0])))]


@rule("Tanh")
def _tanh(b, node, x, y, g):
    return [b.node("Mul", g, b.node("Sub", b.const(1, like=y[0]), b.node("Mul", y[0], y[0])))]


@rule("Exp")
def _exp(b, node, x, y, g):
    return [b.node("Mul", g, y[0])]


@rule("Log")
def _log(b, node, x, y, g):
    return [b.node("Div", g, x[0])]


@rule("Sqrt")
def _sqrt(b, node, x, y, g):
    return [b.node("Div", g, b.node("Mul", b.const(2, like=y[0]), y[0]))]


@rule("Pow")
def _pow(b, node, x, y, g):
    # d(a^c)/da = c a^(c-1); d(a^c)/dc = a^c ln a
    base, exponent = x
    to = b.e.onnx.helper.np_dtype_to_tensor_dtype(b.tensor(base).dtype)
    c = b.node("Cast", exponent, to=to)
    lower = b.node("Pow", base, b.node("Sub", c, b.const(1, like=c)))
    d_base = b.unbroadcast(b.node("Mul", g, b.node("Mul", c, lower)), b.shape(base))
    if exponent not in b.active or b.tensor(exponent).dtype != b.tensor(base).dtype:
        return [d_base, None]  # a constant or an integer exponent needs none
    d_exp = b.node("Mul", g, b.node("Mul", y[0], b.node("Log", base)))
    return [d_base, b.unbroadcast(d_exp, b.shape(exponent))]


def _swap(b: _Builder, t: str) -> str:
    rank = len(b.shape(t))
    return b.node("Transpose", t, perm=[*range(rank - 2), rank - 1, rank - 2])


@rule("MatMul")
def _matmul(b, node, x, y, g):
    # as matrices (a 1-D operand as a row or column), batch broadcasting summed back
    a_shape, c_shape = b.shape(x[0]), b.shape(x[1])
    a2 = b.to_shape(x[0], (1, *a_shape) if len(a_shape) == 1 else a_shape)
    c2 = b.to_shape(x[1], (*c_shape, 1) if len(c_shape) == 1 else c_shape)
    batch = tuple(broadcast_shapes(b.shape(a2)[:-2], b.shape(c2)[:-2]))
    g2 = b.to_shape(g, (*batch, b.shape(a2)[-2], b.shape(c2)[-1]))
    da = b.unbroadcast(b.node("MatMul", g2, _swap(b, c2)), b.shape(a2))
    dc = b.unbroadcast(b.node("MatMul", _swap(b, a2), g2), b.shape(c2))
    return [b.to_shape(da, a_shape), b.to_shape(dc, c_shape)]


@rule("Gemm")
def _gemm(b, node, x, y, g):
    a = _attrs(b, node)
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    trans_a, trans_b = a.get("transA", 0), a.get("transB", 0)
    lhs = b.node("Transpose", x[0], perm=[1, 0]) if trans_a else x[0]
    rhs = b.node("Transpose", x[1], perm=[1, 0]) if trans_b else x[1]
    scaled = b.node("Mul", g, b.const(alpha, like=g)) if alpha != 1.0 else g
    d_lhs = b.node("MatMul", scaled, b.node("Transpose", rhs, perm=[1, 0]))
    d_rhs = b.node("MatMul", b.node("Transpose", lhs, perm=[1, 0]), scaled)
    out = [b.node("Transpose", d_lhs, perm=[1, 0]) if trans_a else d_lhs,
           b.node("Transpose", d_rhs, perm=[1, 0]) if trans_b else d_rhs]
    if len(x) > 2 and x[2]:
        bias = b.node("Mul", g, b.const(beta, like=g)) if beta != 1.0 else g
        out.append(b.unbroadcast(bias, b.shape(x[2])))
    return out


@rule("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(b, node, x, y, g):
    return [b.to_shape(g, b.shape(x[0]))]


@rule("Transpose")
def _transpose(b, node, x, y, g):
    rank = len(b.shape(x[0]))
    perm = _attrs(b, node).get("perm", list(range(rank))[::-1])
    return [b.node("Transpose", g, perm=[int(p) for p in np.argsort(perm)])]


@rule("ReduceSum", "ReduceMean")
def _reduce(b, node, x, y, g):
    a = _attrs(b, node)
    shape = b.shape(x[0])
    if "axes" in a:
        axes = list(a["axes"])
    elif len(x) > 1 and x[1]:
        given = b.tensor(x[1])
        if given.const is None:
            raise ModelError(f"{b.where}: the axes of {node.op_type} '{node.name}' are not "
                             "known at compile time")
        axes = [int(v) for v in given.const.reshape(-1)]
    else:
        axes = []
    if not axes:
        if a.get("noop_with_empty_axes", 0):
            return [g]
        axes = list(range(len(shape)))
    axes = [d + len(shape) if d < 0 else d for d in axes]
    kept = tuple(1 if d in axes else n for d, n in enumerate(shape))
    spread = b.node("Expand", b.to_shape(g, kept), b.const(np.array(shape, np.int64)))
    if node.op_type == "ReduceMean":
        count = int(np.prod([shape[d] for d in set(axes)]))
        spread = b.node("Div", spread, b.const(count, like=spread))
    return [spread]


def gradient(emitter, node, where: str) -> list[Tensor] | None:
    """The Gradient node's outputs: dy/dx for each x of its `xs` (None when a tensor it names
    is one the import already refused)."""
    b = _Builder(emitter, where)
    a = _attrs(b, node)
    xs = [s.decode() if isinstance(s, bytes) else s for s in a.get("xs", [])]
    zs = [s.decode() if isinstance(s, bytes) else s for s in a.get("zs", [])]
    y = a.get("y", b"")
    y = y.decode() if isinstance(y, bytes) else y
    if not xs or not y:
        raise ModelError(f"{where}: its xs and y attributes are required")
    if len(node.input) != len(xs) + len(zs):
        raise ModelError(f"{where}: {len(node.input)} inputs; expected one per name of xs and "
                         f"zs ({len(xs) + len(zs)})")
    if len(node.output) > len(xs):
        raise ModelError(f"{where}: {len(node.output)} outputs; expected at most one per name "
                         f"of xs ({len(xs)})")
    if any(name in emitter.unknown for name in (*xs, *zs, y)):
        return None
    for name in (*xs, *zs, y):
        if name not in b.values:
            raise ModelError(f"{where}: '{name}' is not a tensor computed before it")
    for name in xs:
        if b.tensor(name).dtype.kind != "f":
            raise ModelError(f"{where}: '{name}' is {b.tensor(name).dtype}; Gradient "
                             "differentiates float tensors")
    path = _path(emitter.importer.model.graph.node, {*xs, *zs}, y)
    # the forward values at the given inputs: reused when they are the named tensors
    rename = {n: given for n, given in zip((*xs, *zs), node.input, strict=True) if n != given}
    for step in path:
        if any(n in rename for n in step.input):
            for old, new in zip(step.output, b.copy(step, rename), strict=True):
                if old:
                    rename[old] = new
    names = [rename.get(n, n) for n in xs]
    target = rename.get(y, y)
    active = b.active
    active.update(names)
    for step in path:
        if any(rename.get(n, n) in active for n in step.input):
            active.update(rename.get(n, n) for n in step.output)
    grads: dict[str, str] = {target: b.const(np.ones(b.shape(target)), like=target)}
    for step in reversed(path):
        outs = [rename.get(n, n) for n in step.output]
        ins = [rename.get(n, n) for n in step.input]
        if not any(n in active for n in ins) or outs[0] not in grads:
            continue
        if step.op_type not in RULES or step.domain not in ("", "ai.onnx"):
            label = f"'{step.name}'" if step.name else f"computing '{step.output[0]}'"
            raise ModelError(f"{where}: the node {label} ({step.op_type}) between xs and y has "
                             f"no gradient rule in Hexir (it has "
                             f"{', '.join(sorted(RULES))})")
        for name, grad in zip(ins, RULES[step.op_type](b, step, ins, outs, grads[outs[0]]),
                              strict=False):
            if grad is None or name not in active:
                continue
            grads[name] = b.node("Add", grads[name], grad) if name in grads else grad
    return [b.tensor(grads[n]) if n in grads else constant(np.zeros(b.shape(n),
                                                                    b.tensor(n).dtype))
            for n in names[:len(node.output)]]


def _path(nodes, sources: set[str], y: str) -> list:
    """The nodes that compute `y` from `sources`, in graph order (stopping at a source)."""
    producer = {out: k for k, n in enumerate(nodes) for out in n.output if out}
    wanted, seen = [y], set()
    while wanted:
        name = wanted.pop()
        if name in sources or name not in producer or producer[name] in seen:
            continue
        seen.add(producer[name])
        wanted.extend(n for n in nodes[producer[name]].input if n)
    return [nodes[k] for k in sorted(seen)]
