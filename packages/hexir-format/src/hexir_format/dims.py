"""Symbolic dimensions: the integer expressions a dynamic module's sizes are made of.

A dimension is an `int` when it is static and an `Expr` over named symbols when it is not
(`batch`, `seq`, `past + seq`, `2 * seq`, `batch * heads`, `(seq + 63) // 64`). The compiler
builds them during shape inference, the writer stores them as programs (`encode`), and the
runtime evaluates them for the sizes of a call (`Expr.value`); the validator bounds them
(`Expr.bounds`) for the symbols' declared ranges before anything is allocated. One algebra
for all three, so that what the compiler proved equal is equal on disk and at run time.

Sums and products are kept as a polynomial in canonical form -- a constant plus integer
multiples of monomials, a monomial a sorted product of atoms -- so equal expressions built
in different orders compare and hash equal (`seq + past == past + seq`, `2 * (a + 1) ==
2 * a + 2`) and what is known folds (`(s + 1) - s == 1`). Floor and ceiling division,
remainder, minimum and maximum are atoms over their canonical operands, folded when their
operands are constants or the division is exact (`(4 * s) // 2 == 2 * s`). Every operation
takes `int`s too and returns an `int` when its result is constant.

On disk an expression is a postfix program of 64-bit words (`encode`, `decode`): an opcode,
followed by an immediate for CONST (the value) and SYM (the symbol's index in the module's
symbol table). A program is untrusted: `decode` refuses unknown opcodes, symbols out of
range, a stack that underflows or ends with other than one value, and programs longer than
`MAX_WORDS`.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Union

from hexir_format.errors import HexirError

#: The longest program `decode` reads: a dimension is a handful of symbols and constants.
MAX_WORDS = 256
#: The range every value, intermediate or not, must stay within (a signed 64-bit word).
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


class DimError(HexirError):
    """An expression that cannot be evaluated, bounded or decoded; the message says why."""


class Opcode(enum.IntEnum):
    CONST = 0  # followed by the value
    SYM = 1  # followed by the symbol's index
    ADD = 2
    SUB = 3
    MUL = 4
    FLOORDIV = 5
    CEILDIV = 6
    MOD = 7
    MIN = 8
    MAX = 9


#: The atoms that are operations, by the opcode that computes them.
_OPS = (Opcode.FLOORDIV, Opcode.CEILDIV, Opcode.MOD, Opcode.MIN, Opcode.MAX)
_SPELLING = {Opcode.FLOORDIV: "//", Opcode.MOD: "%"}

Dim = Union[int, "Expr"]


@dataclasses.dataclass(frozen=True, order=True)
class Atom:
    """A factor of a monomial: a symbol (`op` -1, `name` set) or an operation on two
    dims (`operands`; `args` their canonical keys, which order and compare atoms)."""

    op: int  # -1 for a symbol, else an Opcode in _OPS (an int: atoms sort by it)
    name: str = ""
    args: tuple[tuple, ...] = ()  # each operand's `Expr._key()`, for ordering and equality
    operands: tuple[Dim, ...] = dataclasses.field(default=(), compare=False)

    def __str__(self) -> str:
        if self.op < 0:
            return self.name
        a, b = (_text(x, nested=True) for x in self.operands)
        if self.op in _SPELLING:
            return f"{a} {_SPELLING[Opcode(self.op)]} {b}"
        return f"{Opcode(self.op).name.lower()}({_text(self.operands[0])}, " \
               f"{_text(self.operands[1])})"


def _key(d: Dim) -> tuple:
    return (0, d) if isinstance(d, int) else (1, d._key())


def _text(d: Dim, nested: bool = False) -> str:
    if isinstance(d, int):
        return f"({d})" if nested and d < 0 else str(d)
    (monomial, c), *rest = d.terms
    compound = bool(rest or d.const or c != 1 or len(monomial) > 1)
    return f"({d})" if nested and compound else str(d)


@dataclasses.dataclass(frozen=True)
class Expr:
    """const + sum(coefficient * product(monomial's atoms)), in canonical form: monomials
    sorted, none repeated, no zero coefficient, at least one term (a constant is an int)."""

    const: int
    terms: tuple[tuple[tuple[Atom, ...], int], ...]

    def _key(self) -> tuple:
        return (self.const, self.terms)

    # construction ---------------------------------------------------------------------

    @staticmethod
    def symbol(name: str) -> Expr:
        if not name:
            raise DimError("a symbol needs a name")
        return Expr(0, (((Atom(-1, name),), 1),))

    @staticmethod
    def _make(const: int, terms: Mapping[tuple[Atom, ...], int]) -> Dim:
        kept = tuple(sorted((m, c) for m, c in terms.items() if c))
        return Expr(const, kept) if kept else const

    # arithmetic -------------------------------------------------------------------------

    def __add__(self, other: Dim) -> Dim:
        return add(self, other)

    __radd__ = __add__

    def __sub__(self, other: Dim) -> Dim:
        return add(self, mul(other, -1))

    def __rsub__(self, other: Dim) -> Dim:
        return add(other, mul(self, -1))

    def __mul__(self, other: Dim) -> Dim:
        return mul(self, other)

    __rmul__ = __mul__

    def __neg__(self) -> Dim:
        return mul(self, -1)

    def __floordiv__(self, other: Dim) -> Dim:
        return floordiv(self, other)

    def __rfloordiv__(self, other: Dim) -> Dim:
        return floordiv(other, self)

    def __mod__(self, other: Dim) -> Dim:
        return mod(self, other)

    def __rmod__(self, other: Dim) -> Dim:
        return mod(other, self)

    # reading ----------------------------------------------------------------------------

    def symbols(self) -> frozenset[str]:
        """The names this expression reads."""
        return frozenset(a.name for a in _atoms(self) if a.op < 0)

    def value(self, env: Mapping[str, int]) -> int:
        """The expression for the symbols' values in `env`; every intermediate value must
        fit a signed 64-bit word, and a divisor must not be zero."""
        return evaluate(self, env)

    def bounds(self, ranges: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
        """The least and greatest value over every assignment of the symbols within their
        inclusive `ranges` (a sound interval: it may be wider than the exact one)."""
        return bound(self, ranges)

    def __str__(self) -> str:
        parts: list[tuple[bool, str]] = []  # (negative, the term's magnitude as text)
        for monomial, c in self.terms:
            alone = len(monomial) == 1 and c == 1
            factors = " * ".join(f"({a})" if a.op in _SPELLING and not alone else str(a)
                                 for a in monomial)
            parts.append((c < 0, factors if abs(c) == 1 else f"{abs(c)} * {factors}"))
        if self.const:
            parts.append((self.const < 0, str(abs(self.const))))
        negative, text = parts[0]
        text = f"-{text}" if negative else text
        for negative, term in parts[1:]:
            text += f" {'-' if negative else '+'} {term}"
        return text

    def __repr__(self) -> str:
        """The expression itself: a shape in a message (`[batch, 4, seq]`, a list's repr)
        reads as the sizes it says."""
        return str(self)


def _atoms(d: Dim) -> Iterable[Atom]:
    if isinstance(d, int):
        return
    for monomial, _ in d.terms:
        for a in monomial:
            yield a
            for x in a.operands:
                yield from _atoms(x)


def _poly(d: Dim) -> tuple[int, dict[tuple[Atom, ...], int]]:
    if isinstance(d, int):
        return d, {}
    return d.const, dict(d.terms)


def _check(d: object, what: str) -> Dim:
    if isinstance(d, bool) or not isinstance(d, int | Expr):
        raise DimError(f"{what}: expected an int or a dimension expression, got "
                       f"{type(d).__name__}")
    return d


def add(a: Dim, b: Dim) -> Dim:
    _check(a, "add"), _check(b, "add")
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    ca, ta = _poly(a)
    cb, tb = _poly(b)
    for m, c in tb.items():
        ta[m] = ta.get(m, 0) + c
    return Expr._make(ca + cb, ta)


def mul(a: Dim, b: Dim) -> Dim:
    _check(a, "mul"), _check(b, "mul")
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    ca, ta = _poly(a)
    cb, tb = _poly(b)
    out: dict[tuple[Atom, ...], int] = {}
    for m, c in ta.items():
        out[m] = out.get(m, 0) + c * cb
    for m, c in tb.items():
        out[m] = out.get(m, 0) + c * ca
    for ma, x in ta.items():
        for mb, y in tb.items():
            m = tuple(sorted(ma + mb))
            out[m] = out.get(m, 0) + x * y
    return Expr._make(ca * cb, out)


def _divide_exactly(a: Dim, k: int) -> Dim | None:
    """a / k when every coefficient and the constant are multiples of k, else None."""
    const, terms = _poly(a)
    if const % k or any(c % k for c in terms.values()):
        return None
    return Expr._make(const // k, {m: c // k for m, c in terms.items()})


def divide_exactly(a: Dim, b: Dim) -> Dim | None:
    """a / b when b is a single term (`64`, `batch`, `4 * seq`) that divides every term of
    a (`batch * seq * 64 / (batch * 64) == seq`); None otherwise (b zero, a sum, or any term
    of a not a multiple of it)."""
    if isinstance(b, int):
        if b == 0:
            return None
        return a // b if isinstance(a, int) else (_divide_exactly(a, b) if b > 0 else
                                                  _divide_exactly(mul(a, -1), -b))
    if b.const or len(b.terms) != 1:
        return None
    (divisor, k), = b.terms
    const, terms = _poly(a)
    if const:
        return None
    out: dict[tuple[Atom, ...], int] = {}
    for monomial, c in terms.items():
        rest = list(monomial)
        for atom in divisor:
            if atom not in rest:
                return None
            rest.remove(atom)
        if c % k:
            return None
        out[tuple(rest)] = c // k
    if () in out:  # a term that was exactly the divisor: a constant of the quotient
        return Expr._make(out.pop(()), out)
    return Expr._make(0, out)


def _op(opcode: Opcode, a: Dim, b: Dim) -> Expr:
    return Expr(0, (((Atom(int(opcode), args=(_key(a), _key(b)), operands=(a, b)),), 1),))


def floordiv(a: Dim, b: Dim) -> Dim:
    _check(a, "floordiv"), _check(b, "floordiv")
    if isinstance(b, int):
        if b == 0:
            raise DimError("division by zero")
        if isinstance(a, int):
            return a // b
        if b == 1:
            return a
        exact = _divide_exactly(a, b) if b > 0 else None
        if exact is not None:
            return exact
    return _op(Opcode.FLOORDIV, a, b)


def ceildiv(a: Dim, b: Dim) -> Dim:
    _check(a, "ceildiv"), _check(b, "ceildiv")
    if isinstance(b, int):
        if b == 0:
            raise DimError("division by zero")
        if isinstance(a, int):
            return -(-a // b)
        if b == 1:
            return a
        exact = _divide_exactly(a, b) if b > 0 else None
        if exact is not None:
            return exact
    return _op(Opcode.CEILDIV, a, b)


def mod(a: Dim, b: Dim) -> Dim:
    _check(a, "mod"), _check(b, "mod")
    if isinstance(b, int):
        if b == 0:
            raise DimError("division by zero")
        if isinstance(a, int):
            return a % b
        if b in (1, -1) or (b > 0 and _divide_exactly(a, b) is not None):
            return 0
    return _op(Opcode.MOD, a, b)


def minimum(a: Dim, b: Dim) -> Dim:
    _check(a, "min"), _check(b, "min")
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    if a == b:
        return a
    if isinstance(sub := add(a, mul(b, -1)), int):  # a and b differ by a constant
        return a if sub < 0 else b
    a, b = sorted((a, b), key=_key)  # min is commutative: one canonical order
    return _op(Opcode.MIN, a, b)


def maximum(a: Dim, b: Dim) -> Dim:
    _check(a, "max"), _check(b, "max")
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    if a == b:
        return a
    if isinstance(sub := add(a, mul(b, -1)), int):
        return a if sub > 0 else b
    a, b = sorted((a, b), key=_key)
    return _op(Opcode.MAX, a, b)


_APPLY = {Opcode.FLOORDIV: floordiv, Opcode.CEILDIV: ceildiv, Opcode.MOD: mod,
          Opcode.MIN: minimum, Opcode.MAX: maximum}
_BINARY = {Opcode.ADD: add, Opcode.SUB: lambda a, b: add(a, mul(b, -1)), Opcode.MUL: mul,
           **_APPLY}


def _fits(v: int) -> int:
    if not INT64_MIN <= v <= INT64_MAX:
        raise DimError(f"value {v} does not fit a signed 64-bit integer")
    return v


def evaluate(d: Dim, env: Mapping[str, int]) -> int:
    """`d` for the symbols' values in `env` (see `Expr.value`)."""
    if isinstance(d, int):
        return _fits(d)
    total = _fits(d.const)
    for monomial, c in d.terms:
        product = _fits(c)
        for a in monomial:
            product = _fits(product * _atom_value(a, env))
        total = _fits(total + product)
    return total


def _atom_value(a: Atom, env: Mapping[str, int]) -> int:
    if a.op < 0:
        if a.name not in env:
            raise DimError(f"symbol '{a.name}' has no value")
        return _fits(env[a.name])
    x, y = (evaluate(o, env) for o in a.operands)
    if a.op in (Opcode.FLOORDIV, Opcode.CEILDIV, Opcode.MOD) and y == 0:
        raise DimError(f"'{a}' divides by zero")
    result = _APPLY[Opcode(a.op)](x, y)
    assert isinstance(result, int)
    return _fits(result)


# bounds --------------------------------------------------------------------------------

def _imul(x: tuple[int, int], y: tuple[int, int]) -> tuple[int, int]:
    products = [p * q for p in x for q in y]
    return min(products), max(products)


def bound(d: Dim, ranges: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
    """`d`'s interval for the symbols' inclusive `ranges` (see `Expr.bounds`)."""
    if isinstance(d, int):
        return d, d
    lo = hi = d.const
    for monomial, c in d.terms:
        term = (c, c)
        for a in monomial:
            term = _imul(term, _atom_bounds(a, ranges))
        lo, hi = lo + term[0], hi + term[1]
    return lo, hi


def _atom_bounds(a: Atom, ranges: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
    if a.op < 0:
        if a.name not in ranges:
            raise DimError(f"symbol '{a.name}' has no range")
        return ranges[a.name]
    (xl, xh), (yl, yh) = (bound(o, ranges) for o in a.operands)
    op = Opcode(a.op)
    if op is Opcode.MIN:
        return min(xl, yl), min(xh, yh)
    if op is Opcode.MAX:
        return max(xl, yl), max(xh, yh)
    if yl <= 0 <= yh:
        raise DimError(f"'{a}' may divide by zero: its divisor ranges over [{yl}, {yh}]")
    if op is Opcode.MOD:  # Python's remainder takes the divisor's sign
        m = max(abs(yl), abs(yh)) - 1
        return (0, m) if yl > 0 else (-m, 0)
    f = (lambda p, q: p // q) if op is Opcode.FLOORDIV else (lambda p, q: -(-p // q))
    corners = [f(p, q) for p in (xl, xh) for q in (yl, yh)]
    return min(corners), max(corners)  # monotone in each operand on a sign-fixed divisor


# deciding ------------------------------------------------------------------------------

def _span(d: Dim, ranges: Mapping[str, tuple[int, int]]) -> tuple[int, int] | None:
    """`d`'s interval for its symbols' `ranges` (a symbol not listed: any size, 0 and up);
    None when a divisor may be zero."""
    if isinstance(d, int):
        return d, d
    try:
        return bound(d, {name: ranges.get(name, (0, INT64_MAX)) for name in d.symbols()})
    except DimError:
        return None


def less(a: Dim, b: Dim, ranges: Mapping[str, tuple[int, int]] | None = None) -> bool:
    """Whether a < b for every value of the symbols in their inclusive `ranges` (unlisted:
    any size, never negative); a DimError when that depends on them."""
    span = _span(add(b, mul(a, -1)), ranges or {})
    if span is not None and span[0] > 0:
        return True
    if span is not None and span[1] <= 0:
        return False
    raise DimError(f"whether {render(a)} < {render(b)} depends on the sizes")


def less_equal(a: Dim, b: Dim, ranges: Mapping[str, tuple[int, int]] | None = None) -> bool:
    """Whether a <= b, as `less` decides it."""
    return not less(b, a, ranges)


# binding -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Given:
    """One dimension of a call's input: the input's name, the axis, what the module declares
    there and the size the caller passed."""

    tensor: str
    axis: int
    declared: Dim
    size: int


def _affine_in(d: Expr, name: str) -> tuple[int, Dim] | None:
    """(c, rest) with d == c * name + rest and rest free of `name`; None where `name` appears
    otherwise (multiplied by another factor, or inside a division, min or max)."""
    symbol = Atom(-1, name)
    c, rest = 0, {}
    for monomial, coefficient in d.terms:
        if monomial == (symbol,):
            c = coefficient
        elif name in Expr(0, ((monomial, 1),)).symbols():
            return None
        else:
            rest[monomial] = coefficient
    return (c, Expr._make(d.const, rest)) if c else None


def bind(given: Sequence[Given], ranges: Mapping[str, tuple[int, int]]) -> dict[str, int]:
    """The symbols' values that a call's input sizes imply, checked against each other and
    against the symbols' declared inclusive `ranges`, before anything is allocated.

    A dimension declared as a bare symbol binds it; one declared as an expression in which a
    single unbound symbol appears as `c * symbol + rest` solves for it once the rest is known
    (`past + seq`); every dimension is then checked against its declaration. A conflict names
    the inputs that bound the symbols: `input 'mask' dim 1 is 'seq' = 19, but input 'ids'
    dim 1 gave 'seq' = 17`.
    """
    env: dict[str, int] = {}
    source: dict[str, Given] = {}
    pending = [g for g in given if isinstance(g.declared, Expr)]
    progress = True
    while pending and progress:
        progress, waiting = False, []
        for g in pending:
            assert isinstance(g.declared, Expr)
            unknown = sorted(g.declared.symbols() - env.keys())
            if not unknown:
                continue  # checked below
            solved = _affine_in(g.declared, unknown[0]) if len(unknown) == 1 else None
            if solved is None:
                waiting.append(g)
                continue
            c, rest = solved
            remainder = g.size - evaluate(rest, env)
            name = unknown[0]
            if remainder % c:
                raise DimError(f"input '{g.tensor}' dim {g.axis} is '{render(g.declared)}', "
                               f"which cannot be {g.size}")
            lo, hi = ranges.get(name, (0, INT64_MAX))
            if not lo <= remainder // c <= hi:
                raise DimError(f"input '{g.tensor}' dim {g.axis} is '{render(g.declared)}' = "
                               f"{g.size}, which makes '{name}' = {remainder // c}; the module "
                               f"allows {lo} to {hi}")
            env[name], source[name] = remainder // c, g
            progress = True
        pending = waiting
    for g in given:
        unknown = sorted(free_symbols(g.declared) - env.keys())
        if unknown:
            raise DimError(f"input '{g.tensor}' dim {g.axis} is '{render(g.declared)}': "
                           f"no input gives '{unknown[0]}' alone")
        want = evaluate(g.declared, env)
        if want == g.size:
            continue
        if isinstance(g.declared, int):
            raise DimError(f"input '{g.tensor}' dim {g.axis} is {want}, got {g.size}")
        gave = ", ".join(f"input '{source[n].tensor}' dim {source[n].axis} gave '{n}' = "
                         f"{env[n]}" for n in sorted(g.declared.symbols()))
        raise DimError(f"input '{g.tensor}' dim {g.axis} is '{render(g.declared)}' = "
                       f"{g.size}, but {gave}")
    return env


def free_symbols(d: Dim) -> frozenset[str]:
    """The symbols `d` reads (none for an int)."""
    return frozenset() if isinstance(d, int) else d.symbols()


# programs ------------------------------------------------------------------------------

def encode(d: Dim, symbols: Sequence[str]) -> tuple[int, ...]:
    """`d` as a postfix program over `symbols` (the module's symbol table, by index)."""
    index = {name: i for i, name in enumerate(symbols)}
    words: list[int] = []

    def emit(x: Dim) -> None:
        if isinstance(x, int):
            words.extend((Opcode.CONST, _fits(x)))
            return
        first = True
        for monomial, c in x.terms:
            product_first = True
            if c != 1:
                words.extend((Opcode.CONST, c))
                product_first = False
            for a in monomial:
                if a.op < 0:
                    if a.name not in index:
                        raise DimError(f"symbol '{a.name}' is not in the symbol table")
                    words.extend((Opcode.SYM, index[a.name]))
                else:
                    emit(a.operands[0])
                    emit(a.operands[1])
                    words.append(a.op)
                if not product_first:
                    words.append(Opcode.MUL)
                product_first = False
            if not first:
                words.append(Opcode.ADD)
            first = False
        if x.const:
            words.extend((Opcode.CONST, x.const, Opcode.ADD))

    emit(d)
    return tuple(int(w) for w in words)


def decode(words: Sequence[int], symbols: Sequence[str]) -> Dim:
    """The dimension a program computes; a malformed program raises DimError naming the
    word at fault."""
    if not words:
        raise DimError("an empty program computes nothing")
    if len(words) > MAX_WORDS:
        raise DimError(f"a program of {len(words)} words; at most {MAX_WORDS}")
    stack: list[Dim] = []
    pc = 0
    while pc < len(words):
        word = words[pc]
        try:
            op = Opcode(word)
        except ValueError:
            raise DimError(f"word {pc}: opcode {word} is not one of 0-{len(Opcode) - 1}") \
                from None
        if op in (Opcode.CONST, Opcode.SYM):
            if pc + 1 >= len(words):
                raise DimError(f"word {pc}: {op.name} has no immediate")
            imm = words[pc + 1]
            if op is Opcode.CONST:
                stack.append(_fits(imm))
            elif not 0 <= imm < len(symbols):
                raise DimError(f"word {pc + 1}: symbol {imm} is not in the table of "
                               f"{len(symbols)}")
            else:
                stack.append(Expr.symbol(symbols[imm]))
            pc += 2
            continue
        if len(stack) < 2:
            raise DimError(f"word {pc}: {op.name} needs two values, the stack has "
                           f"{len(stack)}")
        b, a = stack.pop(), stack.pop()
        stack.append(_BINARY[op](a, b))
        pc += 1
    if len(stack) != 1:
        raise DimError(f"the program leaves {len(stack)} values; expected 1")
    return stack[0]


def render(d: Dim) -> str:
    """`d` as a user reads it: `batch`, `past + seq`, `2 * seq`, `16`; `parse` reads it back."""
    return str(d)


_PARSED_BINARY = {ast.Add: add, ast.Sub: _BINARY[Opcode.SUB], ast.Mult: mul,
                  ast.FloorDiv: floordiv, ast.Mod: mod}
_PARSED_CALLS = {"ceildiv": ceildiv, "min": minimum, "max": maximum}


def parse(text: str) -> Dim:
    """The dimension `text` spells (what `render` writes, or a user's `-input-shape`):
    integers, symbol names, `+ - * // %`, parentheses, `ceildiv(a, b)`, `min(a, b)` and
    `max(a, b)`. Read with Python's own expression parser, of whose tree only those forms
    are accepted."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise DimError(f"'{text}' is not a dimension expression") from None

    def walk(node: ast.AST) -> Dim:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            return Expr.symbol(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return mul(walk(node.operand), -1)
        if isinstance(node, ast.BinOp) and type(node.op) in _PARSED_BINARY:
            return _PARSED_BINARY[type(node.op)](walk(node.left), walk(node.right))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in _PARSED_CALLS and len(node.args) == 2
                and not node.keywords):
            return _PARSED_CALLS[node.func.id](walk(node.args[0]), walk(node.args[1]))
        raise DimError(f"'{text}': '{ast.unparse(node)}' is not an integer, a symbol, "
                       "+ - * // %, ceildiv, min or max")

    return walk(tree)


__all__ = ["MAX_WORDS", "Atom", "Dim", "DimError", "Expr", "Given", "Opcode", "add", "bind",
           "bound", "ceildiv", "decode", "divide_exactly", "encode", "evaluate", "floordiv",
           "free_symbols",
           "less", "less_equal", "maximum", "minimum", "mod", "mul", "parse", "render"]
