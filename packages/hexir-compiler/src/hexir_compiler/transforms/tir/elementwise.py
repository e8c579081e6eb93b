"""Kernels with one output element per iteration and no reduction.

Unary math, numpy-broadcast binary arithmetic, comparisons and bitwise/logical ops, where,
cast, expand, gelu, and the data movers (transpose, reshape). A plain element-wise op is its
entry in `ops.UNARY` or `ops.BINARY` (the dialect's op `hexir.<mnemonic>` with those type
rules, its placement) and its scalar formula in `FORMULAS` here (its kernel on both devices;
its `.hxb` kind is its own, or `map`). Each is a map over the output's index space
(`schedule.parallel`), with numpy's meaning of each formula (ONNX's where numpy has none:
integer division truncates).
"""

from __future__ import annotations

import functools
import math as pymath
from collections.abc import Callable

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import arith, ir, math
from hexir_compiler.ops import GELU_APPROXIMATIONS
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.kernel import GraphOp, Kernel, broadcast_indices
from hexir_compiler.transforms.tir.schedule import (
    lanes,
    parallel,
    register_transpose,
    tiled_transpose,
    transpose_tile,
    transposes_by_tiles,
)
from hexir_format import KernelKind, signatures

Scalar = Callable[..., ir.Value]


def is_float(value: ir.Value) -> bool:
    """Whether `value` is a float or a vector of floats."""
    return isinstance(element_type(value.type), ir.FloatType)


def element_type(type_: ir.Type) -> ir.Type:
    """A vector type's element type; any other type itself."""
    return ir.VectorType(type_).element_type if isinstance(type_, ir.VectorType) else type_


#: The formulas that take vectors as they take scalars (their ops and constants follow the
#: operands' type) and compile to vector instructions: a fused epilogue made only of these
#: runs on whole vectors (`kernel.Epilogue.vectors`). exp, erf and tanh, and what uses them
#: (sigmoid -- SiLU's and HardSwish's halves --, GELU, Mish, Elu), are among them because
#: `target.host_math` rewrites f32 ones on vectors into vector arithmetic as it does scalar
#: ones (before, a vector's exp became a libm call per lane: EfficientNet-B0 at v4, its SiLU
#: epilogues on vectors, 3.09x ORT against 2.43x lane by lane). Not log, sqrt, pow or the
#: trigonometric functions: the math dialect's vector forms of those are libm calls per lane.
VECTOR_FORMULAS = frozenset({
    "relu", "neg", "abs", "add", "sub", "mul", "div", "max", "min",
    "exp", "erf", "tanh", "sigmoid", "gelu", "mish", "elu", "prelu", "thresholded_relu"})


def _typed(on_float: Callable, on_int: Callable) -> Scalar:
    """A formula that is `on_float(x, y)` on floats and `on_int(x, y)` on integers."""
    return lambda b, *xs: (on_float if is_float(xs[0]) else on_int)(*xs)


def _extremum(greater: bool) -> Scalar:
    """max (`greater`) or min of two floats as `arith.maximumf` / `minimumf` define them (NaN
    wins, max(-0, +0) = +0, min(-0, +0) = -0), written with selects on float compares and
    bit operations only. LLVM expands the `llvm.maximum` of a scalar whose operands may be
    zero with branches on their sign bits, which mispredict on data of either sign: a conv
    with MobileNetV2's clip (ReLU6, bounds read at run time) in its epilogue took 8.8 ms for
    what took 2.0 with a relu; these selects compile to compares and blends.

    The compare picks y where it wins and x otherwise (x86's maxps / minps with y first),
    which is the answer except where y is a NaN (then y) or a zero that ties with x (then
    max clears the sign bit where y is +0, min sets it where y is -0). Those corrections
    depend on y alone, and y is most often a clip's bound, a scalar the kernel loads once
    at its top (`fusion`, `KernelBuilder.load_once`), so LLVM computes them there and each
    element costs three instructions (maxps, and, blend), where ordering the operands by
    x's sign first cost six and the bound was loaded again for every vector: MobileNetV2's
    ReLU6 took a third of its 3x3 depthwise convs' time. `hexir-run --profile`, one
    thread, before -> after: its depthwise convs 15-21% faster (the 56x56 one 604 -> 500
    us), its 1x1 convs with a ReLU6 6-10%, the model's kernels 20.0 -> 19.0 ms; two threads,
    `--benchmark=100`, three alternating runs: 11.4-12.0 -> 10.7-11.0 ms a call."""
    def formula(b: KernelBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        if not is_float(x):
            return (arith.maxsi if greater else arith.minsi)(x, y)
        bits = ir.IntegerType.get_signless(ir.FloatType(element_type(x.type)).width)
        if isinstance(x.type, ir.VectorType):
            bits = ir.VectorType.get(ir.VectorType(x.type).shape, bits)
        width = ir.IntegerType(element_type(bits)).width
        sign = -(1 << (width - 1))  # the sign bit alone, as a signed integer
        yi = arith.bitcast(bits, y)
        picked = arith.select(arith.cmpf(arith.CmpFPredicate.OGT if greater
                                         else arith.CmpFPredicate.OLT, y, x), y, x)
        zero = b.constant(0 if greater else sign, bits)  # the y whose tie must win: +0, -0
        tie = arith.cmpi(arith.CmpIPredicate.eq, yi, zero)
        if greater:  # clear the sign where y is +0
            mask = arith.select(tie, b.constant(~sign, bits), b.constant(-1, bits))
            fixed = arith.andi(arith.bitcast(bits, picked), mask)
        else:  # set it where y is -0
            mask = arith.select(tie, zero, b.constant(0, bits))
            fixed = arith.ori(arith.bitcast(bits, picked), mask)
        return arith.select(arith.cmpf(arith.CmpFPredicate.UNO, y, y), y,
                            arith.bitcast(x.type, fixed))
    return formula


def _relu(b: KernelBuilder, x: ir.Value) -> ir.Value:
    # max(x, 0) with NaN propagated, as numpy's maximum and ONNX's Relu give.
    return arith.maximumf(x, b.constant(0.0, x.type))


def _sigmoid(b: KernelBuilder, x: ir.Value) -> ir.Value:
    # e = exp(-|x|); x >= 0 ? 1 / (1 + e) : e / (1 + e) -- exp never overflows, and tiny
    # results for very negative x stay nonzero, as in the reference.
    zero, one = b.constant(0.0, x.type), b.constant(1.0, x.type)
    e = math.exp(arith.negf(math.absf(x)))
    denominator = arith.addf(one, e)
    positive = arith.cmpf(arith.CmpFPredicate.OGE, x, zero)
    return arith.select(positive, arith.divf(one, denominator), arith.divf(e, denominator))


def _gelu_erf(b: KernelBuilder, x: ir.Value) -> ir.Value:
    # x * 0.5 * (1 + erf(x / sqrt(2)))
    c = lambda v: b.constant(v, x.type)
    erf = math.erf(arith.divf(x, c(pymath.sqrt(2.0))))
    return arith.mulf(arith.mulf(x, c(0.5)), arith.addf(c(1.0), erf))


def _gelu_tanh(b: KernelBuilder, x: ir.Value) -> ir.Value:
    # 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
    c = lambda v: b.constant(v, x.type)
    cube = arith.mulf(arith.mulf(x, x), x)
    inner = arith.addf(x, arith.mulf(c(0.044715), cube))
    t = math.tanh(arith.mulf(c(pymath.sqrt(2.0 / pymath.pi)), inner))
    return arith.mulf(arith.mulf(c(0.5), x), arith.addf(c(1.0), t))


def _neg(b: KernelBuilder, x: ir.Value) -> ir.Value:
    return arith.negf(x) if is_float(x) else arith.subi(b.constant(0, x.type), x)


def _abs(b: KernelBuilder, x: ir.Value) -> ir.Value:
    return math.absf(x) if is_float(x) else math.absi(x)


def _div(b: KernelBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """x / y; on integers truncated toward zero (ONNX), x / 0 = 0 and MIN / -1 = MIN (the
    wrapped value) instead of the trap the hardware raises for both."""
    if is_float(x):
        return arith.divf(x, y)
    zero, one, minus_one = (b.constant(v, x.type) for v in (0, 1, -1))
    eq = arith.CmpIPredicate.eq
    by_zero, by_minus_one = arith.cmpi(eq, y, zero), arith.cmpi(eq, y, minus_one)
    safe = arith.select(arith.ori(by_zero, by_minus_one), one, y)
    quotient = arith.select(by_minus_one, arith.subi(zero, x), arith.divsi(x, safe))
    return arith.select(by_zero, zero, quotient)


def _safe_divisor(b: KernelBuilder, y: ir.Value) -> ir.Value:
    """y, with 0 and -1 replaced by 1: an integer remainder by either is 0 (numpy's x % 0 is
    0), and the hardware traps on x % 0 and MIN % -1."""
    one = b.constant(1, y.type)
    eq = arith.CmpIPredicate.eq
    trap = arith.ori(arith.cmpi(eq, y, b.constant(0, y.type)),
                     arith.cmpi(eq, y, b.constant(-1, y.type)))
    return arith.select(trap, one, y)


def _fmod(b: KernelBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """C's fmod: x - trunc(x / y) y, the sign of the dividend (numpy's fmod)."""
    return arith.remf(x, y) if is_float(x) else arith.remsi(x, _safe_divisor(b, y))


def _mod(b: KernelBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """Python's x % y on integers, the sign of the divisor: the truncated remainder, plus y
    where it is nonzero and its sign differs from y's (numpy's mod)."""
    r = _fmod(b, x, y)
    zero = b.constant(0, x.type)
    slt = arith.CmpIPredicate.slt
    differ = arith.xori(arith.cmpi(slt, r, zero), arith.cmpi(slt, y, zero))
    adjust = arith.andi(differ, arith.cmpi(arith.CmpIPredicate.ne, r, zero))
    return arith.select(adjust, arith.addi(r, y), r)


def _sign(b: KernelBuilder, x: ir.Value) -> ir.Value:
    """1, -1 or 0 as x is positive, negative or zero; NaN stays NaN (numpy's sign). A float
    zero is x + 0.0, which is +0.0 for -0.0 too, as numpy gives."""
    one, minus_one, zero = (b.constant(float(v) if is_float(x) else v, x.type)
                            for v in (1, -1, 0))
    if is_float(x):
        positive = arith.cmpf(arith.CmpFPredicate.OGT, x, zero)
        negative = arith.cmpf(arith.CmpFPredicate.OLT, x, zero)
        rest = arith.addf(x, zero)
    else:
        positive = arith.cmpi(arith.CmpIPredicate.sgt, x, zero)
        negative = arith.cmpi(arith.CmpIPredicate.slt, x, zero)
        rest = zero
    return arith.select(positive, one, arith.select(negative, minus_one, rest))


def _softplus(b: KernelBuilder, x: ir.Value) -> ir.Value:
    """log(1 + e^x) = max(x, 0) + log1p(e) for e = e^-|x|, so exp never overflows. log1p(e)
    is log(u) e / (u - 1) for u = 1 + e rounded (Goldberg's), or e where u rounds to 1: exact
    for the tiny results of very negative x, where log(1 + e) would be 0 (and the math
    dialect's log1p is that on the cpu)."""
    zero, one = b.constant(0.0, x.type), b.constant(1.0, x.type)
    e = math.exp(arith.negf(math.absf(x)))
    u = arith.addf(one, e)
    scaled = arith.mulf(math.log(u), arith.divf(e, arith.subf(u, one)))
    log1p = arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, u, one), e, scaled)
    return arith.addf(arith.maximumf(x, zero), log1p)


def _mish(b: KernelBuilder, x: ir.Value) -> ir.Value:
    """x tanh(softplus(x)), which is x n (n + 2) / (n (n + 2) + 2) for n = e^x; for x >= 0 the
    same divided through by n^2, in e = e^-x: x (1 + 2e) / (1 + 2e + 2e^2). exp's argument is
    -|x|, so it never overflows (as in `_sigmoid`), and no difference cancels."""
    c = lambda v: b.constant(v, x.type)
    e = math.exp(arith.negf(math.absf(x)))
    p = arith.addf(c(1.0), arith.mulf(c(2.0), e))
    above = arith.divf(p, arith.addf(p, arith.mulf(c(2.0), arith.mulf(e, e))))
    q = arith.mulf(e, arith.addf(e, c(2.0)))
    below = arith.divf(q, arith.addf(q, c(2.0)))
    positive = arith.cmpf(arith.CmpFPredicate.OGE, x, c(0.0))
    return arith.mulf(x, arith.select(positive, above, below))


def _math(name: str) -> Scalar:
    """The math dialect's op `name` of x (libm or libdevice's function of that name)."""
    op = getattr(math, name)
    return lambda b, x: op(x)


def _compare(on_float: arith.CmpFPredicate, on_int: arith.CmpIPredicate) -> Scalar:
    """x <op> y as an i1: ordered on floats (NaN compares false), signed on integers."""
    return _typed(lambda x, y: arith.cmpf(on_float, x, y), lambda x, y: arith.cmpi(on_int, x, y))


def _elu(b: KernelBuilder, x: ir.Value, alpha: ir.Value) -> ir.Value:
    # x < 0 ? alpha * (exp(x) - 1) : x, as ONNX's Elu (and its reference) computes it
    negative = arith.cmpf(arith.CmpFPredicate.OLT, x, b.constant(0.0, x.type))
    return arith.select(negative, arith.mulf(alpha, arith.subf(math.exp(x),
                                                               b.constant(1.0, x.type))), x)


def _prelu(b: KernelBuilder, x: ir.Value, slope: ir.Value) -> ir.Value:
    negative = arith.cmpf(arith.CmpFPredicate.OLT, x, b.constant(0.0, x.type))
    return arith.select(negative, arith.mulf(slope, x), x)


def _thresholded_relu(b: KernelBuilder, x: ir.Value, alpha: ir.Value) -> ir.Value:
    return arith.select(arith.cmpf(arith.CmpFPredicate.OGT, x, alpha), x,
                        b.constant(0.0, x.type))


#: The scalar formula of each plain element-wise op (`ops.UNARY` and `ops.BINARY` give its
#: types): `formula(builder, *operands)` on scalars of the operands' one type.
FORMULAS: dict[str, Scalar] = {
    "relu": _relu,
    "sigmoid": _sigmoid,
    "tanh": lambda b, x: math.tanh(x),
    "exp": lambda b, x: math.exp(x),
    "log": lambda b, x: math.log(x),
    "sqrt": lambda b, x: math.sqrt(x),
    "erf": lambda b, x: math.erf(x),
    "neg": _neg,
    "abs": _abs,
    "sign": _sign,
    "round": _math("roundeven"),  # halves to even, as numpy
    "softplus": _softplus,
    "mish": _mish,
    # bitwise on integers, logical on bools (true is the i1 of all ones)
    "not": lambda b, x: arith.xori(x, b.constant(-1, x.type)),
    **{name: _math(name) for name in (
        "floor", "ceil", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
        "acosh", "atanh")},
    "add": _typed(arith.addf, arith.addi),
    "sub": _typed(arith.subf, arith.subi),
    "mul": _typed(arith.mulf, arith.muli),
    "div": _div,
    # NaN propagates through max and min, as numpy's maximum/minimum and ONNX's Max/Min.
    "max": _extremum(True),
    "min": _extremum(False),
    "pow": lambda b, x, y: math.powf(x, y),
    "mod": _mod,
    "fmod": _fmod,
    "and": lambda b, x, y: arith.andi(x, y),
    "or": lambda b, x, y: arith.ori(x, y),
    "xor": lambda b, x, y: arith.xori(x, y),
    "equal": _compare(arith.CmpFPredicate.OEQ, arith.CmpIPredicate.eq),
    "less": _compare(arith.CmpFPredicate.OLT, arith.CmpIPredicate.slt),
    "greater": _compare(arith.CmpFPredicate.OGT, arith.CmpIPredicate.sgt),
    # activations whose parameter is the second operand (a scalar, or PRelu's slope)
    "elu": _elu,
    "prelu": _prelu,
    "thresholded_relu": _thresholded_relu,
}


def plan_map(op: GraphOp) -> Kernel:
    """Any element-wise op: its `formula` over the output's space, each operand broadcast to
    it. The kind is the op's own where the format names it, else `map`; gelu's param is its
    form."""
    _expect_map_output(op)
    params = (GELU_APPROXIMATIONS[_approximation(op)],) if op.mnemonic == "gelu" else ()
    return Kernel(_kind(op.mnemonic), lambda b: _map(b, op, formula(op)), params)


def _expect_map_output(op: GraphOp) -> None:
    """Fail unless the result has the operands' broadcast shape; expand's, any shape its
    input broadcasts to; where's, that of x and y (an importer expands them to it)."""
    if op.mnemonic == "expand":
        (shape,) = op.inputs
        if signatures.broadcast(shape, op.output) != op.output:
            raise CompileError(f"hexir.expand: {signatures.fmt(shape)} does not broadcast to "
                               f"{signatures.fmt(op.output)}")
        return
    op.expect_output(functools.reduce(signatures.broadcast, op.inputs))
    if op.mnemonic == "where" and not op.inputs[1] == op.inputs[2] == op.output:
        raise CompileError("hexir.where: x and y must have the result's shape (expand them)")


def convert(b: KernelBuilder, x: ir.Value, to: ir.Type) -> ir.Value:
    """`x` as a scalar of type `to`, as numpy's astype: floats to integers truncate toward
    zero, anything to bool is `!= 0` (NaN is true), bool to a number is 0 or 1."""
    source = x.type
    if source == to:
        return x
    if isinstance(to, ir.IntegerType) and ir.IntegerType(to).width == 1:
        if is_float(x):
            return arith.cmpf(arith.CmpFPredicate.UNE, x, b.constant(0.0, source))
        return arith.cmpi(arith.CmpIPredicate.ne, x, b.constant(0, source))
    boolean = isinstance(source, ir.IntegerType) and ir.IntegerType(source).width == 1
    if isinstance(to, ir.FloatType):
        if is_float(x):
            wider = ir.FloatType(to).width > ir.FloatType(source).width
            return arith.extf(to, x) if wider else arith.truncf(to, x)
        return arith.uitofp(to, x) if boolean else arith.sitofp(to, x)
    if is_float(x):
        return arith.fptosi(to, x)
    if boolean:
        return arith.extui(to, x)
    wider = ir.IntegerType(to).width > ir.IntegerType(source).width
    return arith.extsi(to, x) if wider else arith.trunci(to, x)


def _kind(mnemonic: str) -> str:
    """The format's kernel kind: the op's own where the format names it, else `map` (any
    element-wise op: the runtime needs its code, not its name)."""
    return mnemonic if mnemonic.upper() in KernelKind.__members__ else str(KernelKind.MAP)


def _approximation(op: GraphOp) -> str:
    approximate = op.string_attr("approximate", "none")
    if approximate not in GELU_APPROXIMATIONS:
        raise CompileError(
            f'hexir.gelu: approximate must be "none" or "tanh", found "{approximate}"'
        )
    return approximate


def formula(op: GraphOp) -> Scalar:
    """The scalar computation of the element-wise `op` (a fused kernel's one step)."""
    name = op.mnemonic
    if name in FORMULAS:
        return FORMULAS[name]
    if name == "where":
        return lambda b, c, x, y: arith.select(c, x, y)
    if name == "expand":
        return lambda b, x: x
    if name == "cast":
        to = ir.Type.parse(op.elements[-1])
        return lambda b, x: convert(b, x, to)
    if name == "gelu":
        return _gelu_tanh if _approximation(op) == "tanh" else _gelu_erf
    raise CompileError(f"hexir.{name} is not element-wise")


def plan_transpose(op: GraphOp) -> Kernel:
    (shape,) = op.inputs
    perm = op.ints_attr("permutation")
    op.expect_output(signatures.transpose(shape, perm))

    def emit(b: KernelBuilder) -> None:
        x, out = b.args
        if transposes_by_tiles(b, shape, perm):
            with b.building():
                tiled_transpose(b, shape, perm, lambda at: b.load(x, at),
                                lambda value, at: b.store(value, out, at))
            return
        tile = transpose_tile(b, shape, perm)
        if tile is not None:
            with b.building():
                register_transpose(b, shape, perm, x, out, tile)
            return
        with b.building(), parallel(b, op.output) as coords:
            source = [coords[perm.index(axis)] for axis in range(len(shape))]
            b.store(b.load(x, source), out, coords)

    return Kernel("transpose", emit, tuple(perm))


def plan_reshape(op: GraphOp) -> Kernel:
    (shape,) = op.inputs
    signatures.reshape(shape, op.output)

    def emit(b: KernelBuilder) -> None:
        x, out = b.args
        with b.building(), parallel(b, op.output) as coords:
            source = b.delinearize(b.linearize(coords, op.output), shape)
            b.store(b.load(x, source), out, coords)

    return Kernel("reshape", emit)


def _map(b: KernelBuilder, op: GraphOp, scalar: Scalar) -> None:
    *inputs, out = b.args
    with b.building(), lanes(b, op.output) as owned:
        results = [scalar(b, *(b.load(buffer, broadcast_indices(b, coords, shape, op.output))
                               for buffer, shape in zip(inputs, op.inputs, strict=True)))
                   for coords in owned]
        for coords, value in zip(owned, results, strict=True):
            b.store(value, out, coords)
