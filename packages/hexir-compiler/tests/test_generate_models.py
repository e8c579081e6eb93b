"""Text generation (issue 28) on real decoders: `hexir -generate` against transformers.

GPT-2 (eager attention) and a Llama-style decoder (rotary embeddings, RMSNorm, 4 query / 2
key-value heads; sdpa attention), small random configurations (real_models' sizes, 64
positions, every matrix redrawn N(0, 0.15): the default 0.02 gives near-uniform logits and a
constant greedy stream), are exported as users export a decoding step with its KV cache
(Optimum's names: input_ids, attention_mask [batch, past + seq], position_ids and
past_key_values.{i}.key/.value in; logits and present.{i}.key/.value out; batch, seq and
past dynamic) and compiled with `-generate`. The module's `generate` entry must give exactly
the tokens of transformers' greedy `model.generate(do_sample=False)` -- run by
`Module.generate` and by `hexir-run --entry=generate` in a subprocess -- for 20 new tokens
with no end-of-sequence token (fewer: a prefix of them), and stop right after the
end-of-sequence token where one is compiled in (`-generate=eos=ID`) or given to the call;
`on_token` sees each new token, and the module's `main` is still the step (held to ONNX
Runtime). Three compiles in all (each module is shared by the tests); exports are cached
beside real_models' (build/real-models/).
"""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from pathlib import Path

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
from hexir_compiler import cli

POSITIONS = 64
NEW = 20
#: The prompt, [1, 7] token ids below real_models.VOCAB.
PROMPT = np.array([[5, 17, 42, 8, 61, 23, 11]], np.int64)
#: name: (attention implementation, seed of the weights: one whose greedy stream varies)
MODELS = {"gpt2": ("eager", 7), "llama": ("sdpa", 0)}
#: Token ids in the configurations; generation has no end-of-sequence token unless a test
#: gives one.
_IDS = {"bos_token_id": 0, "eos_token_id": real_models.VOCAB - 1,
        "pad_token_id": real_models.VOCAB - 1}


def _build(name: str):
    """The torch model, seeded: the same weights on every call."""
    import torch

    t = real_models._transformers()
    attention, seed = MODELS[name]
    torch.manual_seed(seed)
    if name == "gpt2":
        model = t.GPT2LMHeadModel(real_models._gpt2_config(
            t, n_embd=64, n_positions=POSITIONS, attn_implementation=attention, **_IDS))
    else:
        model = real_models._llama(hidden_size=64, intermediate_size=128,
                                   max_position_embeddings=POSITIONS,
                                   attn_implementation=attention, **_IDS)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.15)
    model.generation_config.eos_token_id = None
    return model.eval()


@functools.cache
def export(name: str) -> Path:
    """The step model's ONNX file, exported on first use and cached
    (`real_models.export_decoder_step`)."""
    path = (real_models.ROOT / "build" / "real-models" / real_models.key(Path(__file__)) /
            f"generate_{name}.onnx")
    return path if path.exists() else real_models.export_decoder_step(_build(name), path)


@functools.cache
def expected(name: str, new: int = NEW, eos: int | None = None) -> np.ndarray:
    """transformers' greedy tokens, [1, 7 + new] (fewer after `eos`)."""
    import torch

    model = _build(name)
    ids = torch.from_numpy(PROMPT)
    extra = {"min_new_tokens": new} if eos is None else {"eos_token_id": eos}
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                             do_sample=False, **extra)
    return out.numpy()


def eos_token(name: str) -> int:
    """A token of the greedy stream first generated at its 6th new token or later: with it
    as the end of the sequence, generation stops part of the way."""
    new = expected(name)[0, PROMPT.shape[1]:]
    for k in range(5, NEW - 2):
        if new[k] not in new[:k]:
            return int(new[k])
    raise AssertionError(f"{name}: the greedy stream {new.tolist()} repeats itself from its "
                         "6th token: no token to end it with")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """name: the .hxb compiled by `hexir -emit=hxb -generate` (no end-of-sequence token),
    and "gpt2 eos": GPT-2's compiled by `hexir_compiler.compile(generate="eos=ID")`."""
    out = tmp_path_factory.mktemp("generate")
    paths = {}
    for name in MODELS:
        paths[name] = out / f"{name}.hxb"
        status = cli.main(["-emit=hxb", "-generate", f"-target={HOST_TARGET}", "-o",
                           str(paths[name]), str(export(name))])
        assert status == 0, f"hexir -generate {name}: exit status {status}"
    paths["gpt2 eos"] = out / "gpt2_eos.hxb"
    paths["gpt2 eos"].write_bytes(hexir_compiler.compile(
        export("gpt2"), emit="hxb", target=HOST_TARGET, generate=f"eos={eos_token('gpt2')}"))
    return paths


@pytest.fixture(scope="module")
def modules(built):
    loaded = {label: hexir_runtime.load(path) for label, path in built.items()}
    yield loaded
    for module in loaded.values():
        module.close()


def _hexir_run(hxb: Path, tmp: Path, new: int) -> np.ndarray:
    """`hexir-run --entry=generate` in a subprocess: its `sequences`."""
    np.save(tmp / "prompt.npy", PROMPT)
    done = subprocess.run(
        [sys.executable, "-m", "hexir_runtime", str(hxb), "--entry=generate", "-q",
         f"--input=input_ids=@{tmp / 'prompt.npy'}", f"--input=max_new_tokens=1xi64={new}",
         f"--output=@{tmp / 'out.npz'}"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"hexir-run: {done.stderr.strip()}"
    with np.load(tmp / "out.npz") as saved:
        return saved["sequences"]


def _same_tokens(got, want, what: str) -> None:
    got = np.asarray(got)
    assert got.dtype == np.int64 and got.shape == want.shape, (
        f"{what}: {got.dtype} {got.shape}, expected int64 {want.shape}")
    assert np.array_equal(got, want), (
        f"{what}: {got[0, PROMPT.shape[1]:].tolist()}\n"
        f"transformers: {want[0, PROMPT.shape[1]:].tolist()}")


def test_reference_stream_varies():
    """The greedy streams are informative: several distinct tokens, not one repeated."""
    for name in MODELS:
        new = expected(name)[0, PROMPT.shape[1]:]
        assert len(set(new.tolist())) >= 4, f"{name}: {new.tolist()}"


@pytest.mark.parametrize("name", MODELS)
def test_generate_gives_transformers_greedy_tokens(name, modules):
    got = modules[name].generate(PROMPT, max_new_tokens=NEW)
    _same_tokens(got, expected(name), f"{name} Module.generate")


@pytest.mark.parametrize("name", MODELS)
def test_hexir_run_generate_entry_writes_the_same_sequences(name, built, tmp_path):
    _same_tokens(_hexir_run(built[name], tmp_path, NEW), expected(name),
                 f"{name} hexir-run --entry=generate")


@pytest.mark.parametrize("name", MODELS)
def test_fewer_new_tokens_give_a_prefix(name, modules):
    for new in (1, 2, 7):
        _same_tokens(modules[name].generate(PROMPT, max_new_tokens=new),
                     expected(name)[:, :PROMPT.shape[1] + new], f"{name}, {new} new tokens")


def test_compiled_eos_stops_right_after_it(modules, built, tmp_path):
    eos = eos_token("gpt2")
    want = expected("gpt2", NEW, eos)
    assert want.shape[1] < PROMPT.shape[1] + NEW and want[0, -1] == eos
    _same_tokens(modules["gpt2 eos"].generate(PROMPT, max_new_tokens=NEW), want,
                 f"gpt2 -generate=eos={eos}, Module.generate")
    _same_tokens(_hexir_run(built["gpt2 eos"], tmp_path, NEW), want,
                 f"gpt2 -generate=eos={eos}, hexir-run")


@pytest.mark.parametrize("name", MODELS)
def test_eos_given_to_the_call_stops_right_after_it(name, modules):
    eos = eos_token(name)
    _same_tokens(modules[name].generate(PROMPT, max_new_tokens=NEW, eos_token_id=eos),
                 expected(name, NEW, eos), f"{name}, eos_token_id={eos}")


def test_on_token_sees_every_new_token_in_order(modules):
    seen = []
    got = modules["llama"].generate(PROMPT, max_new_tokens=NEW, on_token=seen.append)
    new = expected("llama")[0, PROMPT.shape[1]:]
    assert seen == new.tolist()
    _same_tokens(got, expected("llama"), "llama with on_token")


@pytest.mark.parametrize("name", MODELS)
def test_main_is_still_the_step_model(name, modules):
    """The module's `main` is the decoding step, held to ONNX Runtime at 4 cached positions
    (batch 1, 2 new tokens)."""
    layers, kv_heads, head = real_models.decoder_geometry(_build(name).config)
    rng = np.random.default_rng(0)
    past, seq = 4, 2
    feeds = {"input_ids": PROMPT[:, :seq],
             "attention_mask": np.ones((1, past + seq), np.int64),
             "position_ids": np.arange(past, past + seq, dtype=np.int64)[None]}
    for i in range(layers):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.{kv}"] = rng.standard_normal(
                (1, kv_heads, past, head)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(export(name)),
                                           providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    got = modules[name].main(*feeds.values())
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-3, atol=1e-4)
