"""Symbolic dimensions in the graph's tensor types: `tensor<?x?x64xf32, ["batch", "seq"]>`.

A dimension the compiler does not know is MLIR's dynamic size (`?`), and the type's encoding
attribute lists, in order, what each `?` is: an expression over named symbols in the syntax
of `hexir_format.dims` (`batch`, `past + seq`, `2 * seq`). Carried by the type, the
expression travels with every value through every pass that copies types, and two values of
the same symbolic shape have equal types, as two of the same static shape do. A type with a
`?` and no encoding (or one that does not list every `?`) says nothing about its size and is
refused by the verifiers, as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from hexir_compiler.mlir import ir
from hexir_format import dims
from hexir_format.dims import Dim, DimError, Expr


def tensor_type(shape: Sequence[Dim], element: ir.Type) -> ir.RankedTensorType:
    """The ranked tensor type of `shape`: ints as themselves, expressions as `?` listed in
    the encoding."""
    symbolic = [d for d in shape if isinstance(d, Expr)]
    sizes = [ir.ShapedType.get_dynamic_size() if isinstance(d, Expr) else int(d) for d in shape]
    if not symbolic:
        return ir.RankedTensorType.get(sizes, element)
    encoding = ir.ArrayAttr.get([ir.StringAttr.get(dims.render(d)) for d in symbolic])
    return ir.RankedTensorType.get(sizes, element, encoding)


def shape_of(t: ir.Type) -> tuple[Dim, ...]:
    """The dims of a ranked tensor type, each `?` read from the encoding; a `ValueError`
    (a DimError) names what is missing or malformed."""
    ranked = ir.RankedTensorType(t)
    dynamic = ir.ShapedType.get_dynamic_size()
    holes = sum(d == dynamic for d in ranked.shape)
    if not holes:
        return tuple(ranked.shape)
    encoding = ranked.encoding
    if not isinstance(encoding, ir.ArrayAttr) or len(encoding) != holes or not all(
            isinstance(e, ir.StringAttr) for e in encoding):
        raise DimError(f"{t} has {holes} dynamic dimension{'s' * (holes != 1)}; its encoding "
                       f"must list {'its' if holes == 1 else 'their'} expression"
                       f"{'s' * (holes != 1)} as strings, e.g. [\"batch\"]")
    given = iter(dims.parse(ir.StringAttr(e).value) for e in encoding)
    shape = tuple(next(given) if d == dynamic else d for d in ranked.shape)
    if any(isinstance(d, int) for d, raw in zip(shape, ranked.shape, strict=True)
           if raw == dynamic):
        raise DimError(f"{t}: a dynamic dimension's expression is a constant; write it in the "
                       "shape")
    return shape


def is_static(shape: Sequence[Dim]) -> bool:
    return all(isinstance(d, int) for d in shape)


def symbols(shape: Iterable[Dim]) -> frozenset[str]:
    """The names the dims read."""
    return frozenset().union(*(dims.free_symbols(d) for d in shape))


#: What a schedule's heuristics take a symbol to be (never a correctness decision: a kernel
#: is right for every value of its symbols, and only its speed rests on this guess).
HINT = 64


def hint(d: Dim) -> int:
    """`d` with every symbol HINT: the size a schedule's heuristics plan for."""
    return d if isinstance(d, int) else dims.evaluate(d, dict.fromkeys(d.symbols(), HINT))


def least(d: Dim) -> int:
    """`d` with every symbol 1, its least size: what a schedule plans for when it splits
    work among threads (a grid split for the least size has more, smaller iterations at a
    larger one, which costs little; one split for a larger size leaves threads idle at a
    smaller one -- ResNet-18 at batch 1 planned for 64 took 1.33x a static module's time)."""
    return d if isinstance(d, int) else dims.evaluate(d, dict.fromkeys(d.symbols(), 1))


def at_most(d: Dim, limit: int) -> int:
    """min(d, limit), and `limit` where `d` is symbolic: a tile no larger than its extent
    where that is known (a schedule whose tiles may overhang handles any extent)."""
    return min(d, limit) if isinstance(d, int) else limit


_GIVEN = re.compile(r"(?:(?P<name>[A-Za-wyz_][A-Za-wyz0-9_]*)(?::|$))?"
                    r"(?:(?P<lo>\d+)\.\.(?P<hi>\d+))?")


def given_dimension(text: str) -> tuple[str | None, tuple[int, int] | None]:
    """A symbolic dimension as `-input-shape` gives it: a symbol's name (`batch`), a range
    of sizes (`1..64`), or both (`batch:1..64`) -> (name, (lo, hi)); a DimError otherwise.
    (A name has no `x`: it separates the dimensions.)"""
    match = _GIVEN.fullmatch(text)
    if not text or match is None or not (match["name"] or match["lo"]):
        raise DimError(f"'{text}' is not a size, a symbol, a range lo..hi or symbol:lo..hi")
    span = (int(match["lo"]), int(match["hi"])) if match["lo"] else None
    if span is not None and span[0] > span[1]:
        raise DimError(f"'{text}' is an empty range")
    return match["name"], span
