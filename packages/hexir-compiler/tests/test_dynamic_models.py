"""Real exports with dynamic axes, compiled once and run at several sizes (issue 27).

Each model of the corpus (`real_models`) named below is exported as users export a served
model -- its batch axis dynamic, and a text model's sequence axis -- and compiled once, with
no `-input-shape`: the module's inputs are symbolic (`batchxseqxi64`). The one module then
runs at several batch sizes and sequence lengths, each call held to ONNX Runtime on the same
dynamic export and the same inputs (floats within rtol 1e-3 / atol 1e-4, integers exactly),
and returns outputs of the size the call produced. A call whose sizes disagree, or fall
outside what the model allows, is refused with one line naming the input and the symbol.
"""

from __future__ import annotations

import functools
import importlib.util

import numpy as np
import pytest

for _needed in ("torch", "onnxruntime", "transformers", "torchvision"):
    if importlib.util.find_spec(_needed) is None:  # the full test environment has them all
        pytest.skip(f"the real-model corpus needs {_needed}", allow_module_level=True)

import onnxruntime

import hexir_compiler
import hexir_runtime
import real_models
from conftest import HOST_TARGET
from hexir_format import parse
from hexir_runtime.errors import RuntimeFailure

#: (batch, sequence length) of each call; an image model's sequence length is moot.
SIZES = ((1, 3), (2, 8), (3, 13))
MODELS = ("encoder", "bert", "gpt2", "resnet18")


@functools.cache
def compiled(name: str) -> bytes:
    """The dynamic export's .hxb for the cpu, compiled once per session."""
    return hexir_compiler.compile(real_models.export(name, dynamic=True), target=HOST_TARGET)


@pytest.mark.parametrize("name", MODELS)
def test_one_module_runs_every_size(name):
    spec = real_models.MODELS[name]
    path = real_models.export(name, dynamic=True)
    model = parse(compiled(name))
    assert {s.name for s in model.symbols} >= set().union(
        *(axes.values() for axes in real_models.dynamic_axes(spec).values()))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    module = hexir_runtime.load(compiled(name))
    for batch, seq in SIZES:
        inputs = real_models.resized(spec, batch, seq)
        rng = np.random.default_rng(batch * 100 + seq)
        feeds = {i.name: i.draw(rng) for i in inputs}
        want = session.run(None, feeds)
        got = module.main(*(feeds[i.name] for i in inputs))
        got = got if isinstance(got, tuple | list) else (got,)
        for output, g, w in zip(spec.outputs, got, want, strict=True):
            g = np.asarray(g)
            where = f"{name} {output} at batch {batch}, seq {seq}"
            assert g.shape == w.shape and g.dtype == w.dtype, (where, g.shape, w.shape)
            if w.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4, err_msg=where)
            else:
                np.testing.assert_array_equal(g, w, err_msg=where)


def test_sizes_that_disagree_are_refused():
    spec = real_models.MODELS["bert"]
    module = hexir_runtime.load(compiled("bert"))
    rng = np.random.default_rng(0)
    ids = real_models.resized(spec, 2, 7)[0].draw(rng)
    mask = real_models.resized(spec, 2, 9)[1].draw(rng)
    with pytest.raises(RuntimeFailure) as caught:
        module.main(ids, mask)
    message = str(caught.value)
    assert "seq" in message and "attention_mask" in message and "input_ids" in message, message
    assert "\n" not in message


def test_a_size_past_the_models_limit_is_refused():
    """BERT's position embeddings have 32 rows, so the import holds `seq` to at most 32 (a
    Slice of them by the sequence length); a longer call is refused before it runs."""
    spec = real_models.MODELS["bert"]
    model = parse(compiled("bert"))
    (seq,) = [s for s in model.symbols if s.name == "seq"]
    assert seq.hi == 32
    module = hexir_runtime.load(compiled("bert"))
    inputs = real_models.resized(spec, 1, 33)
    rng = np.random.default_rng(0)
    with pytest.raises(RuntimeFailure, match="seq"):
        module.main(*(i.draw(rng) for i in inputs))


@pytest.mark.parametrize("name", ["lstm_tagger", "gru_tagger"])
def test_a_recurrence_takes_a_symbolic_batch_and_refuses_a_symbolic_sequence(name):
    """Hexir unrolls LSTM and GRU over their steps, so their sequence length must be static;
    their batch may be symbolic (the zero initial state is one row, broadcast)."""
    spec = real_models.MODELS[name]
    with pytest.raises(hexir_compiler.CompileError,
                       match="the sequence length is 'seq': Hexir unrolls a recurrence"):
        hexir_compiler.compile(real_models.export(name, dynamic=True), target=HOST_TARGET)
    path = real_models.export(name, dynamic=True, sequence=False)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    module = hexir_runtime.load(hexir_compiler.compile(path, target=HOST_TARGET))
    for batch in (1, 3):
        (ids,) = (i.draw(np.random.default_rng(batch)) for i in real_models.resized(
            spec, batch, spec.inputs[0].shape[1]))
        (want,) = session.run(None, {spec.inputs[0].name: ids})
        np.testing.assert_allclose(module.main(ids), want, rtol=1e-3, atol=1e-4)
