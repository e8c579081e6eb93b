"""Hexir's cpu call against ONNX Runtime and numpy, side by side, in one run.

    python bench/ort.py [--rounds=5] [--calls=300] [--programs=mlp,attention]
                        [--baseline=OTHER_CHECKOUT]

Needs the `full` environment plus `onnx` and `onnxruntime` (bench-only dependencies:
`pip install onnx onnxruntime`). Four programs, each written with the same f32 weights as a
Hexir module (compiled here), an ONNX model (built here with `onnx.helper`), and (but the
attention layer) numpy:

| program | what it computes |
| --- | --- |
| 2x2 | relu(x W), x and W 2x2: the per-call overhead |
| mlp | relu(x W1 + b1) W2 + b2, x 64x512, W1 512x2048, W2 2048x512 |
| transformer | `examples/transformer_block.mlir` (x 2x16x64, 4 heads, pre-LN, GELU) |
| attention | a BERT-style encoder layer, the ONNX model compiled by Hexir: x 1x128x512, 8 heads of 64 (QK^T and PV: batched products of two activations), FFN 2048 |

Hexir runs twice: compiled with the compiler's defaults (`hexir:default`: a program for each
of x86-64-v2, -v3 and -v4, of which the runtime runs this machine's, as ORT picks its kernels
for the CPU it runs on) and for the baseline level every x86-64 runs
(`-target=cpu:x86-64-v2`: what a CPU without AVX2 gets). `--baseline=DIR` adds the Hexir of
another checkout (its `packages/`), compiled and run in its own processes, so a change and its
parent are timed in one run.

Every figure is the median of `--calls` steady calls (after 30 warm-up calls) in a fresh
process, one process per (program, engine), the engines interleaved and rotated; the table
gives the median over `--rounds` such processes, the ratio to ONNX Runtime (below 1: faster)
and the stability of each engine: the slowest of its calls over their median (the median of
that over the rounds). Both runtimes use every core (ORT's default intra-op threads; Hexir's
thread pool, `HEXIR_CPU_THREADS`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))
import reference  # noqa: E402  (the examples' numpy oracle: their weights and networks)


def _this_cpu() -> str:
    """The x86-64 level of this machine: Hexir's kernels are compiled for it, as ORT's MLAS
    picks its kernels for it at run time (`-target=cpu:<level>`)."""
    from hexir_format import CPU_LEVELS
    from hexir_runtime.hal import hostcode

    return CPU_LEVELS[max(2, hostcode.host_level())]


CPU = _this_cpu()
BASELINE_CPU = "x86-64-v2"
PROGRAMS = ("2x2", "mlp", "transformer", "attention")
#: The attention layer's shape: batch, sequence, model width, heads, FFN width.
ATTENTION = (1, 128, 512, 8, 2048)


def weights(program: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The program's f32 weights and one input, from fixed seeds."""
    rng = np.random.default_rng(11)
    if program == "2x2":
        return {"w": rng.standard_normal((2, 2)).astype(np.float32)}, \
            rng.standard_normal((2, 2)).astype(np.float32)
    if program == "mlp":
        shapes = {"w1": (512, 2048), "b1": (2048,), "w2": (2048, 512), "b2": (512,)}
        w = {k: (rng.standard_normal(s) / math.sqrt(s[0])).astype(np.float32)
             for k, s in shapes.items()}
        return w, rng.standard_normal((64, 512)).astype(np.float32)
    if program == "attention":
        batch, seq, d, _, ffn = ATTENTION
        shapes = {**{f"w{p}": (d, d) for p in "qkvo"}, **{f"b{p}": (d,) for p in "qkvo"},
                  "w1": (d, ffn), "b1": (ffn,), "w2": (ffn, d), "b2": (d,)}
        w = {k: (rng.standard_normal(s) / math.sqrt(s[0])).astype(np.float32)
             for k, s in shapes.items()}
        w.update({f"ln{i}_{p}": (np.ones(d) if p == "gamma" else np.zeros(d)).astype(np.float32)
                  for i in (1, 2) for p in ("gamma", "beta")})
        return w, rng.standard_normal((batch, seq, d)).astype(np.float32)
    text = (REPO / "examples" / "transformer_block.mlir").read_text()
    w = {k: v.astype(np.float32) for k, v in reference.load_constants(text).items()}
    return w, reference.sample_input(REPO / "examples" / "transformer_block.mlir",
                                     np.random.default_rng(0)).astype(np.float32)


def _dense(name: str, array: np.ndarray) -> str:
    dims = "x".join(map(str, array.shape))
    return (f'  %{name} = "hexir.constant"() {{value = dense<"0x{array.tobytes().hex()}"> : '
            f"tensor<{dims}xf32>}} : () -> tensor<{dims}xf32>")


def hexir_module(program: str, w: dict[str, np.ndarray], level: str, x: np.ndarray) -> bytes:
    """The program's module for `level` ("default": the compiler's default, every level)."""
    from hexir_compiler.pipeline import Options, compile_file

    cpu = None if level == "default" else level

    if program == "transformer":
        return compile_file(REPO / "examples" / "transformer_block.mlir", Options("hxb", cpu=cpu))
    if program == "attention":
        import onnx

        return compile_file(onnx.load_from_string(onnx_model(program, w, x)),
                            Options("hxb", cpu=cpu))
    t = lambda *d: f"tensor<{'x'.join(map(str, d))}xf32>"
    if program == "2x2":
        body = [_dense("w", w["w"]),
                f'  %m = "hexir.linear"(%x, %w) : ({t(2, 2)}, {t(2, 2)}) -> {t(2, 2)}',
                f'  %r = "hexir.relu"(%m) : ({t(2, 2)}) -> {t(2, 2)}', f"  return %r : {t(2, 2)}"]
        head = f"func.func @main(%x: {t(2, 2)}) -> {t(2, 2)} {{"
    else:
        body = [*(_dense(k, v) for k, v in w.items()),
                f'  %h = "hexir.linear"(%x, %w1) : ({t(64, 512)}, {t(512, 2048)}) -> {t(64, 2048)}',
                f'  %hb = "hexir.add"(%h, %b1) : ({t(64, 2048)}, {t(2048)}) -> {t(64, 2048)}',
                f'  %a = "hexir.relu"(%hb) : ({t(64, 2048)}) -> {t(64, 2048)}',
                f'  %y = "hexir.linear"(%a, %w2) : ({t(64, 2048)}, {t(2048, 512)}) -> {t(64, 512)}',
                f'  %r = "hexir.add"(%y, %b2) : ({t(64, 512)}, {t(512)}) -> {t(64, 512)}',
                f"  return %r : {t(64, 512)}"]
        head = f"func.func @main(%x: {t(64, 512)}) -> {t(64, 512)} {{"
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / f"{program}.mlir"
        source.write_text("\n".join([head, *body, "}"]) + "\n")
        return compile_file(source, Options("hxb", cpu=cpu))


def onnx_model(program: str, w: dict[str, np.ndarray], x: np.ndarray) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], [numpy_helper.from_array(v, k) for k, v in w.items()]

    def op(kind: str, inputs: list[str], output: str, **attrs) -> str:
        nodes.append(helper.make_node(kind, inputs, [output], **attrs))
        return output

    def const(name: str, value) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    if program == "2x2":
        out = op("Relu", [op("MatMul", ["x", "w"], "m")], "y")
    elif program == "mlp":
        a = op("Relu", [op("Add", [op("MatMul", ["x", "w1"], "h"), "b1"], "hb")], "a")
        out = op("Add", [op("MatMul", [a, "w2"], "m2"), "b2"], "y")
    else:
        batch, seq, d = x.shape
        heads = ATTENTION[3] if program == "attention" else 4
        dh = d // heads
        split, merged = const("c_split", [batch, seq, heads, dh]), const("c_merged", [batch, seq, d])
        ln1 = op("LayerNormalization", ["x", "ln1_gamma", "ln1_beta"], "ln1", axis=-1,
                 epsilon=1e-5)
        qkv = [op("Transpose", [op("Reshape", [op("Add", [op("MatMul", [ln1, f"w{p}"], f"{p}m"),
                                                         f"b{p}"], f"{p}a"), split], f"{p}r")],
                  f"{p}t", perm=[0, 2, 1, 3]) for p in "qkv"]
        kt = op("Transpose", [qkv[1]], "k_transposed", perm=[0, 1, 3, 2])
        scores = op("Mul", [op("MatMul", [qkv[0], kt], "s"),
                            const("c_scale", np.float32(1 / math.sqrt(dh)))], "ss")
        attn = op("Softmax", [scores], "attn", axis=-1)
        ctx = op("Reshape", [op("Transpose", [op("MatMul", [attn, qkv[2]], "c")], "ct",
                                perm=[0, 2, 1, 3]), merged], "ctx")
        h = op("Add", ["x", op("Add", [op("MatMul", [ctx, "wo"], "o"), "bo"], "ob")], "h")
        ln2 = op("LayerNormalization", [h, "ln2_gamma", "ln2_beta"], "ln2", axis=-1,
                 epsilon=1e-5)
        f1 = op("Add", [op("MatMul", [ln2, "w1"], "f1m"), "b1"], "f1")
        erf = op("Erf", [op("Mul", [f1, const("c_rsqrt2", np.float32(1 / math.sqrt(2)))], "fs")],
                 "fe")
        gelu = op("Mul", [op("Mul", [f1, const("c_half", np.float32(0.5))], "fh"),
                          op("Add", [erf, const("c_one", np.float32(1.0))], "f1p")], "g")
        out = op("Add", [h, op("Add", [op("MatMul", [gelu, "w2"], "f2m"), "b2"], "f2")], "y")
    graph = helper.make_graph(
        nodes, program, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def numpy_function(program: str, w: dict[str, np.ndarray]):
    if program == "2x2":
        return lambda x: np.maximum(x @ w["w"], 0)
    if program == "mlp":
        return lambda x: np.maximum(x @ w["w1"] + w["b1"], 0) @ w["w2"] + w["b2"]
    return lambda x: reference.transformer_block(x, w)


def worker(engine: str, program: str, calls: int, cache: Path) -> tuple[float, float]:
    """The median seconds of one steady call, in this (fresh) process, and the slowest call
    over the median. A Hexir engine (`hexir:<cpu>`, `baseline:<cpu>`) compiles its module
    once into `cache`."""
    w, x = weights(program)
    if engine.startswith(("hexir:", "baseline:")):
        import hexir_runtime as hr

        path = cache / f"{engine.replace(':', '-')}-{program}.hxb"
        if not path.exists():
            path.write_bytes(hexir_module(program, w, engine.split(":")[1], x))
        module = hr.load(path)
        call = lambda: module.main(x)
    elif engine == "onnxruntime":
        import onnxruntime as ort

        session = ort.InferenceSession(onnx_model(program, w, x),
                                       providers=["CPUExecutionProvider"])
        feed = {"x": x}
        call = lambda: session.run(None, feed)
    else:
        direct = numpy_function(program, w)
        call = lambda: direct(x)
    for _ in range(30):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return median, max(times) / median


def check(program: str, cache: Path) -> float:
    """The largest relative difference of Hexir's (this machine's level) and ORT's answers
    from numpy's (from ORT's alone for the attention layer, which has no numpy form)."""
    import onnxruntime as ort

    import hexir_runtime as hr

    w, x = weights(program)
    session = ort.InferenceSession(onnx_model(program, w, x), providers=["CPUExecutionProvider"])
    theirs = session.run(None, {"x": x})[0]
    want = theirs if program == "attention" else numpy_function(program, w)(
        x.astype(np.float64) if program == "transformer" else x)
    with hr.load(cache / f"hexir-default-{program}.hxb") as m:
        got = m.main(x)
    scale = np.abs(want).max() or 1.0
    return max(np.abs(got - want).max(), np.abs(theirs - want).max()) / scale


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--baseline", type=Path, help="another checkout, timed beside this one")
    parser.add_argument("--worker", nargs=3, metavar=("ENGINE", "PROGRAM", "CACHE"))
    args = parser.parse_args(argv)
    if args.worker:
        engine, program, cache = args.worker
        print(json.dumps(worker(engine, program, args.calls, Path(cache))))
        return 0
    import onnxruntime

    programs = args.programs.split(",")
    levels = ["default", BASELINE_CPU]
    engines = [*(f"hexir:{c}" for c in levels),
               *(f"baseline:{c}" for c in levels if args.baseline), "onnxruntime", "numpy"]
    ours = os.environ.get("PYTHONPATH", "")
    theirs = os.pathsep.join(str(args.baseline / "packages" / p / "src") for p in
                             ("hexir-compiler", "hexir-format", "hexir-runtime")) \
        if args.baseline else ""
    seconds = {(p, e): [] for p in programs for e in engines}
    with tempfile.TemporaryDirectory() as cache:
        for r in range(args.rounds):
            for program in programs:
                turn = r % len(engines)
                for engine in engines[turn:] + engines[:turn]:  # interleaved, rotated
                    if engine == "numpy" and program == "attention":
                        continue
                    env = {**os.environ,
                           "PYTHONPATH": theirs if engine.startswith("baseline") else ours}
                    done = subprocess.run([sys.executable, __file__, "--worker", engine, program,
                                           cache, f"--calls={args.calls}"], capture_output=True,
                                          text=True, check=True, env=env)
                    seconds[program, engine].append(json.loads(done.stdout))
        print(f"onnxruntime {onnxruntime.__version__}, numpy {np.__version__}; this CPU: {CPU}; "
              f"median of {args.rounds} fresh processes x {args.calls} calls\n")
        print("| program | engine | median | / ORT | slowest / median | max rel. diff |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        for program in programs:
            ort_median = statistics.median(t for t, _ in seconds[program, "onnxruntime"])
            diff = f"{check(program, Path(cache)):.1e}"
            for engine in engines:
                if not seconds[program, engine]:
                    continue
                median = statistics.median(t for t, _ in seconds[program, engine])
                spread = statistics.median(s for _, s in seconds[program, engine])
                print(f"| {program} | {engine} | {median * 1e6:.1f} us | "
                      f"{median / ort_median:.2f} | {spread:.2f} | {diff} |")
                diff = ""
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
