"""Text generation: Hexir's `Module.generate` against ONNX Runtime and PyTorch, per token.

    python bench/generate.py [--models=gpt2,llama] [--tiny] [--prompt=32] [--new=64]
                             [--threads=default,1] [--rounds=15] [--budget=60]
                             [--target=x86-64-v3] [--attention=sdpa|eager]

Two decoders with random weights (nothing can be downloaded), built by the test suite's
`packages/hexir-compiler/tests/real_models.py`: GPT-2 (hidden 256, 4 layers, 4 heads) and a
Llama-style decoder (hidden 256, 4 layers, rotary embeddings, RMSNorm, 8 query / 4 key-value
heads, MLP 688), a 1024-token vocabulary and 128 positions; `--tiny`: the test suite's sizes
(hidden 64, 2 layers, a 96-token vocabulary). Every matrix is redrawn N(0, 0.15): the default
0.02 gives near-uniform logits, so the greedy stream is one token repeated. Each is exported
once (into `build/generate/<key>/`, the key hashing this file, real_models and the
torch/transformers versions) as a decoding step with its KV cache, Optimum's names
(`input_ids`, `attention_mask`, `position_ids`, `past_key_values.{i}.key/.value` ->
`logits`, `present.{i}.key/.value`; batch, seq and past dynamic), then compiled by
`hexir -emit=hxb -generate` for one cpu level (`--target`, default this host's).

The engines, each generating `--new` greedy tokens after a `--prompt`-token prompt (batch 1):
- hexir: `Module.generate(ids, max_new_tokens=N)` (the decode loop and its cache in the
  runtime);
- ORT numpy: the same step .onnx in a Python greedy loop, the cache fed back as the numpy
  arrays `InferenceSession.run` returns (what most users write);
- ORT OrtValue: the same loop with `run_with_ort_values`, the presents fed back as the
  OrtValues ORT returned (never copied to numpy; only the logits are read);
- PyTorch: eager `model.generate(do_sample=False)` on the exported model itself.

Per model and `--threads` entry (`default`: each engine its own default; `N`:
HEXIR_CPU_THREADS=N, ORT's intra-op threads N, torch.set_num_threads(N)), in a fresh process
(the cpu pool's size is fixed per process): every engine's tokens are checked to be the same
first (a row says WRONG where not), then the engines run in interleaved rounds (each round
every engine once, the order rotating): a prefill-only call (max_new_tokens=1: the prompt's
step and the first token) and a full call (N tokens), until `--rounds` rounds or the
model's `--budget` seconds. A figure is a median over rounds: prefill is the prefill-only
call (its ms per prompt token beside it), decode per token is (full - prefill) / (N - 1), the
N - 1 steps after the first token. The ratios are hexir / that engine (below 1: hexir is
faster).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "packages" / "hexir-compiler" / "tests"
sys.path.insert(0, str(TESTS))
import real_models  # noqa: E402  (the test suite's builders, the torchvision shim)

VOCAB = 1024
POSITIONS = 128
#: name: (builder keywords at benchmark size, at --tiny size)
SIZES = {
    "gpt2": ({"vocab_size": VOCAB, "n_embd": 256, "n_layer": 4, "n_head": 4},
             {"vocab_size": real_models.VOCAB, "n_embd": 64, "n_layer": 2, "n_head": 4}),
    "llama": ({"vocab_size": VOCAB, "hidden_size": 256, "intermediate_size": 688,
               "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4},
              {"vocab_size": real_models.VOCAB, "hidden_size": 64, "intermediate_size": 128,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}),
}
ENGINES = ("hexir", "ORT numpy", "ORT OrtValue", "PyTorch")


def build(name: str, tiny: bool, attention: str):
    """The torch model, seeded (the same weights in every process)."""
    import torch

    t = real_models._transformers()
    config = dict(SIZES[name][tiny], attn_implementation=attention, bos_token_id=0,
                  eos_token_id=None, pad_token_id=0)
    torch.manual_seed(0)
    if name == "gpt2":
        model = t.GPT2LMHeadModel(real_models._gpt2_config(t, n_positions=POSITIONS, **config))
    else:
        model = real_models._llama(max_position_embeddings=POSITIONS, **config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.15)
    model.generation_config.eos_token_id = None
    return model.eval()


def export(name: str, tiny: bool, attention: str) -> Path:
    """The step model's ONNX file, exported once (`real_models.export_decoder_step`)."""
    key = real_models.key(Path(__file__))
    path = REPO / "build" / "generate" / key / f"{name}{'_tiny' * tiny}_{attention}.onnx"
    return path if path.exists() else real_models.export_decoder_step(
        build(name, tiny, attention), path)


def compile_generate(path: Path, target: str, out: Path) -> float:
    """`hexir -emit=hxb -generate` of `path` into `out`, in a subprocess; its seconds."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hexir_compiler", "-emit=hxb", "-generate",
                           f"-target={target}", "-o", str(out), str(path)],
                          capture_output=True, text=True)
    if done.returncode:
        lines = done.stderr.strip().splitlines() or ["(no message)"]
        raise RuntimeError(lines[-1])
    return time.perf_counter() - start


@dataclasses.dataclass
class Job:
    """What one measuring process does (sent to it as JSON)."""

    name: str
    tiny: bool
    attention: str
    onnx: str
    hxb: str
    threads: int  # 0: each engine's default
    prompt: int
    new: int
    rounds: int
    budget: float


def ort_loops(session, config, names: list[str]):
    """(numpy loop, OrtValue loop): each `loop(ids, new) -> [1, P + new]` greedy tokens."""
    import onnxruntime

    _, kv_heads, head = real_models.decoder_geometry(config)
    pasts = [n for n in names if n.startswith("past_key_values.")]
    empty = np.zeros((1, kv_heads, 0, head), np.float32)

    def numpy_loop(ids: np.ndarray, new: int) -> np.ndarray:
        tokens = [ids]
        length = ids.shape[1]
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, length), np.int64),
                 "position_ids": np.arange(length, dtype=np.int64)[None],
                 **{n: empty for n in pasts}}
        for k in range(new):
            out = session.run(None, feeds)
            token = out[0][:, -1].argmax(-1)[:, None].astype(np.int64)
            tokens.append(token)
            if k == new - 1:
                break
            feeds = {"input_ids": token, "attention_mask": np.ones((1, length + 1), np.int64),
                     "position_ids": np.array([[length]], np.int64),
                     **dict(zip(pasts, out[1:], strict=True))}
            length += 1
        return np.concatenate(tokens, 1)

    value = onnxruntime.OrtValue.ortvalue_from_numpy
    outputs = [o.name for o in session.get_outputs()]

    def ortvalue_loop(ids: np.ndarray, new: int) -> np.ndarray:
        tokens = [ids]
        length = ids.shape[1]
        feeds = {"input_ids": value(ids), "attention_mask": value(np.ones((1, length), np.int64)),
                 "position_ids": value(np.arange(length, dtype=np.int64)[None]),
                 **{n: value(empty) for n in pasts}}
        for k in range(new):
            out = session.run_with_ort_values(outputs, feeds)
            token = out[0].numpy()[:, -1].argmax(-1)[:, None].astype(np.int64)
            tokens.append(token)
            if k == new - 1:
                break
            feeds = {"input_ids": value(token),
                     "attention_mask": value(np.ones((1, length + 1), np.int64)),
                     "position_ids": value(np.array([[length]], np.int64)),
                     **dict(zip(pasts, out[1:], strict=True))}
            length += 1
        return np.concatenate(tokens, 1)

    return numpy_loop, ortvalue_loop


def measure(job: Job) -> dict:
    """Check that every engine gives the same tokens, then time them in interleaved rounds
    (module docstring). Runs in its own process: HEXIR_CPU_THREADS is set before the runtime
    makes its pool."""
    import onnxruntime
    import torch

    import hexir_runtime

    if job.threads:
        torch.set_num_threads(job.threads)
    model = build(job.name, job.tiny, job.attention)
    options = onnxruntime.SessionOptions()
    if job.threads:
        options.intra_op_num_threads = job.threads
    session = onnxruntime.InferenceSession(job.onnx, options,
                                           providers=["CPUExecutionProvider"])
    numpy_loop, ortvalue_loop = ort_loops(session, model.config,
                                          [i.name for i in session.get_inputs()])
    module = hexir_runtime.load(job.hxb)
    ids = np.random.default_rng(0).integers(0, model.config.vocab_size, (1, job.prompt),
                                            dtype=np.int64)
    tids = torch.from_numpy(ids)

    def pytorch(_, new: int) -> np.ndarray:
        with torch.no_grad():
            return model.generate(tids, attention_mask=torch.ones_like(tids),
                                  max_new_tokens=new, min_new_tokens=new,
                                  do_sample=False).numpy()

    engines = {"hexir": lambda i, n: module.generate(i, max_new_tokens=n),
               "ORT numpy": numpy_loop, "ORT OrtValue": ortvalue_loop, "PyTorch": pytorch}
    tokens = {label: np.asarray(run(ids, job.new)) for label, run in engines.items()}
    want = tokens["PyTorch"]
    same = {label: bool(t.shape == want.shape and np.array_equal(t, want))
            for label, t in tokens.items()}
    first = {label: next((int(k) - job.prompt for k in np.flatnonzero(
        t[0, :want.shape[1]] != want[0, :t.shape[1]])), None) for label, t in tokens.items()}
    times: dict[str, dict[str, list[float]]] = {e: {"prefill": [], "full": []} for e in engines}
    order = list(engines)
    start = time.perf_counter()
    rounds = 0
    while rounds < job.rounds and (rounds < 3 or time.perf_counter() - start < job.budget):
        for label in order[rounds % len(order):] + order[:rounds % len(order)]:
            run = engines[label]
            for kind, new in (("prefill", 1), ("full", job.new)):
                before = time.perf_counter()
                run(ids, new)
                times[label][kind].append(time.perf_counter() - before)
        rounds += 1
    hexir_threads = module.cpu_threads
    module.close()
    result = {}
    for label, t in times.items():
        prefill, full = statistics.median(t["prefill"]), statistics.median(t["full"])
        result[label] = {"prefill": prefill, "full": full,
                         "decode": (full - prefill) / max(job.new - 1, 1),
                         "rounds": len(t["full"]), "same": same[label],
                         "first_difference": first[label],
                         "length": int(tokens[label].shape[1]),
                         "distinct": len(set(tokens[label][0, job.prompt:].tolist()))}
    return {"engines": result, "threads": {"torch": torch.get_num_threads(),
                                           "hexir": hexir_threads}}


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gpt2,llama")
    parser.add_argument("--tiny", action="store_true", help="the test suite's sizes instead")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens")
    parser.add_argument("--new", type=int, default=64, help="new tokens")
    parser.add_argument("--threads", default="default,1",
                        help="thread settings, each measured in its own process")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--budget", type=float, default=60.0,
                        help="seconds of timing per model and thread setting (at least three "
                             "rounds run)")
    parser.add_argument("--target", default=None, help="an x86-64 level (default: the host's)")
    parser.add_argument("--attention", choices=("sdpa", "eager"), default="sdpa",
                        help="transformers' attention, in the export and in PyTorch")
    args = parser.parse_args(argv)
    names = args.models.split(",")
    unknown = [n for n in names if n not in SIZES]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; expected some of "
                     f"{', '.join(SIZES)}")
    if args.prompt + args.new > POSITIONS:
        parser.error(f"--prompt + --new must be at most {POSITIONS}, the models' positions")
    settings = [0 if t == "default" else int(t) for t in args.threads.split(",")]
    import onnxruntime
    import torch

    from hexir_format import CPU_LEVELS
    from hexir_runtime.hal.hostcode import host_level

    target = f"cpu:{args.target or CPU_LEVELS[host_level()]}"
    load = os.getloadavg()
    print(f"target {target}; onnxruntime {onnxruntime.__version__}, torch {torch.__version__}; "
          f"{os.cpu_count()} cores; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"batch 1, a {args.prompt}-token prompt, {args.new} new tokens, {args.attention} "
          f"attention; up to {args.rounds} interleaved rounds, {args.budget:g} s per model "
          "and setting; medians")
    print("| model | threads | engine | prefill ms | prefill ms / prompt token | "
          "decode ms / token | total ms | hexir / engine: prefill | decode | tokens |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            _model(name, args, target, settings, Path(scratch))
    return 0


def _model(name: str, args, target: str, settings: list[int], scratch: Path) -> None:
    """Export, compile, measure and print one model's rows."""
    label = f"{name}{' (tiny)' * args.tiny}"
    try:
        path = export(name, args.tiny, args.attention)
    except Exception as err:  # noqa: BLE001  (an export failure is a row, not the end)
        print(f"| {label} | export failed: {str(err).splitlines()[0]} |", flush=True)
        return
    hxb = scratch / f"{name}.hxb"
    try:
        seconds = compile_generate(path, target, hxb)
    except RuntimeError as err:
        print(f"| {label} | hexir -generate failed: {err} |", flush=True)
        return
    print(f"<!-- {label}: hexir -generate compiled in {seconds:.1f} s -->", flush=True)
    for threads in settings:
        job = Job(name, args.tiny, args.attention, str(path), str(hxb), threads, args.prompt,
                  args.new, args.rounds, args.budget)
        setting = "default" if not threads else str(threads)
        try:
            result = run_job(job)
        except RuntimeError as err:
            print(f"| {label} | {setting} | measuring failed: {err} |", flush=True)
            continue
        engines = result["engines"]
        hexir = engines["hexir"]
        for engine in ENGINES:
            e = engines[engine]
            check = (f"same, {e['distinct']} distinct; {e['rounds']} rounds" if e["same"] else
                     f"WRONG from new token {e['first_difference']}"
                     if e["first_difference"] is not None else
                     f"WRONG: {e['length'] - args.prompt} new tokens")
            ratios = ("-", "-") if engine == "hexir" else (
                f"{hexir['prefill'] / e['prefill']:.2f}", f"{hexir['decode'] / e['decode']:.2f}")
            print(f"| {label} | {setting} | {engine} | {e['prefill'] * 1e3:.2f} | "
                  f"{e['prefill'] * 1e3 / args.prompt:.3f} | {e['decode'] * 1e3:.3f} | "
                  f"{e['full'] * 1e3:.1f} | {ratios[0]} | {ratios[1]} | {check} |", flush=True)
    hxb.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
