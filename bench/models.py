"""Real CNNs (torchvision, random weights) on Hexir's cpu against ONNX Runtime, in one process.

    python bench/models.py [--models=resnet18,mobilenet_v2,squeezenet1_1] [--rounds=7]
                           [--block=3] [--targets=x86-64-v3,default] [--baseline=DIR]
                           [--threads=N]

Each model is exported from torchvision (`weights=None`, BatchNorm statistics randomised by a
few seeded batches in train mode, so the logits are not degenerate) at 1x3x224x224 with
`torch.onnx.export` into `build/models/` (kept between runs), then, in one process per model:
an ONNX Runtime session (default threads) and a Hexir module per `--targets` entry
(`default` is the compiler's default target), plus, with `--baseline=DIR`, the same targets
compiled by another checkout's compiler (DIR/packages/*/src on PYTHONPATH, in a subprocess)
and run by this runtime: before/after in the same run. Every result is checked against ORT
first. The engines are timed in interleaved blocks of `--block` calls, `--rounds` times; a
figure is the median of the per-call times of its blocks, and each ratio is hexir / ORT.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "build" / "models"
MODELS = ("resnet18", "mobilenet_v2", "squeezenet1_1")
COMPILE = r"""
import sys
import hexir_compiler
target = None if sys.argv[2] == "default" else "cpu:" + sys.argv[2]
sys.stdout.buffer.write(hexir_compiler.compile(sys.argv[1], target=target))
"""


@functools.cache
def _torchvision():
    """torchvision with its C ops declared (TOOLCHAIN.md: its build expects CUDA torch) and,
    where Pillow is not installed, an empty `PIL.Image` for its datasets' imports (the model
    zoo never uses it)."""
    import importlib.util
    import types

    import torch

    if importlib.util.find_spec("PIL") is None:
        class Stub(types.ModuleType):
            def __getattr__(self, name: str):
                if name.startswith("__"):
                    raise AttributeError(name)
                return type(name, (), {})

        pil = Stub("PIL")
        pil.__version__ = "0"
        for part in ("Image", "ImageColor", "ImageDraw", "ImageFont", "ImageOps", "ImageEnhance"):
            setattr(pil, part, Stub(f"PIL.{part}"))
            sys.modules[f"PIL.{part}"] = getattr(pil, part)
        sys.modules["PIL"] = pil

    try:
        import torchvision
    except (RuntimeError, ImportError):
        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
        _torchvision.lib = lib  # keep the definitions alive
        import torchvision
    import torchvision

    return torchvision


def export(name: str) -> Path:
    """`build/models/<name>.onnx`, exported once."""
    path = CACHE / f"{name}.onnx"
    if path.exists():
        return path
    import torch

    torchvision = _torchvision()
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None)
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(4, 3, 224, 224))
    model.eval()
    CACHE.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), str(path), dynamo=False,
                      opset_version=17, input_names=["x"], output_names=["y"])
    return path


def compile_with(path: Path, target: str, packages: Path | None) -> bytes:
    """The .hxb of `path` for `target`, by this checkout's compiler or the one under
    `packages` (another checkout's packages/ directory)."""
    env = dict(os.environ)
    if packages is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in sorted(packages.glob("*/src")))
    return subprocess.run([sys.executable, "-c", COMPILE, str(path), target], env=env,
                          check=True, capture_output=True).stdout


def _ort_options(onnxruntime, threads: int):
    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return options


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--targets", default="x86-64-v3,default")
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: the process's CPU time (with --threads=1, what a busy "
                             "machine's other processes barely disturb)")
    parser.add_argument("--threads", type=int, default=0,
                        help="threads for both runtimes (default: each its own default)")
    parser.add_argument("--block", type=int, default=3)
    args = parser.parse_args(argv)
    if args.threads:  # read by the runtime's pool when it is made
        os.environ["HEXIR_CPU_THREADS"] = str(args.threads)
    import hexir_runtime
    import onnxruntime

    clock = time.process_time if args.clock == "cpu" else time.perf_counter

    print(f"onnxruntime {onnxruntime.__version__}; {os.cpu_count()} cores; rounds "
          f"{args.rounds} x blocks of {args.block} calls, engines interleaved")
    print("| model | engine | ms / call | / ORT | max abs diff |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name in args.models.split(","):
        path = export(name)
        x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
        session = onnxruntime.InferenceSession(str(path), _ort_options(onnxruntime, args.threads),
                                               providers=["CPUExecutionProvider"])
        want = session.run(None, {"x": x})[0]
        engines = {"ORT": lambda s=session, x=x: s.run(None, {"x": x})}
        diffs = {"ORT": 0.0}
        images = {}
        for target in args.targets.split(","):
            images[f"hexir {target}"] = compile_with(path, target, None)
            if args.baseline is not None:
                images[f"before {target}"] = compile_with(path, target,
                                                          args.baseline / "packages")
        modules = [hexir_runtime.load(image) for image in images.values()]
        for label, module in zip(images, modules, strict=True):
            diffs[label] = float(np.abs(module.main(x) - want).max())
            engines[label] = lambda m=module, x=x: m.main(x)
        times: dict[str, list[float]] = {label: [] for label in engines}
        for _ in range(args.rounds):
            for label, call in engines.items():
                call()
                start = clock()
                for _ in range(args.block):
                    call()
                times[label].append((clock() - start) / args.block)
        ort = statistics.median(times["ORT"])
        for label, samples in times.items():
            median = statistics.median(samples)
            print(f"| {name} | {label} | {median * 1e3:.2f} | {median / ort:.2f} | "
                  f"{diffs[label]:.1e} |", flush=True)
        for module in modules:
            module.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
