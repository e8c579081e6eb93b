"""linalg_path.run: each -emit stage is the previous one plus a step, and fails cleanly.

The GPU half needs the CUDA toolkit's libdevice and ptxas; those tests skip without it. An
all-cpu program must reach LLVM IR with no toolkit at all.
"""

from __future__ import annotations

import re

import pytest

from hexir_compiler.dialects import context
from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import ir
from hexir_compiler.target import cuda_toolkit
from hexir_compiler.transforms import linalg_path

PROGRAM = """func.func @main() {
  %a = "hexir.constant"() {value = dense<[[3.0, 1.0], [2.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %w = "hexir.constant"() {value = dense<[[1.0, 5.0], [5.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %m = "hexir.linear"(%a, %w) : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
  %r = "hexir.relu"(%m) : (tensor<2x2xf64>) -> tensor<2x2xf64>
  "hexir.print"(%r) : (tensor<2x2xf64>) -> ()
  return
}"""
SPLIT = {"hexir.linear": "cuda"}


def _toolkit() -> bool:
    try:
        cuda_toolkit.find_toolkit()
    except CompileError:
        return False
    return True


needs_toolkit = pytest.mark.skipif(not _toolkit(), reason="no CUDA toolkit")


def lower(stage: str, placement=None, chip=None) -> str:
    with context():
        module = ir.Module.parse(PROGRAM)
        out = linalg_path.run(module, stage, chip=chip, placement=placement)
        return out if isinstance(out, str) else str(out)


def dialects(text: str) -> set[str]:
    """Dialects of the ops in printed MLIR (`x.op` after `=` or at a line's start)."""
    found = re.findall(r'^\s*(?:%[\w:#, %]+ = )?"?([a-z_]+)\.[a-z_.]+', text, re.MULTILINE)
    return set(found)


def test_stages_add_one_step_each() -> None:
    linalg = lower("mlir-linalg")
    hetero = lower("mlir-hetero", SPLIT)
    assert "device" not in linalg and "hexir.targets" not in linalg
    assert 'linalg.matmul {device = "cuda"}' in hetero
    assert '"hexir.transfer"' in hetero
    gpu = lower("mlir-gpu", SPLIT)
    assert "tensor<" not in gpu.split("func.func")[1]
    assert "gpu.launch" in gpu and "memref.copy" in gpu


def test_all_cpu_needs_no_toolkit(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CUDA_ROOT", str(tmp_path / "no-cuda"))
    llvm_ir = lower("llvm")
    assert "declare i32 @printf(ptr, ...)" in llvm_ir
    assert "define void @main()" in llvm_ir
    assert f'target triple = "{linalg_path.host_triple()}"' in llvm_ir
    assert "mgpu" not in llvm_ir


def test_cuda_without_toolkit_is_one_line_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CUDA_ROOT", str(tmp_path / "no-cuda"))
    cuda_toolkit._find_cached.cache_clear()
    with pytest.raises(CompileError, match="libdevice.10.bc not found") as err:
        lower("mlir-llvm", SPLIT)
    assert "\n" not in str(err.value)


@needs_toolkit
def test_llvm_dialect_stage_leaves_no_linalg_scf_or_hexir() -> None:
    text = lower("mlir-llvm", {"hexir.linear": "cuda", "hexir.relu": "cuda"})
    assert dialects(text) <= {"llvm", "gpu", "module"}
    assert text.count("gpu.launch_func") == 3 and text.count("gpu.binary") == 3


@needs_toolkit
def test_chip_reaches_the_nvvm_target() -> None:
    text = lower("mlir-llvm", SPLIT, chip="sm_90")
    assert 'chip = "sm_90"' in text


def test_unknown_stage_is_refused() -> None:
    with context():
        module = ir.Module.parse(PROGRAM)
        with pytest.raises(CompileError, match="'mlir-tir' is not a linalg-path stage"):
            linalg_path.run(module, "mlir-tir")
