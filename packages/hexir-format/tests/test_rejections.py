"""Every rule the reader enforces, one damaged file each, and a fuzzer for the rest."""

import pathlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hexir_format as hf
from hexir_format import (
    Command,
    Device,
    DType,
    Executable,
    Function,
    KernelKind,
    Module,
    Slot,
    TensorType,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures"


def patch(data: bytes, offset: int, fmt: str, *values) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, *values)
    return bytes(out)


def reject(data: bytes, match: str) -> hf.FormatError:
    with pytest.raises(hf.FormatError, match=match) as info:
        hf.parse(data)
    assert "\n" not in str(info.value)
    return info.value


def test_every_truncation_is_rejected(builtin):
    for length in range(len(builtin)):
        with pytest.raises(hf.FormatError):
            hf.parse(builtin[:length])


def test_too_short(builtin):
    reject(builtin[:10], "too short for the 24-byte header")


def test_bad_magic(builtin):
    reject(b"NOTHEXIR" + builtin[8:], "bad magic .* not a hexir module")


def test_unknown_version(builtin):
    e = reject(patch(builtin, 8, "<I", 7), "version 7 at offset 8 is not supported")
    assert (e.field, e.offset) == ("version", 8)


def test_unknown_flags(builtin):
    reject(patch(builtin, 12, "<I", 1), "flags 0x1 at offset 12")


def test_reserved_header(builtin):
    reject(patch(builtin, 20, "<I", 5), "reserved field at offset 20")


def test_section_count_does_not_fit(builtin):
    reject(patch(builtin, 16, "<I", 1000), "section_count 1000 .* past the end of the 488-byte")


def test_section_runs_past_end(builtin):
    e = reject(patch(builtin, 24 + 3 * 24 + 16, "<Q", 4096),
               r"section 3 \(executables\): offset 400 \+ size 4096 runs past the end of the "
               "488-byte file")
    assert e.offset == 24 + 3 * 24 + 8


def test_section_offset_huge(builtin):
    reject(patch(builtin, 24 + 8, "<Q", 2**63), "runs past the end")


def test_overlapping_sections(builtin):
    reject(patch(builtin, 24 + 2 * 24 + 8, "<Q", 320), "overlaps section 1 \\(program\\)")


def test_section_inside_table(builtin):
    reject(patch(builtin, 24 + 8, "<Q", 16), "inside the header and section table")


def test_misaligned_section(builtin):
    reject(patch(builtin, 24 + 2 * 24 + 8, "<Q", 340), "not 8-byte aligned")


def test_duplicated_section(builtin):
    reject(patch(builtin, 24 + 2 * 24, "<I", 2), r"section 2 \(program\): duplicates section 1")


def test_unknown_section_kind(builtin):
    reject(patch(builtin, 24 + 2 * 24, "<I", 9), "kind 9 at offset 72 is not a section")


def test_missing_section(builtin):
    data = patch(builtin, 16, "<I", 3)
    reject(data, "the executables section is missing")


def test_section_flags(builtin):
    reject(patch(builtin, 24 + 4, "<I", 2), "flags 0x2 at offset 28")


def test_symbols_size_not_multiple(builtin):
    reject(patch(builtin, 24 + 16, "<Q", 39), "symbols: size 39")


def test_name_without_terminator(builtin):
    reject(patch(builtin, 120, "32s", b"m" * 32), "no NUL terminator")


def test_empty_name(builtin):
    reject(patch(builtin, 120, "B", 0), "is empty")


def test_garbage_after_name(builtin):
    reject(patch(builtin, 120 + 30, "B", 7), "bytes after its terminator")


def test_non_utf8_name(builtin):
    reject(patch(builtin, 120, "B", 0xFF), "not UTF-8")


def test_symbol_program_offset(builtin):
    reject(patch(builtin, 120 + 32, "<I", 8), "program_offset 8 .* should be 0")


def test_command_operands_run_off_the_end(builtin):
    e = reject(patch(builtin, 160 + 4, "<I", 1000),
               "command at offset 160 claims 1000 operands and runs off the end")
    assert e.field == "operand_count"


def test_command_operand_count_overflow(builtin):
    reject(patch(builtin, 160 + 4, "<I", 0xFFFFFFFF), "runs off the end")


def test_unknown_command(builtin):
    reject(patch(builtin, 160, "<I", 99), "unknown kind 99")


def test_v4_command_in_v3(builtin):
    reject(patch(builtin, 160, "<I", hf.Op.COPY), "unknown kind 7 for version 3")


def test_wrong_operand_count(builtin):
    # ALLOC (third command, at program offset 64) claims 3 operands: its own two and the
    # next command's header, which then parses misaligned: the operand count is checked first.
    reject(patch(builtin, 160 + 64 + 4, "<I", 3), "alloc at offset 224 has 3 operands")


def test_dispatch_argc_mismatch(builtin):
    reject(patch(builtin, 160 + 88 + 16, "<Q", 5), "argc 5 needs 5 \\+ 2")


def test_missing_end(builtin):
    data = patch(builtin, 24 + 16 + 24, "<Q", 168)  # program loses its END
    reject(data, "without an END")


def test_program_bytes_outside_any_entry_point(builtin):
    data = patch(builtin, 24 + 16, "<Q", 0)  # no symbols: the commands belong to nobody
    reject(data, "bytes 0..176 \\(offset 160\\) belong to no entry point")


def test_executable_count_does_not_fit(builtin):
    reject(patch(builtin, 400, "<I", 2), "count 2 at offset 400 needs 168 bytes")


def test_executable_kind(builtin):
    reject(patch(builtin, 408 + 32, "<I", 55), "kind 55 .* not a known KernelKind")


def test_v4_kind_in_v3(builtin):
    reject(patch(builtin, 408 + 32, "<I", KernelKind.SOFTMAX), "not a version 3 kernel")


def test_executable_device(builtin):
    reject(patch(builtin, 408 + 36, "<I", 9), "device 9 .* not a known Device")


def test_v3_elem_size(builtin):
    reject(patch(builtin, 408 + 52, "<I", 4), "elem_size 4 .* f64 \\(8\\) only")


def test_image_runs_past_section(builtin):
    data = patch(builtin, 408 + 56, "<II", 8, 4096)
    reject(data, "image_offset 8 \\+ image_size 4096 runs past the end of the 88-byte")


def test_image_offset_without_size(builtin):
    reject(patch(builtin, 408 + 56, "<I", 8), "image_offset 8 with image_size 0")


def _v4() -> bytes:
    t = TensorType(DType.F32, (2, 2))
    return hf.build(Module(
        4, (Function("main", (Command.input(0, 0), Command.output(0, 0))),), b"",
        (Executable("relu_0", KernelKind.RELU, Device.CPU, (t, t)),),
        (Slot(Device.CPU, t),)))


def _section(data: bytes, kind: hf.SectionKind) -> hf.Section:
    return hf.parse_layout(data).section(kind)


def test_v4_slot_device():
    data = _v4()
    reject(patch(data, _section(data, hf.SectionKind.SLOTS).offset, "<I", 3),
           "slot 0: device 3")


def test_v4_slot_rank():
    data = _v4()
    reject(patch(data, _section(data, hf.SectionKind.SLOTS).offset + 12, "<I", 7),
           "rank 7 .* exceeds 6")


def test_v4_slot_dims_past_rank():
    data = _v4()
    reject(patch(data, _section(data, hf.SectionKind.SLOTS).offset + 16 + 16, "<Q", 3),
           "dimensions past rank 2")


def test_v4_argc():
    data = _v4()
    reject(patch(data, _section(data, hf.SectionKind.EXECUTABLES).offset + 8 + 40, "<I", 3),
           "argc 3 .* relu takes 1 inputs")


def test_v4_args_offset():
    data = _v4()
    reject(patch(data, _section(data, hf.SectionKind.EXECUTABLES).offset + 8 + 44, "<I", 10**6),
           "args_offset 1000000")


def test_v4_params_offset():
    data = _v4()
    base = _section(data, hf.SectionKind.EXECUTABLES).offset + 8
    reject(patch(data, base + 48, "<II", 0, 10**6), "params_offset 0 \\+ 1000000")


def test_v4_requires_slots_section():
    data = _v4()
    reject(patch(data, 16, "<I", 4), "the slots section is missing")


def test_v4_dtype():
    data = _v4()
    reject(patch(data, _section(data, hf.SectionKind.SLOTS).offset + 8, "<I", 9), "dtype 9")


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_random_corruption_raises_only_format_errors(data):
    builtin = (FIXTURES / "builtin.hxb").read_bytes()
    raw = bytearray(builtin if data.draw(st.booleans()) else _v4())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    try:
        module = hf.parse(bytes(raw))
    except hf.FormatError as e:
        assert str(e) and "\n" not in str(e)
    else:
        assert isinstance(module, Module)


def test_cpu_level_is_recorded_for_host_images_only():
    """Version 5 records the x86-64 level (1-4) a cpu kernel's host image needs; anything
    else there is damage, refused naming the field: a level outside 1-4 on a host image, and
    any level but 0 on a kernel with none (193 on an interpreted one was a fuzzer's find: the
    validator indexed the level's name with it)."""
    import struct

    import hexir_format as hf
    from hexir_format import Command, Device, DType, Executable, Function, KernelKind, Slot
    from hexir_format import TensorType as T

    m2 = T(DType.F64, (2, 2))

    def module(device, image, level):
        exe = Executable("relu_0", KernelKind.RELU, device, (m2, m2), (), image, (1, 1, 1),
                         (1, 1, 1), level)
        main = Function("main", (Command.input(0, 0), Command.alloc(1, 32),
                                 Command.dispatch(0, (0, 1)), Command.output(1, 0)))
        return hf.build(hf.Module(5, (main,), b"", (exe,), (Slot(device, m2),) * 2))

    assert hf.parse(module(Device.CPU, b"\x7fELF", 3)).executables[0].cpu_level == 3
    for device, image, level in ((Device.CPU, b"\x7fELF", 0), (Device.CPU, b"\x7fELF", 5),
                                 (Device.CUDA, b"//ptx", 2), (Device.CPU, None, 193)):
        data = module(device, image, 3 if level in (0, 5) else 0)
        table = hf.parse_layout(data).section(hf.SectionKind.EXECUTABLES)
        patched = bytearray(data)
        struct.pack_into("<I", patched, table.offset + 8 + 88, level)
        with pytest.raises(hf.FormatError, match=rf"cpu_level {level} at offset \d+; expected"):
            hf.parse(bytes(patched))
