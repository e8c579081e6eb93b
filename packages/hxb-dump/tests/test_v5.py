"""Version 5: entry points' input and output names, int32, int64 and bool types and
constants, and the generic kernel kind (`dump_samples.named`)."""

from __future__ import annotations

import json

import dump_samples
import hexir_format as hf
from conftest import block
from hexir_format import SectionKind


def test_signatures_name_inputs_and_outputs(dump, module_file):
    r = dump(module_file("named"))
    assert (r.rc, r.err) == (0, "")
    assert block(r.out, "version")[-1].startswith("  names        offset=")
    assert block(r.out, "slots")[1:] == [
        "  %0     cuda  2x3xi64", "  %1     cuda  3xf32", "  %2     cuda  2xi64",
        "  %3     cuda  3xi1", "  %4     cuda  2x3xi1", "  %5     cpu   2x3xi64"]
    program = block(r.out, "program")
    assert program[1] == "  main(ids: 2x3xi64, scale: 3xf32) -> (keep: 2x3xi1):"
    assert "  plain(2x3xi64) -> (2x3xi64):" in program  # an entry that names nothing


def test_integer_and_boolean_constants(dump, module_file):
    r = dump(module_file("named"), "--rodata")
    assert block(r.out, "rodata") == [
        "rodata  19 bytes (2 constants)",
        "  +0     16 bytes  2xi64  slot %2",
        "    +0     -4611686018427387904  7",  # every digit of an i64
        "  +16    3 bytes  3xi1  slot %3",
        "    +16    1  0  1",
    ]


def test_the_generic_kind_of_mixed_types(dump, module_file):
    assert block(dump(module_file("named")).out, "executables") == [
        "executables  (1)",
        "  keep_0           generic     cuda  2x3xi64, 3xf32, 2xi64, 3xi1 -> 2x3xi1",
        "    device image   213 bytes, PTX text (sm_90)   launch grid=(1,1,1) block=(6,1,1)",
    ]


def test_json(dump, module_file):
    facts = json.loads(dump(module_file("named"), "--json", "--rodata").out)
    main, plain = facts["functions"]
    assert (main["input_names"], main["output_names"]) == (["ids", "scale"], ["keep"])
    assert main["inputs"] == ["2x3xi64", "3xf32"]
    assert main["signature"] == "main(ids: 2x3xi64, scale: 3xf32) -> (keep: 2x3xi1)"
    assert (plain["input_names"], plain["output_names"]) == ([], [])
    assert [r["values"] for r in facts["rodata"]["ranges"]] == [[-2**62, 7], [True, False, True]]
    assert facts["slots"][3]["dtype"] == "i1" and facts["executables"][0]["kind"] == "generic"


def test_names_that_do_not_match_the_entry_are_listed_then_refused(dump, tmp_path):
    module = dump_samples.named()
    main = module.functions[0]
    short = hf.Function(main.name, main.commands, ("ids",), main.outputs)
    path = tmp_path / "short.hxb"
    path.write_bytes(hf.build(hf.Module(5, (short, module.functions[1]), module.rodata,
                                        module.executables, module.slots)))
    r = dump(path)
    assert r.rc == 1
    assert "  main(ids: 2x3xi64, 3xf32) -> (keep: 2x3xi1):" in r.out.splitlines()
    assert r.err == "hxb-dump: error: main: names 1 inputs but the entry has 2\n"


def test_a_damaged_names_section_shows_the_layout_and_the_field(dump, module_file):
    path = module_file("named")
    data = bytearray(path.read_bytes())
    at = hf.parse_layout(bytes(data)).section(SectionKind.NAMES).offset
    data[at + 8 + 4] = 2  # the first entry's role
    path.write_bytes(bytes(data))
    r = dump(path)
    assert r.rc == 1 and r.out.splitlines()[-1].startswith("  names        offset=")
    assert r.err == (f"hxb-dump: error: name 0: role 2 at offset {at + 12}; expected 0 (input) "
                     "or 1 (output)\n")
