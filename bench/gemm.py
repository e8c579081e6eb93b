"""GEMM on the GPU: Hexir's matmul kernel against cuBLAS, in one run on one machine.

    python bench/gemm.py [--sizes=256,512,1024,2048,4096] [--dtype=f32|f64] [--iters=20]
                         [--target=sm_90]

For each n it writes a program with one `hexir.linear` (n x n times n x n), compiles it with
`hexir -emit=hxb -placement=hexir.linear=cuda`, loads the .hxb with `hexir_runtime`, checks
the product against numpy, and times:

- hexir kernel: the executable's device image launched through the runtime's cuda HAL on
  buffers already on the GPU (what cuBLAS is timed on too);
- hexir end to end: `module.main(a, b)`, which also copies both inputs to the GPU and the
  product back;
- cuBLAS: the same product through CuPy (`cupy.matmul`) or, without CuPy, PyTorch
  (`torch.matmul`, TF32 off), on the same inputs.

Each timing is the mean of `--iters` calls after one warm-up, with the device synchronized
before the clock stops. Without a GPU (or the NVIDIA driver) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

DTYPES = {"f32": np.float32, "f64": np.float64}
TOLERANCE = {"f32": 1e-4, "f64": 1e-12}  # max relative error, per sqrt(K) of accumulation


def program(n: int, dtype: str) -> str:
    t = f"tensor<{n}x{n}x{dtype}>"
    return (
        f"func.func @main(%a: {t}, %b: {t}) -> {t} {{\n"
        f'  %c = "hexir.linear"(%a, %b) : ({t}, {t}) -> {t}\n'
        f"  func.return %c : {t}\n"
        "}\n"
    )


def compile_gemm(n: int, dtype: str, target: str | None, workdir: Path) -> Path:
    """The .hxb of an n x n GEMM with the linear op on cuda, compiled by the `hexir` CLI."""
    source, output = workdir / f"gemm-{n}-{dtype}.mlir", workdir / f"gemm-{n}-{dtype}.hxb"
    source.write_text(program(n, dtype))
    command = [
        sys.executable,
        "-m",
        "hexir_compiler",
        "-emit=hxb",
        "-placement=hexir.linear=cuda",
        *([f"-target=cuda:{target}"] if target else []),
        "-o",
        str(output),
        str(source),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench/gemm.py: hexir failed on {source.name}: {done.stderr.strip()}")
    return output


def mean_seconds(run: Callable[[], None], sync: Callable[[], None], iters: int) -> float:
    run()
    sync()
    start = time.perf_counter()
    for _ in range(iters):
        run()
    sync()
    return (time.perf_counter() - start) / iters


def time_kernel(device, hxb: Path, a: np.ndarray, b: np.ndarray, iters: int) -> float:
    """The device image alone, launched on inputs already on the GPU."""
    import hexir_format

    module = hexir_format.parse(hxb.read_bytes())
    exe = next(e for e in module.executables if e.image is not None)
    kernel = device.load_executable(exe)
    buffers = [device.allocate(x.nbytes, zeroed=False) for x in (a, b, a)]
    device.write(buffers[0], a)
    device.write(buffers[1], b)
    try:
        return mean_seconds(lambda: device.launch(kernel, buffers), device.wait, iters)
    finally:
        for buffer in buffers:
            device.release(buffer)


def time_end_to_end(
    hxb: Path, a: np.ndarray, b: np.ndarray, iters: int
) -> tuple[float, np.ndarray]:
    import hexir_runtime

    with hexir_runtime.load(hxb, device="cuda") as module:
        product = module.main(a, b)
        return mean_seconds(lambda: module.main(a, b), lambda: None, iters), product


def cublas() -> tuple[str, Callable[[np.ndarray, np.ndarray, int], float]] | None:
    """A cuBLAS GEMM timer through CuPy or PyTorch, whichever is installed."""
    try:
        import cupy

        def run_cupy(a: np.ndarray, b: np.ndarray, iters: int) -> float:
            da, db = cupy.asarray(a), cupy.asarray(b)
            dc = cupy.empty_like(da)
            sync = cupy.cuda.Device().synchronize
            return mean_seconds(lambda: cupy.matmul(da, db, out=dc), sync, iters)

        return "cuBLAS (CuPy)", run_cupy
    except ImportError:
        pass
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False

    def run_torch(a: np.ndarray, b: np.ndarray, iters: int) -> float:
        da, db = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        dc = torch.empty_like(da)
        return mean_seconds(lambda: torch.matmul(da, db, out=dc), torch.cuda.synchronize, iters)

    return "cuBLAS (PyTorch)", run_torch


def relative_error(product: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    expected = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.maximum(np.abs(expected), 1.0)
    return float(np.max(np.abs(product - expected) / scale))


def gflops(n: int, seconds: float) -> float:
    return 2 * n**3 / seconds / 1e9


def row(n: int, kernel: float, e2e: float, base: float | None, verdict: str) -> str:
    """One line of the table: times in ms and GFLOP/s, and the kernel/cuBLAS ratio."""
    cells = [f"{s * 1e3:9.3f} ms {gflops(n, s):8.1f} GF/s" for s in (kernel, e2e)]
    cells.append(f"{base * 1e3:9.3f} ms {gflops(n, base):8.1f} GF/s" if base else f"{'-':>22}")
    ratio = f"{kernel / base:6.1f}x" if base else f"{'-':>7}"
    return f"{n:>6} {' '.join(cells)} {ratio}  {verdict}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/gemm.py", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="256,512,1024,2048,4096")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--target", default=None, help="CUDA architecture, e.g. sm_90")
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes: expected comma-separated integers, got '{args.sizes}'")
    if args.iters < 1 or any(n < 1 for n in sizes):
        parser.error("--iters and every size must be at least 1")

    from hexir_format import HexirError
    from hexir_runtime import hal

    try:
        device = hal.create_device("cuda")
    except HexirError as err:
        print(f"bench/gemm.py: skipped, no usable CUDA GPU here: {err}")
        return 0
    baseline = cublas()
    target = args.target or "default (PTX sm_75)"
    print(f"device : {device.name}")
    print(f"dtype  : {args.dtype}   iters: {args.iters}   target: {target}")
    print(f"base   : {baseline[0] if baseline else 'none (install cupy or torch for cuBLAS)'}\n")
    header = ("n", "hexir kernel", "hexir end to end", "cuBLAS", "ratio")
    print(f"{header[0]:>6} {header[1]:>22} {header[2]:>22} {header[3]:>22} {header[4]:>7}  verify")

    rng = np.random.default_rng(0)
    failures = 0
    with tempfile.TemporaryDirectory(prefix="hexir-bench-") as tmp:
        for n in sizes:
            hxb = compile_gemm(n, args.dtype, args.target, Path(tmp))
            a = rng.uniform(-1, 1, (n, n)).astype(DTYPES[args.dtype])
            b = rng.uniform(-1, 1, (n, n)).astype(DTYPES[args.dtype])
            kernel = time_kernel(device, hxb, a, b, args.iters)
            e2e, product = time_end_to_end(hxb, a, b, args.iters)
            error = relative_error(product, a, b)
            ok = error <= TOLERANCE[args.dtype] * np.sqrt(n)
            failures += not ok
            base = baseline[1](a, b, args.iters) if baseline else None
            print(row(n, kernel, e2e, base, f"{'ok' if ok else 'WRONG'} ({error:.2g})"))
    device.close()
    print("\nratio = hexir kernel time / cuBLAS time (kernel only, both on device-resident inputs)")
    if failures:
        print(
            f"bench/gemm.py: {failures} size(s) computed the wrong product; their timings "
            "mean nothing",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
