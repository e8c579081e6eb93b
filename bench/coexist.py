"""Three engines in one process: how much Hexir, ONNX Runtime and PyTorch slow each other.

    python bench/coexist.py [--models=resnet18,gpt2] [--calls=100] [--targets=default]
                            [--quiet-pools]

Issue 24 asks that a process which also runs ONNX Runtime or PyTorch does not slow Hexir down
by more than they slow each other. Each engine's pool outlives its call: ORT's and PyTorch's
(OpenMP) threads spin for a while after it, and so does Hexir's (`HEXIR_CPU_SPIN`), so whatever
runs next in the process competes with them. For each model of `bench/models.py`'s corpus
(the same torch module -- seeded, settled, its state dict reloaded in every process -- run by
PyTorch eager, and its ONNX export run by ORT and by Hexir's default compile), every engine
is timed in a fresh process, each at its default threads:
- alone: `--calls` timed calls back to back (after two untimed ones);
- beside each other engine: the two called in turn, A B A B ..., each call timed.
A figure is a median; `slowdown(A by B)` is A's median beside B over A's median alone. The
last line compares Hexir's worst slowdown with the worst the other two inflict on each other.
`--quiet-pools` runs ORT and PyTorch as a user who shares a process with Hexir is advised to
(README): ORT's `session.intra_op.allow_spinning` 0 and `OMP_WAIT_POLICY=PASSIVE`, so that
their pools sleep as soon as a call ends rather than spin a core for ~40 ms (ORT).
All outputs are checked against ORT's first (rtol 1e-3 / atol 1e-4), PyTorch's included.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models as corpus  # bench/models.py: the corpus and its compile step
import real_models  # the test suite's corpus builders, put on sys.path by bench/models.py

ENGINES = ("hexir", "ORT", "torch")


def torch_model(spec):
    """The torch module as `real_models.export_spec` exports it, in eval mode."""
    import torch

    torch.manual_seed(0)
    model = spec.build()
    if hasattr(model, "config"):
        model = real_models._keywords(model, spec)
    return real_models._settle(model, spec.inputs)


def measure(job: dict) -> dict:
    """Time `job["engines"]` (one, or two in turn) in this process; medians in seconds."""
    import onnxruntime
    import torch

    import hexir_runtime

    spec = corpus.CORPUS[job["model"]]
    with np.load(job["feeds"]) as saved:
        feeds = {i.name: saved[i.name] for i in spec.inputs}
    options = onnxruntime.SessionOptions()
    if job["quiet_pools"]:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(job["onnx"], options,
                                           providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    calls = {}
    if "ORT" in job["engines"]:
        calls["ORT"] = lambda: session.run(None, feeds)
    if "hexir" in job["engines"]:
        module = hexir_runtime.load(job["hxb"])
        calls["hexir"] = lambda: module.main(*feeds.values())
    if "torch" in job["engines"]:
        model = torch_model(spec)
        model.load_state_dict(torch.load(job["state"]))
        args = tuple(torch.from_numpy(v) for v in feeds.values())

        def eager():
            with torch.no_grad():
                return model(*args)
        calls["torch"] = eager
    for label, call in calls.items():
        got = call()
        got = got if isinstance(got, tuple | list) else (got,)
        for g, w in zip(got, want, strict=True):
            g = g.numpy() if hasattr(g, "numpy") else np.asarray(g)
            if not np.allclose(g, w, rtol=1e-3, atol=1e-4):
                raise SystemExit(f"{label} on {job['model']}: differs from ORT by "
                                 f"{float(np.abs(g - w).max()):.2e}")
    times: dict[str, list[float]] = {label: [] for label in calls}
    for call in calls.values():
        call()
    for _ in range(job["calls"]):
        for label, call in calls.items():
            before = time.perf_counter()
            call()
            times[label].append(time.perf_counter() - before)
    return {label: statistics.median(t) for label, t in times.items()}


def run(job: dict) -> dict:
    env = dict(os.environ)
    if job["quiet_pools"]:  # libgomp reads it once, as torch loads
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    done = subprocess.run([sys.executable, __file__, "--measure"], input=json.dumps(job),
                          text=True, capture_output=True, env=env)
    if done.returncode:
        lines = done.stderr.strip().splitlines() or ["(no message)"]
        raise SystemExit(f"{job['model']} {'+'.join(job['engines'])}: {lines[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def prepare(name: str, target: str, scratch: Path) -> dict:
    """The model exported, compiled and its torch state saved; the job's common fields."""
    import torch

    spec = corpus.CORPUS[name]
    model = torch_model(spec)
    rng = np.random.default_rng(1)
    feeds = {i.name: i.draw(rng) for i in spec.inputs}
    onnx_path = scratch / f"{name}.onnx"
    torch.onnx.export(model, tuple(torch.from_numpy(v) for v in feeds.values()), str(onnx_path),
                      dynamo=False, opset_version=17, input_names=list(feeds),
                      output_names=list(spec.outputs))
    torch.save(model.state_dict(), scratch / f"{name}.pt")
    np.savez(scratch / f"{name}.npz", **feeds)
    image, _ = corpus.compile_with(onnx_path, target, None)
    (scratch / f"{name}.hxb").write_bytes(image)
    return {"model": name, "onnx": str(onnx_path), "hxb": str(scratch / f"{name}.hxb"),
            "state": str(scratch / f"{name}.pt"), "feeds": str(scratch / f"{name}.npz")}


def main(argv: list[str]) -> int:
    if argv == ["--measure"]:
        print(json.dumps(measure(json.loads(sys.stdin.read()))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,gpt2")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--targets", default="default", help="the Hexir compile's target")
    parser.add_argument("--quiet-pools", action="store_true",
                        help="ORT's session.intra_op.allow_spinning=0 and PyTorch's "
                             "OMP_WAIT_POLICY=PASSIVE: the other pools sleep after a call")
    args = parser.parse_args(argv)
    names = args.models.split(",")
    unknown = [n for n in names if n not in corpus.CORPUS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; expected some of "
                     f"{', '.join(corpus.CORPUS)}")
    load = os.getloadavg()
    print(f"{os.cpu_count()} cores; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"{args.calls} calls per engine and process; default threads everywhere"
          + ("; ORT allow_spinning=0, OMP_WAIT_POLICY=PASSIVE" if args.quiet_pools else ""))
    print("| model | engine | alone ms | slowed by hexir | by ORT | by torch |")
    print("| --- | --- | ---: | ---: | ---: | ---: |", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            base = prepare(name, args.targets, Path(scratch)) | {
                "calls": args.calls, "quiet_pools": args.quiet_pools}
            alone = {e: run(base | {"engines": [e]})[e] for e in ENGINES}
            slowed: dict[tuple[str, str], float] = {}
            for i, a in enumerate(ENGINES):
                for b in ENGINES[i + 1:]:
                    pair = run(base | {"engines": [a, b]})
                    slowed[a, b] = pair[a] / alone[a]
                    slowed[b, a] = pair[b] / alone[b]
            for e in ENGINES:
                cells = " | ".join("-" if o == e else f"{slowed[e, o]:.2f}" for o in ENGINES)
                print(f"| {name} | {e} | {alone[e] * 1e3:.2f} | {cells} |", flush=True)
            worst_hexir = max(slowed["hexir", o] for o in ("ORT", "torch"))
            worst_others = max(slowed["ORT", "torch"], slowed["torch", "ORT"])
            print(f"| {name} | hexir's worst slowdown {worst_hexir:.2f}; ORT and torch slow "
                  f"each other by up to {worst_others:.2f} | | | | |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
