"""Which passes run for each `-emit` stage, from a parsed program to its output.

Two branches leave the graph level. The kernel branch (`mlir-tir`, `hxb`) places ops,
inserts the copies between devices, lowers every compute op to a `hextir` kernel, and for
`hxb` serializes the result. The linalg branch (`mlir-linalg` ... `llvm`, in
`transforms.linalg_path`) shows the same program as loops on tensors, then buffers, GPU
launches and LLVM. `mlir` prints the verified graph as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hexir_compiler import builtin, serialize
from hexir_compiler.dialects import context
from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import ir
from hexir_compiler.transforms import (
    hexir_insert_transfers,
    hexir_lower_to_tir,
    hexir_partition,
)

KERNEL_STAGES = ("mlir", "mlir-tir", "hxb")
LINALG_STAGES = ("mlir-linalg", "mlir-hetero", "mlir-gpu", "mlir-llvm", "llvm")
STAGES = (*KERNEL_STAGES, *LINALG_STAGES)
DESCRIPTIONS = {
    "mlir": "the graph as written (hexir dialect)",
    "mlir-tir": "each compute op as a hextir kernel, placed and with device copies",
    "hxb": "a loadable .hxb module (see -o)",
    "mlir-linalg": "after lowering to linalg on tensors",
    "mlir-hetero": "placement, as device attributes on linalg ops",
    "mlir-gpu": "cuda-placed ops as gpu.launch, on buffers",
    "mlir-llvm": "the LLVM dialect",
    "llvm": "translated LLVM IR",
}


@dataclass(frozen=True)
class Options:
    stage: str
    placement: Mapping[str, str] = field(default_factory=dict)
    chip: str | None = None  # CUDA architecture, e.g. "sm_90"; None = the default image


class ParseError(CompileError):
    """The input is not a valid program; the message is MLIR's first diagnostic."""


def load(path: str | None) -> ir.Module:
    """Parse and verify `path` in the current context, or build the built-in program."""
    if path is None or path == "-":
        return builtin.build()
    try:
        return ir.Module.parseFile(path)
    except ir.MLIRError as err:
        if not err.error_diagnostics:
            raise _silent_parse_failure(path) from None
        first = err.error_diagnostics[0]
        raise ParseError(first.message, first.location) from None


_CUSTOM_FORM = re.compile(r"^(\s*(?:%[\w#:.$-]+(?:\s*,\s*%[\w#:.$-]+)*\s*=\s*)?)(hext?ir\.\w+)")


def _silent_parse_failure(path: str) -> ParseError:
    """A parse failure MLIR reported no diagnostic for.

    The one known case: an op of a Python-defined (IRDL) dialect written in custom assembly
    (`hexir.linear %a, %w : ...`); IRDL dialects have no custom syntax and their parse hook
    fails silently. Find that op and say what to write instead.
    """
    with open(path, encoding="utf-8", errors="replace") as text:
        for number, line in enumerate(text, 1):
            match = _CUSTOM_FORM.match(line)
            if match:
                name = match[2]
                return ParseError(
                    f"'{name}' is written in custom assembly, which the hexir dialects do not "
                    f'have; write it in generic form: "{name}"(%operands) {{attrs}} : '
                    "(operand types) -> result type",
                    ir.Location.file(path, number, len(match[1]) + 1),
                )
    return ParseError("MLIR could not parse the file and gave no diagnostic")


def lower_to_tir(module: ir.Module, options: Options) -> ir.Module:
    """The kernel branch up to `mlir-tir`: partition, transfers, kernels."""
    hexir_partition.run(module, options.placement)
    hexir_insert_transfers.run(module)
    hexir_lower_to_tir.run(module)
    _verify(module)
    return module


def run(module: ir.Module, options: Options) -> ir.Module | str | bytes:
    """`module` lowered to `options.stage`: a module (MLIR stages), LLVM IR text, or .hxb bytes."""
    if options.stage == "mlir":
        return module
    if options.stage == "mlir-tir":
        return lower_to_tir(module, options)
    if options.stage == "hxb":
        return serialize.to_bytes(lower_to_tir(module, options), options.chip)
    if options.stage in LINALG_STAGES:
        from hexir_compiler.transforms import linalg_path

        result = linalg_path.run(
            module, options.stage, chip=options.chip, placement=options.placement
        )
        if isinstance(result, ir.Module):
            _verify(result)
        return result
    raise CompileError(f"'{options.stage}' is not a stage; expected one of {', '.join(STAGES)}")


def compile_file(path: str | Path | None, options: Options) -> str | bytes:
    """Parse `path` (None: the built-in program) and produce the stage's output."""
    with context():
        module = load(None if path is None else str(path))
        result = run(module, options)
        return str(result) if isinstance(result, ir.Module) else result


def _verify(module: ir.Module) -> None:
    try:
        module.operation.verify()
    except ir.MLIRError as err:
        first = err.error_diagnostics[0] if err.error_diagnostics else None
        if first is None:
            raise CompileError(f"the lowered module does not verify: {err}") from None
        raise CompileError(first.message, first.location) from None
