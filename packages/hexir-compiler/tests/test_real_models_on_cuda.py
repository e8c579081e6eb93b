"""The real-model corpus (`real_models`) with every op on cuda, run through hexir_runtime on
the fake driver, whose launches execute each kernel's PTX (the runtime's tests/ptx_exec.py),
and matched with the cpu module on the same seeded inputs.

This is the cuda path users get, end to end on models people export: the fused kernels, the
NVVM lowering, libdevice, the parameter packing, the runtime's launches and copies.
Floats are held to the real-model test's tolerance (rtol 1e-3 / atol 1e-4, elementwise),
looser than the 1e-5 of the hand-written cuda programs (test_cuda_ptx) because the cuda
kernels sum in another order than the host code, and deep CNNs grow that rounding: measured
normwise (max |cuda - cpu| / max |cpu|), mobilenet_v2 1.3e-5 and shufflenet_v2 1.0e-5; the
transformers, recurrent taggers and the other CNNs 1e-8 to 4e-6. Integers match exactly.

Cost, measured on the 2-core machine under a load of 5-7 (compiling the cpu and the cuda
module, then the fake run): by default the six cheapest models that still cover each family
-- bert (masks through bool `where`), gpt2 with its KV cache, the Whisper-style encoder
(conv1d), ViT, squeezenet and resnet18 -- 19-55 s each, 3 minutes together (70 s of CPU).
HEXIR_FULL_TESTS=1 runs the whole corpus, about 16 minutes so: T5, CLIP, gpt2, llama,
mobilenet_v2 and shufflenet_v2 20-47 s each; the LSTM and GRU taggers, efficientnet_b0 and the
wide BERT 60-72 s (mostly compiling their many small kernels); resnet18 at 224x224 about 5.5
minutes, 4.5 of them its PTX run.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

for _needed in ("torch", "transformers", "torchvision"):
    if importlib.util.find_spec(_needed) is None:  # the full test environment has them all
        pytest.skip(f"the real-model corpus needs {_needed}", allow_module_level=True)

import hexir_compiler
import hexir_format as hf
import hexir_runtime
import real_models
from fake_driver import FakeDriver

#: Run by default (the rest with HEXIR_FULL_TESTS=1): one or two of each family, cheapest.
DEFAULT = ("bert", "gpt2_kv_cache", "whisper_encoder", "vit", "squeezenet", "resnet18")
FULL = os.environ.get("HEXIR_FULL_TESTS") == "1"


@pytest.mark.parametrize("name", [n for n in real_models.selected() if FULL or n in DEFAULT])
def test_cuda_on_the_fake_driver_matches_the_cpu(name):
    spec = real_models.MODELS[name]
    path = real_models.export(name)
    rng = np.random.default_rng(1)
    feeds = [i.draw(rng) for i in spec.inputs]
    cuda = hexir_compiler.compile(path, placement="cuda")
    assert all(e.device is hf.Device.CUDA and e.image is not None  # nothing left on the cpu
               for e in hf.parse(cuda).executables)
    with hexir_runtime.load(hexir_compiler.compile(path)) as cpu, \
            hexir_runtime.load(cuda, device="cuda", driver=FakeDriver()) as gpu:
        want, got = cpu.main(*feeds), gpu.main(*feeds)
    want = want if isinstance(want, tuple | list) else (want,)
    got = got if isinstance(got, tuple | list) else (got,)
    assert len(got) == len(want) == len(spec.outputs)
    for output, g, w in zip(spec.outputs, got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (output, g.shape, g.dtype, w.shape,
                                                           w.dtype)
        if w.dtype.kind == "f":
            assert np.ptp(w) > 1e-3, f"{output} is near-constant: the comparison would be void"
            np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4, err_msg=output)
        else:
            np.testing.assert_array_equal(g, w, err_msg=output)
