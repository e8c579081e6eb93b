"""Real exports (the corpus of `real_models`) compiled by Hexir and held to ONNX Runtime.

Each model -- Hugging Face BERT, GPT-2 with and without its KV cache, a Llama-style decoder
(rotary embeddings, RMSNorm, grouped-query attention), T5's encoder, CLIP's text model, a
Whisper-style encoder, ViT; torchvision's resnet18, mobilenet_v2, squeezenet, shufflenet_v2,
efficientnet_b0; LSTM and GRU taggers -- is compiled for the cpu, run by hexir_runtime on
seeded random inputs (token ids, attention masks with padding, images), and compared with
ONNX Runtime on the same inputs: floats within rtol 1e-3 / atol 1e-4, integers exactly.
The outputs are first checked to vary (a near-constant output would match anything).
HEXIR_FULL_MODELS=1 adds bigger configurations. Exports are cached (see `real_models`).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

for _needed in ("torch", "onnxruntime", "transformers", "torchvision"):
    if importlib.util.find_spec(_needed) is None:  # the full test environment has them all
        pytest.skip(f"the real-model corpus needs {_needed}", allow_module_level=True)

import hexir_runtime
import onnxruntime

import hexir_compiler
import real_models


@pytest.mark.parametrize("name", real_models.selected())
def test_matches_onnx_runtime(name):
    spec = real_models.MODELS[name]
    path = real_models.export(name)
    rng = np.random.default_rng(1)
    feeds = {i.name: i.draw(rng) for i in spec.inputs}
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    module = hexir_runtime.load(hexir_compiler.compile(path))
    got = module.main(*(feeds[i.name] for i in spec.inputs))
    got = got if isinstance(got, tuple | list) else (got,)
    assert len(got) == len(want) == len(spec.outputs)
    for output, g, w in zip(spec.outputs, got, want, strict=True):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (output, g.shape, g.dtype, w.shape,
                                                           w.dtype)
        if w.dtype.kind == "f":
            assert np.ptp(w) > 1e-3, f"{output} is near-constant: the comparison would be void"
            np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4, err_msg=output)
        else:
            np.testing.assert_array_equal(g, w, err_msg=output)
