"""A cpu matmul on a constant rhs reads it packed into column panels (`schedule.panel_width`).

hexir-lower-to-tir replaces the rhs constant by its panels ([ceil(N / w), K, w], zeros past
N) and the kernel is loops over them; the runtime runs the compiled kernel with no BLAS call.
Each case is compiled for x86-64-v3 (the level that packs) and run on this CPU, so these
tests need a CPU that runs v3 code. Small shapes are packed by lowering the threshold
(`LOOPS_MAX_MACS`) below 0, which is what reaches every remainder: rows the 5-row blocks do
not divide, a last panel with fewer than 16 columns, a tall (batched) lhs, a vector lhs, no
depth, no rows.
"""

from __future__ import annotations

import hexir_runtime
import numpy as np
import pytest
from hexir_format import parse
from hexir_runtime.hal.hostcode import host_level

from hexir_compiler.pipeline import compile as compile_source
from hexir_compiler.transforms.tir import schedule

pytestmark = pytest.mark.skipif(host_level() < 3, reason="this CPU runs no x86-64-v3 code")
V3 = "cpu:x86-64-v3"
DTYPES = {"f32": np.float32, "f64": np.float64}


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
]


@pytest.mark.parametrize("element", ["f32", "f64"])
@pytest.mark.parametrize("fused", [False, True], ids=["plain", "bias-relu"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, (*s[0], s[2]))))
def test_a_packed_matmul_matches_numpy(tmp_path, monkeypatch, shape, fused, element) -> None:
    monkeypatch.setitem(schedule.LOOPS_MAX_MACS, 3, -1)
    x_shape, k, n = shape
    rng = np.random.default_rng(3)
    dtype = DTYPES[element]
    w = rng.standard_normal((k, n)).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype) if fused else None
    text = _program(x_shape, w, element, bias)
    tir = _compile(tmp_path, text, "mlir-tir")
    width = 64 // np.dtype(dtype).itemsize
    assert f"{_t((-(-n // width), k, width), element)}" in tir and "library_call" not in tir
    x = rng.standard_normal(x_shape).astype(dtype)
    with hexir_runtime.load(_compile(tmp_path, text)) as module:
        got = module.main(x)
    want = x.astype(np.float64) @ w.astype(np.float64)
    if fused:
        want = np.maximum(want + bias, 0)
    scale = max(np.abs(want).max(initial=0), 1.0)
    assert got.shape == want.shape
    assert np.abs(got - want).max(initial=0) / scale <= (1e-5 if element == "f32" else 1e-12)


def test_the_mlp_layer_packs_its_weight_and_needs_no_blas(tmp_path) -> None:
    """At its real size (above LOOPS_MAX_MACS): a v3 kernel over 128 panels, the cpu grid,
    calling no routine; at v2 (no panel tile) the same layer calls the BLAS."""
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
    assert b"hexir_rt_matmul" in bytes(exe.image)


def test_a_weight_two_matmuls_share_is_packed_once_and_the_original_dropped(
        tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(schedule.LOOPS_MAX_MACS, 3, -1)
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


def test_a_weight_also_read_elsewhere_stays(tmp_path, monkeypatch) -> None:
    """The product plus the weight itself (a [4, 4] weight, broadcast): the epilogue reads
    the original constant, the loops its panels."""
    monkeypatch.setitem(schedule.LOOPS_MAX_MACS, 3, -1)
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


@pytest.mark.parametrize("stage", ["mlir-hetero", "mlir-tir", "mlir-linalg", "mlir-llvm"])
def test_a_packed_stage_fed_back_gives_the_same_module(tmp_path, monkeypatch, stage) -> None:
    monkeypatch.setitem(schedule.LOOPS_MAX_MACS, 3, -1)
    w = np.random.default_rng(6).standard_normal((9, 20)).astype(np.float32)
    text = _program((7, 9), w, "f32", np.ones(20, np.float32))
    direct = _compile(tmp_path, text)
    printed = _compile(tmp_path, text, stage)
    again = tmp_path / "again.mlir"
    again.write_text(printed)
    assert compile_source(again, "hxb", target=V3) == direct
