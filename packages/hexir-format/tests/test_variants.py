"""Version 6: an entry point as one variant per x86-64 level. What round-trips, which variant
the validator picks for a host's level, and what the reader, writer and validator refuse."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest

import hexir_format as hf
from conftest import FIXTURES
from hexir_format import Command, Device, DType, Function, Module, Slot
from hexir_format import TensorType as T
from hexir_format import layout as L
from hexir_format.validate import check

SYMBOL = L.size(L.Symbol)  # 40: name 32, program_offset 4, cpu_level 4


def compiled() -> bytes:
    """The built-in program as hexir compiles it by default: a variant for v2, v3 and v4."""
    return (FIXTURES / "builtin-cpu.hxb").read_bytes()


FOUR = T(DType.F32, (4,))


def echo(levels=(2, 3), types=(FOUR, FOUR)) -> Module:
    """`main(x) -> (x)` once per level in `levels`, each variant over its own slot."""
    functions = tuple(Function("main", (Command.input(i, 0), Command.output(i, 0)),
                               cpu_level=level) for i, level in enumerate(levels))
    return Module(6, functions, b"", (), tuple(Slot(Device.CPU, t) for t in types))


def symbol_at(data: bytes, n: int) -> int:
    return hf.parse_layout(data).section(hf.SectionKind.SYMBOLS).offset + n * SYMBOL


def patched(data: bytes, at: int, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into("<I", out, at, value)
    return bytes(out)


# ---- round trips and the choice -------------------------------------------------------------

def test_the_compiled_variants_round_trip_byte_for_byte():
    data = compiled()
    module = hf.parse(data)
    assert module.version == 6
    assert [(f.name, f.cpu_level) for f in module.functions] == [("main", 2), ("main", 3),
                                                                 ("main", 4)]
    assert hf.build(module) == data
    assert hf.minimum_version(module) == 6


@pytest.mark.parametrize(("host", "picked"), [(None, 4), (4, 4), (3, 3), (2, 2), (1, 2)])
def test_the_validator_picks_the_highest_variant_the_host_runs(host, picked):
    """Below every variant's level the lowest is picked: the cpu device then refuses its
    kernels by name, as it refuses any image its CPU cannot run."""
    plan = check(hf.parse(compiled()), cpu_level=host)
    entry = plan.entries["main"]
    assert entry.cpu_level == picked
    assert [v.cpu_level for v in plan.variants["main"]] == [2, 3, 4]
    module = plan.module
    assert {module.executables[i].cpu_level for i in entry.executables} == {picked}


def test_a_variant_is_labelled_with_its_level():
    entries = check(hf.parse(compiled())).variants["main"]
    assert [e.label for e in entries] == ["main [x86-64-v2]", "main [x86-64-v3]",
                                          "main [x86-64-v4]"]


# ---- the reader -------------------------------------------------------------------------------

def test_a_level_that_is_no_x86_64_level_is_refused():
    data = compiled()
    at = symbol_at(data, 1) + 36
    with pytest.raises(hf.FormatError, match=f"symbol 1 \\(main\\): cpu_level 7 at offset {at}"
                       ) as info:
        hf.parse(patched(data, at, 7))
    assert info.value.field == "cpu_level"


def test_two_variants_for_one_level_are_refused():
    data = compiled()
    with pytest.raises(hf.FormatError, match="symbol 2 \\(main\\): entry point defined twice "
                                             "for x86-64-v3"):
        hf.parse(patched(data, symbol_at(data, 2) + 36, 3))


def test_a_levelless_entry_beside_a_variant_of_the_same_name_is_refused():
    data = compiled()
    with pytest.raises(hf.FormatError, match="symbol 1 \\(main\\): entry point defined twice"):
        hf.parse(patched(data, symbol_at(data, 1) + 36, 0))


def test_a_version_5_symbol_still_has_a_reserved_word():
    data = hf.build(replace(echo(levels=(0,), types=(FOUR,)), version=5))
    at = symbol_at(data, 0) + 36
    with pytest.raises(hf.FormatError, match=f"reserved field at offset {at} is 2"):
        hf.parse(patched(data, at, 2))


# ---- the writer -------------------------------------------------------------------------------

def test_variants_need_version_6():
    with pytest.raises(hf.FormatError, match="'main' is the variant for x86-64-v2, which only "
                                             "version 6 holds; this module is version 5"):
        hf.build(replace(echo(), version=5))


def test_the_writer_refuses_two_variants_for_one_level():
    with pytest.raises(hf.FormatError, match="'main' is defined twice for x86-64-v3"):
        hf.build(echo(levels=(3, 3)))


# ---- the validator ----------------------------------------------------------------------------

def test_variants_that_disagree_on_the_signature_are_refused():
    """A caller cannot know which variant the host picks, so all must take and give alike."""
    module = echo(types=(FOUR, T(DType.F32, (5,))))
    with pytest.raises(hf.ValidationError, match="main \\[x86-64-v3\\]: its signature "
                                                 "\\(5xf32\\) -> \\(5xf32\\) differs from "
                                                 "main \\[x86-64-v2\\]'s \\(4xf32\\) -> "
                                                 "\\(4xf32\\); the variants"):
        check(hf.parse(hf.build(module)))
    assert check(hf.parse(hf.build(echo()))).entries["main"].cpu_level == 3


def test_a_variant_that_dispatches_a_higher_level_kernel_is_refused():
    """The v2 variant made to dispatch the v4 kernel: a v2 host would pick it and fail."""
    module = hf.parse(compiled())
    v2, v3, v4 = module.functions
    high = next(i for i, e in enumerate(module.executables) if e.cpu_level == 4)
    commands = tuple(replace(c, operands=(high, *c.operands[1:])) if c.op is hf.Op.DISPATCH
                     else c for c in v2.commands)
    damaged = replace(module, functions=(replace(v2, commands=commands), v3, v4))
    with pytest.raises(hf.ValidationError, match=r"main \[x86-64-v2\]: command 3 .*kernel "
                                                 r"'linear_0' is host code for x86-64-v4, above "
                                                 r"this variant's x86-64-v2"):
        check(hf.parse(hf.build(damaged)))
