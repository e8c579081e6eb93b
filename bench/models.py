"""The model corpus: real architectures on Hexir's cpu against ONNX Runtime, in one run.

    python bench/models.py [--models=NAME,...|extra|text|sizes|more] [--quick]
                           [--threads=default,1] [--targets=default,x86-64-v3]
                           [--calls=200] [--block=10]
                           [--budget=20] [--baseline=DIR] [--clock=wall|cpu]

The corpus (random weights: nothing can be downloaded), built by the test suite's
`packages/hexir-compiler/tests/real_models.py` (its builders, its fixes for degenerate random
outputs) at benchmark sizes:
- torchvision at 1x3x224x224: ResNet-18, MobileNetV2, SqueezeNet 1.1, EfficientNet-B0,
  ShuffleNetV2 x1.0, ConvNeXt-Tiny, ViT-B/16;
- Hugging Face, small random configs (hidden 256, 4 layers, a 96-token vocabulary), batch 1
  x 128 tokens with padding in the mask: BERT, GPT-2, a Llama-style decoder (rotary, RMSNorm,
  grouped-query attention), T5's encoder; a Whisper-style encoder on 80 mels x 400 frames.
`--models=extra` runs fifteen more torchvision architectures at 224x224 instead (`EXTRA`:
ResNet-50, ResNeXt-50, DenseNet-121, GoogLeNet, AlexNet, SqueezeNet 1.0, MobileNetV3
Small/Large, MNASNet, EfficientNet-B1, RegNetX/Y-400MF, ShuffleNetV2 x0.5, Swin-T, ViT-B/32);
`--models=text` seven more Hugging Face ones at the corpus's text sizes (`TEXT`: DistilBERT,
RoBERTa, ALBERT, Qwen2, Mistral, Phi-3, GPT-NeoX); `--models=sizes` twelve at other sizes
(`SIZES`: ResNet-34, Wide ResNet-50-2, EfficientNetV2-S, RegNetY-800MF, MNASNet 0.5, VGG-11,
ResNet-18 on a batch of 4; BERT and GPT-2 at width 768 with 12 heads, BERT on 4 x 64 tokens,
a Llama-style decoder at 512 with 4:1 grouped-query attention, T5's encoder at 512);
`--models=more` forty-three more (`MORE`: OPT, BLOOM, Falcon, GPT-J, Gemma, Qwen3, GPTBigCode,
ELECTRA, DeBERTa-v2, MobileBERT, SqueezeBERT, ConvBERT, BART, T5, wav2vec 2.0, CLIP's vision
tower, DINOv2, BEiT, LeViT, PoolFormer, MobileViT, SegFormer, ConvNeXt V2, Inception v3,
ResNet-101, VGG-16, EfficientNet-B3, Swin V2-T, MaxViT-T, RegNetY-1.6GF, ShuffleNetV2 x2.0,
DenseNet-169, MNASNet 1.3, RegNetX-800MF, EfficientNet-B2, GPT-Neo (local attention), Phi,
StableLM, XLM-RoBERTa, MPNet's relative position buckets; token taggers of two LSTM, GRU or
bidirectional LSTM layers over 64 steps).
`--quick` runs the test suite's own tiny configurations instead (`real_models.selected()`:
64x64 images, 8 tokens): most of its time is compiling. The corpus took 10 minutes on this
2-core machine when quiet, compiling included (42 on a loaded one); `--models=` narrows it.

Each model is exported once into `build/models/<key>/` (the key hashes this file, real_models
and the torch/transformers versions), compiled for every `--targets` entry (`default` is the
compiler's default: a program per x86-64 level, of which the runtime runs this host's; with
`--baseline=DIR` also by another checkout's compiler: before and after in one run), and
then, for every `--threads` entry (`default`: each runtime its own default, `N`:
HEXIR_CPU_THREADS=N and ORT's intra-op threads N), measured in a fresh process (the cpu
pool's size is fixed per process): every Hexir result is checked against ONNX
Runtime's first (within rtol 1e-3 / atol 1e-4, as the tests hold them, or within twice ORT's
own rounding noise -- its results with its graph rewrites off against on, the ORT row's
`own`: a deep network drifts past 1e-4 in any f32 order), then the engines run
in interleaved blocks -- a wait until the process is idle (the last engine's pool stops
spinning: `settle`), untimed calls (`warm`), then `--block` calls each timed -- until each has
`--calls` timed calls or the model's `--budget` seconds are spent. A figure is the median of
an engine's calls, its ratio hexir / ORT, and its stability the slowest call over the median.
Then each engine runs alone, back to back (up to `--calls` calls, at least 20, in its share
of the budget), for issue 24's stability: the slowest call and the 99th percentile over the
median (its target: slowest <= 1.5x the median over 200 calls on a quiet machine).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "packages" / "hexir-compiler" / "tests"
sys.path.insert(0, str(TESTS))
import real_models  # noqa: E402  (the test suite's corpus builders)
from real_models import Input, Spec  # noqa: E402
from timing import settle, warm  # noqa: E402  (bench/timing.py, beside this file)

COMPILE = r"""
import sys, time
import hexir_compiler
target = None if sys.argv[2] == "default" else "cpu:" + sys.argv[2]
start = time.perf_counter()
image = hexir_compiler.compile(sys.argv[1], target=target)
sys.stderr.write(f"compile-seconds {time.perf_counter() - start:.3f}\n")
sys.stdout.buffer.write(image)
"""
RTOL, ATOL = 1e-3, 1e-4
#: A result outside RTOL/ATOL of ORT's still counts as right within this many times ORT's own
#: difference between its optimized and unoptimized graphs: a deep network's f32 sums (ResNet-
#: 101's 104 convolutions) drift by more than ATOL in any order -- against a float64
#: evaluation of its graph (onnx.reference), max errors 1.7e-4 (ORT), 1.9e-4 (ORT without
#: graph rewrites) and 1.8e-4 (Hexir) on logits of magnitude 0.5-1.7.
NOISE_FACTOR = 2.0

_IMAGE = (Input("pixel_values", (1, 3, 224, 224)),)
_TEXT = (Input("input_ids", (1, 128), "ids"), Input("attention_mask", (1, 128), "mask"))
MELS, FRAMES = 80, 400
_HIDDEN = {"max_position_embeddings": 128}


def _vision(name: str) -> Spec:
    return Spec(real_models._vision(name), _IMAGE, ("logits",))


#: name: the model at benchmark size.
CORPUS: dict[str, Spec] = {
    "resnet18": _vision("resnet18"),
    "mobilenet_v2": _vision("mobilenet_v2"),
    "squeezenet1_1": _vision("squeezenet1_1"),
    "efficientnet_b0": _vision("efficientnet_b0"),
    "shufflenet_v2": _vision("shufflenet_v2_x1_0"),
    "convnext_tiny": _vision("convnext_tiny"),
    "vit_b_16": _vision("vit_b_16"),
    "bert": Spec(functools.partial(real_models._bert, hidden_size=256, num_hidden_layers=4,
                                   num_attention_heads=4, intermediate_size=1024, **_HIDDEN),
                 _TEXT, ("last_hidden_state", "pooler_output")),
    "gpt2": Spec(functools.partial(real_models._gpt2, n_embd=256, n_layer=4, n_head=4,
                                   n_positions=128),
                 _TEXT, ("logits",), options={"use_cache": False}),
    "llama": Spec(functools.partial(real_models._llama, hidden_size=256, intermediate_size=688,
                                    num_hidden_layers=4, num_attention_heads=8,
                                    num_key_value_heads=4, **_HIDDEN),
                  _TEXT, ("logits",), options={"use_cache": False}),
    "t5_encoder": Spec(functools.partial(real_models._t5_encoder, d_model=256, d_kv=32,
                                         d_ff=1024, num_layers=4, num_heads=8),
                       _TEXT, ("last_hidden_state",)),
    "whisper_encoder": Spec(functools.partial(
        real_models._whisper_encoder, num_mel_bins=MELS, d_model=256, encoder_layers=4,
        encoder_attention_heads=4, encoder_ffn_dim=1024, max_source_positions=FRAMES // 2),
        (Input("input_features", (1, MELS, FRAMES)),), ("last_hidden_state",)),
}


#: More torchvision architectures, the same way (`--models=extra`, or by name): a wider sweep
#: than the corpus, for kernels the corpus lacks (GoogLeNet's stride-1 pools, DenseNet's
#: concatenations, MobileNetV3's hard-swish and squeeze-excitation, RegNet's and ResNeXt's
#: groups, Swin's windows, AlexNet's big heads).
EXTRA: dict[str, Spec] = {name: _vision(name) for name in (
    "resnet50", "resnext50_32x4d", "densenet121", "googlenet", "alexnet", "squeezenet1_0",
    "mobilenet_v3_small", "mobilenet_v3_large", "mnasnet1_0", "efficientnet_b1",
    "regnet_x_400mf", "regnet_y_400mf", "shufflenet_v2_x0_5", "swin_t", "vit_b_32")}


def _hf(model: str, config: str, **settings) -> Callable[[], object]:
    """A Hugging Face `model` class built from its `config` class with `settings`."""
    def build():
        t = real_models._transformers()
        return getattr(t, model)(getattr(t, config)(**settings))

    return build


_VOCAB = {"vocab_size": 96, **_HIDDEN}
_DECODER = {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
            "num_attention_heads": 8, "num_key_value_heads": 4, **_VOCAB}
_LOGITS = {"options": {"use_cache": False}}
#: More Hugging Face architectures at the corpus's text sizes (`--models=text`, or by name):
#: encoders with other embeddings and layer sharing (DistilBERT, RoBERTa, ALBERT), decoders
#: with other attention and MLP variants (Qwen2's biased projections, Mistral, Phi-3's fused
#: projections, GPT-NeoX's partial rotary and parallel residual).
TEXT: dict[str, Spec] = {
    "distilbert": Spec(_hf("DistilBertModel", "DistilBertConfig", dim=256, n_layers=4,
                           n_heads=4, hidden_dim=1024, **_VOCAB),
                       _TEXT, ("last_hidden_state",)),
    "roberta": Spec(_hf("RobertaModel", "RobertaConfig", hidden_size=256, num_hidden_layers=4,
                        num_attention_heads=4, intermediate_size=1024, vocab_size=96,
                        max_position_embeddings=160),  # its positions start past the pad id
                    _TEXT, ("last_hidden_state",)),
    "albert": Spec(_hf("AlbertModel", "AlbertConfig", hidden_size=256, embedding_size=128,
                       num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                       **_VOCAB), _TEXT, ("last_hidden_state",)),
    "qwen2": Spec(_hf("Qwen2ForCausalLM", "Qwen2Config", **_DECODER), _TEXT, ("logits",),
                  **_LOGITS),
    "mistral": Spec(_hf("MistralForCausalLM", "MistralConfig", **_DECODER), _TEXT,
                    ("logits",), **_LOGITS),
    "phi3": Spec(_hf("Phi3ForCausalLM", "Phi3Config", pad_token_id=0, **_DECODER), _TEXT,
                 ("logits",), **_LOGITS),
    "gpt_neox": Spec(_hf("GPTNeoXForCausalLM", "GPTNeoXConfig", hidden_size=256,
                         intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                         **_VOCAB), _TEXT, ("logits",), **_LOGITS),
}
_WIDE = (Input("input_ids", (1, 128), "ids"), Input("attention_mask", (1, 128), "mask"))
_BATCH = (Input("input_ids", (4, 64), "ids"), Input("attention_mask", (4, 64), "mask"))
#: The corpus's kinds at other sizes and depths (`--models=sizes`, or by name): the schedules
#: picked by shape (panels, attention tiles, conv blocks) met at shapes the corpus does not
#: have -- deeper and wider CNNs, a batch of four, BERT-base and GPT-2-small widths (768, 12
#: heads of 64), a Llama-style decoder with 4:1 grouped-query attention, T5 at 512.
SIZES: dict[str, Spec] = {
    **{name: _vision(name) for name in (
        "resnet34", "wide_resnet50_2", "efficientnet_v2_s", "regnet_y_800mf", "mnasnet0_5",
        "vgg11")},
    "resnet18_batch4": Spec(real_models._vision("resnet18"),
                            (Input("pixel_values", (4, 3, 224, 224)),), ("logits",)),
    "bert_768": Spec(functools.partial(real_models._bert, hidden_size=768, num_hidden_layers=2,
                                       num_attention_heads=12, intermediate_size=3072,
                                       **_HIDDEN),
                     _WIDE, ("last_hidden_state", "pooler_output")),
    "bert_batch4": Spec(CORPUS["bert"].build, _BATCH, ("last_hidden_state", "pooler_output")),
    "gpt2_768": Spec(functools.partial(real_models._gpt2, n_embd=768, n_layer=2, n_head=12,
                                       n_positions=128),
                     _WIDE, ("logits",), **_LOGITS),
    "llama_512": Spec(functools.partial(real_models._llama, hidden_size=512,
                                        intermediate_size=1376, num_hidden_layers=2,
                                        num_attention_heads=8, num_key_value_heads=2,
                                        **_HIDDEN),
                      _WIDE, ("logits",), **_LOGITS),
    "t5_512": Spec(functools.partial(real_models._t5_encoder, d_model=512, d_kv=64, d_ff=2048,
                                     num_layers=2, num_heads=8),
                   _WIDE, ("last_hidden_state",)),
}
_IMAGE_256 = (Input("pixel_values", (1, 3, 256, 256)),)
_AUDIO = (Input("input_values", (1, 16000)),)
#: Architectures none of the groups above has (`--models=more`, or by name), each for an
#: operation mix of its own: decoders with ALiBi (BLOOM), learned offset positions (OPT),
#: parallel attention (Falcon, GPT-J), GeGLU and scaled RMSNorm (Gemma), query/key norms
#: (Qwen3), multi-query attention (GPTBigCode); ELECTRA's narrow embeddings, DeBERTa-v2's
#: disentangled relative attention, MobileBERT's bottlenecks and NoNorm, SqueezeBERT's
#: grouped 1-D convolutions, ConvBERT's dynamic span convolutions, BART and T5 (encoders and
#: decoders with cross-attention); wav2vec 2.0 on a second of 16 kHz audio (seven strided
#: Conv1d, GroupNorm, a grouped positional Conv1d of width 128); vision transformers with
#: a relative position bias (BEiT), register-free DINOv2 at patch 14, LeViT's attention
#: biases and BatchNorm, CLIP's vision tower; MobileViT, SegFormer, ConvNeXt V2, PoolFormer,
#: MaxViT (unfolded patches, efficient attention, global response norm, pooling as token
#: mixer, grid attention); torchvision's Inception v3 at 299x299, ResNet-101, VGG-16,
#: EfficientNet-B3, Swin V2-T, RegNetY-1.6GF, ShuffleNetV2 x2.0; plain PyTorch recurrent
#: taggers (embedding, two LSTM or GRU layers of 256, or bidirectional LSTM ones of 128, 64
#: steps, a linear head on each), unrolled step by step by the frontend.
MORE: dict[str, Spec] = {
    "opt": Spec(_hf("OPTForCausalLM", "OPTConfig", hidden_size=256, ffn_dim=1024,
                    num_hidden_layers=4, num_attention_heads=4, word_embed_proj_dim=256,
                    **_VOCAB), _TEXT, ("logits",), **_LOGITS),
    "bloom": Spec(_hf("BloomForCausalLM", "BloomConfig", hidden_size=256, n_layer=4, n_head=8,
                      vocab_size=96), _TEXT, ("logits",), **_LOGITS),
    "falcon": Spec(_hf("FalconForCausalLM", "FalconConfig", hidden_size=256,
                       num_hidden_layers=4, num_attention_heads=8, **_VOCAB),
                   _TEXT, ("logits",), **_LOGITS),
    "gptj": Spec(_hf("GPTJForCausalLM", "GPTJConfig", n_embd=256, n_layer=4, n_head=8,
                     rotary_dim=16, vocab_size=96, n_positions=128),
                 _TEXT, ("logits",), **_LOGITS),
    "gemma": Spec(_hf("GemmaForCausalLM", "GemmaConfig", head_dim=32, **_DECODER), _TEXT,
                  ("logits",), **_LOGITS),
    "qwen3": Spec(_hf("Qwen3ForCausalLM", "Qwen3Config", head_dim=32, **_DECODER), _TEXT,
                  ("logits",), **_LOGITS),
    "electra": Spec(_hf("ElectraModel", "ElectraConfig", embedding_size=128, hidden_size=256,
                        num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                        **_VOCAB), _TEXT, ("last_hidden_state",)),
    "deberta_v2": Spec(_hf("DebertaV2Model", "DebertaV2Config", hidden_size=256,
                           num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                           relative_attention=True, pos_att_type=["p2c", "c2p"],
                           position_buckets=64, max_relative_positions=-1, **_VOCAB),
                       _TEXT, ("last_hidden_state",)),
    "bart": Spec(_hf("BartModel", "BartConfig", d_model=256, encoder_layers=2,
                     decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                     encoder_ffn_dim=1024, decoder_ffn_dim=1024, **_VOCAB),
                 _TEXT, ("last_hidden_state",), **_LOGITS),
    "wav2vec2": Spec(_hf("Wav2Vec2Model", "Wav2Vec2Config", hidden_size=256,
                         num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
                     _AUDIO, ("last_hidden_state",)),
    "mobilevit": Spec(_hf("MobileViTModel", "MobileViTConfig"), _IMAGE_256,
                      ("last_hidden_state", "pooler_output")),
    "segformer": Spec(_hf("SegformerModel", "SegformerConfig"), _IMAGE, ("last_hidden_state",)),
    "convnextv2": Spec(_hf("ConvNextV2Model", "ConvNextV2Config"), _IMAGE,
                       ("last_hidden_state", "pooler_output")),
    "mobilebert": Spec(_hf("MobileBertModel", "MobileBertConfig", num_hidden_layers=4,
                           **_VOCAB), _TEXT, ("last_hidden_state",)),
    "squeezebert": Spec(_hf("SqueezeBertModel", "SqueezeBertConfig", hidden_size=256,
                            embedding_size=256, num_hidden_layers=4, num_attention_heads=4,
                            intermediate_size=1024, **_VOCAB), _TEXT, ("last_hidden_state",)),
    "convbert": Spec(_hf("ConvBertModel", "ConvBertConfig", hidden_size=256, embedding_size=128,
                         num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                         **_VOCAB), _TEXT, ("last_hidden_state",)),
    "gpt_bigcode": Spec(_hf("GPTBigCodeForCausalLM", "GPTBigCodeConfig", n_embd=256, n_layer=4,
                            n_head=8, n_positions=128, vocab_size=96), _TEXT, ("logits",),
                        **_LOGITS),
    "t5": Spec(_hf("T5Model", "T5Config", d_model=256, d_kv=32, d_ff=1024, num_layers=2,
                   num_heads=8, decoder_start_token_id=0, vocab_size=96),
               (*_TEXT, Input("decoder_input_ids", (1, 32), "ids")), ("last_hidden_state",),
               **_LOGITS),
    "clip_vision": Spec(_hf("CLIPVisionModel", "CLIPVisionConfig", hidden_size=384,
                            intermediate_size=1536, num_hidden_layers=4, num_attention_heads=6,
                            image_size=224, patch_size=32), _IMAGE,
                        ("last_hidden_state", "pooler_output")),
    "dinov2": Spec(_hf("Dinov2Model", "Dinov2Config", hidden_size=384, num_hidden_layers=4,
                       num_attention_heads=6, image_size=224, patch_size=14), _IMAGE,
                   ("last_hidden_state", "pooler_output")),
    "beit": Spec(_hf("BeitModel", "BeitConfig", hidden_size=384, num_hidden_layers=4,
                     num_attention_heads=6, intermediate_size=1536,
                     use_relative_position_bias=True), _IMAGE, ("last_hidden_state",)),
    "levit": Spec(_hf("LevitModel", "LevitConfig"), _IMAGE, ("last_hidden_state",)),
    "poolformer": Spec(_hf("PoolFormerModel", "PoolFormerConfig"), _IMAGE,
                       ("last_hidden_state",)),
    "inception_v3": Spec(real_models._vision("inception_v3", init_weights=True),
                         (Input("pixel_values", (1, 3, 299, 299)),), ("logits",)),
    **{name: _vision(name) for name in (
        "resnet101", "vgg16", "efficientnet_b3", "swin_v2_t", "maxvit_t", "regnet_y_1_6gf",
        "shufflenet_v2_x2_0", "densenet169", "mnasnet1_3", "regnet_x_800mf",
        "efficientnet_b2")},
    "gpt_neo": Spec(_hf("GPTNeoForCausalLM", "GPTNeoConfig", hidden_size=256, num_layers=4,
                        num_heads=8, attention_types=[[["global", "local"], 2]],
                        window_size=64, **_VOCAB), _TEXT, ("logits",), **_LOGITS),
    "phi": Spec(_hf("PhiForCausalLM", "PhiConfig", hidden_size=256, intermediate_size=1024,
                    num_hidden_layers=4, num_attention_heads=8, **_VOCAB),
                _TEXT, ("logits",), **_LOGITS),
    "stablelm": Spec(_hf("StableLmForCausalLM", "StableLmConfig", hidden_size=256,
                         intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
                         num_key_value_heads=4, **_VOCAB), _TEXT, ("logits",), **_LOGITS),
    **{name: Spec(_hf(model, config, hidden_size=256, intermediate_size=1024,
                      num_hidden_layers=4, num_attention_heads=4, vocab_size=96,
                      max_position_embeddings=130), _TEXT, ("last_hidden_state",))
       for name, model, config in (("xlm_roberta", "XLMRobertaModel", "XLMRobertaConfig"),
                                   ("mpnet", "MPNetModel", "MPNetConfig"))},
    **{name: Spec(real_models._recurrent(kind, embed=128, hidden=hidden, batch_first=True,
                                         bidirectional=both),
                  (Input("ids", (1, 64), "ids"),), ("scores",))
       for name, kind, hidden, both in (("lstm", "LSTM", 256, False), ("gru", "GRU", 256, False),
                                        ("bilstm", "LSTM", 128, True))},
}
GROUPS = {"extra": EXTRA, "text": TEXT, "sizes": SIZES, "more": MORE}


def corpus(quick: bool) -> dict[str, Spec]:
    if quick:
        return {name: real_models.MODELS[name] for name in real_models.selected()}
    return CORPUS | EXTRA | TEXT | SIZES | MORE


def export(name: str, spec: Spec, quick: bool) -> Path:
    """The model's ONNX file, exported once (the tiny ones into the test suite's cache)."""
    if quick:
        return real_models.export(name)
    key = real_models.key(Path(__file__))
    return real_models.export_spec(spec, REPO / "build" / "models" / key / f"{name}.onnx")


def compile_with(path: Path, target: str, packages: Path | None) -> tuple[bytes, float]:
    """The .hxb of `path` for `target` by this checkout's compiler or the one under
    `packages` (another checkout's packages/ directory), and the seconds it took."""
    env = dict(os.environ)
    if packages is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in sorted(packages.glob("*/src")))
    done = subprocess.run([sys.executable, "-c", COMPILE, str(path), target], env=env,
                          capture_output=True)
    if done.returncode:
        lines = done.stderr.decode(errors="replace").strip().splitlines() or ["(no message)"]
        raise RuntimeError(lines[-1])
    seconds = float(done.stderr.decode().rsplit("compile-seconds ", 1)[1].split()[0])
    return done.stdout, seconds


@dataclasses.dataclass
class Job:
    """What one measuring process does (sent to it as JSON)."""

    onnx: str
    inputs: str  # an .npz of the feeds, by input name
    names: list[str]  # the model's inputs in order
    images: dict[str, str]  # label: .hxb path
    threads: int  # 0: each runtime's default
    calls: int
    block: int
    budget: float
    clock: str


def measure(job: Job) -> dict:
    """Check every image against ORT, then time the engines interleaved (module docstring).
    Runs in its own process: HEXIR_CPU_THREADS is set before the runtime makes its pool."""
    import onnxruntime

    import hexir_runtime

    with np.load(job.inputs) as saved:
        feeds = {name: saved[name] for name in job.names}
    options = onnxruntime.SessionOptions()
    if job.threads:
        options.intra_op_num_threads = job.threads
    session = onnxruntime.InferenceSession(job.onnx, options, providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    engines = {"ORT": lambda: session.run(None, feeds)}
    # ORT's own rounding noise: its results with its graph rewrites off (no fused or
    # reordered sums), as far from its optimized ones as another correct f32 order may be
    plain = onnxruntime.SessionOptions()
    plain.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    noise = [np.abs(a - b).max() if b.dtype.kind == "f" else 0.0 for a, b in zip(
        onnxruntime.InferenceSession(job.onnx, plain, providers=["CPUExecutionProvider"])
        .run(None, feeds), want, strict=True)]
    checks: dict[str, dict] = {"ORT": {"max_abs_diff": 0.0, "ok": True,
                                       "noise": float(max(noise, default=0.0))}}
    modules = []
    for label, path in job.images.items():
        module = hexir_runtime.load(path)
        modules.append(module)
        args = tuple(feeds.values())
        got = module.main(*args)
        got = got if isinstance(got, tuple | list) else (got,)
        diff, ok = 0.0, len(got) == len(want)
        for g, w, n in zip(got, want, noise, strict=False):
            g = np.asarray(g)
            ok = ok and g.shape == w.shape
            if ok and w.dtype.kind == "f":
                err = float(np.abs(g - w).max())
                diff = max(diff, err)
                ok = ok and (bool(np.allclose(g, w, rtol=RTOL, atol=ATOL))
                             or err <= NOISE_FACTOR * float(n))
            elif ok:
                ok = bool(np.array_equal(g, w))
        checks[label] = {"max_abs_diff": diff, "ok": ok}
        engines[label] = lambda m=module, a=args: m.main(*a)
    clock = time.process_time if job.clock == "cpu" else time.perf_counter
    times: dict[str, list[float]] = {label: [] for label in engines}
    order = list(engines)
    start = time.perf_counter()
    rounds = 0
    while min(len(t) for t in times.values()) < job.calls and (
            rounds < 2 or time.perf_counter() - start < job.budget):
        for label in order[rounds % len(order):] + order[:rounds % len(order)]:
            call = engines[label]
            settle()
            warm(call)
            for _ in range(min(job.block, job.calls - len(times[label]))):
                before = clock()
                call()
                times[label].append(clock() - before)
        rounds += 1
    alone = {}
    for label, call in engines.items():  # back to back, as issue 24's stability is defined
        settle()
        warm(call)
        alone[label] = []
        deadline = time.perf_counter() + job.budget / len(engines)
        while len(alone[label]) < job.calls and (len(alone[label]) < 20
                                                 or time.perf_counter() < deadline):
            before = clock()
            call()
            alone[label].append(clock() - before)
    for module in modules:
        module.close()
    return {"engines": {label: {"calls": len(t), "median": statistics.median(t),
                                "slowest": max(t), "alone": _spread(alone[label]),
                                **checks[label]}
                        for label, t in times.items()}}


def _spread(times: list[float]) -> dict:
    """Back-to-back calls' stability: the slowest and the 99th percentile over the median."""
    median = statistics.median(times)
    return {"calls": len(times), "slowest": max(times) / median,
            "p99": float(np.percentile(times, 99)) / median}


def run_job(job: Job) -> dict:
    """`measure(job)` in a fresh process with the job's thread setting."""
    env = dict(os.environ)
    env.pop("HEXIR_CPU_THREADS", None)
    if job.threads:
        env["HEXIR_CPU_THREADS"] = str(job.threads)
    done = subprocess.run([sys.executable, __file__, "--measure"],
                          input=json.dumps(dataclasses.asdict(job)), env=env, text=True,
                          capture_output=True)
    if done.returncode:
        lines = done.stderr.strip().splitlines() or ["(no message)"]
        raise RuntimeError(lines[-1])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    if argv == ["--measure"]:
        print(json.dumps(measure(Job(**json.loads(sys.stdin.read())))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None,
                        help="comma-separated names, `extra` for every EXTRA one (default: "
                             "the corpus)")
    parser.add_argument("--quick", action="store_true",
                        help="the test suite's tiny configurations instead")
    parser.add_argument("--targets", default="default,x86-64-v3")
    parser.add_argument("--threads", default="default,1",
                        help="thread settings, each measured in its own process")
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--calls", type=int, default=200, help="timed calls per engine")
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--budget", type=float, default=20.0,
                        help="seconds of timing per model and thread setting (at least two "
                             "rounds of blocks run)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: the process's CPU time (with --threads=1, what a busy "
                             "machine's other processes barely disturb)")
    args = parser.parse_args(argv)
    models = corpus(args.quick)
    names = [n for m in args.models.split(",") for n in GROUPS.get(m, [m])] \
        if args.models else [n for n in models if n not in EXTRA | TEXT | SIZES | MORE]
    unknown = [n for n in names if n not in models]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; expected some of "
                     f"{', '.join(models)}")
    settings = [0 if t == "default" else int(t) for t in args.threads.split(",")]
    import onnxruntime

    load = os.getloadavg()
    print(f"onnxruntime {onnxruntime.__version__}; {os.cpu_count()} cores; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}; up to {args.calls} calls per "
          f"engine in blocks of {args.block}, engines interleaved, {args.budget:g} s per "
          f"model and setting")
    header = "| model | engine | compile s |"
    rule = "| --- | --- | ---: |"
    for t in settings:
        name = "default threads" if not t else f"{t} thread{'s' * (t != 1)}"
        header += (f" {name}: ms | / ORT | slowest / median | calls | back to back: slowest,"
                   " p99 / median (calls) |")
        rule += " ---: | ---: | ---: | ---: | ---: |"
    print(header + " max abs diff |")
    print(rule + " ---: |", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            _model(name, models[name], args, settings, Path(scratch))
    return 0


def _model(name: str, spec: Spec, args, settings: list[int], scratch: Path) -> None:
    """Export, compile, measure and print one model's rows."""
    try:
        path = export(name, spec, args.quick)
    except Exception as err:  # noqa: BLE001  (an export failure is a row, not the end)
        print(f"| {name} | export failed: {str(err).splitlines()[0]} |", flush=True)
        return
    rng = np.random.default_rng(1)
    feeds = scratch / f"{name}.npz"
    np.savez(feeds, **{i.name: i.draw(rng) for i in spec.inputs})
    images, compile_s = {}, {"ORT": math.nan}
    compilers = [("hexir", None)]
    if args.baseline is not None:
        compilers.append(("before", args.baseline / "packages"))
    for target in args.targets.split(","):
        for who, packages in compilers:
            label = f"{who} {target}"
            try:
                image, compile_s[label] = compile_with(path, target, packages)
            except RuntimeError as err:
                print(f"| {name} | {label} | compile failed: {err} |", flush=True)
                continue
            images[label] = scratch / f"{name}.{label.replace(' ', '.')}.hxb"
            images[label].write_bytes(image)
    results = []
    for threads in settings:
        job = Job(str(path), str(feeds), [i.name for i in spec.inputs],
                  {k: str(v) for k, v in images.items()}, threads, args.calls, args.block,
                  args.budget, args.clock)
        try:
            results.append(run_job(job)["engines"])
        except RuntimeError as err:
            print(f"| {name} | measuring failed ({threads or 'default'} threads): {err} |",
                  flush=True)
            return
    for label in ["ORT", *images]:
        row = f"| {name} | {label} | " + ("-" if label == "ORT" else f"{compile_s[label]:.1f}")
        for engines in results:
            e, ort = engines[label], engines["ORT"]["median"]
            a = e["alone"]
            row += (f" | {e['median'] * 1e3:.2f} | {e['median'] / ort:.2f} | "
                    f"{e['slowest'] / e['median']:.2f} | {e['calls']} | "
                    f"{a['slowest']:.2f}, {a['p99']:.2f} ({a['calls']})")
        e = results[0][label]
        row += (f" | own {e['noise']:.1e} |" if label == "ORT" else
                f" | {e['max_abs_diff']:.1e}{'' if e['ok'] else ' WRONG'} |")
        print(row, flush=True)
    for image in images.values():
        image.unlink()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
