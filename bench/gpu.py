"""GPU benchmarks, built here and run on a machine with a GPU, each a ratio against a baseline
measured in the same run.

    python bench/gpu.py --build [--dir=build/gpu-bench]     # here: needs the compiler
    python bench/gpu.py --run [--dir=build/gpu-bench]       # there: the runtime, torch

The lent GPU machine has no compiler (its MLIR wheel is too large to carry), so `--build`
compiles every module here (all-cuda, `-target=cuda:sm_90`) with its inputs and a numpy
reference, and `--run` loads them there with `hexir_runtime` alone. What `--run` prints, as
markdown tables for `bench/README.md`:

| table | hexir | baseline |
| --- | --- | --- |
| GEMM f32 and f64, n = 256 ... 8192 | the kernel's device image launched on device buffers | cuBLAS (`torch.matmul`, TF32 off), the same inputs on the device |
| bandwidth at 64 MiB (relu, add, softmax, layer_norm over 4096 x 4096 f32) | the kernel, bytes it must move / time | a device-to-device copy of 64 MiB (`Tensor.copy_`) |
| networks (the example MLP and transformer block, the 64 x 512 x 2048 MLP) | `m.main(x_on_gpu, out=y_on_gpu)`, CUDA graphs on and off | the same network in PyTorch eager CUDA |
| dispatch | (graphs off - graphs on) / kernels, on the unfused transformer block | |

Inputs come from each benchmark's own seed, so both machines make the same ones without carrying
them. Every time is the median of `--iters` timed repetitions after a warm-up, each ended by a
device synchronization; every module's result is first checked against its reference (GEMMs
against cuBLAS in float64, the rest against numpy), and a wrong one is marked WRONG and makes
the exit status 1. Without a GPU, `--run` says so and exits 0.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))
import reference  # noqa: E402  (the examples' numpy oracle: their weights and networks)

GEMM_SIZES = (256, 512, 1024, 2048, 4096, 8192)
ROWS = COLS = 4096  # 16 Mi elements of f32: 64 MiB
NETWORKS = ("mlp", "transformer_block", "mlp-64x512x2048")
TOLERANCE = {"f32": 1e-4, "f64": 1e-11}  # max relative error against the reference


# -- build (here) ---------------------------------------------------------------------------

def _t(*dims: int, element: str = "f32") -> str:
    return f"tensor<{'x'.join(map(str, dims))}x{element}>"


def _one_op(op: str, inputs: list[tuple[int, ...]], output: tuple[int, ...], element: str,
            attrs: str = "") -> str:
    args = ", ".join(f"%a{i}: {_t(*s, element=element)}" for i, s in enumerate(inputs))
    types = ", ".join(_t(*s, element=element) for s in inputs)
    operands = ", ".join(f"%a{i}" for i in range(len(inputs)))
    result = _t(*output, element=element)
    return (f"func.func @main({args}) -> {result} {{\n"
            f'  %0 = "hexir.{op}"({operands}) {attrs} : ({types}) -> {result}\n'
            f"  return %0 : {result}\n}}\n")


def names() -> list[str]:
    return [*(f"gemm-{e}-{n}" for e in ("f32", "f64") for n in GEMM_SIZES),
            "relu", "add", "softmax", "layer_norm", *NETWORKS]


def program(name: str) -> str:
    """The benchmark's program text."""
    square = [(ROWS, COLS)]
    if name.startswith("gemm-"):
        _, element, n = name.split("-")
        return _one_op("matmul", [(int(n),) * 2] * 2, (int(n),) * 2, element)
    if name in ("relu", "softmax"):
        return _one_op(name, square, square[0], "f32",
                       "{axis = 1 : i64}" if name == "softmax" else "")
    if name == "add":
        return _one_op("add", square * 2, square[0], "f32")
    if name == "layer_norm":
        return _one_op("layer_norm", [*square, (COLS,), (COLS,)], square[0], "f32",
                       "{epsilon = 1.0e-05 : f64}")
    if name == "mlp-64x512x2048":
        return _wide_mlp(_wide_weights())
    return (REPO / "examples" / f"{name}.mlir").read_text()


def data(name: str) -> tuple[list[np.ndarray], np.ndarray | None]:
    """The benchmark's inputs (from a seed of its own, so both machines make the same) and
    the expected result in float64 (None for a GEMM: checked against cuBLAS there)."""
    rng = np.random.default_rng(sum(name.encode()))
    if name.startswith("gemm-"):
        _, element, n = name.split("-")
        dtype = np.float32 if element == "f32" else np.float64
        return [rng.uniform(-1, 1, (int(n), int(n))).astype(dtype) for _ in range(2)], None
    if name in ("relu", "add", "softmax", "layer_norm"):
        x, y = (rng.standard_normal((ROWS, COLS)).astype(np.float32) for _ in range(2))
        gamma, beta = (rng.standard_normal(COLS).astype(np.float32) for _ in range(2))
        inputs = {"relu": [x], "softmax": [x], "add": [x, y], "layer_norm": [x, gamma, beta]}
        inputs = inputs[name]
        wide = [a.astype(np.float64) for a in inputs]
        expected = {"relu": lambda: np.maximum(wide[0], 0), "add": lambda: wide[0] + wide[1],
                    "softmax": lambda: reference.softmax(wide[0]),
                    "layer_norm": lambda: reference.layer_norm(*wide, 1e-5)}[name]()
        return inputs, expected
    if name == "mlp-64x512x2048":
        w = {k: v.astype(np.float64) for k, v in _wide_weights().items()}
        x = rng.standard_normal((64, 512)).astype(np.float32)
        return [x], np.maximum(x @ w["w1"] + w["b1"], 0) @ w["w2"] + w["b2"]
    path = REPO / "examples" / f"{name}.mlir"
    x = reference.sample_input(path, rng)
    return [x], reference.evaluate(path, x)


def _wide_weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    shapes = {"w1": (512, 2048), "b1": (2048,), "w2": (2048, 512), "b2": (512,)}
    return {k: (rng.standard_normal(s) / math.sqrt(s[0])).astype(np.float32)
            for k, s in shapes.items()}


def _wide_mlp(w: dict[str, np.ndarray]) -> str:
    """relu(x W1 + b1) W2 + b2 with x 64x512, W1 512x2048, W2 2048x512 (issue 11's MLP)."""
    body = [f'  %{k} = "hexir.constant"() {{value = dense<"0x{v.tobytes().hex()}"> : '
            f"{_t(*v.shape)}}} : () -> {_t(*v.shape)}" for k, v in w.items()]
    body += [f'  %h = "hexir.linear"(%x, %w1) : ({_t(64, 512)}, {_t(512, 2048)}) -> {_t(64, 2048)}',
             f'  %hb = "hexir.add"(%h, %b1) : ({_t(64, 2048)}, {_t(2048)}) -> {_t(64, 2048)}',
             f'  %a = "hexir.relu"(%hb) : ({_t(64, 2048)}) -> {_t(64, 2048)}',
             f'  %y = "hexir.linear"(%a, %w2) : ({_t(64, 2048)}, {_t(2048, 512)}) -> {_t(64, 512)}',
             f'  %r = "hexir.add"(%y, %b2) : ({_t(64, 512)}, {_t(512)}) -> {_t(64, 512)}',
             f"  return %r : {_t(64, 512)}"]
    return "\n".join([f"func.func @main(%x: {_t(64, 512)}) -> {_t(64, 512)} {{", *body, "}"])


def build(directory: Path) -> int:
    """Every benchmark's .hxb (and the unfused transformer block, for the dispatch figure)."""
    import tempfile

    from hexir_compiler.pipeline import Options, compile_file

    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names():
            source = Path(tmp) / f"{name}.mlir"
            source.write_text(program(name))
            variants = {"": True, "-unfused": False} if name == "transformer_block" else {"": True}
            for suffix, fuse in variants.items():
                options = Options("hxb", {"*": "cuda"}, chip="sm_90", fuse=fuse)
                (directory / f"{name}{suffix}.hxb").write_bytes(compile_file(source, options))
            print(f"built {name}")
    print(f"wrote the modules to {directory}; carry it to the GPU machine")
    return 0


# -- run (there) ----------------------------------------------------------------------------

def median_seconds(run: Callable[[], None], sync: Callable[[], None], iters: int,
                   batch: int = 1) -> float:
    """Median over `iters` timings of `batch` calls each (after a warm-up), per call."""
    run()
    sync()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        for _ in range(batch):
            run()
        sync()
        samples.append((time.perf_counter() - start) / batch)
    return statistics.median(samples)


class Kernel:
    """A one-kernel module's device image, launched through the runtime's cuda HAL on
    buffers already on the GPU (what the baselines are timed on too)."""

    def __init__(self, device, path: Path, inputs: list[np.ndarray], out_nbytes: int):
        import hexir_format

        module = hexir_format.parse(path.read_bytes())
        (exe,) = [e for e in module.executables if e.image is not None]
        self.device, self.kernel = device, device.load_executable(exe)
        self.buffers = [device.allocate(a.nbytes, zeroed=False) for a in inputs]
        self.buffers.append(device.allocate(out_nbytes, zeroed=False))
        for buffer, a in zip(self.buffers, inputs, strict=False):
            device.write(buffer, np.ascontiguousarray(a))
        device.wait()

    def launch(self) -> None:
        self.device.launch(self.kernel, self.buffers)

    def close(self) -> None:
        for buffer in self.buffers:
            self.device.release(buffer)


def run(directory: Path, iters: int) -> int:
    from hexir_format import HexirError
    from hexir_runtime import hal

    try:
        device = hal.create_device("cuda")
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
    except (HexirError, ImportError, RuntimeError) as err:
        print(f"bench/gpu.py: skipped, no usable CUDA GPU with PyTorch here: {err}")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"device: {device.name}; torch {torch.__version__}; median of {iters}\n")
    failures = _gemm(device, directory, iters, torch)
    failures += _bandwidth(device, directory, iters, torch)
    failures += _networks(directory, iters, torch)
    device.close()
    return 1 if failures else 0


def _error(got: np.ndarray, expected: np.ndarray, limit: float) -> tuple[bool, str]:
    """(wrong, table cell): max|got - expected| / max|expected| against `limit`."""
    error = float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-30))
    return error > limit, f"{error:.1e}{' WRONG' if error > limit else ''}"


def _gemm(device, directory: Path, iters: int, torch) -> int:
    print("| GEMM | n | hexir | cuBLAS | hexir / cuBLAS | max rel. error |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    failures = 0
    for name in [n for n in names() if n.startswith("gemm-")]:
        _, element, n = name.split("-")
        (a, b), _ = data(name)
        kernel = Kernel(device, directory / f"{name}.hxb", [a, b], a.nbytes)
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        tc = torch.empty_like(ta)
        ours = median_seconds(kernel.launch, device.wait, iters)
        base = median_seconds(lambda ta=ta, tb=tb, tc=tc: torch.matmul(ta, tb, out=tc),
                              torch.cuda.synchronize, iters)
        got = np.empty_like(a)
        device.read(kernel.buffers[-1], out=got.reshape(-1).view(np.uint8))
        exact = (ta.double() @ tb.double()).cpu().numpy()
        wrong, cell = _error(got, exact, TOLERANCE[element] * math.sqrt(int(n)))
        failures += wrong
        flops = 2 * int(n) ** 3
        print(f"| {element} | {n} | {flops / ours / 1e12:.2f} TFLOP/s | "
              f"{flops / base / 1e12:.2f} TFLOP/s | {base / ours:.2f}x | {cell} |")
        kernel.close()
    print("\nhexir / cuBLAS: the fraction of cuBLAS's throughput (1.00x = as fast)\n")
    return failures


def _bandwidth(device, directory: Path, iters: int, torch) -> int:
    src = torch.empty(ROWS * COLS, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    copy = median_seconds(lambda: dst.copy_(src), torch.cuda.synchronize, iters)
    copy_bw = 2 * src.numel() * 4 / copy
    print(f"device-to-device copy of 64 MiB: {copy_bw / 1e9:.0f} GB/s\n")
    print("| kernel | bytes moved | hexir | of copy bandwidth | max rel. error |")
    print("| --- | ---: | ---: | ---: | ---: |")
    failures = 0
    for name in ("relu", "add", "softmax", "layer_norm"):
        inputs, expected = data(name)
        kernel = Kernel(device, directory / f"{name}.hxb", inputs, inputs[0].nbytes)
        ours = median_seconds(kernel.launch, device.wait, iters)
        got = np.empty_like(inputs[0])
        device.read(kernel.buffers[-1], out=got.reshape(-1).view(np.uint8))
        wrong, cell = _error(got, expected, TOLERANCE["f32"])
        failures += wrong
        moved = sum(a.nbytes for a in inputs) + got.nbytes  # what it must read and write
        print(f"| {name} | {moved >> 20} MiB | {moved / ours / 1e9:.0f} GB/s | "
              f"{moved / ours / copy_bw:.0%} | {cell} |")
        kernel.close()
    print()
    return failures


def _networks(directory: Path, iters: int, torch) -> int:
    import hexir_format
    import hexir_runtime

    def per_call(path: Path, tx, ty, graphs: bool) -> float:
        with hexir_runtime.load(path, device="cuda", cuda_graphs=graphs) as m:
            return median_seconds(lambda: m.main(tx, out=ty), torch.cuda.synchronize, iters,
                                  batch=20)

    print("| network | hexir, graphs | hexir, no graphs | PyTorch eager | hexir / PyTorch | "
          "max rel. error |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    failures = 0
    for name in NETWORKS:
        (x,), expected = data(name)
        tx = torch.from_numpy(x).cuda()
        ty = torch.empty(expected.shape, dtype=torch.float32, device="cuda")
        graphs, plain = (per_call(directory / f"{name}.hxb", tx, ty, g) for g in (True, False))
        wrong, cell = _error(ty.cpu().numpy(), expected, TOLERANCE["f32"])
        failures += wrong
        eager = _torch_network(name, torch)
        base = median_seconds(lambda eager=eager, tx=tx: eager(tx), torch.cuda.synchronize,
                              iters, batch=20)
        print(f"| {name} | {graphs * 1e6:.1f} us | {plain * 1e6:.1f} us | {base * 1e6:.1f} us "
              f"| {graphs / base:.2f}x | {cell} |")
    unfused = directory / "transformer_block-unfused.hxb"
    kernels = sum(e.device == hexir_format.Device.CUDA
                  for e in hexir_format.parse(unfused.read_bytes()).executables)
    (x,), _ = data("transformer_block")
    tx = torch.from_numpy(x).cuda()
    graphs, plain = (per_call(unfused, tx, torch.empty_like(tx), g) for g in (True, False))
    print(f"\ndispatch, unfused transformer block ({kernels} kernels): {graphs * 1e6:.1f} us a "
          f"call with cuda graphs, {plain * 1e6:.1f} us without: "
          f"{(plain - graphs) / kernels * 1e6:.2f} us saved per kernel")
    return failures


def _torch_network(name: str, torch, device: str = "cuda") -> Callable:
    """The network in PyTorch eager on `device`, from the same weights and definition."""
    weights = _wide_weights() if name == "mlp-64x512x2048" else reference.load_constants(
        program(name))
    w = {k: torch.from_numpy(v.astype(np.float32)).to(device) for k, v in weights.items()}
    f = torch.nn.functional
    if name == "mlp":
        return lambda x: torch.softmax(
            f.relu(f.relu(x @ w["w1"] + w["b1"]) @ w["w2"] + w["b2"]) @ w["w3"] + w["b3"], -1)
    if name == "mlp-64x512x2048":
        return lambda x: f.relu(x @ w["w1"] + w["b1"]) @ w["w2"] + w["b2"]

    def block(x):
        batch, seq, d = x.shape
        heads = 4

        def split(t):
            return t.reshape(batch, seq, heads, d // heads).transpose(1, 2)

        a = f.layer_norm(x, (d,), w["ln1_gamma"], w["ln1_beta"], 1e-5)
        q, k, v = (split(a @ w[f"w{p}"] + w[f"b{p}"]) for p in "qkv")
        attn = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // heads), -1)
        h = x + (attn @ v).transpose(1, 2).reshape(batch, seq, d) @ w["wo"] + w["bo"]
        g = f.gelu(f.layer_norm(h, (d,), w["ln2_gamma"], w["ln2_beta"], 1e-5) @ w["w1"]
                   + w["b1"])
        return h + g @ w["w2"] + w["b2"]

    return block


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/gpu.py", description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--build", action="store_true", help="compile the modules (here)")
    mode.add_argument("--run", action="store_true", help="time them (on the GPU machine)")
    parser.add_argument("--dir", type=Path, default=REPO / "build" / "gpu-bench")
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args(argv)
    if args.iters < 1:
        parser.error("--iters must be at least 1")
    return build(args.dir) if args.build else run(args.dir, args.iters)


if __name__ == "__main__":
    sys.exit(main())
