"""A corpus of real architectures, exported to ONNX as users export them (test_real_models).

Small random-config Hugging Face models (never `from_pretrained`: nothing is downloaded),
torchvision CNNs and PyTorch recurrent models, each exported by `torch.onnx.export(...,
dynamo=False, opset_version=17)` with static shapes and transformers' default attention
(sdpa). Random initialisation makes some outputs degenerate -- BatchNorm's running statistics
0/1 and zero-initialised heads give near-constant logits that any backend would "match" --
so BatchNorm statistics are drawn by a few seeded batches in train mode and all-zero weights
are redrawn.

Exports are cached under build/real-models/<hash of this file and the torch/transformers
versions>/, so a rerun exports nothing. `python real_models.py [NAME...]` exports (and prints
each path).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
VOCAB = 96


@dataclass(frozen=True)
class Input:
    """A graph input: `kind` is "float", "ids" (token ids below VOCAB), "mask" (an attention
    mask, 1s with some trailing 0s) or "ones" (an all-ones int64 mask)."""

    name: str
    shape: tuple[int, ...]
    kind: str = "float"
    #: The axis that is a sequence's length, which a dynamic export leaves dynamic (with the
    #: batch, axis 0); None: the default, axis 1 of token ids and masks, none of floats.
    seq_axis: int | None = None

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "float":
            return rng.standard_normal(self.shape).astype(np.float32)
        if self.kind == "ids":
            return rng.integers(0, VOCAB, self.shape).astype(np.int64)
        mask = np.ones(self.shape, np.int64)
        if self.kind == "mask":  # the second row's last third is padding
            mask[1 % self.shape[0], self.shape[1] - max(1, self.shape[1] // 3):] = 0
        return mask


@dataclass(frozen=True)
class Spec:
    build: Callable[[], object]  # the torch module, in eval mode
    inputs: tuple[Input, ...]
    outputs: tuple[str, ...]
    full: bool = False  # only with HEXIR_FULL_TESTS=1
    options: dict = field(default_factory=dict)  # keyword arguments of a Hugging Face model


def _torchvision():
    """torchvision, imported beside the CPU torch: its wheel's C ops are built for CUDA torch
    and fail to register `nms`; the models need none of them, so their two schemas are
    declared first when the library will not load (see TOOLCHAIN.md)."""
    import importlib.util

    import torch

    if "torchvision" not in sys.modules:
        location = importlib.util.find_spec("torchvision").submodule_search_locations[0]
        try:
            torch.ops.load_library(next(Path(location).glob("_C*.so")))
        except (OSError, RuntimeError, StopIteration):
            global _SCHEMAS
            _SCHEMAS = torch.library.Library("torchvision", "DEF")
            _SCHEMAS.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            _SCHEMAS.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
    import torchvision

    return torchvision


def _transformers():
    _torchvision()  # transformers imports torchvision when it is installed
    import transformers

    return transformers


def _settle(model, inputs: tuple[Input, ...]):
    """`model` with its degenerate random initialisation made informative, in eval mode:
    all-zero weights redrawn, BatchNorm statistics taken from seeded batches."""
    import torch

    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1 and not p.any():  # a zero-initialised head
                p.normal_(0, 0.1)
            elif p.dim() == 1 and name.endswith("bias") and not p.any():
                p.normal_(0, 0.02)
        if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules()):
            model.train()
            for m in model.modules():
                if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                    m.momentum = None  # the statistics are the batches' cumulative average
            for _ in range(3):
                model(*(torch.randn(8, *i.shape[1:]) for i in inputs))
    return model.eval()


# ---- Hugging Face ------------------------------------------------------------------------

def _bert(**config):
    t = _transformers()
    return t.BertModel(t.BertConfig(**{
        "vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 32,
        **config}))


def _keywords(model, spec: Spec):
    """A Hugging Face model called with its inputs by name (their positions in `forward`
    differ between models and releases) and returning the spec's outputs by name."""
    import torch

    class Keywords(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args):
            named = {i.name: a for i, a in zip(spec.inputs, args, strict=True)}
            out = self.model(**named, **spec.options)
            return tuple(out[name] for name in spec.outputs)

    return Keywords().eval()


def _gpt2_config(t, **config):
    return t.GPT2Config(**{"vocab_size": VOCAB, "n_positions": 32, "n_embd": 32, "n_layer": 2,
                           "n_head": 4, **config})


def _gpt2(**config):
    t = _transformers()
    return t.GPT2LMHeadModel(_gpt2_config(t, **config))


GPT2_PAST = 5


def _gpt2_cached():
    """One decoding step of GPT-2 with its KV cache: the cache's keys and values of the
    earlier steps come in as inputs, the grown ones go out."""
    import torch

    t = _transformers()
    config = _gpt2_config(t)
    model = t.GPT2LMHeadModel(config).eval()

    class Step(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, *past):
            cache = t.DynamicCache(config=config)
            for layer in range(config.n_layer):
                cache.update(past[2 * layer], past[2 * layer + 1], layer)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             past_key_values=cache, use_cache=True)
            grown = out.past_key_values
            return (out.logits, *(kv for layer in range(config.n_layer)
                                  for kv in (grown.layers[layer].keys,
                                             grown.layers[layer].values)))

    return Step().eval()


def _llama(**config):
    t = _transformers()
    return t.LlamaForCausalLM(t.LlamaConfig(**{
        "vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 32, **config}))


def _t5_encoder(**config):
    t = _transformers()
    return t.T5EncoderModel(t.T5Config(**{"vocab_size": VOCAB, "d_model": 32, "d_kv": 8,
                                          "d_ff": 64, "num_layers": 2, "num_heads": 4,
                                          **config}))


def _clip_text():
    t = _transformers()
    return t.CLIPTextModel(t.CLIPTextConfig(vocab_size=VOCAB, hidden_size=32,
                                            intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, max_position_embeddings=16,
                                            eos_token_id=VOCAB - 1))


WHISPER_MELS, WHISPER_FRAMES = 16, 16


def _whisper_encoder(**config):
    """Whisper's encoder (two stride-1/stride-2 Conv1d over mel frames, then a transformer
    encoder); its input has `num_mel_bins` x 2 `max_source_positions` frames."""
    t = _transformers()
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    return WhisperEncoder(t.WhisperConfig(**{
        "vocab_size": VOCAB, "num_mel_bins": WHISPER_MELS, "d_model": 32, "encoder_layers": 2,
        "encoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_layers": 1,
        "decoder_attention_heads": 4, "decoder_ffn_dim": 64,
        "max_source_positions": WHISPER_FRAMES // 2, **config}))


def _vit(**config):
    t = _transformers()
    return t.ViTModel(t.ViTConfig(**{"image_size": 32, "patch_size": 8, "hidden_size": 32,
                                     "num_hidden_layers": 2, "num_attention_heads": 4,
                                     "intermediate_size": 64, **config}))


# ---- torchvision and recurrent models ----------------------------------------------------

def _vision(name: str, **kwargs):
    def build():
        return getattr(_torchvision().models, name)(weights=None, **kwargs)
    return build


def _recurrent(kind: str, embed: int = 16, hidden: int = 24, **config):
    """Token ids -> embedding -> a two-layer `kind` -> a linear head on every step."""
    import torch

    def build():
        class Tagger(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                torch.manual_seed(0)
                self.embed = torch.nn.Embedding(VOCAB, embed)
                self.rnn = getattr(torch.nn, kind)(embed, hidden, num_layers=2, **config)
                width = 2 * hidden if config.get("bidirectional") else hidden
                self.head = torch.nn.Linear(width, 5)

            def forward(self, ids):
                x = self.embed(ids)
                y, _ = self.rnn(x if config.get("batch_first") else x.transpose(0, 1))
                return self.head(y)

        return Tagger()
    return build


def _encoder():
    """A transformer encoder layer as one writes it by hand (post-norm, GELU MLP), its heads
    split with the input's own sizes (`x.shape`), so an export with dynamic axes stays
    dynamic (torch.nn.TransformerEncoderLayer's traced export bakes the sequence length into
    a Reshape)."""
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self, width: int = 32, heads: int = 4) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.heads = heads
            self.qkv = torch.nn.Linear(width, 3 * width)
            self.out = torch.nn.Linear(width, width)
            self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.GELU(),
                                           torch.nn.Linear(2 * width, width))

        def forward(self, x):
            b, s, w = x.shape
            q, k, v = (t.reshape(b, s, self.heads, w // self.heads).transpose(1, 2)
                       for t in self.qkv(x).chunk(3, dim=-1))
            scores = (q @ k.transpose(-1, -2)) / (w // self.heads) ** 0.5
            mixed = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, w)
            x = self.norm1(x + self.out(mixed))
            return self.norm2(x + self.mlp(x))

    return Encoder()


_TEXT = (Input("input_ids", (2, 8), "ids"), Input("attention_mask", (2, 8), "mask"))
_IMAGE = (Input("pixel_values", (1, 3, 64, 64)),)
_PIXELS = (Input("pixel_values", (1, 3, 32, 32)),)

MODELS: dict[str, Spec] = {
    "encoder": Spec(_encoder, (Input("x", (2, 8, 32), seq_axis=1),), ("y",)),
    "bert": Spec(_bert, _TEXT, ("last_hidden_state", "pooler_output")),
    "gpt2": Spec(_gpt2, _TEXT, ("logits",), options={"use_cache": False}),
    "gpt2_kv_cache": Spec(_gpt2_cached, (
        Input("input_ids", (2, 1), "ids"), Input("attention_mask", (2, GPT2_PAST + 1), "mask"),
        *(Input(f"past_{kv}_{layer}", (2, 4, GPT2_PAST, 8)) for layer in range(2)
          for kv in ("key", "value"))),
        ("logits", *(f"present_{kv}_{layer}" for layer in range(2) for kv in ("key", "value")))),
    "llama": Spec(_llama, _TEXT, ("logits",), options={"use_cache": False}),
    "t5_encoder": Spec(_t5_encoder, _TEXT, ("last_hidden_state",)),
    "clip_text": Spec(_clip_text, _TEXT, ("last_hidden_state", "pooler_output")),
    "whisper_encoder": Spec(_whisper_encoder, (
        Input("input_features", (1, WHISPER_MELS, WHISPER_FRAMES)),), ("last_hidden_state",)),
    "vit": Spec(_vit, _PIXELS, ("last_hidden_state", "pooler_output")),
    "resnet18": Spec(_vision("resnet18"), _IMAGE, ("logits",)),
    "mobilenet_v2": Spec(_vision("mobilenet_v2"), _IMAGE, ("logits",)),
    "squeezenet": Spec(_vision("squeezenet1_1"), _IMAGE, ("logits",)),
    "shufflenet_v2": Spec(_vision("shufflenet_v2_x0_5"), _IMAGE, ("logits",)),
    "efficientnet_b0": Spec(_vision("efficientnet_b0"), _IMAGE, ("logits",)),
    "lstm_tagger": Spec(_recurrent("LSTM", bidirectional=True), (Input("ids", (2, 5), "ids"),),
                        ("scores",)),
    "gru_tagger": Spec(_recurrent("GRU", batch_first=True), (Input("ids", (2, 5), "ids"),),
                       ("scores",)),
    # bigger ones, with HEXIR_FULL_TESTS=1
    "resnet18_224": Spec(_vision("resnet18"), (Input("pixel_values", (1, 3, 224, 224)),),
                         ("logits",), full=True),
    "bert_wide": Spec(functools.partial(_bert, hidden_size=128, num_hidden_layers=4,
                                        intermediate_size=512, max_position_embeddings=64),
        (Input("input_ids", (2, 32), "ids"), Input("attention_mask", (2, 32), "mask")),
        ("last_hidden_state", "pooler_output"), full=True),
}


def selected() -> list[str]:
    full = os.environ.get("HEXIR_FULL_TESTS") == "1"
    return [name for name, spec in MODELS.items() if full or not spec.full]


def key(*also: Path) -> str:
    """The cache key of exports: this file, the files `also` names (where their callers'
    configurations live), torch's and transformers' versions."""
    import torch

    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in also:
        digest.update(path.read_bytes())
    digest.update(torch.__version__.encode())
    try:
        import transformers

        digest.update(transformers.__version__.encode())
    except ImportError:
        pass
    return digest.hexdigest()[:16]


def export(name: str, dynamic: bool = False, sequence: bool = True) -> Path:
    """The ONNX file of model `name`, exported on first use and cached; `dynamic`: with its
    batch axis dynamic, and its sequence's length unless not `sequence` (`dynamic_axes`)."""
    suffix = ("_dynamic" if sequence else "_dynamic_batch") if dynamic else ""
    return export_spec(MODELS[name], ROOT / "build" / "real-models" / key() /
                       f"{name}{suffix}.onnx", dynamic, sequence)


def dynamic_axes(spec: Spec, sequence: bool = True) -> dict[str, dict[int, str]]:
    """The axes a user exports as dynamic: every input's batch (axis 0), and (where
    `sequence`) its sequence's length (`Input.seq_axis`)."""
    axes = {}
    for i in spec.inputs:
        seq = i.seq_axis if i.seq_axis is not None else 1 if i.kind != "float" else None
        axes[i.name] = {0: "batch", **({seq: "seq"} if seq is not None and sequence else {})}
    return axes


def resized(spec: Spec, batch: int, seq: int) -> tuple[Input, ...]:
    """`spec`'s inputs at another batch size and sequence length (the axes `dynamic_axes`
    names)."""
    axes = dynamic_axes(spec)
    return tuple(Input(i.name, tuple({"batch": batch, "seq": seq}.get(axes[i.name].get(a), d)
                                     for a, d in enumerate(i.shape)), i.kind, i.seq_axis)
                 for i in spec.inputs)


def export_spec(spec: Spec, path: Path, dynamic: bool = False, sequence: bool = True) -> Path:
    """`spec`'s model exported to `path`, unless that file exists (the caller keys the path
    by what the model depends on); bench/models.py exports its larger configurations here."""
    import torch

    if path.exists():
        return path
    model = spec.build()
    if hasattr(model, "config"):  # a Hugging Face model
        model = _keywords(model, spec)
    model = _settle(model, spec.inputs)
    rng = np.random.default_rng(0)
    args = tuple(torch.from_numpy(i.draw(rng)) for i in spec.inputs)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.part")
    torch.onnx.export(model, args, str(partial), dynamo=False, opset_version=17,
                      input_names=[i.name for i in spec.inputs], output_names=list(spec.outputs),
                      dynamic_axes=dynamic_axes(spec, sequence) if dynamic else None)
    partial.replace(path)  # never a half-written file under the cached name
    return path


def decoder_geometry(config) -> tuple[int, int, int]:
    """A causal LM's (layers, key-value heads, head size): the shape of its cache."""
    heads = config.num_attention_heads
    return (config.num_hidden_layers, getattr(config, "num_key_value_heads", None) or heads,
            config.hidden_size // heads)


def export_decoder_step(model, path: Path) -> Path:
    """A Hugging Face causal LM exported to `path` (unless it exists) as one decoding step
    with its KV cache, in Optimum's names -- `input_ids`, `attention_mask` [batch, past +
    seq], `position_ids`, `past_key_values.{i}.key/.value` -> `logits`,
    `present.{i}.key/.value` -- batch, seq and past dynamic; traced at batch 2, 3 new tokens
    after 5 cached ones, so that neither length is baked in. What `hexir -generate` takes."""
    import torch

    if path.exists():
        return path
    t = _transformers()
    config = model.config
    layers, kv_heads, head = decoder_geometry(config)

    class Step(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, position_ids, *past):
            cache = t.DynamicCache(config=config)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             position_ids=position_ids, past_key_values=cache, use_cache=True)
            grown = out.past_key_values
            return (out.logits, *(kv for i in range(layers)
                                  for kv in (grown.layers[i].keys, grown.layers[i].values)))

    ins, outs = ["input_ids", "attention_mask", "position_ids"], ["logits"]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "past + seq"},
            "position_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    for i in range(layers):
        for kv in ("key", "value"):
            ins.append(f"past_key_values.{i}.{kv}")
            outs.append(f"present.{i}.{kv}")
            axes[ins[-1]] = {0: "batch", 2: "past"}
            axes[outs[-1]] = {0: "batch", 2: "past + seq"}
    batch, seq, past = 2, 3, 5
    generator = torch.Generator().manual_seed(1)
    args = (torch.randint(0, config.vocab_size, (batch, seq), generator=generator),
            torch.ones(batch, past + seq, dtype=torch.int64),
            torch.arange(past, past + seq).expand(batch, seq).contiguous(),
            *(torch.randn(batch, kv_heads, past, head, generator=generator)
              for _ in range(2 * layers)))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.part")
    with warnings.catch_warnings():  # the tracer's about the cache's Python branches
        warnings.simplefilter("ignore")
        torch.onnx.export(Step().eval(), args, str(partial), dynamo=False, opset_version=17,
                          input_names=ins, output_names=outs, dynamic_axes=axes)
    partial.replace(path)  # never a half-written file under the cached name
    return path

if __name__ == "__main__":
    for name in sys.argv[1:] or selected():
        print(export(name))
