"""One conv (+ bias + relu) at a time: Hexir's cpu kernel against ONNX Runtime, in one process.

    python bench/conv.py [--target=x86-64-v3] [--rounds=5] [--block=5] [--threads=N]
                         [--shapes=NAME,...]

The shapes are the convolutions ResNet-18, MobileNetV2 and V3, EfficientNet-B0, SqueezeNet 1.1
and 1.0, ResNeXt-style grouped convs, ConvNeXt's 7x7 depthwise and DeepLabV3's dilated 3x3s
spend their time in (f32, batch 1, the weight a constant). Each is compiled as a one-op Hexir
module and built as a one-node ONNX model with the same weights, checked against each other,
then timed in interleaved blocks of `--block` calls, `--rounds` times (medians of the per-call
times), each block after the other engine's pool has stopped spinning (`timing.settle`: ORT's
keeps a core busy ~40 ms after a call, and Hexir's two threads beside it ran no faster than
one). Prints ms per call, the achieved G multiply-adds/s (nominal: every window offset counted,
those that read only padding too) and hexir / ORT: where a model's conv time goes, kernel by
kernel.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import interleaved

#: name: (input [C, H, W], output channels, kernel, stride, pad, group[, dilation])
SHAPES = {
    "r18-stem-7x7": ((3, 224, 224), 64, 7, 2, 3, 1),
    "r18-l1-3x3": ((64, 56, 56), 64, 3, 1, 1, 1),
    "r18-l2-3x3": ((128, 28, 28), 128, 3, 1, 1, 1),
    "r18-l2-down-3x3s2": ((64, 56, 56), 128, 3, 2, 1, 1),
    "r18-l3-3x3": ((256, 14, 14), 256, 3, 1, 1, 1),
    "r18-l4-3x3": ((512, 7, 7), 512, 3, 1, 1, 1),
    "r18-l4-1x1s2": ((256, 14, 14), 512, 1, 2, 0, 1),
    "mv2-1x1-expand": ((24, 56, 56), 144, 1, 1, 0, 1),
    "mv2-dw-3x3": ((144, 56, 56), 144, 3, 1, 1, 144),
    "mv2-dw-3x3s2": ((144, 56, 56), 144, 3, 2, 1, 144),
    "mv2-1x1-project": ((144, 28, 28), 32, 1, 1, 0, 1),
    "mv2-1x1-112": ((16, 112, 112), 96, 1, 1, 0, 1),
    "mv2-dw-3x3-14": ((576, 14, 14), 576, 3, 1, 1, 576),
    "mv2-dw-3x3-7": ((960, 7, 7), 960, 3, 1, 1, 960),
    "en-dw-3x3-112": ((32, 112, 112), 32, 3, 1, 1, 32),
    "en-dw-5x5s2": ((144, 56, 56), 144, 5, 2, 2, 144),
    "en-dw-5x5-28": ((240, 28, 28), 240, 5, 1, 2, 240),
    "en-dw-5x5-14": ((672, 14, 14), 672, 5, 1, 2, 672),
    "en-dw-5x5-7": ((1152, 7, 7), 1152, 5, 1, 2, 1152),
    "en-stem-3x3s2": ((3, 224, 224), 32, 3, 2, 1, 1),
    "sq-stem-3x3s2": ((3, 224, 224), 64, 3, 2, 0, 1),
    "sq-1x1-classifier": ((512, 13, 13), 1000, 1, 1, 0, 1),
    "en-1x1-14": ((112, 14, 14), 672, 1, 1, 0, 1),
    "en-1x1-7": ((320, 7, 7), 1280, 1, 1, 0, 1),
    "sq-1x1-expand": ((16, 55, 55), 64, 1, 1, 0, 1),
    "sq-1x1-squeeze": ((64, 55, 55), 16, 1, 1, 0, 1),
    "sq-1x1-squeeze-128": ((128, 55, 55), 16, 1, 1, 0, 1),
    "sq-3x3-expand": ((16, 55, 55), 64, 3, 1, 1, 1),
    "sq10-stem-7x7s2": ((3, 224, 224), 96, 7, 2, 0, 1),
    "sq10-3x3-expand": ((32, 54, 54), 128, 3, 1, 1, 1),
    "rx-g3x3-56": ((32, 56, 56), 32, 3, 1, 1, 2),
    "rx-g3x3-14": ((160, 14, 14), 160, 3, 1, 1, 10),
    "rx-g3x3-7": ((400, 7, 7), 400, 3, 1, 1, 25),
    "rx-1x1-7": ((400, 7, 7), 400, 1, 1, 0, 1),
    "cnx-dw-7x7-56": ((96, 56, 56), 96, 7, 1, 3, 96),
    "cnx-dw-7x7-28": ((192, 28, 28), 192, 7, 1, 3, 192),
    "cnx-dw-7x7-14": ((384, 14, 14), 384, 7, 1, 3, 384),
    "cnx-dw-7x7-7": ((768, 7, 7), 768, 7, 1, 3, 768),
    "mv3-stem-3x3s2": ((3, 224, 224), 16, 3, 2, 1, 1),
    "mv3-dw-3x3s2-112": ((64, 112, 112), 64, 3, 2, 1, 64),
    "mv3-dw-5x5s2-56": ((72, 56, 56), 72, 5, 2, 2, 72),
    "mv2-1x1-project-112": ((32, 112, 112), 16, 1, 1, 0, 1),
    "mv2-1x1-project-56": ((144, 56, 56), 24, 1, 1, 0, 1),
    "mv2-1x1-project-14": ((576, 14, 14), 96, 1, 1, 0, 1),
    "dl-aspp-3x3d12": ((960, 14, 14), 256, 3, 1, 12, 1, 12),
    "dl-3x3d2-14": ((256, 14, 14), 256, 3, 1, 2, 1, 2),
}


def _geometry(shape):
    """(input, output channels, kernel, stride, pad, group, dilation)."""
    return (*shape, 1) if len(shape) == 6 else shape


def _out(size: int, k: int, s: int, p: int, d: int = 1) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def hexir_program(shape, w: np.ndarray, bias: np.ndarray) -> str:
    (c, h, width), m, k, s, p, group, d = _geometry(shape)
    oh, ow = _out(h, k, s, p, d), _out(width, k, s, p, d)
    t = lambda *d: f"tensor<{'x'.join(map(str, d))}xf32>"
    dense = lambda name, a: (f'  %{name} = "hexir.constant"() '
                             f'{{value = dense<"0x{a.tobytes().hex()}">'
                             f" : {t(*a.shape)}}} : () -> {t(*a.shape)}")
    o = t(1, m, oh, ow)
    return "\n".join([
        f"func.func @main(%x: {t(1, c, h, width)}) -> {o} {{",
        dense("w", w), dense("b", bias),
        (f'  %c = "hexir.conv"(%x, %w) {{strides = array<i64: {s}, {s}>, pads = array<i64: '
         f"{p}, {p}, {p}, {p}>, dilations = array<i64: {d}, {d}>, group = {group} : i64}} : "
         f"({t(1, c, h, width)}, {t(*w.shape)}) -> {o}"),
        f'  %a = "hexir.add"(%c, %b) : ({o}, {t(*bias.shape)}) -> {o}',
        f'  %r = "hexir.relu"(%a) : ({o}) -> {o}', f"  return %r : {o}", "}"]) + "\n"


def onnx_model(shape, w: np.ndarray, bias: np.ndarray) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    (c, h, width), _, _, s, p, group, d = _geometry(shape)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[s, s], pads=[p] * 4,
                              dilations=[d, d], group=group),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias.reshape(-1), "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _ort_options(onnxruntime, threads: int):
    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return options


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="x86-64-v3")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: the process's CPU time (with --threads=1, what a busy "
                             "machine's other processes barely disturb)")
    parser.add_argument("--threads", type=int, default=0,
                        help="threads for both runtimes (default: each its own default)")
    parser.add_argument("--block", type=int, default=5)
    args = parser.parse_args(argv)
    if args.threads:  # read by the runtime's pool when it is made
        os.environ["HEXIR_CPU_THREADS"] = str(args.threads)
    import onnxruntime

    import hexir_runtime

    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    from hexir_compiler.pipeline import compile as compile_source

    print(f"hexir -target=cpu:{args.target} against onnxruntime {onnxruntime.__version__}")
    print("| conv | hexir ms | ORT ms | hexir GMAC/s | ORT GMAC/s | hexir / ORT |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in args.shapes.split(","):
        shape = SHAPES[name]
        (c, h, width), m, k, s, p, group, d = _geometry(shape)
        rng = np.random.default_rng(0)
        w = (rng.standard_normal((m, c // group, k, k)) / np.sqrt(c // group * k * k)).astype(
            np.float32)
        bias = rng.standard_normal((m, 1, 1)).astype(np.float32)
        x = rng.standard_normal((1, c, h, width)).astype(np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "conv.mlir"
            source.write_text(hexir_program(shape, w, bias))
            image = compile_source(source, "hxb", target=f"cpu:{args.target}")
        session = onnxruntime.InferenceSession(onnx_model(shape, w, bias),
                                               _ort_options(onnxruntime, args.threads),
                                               providers=["CPUExecutionProvider"])
        with hexir_runtime.load(image) as module:
            want = session.run(None, {"x": x})[0]
            got = module.main(x)
            assert np.abs(got - want).max() <= 1e-4 * max(1.0, np.abs(want).max()), name
            engines = {"hexir": lambda m=module, x=x: m.main(x),
                       "ort": lambda s=session, x=x: s.run(None, {"x": x})}
            medians = interleaved(engines, args.rounds, args.block, clock)
        ours, theirs = medians["hexir"], medians["ort"]
        macs = m * _out(h, k, s, p, d) * _out(width, k, s, p, d) * (c // group) * k * k
        print(f"| {name} | {ours * 1e3:.3f} | {theirs * 1e3:.3f} | {macs / ours / 1e9:.1f} | "
              f"{macs / theirs / 1e9:.1f} | {ours / theirs:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
