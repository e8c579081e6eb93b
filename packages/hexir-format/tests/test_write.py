"""`write`: a module streamed to a file, its read-only data from the caller's pieces, gives
exactly `build`'s bytes, wherever the file starts."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest

import hexir_format as hf
from conftest import FIXTURES


def compiled() -> hf.Module:
    """The built-in program as hexir compiles it by default (three variants, rodata)."""
    return hf.parse((FIXTURES / "builtin-cpu.hxb").read_bytes())


def test_streamed_pieces_give_the_built_bytes():
    module = compiled()
    data = bytes(module.rodata)
    assert len(data) > 16  # the cut below splits it unevenly, mid-constant
    pieces = [data[:5], memoryview(data)[5:16], bytearray(data[16:]), b""]
    out = io.BytesIO()
    written = hf.write(replace(module, rodata=b""), out, rodata=pieces)
    assert out.getvalue() == hf.build(module) and written == len(out.getvalue())
    assert hf.parse(out.getvalue()) == module


def test_written_after_other_bytes_the_module_is_the_same():
    """Offsets are the module's own: padding counts from where the module starts."""
    module = compiled()
    out = io.BytesIO()
    out.write(b"abc")
    hf.write(module, out)
    assert out.getvalue()[3:] == hf.build(module)


def test_the_rodata_given_twice_is_refused():
    module = compiled()
    with pytest.raises(hf.FormatError, match="given twice"):
        hf.write(module, io.BytesIO(), rodata=[b"x"])
