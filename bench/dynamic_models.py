"""A dynamic module against static ones: what compiling once for every size costs per call.

    python bench/dynamic_models.py [--models=bert,gpt2,resnet18] [--calls=60] [--block=5]
                            [--target=x86-64-v3]

Each model of the benchmark corpus (`bench/models.py`'s sizes: hidden 256 x 4 layers for the
text models, 224 x 224 images) is exported with dynamic axes (batch, and a text model's
sequence length: `real_models.dynamic_axes`) and compiled twice per size -- once with no
`-input-shape`, one module for every size, and once specialised to that size
(`input_shapes`, a static module) -- for one host level (`--target`, default this host's).
Per size, in one process, both modules' answers are checked to agree (rtol 1e-3 / atol
1e-4), then they run in interleaved blocks (one untimed call, `--block` timed calls) until
each has `--calls`: a figure is the median call, and the ratio dynamic / static (issue 27's
target: at most 1.15). The dynamic module's first call at a size plans its memory; the
figures are of the calls after it (a cache hit: `Module.cache_info`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import models  # noqa: E402  (the corpus at benchmark sizes)
import real_models  # noqa: E402  (its builders; models.py put the tests on the path)

#: (batch, sequence length) per model kind; an image model reads the batch only.
TEXT_SIZES = ((1, 128), (4, 32), (2, 77))
IMAGE_SIZES = ((1, 0), (4, 0))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="bert,gpt2,resnet18")
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--target", default=None, help="an x86-64 level (default: the host's)")
    args = parser.parse_args(argv)
    import hexir_compiler
    import hexir_runtime
    from hexir_format import CPU_LEVELS
    from hexir_runtime.hal.hostcode import host_level

    target = f"cpu:{args.target or CPU_LEVELS[host_level()]}"
    print(f"target {target}, {args.calls} calls a module and size, interleaved blocks of "
          f"{args.block}")
    print(f"{'model':<10} {'size':<10} {'static ms':>10} {'dynamic ms':>11} {'ratio':>6}")
    for name in args.models.split(","):
        spec = models.CORPUS[name]
        key = real_models.key(Path(models.__file__), Path(__file__))
        path = real_models.export_spec(spec, REPO / "build" / "models" / key /
                                       f"{name}_dynamic.onnx", dynamic=True)
        dynamic = hexir_runtime.load(hexir_compiler.compile(path, target=target))
        image = len(spec.inputs[0].shape) == 4
        for batch, seq in IMAGE_SIZES if image else TEXT_SIZES:
            inputs = real_models.resized(spec, batch, seq)
            feeds = [i.draw(np.random.default_rng(0)) for i in inputs]
            static = hexir_runtime.load(hexir_compiler.compile(
                path, target=target, input_shapes={i.name: i.shape for i in inputs}))
            for g, w in zip(_tuple(dynamic.main(*feeds)), _tuple(static.main(*feeds)),
                            strict=True):
                np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)
            times: dict[str, list[float]] = {"static": [], "dynamic": []}
            while min(len(t) for t in times.values()) < args.calls:
                for label, module in (("static", static), ("dynamic", dynamic)):
                    module.main(*feeds)
                    for _ in range(args.block):
                        start = time.perf_counter()
                        module.main(*feeds)
                        times[label].append(time.perf_counter() - start)
            s, d = (statistics.median(times[k]) * 1e3 for k in ("static", "dynamic"))
            size = f"{batch}" if image else f"{batch}x{seq}"
            print(f"{name:<10} {size:<10} {s:>10.3f} {d:>11.3f} {d / s:>6.2f}", flush=True)
            static.close()
        dynamic.close()
    return 0


def _tuple(x):
    return x if isinstance(x, tuple | list) else (x,)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
