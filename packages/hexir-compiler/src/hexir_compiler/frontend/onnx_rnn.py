"""ONNX's recurrent layers (RNN, GRU, LSTM) as hexir ops, unrolled over the static sequence.

The sequence length is known at compile time (shapes are static), so each layer becomes a
straight line of ops that Hexir already has: the input projection of every step at once (a
`linear` of X [seq * batch, input] by W^T, the biases added once), then per step its row of
the projection gathered, one `linear` of the hidden state by R^T, the gates sliced out, their
activations, and the state update. No loop op, no new kernel: fusion sees each step's chain as
any other (the gather and slices read in place, `hexir-fuse`), and each step's kernels are the
same code, the step's index an input: one executable serves every step.

Per-batch `sequence_lens` (ONNX and ONNX Runtime): a step at or past a sequence's length keeps
that sequence's state and writes zeros to Y; the reverse direction, walked from the last step
down, thereby starts each sequence at its own last step. Layout 1 is the batch-major form of
X, the initial states and the outputs (transposed in and out).
"""

from __future__ import annotations

import numpy as np

from hexir_compiler.frontend.onnx import Tensor
from hexir_compiler.frontend.onnx_ops import NodeError, _string, broadcast_shapes, constant, handles
from hexir_format import dims

#: activation name (lower case, as ONNX Runtime matches them) -> default (alpha, beta), None
#: where it takes none. The defaults are ONNX Runtime's: its own ops' for LeakyRelu,
#: HardSigmoid and Elu, and 0 for Affine, ThresholdedRelu and ScaledTanh.
ACTIVATIONS = {"sigmoid": (None, None), "tanh": (None, None), "relu": (None, None),
               "affine": (0.0, 0.0), "leakyrelu": (0.01, None), "thresholdedrelu": (0.0, None),
               "scaledtanh": (0.0, 0.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, None),
               "softsign": (None, None), "softplus": (None, None)}

#: op -> (gates, the default activations of one direction).
KINDS = {"RNN": (1, ["Tanh"]), "GRU": (3, ["Sigmoid", "Tanh"]),
         "LSTM": (4, ["Sigmoid", "Tanh", "Tanh"])}


class _Step:
    """The ops one direction's steps share: element-wise helpers that fold constants."""

    def __init__(self, e, dtype) -> None:
        self.e, self.dtype = e, dtype

    def s(self, value) -> Tensor:
        return self.e.scalar(value, self.dtype)

    def bin(self, name: str, a: Tensor, b: Tensor) -> Tensor:
        if a.const is not None and b.const is not None:
            fold = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[name]
            return constant(fold(a.const, b.const).astype(a.dtype))
        return self.e.binary(name, a, b)

    def where(self, cond: Tensor, x: Tensor, y: Tensor) -> Tensor:
        shape = broadcast_shapes(cond.shape, x.shape, y.shape)
        e = self.e
        return e.op("where", [e.expand(cond, shape), e.expand(x, shape), e.expand(y, shape)],
                    shape, x.dtype)

    def activate(self, fn: tuple[str, float | None, float | None], x: Tensor,
                 clip: float | None) -> Tensor:
        """f(x) for one entry of the `activations` list; `clip` bounds its input first."""
        e, s = self.e, self.s
        if clip is not None:
            x = e.binary("max", e.binary("min", x, s(clip)), s(-clip))
        name, alpha, beta = fn
        if name in ("sigmoid", "tanh", "relu"):
            return e.elementwise(name, x)
        if name == "affine":
            return e.binary("add", e.binary("mul", x, s(alpha)), s(beta))
        if name == "scaledtanh":
            return e.binary("mul", e.elementwise("tanh", e.binary("mul", x, s(beta))), s(alpha))
        if name == "hardsigmoid":
            line = e.binary("add", e.binary("mul", x, s(alpha)), s(beta))
            return e.binary("max", e.binary("min", line, s(1)), s(0))
        if name == "softsign":
            return e.binary("div", x, e.binary("add", e.elementwise("abs", x), s(1)))
        if name == "softplus":  # max(x, 0) + log(1 + exp(-|x|)): no overflow for large x
            tail = e.elementwise("exp", e.elementwise("neg", e.elementwise("abs", x)))
            return e.binary("add", e.binary("max", x, s(0)),
                            e.elementwise("log", e.binary("add", tail, s(1))))
        negative = e.binary("less", x, s(0), dtype=np.bool_)
        if name == "leakyrelu":
            return self.where(negative, e.binary("mul", x, s(alpha)), x)
        if name == "elu":
            curve = e.binary("mul", e.binary("sub", e.elementwise("exp", x), s(1)), s(alpha))
            return self.where(negative, curve, x)
        # thresholdedrelu
        return self.where(e.binary("greater", x, s(alpha), dtype=np.bool_), x, s(0))


def _take(e, x: Tensor, axis: int, start: int, stop: int) -> Tensor:
    """x[start:stop] along `axis` (a constant is sliced now)."""
    if (start, stop) == (0, x.shape[axis]):
        return x
    if x.const is not None:
        return constant(np.ascontiguousarray(np.take(x.const, range(start, stop), axis=axis)))
    shape = list(x.shape)
    shape[axis] = stop - start
    starts = [0] * len(shape)
    starts[axis] = start
    return e.op("slice", [x], shape, x.dtype, starts=starts, steps=[1] * len(shape))


def _activations(a: dict, op: str, directions: int) -> list[list[tuple]]:
    """Each direction's activation functions as (name, alpha, beta), alpha and beta taken in
    order by the functions that use them (ONNX Runtime's reading of the lists)."""
    count = len(KINDS[op][1])
    names = [n.decode() if isinstance(n, bytes) else n for n in a.get("activations", [])] or \
        KINDS[op][1] * directions
    if len(names) != count * directions:
        raise NodeError(f"activations lists {len(names)} functions; {op} with {directions} "
                        f"direction(s) takes {count * directions}")
    alphas, betas = list(a.get("activation_alpha", [])), list(a.get("activation_beta", []))
    functions = []
    for name in names:
        key = name.lower()
        if key not in ACTIVATIONS:
            raise NodeError(f"activation '{name}' is not one ONNX defines for {op} (Relu, Tanh, "
                            "Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
                            "HardSigmoid, Elu, Softsign, Softplus)")
        alpha, beta = ACTIVATIONS[key]
        if alpha is not None and alphas:
            alpha = float(alphas.pop(0))
        if beta is not None and betas:
            beta = float(betas.pop(0))
        functions.append((key, alpha, beta))
    return [functions[d * count:(d + 1) * count] for d in range(directions)]


def _recurrent(op: str):
    def handler(e, xs, a, v):
        X, W, R, B, lens, h0, c0, P = (xs + [None] * 8)[:8]
        gates, _ = KINDS[op]
        if X.dtype.kind != "f" or any(t is not None and t.dtype != X.dtype
                                      for t in (W, R, B, h0, c0, P)):
            raise NodeError(f"{op} computes on float32 or float64 with X, W, R, B, the initial "
                            f"states and P of one type; got X {X.dtype}")
        layout = a.get("layout", 0)
        if layout not in (0, 1):
            raise NodeError(f"layout {layout} is not 0 or 1")
        if len(X.shape) != 3:
            raise NodeError(f"X has shape {list(X.shape)}; expected rank 3")
        seq, batch, width = (X.shape[1], X.shape[0], X.shape[2]) if layout else X.shape
        if not isinstance(seq, int):
            raise NodeError(f"the sequence length is '{dims.render(seq)}': Hexir unrolls a "
                            f"recurrence over its steps, so it needs a static length "
                            f"(-input-shape binds it; a symbolic batch is fine)")
        direction = _string(a, "direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise NodeError(f"direction '{direction}' is not forward, reverse or bidirectional")
        dirs = 2 if direction == "bidirectional" else 1
        hidden = R.shape[-1] if len(R.shape) == 3 else -1
        state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
        expected = {"W": (W, (dirs, gates * hidden, width)),
                    "R": (R, (dirs, gates * hidden, hidden)),
                    "B": (B, (dirs, 2 * gates * hidden)), "sequence_lens": (lens, (batch,)),
                    "initial_h": (h0, state), "initial_c": (c0, state),
                    "P": (P, (dirs, 3 * hidden))}
        for what, (t, shape) in expected.items():
            if t is not None and t.shape != shape:
                raise NodeError(f"{what} has shape {list(t.shape)}; expected {list(shape)} "
                                f"(X {list(X.shape)} with layout {layout}, hidden size "
                                f"{hidden}, {dirs} direction(s))")
        if layout:
            X = e.transpose(X, (1, 0, 2))
            h0, c0 = (t if t is None else e.transpose(t, (1, 0, 2)) for t in (h0, c0))
        if a.get("hidden_size", hidden) != hidden:
            raise NodeError(f"hidden_size is {a['hidden_size']} but R has shape "
                            f"{list(R.shape)}")
        if lens is not None and lens.dtype != np.int32:
            raise NodeError(f"sequence_lens is {lens.dtype}; expected int32")
        if lens is not None and lens.const is not None and (
                (lens.const < 0) | (lens.const > seq)).any():
            raise NodeError(f"sequence_lens {lens.const.tolist()} are outside 0..{seq}")
        functions = _activations(a, op, dirs)
        clip = float(a["clip"]) if "clip" in a else None
        step = _Step(e, X.dtype)
        outputs = [_direction(e, step, op, X, lens, d, W, R, B, h0, c0, P, functions[d], clip,
                              reverse=direction == "reverse" or d == 1,
                              coupled=bool(a.get("input_forget", 0)),
                              reset_after=bool(a.get("linear_before_reset", 0)))
                   for d in range(dirs)]
        Y = e.concat([y for y, *_ in outputs], 1)               # [seq, dirs, batch, hidden]
        states = [e.concat([e.reshape(o[k], (1, batch, hidden)) for o in outputs], 0)
                  for k in range(1, len(outputs[0]))]           # each [dirs, batch, hidden]
        if layout:
            Y = e.transpose(Y, (2, 0, 1, 3))
            states = [e.transpose(s, (1, 0, 2)) for s in states]
        return [Y, *states]
    return handler


def _direction(e, step: _Step, op, X, lens, d, W, R, B, h0, c0, P, functions, clip, *, reverse,
               coupled, reset_after):
    """One direction's Y [seq, 1, batch, hidden], final hidden state and (LSTM) final cell."""
    seq, batch, width = X.shape
    gates, _ = KINDS[op]
    hidden = R.shape[-1]
    dtype = X.dtype

    def per_direction(t, rows):  # t[d] as [rows...]
        return e.reshape(_take(e, t, 0, d, d + 1), rows)

    WT = e.transpose(per_direction(W, (gates * hidden, width)), (1, 0))
    RT = e.transpose(per_direction(R, (gates * hidden, hidden)), (1, 0))
    Wb = Rb = None
    if B is not None:
        bias = per_direction(B, (2 * gates * hidden,))
        Wb, Rb = _take(e, bias, 0, 0, gates * hidden), _take(e, bias, 0, gates * hidden,
                                                             2 * gates * hidden)
    # The input side of every step at once, for each range of gates a step reads together
    # (GRU: update and reset, then the candidate's), [seq, batch, its gates * hidden]; a step
    # gathers its row of each, which fuses into the kernel that reads it. The recurrent bias
    # joins it, except GRU's reset-after gate's, scaled by r with the recurrent product.
    xs = e.reshape(X, (seq * batch, width))
    xbias = None
    if Wb is not None and Rb is not None:  # both or neither: B's halves
        xbias = step.bin("add", Wb, Rb)
        if op == "GRU" and reset_after:
            xbias = e.concat([_take(e, xbias, 0, 0, 2 * hidden),
                              _take(e, Wb, 0, 2 * hidden, 3 * hidden)], 0)
    ranges: dict[tuple[int, int], Tensor] = {}

    def projected(t: int, first: int, last: int) -> Tensor:
        """Step t's input side of gates [first, last)."""
        if (first, last) not in ranges:
            columns = (first * hidden, last * hidden)
            product = e.op("linear", [xs, _take(e, WT, 1, *columns)],
                           (seq * batch, (last - first) * hidden), dtype)
            if xbias is not None:
                product = step.bin("add", product, _take(e, xbias, 0, *columns))
            ranges[first, last] = e.reshape(product, (seq, batch, (last - first) * hidden))
        return e.op("gather", [ranges[first, last], constant(np.array(t, np.int64))],
                    (batch, (last - first) * hidden), dtype, axis=0)

    # (one row where the batch is symbolic: the first step broadcasts it to every sequence)
    zeros = constant(np.zeros((batch if isinstance(batch, int) else 1, hidden), dtype))
    H = per_direction(h0, (batch, hidden)) if h0 is not None else zeros
    C = per_direction(c0, (batch, hidden)) if c0 is not None else zeros
    if P is not None:
        peep = per_direction(P, (3 * hidden,))
        Pi, Po, Pf = (_take(e, peep, 0, k * hidden, (k + 1) * hidden) for k in range(3))

    def gate(t, k):
        return _take(e, t, 1, k * hidden, (k + 1) * hidden)

    def times_R(h, first, last):  # h @ R[first:last gates]^T, or None for a zero state
        if h.const is not None and not h.const.any():
            return None
        rt = RT if (first, last) == (0, gates) else _take(e, RT, 1, first * hidden,
                                                            last * hidden)
        return e.op("linear", [h, rt], (batch, (last - first) * hidden), dtype)

    def plus(a, b):
        return a if b is None else step.bin("add", a, b)

    f, g, h = [*functions, None, None][:3]
    # each sequence's length broadcast over the hidden axis once: a step's mask is then one
    # comparison of the state's shape
    lengths = None if lens is None or lens.const is not None else \
        e.expand(e.reshape(lens, (batch, 1)), (batch, hidden))
    ys: dict[int, Tensor] = {}  # step -> its output
    for t in (reversed(range(seq)) if reverse else range(seq)):
        if op == "RNN":
            H_new = step.activate(f, plus(projected(t, 0, 1), times_R(H, 0, 1)), clip)
        elif op == "GRU":
            zr = plus(projected(t, 0, 2), times_R(H, 0, 2))
            z = step.activate(f, gate(zr, 0), clip)
            r = step.activate(f, gate(zr, 1), clip)
            if reset_after:
                rec = times_R(H, 2, 3)
                if Rb is not None:
                    rec = plus(_take(e, Rb, 0, 2 * hidden, 3 * hidden), rec)
                pre = plus(projected(t, 2, 3), None if rec is None else step.bin("mul", r, rec))
            else:
                pre = plus(projected(t, 2, 3), times_R(step.bin("mul", r, H), 2, 3))
            candidate = step.activate(g, pre, clip)
            # (1 - z) * candidate + z * H, as candidate + z * (H - candidate)
            H_new = step.bin("add", candidate, step.bin("mul", z, step.bin("sub", H, candidate)))
        else:
            pre = plus(projected(t, 0, 4), times_R(H, 0, 4))
            pi, po, pf, pc = (gate(pre, k) for k in range(4))
            if P is not None:
                pi, pf = step.bin("add", pi, step.bin("mul", Pi, C)), \
                    step.bin("add", pf, step.bin("mul", Pf, C))
            i = step.activate(f, pi, clip)
            forget = step.bin("sub", step.s(1), i) if coupled else step.activate(f, pf, clip)
            C_new = step.bin("add", step.bin("mul", forget, C),
                             step.bin("mul", i, step.activate(g, pc, clip)))
            if P is not None:
                po = step.bin("add", po, step.bin("mul", Po, C_new))
            o = step.activate(f, po, clip)
            # ONNX Runtime leaves h's input unclipped (the spec's words allow either)
            H_new = step.bin("mul", o, step.activate(h, C_new, None))
        live = _live(e, lens, lengths, t)
        if live is None:
            ys[t], H = H_new, H_new
            if op == "LSTM":
                C = C_new
        else:
            ys[t] = step.where(live, H_new, step.s(0))
            H = step.where(live, H_new, H)
            if op == "LSTM":
                C = step.where(live, C_new, C)
    if lens is not None:  # ONNX Runtime's final states of an empty sequence are zeros
        started = _live(e, lens, lengths, 0)
        if started is not None:
            H = step.where(started, H, step.s(0))
            C = step.where(started, C, step.s(0)) if op == "LSTM" else C
    if seq:  # the steps side by side, [batch, seq * hidden], then as [seq, 1, batch, hidden]
        Y = e.reshape(e.concat([ys[t] for t in range(seq)], 1), (batch, seq, hidden))
        Y = e.reshape(e.transpose(Y, (1, 0, 2)), (seq, 1, batch, hidden))
    else:
        Y = constant(np.zeros((0, 1, batch, hidden), dtype))
    return (Y, H, C) if op == "LSTM" else (Y, H)


def _live(e, lens: Tensor | None, lengths: Tensor | None, t: int) -> Tensor | None:
    """Where step `t` is within its sequence, as a bool of the state's shape or [batch, 1]
    for constant lengths (None: everywhere). `lengths`: runtime `lens` as [batch, hidden]."""
    if lens is None:
        return None
    if lens.const is not None:
        live = lens.const > t
        return None if live.all() else constant(live.reshape(-1, 1))
    return e.binary("less", e.scalar(t, np.int32), lengths, dtype=np.bool_)


for _op in KINDS:
    handles(_op, 7, 14, 22)(_recurrent(_op))
del _op
