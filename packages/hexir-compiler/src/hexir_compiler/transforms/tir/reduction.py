"""Kernels that reduce along axes: softmax, layer_norm, reduce_sum/prod/mean/max/min.

Three schedules (`schedule`):

- short rows, and every cpu kernel: one iteration of the parallel space (cpu loops or one
  cuda thread) owns one output row or element and walks the reduced axes with serial loops
  that carry their accumulators as loop results, so no two iterations touch the same output;
- on the cpu, a reduction that keeps the innermost axis (a sum over an NHWC plane, a mean
  over NCHW's channels) by columns (`_reduce_columns`): an iteration owns a block of
  neighbouring outputs and adds whole rows of the input into them, where one output at a
  time read its column a row apart, a cache line per element;
- long rows on cuda (`schedule.rows`): a block per row; each thread folds its strided share,
  and the partial results meet in a shared-memory tree. Softmax is one pass over the row for
  its statistics (the online form: a running maximum and a sum rescaled whenever the
  maximum grows), then one to write; layer_norm two passes (the mean, then the centered
  squares: the variance of the reference, not E[x^2] - mean^2), then one to write.

Softmax subtracts the row maximum before exponentiating (as the numpy reference does);
layer_norm uses the biased variance over the last dimension. A
reduction over no elements gives its identity (0 for a sum, 1 for a product, -inf / the least
integer / false for a max, the opposite for a min), as ONNX defines it, and a mean of nothing
is NaN (0 / 0).
"""

from __future__ import annotations

import contextlib
import math as pymath

from hexir_compiler.mlir import arith, ir, math
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.kernel import GraphOp, Kernel, Prologue, Read
from hexir_compiler.transforms.tir.schedule import (
    Row,
    by_rows,
    parallel,
    register_lanes,
    rows,
)
from hexir_format import signatures

NEG_INF = float("-inf")


def plan_softmax(op: GraphOp, prologue: Prologue | None = None) -> Kernel:
    (shape,) = op.inputs
    op.expect_output(shape)
    axis = signatures.normalize_axis(op.int_attr("axis"), len(shape))
    space = [e for d, e in enumerate(shape) if d != axis]

    def emit(b: KernelBuilder) -> None:
        (x,), out = _operands(b, prologue), b.args[-1]
        if by_rows(b, shape[axis], space):
            with b.building(), rows(b, space, shape[axis]) as row:
                _softmax_row(b, row, lambda k: [*row.coords[:axis], k, *row.coords[axis:]], x, out)
            return
        lanes = _row_lanes(b, shape, axis, prologue)
        if lanes:
            with b.building(), parallel(b, space) as coords:
                _softmax_registers(b, lambda k: [*coords, b.index(k)], shape[axis], lanes, x,
                                   _vector_reader(b, prologue), out)
            return
        with b.building(), parallel(b, space) as coords:

            def at(k: ir.Value) -> list[ir.Value]:
                return [*coords[:axis], k, *coords[axis:]]

            (peak,) = b.fold(
                [shape[axis]],
                [b.float(NEG_INF)],
                lambda k, c: [arith.maximumf(c[0], x(at(k[0])))],
            )
            # exp(x - max) stored first, summed from there, then scaled in place: the sum is
            # in k order as one fold would make it, and the exps, out of its carried chain,
            # are a loop LLVM vectorizes
            with b.loop(shape[axis], "serial") as k:
                b.store(math.exp(arith.subf(x(at(k)), peak)), out, at(k))
            (total,) = b.fold(
                [shape[axis]],
                [b.float(0.0)],
                lambda k, c: [_add(c[0], b.load(out, at(k[0])))],
            )
            with b.loop(shape[axis], "serial") as k:
                b.store(arith.divf(b.load(out, at(k)), total), out, at(k))

    return _kernel("softmax", emit, (axis,), prologue)


def plan_layer_norm(op: GraphOp, prologue: Prologue | None = None) -> Kernel:
    shape, gamma, beta = op.inputs
    epsilon = op.float_attr("epsilon")
    op.expect_output(signatures.layer_norm(shape, gamma, beta, epsilon))
    depth = shape[-1]

    def emit(b: KernelBuilder) -> None:
        (x, scale, shift), out = _operands(b, prologue), b.args[-1]
        count = b.float(float(depth))
        if by_rows(b, depth, shape[:-1]):
            with b.building(), rows(b, shape[:-1], depth) as row:
                _layer_norm_row(b, row, epsilon, x, scale, shift, out)
            return
        with b.building(), parallel(b, shape[:-1]) as coords:

            def centered(k: ir.Value, mean: ir.Value) -> ir.Value:
                return arith.subf(x([*coords, k]), mean)

            (total,) = b.fold(
                [depth],
                [b.float(0.0)],
                lambda k, c: [_add(c[0], x([*coords, k[0]]))],
            )
            mean = arith.divf(total, count)
            (squares,) = b.fold(
                [depth],
                [b.float(0.0)],
                lambda k, c: [_add(c[0], _square(centered(k[0], mean)))],
            )
            spread = math.sqrt(arith.addf(arith.divf(squares, count), b.float(epsilon)))
            with b.loop(depth, "serial") as k:
                normal = arith.divf(centered(k, mean), spread)
                value = arith.mulf(normal, b.load(scale, [k]))
                b.store(arith.addf(value, b.load(shift, [k])), out, [*coords, k])

    return _kernel("layer_norm", emit, (epsilon,), prologue)


def plan_reduce(op: GraphOp, prologue: Prologue | None = None) -> Kernel:
    (shape,) = op.inputs
    keepdims = op.bool_attr("keepdims", False)
    op.expect_output(signatures.reduce(shape, op.ints_attr("axes"), keepdims))
    axes = list(signatures.reduce_axes(op.ints_attr("axes"), len(shape)))
    kept = [d for d in range(len(shape)) if d not in axes]
    reduced = [shape[d] for d in axes]
    element = op.elements[0]

    def emit(b: KernelBuilder) -> None:
        (x,), out = _operands(b, prologue), b.args[-1]
        combine, start = _monoid(op.mnemonic, element)
        count = pymath.prod(reduced)
        block = _column_block(b, shape, axes, element)
        if block is not None:
            _reduce_columns(b, x, out, shape, axes, keepdims, block, combine, start,
                            count if op.mnemonic == "reduce_mean" else None)
            return
        space = [shape[d] for d in kept]
        by_row = by_rows(b, count, space)
        trailing = axes == list(range(len(shape) - len(axes), len(shape)))
        with b.building(), (rows(b, space, count) if by_row else parallel(b, space)) as owner:
            if isinstance(owner, Row):  # by_row
                row, coords = owner, owner.coords
            else:
                row, coords = None, owner
            outer = dict(zip(kept, coords, strict=True))

            def step(ivs: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
                inner = dict(zip(axes, ivs, strict=True))
                at = [outer[d] if d in outer else inner[d] for d in range(len(shape))]
                return [combine(acc[0], x(at))]

            init = [b.constant(start, b.element)]
            if row is not None:  # the thread's share of the reduced elements (flat), the tree
                partial = row.fold(init, lambda k, acc: step(b.delinearize(k, reduced), acc))
                (value,) = row.reduce(partial, lambda p, q: [combine(p[0], q[0])])
            elif trailing:  # one loop over the reduced elements, flat: LLVM vectorizes
                # one long loop (a global average pool's 56 x 56 as 3136, not 56 rows of 56,
                # each too short for its vector body) and folds the coordinates back into
                # the address, which runs on in memory
                (value,) = b.fold([count], init,
                                  lambda k, acc: step(b.delinearize(k[0], reduced), acc))
            else:
                (value,) = b.fold(reduced, init, step)
            if op.mnemonic == "reduce_mean":
                value = arith.divf(value, b.float(float(count)))
            at = [outer[d] if d in outer else b.index(0) for d in range(len(shape))]
            with row.first_thread() if row is not None else contextlib.nullcontext():
                b.store(value, out, at if keepdims else coords)

    # min and prod have no format kind
    kind = "generic" if op.mnemonic in ("reduce_min", "reduce_prod") else op.mnemonic
    return _kernel(kind, emit, (float(keepdims), *axes), prologue)


#: The most outputs one iteration of a column reduction owns (`_reduce_columns`): four
#: AVX-512 vectors of f32, 256 bytes (four cache lines) of each input row it reads.
COLUMN_BLOCK = 64
#: The least number of kept innermost elements the column form takes: one AVX vector of f32.
COLUMN_MIN = 8


def _column_block(b: KernelBuilder, shape, axes: list[int], element: str) -> int | None:
    """How many neighbouring outputs an iteration of the column form owns, where it applies:
    on the cpu, for a float or wide integer reduction whose innermost axis is kept, at least
    COLUMN_MIN wide and static. The most that divides the kept width (so every block is
    whole) in multiples of COLUMN_MIN, up to COLUMN_BLOCK; the whole width where none does
    (a 49-pixel plane: one block, a vector loop and its remainder)."""
    last = max(axes, default=len(shape) - 1)
    width = pymath.prod(shape[last + 1:])
    if b.device != "cpu" or last == len(shape) - 1 or element in ("i1", "i8", "u8") or \
            not isinstance(width, int) or width < COLUMN_MIN:
        return None
    return max((d for d in range(COLUMN_MIN, COLUMN_BLOCK + 1, COLUMN_MIN) if width % d == 0),
               default=width)


def _reduce_columns(b: KernelBuilder, x: Read, out: ir.Value, shape, axes: list[int],
                    keepdims: bool, block: int, combine, start: float,
                    mean: int | None) -> None:
    """The reduction by columns: the parallel space is the kept axes before the last reduced
    one and the blocks of `block` outputs along the kept ones after it (the width); an
    iteration sets its outputs to the identity, then for each reduced index (in order)
    combines a row of `block` inputs into them -- a loop LLVM vectorizes, its outputs in L1
    -- and divides them by `mean` for a mean. Each output is folded in the reduced indices'
    order, the reference's (the one-output form's `reassoc` lets LLVM split its sum into
    lanes). ConvNeXt V2's global response norm, a sum of squares over a 56 x 56 NHWC plane of
    384 channels, read a cache line per element that way: its 18 kernels took 14.1 ms of a
    117 ms call on one thread, 1.3 ms by columns (bench/README.md)."""
    last = max(axes)
    outer = [d for d in range(last) if d not in axes]
    inner = list(range(last + 1, len(shape)))
    width = pymath.prod(shape[d] for d in inner)
    with b.building(), parallel(b, [*(shape[d] for d in outer), width // block]) as coords:
        first = b.mul(coords[-1], block)
        kept = dict(zip(outer, coords[:-1], strict=True))

        def columns(c: ir.Value) -> dict[int, ir.Value]:
            flat = arith.addi(first, c) if block < width else c
            return kept | dict(zip(inner, b.delinearize(flat, [shape[d] for d in inner]),
                                   strict=True))

        def output(at: dict[int, ir.Value]) -> list[ir.Value]:
            if keepdims:
                return [at.get(d, b.index(0)) for d in range(len(shape))]
            return [at[d] for d in sorted(at)]

        with b.loop(block, "serial") as c:
            b.store(b.constant(start, b.element), out, output(columns(c)))
        with contextlib.ExitStack() as stack:
            reduced = {d: stack.enter_context(b.loop(shape[d], "serial")) for d in axes}
            with b.loop(block, "serial") as c:
                at = columns(c)
                where = output(at)
                value = x([at[d] if d in at else reduced[d] for d in range(len(shape))])
                b.store(combine(b.load(out, where), value), out, where)
        if mean is not None:
            with b.loop(block, "serial") as c:
                where = output(columns(c))
                b.store(arith.divf(b.load(out, where), b.float(float(mean))), out, where)


#: The most vectors of a row the register form of softmax holds (`_softmax_registers`), by
#: x86-64 level: half its register file (32 zmm at v4, 16 ymm or xmm below).
ROW_REGISTERS = {4: 16, 3: 8, 2: 8, 1: 8}


def _row_lanes(b: KernelBuilder, shape, axis: int, prologue: Prologue | None) -> int | None:
    """The vector width of the register form of a cpu softmax along `axis`, where it
    applies: the innermost axis, static, a float row of at least a 16-byte vector and at most
    ROW_REGISTERS vectors of the level's registers, its data read as vectors (no prologue,
    or one of vector formulas). The widest power of two of lanes up to a register's that
    the row fills at least once."""
    n = shape[axis]
    if b.device != "cpu" or axis != len(shape) - 1 or not isinstance(n, int) or n < 1 or \
            not isinstance(b.element, ir.F32Type | ir.F64Type) or \
            (prologue is not None and prologue.vector is None):
        return None
    element_bytes = ir.FloatType(b.element).width // 8
    register = register_lanes(b.host_level, element_bytes)
    lanes = min(register, 1 << (n.bit_length() - 1))
    if lanes * element_bytes < 16 or n > ROW_REGISTERS.get(b.host_level, 8) * register:
        return None
    return lanes


def _softmax_registers(b: KernelBuilder, at, n: int, lanes: int, x: Read, vectors,
                       out: ir.Value) -> None:
    """Softmax of one short row held in registers: its whole vectors loaded once (a last
    partial one lane by lane, padded with -inf, which exp makes 0), the maximum and the sum
    each a tree of vector ops and then across the lanes, the quotients stored. LLVM's loop
    vectorizer runs 4 x 16 lanes an iteration at x86-64-v4, so a row of 49 (SegFormer's
    reduced keys, Swin's 7 x 7 windows) was scalar in all three of the one-output form's
    passes: SegFormer-B0's eight softmax kernels took 3.1 ms on one thread, ORT's 0.5
    (bench/README.md)."""
    full, tail = divmod(n, lanes)
    chunks = [vectors(at(j * lanes), lanes) for j in range(full)]
    if tail:
        chunks.append(b.vector_of([x(at(full * lanes + t)) for t in range(tail)]
                                  + [b.float(NEG_INF)] * (lanes - tail)))
    peak = _across(b, _tree(chunks, arith.maximumf), arith.maximumf)
    exps = [math.exp(arith.subf(c, b.splat(peak, lanes))) for c in chunks]
    total = b.splat(_across(b, _tree(exps, _add), _add), lanes)
    for j, e in enumerate(exps):
        value = arith.divf(e, total)
        if j < full:
            b.store_vector(value, out, at(j * lanes))
        else:
            for t in range(tail):
                b.store(b.lane(value, t), out, at(full * lanes + t))


def _tree(values: list[ir.Value], combine) -> ir.Value:
    """`values` combined pairwise, level by level (independent ops, not one chain)."""
    while len(values) > 1:
        values = [combine(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def _across(b: KernelBuilder, v: ir.Value, combine) -> ir.Value:
    """The lanes of the vector `v` combined into one scalar: halves combined until one lane."""
    lanes = ir.VectorType(v.type).shape[0]
    while lanes > 1:
        lanes //= 2
        v = combine(b.shuffle(v, range(lanes)), b.shuffle(v, range(lanes, 2 * lanes)))
    return b.lane(v, 0)


def _softmax_row(b: KernelBuilder, row: Row, at, x: Read, out: ir.Value) -> None:
    """Online softmax of one row: (running max m, sum s of exp(x - m)) per thread, merged in
    the tree; exp(x - M) / S written. An all -inf partial row (m = -inf) is rescaled as 0,
    never as exp(-inf - -inf) = NaN, so it cannot poison a row with finite elements."""

    def merge(m1: ir.Value, s1: ir.Value, m2: ir.Value, s2: ir.Value) -> list[ir.Value]:
        m = arith.maximumf(m1, m2)
        finite = arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, m, b.float(NEG_INF)),
                              b.float(0.0), m)
        scaled = arith.mulf(s1, math.exp(arith.subf(m1, finite)))
        return [m, arith.addf(scaled, arith.mulf(s2, math.exp(arith.subf(m2, finite))))]

    def step(k: ir.Value, c: list[ir.Value]) -> list[ir.Value]:
        return merge(c[0], c[1], x(at(k)), b.float(1.0))

    partial = row.fold([b.float(NEG_INF), b.float(0.0)], step)
    peak, total = row.reduce(partial, lambda p, q: merge(p[0], p[1], q[0], q[1]))
    row.each(lambda k: b.store(
        arith.divf(math.exp(arith.subf(x(at(k)), peak)), total), out, at(k)))


def _layer_norm_row(b: KernelBuilder, row: Row, epsilon: float, x, scale, shift, out) -> None:
    """layer_norm of one row: the mean and the variance each a tree reduction."""
    count = b.float(float(row.extent))

    def add(p: list[ir.Value], q: list[ir.Value]) -> list[ir.Value]:
        return [arith.addf(p[0], q[0])]

    def centered(k: ir.Value, mean: ir.Value) -> ir.Value:
        return arith.subf(x([*row.coords, k]), mean)

    partial = row.fold([b.float(0.0)], lambda k, c: add(c, [x([*row.coords, k])]))
    mean = arith.divf(row.reduce(partial, add)[0], count)
    partial = row.fold([b.float(0.0)], lambda k, c: add(c, [_square(centered(k, mean))]))
    variance = arith.divf(row.reduce(partial, add)[0], count)
    spread = math.sqrt(arith.addf(variance, b.float(epsilon)))

    def write(k: ir.Value) -> None:
        value = arith.mulf(arith.divf(centered(k, mean), spread), b.load(scale, [k]))
        b.store(arith.addf(value, b.load(shift, [k])), out, [*row.coords, k])

    row.each(write)


def _vector_reader(b: KernelBuilder, prologue: Prologue | None):
    """Reads the data operand's `lanes` neighbours along the innermost axis from the given
    coordinates as one vector: one load, or the fused prologue evaluated on vectors."""
    if prologue is None:
        data = b.args[0]
        return lambda at, lanes: b.load_vector(data, at, lanes)
    assert prologue.vector is not None
    vector = prologue.vector
    return lambda at, lanes: vector(b, at, lanes)


def _operands(b: KernelBuilder, prologue: Prologue | None) -> list:
    """The data operand as a reader of its elements (a load, or the fused prologue evaluated
    there), then the buffers of the op's other operands."""
    if prologue is None:
        data, *rest = b.args[:-1]
        return [lambda at: b.load(data, at), *rest]
    return [lambda at: prologue.value(b, at), *(b.args[i] for i in prologue.operands)]


def _kernel(kind: str, emit, params: tuple[float, ...], prologue: Prologue | None) -> Kernel:
    """With a prologue the kernel is generic: no format kind computes the fused chain."""
    if prologue is not None or kind == "generic":
        return Kernel("generic", emit)
    return Kernel(kind, emit, params)


def _monoid(mnemonic: str, element: str):
    """(combine, identity) of a reduction over `element`s."""
    if element == "i1":  # any / all
        return {"reduce_max": (arith.ori, 0), "reduce_min": (arith.andi, 1)}[mnemonic]
    if element in ("i32", "i64"):
        bits = int(element[1:])
        least, most = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        return {"reduce_sum": (arith.addi, 0), "reduce_prod": (arith.muli, 1),
                "reduce_max": (arith.maxsi, least),
                "reduce_min": (arith.minsi, most)}[mnemonic]
    return {"reduce_sum": (_add, 0.0), "reduce_prod": (arith.mulf, 1.0),
            "reduce_mean": (_add, 0.0),
            "reduce_max": (arith.maximumf, NEG_INF),
            "reduce_min": (arith.minimumf, float("inf"))}[mnemonic]


def _add(a: ir.Value, b: ir.Value) -> ir.Value:
    """a + b as a term of a sum whose order may change (`reassoc`): LLVM then folds the
    loop in several vector lanes of partial sums, where the strict order is one chain of
    dependent adds, one per 4 cycles (a global average pool over 112 x 112: 330 -> 60 us,
    bench/README). The sum differs from the serial one by rounding only."""
    return arith.addf(a, b, fastmath=ir.Attribute.parse("#arith.fastmath<reassoc>"))


def _square(v: ir.Value) -> ir.Value:
    return arith.mulf(v, v)
