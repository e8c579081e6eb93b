"""The runtime's overhead per command and per call, against the cost of one foreign call.

    python bench/call.py [--calls=2000] [--lengths=1,8,32,128] [--sweep=MIB]

For each length n, compiles (in the `full` environment, `-fusion=off`) a chain of n
element-wise kernels on a one-element f32 tensor, `relu(relu(...(x)))`: kernels that do
nothing measurable, so a call's time is the runtime's overhead. Reports the median per call
(inputs bound, kernels run, result read back) and the slope between the shortest and the
longest chain: the overhead of one DISPATCH. The baseline, measured in the same run, is one
ctypes call of a C function that does nothing (libc's `labs`): what any dispatch from Python
costs at the least.

`--sweep=MIB` writes a buffer of that many MiB before each timed call (outside its time), as
a model's kernels leave the caches: the overhead a real call pays, with the interpreter's,
numpy's and the runtime's code and data evicted (the example MLP's kernels stream 8 MiB of
weights; at 16 MiB on the 8 MiB-L3 VM we measure on, a one-kernel call costs about ten times
its warm time). The same script on another checkout's runtime
(`PYTHONPATH=OTHER/packages/hexir-runtime/src`) compares the two.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import hexir_runtime as hr
from hexir_compiler.pipeline import Options, compile_file


def chain(n: int) -> str:
    lines = ["func.func @main(%x: tensor<1xf32>) -> tensor<1xf32> {"]
    previous = "%x"
    for i in range(n):
        lines.append(f'  %r{i} = "hexir.relu"({previous}) : (tensor<1xf32>) -> tensor<1xf32>')
        previous = f"%r{i}"
    lines += [f"  return {previous} : tensor<1xf32>", "}"]
    return "\n".join(lines) + "\n"


def median_call(module: hr.Module, x: np.ndarray, calls: int, sweep: np.ndarray) -> float:
    for _ in range(50):
        module.main(x)
    times = []
    for _ in range(calls):
        if sweep.size:
            sweep += 1
        start = time.perf_counter()
        module.main(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def foreign_call(calls: int) -> float:
    labs = ctypes.CDLL(None).labs
    labs.argtypes, labs.restype = (ctypes.c_long,), ctypes.c_long
    start = time.perf_counter()
    for _ in range(calls):
        labs(-1)
    return (time.perf_counter() - start) / calls


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--lengths", default="1,8,32,128")
    parser.add_argument("--sweep", type=int, default=0, metavar="MIB",
                        help="MiB written before each timed call (0: the caches warm)")
    args = parser.parse_args(argv)
    sweep = np.zeros(args.sweep << 20, np.uint8)
    lengths = [int(n) for n in args.lengths.split(",")]
    x = np.ones(1, np.float32)
    per_call = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in lengths:
            source = Path(tmp) / f"chain{n}.mlir"
            source.write_text(chain(n))
            # unfused: each relu its own DISPATCH (fused, the chain would be one kernel)
            with hr.load(compile_file(source, Options("hxb", fuse=False))) as m:
                per_call[n] = median_call(m, x, args.calls, sweep)
    ffi = foreign_call(args.calls * 10)
    print(f"runtime {hr.__file__}; caches "
          + (f"swept ({args.sweep} MiB) before each call" if args.sweep else "warm"))
    print(f"{'kernels':>8} {'per call':>12} {'per kernel':>12}")
    for n in lengths:
        print(f"{n:>8} {per_call[n] * 1e6:>9.1f} us {per_call[n] / n * 1e6:>9.2f} us")
    lo, hi = lengths[0], lengths[-1]
    slope = (per_call[hi] - per_call[lo]) / (hi - lo)
    print(f"one more DISPATCH: {slope * 1e6:.2f} us; one ctypes call of a no-op C function: "
          f"{ffi * 1e6:.2f} us; ratio {slope / ffi:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
