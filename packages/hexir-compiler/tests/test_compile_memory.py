"""A compile frees its MLIR context before it makes the `.hxb`'s bytes, and one written to a
file never copies its weights into one buffer.

The context holds every attribute made in it -- an imported model's weights, twice where a
matmul's are packed -- so keeping it through the format's writer (which copies the read-only
data twice more) set the compile's peak memory; the dialect classes used to keep the last
context alive for the rest of the process.
"""

from __future__ import annotations

import gc
from pathlib import Path

import hexir_format as hf
from hexir_compiler import dialects, pipeline, serialize
from hexir_compiler.mlir import ir

MLP = Path(__file__).resolve().parents[3] / "examples" / "mlp.mlir"


def test_no_context_is_alive_when_the_hxb_is_built(monkeypatch):
    dialects.release()  # (an earlier test's context, if nothing else holds it)
    gc.collect()
    before = ir.Context._get_live_count()  # contexts other tests still hold
    alive = []
    build = serialize.build

    def watched(model: hf.Module) -> bytes:
        alive.append(ir.Context._get_live_count())
        return build(model)

    monkeypatch.setattr(serialize, "build", watched)
    image = pipeline.compile_file(MLP, pipeline.Options("hxb"))
    # none of the compile's own (the release may also free one an earlier test left behind)
    assert len(alive) == 1 and alive[0] <= before
    assert len(hf.parse(image).executables) == 4 * 3  # four kernels, x86-64-v2, -v3, -v4
    assert ir.Context._get_live_count() <= before


def test_a_module_written_to_a_file_never_joins_its_constants(monkeypatch, tmp_path):
    """`hexir -o` streams the read-only data from the constants' attributes to the file:
    joining it would hold a second copy of every weight next to the context's."""
    data = pipeline.compile_file(MLP, pipeline.Options("hxb"))

    def joined(self) -> bytes:
        raise AssertionError("the rodata was joined into one buffer")

    monkeypatch.setattr(serialize.Rodata, "join", joined)
    path = tmp_path / "mlp.hxb"
    with path.open("wb") as out:
        assert pipeline.compile_file(MLP, pipeline.Options("hxb"), out) is None
    assert path.read_bytes() == data
