"""Version 6's generate section (`Generation`): a decode loop over a step entry point. What
round-trips, and the refusals of the reader (a damaged record: each field) and of the
validator (a record whose indices or the step's types do not make a decoder-with-past
step), each one line. The module under test is `fixtures/generate.hxb`, the compiler's
`-generate` of fixtures/decoder.py: main(input_ids, attention_mask, position_ids, 4 pasts)
-> (logits, 4 presents), past held to 0..31, max_length 32, eos 6."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest

import hexir_format as hf
from conftest import FIXTURES
from hexir_format import Generation, SectionKind
from hexir_format import layout as L
from hexir_format.validate import check

DATA = (FIXTURES / "generate.hxb").read_bytes()
MODULE = hf.parse(DATA)
(G,) = MODULE.generations


def with_generation(**changes) -> hf.Module:
    return replace(MODULE, generations=(replace(G, **changes),))


def test_the_fixture_records_its_decode_loop():
    assert G == Generation("generate", "main", ids=0, mask=1, positions=2, logits=0,
                           cache=((3, 1), (4, 2), (5, 3), (6, 4)), eos=6, max_length=32)
    check(MODULE)  # passes the validator


def test_the_section_round_trips_byte_for_byte():
    assert hf.build(MODULE) == DATA
    assert hf.parse(hf.build(with_generation(eos=-1, max_length=20))).generations[0].eos == -1


def test_a_generation_needs_version_6():
    with pytest.raises(hf.FormatError, match=r"a generate entry point \('generate'\) needs "
                                             r"version 6; this module is version 5"):
        hf.build(replace(MODULE, version=5))
    assert hf.minimum_version(MODULE) == 6


# ---- the reader: a damaged record -------------------------------------------------------

SECTION = next(s for s in MODULE.layout.sections if s.kind == SectionKind.GENERATE)
RECORD = SECTION.offset + L.size(L.GenerateHeader)


def damaged(offset: int, fmt: str, value: int) -> bytes:
    data = bytearray(DATA)
    struct.pack_into(fmt, data, offset, value)
    return bytes(data)


def field_at(name: str) -> int:
    return RECORD + L.offset_of(L.GenerateRecord, name)


@pytest.mark.parametrize(("where", "fmt", "value", "message"), [
    (SECTION.offset, "<I", 3, r"generate: count 3 at offset \d+ needs at least"),
    (SECTION.offset + 4, "<I", 1, "generate: reserved field"),
    ("reserved", "<I", 7, "generation 0: reserved field"),
    ("eos", "<q", -2, "generation 0: eos -2 at offset .* is not a token id"),
    ("max_length", "<Q", 1, r"generation 0: max_length 1 at offset \d+ is outside 2\.\."),
    ("max_length", "<Q", 2**63, r"max_length \d+ .* is outside"),
    ("cache_count", "<I", 5, "generation 0: cache_count 5 at offset .* needs 40 bytes"),
    ("cache_count", "<I", 3, r"generate: bytes \d+\.\.\d+ \(offset \d+\) belong to no record"),
    ("name", "<B", 0, "generation 0: name at offset .* is empty"),
])
def test_a_damaged_record_is_refused_in_one_line(where, fmt, value, message):
    offset = field_at(where) if isinstance(where, str) else where
    with pytest.raises(hf.FormatError, match=message) as caught:
        hf.parse(damaged(offset, fmt, value))
    assert "\n" not in str(caught.value)


def test_a_step_name_with_bytes_after_its_terminator_is_refused():
    data = bytearray(DATA)
    data[field_at("step") + 8] = ord("x")  # "main\0\0\0\0x..."
    with pytest.raises(hf.FormatError, match=r"generation 0: step at offset .* has bytes after"):
        hf.parse(bytes(data))


def test_a_name_without_its_terminator_is_refused():
    data = bytearray(DATA)
    data[field_at("name"):field_at("name") + L.NAME_BYTES] = b"g" * L.NAME_BYTES
    with pytest.raises(hf.FormatError, match=r"name at offset .* has no NUL terminator"):
        hf.parse(bytes(data))


# ---- the validator: a record that does not make a step --------------------------------

@pytest.mark.parametrize(("changes", "message"), [
    ({"name": "main"}, "generate entry 'main': the name is already an entry point's"),
    ({"step": "decode"}, "its step 'decode' is not an entry point"),
    ({"ids": 7}, "ids is input 7, but the step has 7 inputs"),
    ({"logits": 5}, "logits is output 5, but the step has 5 outputs"),
    ({"mask": 0}, "mask and ids are both input 0"),
    ({"cache": ((3, 1), (4, 2), (5, 3), (6, 1))},
     "cache 3 present and cache 0 present are both output 1"),
    ({"cache": ((3, 1), (4, 2), (5, 3))}, "input 6 of the step has no role"),
    ({"cache": ()}, "input 3 of the step has no role"),
    ({"ids": 1, "mask": 0},
     r"ids is batchx\(past \+ seq\)xi64; expected two distinct size symbols"),
    ({"positions": 3, "cache": ((2, 1), (4, 2), (5, 3), (6, 4))},
     "positions is batchx2xpastx4xf32; expected batchxseqxi64"),
    ({"logits": 1, "cache": ((3, 0), (4, 2), (5, 3), (6, 4))},
     r"logits is batchx2x\(past \+ seq\)x4xf32; expected \[batch, seq, vocab\]"),
    ({"eos": 16}, r"eos 16 is outside the vocabulary of the logits, 0\.\.15"),
    ({"max_length": 64}, r"past must take 0\.\.63 .*; the module allows 0\.\.31"),
])
def test_a_record_that_is_no_step_is_refused(changes, message):
    with pytest.raises(hf.ValidationError, match=message) as caught:
        check(with_generation(**changes))
    assert "\n" not in str(caught.value)


def test_a_damaged_index_in_the_file_is_refused_by_the_validator():
    """The reader holds the record's fields to what they can mean at all; which input an
    index names is the validator's to check, on the parsed file."""
    module = hf.parse(damaged(field_at("positions"), "<I", 1))
    with pytest.raises(hf.ValidationError, match="positions and mask are both input 1"):
        check(module)


def test_a_generation_below_version_6_is_refused():
    with pytest.raises(hf.ValidationError, match="need version 6"):
        check(replace(MODULE, version=5))
