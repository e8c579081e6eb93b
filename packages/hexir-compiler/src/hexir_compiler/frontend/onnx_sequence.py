"""ONNX sequence values (`seq(tensor)`) inside a tensor graph, as tensors.

Hexir's graphs take and return tensors, and its runtime has no list type; a model that
builds a sequence inside the graph (SequenceEmpty, SequenceConstruct, SequenceInsert,
SequenceErase, SequenceAt, SequenceLength, SplitToSequence, ConcatFromSequence) is imported
by resolving the sequence at import. Static shapes fix every sequence's length (no op makes
a length depend on a runtime value: a runtime position moves elements, it never changes how
many there are), so a `Sequence` is one of two things:

* a Python list of its elements, while every position used on it is known at compile time:
  the ops are list operations and cost nothing at runtime, and the elements may differ in
  shape;
* one stacked tensor [length, *element] once a position is a runtime tensor. SequenceAt is
  then a `gather` of a row; SequenceInsert at position p gathers rows by the index table
  `i < p ? i : i - 1` and selects the inserted tensor where `i == p`; SequenceErase gathers
  by `i < p ? i : i + 1`. Such a sequence's elements must share one shape (and element
  type): a runtime position into elements of differing shapes is refused naming the node.

A list becomes a stacked tensor by a concat of its elements, and a stacked tensor is read
element by element (a constant position after a runtime one) by slicing its rows.
Positions follow ONNX: negative ones count from the back (p + length); SequenceInsert
accepts [-length, length] and appends when the position is omitted, SequenceErase erases
the last element when it is omitted. A constant position out of range is refused at import.
ONNX Runtime fails the run on a runtime position out of range; Hexir's kernels cannot fail,
so a runtime position is clamped into the range after wrapping (below it: the first
element; above it: the last, or appending for SequenceInsert) -- defined, but not an error.
A sequence is never a graph input or output (refused naming it), and only these ops and
Identity read one.
"""

from __future__ import annotations

import numpy as np

from hexir_compiler.frontend.onnx import DTYPES, Sequence, Tensor
from hexir_compiler.frontend.onnx_ops import (
    TAKES_SEQUENCES,
    NodeError,
    _axis,
    _concat,
    constant,
    handles,
    known,
    static,
)

I64 = np.dtype("int64")


def _sequence_op(op_type: str, *versions: int):
    TAKES_SEQUENCES.add(op_type)
    return handles(op_type, *versions)


def _sequence(s, what: str = "sequence") -> Sequence:
    if not isinstance(s, Sequence):
        raise NodeError(f"its {what} operand is a tensor; expected a sequence")
    return s


def _tensor(t, what: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise NodeError(f"its {what} operand is a sequence; expected a tensor")
    return t


def _element(s: Sequence, t: Tensor) -> None:
    if t.dtype != s.dtype:
        raise NodeError(f"the tensor is {t.dtype}; the sequence holds {s.dtype}")


# ---- the two forms ---------------------------------------------------------------------

def items(e, s: Sequence) -> list[Tensor]:
    """The elements: the list, or each row of the stacked tensor sliced out."""
    if s.items is not None:
        return s.items
    assert s.stacked is not None
    stacked = s.stacked
    rest = stacked.shape[1:]
    if stacked.const is not None:
        return [constant(row) for row in stacked.const]
    return [e.reshape(e.op("slice", [stacked], (1, *rest), s.dtype,
                           starts=[k] + [0] * len(rest), steps=[1] * (len(rest) + 1)), rest)
            for k in range(static(stacked.shape, "sequence")[0])]


def stacked(e, s: Sequence) -> Tensor:
    """The elements as one tensor [length, *element]; they must share one shape."""
    if s.stacked is not None:
        return s.stacked
    assert s.items
    shapes = sorted({t.shape for t in s.items})
    if len(shapes) > 1:
        raise NodeError(f"a runtime position needs elements of one shape; this sequence holds "
                        f"shapes {', '.join(str(list(sh)) for sh in shapes)}")
    arrays = [t.const for t in s.items if t.const is not None]
    if len(arrays) == len(s.items):
        return constant(np.stack(arrays))
    rows = [e.reshape(t, (1, *t.shape)) for t in s.items]
    return _concat(e, rows, {"axis": 0}, 13)[0]


def _position(e, pos: Tensor | None, length: int, top: int) -> int | Tensor:
    """A position as an index in [0, top] (top: the last valid one): an int when it is known
    at compile time (refused out of [-length, top]), else an int64 scalar tensor, wrapped
    (p < 0: p + length) and clamped into [0, top]."""
    assert pos is not None
    pos = _tensor(pos, "position")
    if pos.dtype not in (np.int32, np.int64) or pos.shape not in ((), (1,)):
        raise NodeError(f"the position is {pos.dtype} {list(pos.shape)}; expected an int32 or "
                        "int64 scalar")
    if pos.const is not None:
        p = int(pos.const.reshape(-1)[0])
        if not -length <= p <= top:
            raise NodeError(f"position {p} is out of range [{-length}, {top}] for a sequence "
                            f"of length {length}")
        return p + length if p < 0 else p
    p = e.reshape(e.cast(pos, I64), ())
    zero = e.scalar(0, I64)
    p = e.op("where", [e.binary("less", p, zero, dtype=np.bool_),
                       e.binary("add", p, e.scalar(length, I64)), p], (), I64)
    return e.binary("min", e.binary("max", p, zero), e.scalar(top, I64))


def _column(e, flags: Tensor, like: Tensor) -> Tensor:
    """A [n] mask as [n, 1, ...] broadcast to `like`'s shape."""
    return e.expand(e.reshape(flags, (flags.shape[0],) + (1,) * (len(like.shape) - 1)),
                    like.shape)


# ---- the ops -----------------------------------------------------------------------------

@_sequence_op("SequenceEmpty", 11)
def _empty(e, xs, a, v):
    dtype = a.get("dtype", 1)
    if dtype not in DTYPES:
        raise NodeError(f"element type {e.onnx.TensorProto.DataType.Name(dtype)}; Hexir has "
                        "FLOAT, DOUBLE, INT32, INT64 and BOOL")
    return [Sequence(DTYPES[dtype], items=[])]


@_sequence_op("SequenceConstruct", 11)
def _construct(e, xs, a, v):
    parts = [_tensor(x, "input") for x in xs]
    if any(p.dtype != parts[0].dtype for p in parts):
        raise NodeError("its inputs differ in element type")
    return [Sequence(parts[0].dtype, items=parts)]


@_sequence_op("SequenceLength", 11)
def _length(e, xs, a, v):
    return [constant(np.array(_sequence(xs[0]).length, I64))]


@_sequence_op("SequenceAt", 11)
def _at(e, xs, a, v):
    s = _sequence(xs[0])
    if s.length == 0:
        raise NodeError("SequenceAt of an empty sequence")
    p = _position(e, xs[1], s.length, s.length - 1)
    if isinstance(p, int):
        return [items(e, s)[p]]
    whole = stacked(e, s)
    return [e.op("gather", [whole, p], whole.shape[1:], s.dtype, axis=0)]


@_sequence_op("SequenceInsert", 11)
def _insert(e, xs, a, v):
    s, t = _sequence(xs[0]), _tensor(xs[1], "tensor")
    _element(s, t)
    n = s.length
    pos = xs[2] if len(xs) > 2 else None
    p = n if pos is None else _position(e, pos, n, n)
    if isinstance(p, int) or n == 0:  # into an empty sequence, the one valid position is 0
        new = list(items(e, s))
        new.insert(p if isinstance(p, int) else 0, t)
        return [Sequence(s.dtype, items=new)]
    whole = stacked(e, s)
    if t.shape != whole.shape[1:]:
        raise NodeError(f"a runtime position needs elements of one shape; the tensor is "
                        f"{list(t.shape)}, the sequence's elements {list(whole.shape[1:])}")
    i = constant(np.arange(n + 1, dtype=I64))
    # out[i] = i < p ? s[i] : i == p ? t : s[i - 1]
    after = e.cast(e.binary("greater", i, e.reshape(p, (1,)), dtype=np.bool_), I64)
    source = e.binary("min", e.binary("sub", i, after), e.scalar(n - 1, I64))
    rows = e.op("gather", [whole, source], (n + 1, *whole.shape[1:]), s.dtype, axis=0)
    here = _column(e, e.binary("equal", i, e.reshape(p, (1,)), dtype=np.bool_), rows)
    out = e.op("where", [here, e.expand(e.reshape(t, (1, *t.shape)), rows.shape), rows],
               rows.shape, s.dtype)
    return [Sequence(s.dtype, stacked=out)]


@_sequence_op("SequenceErase", 11)
def _erase(e, xs, a, v):
    s = _sequence(xs[0])
    n = s.length
    if n == 0:
        raise NodeError("SequenceErase of an empty sequence")
    pos = xs[1] if len(xs) > 1 else None
    p = n - 1 if pos is None else _position(e, pos, n, n - 1)
    if isinstance(p, int):
        new = list(items(e, s))
        del new[p]
        return [Sequence(s.dtype, items=new)]
    whole = stacked(e, s)
    # out[i] = s[i < p ? i : i + 1]
    i = constant(np.arange(n - 1, dtype=I64))
    later = e.cast(e.binary("greater", i, e.binary("sub", e.reshape(p, (1,)),
                                                    e.scalar(1, I64)), dtype=np.bool_), I64)
    source = e.binary("add", i, later)
    out = e.op("gather", [whole, source], (n - 1, *whole.shape[1:]), s.dtype, axis=0)
    return [Sequence(s.dtype, stacked=out)]


@_sequence_op("SplitToSequence", 11, 24)
def _split(e, xs, a, v):
    x = _tensor(xs[0], "input")
    axis = _axis(a.get("axis", 0), len(x.shape))
    extent = static(x.shape, "input")[axis]
    split = xs[1] if len(xs) > 1 else None
    if split is None:
        sizes, keep = [1] * extent, bool(a.get("keepdims", 1))
    else:
        given = known(_tensor(split, "split"), "split")
        if given.ndim == 0:
            chunk = int(given)
            if chunk <= 0:
                raise NodeError(f"split {chunk} is not positive")
            sizes = [min(chunk, extent - k) for k in range(0, extent, chunk)]
        else:
            sizes = [int(d) for d in given.reshape(-1)]
            if any(d < 0 for d in sizes) or sum(sizes) != extent:
                raise NodeError(f"split {sizes} does not divide axis {axis} of extent {extent}")
        keep = True  # keepdims applies only when split is omitted
    parts, start = [], 0
    for size in sizes:
        shape = list(x.shape)
        shape[axis] = size
        if x.const is not None:
            part = constant(np.take(x.const, range(start, start + size), axis=axis))
        else:
            begin = [0] * len(shape)
            begin[axis] = start
            part = e.op("slice", [x], shape, x.dtype, starts=begin, steps=[1] * len(shape))
        if not keep:
            del shape[axis]
            part = e.reshape(part, shape)
        parts.append(part)
        start += size
    return [Sequence(x.dtype, items=parts)]


@_sequence_op("ConcatFromSequence", 11)
def _concat_from(e, xs, a, v):
    s = _sequence(xs[0])
    if s.length == 0:
        raise NodeError("ConcatFromSequence of an empty sequence")
    parts = items(e, s)
    if "axis" not in a:
        raise NodeError("its axis attribute is missing")
    rank = len(parts[0].shape)
    if a.get("new_axis", 0):
        axis = _axis(a["axis"], rank + 1)
        parts = [e.reshape(p, (*p.shape[:axis], 1, *p.shape[axis:])) for p in parts]
    else:
        axis = _axis(a["axis"], rank)
    if any(len(p.shape) != len(parts[0].shape) for p in parts):
        raise NodeError("the elements differ in rank")
    return _concat(e, parts, {"axis": axis}, 13)
