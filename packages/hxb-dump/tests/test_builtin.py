"""The checked-in built-in program lists exactly as the earlier tool listed it."""

from __future__ import annotations

import json

from dump_samples import BUILTIN

LISTING = """\
{path}  (488 bytes)
version 3, flags 0x0, 4 sections
  symbols      offset=120      size=40
  program      offset=160      size=176
  rodata       offset=336      size=64
  executables  offset=400      size=88

symbols
  main                 program+0

program
  main:
    const     slot=0 rodata_offset=0 bytes=32
    const     slot=1 rodata_offset=32 bytes=32
    alloc     slot=2 bytes=32
    dispatch  executable=0 argc=3 %0 %1 %2
    print     slot=2 rows=2 cols=2
    end

rodata  64 bytes (8 f64)
{values}
executables  (1)
  linear_0         matmul cpu     2x2x2  elem=8B
    device image   none -- the runtime supplies the body
"""
VALUES = "    +0     3  1  2  2\n    +32    1  5  5  2\n"


def test_listing(dump):
    r = dump(BUILTIN)
    assert (r.rc, r.err) == (0, "")
    assert r.out == LISTING.format(path=BUILTIN, values="")


def test_rodata_values_in_rows_of_four_at_their_byte_offsets(dump):
    r = dump(BUILTIN, "--rodata")
    assert r.rc == 0
    assert r.out == LISTING.format(path=BUILTIN, values=VALUES)


def test_json_has_the_same_facts(dump):
    r = dump(BUILTIN, "--json", "--rodata")
    assert r.rc == 0
    facts = json.loads(r.out)
    assert (facts["size"], facts["version"], facts["flags"]) == (488, 3, 0)
    assert [(s["name"], s["offset"], s["size"]) for s in facts["sections"]] == [
        ("symbols", 120, 40), ("program", 160, 176), ("rodata", 336, 64),
        ("executables", 400, 88)]
    (main,) = facts["functions"]
    assert (main["name"], main["program_offset"], main["signature"]) == ("main", 0,
                                                                         "main() -> ()")
    assert [(c["offset"], c["op"], list(c["args"].values()), c["slots"])
            for c in main["commands"]] == [
        (0, "const", [0, 0, 32], []),
        (32, "const", [1, 32, 32], []),
        (64, "alloc", [2, 32], []),
        (88, "dispatch", [0, 3], [0, 1, 2]),
        (136, "print", [2, 2, 2], []),
    ]
    (whole,) = facts["rodata"]["ranges"]
    assert whole["values"] == [3, 1, 2, 2, 1, 5, 5, 2]
    (exe,) = facts["executables"]
    assert exe == {
        "index": 0, "name": "linear_0", "kind": "matmul", "device": "cpu",
        "args": ["2x2xf64", "2x2xf64", "2x2xf64"], "params": {}, "raw_params": [],
        "extents": {"m": 2, "n": 2, "k": 2, "elem_size": 8}, "image": None,
        "grid": [0, 0], "block": [0, 0], "operands": [],
    }
    assert "error" not in facts
    assert facts["slots"] == [] and facts["symbols"] == []


def test_json_leaves_values_out_unless_asked(dump):
    facts = json.loads(dump(BUILTIN, "--json").out)
    assert "values" not in facts["rodata"]["ranges"][0]
