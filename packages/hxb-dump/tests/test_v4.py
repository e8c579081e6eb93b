"""Version 4: slots, signatures, the new commands, typed rodata, argument types, params."""

from __future__ import annotations

import json
import struct

import pytest

import dump_samples
import hexir_format as hf
from conftest import block
from hexir_format import DType, Executable, KernelKind
from hexir_format import TensorType as T
from hxb_dump.facts import extents


def test_mlp_slots_signature_and_commands(dump, module_file):
    r = dump(module_file("mlp"))
    assert (r.rc, r.err) == (0, "")
    assert block(r.out, "version") == [
        "version 4, flags 0x0, 5 sections",
        "  symbols      offset=144      size=40",
        "  program      offset=184      size=440",
        "  rodata       offset=624      size=813056",
        "  executables  offset=813680   size=1248",
        "  slots        offset=814928   size=576",
    ]
    assert block(r.out, "slots")[:4] == [
        "slots  (9)", "  %0     cpu   8x784xf32", "  %1     cuda  8x784xf32",
        "  %2     cuda  784x256xf32"]
    program = block(r.out, "program")
    assert program[1] == "  main(8x784xf32) -> (8x10xf32):"
    assert "    input     slot=0 index=0" in program
    assert "    copy      dst=1 src=0" in program
    assert "    output    slot=8 index=0" in program
    assert program[-1] == "    end"
    assert block(r.out, "rodata") == ["rodata  813056 bytes (2 constants)"]


def test_mlp_executables(dump, module_file):
    exes = block(dump(module_file("mlp")).out, "executables")
    assert exes == [
        "executables  (4)",
        ("  linear_0         matmul      cuda  8x784xf32, 784x256xf32 -> 8x256xf32  8x256x784"
        "  elem=4B"),
        "    device image   213 bytes, PTX text (sm_90)   launch grid=(1,8,1) block=(16,16,1)",
        "  gelu_1           gelu        cuda  8x256xf32 -> 8x256xf32",
        "    params         approximate=tanh",
        "    device image   64 bytes, ELF cubin (sm_90)   launch grid=(8,1,1) block=(256,1,1)",
        ("  linear_2         matmul      cpu   8x256xf32, 256x10xf32 -> 8x10xf32  8x10x256"
        "  elem=4B"),
        "    device image   none -- the runtime supplies the body",
        "  softmax_3        softmax     cpu   8x10xf32 -> 8x10xf32",
        "    params         axis=1",
        "    device image   none -- the runtime supplies the body",
    ]


def test_params_by_name(dump, module_file):
    out = dump(module_file("kernels")).out
    params = [line.split(None, 1)[1] for line in block(out, "executables")
              if line.startswith("    params")]
    assert params == ["epsilon=1e-05", "permutation=0,2,1,3", "keepdims=true axes=2,3",
                      "keepdims=false axes=2,3", "keepdims=false axes=2,3"]
    assert "  main(2x3x4x5xf32) -> (2x4x1x1xf32, 2x4xf32, 2x4xf32):" in out.splitlines()
    assert (f"    device image   {len(dump_samples.FATBIN)} bytes, fatbin (PTX sm_90, ELF sm_90)"
            "   launch grid=(2,1,1) block=(128,1,1)") in out.splitlines()


def test_rodata_typed_by_the_slots_that_bind_it(dump, module_file):
    r = dump(module_file("small"), "--rodata")
    assert r.rc == 0
    assert block(r.out, "rodata") == [
        "rodata  64 bytes (2 constants)",
        "  +0     16 bytes  2x2xf32  slot %0",
        "    +0     3  1  2  2",
        "  +16    48 bytes  2x3xf64  slots %1 %4",
        "    +16    0.5  -1  0.001  2.5",
        "    +48    1e+20  7",
    ]


def test_two_entry_points(dump, module_file):
    out = dump(module_file("small")).out
    assert block(out, "symbols") == ["symbols", "  main                 program+0",
                                     "  other                program+208"]
    program = block(out, "program")
    assert "  main() -> ():" in program
    assert "  other(2x2xf32) -> (2x2xf32, 2x3xf64):" in program
    assert program.count("    end") == 2
    assert "    print     slot=1 rows=2 cols=3" in program
    assert "  add_0            add         cpu   2x2xf32, 2x2xf32 -> 2x2xf32  2x2x0  elem=4B" \
        in out.splitlines()


def test_json(dump, module_file):
    facts = json.loads(dump(module_file("small"), "--json", "--rodata").out)
    assert facts["version"] == 4
    assert facts["slots"][1] == {"index": 1, "device": "cpu", "type": "2x3xf64", "dtype": "f64",
                                 "shape": [2, 3], "bytes": 48}
    other = facts["functions"][1]
    assert (other["program_offset"], other["inputs"], other["outputs"]) == (
        208, ["2x2xf32"], ["2x2xf32", "2x3xf64"])
    assert [r["values"] for r in facts["rodata"]["ranges"]] == [
        [3, 1, 2, 2], [0.5, -1, 0.001, 2.5, 1e20, 7]]
    assert facts["executables"][0]["extents"] == {"m": 2, "n": 2, "k": 0, "elem_size": 4}


def test_json_params_and_images(dump, module_file):
    facts = json.loads(dump(module_file("mlp"), "--json").out)
    linear, gelu, _, softmax = facts["executables"]
    assert linear["image"] == {"size": 213, "flavour": "PTX text", "target": "sm_90"}
    assert (linear["grid"], linear["block"]) == ([1, 8, 1], [16, 16, 1])
    assert gelu["params"] == {"approximate": "tanh"}
    assert gelu["image"]["flavour"] == "ELF cubin"
    assert softmax["params"] == {"axis": 1}


def test_json_writes_nonfinite_values_as_strings(dump, tmp_path):
    a = T(DType.F64, (1, 3))
    module = hf.Module(4, (hf.Function("main", (hf.Command.const(0, 0, 24),)),),
                       struct.pack("<3d", float("nan"), float("inf"), -float("inf")),
                       (), (hf.Slot(hf.Device.CPU, a),))
    path = tmp_path / "nonfinite.hxb"
    path.write_bytes(hf.build(module))
    r = dump(path, "--json", "--rodata")
    assert r.rc == 0
    assert json.loads(r.out)["rodata"]["ranges"][0]["values"] == ["nan", "inf", "-inf"]
    assert "    +0     nan  inf  -inf" in dump(path, "--rodata").out.splitlines()


@pytest.mark.parametrize("kind, args, expected", [
    (KernelKind.MATMUL, ((8, 784), (784, 256), (8, 256)), (8, 256, 784)),
    (KernelKind.ADD, ((2, 3), (2, 3), (2, 3)), (2, 3, 0)),
    (KernelKind.RELU, ((4, 5), (4, 5)), (4, 5, 0)),
    (KernelKind.MATMUL, ((2, 8, 4), (2, 4, 8), (2, 8, 8)), None),  # batched: rank 3
    (KernelKind.ADD, ((2, 3), (1, 3), (2, 3)), None),  # broadcasting
    (KernelKind.SOFTMAX, ((2, 3), (2, 3)), None),  # not a version 3 kind
])
def test_extents_where_version_3_applies(kind, args, expected):
    exe = Executable("k", kind, hf.Device.CPU, tuple(T(DType.F32, s) for s in args))
    found = extents(exe)
    assert (None if found is None else (found["m"], found["n"], found["k"])) == expected


def test_rodata_ranges_that_cannot_be_read_are_listed_without_values(dump, tmp_path):
    """A CONST past the end of rodata, or binding a slot that does not exist: the listing
    shows the range untouched, and the error follows."""
    a = T(DType.F32, (2,))
    for command, line, error in [
        (hf.Command.const(0, 8, 8), "  +8     8 bytes  2xf32  slot %0  (outside rodata)",
         "rodata_offset: rodata_offset 8 + bytes 8 runs past the end of the 8-byte rodata"),
        (hf.Command.const(5, 0, 8), "  +0     8 bytes  untyped (no such slot)  slot %5",
         "slot: slot 5 is out of range; the module has 1 slots"),
    ]:
        module = hf.Module(4, (hf.Function("main", (command,)),), struct.pack("<2f", 1, 2), (),
                           (hf.Slot(hf.Device.CPU, a),))
        path = tmp_path / "bad.hxb"
        path.write_bytes(hf.build(module))
        r = dump(path, "--rodata")
        assert r.rc == 1
        assert block(r.out, "rodata") == ["rodata  8 bytes (1 constant)", line]
        assert r.err.splitlines() == [
            f"hxb-dump: error: main: command 0 (const at offset 184), {error}"]
