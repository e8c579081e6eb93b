"""A cpu matmul on a constant rhs reads it packed into column panels (`schedule.panel_width`).

hexir-lower-to-tir replaces the rhs constant by its panels ([ceil(N / w), K, w], zeros past
N) and the kernel is loops over them; the runtime runs the compiled kernel with no BLAS call.
Each case is compiled for every x86-64 level this CPU runs (each has its own tile,
`schedule.PANEL_TILES`) and run here; v4's kernels, where the CPU has no AVX-512, are run by
the test interpreter instead (`tir_interp`). Small shapes are packed by lowering the
threshold (`PANEL_MIN_MACS`) below 0, which is what reaches every remainder: rows the row
blocks do not divide (a last block of the rows left over), a last panel narrower than the
others, a tall (batched) lhs, a vector lhs, K = 1, no depth, no rows, row blocks split into
groups.
"""

from __future__ import annotations

import numpy as np
import pytest

import hexir_runtime
from hexir_compiler.pipeline import compile as compile_source
from hexir_compiler.transforms.tir import schedule
from hexir_format import parse
from hexir_runtime.hal.hostcode import host_level
from tir_programs import Lowered

V3 = "cpu:x86-64-v3"
DTYPES = {"f32": np.float32, "f64": np.float64}
#: The levels whose code this CPU runs (x86-64 is level 1).
RUNNABLE = [level for level in (1, 2, 3, 4) if level <= host_level()]
NAMES = {1: "x86-64", 2: "x86-64-v2", 3: "x86-64-v3", 4: "x86-64-v4"}
needs_v3 = pytest.mark.skipif(host_level() < 3, reason="this CPU runs no x86-64-v3 code")


def _t(shape, element: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{element}>"


def _dense(name: str, array: np.ndarray, element: str) -> str:
    t = _t(array.shape, element)
    return (f'  %{name} = "hexir.constant"() {{value = dense<"0x{array.tobytes().hex()}"> : '
            f"{t}}} : () -> {t}")


def _program(x_shape, w: np.ndarray, element: str, bias: np.ndarray | None = None,
             op: str = "linear") -> str:
    out = (*x_shape[:-1], w.shape[1])
    lines = [f"func.func @main(%x: {_t(x_shape, element)}) -> {_t(out, element)} {{",
             _dense("w", w, element),
             (f'  %y = "hexir.{op}"(%x, %w) : ({_t(x_shape, element)}, {_t(w.shape, element)}) '
              f"-> {_t(out, element)}")]
    result = "%y"
    if bias is not None:
        lines += [_dense("b", bias, element),
                  (f'  %s = "hexir.add"(%y, %b) : ({_t(out, element)}, '
                   f"{_t(bias.shape, element)}) -> {_t(out, element)}"),
                  f'  %r = "hexir.relu"(%s) : ({_t(out, element)}) -> {_t(out, element)}']
        result = "%r"
    lines += [f"  return {result} : {_t(out, element)}", "}"]
    return "\n".join(lines) + "\n"


def _compile(tmp_path, text: str, emit: str = "hxb", target: str = V3):
    source = tmp_path / "program.mlir"
    source.write_text(text)
    return compile_source(source, emit, target=target)


SHAPES = [  # (lhs shape, K, N)
    ((70, 17), 17, 130),  # 14 row blocks, a last panel of 2 columns
    ((3, 30, 40), 40, 70),  # a tall lhs: 90 rows
    ((5,), 5, 3),  # a vector lhs, one panel of 3 columns
    ((1, 33), 33, 16),  # one row, one full panel
    ((6, 0), 0, 3),  # no depth: zeros
    ((0, 5), 5, 3),  # no rows
    ((13, 64), 64, 48),  # three full panels
    ((11, 1), 1, 40),  # K = 1
    ((300, 7), 7, 20),  # few panels, many row blocks: the rows split into groups
    ((302, 7), 7, 20),  # ... the last group ending in a block of the rows left over
    # v4's two panels a block: five whole panels are two sets of two, then the one left
    # over beside the partial sixth
    ((16, 8), 8, 16 * 5 + 3),
    # fewer rows than the tile: several panels a grid iteration (8 for one row at v4, 5 at
    # v3), then the panels left over and a partial last one
    ((1, 9), 9, 16 * 11 + 5),
    ((2, 9), 9, 16 * 16),
    ((3, 4), 4, 16 * 3 + 1),
    ((1, 6), 6, 16 * 8),
]


def _case(shape, fused: bool, element: str):
    """The program of a SHAPES case, its weight, bias, input and float64 expectation."""
    x_shape, k, n = shape
    rng = np.random.default_rng(3)
    dtype = DTYPES[element]
    w = rng.standard_normal((k, n)).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype) if fused else None
    x = rng.standard_normal(x_shape).astype(dtype)
    want = x.astype(np.float64) @ w.astype(np.float64)
    if fused:
        want = np.maximum(want + bias, 0)
    return _program(x_shape, w, element, bias), w, bias, x, want


def _check(got: np.ndarray, want: np.ndarray, element: str) -> None:
    scale = max(np.abs(want).max(initial=0), 1.0)
    assert got.shape == want.shape
    assert np.abs(got - want).max(initial=0) / scale <= (1e-5 if element == "f32" else 1e-12)


#: (level, element, fused): every combination at the best level this CPU runs, two at the others.
VARIANTS = [(level, element, fused) for level in RUNNABLE
            for element, fused in ([("f32", False), ("f32", True), ("f64", False), ("f64", True)]
                                   if level == RUNNABLE[-1] else [("f32", True), ("f64", False)])]


@pytest.mark.parametrize(("level", "element", "fused"), VARIANTS,
                         ids=[f"{NAMES[v[0]]}-{v[1]}-{'bias-relu' if v[2] else 'plain'}"
                              for v in VARIANTS])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, (*s[0], s[2]))))
def test_a_packed_matmul_matches_numpy(tmp_path, monkeypatch, shape, fused, element,
                                       level) -> None:
    monkeypatch.setattr(schedule, "PANEL_MIN_MACS", -1)
    text, _, _, x, want = _case(shape, fused, element)
    target = f"cpu:{NAMES[level]}"
    tir = _compile(tmp_path, text, "mlir-tir", target)
    width = schedule.PANEL_TILES[level][1] // np.dtype(DTYPES[element]).itemsize
    n = shape[2]
    assert f"{_t((-(-n // width), shape[1], width), element)}" in tir
    assert "library_call" not in tir
    # the next panel's rows fetched ahead in the unrolled k loop (the interpreted v4 case
    # checks that each prefetch lies inside the packed weight)
    assert "memref.prefetch" in tir
    with hexir_runtime.load(_compile(tmp_path, text, target=target)) as module:
        _check(module.main(x), want, element)


@pytest.mark.parametrize("element", ["f32", "f64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, (*s[0], s[2]))))
def test_a_packed_v4_kernel_matches_numpy_interpreted(monkeypatch, shape, element) -> None:
    """v4's 8-row, two-zmm tile, whatever this CPU: the kernel at mlir-tir, run by the test
    interpreter on the rhs packed as hexir-lower-to-tir packs it."""
    monkeypatch.setattr(schedule, "PANEL_MIN_MACS", -1)
    text, w, _, x, want = _case(shape, False, element)
    lowered = Lowered(text, cpu="x86-64-v4")
    (kernel,) = lowered.kernels
    k, n = w.shape
    width = schedule.PANEL_TILES[4][1] // w.itemsize
    panels = -(-n // width)
    padded = np.zeros((k, panels * width), w.dtype)
    padded[:, :n] = w
    packed = np.ascontiguousarray(padded.reshape(k, panels, width).transpose(1, 0, 2))
    out = np.full(want.shape, np.nan, x.dtype)
    with lowered.context:
        kernel(x, packed, out)
    _check(out, want, element)


@needs_v3
def test_the_mlp_layer_packs_its_weight_and_needs_no_blas(tmp_path) -> None:
    """At its real size (above PANEL_MIN_MACS): a v3 kernel over 128 panels, the cpu grid,
    calling no routine; at v2 the same 16-column panels (64 bytes at every level), read by
    a 2-row tile."""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((512, 2048)) / 23).astype(np.float32)
    bias = rng.standard_normal(2048).astype(np.float32)
    text = _program((64, 512), w, "f32", bias)
    image = _compile(tmp_path, text)
    (exe,) = parse(image).executables
    assert exe.grid[0] == 128 and [t.shape for t in exe.args][1] == (128, 512, 16)
    assert b"hexir_rt_matmul" not in bytes(exe.image)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    with hexir_runtime.load(image) as module:
        got = module.main(x)
    want = np.maximum(x.astype(np.float64) @ w + bias, 0)
    assert np.abs(got - want).max() / np.abs(want).max() <= 1e-5
    v2 = _compile(tmp_path, text, target="cpu:x86-64-v2")
    (exe,) = parse(v2).executables
    assert exe.grid[0] == 128 and [t.shape for t in exe.args][1] == (128, 512, 16)
    assert b"hexir_rt_matmul" not in bytes(exe.image)
    with hexir_runtime.load(v2) as module:
        assert np.abs(module.main(x) - want).max() / np.abs(want).max() <= 1e-5


@needs_v3
def test_a_weight_two_matmuls_share_is_packed_once_and_the_original_dropped(
        tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(schedule, "PANEL_MIN_MACS", -1)
    w = np.arange(24, dtype=np.float32).reshape(4, 6)
    t4, t6 = _t((3, 4), "f32"), _t((3, 6), "f32")
    text = "\n".join([
        f"func.func @main(%x: {t4}, %z: {t4}) -> {t6} {{", _dense("w", w, "f32"),
        f'  %a = "hexir.linear"(%x, %w) : ({t4}, {_t((4, 6), "f32")}) -> {t6}',
        f'  %b = "hexir.linear"(%z, %w) : ({t4}, {_t((4, 6), "f32")}) -> {t6}',
        f'  %c = "hexir.sub"(%a, %b) : ({t6}, {t6}) -> {t6}',
        f"  return %c : {t6}", "}", ""])
    tir = _compile(tmp_path, text, "mlir-tir")
    assert tir.count('"hexir.constant"') == 1 and _t((1, 4, 16), "f32") in tir
    x, z = (np.random.default_rng(s).standard_normal((3, 4)).astype(np.float32) for s in (1, 2))
    with hexir_runtime.load(_compile(tmp_path, text)) as module:
        np.testing.assert_allclose(module.main(x, z), x @ w - z @ w, rtol=1e-5, atol=1e-5)


@needs_v3
def test_a_weight_also_read_elsewhere_stays(tmp_path, monkeypatch) -> None:
    """The product plus the weight itself (a [4, 4] weight, broadcast): the epilogue reads
    the original constant, the loops its panels."""
    monkeypatch.setattr(schedule, "PANEL_MIN_MACS", -1)
    w = np.arange(16, dtype=np.float32).reshape(4, 4) / 7
    t = _t((4, 4), "f32")
    text = "\n".join([
        f"func.func @main(%x: {t}) -> {t} {{", _dense("w", w, "f32"),
        f'  %a = "hexir.linear"(%x, %w) : ({t}, {t}) -> {t}',
        f'  %c = "hexir.add"(%a, %w) : ({t}, {t}) -> {t}',
        f"  return %c : {t}", "}", ""])
    tir = _compile(tmp_path, text, "mlir-tir")
    assert tir.count('"hexir.constant"') == 2
    x = np.random.default_rng(4).standard_normal((4, 4)).astype(np.float32)
    with hexir_runtime.load(_compile(tmp_path, text)) as module:
        np.testing.assert_allclose(module.main(x), x @ w + w, rtol=1e-5, atol=1e-5)


@needs_v3
@pytest.mark.parametrize("stage", ["mlir-hetero", "mlir-tir", "mlir-linalg", "mlir-llvm"])
def test_a_packed_stage_fed_back_gives_the_same_module(tmp_path, monkeypatch, stage) -> None:
    monkeypatch.setattr(schedule, "PANEL_MIN_MACS", -1)
    w = np.random.default_rng(6).standard_normal((9, 20)).astype(np.float32)
    text = _program((7, 9), w, "f32", np.ones(20, np.float32))
    direct = _compile(tmp_path, text)
    printed = _compile(tmp_path, text, stage)
    again = tmp_path / "again.mlir"
    again.write_text(printed)
    assert compile_source(again, "hxb", target=V3) == direct


def _symbolic(w: np.ndarray, element: str) -> str:
    """x [batch, seq, K] @ the constant w [K, N]."""
    x, y = (f'tensor<?x?x{n}x{element}, ["batch", "seq"]>' for n in w.shape)
    return "\n".join([f"func.func @main(%x: {x}) -> {y} {{", _dense("w", w, element),
                      f'  %y = "hexir.linear"(%x, %w) : ({x}, {_t(w.shape, element)}) -> {y}',
                      f"  return %y : {y}", "}"]) + "\n"


@pytest.mark.parametrize("level", RUNNABLE, ids=[NAMES[v] for v in RUNNABLE])
@pytest.mark.parametrize("element", ["f32", "f64"])
def test_a_packed_matmul_of_any_row_count(tmp_path, monkeypatch, level, element) -> None:
    """Rows = batch x seq, symbolic: fewer than a block's (the path that takes them one at a
    time: a decoding step's one row), a block's, and many, with groups."""
    monkeypatch.setattr(schedule, "PANEL_MIN_MACS", -1)
    rng = np.random.default_rng(5)
    dtype = DTYPES[element]
    w = rng.standard_normal((24, 40)).astype(dtype)
    text = _symbolic(w, element)
    with hexir_runtime.load(_compile(tmp_path, text, target=f"cpu:{NAMES[level]}")) as module:
        for batch, seq in ((1, 1), (1, 3), (2, 3), (1, 8), (3, 3), (2, 35), (1, 301)):
            x = rng.standard_normal((batch, seq, 24)).astype(dtype)
            _check(module.main(x), x.astype(np.float64) @ w.astype(np.float64), element)
