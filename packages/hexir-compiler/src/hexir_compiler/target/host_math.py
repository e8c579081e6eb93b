"""f32 exp, erf and tanh in cpu kernels as arithmetic, so that LLVM can vectorize their loops.

libm's `expf`, `erff` and `tanhf` are calls: a loop that makes one per element stays scalar,
and a softmax or a GELU spends most of its time in them (the example transformer block's GELU
kernel was 76 of its 155 us). hexir-kernels-to-llvm therefore rewrites each f32 `math.exp`,
`math.erf` and `math.tanh` of a cpu kernel into the formulas below before the math dialect
meets LLVM; f64 keeps libm (its results must match numpy's to 1e-12), and cuda keeps
libdevice, whose functions are inlined code already. The formulas take a vector of f32 as
they take a scalar (constants splat to its shape, the exponent bits a vector of i32): a
conv's fused epilogue on vectors (SiLU's sigmoid) is vector arithmetic, where the math
dialect would make a vector's exp a libm call per lane.

- exp: x clamped to [-104, 89] (beyond, f32's exp is 0 or inf, and the clamped value gives
  it); n = x log2(e) rounded to even (by adding and subtracting 1.5 * 2^23), r = x - n ln2
  in two parts (Cody and Waite: n ln2_hi is exact), e^r by its Taylor polynomial of degree 7
  (|r| <= ln2 / 2: truncation 6e-9) as 1 + r (1 + r q(r)), q's six terms by Estrin's
  scheme (`_estrin`), scaled by 2^n as two powers of two built from their exponent bits
  (2^n alone can leave the normal range where the result does not, as for subnormal
  results). The clamp is two compares and selects that keep a NaN x (maxps and minps with
  x second), so a NaN runs through the arithmetic to a NaN result, and n and r
  are multiply-adds. Before, a NaN x was selected back at the end (a compare and a blend),
  n and r were separate multiplies and adds, and the whole polynomial was Horner's chain of
  7 multiply-adds, in loops short of registers (SiLU's, unrolled twice, spilled to the
  stack). `hexir-run --profile`, one thread, x86-64-v3 on an AMD EPYC, a 1 x 96 x 112 x 112
  tensor, before -> after, two rounds each: SiLU 2443-2468 -> 2104-2124 us, erf's GELU
  4995-5031 -> 4655-4685, tanh 3420-3438 -> 3020-3050; EfficientNet's 16 -> 96 1x1 conv at
  112 x 112 with its SiLU, three rounds, 3798-3913 -> 3459-3617. The largest error over
  [-20, 20] is unchanged (exp 7.5e-8 relative, sigmoid 1.8e-7). An exp of -|y| (a
  sigmoid's, `_at_most_zero`) is at most 1: it has no upper clamp, and it scales by
  2^(n + 64), normal for every n in [-150, 0], then by 2^-64, which rounds a subnormal
  result once (4 instructions where the two powers of two take 8): SiLU 2089-2109 ->
  1973-2013 us, the conv with it 3508-3519 -> 3311-3345, three rounds each. The 2^-64 is
  now in the polynomial's coefficients (it scales each of its values exactly), so one
  multiply ends the chain, and n's integer is read from the bits of the rounding sum
  rather than converted from n: results bit for bit the same (EfficientNet-B0's logits),
  its SiLU convs 1-4% faster (interleaved profiles, two threads, x86-64-v3, the model's
  call 24481 -> 24066 us and, in the other order, 22437 -> 22108).
- erf: |x| < 1: x P(x^2); 1 from 3.92 on (where erf rounds to 1 in f32, and L alone gave
  1 - 2^-24); between, L(|x| - 2.46), a polynomial of degree 12 on [1, 3.92]
  (`_ERF_LARGE`); the sign copied from x. It was 1 - exp(-x^2) R(1 / |x|) there: an exp, a
  division and 11 terms besides P's 8 for every element (a vector computes both sides),
  and erf's GELU took twice SiLU's time. `hexir-run --profile`, one thread, a 1 x 96 x 112
  x 112 tensor, three rounds: GELU 4639-4718 -> 2986-3009 us. Largest error unchanged
  (1.65e-7 relative, from P), the mean over [-20, 20] 5.6e-9 -> 7.7e-9.
- tanh: |x| < 0.55: x + x^3 T(x^2); else (1 - e) / (1 + e) with e = exp(-2 |x|), an exp
  of a value at most 0 (the short form above), the sign copied from x. Past 9.0109, where
  1 - tanh(x) < 2^-25 and tanh rounds to 1 in f32, e < 2^-26, and 1 - e and 1 + e both
  round to 1: exactly 1 with no clamp. It was 1 - 2 / (exp(2 |x|) + 1), |x| clamped to
  9.1, an exp with both clamps and both powers of two: `hexir-run --profile`, one thread, a
  1 x 96 x 112 x 112 tensor, three rounds, 3653-3721 -> 3507-3562 us; largest error over
  [-20, 20] 1.62e-7 -> 1.50e-7 relative, the mean 8.2e-9 -> 1.5e-8 (1 - e rounds where
  1 - 2e / (1 + e) rounded a smaller term: 1.71e-7 and 8.2e-9, one instruction more).
  A rational x P(x^2) / Q(x^2) (degrees 6 and 3, fitted here to 6.8e-9 on [0, 9.02]) would
  take a third of the instructions, but evaluated in f32 (a numpy model of each rounding)
  it is off by 3.0e-7 with FMAs and 3.7e-7 without (x86-64-v2), twice this form's error.

Each polynomial step is a multiply and an add marked `contract`: one FMA on a CPU level that
has it (x86-64-v3 and up), so an image's last bits depend on the level it was compiled for.
NaN propagates through each. P, L and T are least-squares fits on Chebyshev nodes against
mpmath (L's reweighted towards the least largest error), rounded to f32; evaluated in f32
their largest errors over their ranges are 1.8e-7 relative (P), 1.4e-7 relative (L) and
6.2e-8 relative (T), and `tests/test_host_math.py` measures the rewritten kernels against
numpy in f64.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Iterator, Sequence

from hexir_compiler.mlir import arith, defining_op, ir, math

_TAYLOR = tuple(1 / pymath.factorial(k) for k in range(8))
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4  # ln2_hi has 9 bits: n * ln2_hi is exact
_ERF_SMALL = (1.128379225730896, -0.37612637877464294, 0.11283782869577408,
              -0.026865437626838684, 0.005221053492277861, -0.0008484396385028958,
              0.00011268253729213029, -9.673591193859465e-06)
_ERF_LARGE = (0.9994966983795166, 0.0026561934500932693, -0.006535763386636972,
              0.009832995012402534, -0.009904826991260052, 0.0067976550199091434,
              -0.002963509177789092, 0.00046216652845032513, 0.000391131266951561,
              -0.00030167537624947727, 5.166672053746879e-05, 2.5420496967853978e-05,
              -9.124727512244135e-06)
_ERF_ONE = 3.92  # erfc(3.91921) = 2^-25: from there on, erf(x) rounds to 1 in f32
_TANH_SMALL = (-0.3333333432674408, 0.1333332508802414, -0.053964752703905106,
               0.02181890793144703, -0.008528041653335094, 0.0025286313612014055)


def _like(x: ir.Value, element: ir.Type) -> ir.Type:
    """`element`, or a vector of it with `x`'s shape when `x` is a vector."""
    if isinstance(x.type, ir.VectorType):
        return ir.VectorType.get(ir.VectorType(x.type).shape, element)
    return element


def _c(like: ir.Value, value: float | int, element: ir.Type | None = None) -> ir.Value:
    """`value` as a constant of `like`'s type (each lane of a vector), or of `element` (an
    i32 for the exponent bits) shaped as `like`."""
    type_ = _like(like, element or ir.F32Type.get())
    scalar = ir.VectorType(type_).element_type if isinstance(type_, ir.VectorType) else type_
    attribute = ir.FloatAttr.get(scalar, value) if isinstance(scalar, ir.FloatType) else \
        ir.IntegerAttr.get(scalar, int(value))
    if isinstance(type_, ir.VectorType):
        attribute = ir.DenseElementsAttr.get_splat(type_, attribute)
    return arith.constant(type_, attribute)


def _contract() -> ir.Attribute:
    """The fastmath flag that lets LLVM fuse a multiply and the add of its product (one FMA
    where the level has it)."""
    return ir.Attribute.parse("#arith.fastmath<contract>")


def _multiply_add(x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
    """x y + z, fusable (`_contract`)."""
    return arith.addf(arith.mulf(x, y, fastmath=_contract()), z, fastmath=_contract())


def _horner(coefficients: Sequence[float], x: ir.Value) -> ir.Value:
    """The polynomial at x, each step a multiply-add."""
    total = _c(x, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        total = _multiply_add(total, x, _c(x, c))
    return total


def _estrin(coefficients: Sequence[float], x: ir.Value) -> ir.Value:
    """The polynomial at x by Estrin's scheme: neighbouring coefficients paired into
    c_i + c_{i+1} x, the pairs paired with x^2, those with x^4, ..., each a multiply-add.
    Its chain is about log2 of the degree long, where Horner's rule is one multiply-add
    after another (4 cycles each), so a loop of exps waits less on it. Its sum rounds each
    part apart: exp takes it for the terms of r^2 and up only (all of Taylor's polynomial
    this way was off by 1.67e-7 relative at worst, against 7.5e-8)."""
    terms = [_c(x, c) for c in coefficients]
    power = x
    while len(terms) > 1:
        terms = [_multiply_add(terms[i + 1], power, terms[i])
                 for i in range(0, len(terms) - 1, 2)] + terms[len(terms) - len(terms) % 2:]
        power = arith.mulf(power, power) if len(terms) > 1 else power
    return terms[0]


def _less(x: ir.Value, bound: float) -> ir.Value:
    return arith.cmpf(arith.CmpFPredicate.OLT, x, _c(x, bound))


def _defined_by(value: ir.Value, name: str) -> ir.Operation | None:
    """The op that defines `value` when it is a `name`, else None."""
    op = defining_op(value)
    return op if op is not None and op.name == name else None


def _at_most_zero(x: ir.Value) -> bool:
    """Whether `x` is -|y| (a sigmoid's exp operand, `elementwise._sigmoid`): never above 0."""
    negated = _defined_by(x, "arith.negf")
    return negated is not None and _defined_by(negated.operands[0], "math.absf") is not None


def exp(x: ir.Value, at_most_zero: bool = False) -> ir.Value:
    """e^x; `at_most_zero` when x is known never to be above 0 (no upper clamp, one scale)."""
    # clamped by compares that keep a NaN x (x86's maxps / minps, x second): it then runs
    # through the arithmetic below to a NaN result, with no select at the end
    low = _c(x, -104.0)
    clamped = arith.select(arith.cmpf(arith.CmpFPredicate.OLT, x, low), low, x)
    if not at_most_zero:
        high = _c(x, 89.0)
        clamped = arith.select(arith.cmpf(arith.CmpFPredicate.OGT, clamped, high), high,
                               clamped)
    # rounded to even by adding and taking away 1.5 * 2^23 (|x log2 e| < 2^22): plain
    # arithmetic on every level, where roundeven is a libm call below x86-64-v2
    shift = _c(x, 1.5 * 2**23)
    shifted = _multiply_add(clamped, _c(x, 1 / pymath.log(2)), shift)
    n = arith.subf(shifted, shift)
    r = _multiply_add(n, _c(x, -_LN2_HI), clamped)
    r = _multiply_add(n, _c(x, -_LN2_LO), r)
    # n as an integer: the low bits of 1.5 * 2^23 + n's encoding (its ulp is 1), that
    # encoding less 1.5 * 2^23's -- integer arithmetic beside the float chain, where a
    # conversion of n waited on the subtraction
    i32 = ir.IntegerType.get_signless(32)
    whole = arith.subi(arith.bitcast(_like(x, i32), shifted), _c(x, 0x4B400000, i32))

    def power_of_two(k: ir.Value) -> ir.Value:  # 2^k for k in [-126, 127]
        bits = arith.shli(arith.addi(k, _c(x, 127, i32)), _c(x, 23, i32))
        return arith.bitcast(x.type, bits)

    # n in [-150, 0] (at_most_zero): the polynomial's coefficients scaled by 2^-64, which
    # scales each of its values exactly (they stay normal), and the result by 2^(n + 64),
    # normal too: one rounding, into the subnormals where e^x lies there, and one multiply
    # after the polynomial, where scaling it by 2^-64 after 2^(n + 64) was a second one
    # at the end of the chain
    scale = 2.0**-64 if at_most_zero else 1.0
    taylor = _estrin([c * scale for c in _TAYLOR[2:]], r)  # 1 + r (1 + r q(r))
    for c in _TAYLOR[1::-1]:
        taylor = _multiply_add(taylor, r, _c(x, c * scale))
    if at_most_zero:
        return arith.mulf(taylor, power_of_two(arith.addi(whole, _c(x, 64, i32))))
    half = arith.shrsi(whole, _c(x, 1, i32))
    return arith.mulf(arith.mulf(taylor, power_of_two(half)),
                      power_of_two(arith.subi(whole, half)))


def erf(x: ir.Value) -> ir.Value:
    size = math.absf(x)
    small = arith.mulf(size, _horner(_ERF_SMALL, arith.mulf(x, x)))
    # 1 from _ERF_ONE on; a NaN fails the compare and runs through L to a NaN
    one = arith.cmpf(arith.CmpFPredicate.OGE, size, _c(x, _ERF_ONE))
    near_one = arith.select(one, _c(x, 1.0),
                            _horner(_ERF_LARGE, arith.subf(size, _c(x, 2.46))))
    return math.copysign(arith.select(_less(size, 1.0), small, near_one), x)


def tanh(x: ir.Value) -> ir.Value:
    size = math.absf(x)
    square = arith.mulf(x, x)
    small = arith.addf(x, arith.mulf(arith.mulf(x, square), _horner(_TANH_SMALL, square)))
    e = exp(arith.mulf(size, _c(x, -2.0)), at_most_zero=True)  # e^(-2|x|), at most 1
    one = _c(x, 1.0)
    large = arith.divf(arith.subf(one, e), arith.addf(one, e))
    return arith.select(_less(size, 0.55), small, math.copysign(large, x))


FORMULAS: dict[str, Callable[[ir.Value], ir.Value]] = {
    "math.exp": lambda x: exp(x, _at_most_zero(x)), "math.erf": erf, "math.tanh": tanh}


def element_type(type_: ir.Type) -> ir.Type:
    """A vector type's element type; any other type itself."""
    return ir.VectorType(type_).element_type if isinstance(type_, ir.VectorType) else type_


def _ops(op: ir.Operation) -> Iterator[ir.Operation]:
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from _ops(child.operation)


def rewrite(kernel: ir.Operation) -> None:
    """Replace every f32 exp, erf and tanh in `kernel` (a cpu kernel's func), of a scalar or
    of a vector of f32, by its formula."""
    found = [op for op in _ops(kernel) if op.name in FORMULAS
             and isinstance(element_type(op.results[0].type), ir.F32Type)]
    for op in found:
        with ir.InsertionPoint(op), op.location:
            value = FORMULAS[op.name](op.operands[0])
        op.results[0].replace_all_uses_with(value)
        op.erase()
