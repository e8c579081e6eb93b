"""Version 6's strings: the string table, `str` types, string constants (handles, each with
the string it names), library kernels with their params named, and `--image` on one
(`dump_samples.strings`, and the checked-in `fixtures/strnorm.hxb`)."""

from __future__ import annotations

import json

from conftest import block
from dump_samples import FIXTURES


def test_the_string_table_is_listed_quoted_escaped_and_cut(dump, module_file):
    r = dump(module_file("strings"))
    assert (r.rc, r.err) == (0, "")
    table = block(r.out, "strings")
    assert table[:4] == ["strings  (20)", '  #0     "monday"', '  #1     "say \\"hi\\"\\n"',
                         '  #2     "' + "é" * 60 + '"... (70 characters)']
    assert len(table) == 1 + 16 + 1
    assert table[-1] == "  ... 4 more (--rodata lists every one)"
    everything = block(dump(module_file("strings"), "--rodata").out, "strings")
    assert len(everything) == 1 + 20 and everything[-1] == '  #19    "word16"'


def test_string_slots_constants_and_library_kernels(dump, module_file):
    r = dump(module_file("strings"), "--rodata")
    assert block(r.out, "slots")[1:3] == ["  %0     cpu   4xstr", "  %1     cpu   1xstr"]
    assert block(r.out, "program")[1] == "  main(x: 4xstr) -> (upper: 3xstr, lower: 3xstr):"
    assert block(r.out, "rodata") == [
        "rodata  8 bytes (2 constants)",
        "  +0     8 bytes  1xstr  slot %1",
        '    +0     #0 "monday"',
        "  +8     0 bytes  0xstr  slot %2",
    ]
    assert block(r.out, "executables") == [
        "executables  (2)",
        "  string_normalizer library     cpu   4xstr, 1xstr -> 3xstr",
        "    params         case_change_action=UPPER is_case_sensitive=1",
        "    library        string_normalizer (the runtime's own code, no image)",
        "  string_normalizer library     cpu   4xstr, 0xstr -> 3xstr",
        "    params         case_change_action=LOWER is_case_sensitive=0",
        "    library        string_normalizer (the runtime's own code, no image)",
    ]


def test_json_holds_every_string_and_the_named_params(dump, module_file):
    facts = json.loads(dump(module_file("strings"), "--json", "--rodata").out)
    assert len(facts["strings"]) == 20 and facts["strings"][1] == 'say "hi"\n'
    assert [s["name"] for s in facts["sections"]][-1] == "strings"
    exe = facts["executables"][0]
    assert (exe["kind"], exe["image"], exe["params"]) == (
        "library", None, {"case_change_action": "UPPER", "is_case_sensitive": 1})
    assert facts["rodata"]["ranges"][0]["strings"] == ["monday"]


def test_image_of_a_library_kernel_is_refused_in_one_line(dump, tmp_path):
    r = dump(FIXTURES / "strnorm.hxb", "--image", "string_normalizer", "-o", tmp_path / "x")
    assert r.rc == 1 and list(tmp_path.iterdir()) == []
    assert r.err == ("hxb-dump: error: kernel 'string_normalizer' is the runtime's library "
                     "function string_normalizer and has no image\n")


def test_a_handle_that_names_no_string_is_refused_with_the_facts_shown(dump, module_file,
                                                                        tmp_path):
    import hexir_format as hf
    from dump_samples import strings

    module = strings()
    bad = tmp_path / "bad.hxb"
    bad.write_bytes(hf.build(hf.Module(6, module.functions, (99).to_bytes(8, "little"),
                                       module.executables, module.slots,
                                       strings=module.strings)))
    r = dump(bad, "--rodata")
    assert r.rc == 1
    assert r.err == ("hxb-dump: error: main: command 1 (const at offset 256), rodata_offset: "
                     "string constant slot 1: element 0 is handle 99; expected 0 to 19, the "
                     "module's 20 strings\n")
    assert '    +0     #99 (no such string)' in r.out
