"""Real exports (the corpus of `real_models`) compiled by Hexir and held to ONNX Runtime.

Each model -- Hugging Face BERT, GPT-2 with and without its KV cache, a Llama-style decoder
(rotary embeddings, RMSNorm, grouped-query attention), T5's encoder, CLIP's text model, a
Whisper-style encoder, ViT; torchvision's resnet18, mobilenet_v2, squeezenet, shufflenet_v2,
efficientnet_b0; LSTM and GRU taggers -- is compiled for the cpu, run by hexir_runtime on
seeded random inputs (token ids, attention masks with padding, images), and compared with
ONNX Runtime on the same inputs: floats within rtol 1e-3 / atol 1e-4, integers exactly.
The outputs are first checked to vary (a near-constant output would match anything).
Each model's per-kernel profile (`Module.profile`, what `hexir-run --profile` prints) is
checked too: every kernel the call runs is listed, the kernels and the runtime's overhead
make up the call, and profiling changes no answer. Each model is compiled once per session.
HEXIR_FULL_TESTS=1 adds bigger configurations. Exports are cached (see `real_models`).
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
from hexir_format import KernelKind, Op


@functools.cache
def compiled(name: str) -> bytes:
    """The model's .hxb for the cpu, compiled once per session (the tests share it)."""
    return hexir_compiler.compile(real_models.export(name), target=HOST_TARGET)


@pytest.mark.parametrize("name", real_models.selected())
def test_matches_onnx_runtime(name):
    spec = real_models.MODELS[name]
    path = real_models.export(name)
    rng = np.random.default_rng(1)
    feeds = {i.name: i.draw(rng) for i in spec.inputs}
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    module = hexir_runtime.load(compiled(name))
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


CALLS = 20  # profiled calls: their median time is what the profile's shares are of


@pytest.mark.parametrize("name", real_models.selected())
def test_the_per_kernel_profile_covers_every_kernel(name):
    """`Module.profile` on each model: one row per DISPATCH the entry runs (all but the
    reshapes the runtime turns into views), in order, each with a time; the kernels' shares
    and the runtime's overhead make up the call; the table lists every kernel; and profiling
    leaves the module's answers as they were."""
    spec = real_models.MODELS[name]
    rng = np.random.default_rng(2)
    inputs = [i.draw(rng) for i in spec.inputs]
    with hexir_runtime.load(compiled(name)) as module:
        before = module.main(*inputs)
        p = module.profile("main", *inputs, calls=CALLS)
        after = module.main(*inputs)
        plan = module.prepare("main")._plan
        views = module._resident.program(plan).views  # reshapes run as views: no kernel
        executables = module._resident.plan.module.executables
    dispatches = [(i, executables[c.executable]) for i, c in enumerate(plan.commands)
                  if c.op is Op.DISPATCH]
    dispatched = [exe.name for i, exe in dispatches if i not in views]
    assert [k.name for k in p.kernels] == dispatched and dispatched
    assert all(exe.kind is KernelKind.RESHAPE for i, exe in dispatches if i in views)
    assert all(k.seconds > 0 and k.nbytes > 0 for k in p.kernels)
    # every convolution's work is counted (GFLOP/s against the peak), whatever its layout
    assert all(k.flops for k in p.kernels if k.name.startswith("conv")), \
        [(k.name, [a.shape for a in k.exe.args]) for k in p.kernels if not k.flops]
    assert p.call_seconds > 0 and p.calls == CALLS
    # (How the kernels' time compares with the call's is a measurement, not checked here: two
    # medians taken a moment apart on a shared machine; bench/models.py reports it.)
    assert p.overhead_seconds == pytest.approx(max(0.0, p.call_seconds - p.kernel_seconds))
    rows = str(p).splitlines()[-len(p.kernels):]
    assert [row.split()[0] for row in rows] == dispatched
    shares = sum(float(row.split()[2].rstrip("%")) for row in rows)
    assert shares == pytest.approx(100 * p.kernel_seconds / p.call_seconds,
                                   abs=0.05 * len(rows) + 0.1)
    before = before if isinstance(before, tuple | list) else (before,)
    after = after if isinstance(after, tuple | list) else (after,)
    for b, a, output in zip(before, after, spec.outputs, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=output)
