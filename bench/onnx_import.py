"""Import and compile an ONNX model with 256 MiB of weights: wall time and peak memory.

    python bench/onnx_import.py [--mib=256] [--layers=4]

Builds an MLP of `--layers` square f32 Linear layers holding `--mib` MiB of weights in all,
saved with external data (the weights in a side file, as large models ship), then, in a fresh
process each, measures (1) onnx.load alone, (2) `hexir_compiler.compile(model.onnx)` to .hxb
bytes: seconds and the process's peak resident memory (ru_maxrss), printed against the
weights' size. Needs the `full` environment (compiler, onnx).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
import onnx
kind, path = sys.argv[1], sys.argv[2]
start = time.perf_counter()
if kind == "load":
    onnx.load(path)
    size = 0
else:
    import hexir_compiler
    size = len(hexir_compiler.compile(path))
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "peak": peak, "hxb": size}))
"""


def build(path: Path, mib: int, layers: int) -> int:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    n = int(math.sqrt(mib * 2**20 / 4 / layers))
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((n, n), dtype=np.float32) / math.sqrt(n)), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"]))
        nodes.append(helper.make_node("Relu", [f"h{i}"], [f"r{i}"]))
        prev = f"r{i}"
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                           [8, n])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [8, n])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path), save_as_external_data=True, location="weights.bin")
    return layers * n * n * 4


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.onnx"
        weights = build(path, args.mib, args.layers)
        print(f"weights: {weights / 2**20:.0f} MiB in {args.layers} layers (external data)")
        for kind in ("load", "compile"):
            out = subprocess.run([sys.executable, "-c", CHILD, kind, str(path)], check=True,
                                 capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            what = "onnx.load" if kind == "load" else "hexir_compiler.compile -> .hxb"
            print(f"{what:32} {r['seconds']:6.2f} s   peak RSS {r['peak'] / 2**20:6.0f} MiB "
                  f"= {r['peak'] / weights:4.1f}x the weights")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
