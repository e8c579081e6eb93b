"""The symbolic-dimension algebra (`hexir_format.dims`): random expression trees are checked
against plain Python arithmetic on random sizes -- folded, encoded and decoded, bounded."""

from __future__ import annotations

import operator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hexir_format import dims as D
from hexir_format.dims import DimError, Expr, Opcode

SYMBOLS = ("batch", "seq", "past")
RANGES = {"batch": (1, 8), "seq": (0, 512), "past": (0, 1024)}


def _py_ceildiv(a: int, b: int) -> int:
    return -(-a // b)


#: (builder on dims, the same on ints); divisions take a positive constant or 1 + a symbol
BINARY = [(D.add, operator.add), (lambda a, b: a - b, operator.sub), (D.mul, operator.mul),
          (D.minimum, min), (D.maximum, max)]
DIVIDING = [(D.floordiv, operator.floordiv), (D.ceildiv, _py_ceildiv), (D.mod, operator.mod)]


@st.composite
def trees(draw, depth: int = 3):
    """(the dim, a function of the environment computing the same with Python ints)."""
    if depth == 0 or draw(st.booleans()):
        if draw(st.booleans()):
            k = draw(st.integers(-20, 20))
            return k, lambda env, k=k: k
        name = draw(st.sampled_from(SYMBOLS))
        return Expr.symbol(name), lambda env, n=name: env[n]
    a, fa = draw(trees(depth - 1))
    if draw(st.integers(0, 3)) == 0:
        build, py = draw(st.sampled_from(DIVIDING))
        if draw(st.booleans()):
            k = draw(st.integers(1, 9))
            return build(a, k), lambda env: py(fa(env), k)
        name = draw(st.sampled_from(SYMBOLS))
        divisor = Expr.symbol(name) + 1
        return build(a, divisor), lambda env: py(fa(env), env[name] + 1)
    b, fb = draw(trees(depth - 1))
    build, py = draw(st.sampled_from(BINARY))
    return build(a, b), lambda env: py(fa(env), fb(env))


environments = st.fixed_dictionaries({n: st.integers(lo, hi) for n, (lo, hi) in RANGES.items()})


@settings(max_examples=400, deadline=None)
@given(trees(), environments)
def test_a_folded_expression_computes_what_python_computes(tree, env):
    d, py = tree
    assert D.evaluate(d, env) == py(env)


@settings(max_examples=400, deadline=None)
@given(trees(), environments)
def test_a_program_decodes_to_the_same_dimension(tree, env):
    d, py = tree
    words = D.encode(d, SYMBOLS)
    back = D.decode(words, SYMBOLS)
    assert D.evaluate(back, env) == py(env)
    assert D.encode(back, SYMBOLS) == words  # canonical: the round trip is a fixed point


@settings(max_examples=400, deadline=None)
@given(trees(), st.lists(environments, min_size=1, max_size=8))
def test_bounds_contain_every_value_in_the_ranges(tree, envs):
    d, py = tree
    lo, hi = D.bound(d, RANGES)
    for env in envs:
        assert lo <= py(env) <= hi
    corners = [{"batch": b, "seq": s, "past": p} for b in RANGES["batch"]
               for s in RANGES["seq"] for p in RANGES["past"]]
    for env in corners:
        assert lo <= py(env) <= hi


@settings(max_examples=400, deadline=None)
@given(trees())
def test_the_text_of_a_dimension_parses_back_to_it(tree):
    d, _ = tree
    assert D.parse(D.render(d)) == d


@pytest.mark.parametrize("text, message", [
    ("seq +", r"'seq \+' is not a dimension expression"),
    ("seq / 2", r"'seq / 2' is not an integer, a symbol, \+ - \* // %, ceildiv, min or max"),
    ("2.5", "'2.5' is not an integer"),
    ("f(seq)", "'f\\(seq\\)' is not an integer"),
    ("__import__('os')", "is not an integer, a symbol"),
    ("min(a, b, c)", "is not an integer, a symbol"),
])
def test_a_bad_dimension_text_is_refused_saying_what_is_allowed(text, message):
    with pytest.raises(DimError, match=message):
        D.parse(text)


def test_equal_expressions_built_differently_are_equal_and_fold():
    seq, past, batch = (Expr.symbol(n) for n in ("seq", "past", "batch"))
    assert seq + past == past + seq and hash(seq + past) == hash(past + seq)
    assert 2 * (seq + 1) == 2 * seq + 2
    assert (seq + 1) - seq == 1 and isinstance((seq + 1) - seq, int)
    assert (4 * seq) // 2 == 2 * seq and (4 * seq + 8) % 4 == 0
    assert batch * 8 * seq == seq * (batch * 8)
    assert D.minimum(seq, seq + 1) == seq and D.maximum(seq + 3, seq) == seq + 3
    assert D.minimum(seq, past) == D.minimum(past, seq)
    assert seq // 1 == seq and D.ceildiv(6 * seq, 3) == 2 * seq
    assert str((seq + 63) // 64) == "(seq + 63) // 64"
    assert str(past + seq) == "past + seq" and str(2 * seq) == "2 * seq"
    assert (past + seq).symbols() == {"past", "seq"}


def test_evaluation_refuses_a_missing_symbol_a_zero_divisor_and_overflow():
    seq, n = Expr.symbol("seq"), Expr.symbol("n")
    with pytest.raises(DimError, match="symbol 'seq' has no value"):
        D.evaluate(seq + 1, {})
    with pytest.raises(DimError, match="divides by zero"):
        D.evaluate(seq // n, {"seq": 4, "n": 0})
    with pytest.raises(DimError, match="does not fit a signed 64-bit integer"):
        D.evaluate(seq * seq * seq, {"seq": 1 << 22})
    with pytest.raises(DimError, match="division by zero"):
        D.floordiv(seq, 0)


def test_bounds_refuse_a_divisor_whose_range_holds_zero():
    seq, n = Expr.symbol("seq"), Expr.symbol("n")
    with pytest.raises(DimError, match=r"may divide by zero: its divisor ranges over \[0, 4\]"):
        D.bound(seq // n, {"seq": (0, 9), "n": (0, 4)})
    assert D.bound(seq // (n + 1), {"seq": (0, 9), "n": (0, 4)}) == (0, 9)
    with pytest.raises(DimError, match="symbol 'n' has no range"):
        D.bound(n, {})


@pytest.mark.parametrize("words, message", [
    ((), "an empty program computes nothing"),
    ((Opcode.CONST,), "word 0: CONST has no immediate"),
    ((Opcode.SYM, 3), "word 1: symbol 3 is not in the table of 3"),
    ((Opcode.SYM, -1), "word 1: symbol -1 is not in the table of 3"),
    ((Opcode.CONST, 1, Opcode.ADD), "word 2: ADD needs two values, the stack has 1"),
    ((Opcode.CONST, 1, Opcode.CONST, 2), "the program leaves 2 values; expected 1"),
    ((17,), r"word 0: opcode 17 is not one of 0-9"),
    ((Opcode.CONST, 1 << 63), "does not fit a signed 64-bit integer"),
    ((Opcode.CONST, 1, Opcode.CONST, 0, Opcode.FLOORDIV), "division by zero"),
    ((Opcode.CONST, 1) * 129, "a program of 258 words; at most 256"),
])
def test_a_malformed_program_is_refused_naming_the_word(words, message):
    with pytest.raises(DimError, match=message):
        D.decode(words, SYMBOLS)


def test_encoding_refuses_a_symbol_outside_the_table_and_a_non_dimension():
    with pytest.raises(DimError, match="symbol 'heads' is not in the symbol table"):
        D.encode(Expr.symbol("heads") * 2, SYMBOLS)
    with pytest.raises(DimError, match="expected an int or a dimension expression, got float"):
        D.add(Expr.symbol("seq"), 1.5)  # type: ignore[arg-type]


def _given(*dims):
    """Given records from (tensor, axis, declared text or int, size)."""
    return [D.Given(t, a, D.parse(d) if isinstance(d, str) else d, n) for t, a, d, n in dims]


def test_binding_reads_symbols_off_the_inputs_and_solves_sums():
    given = _given(("ids", 0, "batch", 2), ("ids", 1, "seq", 17), ("past_key", 2, "past", 5),
                   ("mask", 1, "past + seq", 22), ("mask", 0, "batch", 2), ("x", 2, 64, 64))
    assert D.bind(given, RANGES) == {"batch": 2, "seq": 17, "past": 5}
    # the sum can come first: it waits until 'past' is known, then solves for 'seq'
    given = _given(("mask", 1, "past + seq", 22), ("past_key", 2, "past", 5),
                   ("pairs", 0, "2 * seq + 1", 35))
    assert D.bind(given, RANGES) == {"past": 5, "seq": 17}


@pytest.mark.parametrize("dims, message", [
    ([("ids", 1, "seq", 17), ("mask", 1, "seq", 19)],
     "input 'mask' dim 1 is 'seq' = 19, but input 'ids' dim 1 gave 'seq' = 17"),
    ([("ids", 1, "seq", 17), ("past_key", 2, "past", 5), ("mask", 1, "past + seq", 21)],
     "input 'mask' dim 1 is 'past \\+ seq' = 21, but input 'past_key' dim 2 gave 'past' = 5, "
     "input 'ids' dim 1 gave 'seq' = 17"),
    ([("x", 0, "batch", 9)],
     "input 'x' dim 0 is 'batch' = 9, which makes 'batch' = 9; the module allows 1 to 8"),
    ([("x", 0, "2 * seq", 7)], "input 'x' dim 0 is '2 \\* seq', which cannot be 7"),
    ([("x", 0, "seq * past", 6)],
     "input 'x' dim 0 is 'past \\* seq': no input gives 'past' alone"),
    ([("x", 1, 64, 65)], "input 'x' dim 1 is 64, got 65"),
])
def test_binding_refuses_conflicting_and_out_of_range_sizes_naming_the_inputs(dims, message):
    with pytest.raises(DimError, match=message):
        D.bind(_given(*dims), RANGES)
