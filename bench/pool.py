"""One pool (MaxPool or AveragePool) at a time: Hexir's cpu kernel against ONNX Runtime.

    python bench/pool.py [--threads=1] [--rounds=7] [--block=20] [--shapes=NAME,...]

The shapes are the pools of the corpus's CNNs (f32, batch 1): SqueezeNet's unpadded 3x3/2
max pools with ceil_mode, ResNet-18's padded stem pool, GoogLeNet's 3x3/1 ones, AlexNet's,
DenseNet's 2x2/2 average transitions and an Inception-style 3x3/1 average pool. Each is a
one-node ONNX model compiled with the defaults (a program per x86-64 level, the runtime runs
this host's), checked against ONNX Runtime (max pools exactly, average pools to 1e-5), then
timed as `conv.py` times its convs: interleaved blocks of `--block` calls after the other
engine's pool has stopped spinning (`timing.settle`), `--rounds` times, medians. A call
includes each runtime's own overhead (a few us for Hexir, see call.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import interleaved

#: name: (op, input [C, H, W], kernel, stride, pad (all sides), ceil_mode)
SHAPES = {
    "sq-max-111": ("MaxPool", (64, 111, 111), 3, 2, 0, 1),
    "sq-max-55": ("MaxPool", (128, 55, 55), 3, 2, 0, 1),
    "sq-max-27": ("MaxPool", (256, 27, 27), 3, 2, 0, 1),
    "sq10-max-109": ("MaxPool", (96, 109, 109), 3, 2, 0, 1),
    "r18-max-112": ("MaxPool", (64, 112, 112), 3, 2, 1, 0),
    "goog-max-28": ("MaxPool", (192, 28, 28), 3, 1, 1, 1),
    "goog-max-14": ("MaxPool", (480, 14, 14), 3, 1, 1, 1),
    "alex-max-55": ("MaxPool", (64, 55, 55), 3, 2, 0, 0),
    "dense-avg-56": ("AveragePool", (128, 56, 56), 2, 2, 0, 0),
    "dense-avg-28": ("AveragePool", (256, 28, 28), 2, 2, 0, 0),
    "incep-avg-35": ("AveragePool", (192, 35, 35), 3, 1, 1, 0),
}


def onnx_model(shape) -> bytes:
    from onnx import TensorProto, helper

    op, (c, h, w), k, s, p, ceil = shape
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[k, k], strides=[s, s],
                            pads=[p] * 4, ceil_mode=ceil)
    graph = helper.make_graph([node], "pool",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, c, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]) \
        .SerializeToString()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for both runtimes (0: each its own default)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--block", type=int, default=20)
    args = parser.parse_args(argv)
    if args.threads:  # read by the runtime's pool when it is made
        os.environ["HEXIR_CPU_THREADS"] = str(args.threads)
    import onnxruntime

    import hexir_compiler
    import hexir_runtime

    options = onnxruntime.SessionOptions()
    if args.threads:
        options.intra_op_num_threads = args.threads
    print(f"hexir (default target) against onnxruntime {onnxruntime.__version__}, "
          f"{args.threads or 'default'} thread(s)")
    print("| pool | hexir us | ORT us | hexir / ORT |")
    print("| --- | ---: | ---: | ---: |")
    for name in args.shapes.split(","):
        shape = SHAPES[name]
        model = onnx_model(shape)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "pool.onnx"
            path.write_bytes(model)
            image = hexir_compiler.compile(str(path))
        session = onnxruntime.InferenceSession(model, options,
                                               providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).standard_normal((1, *shape[1])).astype(np.float32)
        with hexir_runtime.load(image) as module:
            want, got = session.run(None, {"x": x})[0], module.main(x)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
            engines = {"hexir": lambda m=module, x=x: m.main(x),
                       "ort": lambda s=session, x=x: s.run(None, {"x": x})}
            medians = interleaved(engines, args.rounds, args.block)
        ours, theirs = medians["hexir"], medians["ort"]
        print(f"| {name} | {ours * 1e6:.1f} | {theirs * 1e6:.1f} | {ours / theirs:.2f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
