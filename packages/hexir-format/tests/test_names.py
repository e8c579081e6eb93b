"""Version 5's names section and element types: what round-trips, what the reader refuses
(one FormatError naming the field for each damaged field) and what the validator refuses."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hexir_format as hf
from hexir_format import Command, Device, DType, Function, Module, SectionKind, Slot
from hexir_format import TensorType as T
from hexir_format import layout as L

HEAD, ENTRY = L.size(L.NamesHeader), L.size(L.NameEntry)  # 8, 24


def named(inputs=("x", "größe"), outputs=("输出",), version=5) -> Module:
    """`main(x: 2x3xi64, größe: 3xi1) -> (输出: 2x3xi64)` (the output a COPY of x), and
    `plain(4xi32) -> (4xi32)`, which names nothing."""
    x, m, p = T(DType.I64, (2, 3)), T(DType.BOOL, (3,)), T(DType.I32, (4,))
    main = Function("main", (Command.input(0, 0), Command.input(1, 1), Command.copy(2, 0),
                             Command.output(2, 0)), inputs, outputs)
    plain = Function("plain", (Command.input(3, 0), Command.output(3, 0)))
    return Module(version, (main, plain), b"", (),
                  (Slot(Device.CPU, x), Slot(Device.CPU, m), Slot(Device.CPU, x),
                   Slot(Device.CPU, p)))


def names_at(data: bytes) -> int:
    return hf.parse_layout(data).section(SectionKind.NAMES).offset


def patch(data: bytes, at: int, fmt: str, *values) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, *values)
    return bytes(out)


def refused(data: bytes, field: str, match: str) -> hf.FormatError:
    with pytest.raises(hf.FormatError, match=match) as info:
        hf.parse(data)
    assert info.value.field == field and "\n" not in str(info.value)
    return info.value


# ---- round trips ---------------------------------------------------------------------------

def test_names_round_trip_with_unicode():
    module = named()
    data = hf.build(module)
    parsed = hf.parse(data)
    assert parsed == module and hf.build(parsed) == data
    main, plain = parsed.functions
    assert (main.inputs, main.outputs) == (("x", "größe"), ("输出",))
    assert (plain.inputs, plain.outputs) == ((), ())
    assert [s.name for s in parsed.layout.sections][-1] == "names"
    assert [s.type.dtype for s in parsed.slots] == [DType.I64, DType.BOOL, DType.I64, DType.I32]


def test_the_names_section_layout():
    """Entries by (function, role, index), then the names' UTF-8 bytes back to back."""
    data = hf.build(named())
    at = names_at(data)
    assert struct.unpack_from("<II", data, at) == (3, 0)
    strings = at + HEAD + 3 * ENTRY
    entries = [struct.unpack_from("<IIIIQ", data, at + HEAD + n * ENTRY) for n in range(3)]
    sizes = [1, len("größe".encode()), len("输出".encode())]
    offsets = [HEAD + 3 * ENTRY, HEAD + 3 * ENTRY + 1, HEAD + 3 * ENTRY + 1 + sizes[1]]
    assert entries == [(0, 0, 0, sizes[0], offsets[0]), (0, 0, 1, sizes[1], offsets[1]),
                       (0, 1, 0, sizes[2], offsets[2])]
    assert data[strings:strings + sum(sizes)] == ("x" + "größe" + "输出").encode()


def test_a_module_without_names_has_no_names_section_and_can_be_version_4():
    module = named((), ())
    assert hf.minimum_version(module) == 5  # its integer and boolean slots
    data = hf.build(module)
    assert hf.parse_layout(data).section(SectionKind.NAMES) is None
    f32 = T(DType.F32, (2,))
    v4 = Module(4, (Function("main", (Command.input(0, 0), Command.output(0, 0))),), b"", (),
                (Slot(Device.CPU, f32),))
    assert hf.minimum_version(v4) == 4
    named_v4 = Module(4, (Function("main", v4.functions[0].commands, ("a",), ("b",)),), b"",
                      (), v4.slots)
    assert hf.minimum_version(named_v4) == 5


def test_the_validator_gives_the_names_in_the_signature():
    plan = hf.validate.check(hf.parse(hf.build(named())))
    main, plain = plan.entries["main"].signature, plan.entries["plain"].signature
    assert (main.input_names, main.output_names) == (("x", "größe"), ("输出",))
    assert str(main.inputs[1]) == "3xi1" and str(main.outputs[0]) == "2x3xi64"
    assert (plain.input_names, plain.output_names) == ((), ())


# ---- the writer refuses what the layout cannot hold ----------------------------------------

@pytest.mark.parametrize("inputs,outputs,match", [
    (("x", "x"), ("y",), "names two inputs alike: x, x"),
    (("x", ""), ("y",), "must be 1 to 4096 bytes without NUL"),
    (("x", "a\0b"), ("y",), "must be 1 to 4096 bytes without NUL"),
    (("x", "é" * 2049), ("y",), "must be 1 to 4096 bytes without NUL"),
])
def test_the_writer_refuses_names_the_layout_cannot_hold(inputs, outputs, match):
    with pytest.raises(hf.FormatError, match=match):
        hf.build(named(inputs, outputs))


def test_the_writer_refuses_names_and_integer_types_before_version_5():
    with pytest.raises(hf.FormatError, match="names its inputs or outputs, which only version 5"):
        hf.build(named(version=4))
    with pytest.raises(hf.FormatError, match="tensor type 2x3xi64 needs version 5"):
        hf.build(named((), (), version=4))


# ---- the reader refuses a damaged names section --------------------------------------------

def test_count_too_large():
    data = hf.build(named())
    e = refused(patch(data, names_at(data), "<I", 1000), "count",
                r"names: count 1000 at offset \d+ needs 24008 bytes but the section has")
    assert e.offset == names_at(data)
    refused(patch(data, names_at(data), "<I", 2**32 - 1), "count", "count 4294967295")


def test_nonzero_reserved():
    data = hf.build(named())
    e = refused(patch(data, names_at(data) + 4, "<I", 9), "reserved",
                r"names: reserved field at offset \d+ is 9, expected 0")
    assert e.offset == names_at(data) + 4


def test_function_out_of_range():
    data = hf.build(named())
    at = names_at(data) + HEAD
    refused(patch(data, at, "<I", 2), "function",
            r"name 0: function 2 at offset \d+ is not an entry point \(there are 2\)")


def test_role_2():
    data = hf.build(named())
    e = refused(patch(data, names_at(data) + HEAD + 4, "<I", 2), "role",
                r"name 0: role 2 at offset \d+; expected 0 \(input\) or 1 \(output\)")
    assert e.offset == names_at(data) + HEAD + 4


@pytest.mark.parametrize("entry,fmt,value,match", [
    (0, "<I", 1, "name 0: function 0, role 0, index 1 .* expected index 0 next"),
    (1, "<I", 0, "name 1: function 0, role 0, index 0 .* expected index 1 next"),
    (2, "<I", 1, "name 2: function 0, role 1, index 1 .* expected index 0 next"),
])
def test_an_index_out_of_order(entry, fmt, value, match):
    data = hf.build(named())
    e = refused(patch(data, names_at(data) + HEAD + entry * ENTRY + 8, fmt, value), "index",
                match)
    assert e.offset == names_at(data) + HEAD + entry * ENTRY + 8


def test_entries_out_of_function_and_role_order():
    """An output's name before an input's: (function, role) goes backwards."""
    data = hf.build(named(("x",), ("y",)))
    at = names_at(data) + HEAD
    swapped = patch(patch(data, at + 4, "<I", 1), at + ENTRY + 4, "<I", 0)
    refused(swapped, "index", "name 1: function 0, role 0, index 0 .* is out of order")


@pytest.mark.parametrize("field_at,fmt,value", [
    (16, "<Q", 0),  # offset 0: the header
    (16, "<Q", HEAD + 3 * ENTRY + 1),  # one byte late
    (12, "<I", 0),  # an empty name
    (12, "<I", 2),  # x is one byte long: the next name then starts in the wrong place
    (12, "<I", 10**6),  # past the section
    (12, "<I", hf.model.MAX_IO_NAME + 1),
])
def test_offset_or_size_wrong(field_at, fmt, value):
    data = hf.build(named())
    at = names_at(data) + HEAD
    refused(patch(data, at + field_at, fmt, value), "size",
            r"name \d: \d+ bytes at section offset \d+ \(field at offset \d+\); expected 1 to "
            r"4096 bytes at \d+, inside the section")


def test_a_later_name_out_of_place():
    data = hf.build(named())
    at = names_at(data) + HEAD + 2 * ENTRY
    refused(patch(data, at + 16, "<Q", HEAD + 3 * ENTRY), "size", "name 2: .* expected 1 to "
            r"4096 bytes at \d+, inside the section")


@pytest.mark.parametrize("raw,why", [
    (b"\xff", "not UTF-8"),
    (b"\x00", "a NUL"),
    (b"\x07", "a control character"),
])
def test_a_name_that_is_not_printable_utf8(raw, why):
    data = hf.build(named())
    strings = names_at(data) + HEAD + 3 * ENTRY
    e = refused(patch(data, strings, "1s", raw), "name",
                r"name 0: the name at offset \d+ is not printable UTF-8 distinct from the others")
    assert e.offset == strings, why


def test_a_name_cut_inside_a_character():
    """ß is two bytes in UTF-8: a size one short ends the name inside it."""
    data = hf.build(named(("x", "ß"), ("y",)))
    refused(patch(data, names_at(data) + HEAD + ENTRY + 12, "<I", 1), "name",
            "name 1: the name at offset")


def test_a_duplicate_name():
    data = hf.build(named(("a", "b"), ("y",)))
    strings = names_at(data) + HEAD + 3 * ENTRY
    refused(patch(data, strings + 1, "1s", b"a"), "name", "name 1: the name at offset .* "
            "distinct from the others")
    # an input and an output may share a name: only names of one role must differ
    assert hf.parse(patch(data, strings + 2, "1s", b"a")).functions[0].outputs == ("a",)


def test_trailing_bytes():
    data = hf.build(named())
    layout = hf.parse_layout(data)
    index = next(i for i, s in enumerate(layout.sections) if s.kind == SectionKind.NAMES)
    section = layout.sections[index]
    assert section.offset + section.size == len(data)  # the last section: it can grow
    longer = patch(data + bytes(8), 24 + index * 24 + 16, "<Q", section.size + 8)
    e = refused(longer, "size", rf"names: bytes {section.size}\.\.{section.size + 8} \(offset "
                                rf"{len(data)}\) belong to no name")
    assert e.offset == len(data)


def test_a_section_too_short_for_its_header():
    data = hf.build(named())
    layout = hf.parse_layout(data)
    index = next(i for i, s in enumerate(layout.sections) if s.kind == SectionKind.NAMES)
    with pytest.raises(hf.FormatError, match="names: a 8-byte record"):
        hf.parse(patch(data, 24 + index * 24 + 16, "<Q", 4))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_random_damage_to_the_names_section_is_a_format_error_or_a_module(data):
    raw = bytearray(hf.build(named()))
    start = names_at(bytes(raw))
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(start, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        module = hf.parse(bytes(raw))
    except hf.FormatError as e:
        assert e.field in ("count", "reserved", "function", "role", "index", "size", "name")
        assert "\n" not in str(e)
    else:
        for f in module.functions:
            assert all(n.isprintable() for n in (*f.inputs, *f.outputs))
            assert len(set(f.inputs)) == len(f.inputs)


# ---- version 4 has neither ----------------------------------------------------------------

def test_a_names_section_in_a_version_4_file():
    data = patch(hf.build(named()), 8, "<I", 4)
    refused(data, "kind", r"section 5 \(names\): kind 6 at offset 144 is not a section of "
                          "version 4")


@pytest.mark.parametrize("dtype", [DType.I32, DType.I64, DType.BOOL])
def test_an_integer_or_boolean_slot_in_a_version_4_file(dtype):
    module = Module(5, (Function("main", (Command.input(0, 0), Command.output(0, 0))),), b"",
                    (), (Slot(Device.CPU, T(dtype, (2,))),))
    data = patch(hf.build(module), 8, "<I", 4)
    e = refused(data, "dtype", rf"slot 0: dtype {int(dtype)} \({dtype}\) at offset \d+ needs "
                               "version 5; this module is version 4")
    assert e.offset == hf.parse_layout(data).section(SectionKind.SLOTS).offset + 8


# ---- the validator: one name per input and output -----------------------------------------

@pytest.mark.parametrize("inputs,outputs,match", [
    (("x",), ("y",), "main: names 1 inputs but the entry has 2"),
    (("x", "m", "z"), ("y",), "main: names 3 inputs but the entry has 2"),
    (("x", "m"), (), "main: names 0 outputs but the entry has 1"),
    ((), ("y",), "main: names 0 inputs but the entry has 2"),
    (("x", "m"), ("y", "z"), "main: names 2 outputs but the entry has 1"),
])
def test_the_validator_refuses_a_count_of_names_that_does_not_match(inputs, outputs, match):
    module = hf.parse(hf.build(named(inputs, outputs)))  # the layout holds any count
    with pytest.raises(hf.ValidationError, match=match) as info:
        hf.validate.check(module)
    assert (info.value.entry, info.value.field) == ("main", "names")
