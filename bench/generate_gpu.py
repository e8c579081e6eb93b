"""Text generation on a GPU: `Module.generate` of a module with every op on cuda, per token,
against the same step compiled for the cpu, in the same run.

    python bench/generate_gpu.py --build [--dir=build/generate-gpu]   # here: compiler, torch
    python bench/generate_gpu.py --run [--dir=build/generate-gpu] [--rounds=10]  # on the GPU

The machine with a GPU has no compiler and no transformers, so `--build` makes everything
here: `bench/generate.py`'s GPT-2 and Llama-style decoders (hidden 256, 4 layers, 128
positions, random weights), each exported as a decoding step with its KV cache and compiled
with `-generate` twice -- every op on cuda (`-placement=cuda -target=cuda:sm_90`), and for
the cpu (`-target=cpu:x86-64-v3`, which any current x86 server runs) -- plus the prompt and
the tokens `transformers`' greedy `generate` returns for it. `--run` loads the modules with
the runtime alone, checks that each returns exactly those tokens, then times, in interleaved
rounds: the prefill-only call (`max_new_tokens=1`) and the full call, on cuda with CUDA
graphs (each decode step one graph launch: every step has the same sizes, so one captured
graph per binding serves them all), on cuda without graphs, on the cpu, and -- where the
machine has transformers -- PyTorch eager `generate` on cuda with the same weights. Decode
per token is (full - prefill) / (new - 1); the ratio is Hexir's (cuda, graphs) over each.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MODELS = ("gpt2", "llama")
PROMPT, NEW = 32, 64


def build(directory: Path) -> int:
    import torch

    sys.path.insert(0, str(REPO / "bench"))
    import generate  # bench/generate.py: the models and their export

    directory.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        onnx = generate.export(name, False, "sdpa")
        for device, target, extra in (("cuda", "cuda:sm_90", ["-placement=cuda"]),
                                      ("cpu", "cpu:x86-64-v3", [])):
            out = directory / f"{name}-{device}.hxb"
            done = subprocess.run([sys.executable, "-m", "hexir_compiler", "-emit=hxb",
                                   "-generate", f"-target={target}", *extra, "-o", str(out),
                                   str(onnx)], capture_output=True, text=True)
            if done.returncode:
                print(done.stderr.strip(), file=sys.stderr)
                return 1
        model = generate.build(name, False, "sdpa")
        ids = np.random.default_rng(0).integers(0, model.config.vocab_size, (1, PROMPT))
        with torch.no_grad():
            want = model.generate(torch.from_numpy(ids), attention_mask=torch.ones(1, PROMPT,
                                  dtype=torch.int64), max_new_tokens=NEW,
                                  min_new_tokens=NEW, do_sample=False).numpy()
        np.savez(directory / f"{name}.npz", prompt=ids, tokens=want)
        print(f"built {name}: {', '.join(p.name for p in sorted(directory.glob(name + '-*')))}")
    return 0


def _torch_engine(name: str, prompt: np.ndarray):
    """PyTorch eager `generate` on cuda, the same weights (`bench/generate.build`), where the
    machine has transformers; else None."""
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        return None
    import torch

    sys.path.insert(0, str(REPO / "bench"))
    import generate

    model = generate.build(name, False, "sdpa").to("cuda")
    ids = torch.from_numpy(prompt).cuda()
    mask = torch.ones_like(ids)

    def run(_: np.ndarray, new: int) -> np.ndarray:
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=new,
                                 min_new_tokens=new, do_sample=False)
        return out.cpu().numpy()  # (the copy waits for the device)
    return run


def run(directory: Path, rounds: int) -> int:
    import hexir_runtime as hr

    print("| model | engine | prefill (32 tokens) | decode per token | hexir decode / this "
          "| tokens |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for name in MODELS:
        data = np.load(directory / f"{name}.npz")
        prompt, want = data["prompt"], data["tokens"]
        modules = {"hexir cuda, graphs": hr.load(directory / f"{name}-cuda.hxb",
                                                 device="cuda"),
                   "hexir cuda, no graphs": hr.load(directory / f"{name}-cuda.hxb",
                                                    device="cuda", cuda_graphs=False)}
        if (directory / f"{name}-cpu.hxb").exists():  # (left behind where the carry is full)
            modules["hexir cpu"] = hr.load(directory / f"{name}-cpu.hxb")
        engines = {e: m.generate for e, m in modules.items()}
        if (eager := _torch_engine(name, prompt)) is not None:
            engines["PyTorch eager cuda"] = eager
        right = {e: np.array_equal(g(prompt, NEW), want) for e, g in engines.items()}
        times: dict[str, tuple[list[float], list[float]]] = {e: ([], []) for e in engines}
        order = list(engines)
        for r in range(rounds):
            for e in order[r % len(order):] + order[:r % len(order)]:
                start = time.perf_counter()
                engines[e](prompt, 1)
                middle = time.perf_counter()
                engines[e](prompt, NEW)
                end = time.perf_counter()
                times[e][0].append(middle - start)
                times[e][1].append(end - middle)
        measured = {}
        for e in engines:
            prefill = statistics.median(times[e][0])
            measured[e] = (prefill, (statistics.median(times[e][1]) - prefill) / (NEW - 1))
        ours = measured["hexir cuda, graphs"][1]
        for e, (prefill, decode) in measured.items():
            print(f"| {name} | {e} | {prefill * 1e3:.2f} ms | {decode * 1e3:.3f} ms | "
                  f"{ours / decode:.2f} | {'exact' if right[e] else 'WRONG'} |", flush=True)
        for m in modules.values():
            m.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="store_true")
    parser.add_argument("--run", action="store_true")
    parser.add_argument("--dir", type=Path, default=REPO / "build" / "generate-gpu")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    if args.build == args.run:
        parser.error("give one of --build (here) and --run (on the GPU machine)")
    return build(args.dir) if args.build else run(args.dir, args.rounds)


if __name__ == "__main__":
    sys.exit(main())
