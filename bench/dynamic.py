"""What a dynamic module's call costs over a static one's, once its sizes were seen.

    python bench/dynamic.py [--rounds=7] [--calls=500] [--batches=1,64,4096]

A call of a dynamic module binds its sizes from its inputs' shapes and runs the program
planned for them, kept from an earlier call with those shapes (a cache hit). Two pairs of
modules, built with hexir_format (no compiler needed), timed interleaved, round by round,
in one run:

- **copy**: `y = x` through a COPY, `x` batchx4xf32: no kernel, so the call is nothing but
  the runtime's own work, the worst case for the dynamic path's overhead; against the same
  module with `batch` fixed (static).
- **rows**: `y = relu(x . W)`, W 4x3, the two compiled cpu kernels of the runtime's tests
  (packages/hexir-runtime/tests/fixtures/host/rows_*.o), told `batch` per call; against
  numpy computing the same in the same run (a reference, not a static module: these kernels
  are compiled to take their size).

Reports each median per call and the ratio dynamic / static (copy) or hexir / numpy (rows).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

import hexir_format as hf
import hexir_runtime as hr
from hexir_format import Command, Device, DType, Executable, Function, KernelKind, Slot, dims
from hexir_format import TensorType as T
from hexir_format.model import Symbol

HOST = Path(__file__).resolve().parents[1] / "packages" / "hexir-runtime" / "tests" / \
    "fixtures" / "host"
BATCH = dims.Expr.symbol("batch")
W = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5) / 4


def copy(batch: dims.Dim) -> hf.Module:
    t = T(DType.F32, (batch, 4))
    main = Function("main", (Command.input(0, 0), Command.copy(1, 0), Command.output(1, 0)))
    symbols = () if isinstance(batch, int) else (Symbol("batch", 1, 1 << 20),)
    return hf.Module(6, (main,), b"", (), (Slot(Device.CPU, t),) * 2, symbols=symbols)


def rows() -> hf.Module:
    x, w, h = T(DType.F32, (BATCH, 4)), T(DType.F32, (4, 3)), T(DType.F32, (BATCH, 3))
    exes = tuple(Executable(name, kind, Device.CPU, args,
                            image=(HOST / f"{name}.o").read_bytes(), grid=(BATCH, 1, 1),
                            block=(1, 1, 1), cpu_level=3, operands=(0,))
                 for name, kind, args in (("rows_matmul", KernelKind.MATMUL, (x, w, h)),
                                          ("rows_relu", KernelKind.RELU, (h, h))))
    main = Function("main", (
        Command.input(0, 0), Command.const(1, 0, W.nbytes), Command.alloc(2, h.nbytes),
        Command.dispatch(0, (0, 1, 2)), Command.alloc(3, h.nbytes), Command.dispatch(1, (2, 3)),
        Command.output(3, 0)))
    return hf.Module(6, (main,), W.tobytes(), exes,
                     tuple(Slot(Device.CPU, t) for t in (x, w, h, h)),
                     symbols=(Symbol("batch", 1, 1 << 24),))


def per_call(run, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls


def interleaved(runs: dict, rounds: int, calls: int) -> dict[str, float]:
    """The median over `rounds` of each run's mean per call, the runs taking turns."""
    for run in runs.values():  # warm: arenas made, bindings planned
        for _ in range(20):
            run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(per_call(run, calls))
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--batches", default="1,64,4096")
    args = parser.parse_args(argv)
    batches = [int(n) for n in args.batches.split(",")]
    print(f"load average {os.getloadavg()[0]:.2f}; median of {args.rounds} rounds of "
          f"{args.calls} calls, interleaved")
    print("| module | batch | static / numpy | dynamic (cache hit) | ratio |")
    print("| --- | ---: | ---: | ---: | ---: |")
    with hr.load(hf.build(copy(BATCH))) as dynamic, hr.load(hf.build(rows())) as kernels:
        for n in batches:
            x = np.ones((n, 4), np.float32)
            with hr.load(hf.build(copy(n))) as static:
                t = interleaved({"static": lambda: static.main(x),  # noqa: B023
                                 "dynamic": lambda: dynamic.main(x)},  # noqa: B023
                                args.rounds, args.calls)
            print(f"| copy | {n} | {t['static'] * 1e6:.1f} us | {t['dynamic'] * 1e6:.1f} us "
                  f"| {t['dynamic'] / t['static']:.2f} |")
        for n in batches:
            x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
            np.testing.assert_allclose(kernels.main(x), np.maximum(x @ W, 0), rtol=1e-5,
                                       atol=1e-5)
            t = interleaved({"numpy": lambda: np.maximum(x @ W, 0),  # noqa: B023
                             "hexir": lambda: kernels.main(x)},  # noqa: B023
                            args.rounds, args.calls)
            print(f"| rows | {n} | {t['numpy'] * 1e6:.1f} us | {t['hexir'] * 1e6:.1f} us "
                  f"| {t['hexir'] / t['numpy']:.2f} |")
        hits, misses, kept = dynamic.cache_info
        print(f"copy: {hits} cache hits, {misses} misses, {kept} programs kept")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
