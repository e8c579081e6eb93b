"""Host code made in worker processes (`target.host_codegen`): the `.hxb` is the same byte
for byte however many workers make it, in whatever order they finish, and LLVM's refusal or
a worker's death is a one-line CompileError."""

from __future__ import annotations

from pathlib import Path

import pytest

from hexir_compiler import CompileError, pipeline
from hexir_compiler.target import host, host_codegen

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
KERNEL = """target triple = "x86_64-unknown-linux-gnu"
define void @twice(ptr %x, ptr %y, i64 %lo, i64 %hi) {
  %v = load float, ptr %x
  %w = fmul float %v, 2.0
  store float %w, ptr %y
  ret void
}
"""


@pytest.fixture(autouse=True)
def compiled_afresh(monkeypatch):
    """Every kernel here is compiled, by the workers under test: the process's objects
    (`host_codegen.made`) are set aside, or a compile would answer from them."""
    monkeypatch.setattr(host_codegen, "made", host_codegen.Objects(limit=0))


@pytest.mark.parametrize("cpu", [None, "x86-64-v3"])
def test_the_module_does_not_depend_on_the_workers(cpu):
    source = EXAMPLES / "mlp.mlir"
    here = pipeline.compile_file(source, pipeline.Options("hxb", cpu=cpu, jobs=0))
    assert pipeline.compile_file(source, pipeline.Options("hxb", cpu=cpu, jobs=3)) == here


def test_a_worker_makes_the_object_this_process_makes():
    with host_codegen.Codegen(2) as remote:
        futures = [remote.submit(KERNEL, cpu) for cpu in ("x86-64-v2", "x86-64-v4")]
        made = [f.result() for f in futures]
    assert made == [host_codegen.compile_object(KERNEL, cpu) for cpu in ("x86-64-v2",
                                                                          "x86-64-v4")]
    assert made[0].startswith(b"\x7fELF") and made[0] != made[1]


@pytest.mark.parametrize("workers", [0, 1])
def test_ir_llvm_refuses_is_a_compile_error_naming_the_kernel(workers):
    with host_codegen.Codegen(workers) as codegen:
        code = codegen.submit("define void @k( {", "x86-64-v3")
        with pytest.raises(CompileError, match=r"^LLVM rejected the IR of cpu kernel 'k': "
                                               r"[^\n]+$"):
            host._image(code, "k", (1, 1, 1), 3)


def test_a_dead_worker_is_a_compile_error():
    with host_codegen.Codegen(1) as codegen:
        codegen.submit(KERNEL, "x86-64-v3").result()  # the worker is up
        codegen._processes[0].kill()
        code = codegen.submit(KERNEL, "x86-64-v3")
        with pytest.raises(CompileError, match=r"cpu kernel 'twice': a code generation worker "
                                               r"ended unexpectedly \(exit status -9\)"):
            host._image(code, "twice", (1, 1, 1), 3)


def test_how_many_workers(monkeypatch):
    monkeypatch.setattr(host_codegen.os, "sched_getaffinity", lambda pid: set(range(32)))
    assert host_codegen.workers(100) == host_codegen.MAX_WORKERS
    assert host_codegen.workers(host_codegen.MIN_KERNELS - 1) == 0  # small: no workers
    assert host_codegen.workers(4, jobs=3) == 3  # asked for: always
    monkeypatch.setattr(host_codegen.os, "sched_getaffinity", lambda pid: {0})
    assert host_codegen.workers(100) == 0  # one core: the parent would only wait
    monkeypatch.setattr(host_codegen.os, "sched_getaffinity", lambda pid: {0, 5})
    assert host_codegen.workers(100) == 2


@pytest.mark.parametrize("workers", [0, 1])
def test_a_kernel_made_before_is_not_compiled_again(monkeypatch, workers):
    """The process's objects: the same text and level answer from them (the bytes a compile
    makes), another level or text is compiled, and the least recently used go first."""
    monkeypatch.setattr(host_codegen, "made", host_codegen.Objects(limit=2))
    other = KERNEL.replace("2.0", "3.0")
    with host_codegen.Codegen(workers) as codegen:
        first = codegen.submit(KERNEL, "x86-64-v3").result()
        compiled: list[str] = []  # each level compiled, in this process or by the worker
        if workers:
            remote = codegen._remote
            monkeypatch.setattr(codegen, "_remote",
                                lambda text, cpu: compiled.append(cpu) or remote(text, cpu))
        else:
            local = host_codegen.compile_object
            monkeypatch.setattr(host_codegen, "compile_object",
                                lambda text, cpu: compiled.append(cpu) or local(text, cpu))
        assert codegen.submit(KERNEL, "x86-64-v3").result() == first and compiled == []
        codegen.submit(KERNEL, "x86-64-v2").result()
        codegen.submit(other, "x86-64-v3").result()  # the third: the first made goes out
        assert codegen.submit(KERNEL, "x86-64-v3").result() == first
    assert compiled == ["x86-64-v2", "x86-64-v3", "x86-64-v3"]
