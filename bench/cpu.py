"""The compiled cpu path against the previous numpy path and plain numpy, in one run.

    python bench/cpu.py [--calls=200] [--threads=N] [--cpu=x86-64-v4]

Needs the `full` environment (it compiles the examples). For each example network
(`examples/*.mlir`, f32 and f64) it times one call of `main`, median of `--calls` after a
warm-up, three ways, on the same input:
- compiled: the runtime as shipped (each cpu kernel its x86-64 host image, the cpu grid split
  over the thread pool, the network fused by `hexir-fuse`, the default);
- unfused: the same, compiled with `-fusion=off` (one kernel per op);
- plain numpy: the network written directly in numpy in the program's element type (no
  interpreter, no buffers).
(The numpy path of the runtime before format version 5 -- every DISPATCH a numpy body of its
kind -- is gone with those bodies; bench/README.md keeps its recorded figures.)

Then the matmuls: each matmul shape of the networks, and a few larger ones, as a one-op module
compiled two ways -- its rhs an input (an activation: the matrix-rows loops) and a constant
(a weight: the same loops, or above `schedule.PANEL_MIN_MACS` the rhs packed into panels) --
against `np.matmul` called directly on the same operands (numpy's BLAS; every compiled
matmul is loops, so this is the reference, not an alternative the runtime takes). Modules are
compiled for `--cpu` (default: this machine's x86-64 level, as a deployment would be).
Ratios are from this run on this machine; absolute times are printed for context only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "examples"), str(REPO / "packages" / "hexir-runtime" / "tests")]

import reference  # noqa: E402

PROGRAMS = ("mlp.mlir", "mlp-f64.mlir", "transformer_block.mlir", "transformer_block-f64.mlir")


def median_seconds(fn, calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


CPU: list[str] = []  # the level modules are compiled for (main sets it)


def compile_program(text_or_path, element_path: bool = True, fuse: bool = True) -> bytes:
    from hexir_compiler import serialize
    from hexir_compiler.dialects import context
    from hexir_compiler.mlir import ir
    from hexir_compiler.pipeline import Options, compile_file, run

    options = Options("hxb", fuse=fuse, cpu=CPU[0])
    if element_path:
        return compile_file(text_or_path, options)
    with context():
        return serialize.build(run(ir.Module.parse(text_or_path), options))


def plain_numpy(program: Path, dtype):
    text = program.read_text()
    weights = {k: v.astype(dtype) for k, v in reference.load_constants(text).items()}
    network = reference._network(program, text)
    return lambda x: network(x, weights)


def networks(calls: int) -> list[str]:
    import hexir_runtime as hr

    rows = ["| network | compiled | unfused | plain numpy | unfused / compiled | "
            "plain numpy / compiled |",
            "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name in PROGRAMS:
        program = REPO / "examples" / name
        module = hr.load(compile_program(program))
        unfused_module = hr.load(compile_program(program, fuse=False))
        x = reference.sample_input(program, np.random.default_rng(0))
        compiled = median_seconds(lambda m=module, x=x: m.main(x), calls)
        unfused = median_seconds(lambda m=unfused_module, x=x: m.main(x), calls)
        direct = plain_numpy(program, x.dtype)
        plain = median_seconds(lambda f=direct, x=x: f(x), calls)
        rows.append(f"| {name} | {compiled * 1e3:.3f} ms | {unfused * 1e3:.3f} ms | "
                    f"{plain * 1e3:.3f} ms | {unfused / compiled:.2f} | "
                    f"{plain / compiled:.2f} |")
    return rows


MATMULS = ((2, 2, 2), (8, 784, 256), (8, 256, 128), (8, 128, 10), (32, 64, 64),
           (32, 64, 256), (32, 256, 64), (256, 256, 256), (512, 128, 128), (64, 512, 2048))


def matmuls(calls: int) -> list[str]:
    import hexir_runtime as hr
    from hexir_compiler.transforms.tir import schedule

    rows = ["| m x k x n (f32) | rhs an input | rhs a constant | np.matmul | input / numpy "
            "| constant / numpy | the constant's schedule |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    rng = np.random.default_rng(1)
    for m, k, n in MATMULS:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        t = lambda *d: f"tensor<{'x'.join(map(str, d))}xf32>"
        product = (f'  %c = "hexir.linear"(%a, %b) : ({t(m, k)}, {t(k, n)}) -> {t(m, n)}\n'
                   f"  return %c : {t(m, n)}\n}}\n")
        as_input = f"func.func @main(%a: {t(m, k)}, %b: {t(k, n)}) -> {t(m, n)} {{\n" + product
        as_constant = (f"func.func @main(%a: {t(m, k)}) -> {t(m, n)} {{\n  %b = \"hexir.constant\""
                       f'() {{value = dense<"0x{b.tobytes().hex()}"> : {t(k, n)}}} : () -> '
                       f"{t(k, n)}\n" + product)
        want = a.astype(np.float64) @ b
        timed = []
        for text, operands in ((as_input, (a, b)), (as_constant, (a,))):
            module = hr.load(compile_program(text, element_path=False))
            assert reference.relative_error(module.main(*operands), want) < 1e-5
            timed.append(median_seconds(lambda m=module, o=operands: m.main(*o), calls))
        blas = median_seconds(lambda a=a, b=b: np.matmul(a, b), calls)
        rhs_input, rhs_constant = timed
        pick = "panels" if m * k * n > schedule.PANEL_MIN_MACS else "rows"
        rows.append(f"| {m} x {k} x {n} | {rhs_input * 1e6:.1f} us | {rhs_constant * 1e6:.1f} us "
                    f"| {blas * 1e6:.1f} us | {rhs_input / blas:.2f} | {rhs_constant / blas:.2f} "
                    f"| {pick} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--threads", type=int, default=None,
                        help="cpu threads for compiled kernels (HEXIR_CPU_THREADS)")
    parser.add_argument("--cpu", default=None,
                        help="the x86-64 level to compile for (default: this machine's)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        os.environ["HEXIR_CPU_THREADS"] = str(args.threads)
    from hexir_format import CPU_LEVELS
    from hexir_runtime.hal import hostcode, threads

    CPU.append(args.cpu or CPU_LEVELS[max(2, hostcode.host_level())])
    print(f"compiled for {CPU[0]}; cpu threads: {threads.cpu_threads()} of {os.cpu_count()} "
          f"cores; numpy {np.__version__}; median of {args.calls} calls\n")
    print("\n".join(networks(args.calls)))
    print()
    print("\n".join(matmuls(max(1, args.calls // 4))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
