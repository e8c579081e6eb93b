"""Version 6's string tensors: the STRINGS section, the STRING element type (int64 handles into
the module's table) and LIBRARY kernels. What round-trips, and every refusal of the reader,
the writer and the validator, each one line naming what was expected, found and where."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest

import hexir_format as hf
from hexir_format import (
    Command,
    Device,
    DType,
    Executable,
    Function,
    KernelKind,
    Module,
    SectionKind,
    Slot,
    library,
)
from hexir_format import TensorType as T
from hexir_format import layout as L
from hexir_format.validate import check

STR = DType.STRING


def s(*shape: int) -> T:
    return T(STR, shape)


def strnorm(x=(4,), out=(3,), stopwords=("monday",), action=1.0, sensitive=0.0,
            strings=None, handles=None, exe_changes=None) -> Module:
    """`main(x) -> (y)`: one string normalizer, its stopwords a constant of handles into the
    module's strings (an empty list: a 0-byte constant)."""
    strings = tuple(stopwords) if strings is None else tuple(strings)
    handles = list(range(len(stopwords))) if handles is None else list(handles)
    rodata = struct.pack(f"<{len(handles)}q", *handles)
    exe = Executable("string_normalizer", KernelKind.LIBRARY, Device.CPU,
                     (s(*x), s(len(handles)), s(*out)), (action, sensitive))
    if exe_changes:
        exe = replace(exe, **exe_changes)
    slots = (Slot(Device.CPU, s(*x)), Slot(Device.CPU, s(len(handles))),
             Slot(Device.CPU, s(*out)))
    commands = (Command.input(0, 0), Command.const(1, 0, len(rodata)),
                Command.alloc(2, slots[2].type.static_nbytes), Command.dispatch(0, (0, 1, 2)),
                Command.output(2, 0))
    return Module(6, (Function("main", commands, ("x",), ("y",)),), rodata, (exe,), slots,
                  strings=strings)


def invalid(module: Module, match: str) -> hf.ValidationError:
    with pytest.raises(hf.ValidationError, match=match) as info:
        check(module)
    assert "\n" not in str(info.value)
    return info.value


def refused(data: bytes, match: str) -> hf.FormatError:
    with pytest.raises(hf.FormatError, match=match) as info:
        hf.parse(data)
    assert "\n" not in str(info.value)
    return info.value


def strings_at(data: bytes) -> int:
    section = hf.parse_layout(data).section(SectionKind.STRINGS)
    assert section is not None
    return section.offset


def patched(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


# ---- the element type, the section, the kind ------------------------------------------------

def test_string_is_a_version_6_element_type_of_int64_handles():
    assert (STR.value, str(STR), STR.numpy, STR.storage, STR.itemsize) == (
        6, "str", "str", "int64", 8)
    assert DType.from_name("str") is STR
    assert T.parse("1x6xstr") == s(1, 6)
    assert s(1, 6).nbytes == 48
    assert (SectionKind.STRINGS.value, str(SectionKind.STRINGS)) == (9, "strings")
    assert (KernelKind.LIBRARY.value, str(KernelKind.LIBRARY)) == (22, "library")
    assert STR not in hf.V5_DTYPES


@pytest.mark.parametrize("strings", [(), ("",), ("monday", "", "día", "\0nul", "😀" * 40)])
def test_strings_round_trip_byte_for_byte(strings):
    module = strnorm(strings=("monday", *strings))
    data = hf.build(module)
    parsed = hf.parse(data)
    assert parsed == module
    assert parsed.strings == ("monday", *strings)
    assert hf.build(parsed) == data
    assert hf.minimum_version(module) == 6
    check(parsed)


def test_the_section_is_written_only_when_there_are_strings():
    module = strnorm(stopwords=(), strings=())
    data = hf.build(module)
    assert hf.parse_layout(data).section(SectionKind.STRINGS) is None
    assert hf.parse(data).strings == ()
    check(hf.parse(data))


def test_the_section_layout():
    data = hf.build(strnorm(strings=("ab", "", "c")))
    at = strings_at(data)
    head, entry = L.size(L.StringsHeader), L.size(L.StringEntry)
    assert (head, entry) == (8, 8)
    assert struct.unpack_from("<II", data, at) == (3, 0)
    start = head + 3 * entry
    assert [struct.unpack_from("<II", data, at + head + n * entry) for n in range(3)] == [
        (start, 2), (start + 2, 0), (start + 2, 1)]
    assert data[at + start:at + start + 3] == b"abc"
    assert at % L.ALIGNMENT == 0


def test_records_cover_the_section():
    from hexir_format import records

    found = [r for r in records.records(hf.build(strnorm(strings=("a", "b")))) if r.kind in
             ("strings", "string")]
    assert [r.label for r in found] == ["strings", "string[0]", "string[1]"]


# ---- the writer -----------------------------------------------------------------------------

@pytest.mark.parametrize(("change", "message"), [
    (dict(strings=("a",), executables=(), functions=(), slots=()),
     "a string table \\(1 strings\\) needs version 6; this module is version 5"),
    (dict(strings=(), executables=()), "tensor type 4xstr needs version 6"),
    (dict(strings=(), slots=()), "library kernel 'string_normalizer' needs version 6"),
])
def test_the_writer_refuses_strings_below_version_6(change, message):
    module = strnorm(exe_changes=dict(args=(T(DType.F32, (4,)),) * 3)) \
        if "library" in message else strnorm()
    module = replace(module, version=5, **change)
    with pytest.raises(hf.FormatError, match=message):
        hf.build(module)


def test_the_writer_refuses_a_string_that_is_not_text():
    with pytest.raises(hf.FormatError, match="string 1 is bytes b'x'; expected a str"):
        hf.build(strnorm(strings=("a", b"x")))  # type: ignore[arg-type]
    with pytest.raises(hf.FormatError, match="string 0 cannot be UTF-8"):
        hf.build(strnorm(strings=("\udc80",)))


# ---- the reader -----------------------------------------------------------------------------

def test_a_count_that_does_not_fit():
    data = hf.build(strnorm(strings=("monday",)))
    at = strings_at(data)
    e = refused(patched(data, at, "<I", 2**32 - 1),
                f"strings: count 4294967295 at offset {at} needs 34359738368 bytes but the "
                "section has 22")
    assert (e.field, e.offset) == ("count", at)


def test_a_reserved_word():
    data = hf.build(strnorm())
    at = strings_at(data)
    refused(patched(data, at + 4, "<I", 7), f"strings: reserved field at offset {at + 4} is 7")


@pytest.mark.parametrize(("value", "field"), [(0, "offset"), (17, "offset"), (2**32 - 1, "offset")])
def test_a_damaged_offset(value, field):
    data = hf.build(strnorm(strings=("monday", "x")))
    at = strings_at(data) + 8 + 8  # string 1's entry
    e = refused(patched(data, at, "<I", value),
                f"string 1: 1 bytes at section offset {value} \\(entry at offset {at}\\); "
                "expected them at 30, inside the 31-byte section")
    assert (e.field, e.offset) == (field, at)


def test_a_size_past_the_end():
    data = hf.build(strnorm(strings=("monday",)))
    at = strings_at(data) + 8
    e = refused(patched(data, at + 4, "<I", 7),
                f"string 0: 7 bytes at section offset 16 \\(entry at offset {at}\\); expected "
                "them at 16, inside the 22-byte section")
    assert (e.field, e.offset) == ("size", at + 4)


def test_bytes_left_over():
    data = hf.build(strnorm(strings=("monday",)))
    at = strings_at(data) + 8
    e = refused(patched(data, at + 4, "<I", 5),
                f"strings: bytes 21..22 \\(offset {strings_at(data) + 21}\\) belong to no string")
    assert e.field == "size"


def test_invalid_utf8():
    data = bytearray(hf.build(strnorm(strings=("monday",))))
    at = strings_at(data) + 16
    data[at + 2] = 0xFF
    e = refused(bytes(data), f"string 0: its 6 bytes at offset {at} are not UTF-8 \\(byte 2: "
                             "invalid start byte\\)")
    assert (e.field, e.offset) == ("string", at + 2)


def _as_version_5(data: bytes) -> bytes:
    return patched(data, L.offset_of(L.Header, "version"), "<I", 5)


def test_version_5_has_no_strings_section():
    data = hf.build(strnorm())
    refused(_as_version_5(data), r"section \d \(strings\): kind 9 at offset \d+ is not a "
                                 "section of version 5")


def test_version_5_has_no_string_type_nor_library_kind():
    module = strnorm(stopwords=(), strings=())
    data = hf.build(module)
    e = refused(_as_version_5(data), r"dtype 6 \(str\) at offset \d+ needs version 6; this "
                                     "module is version 5")
    assert e.field == "dtype"
    no_strings = replace(module, slots=(), executables=(replace(
        module.executables[0], args=(T(DType.F32, (4,)),) * 3),))
    e = refused(_as_version_5(hf.build(no_strings)),
                r"executable 0 \(string_normalizer\): kind 22 \(library\) at offset \d+ needs "
                "version 6; this module is version 5")
    assert e.field == "kind"


# ---- the validator --------------------------------------------------------------------------

@pytest.mark.parametrize(("x", "out"), [((4,), (3,)), ((1, 6), (1, 4)), ((0,), (1,)),
                                        ((2,), (1,))])
def test_the_accepted_shapes(x, out):
    check(strnorm(x=x, out=out))


def test_empty_stopwords_a_zero_byte_constant_or_allocation():
    check(strnorm(stopwords=(), strings=()))
    module = strnorm(stopwords=(), strings=())
    commands = list(module.functions[0].commands)
    commands[1] = Command.alloc(1, 0)
    check(replace(module, functions=(replace(module.functions[0], commands=tuple(commands)),)))


def test_a_constant_handle_out_of_range():
    e = invalid(strnorm(stopwords=("a", "b"), handles=(1, 2)),
                r"main: command 1 \(const\), rodata_offset: string constant slot 1: element 1 "
                "is handle 2; expected 0 to 1, the module's 2 strings")
    assert (e.field, e.command) == ("rodata_offset", 1)
    invalid(strnorm(stopwords=("a",), strings=(), handles=(-1,)),
            "string constant slot 1: element 0 is handle -1, but the module has no strings")


def test_a_module_in_memory_below_version_6():
    invalid(replace(strnorm(), version=5), "strings, string tensors and library kernels need "
                                           "version 6; this module is version 5")


def test_a_string_slot_on_cuda():
    module = strnorm()
    slots = (module.slots[0], module.slots[1], replace(module.slots[2], device=Device.CUDA))
    e = invalid(replace(module, slots=slots),
                "slot 2, device: a 3xstr lives on cuda; string tensors live on the cpu")
    assert e.field == "device"


def test_a_string_into_a_compiled_kernel():
    image = b"\x7fELF"  # never looked at: the signature is refused first
    exe = Executable("upper", KernelKind.GENERIC, Device.CPU, (s(4), s(4)), image=image,
                     grid=(1, 1, 1), block=(1, 1, 1), cpu_level=2)
    module = replace(strnorm(), executables=(exe,))
    invalid(module, r"executable 0 \('upper'\), args: generic takes argument 0 of type 4xstr; "
                    "only library kernels take strings")
    relu = Executable("relu", KernelKind.RELU, Device.CPU, (s(4), s(4)))
    assert hf.signature_problem(KernelKind.RELU, relu.args, ()) == (
        "relu takes argument 0 of type 4xstr; only library kernels take strings")


def test_a_print_of_strings():
    module = strnorm()
    f = module.functions[0]
    module = replace(module, functions=(replace(f, commands=(*f.commands[:4],
                                                             Command.print(2, 1, 3))),))
    invalid(module, r"command 4 \(print\), slot: slot 2 is a 3xstr; PRINT shows numbers")


@pytest.mark.parametrize(("changes", "message"), [
    (dict(name="string_normaliser"),
     "library function 'string_normaliser' is not one of the runtime's \\(string_normalizer\\)"),
    (dict(image=b"code"), "image: library kernel 'string_normalizer' carries a 4-byte image"),
    (dict(device=Device.CUDA), "device: library kernel 'string_normalizer' is placed on cuda; "
                               "the runtime's library runs on the cpu"),
    (dict(params=(3.0, 0.0)), "library string_normalizer case_change_action is 3; expected 0 "
                              "\\(NONE\\), 1 \\(LOWER\\) or 2 \\(UPPER\\)"),
    (dict(params=(1.0, 0.5)), "is_case_sensitive is 0.5; expected 0 or 1"),
    (dict(params=(1.0,)), "has 1 params; expected 2 \\(case_change_action, is_case_sensitive\\)"),
    (dict(args=(s(4), s(1), T(DType.I64, (3,)))), "out is 3xi64; expected a rank-1 or 2 tensor of "
                                                  "str"),
    (dict(args=(s(4), s(1))), "takes 3 arguments \\(x, stopwords, out\\), not 2"),
    (dict(args=(s(4), s(1, 1), s(3))), "stopwords is 1x1xstr; expected a rank-1 tensor of str"),
    (dict(args=(s(2, 4), s(1), s(2, 3))), "x is 2x4xstr; a rank-2 one is \\[1, C\\]"),
    (dict(args=(s(4), s(1), s(1, 3))), "out is 1x3xstr; expected the rank of x \\(4xstr\\)"),
    (dict(args=(s(4), s(1), s(5))), "out keeps 5 strings; expected a fixed count from 1 to 4"),
    (dict(args=(s(4), s(1), s(0))), "out keeps 0 strings; expected a fixed count from 1 to 4"),
])
def test_a_library_kernel_that_does_not_fit(changes, message):
    module = strnorm(exe_changes=changes)
    e = invalid(module, message)
    assert e.field in ("args", "image", "device")


def test_the_library_table():
    f = library.FUNCTIONS["string_normalizer"]
    assert (f.args, f.params) == (("x", "stopwords", "out"),
                                  ("case_change_action", "is_case_sensitive"))
    assert f.decode((2.0, 1.0)) == {"case_change_action": "UPPER", "is_case_sensitive": 1}
    assert library.problem("string_normalizer", (s(4), s(0), s(3)), (0.0, 1.0)) is None
    assert hf.signature_problem(KernelKind.LIBRARY, (s(4), s(0), s(3)), (0.0, 1.0),
                                "string_normalizer") is None
