"""Every kernel hexir-lower-to-tir writes computes its op, on both devices, in f32 and f64.

Each case is a one-op program on random shapes (broadcasting, sizes that thread blocks and
16x16 tiles do not divide, rank 0 where the op allows it). The kernel is run by `tir_interp`
under its own schedule -- a cuda kernel as every thread of its grid, guards and all, with
races and out-of-bounds accesses as failures -- and compared with numpy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from hexir_compiler.mlir import ir
from tir_programs import Case, Lowered, _ints, assert_close, reference, sample, to_gpu

UNARY = ("relu", "sigmoid", "tanh", "exp", "sqrt", "neg", "abs")
BINARY = ("add", "sub", "mul", "div")
SEEDS = range(4)


def _shape(rng: np.random.Generator, low: int = 0, high: int = 3, dim: int = 7) -> tuple:
    return tuple(int(d) for d in rng.integers(1, dim + 1, rng.integers(low, high + 1)))


def _broadcast_operand(rng: np.random.Generator, out: tuple) -> tuple:
    """A shape that numpy-broadcasts to `out`: leading dims dropped, some dims set to 1."""
    kept = out[rng.integers(0, len(out) + 1) :]
    return tuple(1 if rng.random() < 0.3 else d for d in kept)


def _cases(seed: int) -> list[Case]:
    rng = np.random.default_rng(seed)
    cases = [Case(op, [s := _shape(rng)], s) for op in UNARY]
    for op in BINARY:
        out = _shape(rng, 0, 4)
        a, b = _broadcast_operand(rng, out), _broadcast_operand(rng, out)
        full = tuple(np.broadcast_shapes(a, b))
        cases.append(Case(op, [a, b], full))
    for approximate in ("none", "tanh"):
        s = _shape(rng, 1)
        cases.append(Case("gelu", [s], s, {"approximate": f'"{approximate}"'}))
    m, k, n = (int(v) for v in rng.integers(1, 21, 3))
    batch = _shape(rng, 0, 2, 3)
    a_batch, b_batch = _broadcast_operand(rng, batch), _broadcast_operand(rng, batch)
    full = tuple(np.broadcast_shapes(a_batch, b_batch))
    cases.append(Case("matmul", [(*a_batch, m, k), (*b_batch, k, n)], (*full, m, n)))
    lead = _shape(rng, 0, 2, 4)
    cases.append(Case("linear", [(*lead, k), (k, n)], (*lead, n)))
    s = _shape(rng, 1)
    axis = int(rng.integers(-len(s), len(s)))
    cases.append(Case("softmax", [s], s, {"axis": f"{axis} : i64"}))
    s = _shape(rng, 1)
    cases.append(Case("layer_norm", [s, s[-1:], s[-1:]], s, {"epsilon": "1.0e-05 : f64"}))
    s = _shape(rng, 0, 4, 5)
    perm = [int(p) for p in rng.permutation(len(s))]
    cases.append(
        Case(
            "transpose",
            [s],
            tuple(s[p] for p in perm),
            {"permutation": f"array<i64{': ' if perm else ''}{', '.join(map(str, perm))}>"},
        )
    )
    s = _shape(rng, 0, 3)
    target = (math.prod(s),) if rng.random() < 0.5 else (*reversed(s), 1)
    cases.append(Case("reshape", [s], target))
    for op in ("reduce_sum", "reduce_mean", "reduce_max"):
        s = _shape(rng, 1, 4, 5)
        count = int(rng.integers(1, len(s) + 1))
        axes = [
            int(a) - len(s) * int(rng.integers(0, 2))
            for a in rng.choice(len(s), count, replace=False)
        ]
        keepdims = bool(rng.integers(0, 2))
        norm = {a % len(s) for a in axes}
        out = tuple(1 if i in norm else d for i, d in enumerate(s) if keepdims or i not in norm)
        cases.append(
            Case(
                op,
                [s],
                out,
                {
                    "axes": f"array<i64: {', '.join(map(str, axes))}>",
                    "keepdims": str(keepdims).lower(),
                },
            )
        )
    return cases


# Spaces larger than one block of 256 threads: several blocks, and a guard on the last one.
LARGE = [
    Case("add", [(3, 1, 100), (4, 1)], (3, 4, 100)),
    Case("gelu", [(513,)], (513,)),
    Case("softmax", [(300, 3)], (300, 3), {"axis": "1 : i64"}),
    Case("layer_norm", [(270, 4), (4,), (4,)], (270, 4), {"epsilon": "1.0e-05 : f64"}),
    Case("reduce_max", [(20, 3, 17)], (20, 17), {"axes": "array<i64: 1>", "keepdims": "false"}),
    Case("transpose", [(13, 40)], (40, 13), {"permutation": "array<i64: 1, 0>"}),
    Case("reshape", [(17, 31)], (31, 17)),
]
# Rows long enough for a block per row on cuda (schedule.ROW_MIN): lengths that the block's
# threads do not divide, a row along a strided axis, reductions over several axes.
ROWS = [
    Case("softmax", [(5, 300)], (5, 300), {"axis": "1 : i64"}),
    Case("softmax", [(70, 3, 2)], (70, 3, 2), {"axis": "0 : i64"}),
    Case("layer_norm", [(3, 130), (130,), (130,)], (3, 130), {"epsilon": "1.0e-05 : f64"}),
    Case("reduce_sum", [(4, 100)], (4,), {"axes": "array<i64: 1>", "keepdims": "false"}),
    Case("reduce_max", [(3, 80, 2)], (3, 1, 2), {"axes": "array<i64: 1>", "keepdims": "true"}),
    Case("reduce_mean", [(2, 5, 20)], (2,), {"axes": "array<i64: 1, 2>", "keepdims": "false"}),
]
# cuda kernels staged through shared memory: GEMMs with full 4 x 4 register tiles, edges the
# 64-wide tiles do not divide, a batched rhs; transposes that move the innermost axis.
TILES = [
    Case("matmul", [(70, 17), (17, 130)], (70, 130)),
    Case("matmul", [(64, 32), (32, 64)], (64, 64)),
    Case("matmul", [(2, 1, 33, 20), (3, 20, 65)], (2, 3, 33, 65)),
    Case("linear", [(3, 30, 40), (40, 70)], (3, 30, 70)),
    Case("transpose", [(40, 70)], (70, 40), {"permutation": "array<i64: 1, 0>"}),
    Case("transpose", [(40, 3, 35)], (35, 3, 40), {"permutation": "array<i64: 2, 1, 0>"}),
    Case("transpose", [(2, 33, 64)], (2, 64, 33), {"permutation": "array<i64: 0, 2, 1>"}),
]

PARAMS = [
    pytest.param(case, id=f"{seed}-{case.op}-{'x'.join(map(str, case.output)) or 'scalar'}")
    for seed, cases in [*((seed, _cases(seed)) for seed in SEEDS), ("large", LARGE),
                        ("rows", ROWS), ("tiles", TILES)]
    for case in cases
]


@pytest.mark.parametrize("element", ["f32", "f64"])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("case", PARAMS)
def test_kernel_matches_numpy(case: Case, device: str, element: str) -> None:
    lowered = Lowered(case.program(element, device))
    (kernel,) = lowered.kernels
    rng = np.random.default_rng(abs(hash((case.op, device, element))) % 2**32)
    inputs = sample(case, element, rng)
    out = np.full(case.output, np.nan, dtype=inputs[0].dtype)
    with lowered.context:
        kernel(*inputs, out)
    assert_close(out, reference(case, inputs), element)
    if device == "cuda":
        assert math.prod(kernel.block) >= 32, f"{kernel.name}: block {kernel.block}"
        assert case not in LARGE or kernel.grid[0] > 1, f"{kernel.name}: grid {kernel.grid}"


# cpu matmuls compiled as loops, at every level's register tile: rows and columns the tiles
# do not divide, K = 1, a batched and broadcast rhs (both ways), a tall lhs, a vector lhs, no
# depth, no rows, attention's two products with their heads as batch axes.
CPU_MATMULS = [
    *(c for seed in SEEDS for c in _cases(seed) if c.op in ("matmul", "linear")),
    Case("matmul", [(70, 17), (17, 130)], (70, 130)),
    Case("matmul", [(9, 1), (1, 35)], (9, 35)),
    Case("matmul", [(2, 1, 33, 20), (3, 20, 65)], (2, 3, 33, 65)),
    Case("matmul", [(7, 13), (3, 13, 5)], (3, 7, 5)),
    Case("matmul", [(1, 4, 11, 8), (1, 4, 8, 11)], (1, 4, 11, 11)),
    Case("linear", [(3, 30, 40), (40, 70)], (3, 30, 70)),
    Case("linear", [(5,), (5, 3)], (3,)),
    Case("linear", [(6, 0), (0, 3)], (6, 3)),
    Case("linear", [(0, 5), (5, 3)], (0, 3)),
    Case("matmul", [(2, 0, 5), (2, 5, 3)], (2, 0, 3)),
    # fewer rows than the tile: wider column tiles, spread over the grid with the last one
    # partial (one row, a vector lhs, two row blocks, a tall lhs of four rows)
    Case("linear", [(1, 37), (37, 300)], (1, 300)),
    Case("linear", [(40,), (40, 129)], (129,)),
    Case("matmul", [(6, 16), (16, 256)], (6, 256)),
    Case("linear", [(2, 2, 9), (9, 70)], (2, 2, 70)),
]
LEVELS = ["x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"]


@pytest.mark.parametrize("cpu", LEVELS)
@pytest.mark.parametrize("element", ["f32", "f64"])
@pytest.mark.parametrize("case", CPU_MATMULS,
                         ids=lambda c: f"{c.op}-{'x'.join(map(str, c.output)) or 'scalar'}")
def test_cpu_matmul_as_loops_matches_numpy(case: Case, element: str, cpu: str) -> None:
    lowered = Lowered(case.program(element, "cpu"), cpu=cpu)
    (kernel,) = lowered.kernels
    inputs = sample(case, element, np.random.default_rng(7))
    out = np.full(case.output, np.nan, dtype=inputs[0].dtype)
    with lowered.context:
        kernel(*inputs, out)
    assert_close(out, reference(case, inputs), element)


@pytest.mark.parametrize("cpu", LEVELS)
@pytest.mark.parametrize("shape", [(9, 2, 2), (32, 64, 64), (512, 128, 128), (64, 512, 2048)])
def test_every_cpu_matmul_is_loops_at_every_level_and_size(cpu, shape) -> None:
    """No size sends a matmul of two activations to a library (the host BLAS would run its
    own threads beside the runtime's pool): its kernel is the parallel row-block loops."""
    m, k, n = shape
    lowered = Lowered(Case("matmul", [(m, k), (k, n)], (m, n)).program("f32", "cpu"), cpu=cpu)
    assert '"hextir.library_call"' not in lowered.text
    assert '{kind = "parallel"}' in lowered.text and '{kind = "serial"}' in lowered.text


@pytest.mark.parametrize("cpu, tiles", [("x86-64-v2", 16), ("x86-64-v3", 8), ("x86-64-v4", 4)])
def test_a_matrix_vector_product_spreads_wide_column_tiles_over_the_grid(cpu, tiles) -> None:
    """One row: the level's eight accumulators are one row's columns (32 f32 at v2, 64 at
    v3, 128 at v4), and those column tiles are the parallel grid, not one thread's serial
    loop (`schedule.FEW_ROW_BLOCKS`)."""
    lowered = Lowered(Case("linear", [(1, 256), (256, 512)], (1, 512)).program("f32", "cpu"),
                      cpu=cpu)
    grids: list[int] = []

    def visit(op):
        if op.name == "hextir.for" and str(op.attributes["kind"]) == '"parallel"':
            grids.append(ir.IntegerAttr(op.operands[1].owner.attributes["value"]).value)
        return ir.WalkResult.ADVANCE

    with lowered.context:
        lowered.module.operation.walk(visit)
    assert grids == [tiles]


@pytest.mark.parametrize("case", ROWS, ids=lambda c: f"{c.op}-{'x'.join(map(str, c.inputs[0]))}")
def test_a_long_row_on_cuda_is_one_block_sharing_it(case: Case) -> None:
    lowered = Lowered(case.program("f32", "cuda"))
    (kernel,) = lowered.kernels
    shape = case.inputs[0]
    if case.op == "softmax":
        length = shape[int(case.attrs["axis"].split(":")[0])]
    elif case.op == "layer_norm":
        length = shape[-1]
    else:
        length = math.prod(shape[a] for a in _ints(case.attrs["axes"]))
    assert kernel.grid == [math.prod(shape) // length, 1, 1]
    assert kernel.block == [min(256, 1 << (length - 1).bit_length()), 1, 1]
    assert '"hextir.alloc_buffer"' in lowered.text and '"hextir.barrier"' in lowered.text


@pytest.mark.parametrize("case", [c for c in TILES if c.op == "transpose"],
                         ids=lambda c: "x".join(map(str, c.inputs[0])))
def test_a_transpose_that_moves_the_innermost_axis_goes_through_a_shared_tile(case) -> None:
    lowered = Lowered(case.program("f32", "cuda"))
    (kernel,) = lowered.kernels
    assert kernel.block == [32, 8, 1]
    assert "memref<32x33xf32, #gpu.address_space<workgroup>>" in lowered.text
    assert lowered.text.count('"hextir.barrier"') == 1


@pytest.mark.parametrize(
    ("lhs", "rhs", "grid", "block", "per_thread"),
    [
        ((16, 5), (5, 16), [1, 1, 1], [16, 16, 1], 1),
        ((2, 33, 5), (5, 50), [2, 2, 1], [16, 16, 1], 4 * 2),  # batch and rows: one tall GEMM
        ((3, 5), (5, 7), [1, 1, 1], [8, 4, 1], 1),
        ((1, 5), (5, 1), [1, 1, 1], [32, 1, 1], 1),
        ((1, 5), (5, 600), [2, 1, 1], [256, 1, 1], 2),
        ((2, 20, 5), (2, 5, 30), [2, 2, 2], [16, 16, 1], 1),  # a batched rhs: blockIdx.z
    ],
)
def test_matmul_cuda_tiles(lhs, rhs, grid: list, block: list, per_thread: int) -> None:
    """The tile rule of `schedule.gemm_tiles`: its grid, its threads, and each thread's
    register tile (one fma per output it owns in the k loop's body)."""
    case = Case("matmul", [lhs, rhs],
                (*np.broadcast_shapes(lhs[:-2], rhs[:-2]), lhs[-2], rhs[-1]))
    lowered = Lowered(case.program("f64", "cuda"))
    (kernel,) = lowered.kernels
    assert (kernel.grid, kernel.block) == (grid, block)
    assert lowered.text.count("math.fma") == per_thread
    assert lowered.text.count('"hextir.barrier"') == 2
    inputs = sample(case, "f64", np.random.default_rng(0))
    out = np.full(case.output, np.nan)
    with lowered.context:
        kernel(*inputs, out)
    assert_close(out, reference(case, inputs), "f64")


@pytest.mark.parametrize(
    ("element", "size", "grid", "block", "lanes"),
    [("f32", 1, 1, 32, 1), ("f32", 40, 1, 32, 4), ("f32", 256, 1, 64, 4),
     ("f32", 1000, 1, 256, 4), ("f32", 1002, 4, 256, 1), ("f32", 8192, 8, 256, 4),
     ("f64", 1000, 2, 256, 2), ("f64", 999, 4, 256, 1)],
)
def test_elementwise_cuda_geometry(element, size, grid, block, lanes) -> None:
    """A thread takes 16 bytes of neighbours (`lanes`) when the length divides by them."""
    case = Case("exp", [(size,)], (size,))
    lowered = Lowered(case.program(element, "cuda"))
    (kernel,) = lowered.kernels
    assert (kernel.grid, kernel.block) == ([grid, 1, 1], [block, 1, 1])
    assert lowered.text.count('"hextir.buffer_load"') == lanes
    assert ('"hextir.if"' in lowered.text) == (size // lanes % block != 0)


def test_reduce_max_and_relu_propagate_nan() -> None:
    """numpy's (and ONNX's) meaning: max(x, 0) of NaN is NaN, a maximum over a NaN is NaN."""
    for op, x, want in (
        ("reduce_max", [1.0, np.nan, 3.0], [np.nan]),
        ("relu", [np.nan, -1.0, 2.0], [np.nan, 0.0, 2.0]),
    ):
        out_shape = (1,) if op == "reduce_max" else (3,)
        attrs = {"axes": "array<i64: 0>", "keepdims": "true"} if op == "reduce_max" else {}
        case = Case(op, [(3,)], out_shape, attrs)
        for device in ("cpu", "cuda"):
            lowered = Lowered(case.program("f64", device))
            out = np.zeros(out_shape)
            with lowered.context:
                lowered.kernels[0](np.array(x), out)
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean", "reduce_max"])
@pytest.mark.parametrize("keepdims", [False, True])
def test_no_axes_reduces_every_axis(op: str, keepdims: bool) -> None:
    """An empty `axes` is ONNX's "every axis" (numpy's axis=None), as the format reads it;
    the kernel records the axes it reduces, so the file names them all."""
    x = np.random.default_rng(3).standard_normal((3, 5, 2))
    fn = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max}[op]
    want = fn(x, axis=None, keepdims=keepdims)
    attrs = {"axes": "array<i64>", "keepdims": str(keepdims).lower()}
    case = Case(op, [x.shape], want.shape, attrs)
    for device in ("cpu", "cuda"):
        lowered = Lowered(case.program("f64", device))
        (kernel,) = lowered.kernels
        assert kernel.params == [float(keepdims), 0.0, 1.0, 2.0]
        out = np.full(want.shape, np.nan)
        with lowered.context:
            kernel(x, out)
        np.testing.assert_allclose(out, want, rtol=1e-12)


@pytest.mark.parametrize("element", ["f32", "f64"])
@pytest.mark.parametrize("case", PARAMS)
def test_compiled_cpu_kernel_matches_numpy(case: Case, element: str) -> None:
    """The same one-op program compiled all the way (loops, LLVM, x86-64 object, .hxb), loaded
    by the runtime and run on the cpu -- the thread pool splitting the kernel's grid -- gives
    numpy's answer. What the serializer writes (kind, params, argument types) also fits the
    kind's signature rule, which the runtime validates before it runs anything."""
    hr = pytest.importorskip("hexir_runtime")
    from hexir_compiler import serialize
    from hexir_compiler.dialects import context
    from hexir_compiler.mlir import ir
    from hexir_compiler.pipeline import Options, run

    with context():
        data = serialize.build(run(ir.Module.parse(case.program(element, "cpu")),
                                   Options("hxb")))
    module = hr.load(data)
    inputs = sample(case, element, np.random.default_rng(7))
    assert_close(module.main(*inputs), reference(case, inputs), element)


@pytest.mark.parametrize("case", PARAMS)
def test_the_interpreted_launch_is_the_one_the_gpu_lowering_records(case: Case) -> None:
    """The grid and block tir_interp ran are what the GPU lowering will launch with."""
    lowered = Lowered(case.program("f32", "cuda"))
    (kernel,) = lowered.kernels
    with lowered.context:
        gpu_module = to_gpu(lowered)
        assert list(gpu_module.attributes["hexir.grid"]) == kernel.grid
        assert list(gpu_module.attributes["hexir.block"]) == kernel.block


@pytest.mark.parametrize(("op", "shape", "lanes"), [("exp", (5000,), 4), ("neg", (3, 999), 1)])
def test_a_space_larger_than_the_grid_cap_is_swept_by_a_grid_stride_loop(
        monkeypatch, op, shape, lanes):
    """GRID_STRIDE_BLOCKS shrunk to 3 blocks so that a small space exercises the stride."""
    from hexir_compiler.transforms.tir import schedule

    monkeypatch.setattr(schedule, "GRID_STRIDE_BLOCKS", 3)
    case = Case(op, [shape], shape)
    lowered = Lowered(case.program("f32", "cuda"))
    (kernel,) = lowered.kernels
    assert (kernel.grid, kernel.block) == ([3, 1, 1], [256, 1, 1])
    assert lowered.text.count("%c768) ({") == 1  # the stride: 3 blocks x 256 threads
    assert lowered.text.count('"hextir.buffer_load"') == lanes
    inputs = sample(case, "f32", np.random.default_rng(0))
    out = np.full(shape, np.nan, dtype=np.float32)
    with lowered.context:
        kernel(*inputs, out)
    assert_close(out, reference(case, inputs), "f32")
