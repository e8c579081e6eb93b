"""Damaged files: as much listing as is safe, then one error line and exit 1, never a
traceback."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dump_corruptions
import dump_samples
import hexir_format as hf
from dump_samples import BUILTIN

FULL_LISTING_LINES = 24  # the built-in fixture's listing without --rodata


def one_error(r, expect: str = "") -> str:
    """The single `hxb-dump: error:` line of a failed run."""
    assert r.rc == 1
    assert "Traceback" not in r.err
    lines = r.err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("hxb-dump: error: ")
    assert expect in lines[0]
    return lines[0]


@pytest.mark.parametrize("length", range(488))
def test_every_truncation_of_the_fixture(dump, builtin_bytes, tmp_path, length):
    path = tmp_path / "cut.hxb"
    path.write_bytes(builtin_bytes[:length])
    r = dump(path)
    one_error(r)
    lines = r.out.splitlines()
    assert lines[0] == f"{path}  ({length} bytes)"
    # every cut loses part of the last section, so the layout is rejected: size line only
    assert lines == lines[:1]


@pytest.mark.parametrize("c", dump_corruptions.V3, ids=lambda c: c.name)
def test_corrupted_fixture_field(dump, builtin_bytes, tmp_path, c):
    path = tmp_path / f"{c.name}.hxb"
    path.write_bytes(c.apply(builtin_bytes))
    r = dump(path)
    one_error(r, c.expect)
    assert r.out.splitlines()[0] == f"{path}  (488 bytes)"


def _v4_cases():
    data = hf.build(dump_samples.kernels())
    return [(data, c) for c in dump_corruptions.v4(data)]


@pytest.mark.parametrize("data, c", _v4_cases(), ids=lambda x: getattr(x, "name", ""))
def test_corrupted_v4_field(dump, tmp_path, data, c):
    path = tmp_path / f"{c.name}.hxb"
    path.write_bytes(c.apply(data))
    one_error(dump(path), c.expect)


def test_layout_survives_when_the_program_does_not(dump, builtin_bytes, tmp_path):
    """A broken command: the header and section table still print, nothing after them."""
    path = tmp_path / "bad.hxb"
    path.write_bytes(dump_corruptions.V3_BY_NAME["const-kind-unknown"].apply(builtin_bytes))
    r = dump(path)
    one_error(r, "unknown kind 99")
    assert r.out.splitlines()[1:] == [
        "version 3, flags 0x0, 4 sections",
        "  symbols      offset=120      size=40",
        "  program      offset=160      size=176",
        "  rodata       offset=336      size=64",
        "  executables  offset=400      size=88",
    ]


def test_a_dangling_reference_still_lists_everything(dump, builtin_bytes, tmp_path):
    """It parsed, so the whole listing is safe; the error comes after it."""
    bad = dump_corruptions.V3_BY_NAME["dispatch-executable"]
    path = tmp_path / "dangling.hxb"
    path.write_bytes(bad.apply(builtin_bytes))
    r = dump(path)
    one_error(r, "executable 1 is out of range")
    assert len(r.out.splitlines()) == FULL_LISTING_LINES
    assert "    dispatch  executable=1 argc=3 %0 %1 %2" in r.out.splitlines()


def test_json_reports_the_error_with_the_facts_it_has(dump, builtin_bytes, tmp_path):
    path = tmp_path / "cut.hxb"
    path.write_bytes(builtin_bytes[:300])
    r = dump(path, "--json")
    message = one_error(r)
    facts = json.loads(r.out)
    assert facts == {"file": str(path), "size": 300,
                     "error": message.removeprefix("hxb-dump: error: ")}


def test_text_file_is_not_a_module(dump):
    r = dump(__file__)
    one_error(r, "this is not a hexir module")


def test_missing_file(dump, tmp_path):
    r = dump(tmp_path / "absent.hxb")
    one_error(r, f"cannot read '{tmp_path / 'absent.hxb'}': No such file or directory")
    assert r.out == ""


def test_directory(dump, tmp_path):
    one_error(dump(tmp_path), "it is a directory, not a regular file")


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(module=st.sampled_from(["builtin", "kernels", "small"]),
       edits=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1,
                      max_size=4))
def test_random_byte_edits_never_escape(dump, tmp_path, module, edits):
    """Whatever bytes change, the outcome is a listing (exit 0) or one error line (exit 1)."""
    data = bytearray(BUILTIN.read_bytes() if module == "builtin"
                     else hf.build(dump_samples.MODULES[module]()))
    for at, value in edits:
        data[at % len(data)] = value
    path = tmp_path / "edited.hxb"
    path.write_bytes(bytes(data))
    r = dump(path)
    if r.rc != 0:
        one_error(r)
    for flag in ("--json", "--rodata"):
        assert dump(path, flag).rc == r.rc


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(module=st.sampled_from(["builtin", "kernels", "small"]), word=st.integers(min_value=0),
       value=st.one_of(st.integers(0, 16), st.integers(0, 2**32 - 1)))
def test_random_field_values_never_escape(dump, tmp_path, module, word, value):
    """A whole u32 field (count, offset, size, kind, operand) set to a small or huge value."""
    data = bytearray(BUILTIN.read_bytes() if module == "builtin"
                     else hf.build(dump_samples.MODULES[module]()))
    at = word * 4 % len(data)
    data[at:at + 4] = value.to_bytes(4, "little")
    path = tmp_path / "edited.hxb"
    path.write_bytes(bytes(data))
    r = dump(path)
    if r.rc != 0:
        one_error(r)


def _one_kernel(kind: hf.KernelKind, args: tuple[hf.TensorType, ...],
                params: tuple[float, ...]) -> bytes:
    """A v4 module: inputs -> one cpu kernel -> its destination as the output."""
    cpu = hf.Device.CPU
    commands = (*(hf.Command.input(i, i) for i in range(len(args) - 1)),
                hf.Command.alloc(len(args) - 1, args[-1].nbytes),
                hf.Command.dispatch(0, tuple(range(len(args)))),
                hf.Command.output(len(args) - 1, 0))
    exe = hf.Executable(f"{kind}_0", kind, cpu, args, params)
    return hf.build(hf.Module(4, (hf.Function("main", commands),), b"", (exe,),
                              tuple(hf.Slot(cpu, a) for a in args)))


X, V = hf.TensorType(hf.DType.F32, (2, 3)), hf.TensorType(hf.DType.F32, (3,))
SCALAR = hf.TensorType(hf.DType.F32, ())
KIND = hf.KernelKind


@pytest.mark.parametrize("kind, args, params, damaged", [
    (KIND.SOFTMAX, (X, X), (), True),  # the axis is required
    (KIND.SOFTMAX, (X, X), (-1.0,), True),  # and recorded non-negative
    (KIND.SOFTMAX, (X, X), (1.0,), False),
    (KIND.LAYER_NORM, (X, V, V, X), (-1e-5,), True),
    (KIND.LAYER_NORM, (X, V, V, X), (0.0,), False),  # epsilon 0 is allowed
    (KIND.REDUCE_SUM, (X, SCALAR), (0.0,), False),  # no axes: every axis
    (KIND.REDUCE_MAX, (X, X), (0.0,), True),  # ... so not "reduce nothing"
    (KIND.GELU, (X, X), (), False),
    (KIND.GELU, (X, X), (2.0,), True),
    (KIND.MATMUL, (X, X, X), (), True),  # inner dimensions differ
])
def test_a_kernel_is_damaged_exactly_when_the_runtime_refuses_it(dump, tmp_path, kind, args,
                                                                   params, damaged):
    """hxb-dump and the runtime apply one validator, hexir_format.validate."""
    path = tmp_path / "kernel.hxb"
    path.write_bytes(_one_kernel(kind, args, params))
    r = dump(path)
    problem = hf.signature_problem(kind, args, params)
    assert (problem is not None) == damaged
    if damaged:
        one_error(r, f"executable 0 ('{kind}_0'), args: {problem}")
    else:
        assert (r.rc, r.err) == (0, "")


def test_a_plan_offset_past_the_allocation_cap_is_refused(dump, tmp_path):
    """The mlp's plan with one offset moved to 2^40: a 1 TiB arena, which the runtime would
    refuse to allocate, so the dump refuses it too (one line), as the validator does."""
    module = hf.parse((dump_samples.BUILTIN.parent / "mlp-f32.hxb").read_bytes())
    (slot, _), *rest = module.placements
    path = tmp_path / "far.hxb"
    path.write_bytes(hf.build(replace(module, placements=((slot, 1 << 40), *rest))))
    line = one_error(dump(path), f"main [x86-64-v2]: plan: slot {slot} at offset {1 << 40} "
                                 "makes a call allocate")  # the x86-64-v2 variant's slot
    assert line.endswith("more than the cap of 17179869184 bytes")


def test_a_host_image_the_loader_would_refuse_is_refused(dump, tmp_path):
    """An unsupported relocation type in the mlp's first kernel that has relocations (its
    softmax calls libm): the runtime's loader would refuse it at the first call, so the dump
    (the same validator) refuses the file."""
    data = bytearray((dump_samples.BUILTIN.parent / "mlp-f32.hxb").read_bytes())
    images = (bytes(e.image) for e in hf.parse(bytes(data)).executables)
    image, obj, table = next((i, o, t) for i, o in ((i, hf.elf.parse_object(i)) for i in images)
                             for t in o.relocations if t.relocations)
    at = bytes(data).find(image) + obj.sections[table.index].offset + 8  # r_info's type
    data[at:at + 4] = (23).to_bytes(4, "little")  # R_X86_64_TPOFF32
    path = tmp_path / "tpoff.hxb"
    path.write_bytes(bytes(data))
    one_error(dump(path), "R_X86_64_TPOFF32 (23), which the loader does not support")
