"""The linalg path: graph -> loops on tensors -> placed loops -> buffers + gpu.launch -> LLVM.

`run(module, stage, chip=...)` lowers a parsed (and verified) graph module as far as `stage`
and returns it, or the LLVM IR text for "llvm". Each stage is the previous one plus a step, so
a person can watch one program go down level by level:

| stage        | adds                                                                        |
| ------------ | --------------------------------------------------------------------------- |
| mlir-linalg  | hexir-lower-to-linalg (no placement yet)                                    |
| mlir-hetero  | hexir-partition, hexir-insert-transfers, lowering, hexir-partition again    |
|              | (fills `device` on any op the lowering left without one)                    |
| mlir-gpu     | hexir-prepare-bufferization, one-shot bufferization (function boundaries    |
|              | with identity layouts), hexir-lower-cuda-to-gpu                             |
| mlir-llvm    | linalg to loops, kernel outlining, NVVM for the kernels, hexir-to-llvm for  |
|              | the host, gpu-to-llvm, gpu-module-to-binary (a fatbin embedded as gpu.binary)|
| llvm         | translation to LLVM IR text                                                  |

The GPU passes run only when the program has a cuda-placed op; an all-cpu program needs no
CUDA toolkit at any stage.

This path is a view for reading, not the way programs run (that is `.hxb` and hexir-run):
the LLVM module has one address space, so a transfer is a memcpy between host buffers and a
kernel is handed host pointers. Running it would need device allocation and copies that the
runtime owns; the buffers at -emit=mlir-gpu say which would be device memory (`device`).
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from pathlib import Path

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import ir, llvm, passmanager
from hexir_compiler.transforms import (
    hexir_insert_transfers,
    hexir_lower_cuda_to_gpu,
    hexir_lower_to_linalg,
    hexir_partition,
    hexir_prepare_bufferization,
    hexir_to_llvm,
)

STAGES = ("mlir-linalg", "mlir-hetero", "mlir-gpu", "mlir-llvm", "llvm")
DEFAULT_CHIP = "sm_75"

BUFFERIZE = (
    "empty-tensor-to-alloc-tensor",
    (
        "one-shot-bufferize{bufferize-function-boundaries "
        "function-boundary-type-conversion=identity-layout-map}"
    ),
    "canonicalize",
    "buffer-deallocation-simplification",
)
TIDY = ("canonicalize", "cse")
KERNELS = ("convert-linalg-to-loops", "gpu-kernel-outlining")
NVVM = (
    "gpu.module(convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},"
    "reconcile-unrealized-casts)"
)


def run(
    module: ir.Module,
    stage: str,
    *,
    chip: str | None = None,
    placement: Mapping[str, str] | None = None,
) -> ir.Module | str:
    """Lower `module` in place up to `stage`; the module, or LLVM IR text for "llvm".

    `placement` is the `-placement` option ({op name: device}); `chip` the CUDA architecture
    kernels are compiled for (sm_75 when None).
    """
    if stage not in STAGES:
        raise CompileError(
            f"'{stage}' is not a linalg-path stage; expected one of {', '.join(STAGES)}"
        )
    level = STAGES.index(stage)
    if level == 0:
        hexir_lower_to_linalg.run(module)
        return module
    hexir_partition.run(module, placement)
    hexir_insert_transfers.run(module)
    hexir_lower_to_linalg.run(module)
    hexir_partition.run(module, placement)
    if level >= 2:
        hexir_prepare_bufferization.run(module)
        _upstream(module, BUFFERIZE)
        hexir_lower_cuda_to_gpu.run(module)
        _upstream(module, TIDY)
    if level >= 3:
        _to_llvm_dialect(module, chip or DEFAULT_CHIP)
    if level == 4:
        module.operation.attributes["llvm.target_triple"] = ir.StringAttr.get(host_triple())
        return llvm.translate_module_to_llvmir(module.operation)
    return module


def host_triple() -> str:
    """The triple of the machine compiling, which the host part of the program is for."""
    system = platform.system().lower()
    vendor_os = {"linux": "unknown-linux-gnu", "darwin": "apple-darwin"}.get(system, system)
    return f"{platform.machine()}-{vendor_os}"


def _to_llvm_dialect(module: ir.Module, chip: str) -> None:
    _upstream(module, KERNELS)
    has_kernels = _has_gpu_modules(module)
    if has_kernels:
        _upstream(module, (f"nvvm-attach-target{{chip={chip} O=3 l={_libdevice()}}}", NVVM))
    hexir_to_llvm.run(module)
    if has_kernels:
        _upstream(module, ("gpu-to-llvm{use-bare-pointers-for-kernels=1}",
                           f"gpu-module-to-binary{{format=fatbin toolkit={_toolkit_root()}}}",
                           "reconcile-unrealized-casts"))
        _mark_kernels(module)


def _mark_kernels(module: ir.Module) -> None:
    """Upstream rebuilds launches and binaries without our attributes: every one is cuda."""
    cuda = ir.StringAttr.get("cuda")

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name in ("gpu.launch_func", "gpu.binary"):
            op.attributes["device"] = cuda
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


def _has_gpu_modules(module: ir.Module) -> bool:
    return any(op.operation.name == "gpu.module" for op in module.body.operations)


def _libdevice() -> Path:
    from hexir_compiler.target.cuda_toolkit import find_libdevice

    return find_libdevice()


def _toolkit_root() -> Path:
    """The toolkit gpu-module-to-binary runs ptxas/fatbinary from: the directory of ptxas' bin/."""
    from hexir_compiler.target.cuda_toolkit import find_tool

    return find_tool("ptxas").parent.parent


def _upstream(module: ir.Module, passes: tuple[str, ...]) -> None:
    pm = passmanager.PassManager.parse(f"builtin.module({','.join(passes)})")
    try:
        pm.run(module.operation)
    except ir.MLIRError as err:
        first = err.error_diagnostics[0] if err.error_diagnostics else None
        if first is None:
            raise CompileError(f"the passes {', '.join(passes)} failed: {err}") from None
        raise CompileError(first.message, first.location) from None
