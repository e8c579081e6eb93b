"""Host code for cpu kernels: the LLVM dialect -> LLVM IR -> optimized x86-64 object code.

Our MLIR bindings have no X86 backend, so MLIR stops at LLVM IR and `llvmlite` (LLVM 22)
takes it from there: its new pass manager at -O3 (loop vectorization and unrolling included),
then its code generator, which writes an ELF relocatable object (position-independent, small
code model), in worker processes where a compile has many kernels (`host_codegen`). Each
cpu kernel becomes one object holding one global function of the kernel's
name, `void name(ptr buffer..., i64 lo, i64 hi)`; its only undefined symbols are libm's (expf,
tanh, ...), which the runtime's loader resolves. That object is the kernel's host image.

The code is for named x86-64 levels, never the build machine's own CPU (the deploy host may
differ): by default a program for each of DEFAULT_CPUS, which the runtime picks from at load
(the highest its CPU runs), or the levels `-target=cpu:<level>` names. Each image records its
level in the `.hxb`, and the runtime refuses an image its CPU cannot run.

The only fast-math flag is `contract`, on the multiply-adds of a matmul's
sums and of `host_math`'s polynomials: LLVM fuses those into FMAs where the level has them
(v3 and up), so their last bits depend on the level; nothing is reordered (no reduction is
reassociated), and everything else is the IEEE result of the loops as written.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import ir, llvm
from hexir_compiler.target import host_codegen
from hexir_compiler.target.host_codegen import TRIPLE
from hexir_format import CPU_LEVELS, dims
from hexir_format.dims import Dim

#: The levels a module holds by default, one program each; the runtime runs the highest the
#: host supports. x86-64-v2 (SSE4.2, every x86-64 server since 2009) keeps the module
#: running anywhere, v3 (AVX2, FMA) and v4 (AVX-512) are where the schedules are fast.
DEFAULT_CPUS = ("x86-64-v2", "x86-64-v3", "x86-64-v4")
#: The level of the kernels the text stages (-emit=mlir-tir and below) show by default.
DEFAULT_CPU = DEFAULT_CPUS[0]
#: The CPUs `-target=cpu:<cpu>` accepts: the x86-64 psABI levels, which every vendor honours.
LEVELS = {name: level for level, name in CPU_LEVELS.items()}
CPUS = tuple(LEVELS)
#: The module attribute naming the level a module's kernels were scheduled for: set where
#: the kernels are made (`hexir-lower-to-tir`), so a printed stage fed back is compiled for
#: its own level only.
LEVEL_ATTR = "hexir.cpu"


@dataclass(frozen=True)
class HostImage:
    image: bytes
    grid: tuple[Dim, Dim, Dim]
    level: int  # the x86-64 level it needs (hexir_format.CPU_LEVELS), which the .hxb records


def llvm_ir(module: ir.Module, names: Iterable[str] | None = None) -> str:
    """The LLVM IR of `module`'s cpu kernels (all, or those in `names`) and the libm
    declarations they use, for the host triple."""
    wanted = None if names is None else set(names)
    with module.context, ir.Location.unknown():
        scratch = ir.Module.create()
        scratch.operation.attributes["llvm.target_triple"] = ir.StringAttr.get(TRIPLE)
        for view in module.body.operations:
            op = view.operation
            if op.name != "llvm.func" or ("hexir.kernel" in op.attributes and wanted is not None
                                          and _symbol(op) not in wanted):
                continue
            scratch.body.append(op.clone())
        return llvm.translate_module_to_llvmir(scratch.operation)


def cpus(cpu: str | tuple[str, ...] | None) -> tuple[str, ...]:
    """The levels `cpu` names, lowest first: one, several, or (None) DEFAULT_CPUS."""
    names = DEFAULT_CPUS if cpu is None else (cpu,) if isinstance(cpu, str) else cpu
    return tuple(sorted(set(names), key=level))


def level(cpu: str | None) -> int:
    """The x86-64 level of the host CPU name `cpu` (None: DEFAULT_CPU)."""
    cpu = cpu or DEFAULT_CPU
    if cpu not in CPUS:
        raise CompileError(f"'{cpu}' is not a host CPU level; expected one of {', '.join(CPUS)}")
    return LEVELS[cpu]


def kernels(module: ir.Module) -> list[ir.Operation]:
    """The cpu kernels of `module` at mlir-llvm."""
    return [view.operation for view in module.body.operations
            if view.operation.name == "llvm.func" and "hexir.kernel" in view.operation.attributes]


def has_kernels(module: ir.Module) -> bool:
    """Whether `module` (at mlir-llvm) has cpu kernels, which get host code."""
    return bool(kernels(module))


def compile_kernels(module: ir.Module, cpu: str | None = None,
                    codegen: host_codegen.Codegen | None = None) -> dict[str, HostImage]:
    """A host image per cpu kernel of `module` (at mlir-llvm), by name."""
    return {name: image() for name, image in submit_kernels(module, cpu, codegen).items()}


def submit_kernels(module: ir.Module, cpu: str | None = None,
                   codegen: host_codegen.Codegen | None = None,
                   ) -> dict[str, Callable[[], HostImage]]:
    """Each cpu kernel of `module` (at mlir-llvm) handed to `codegen` (None: compiled here
    and now), by name: a call gives its host image once its code is made (and raises the
    CompileError where LLVM refuses the kernel's IR)."""
    found = kernels(module)
    if not found:
        return {}
    cpu = cpu or DEFAULT_CPU
    codegen = codegen or host_codegen.Codegen()
    pending: dict[str, Callable[[], HostImage]] = {}
    for kernel in found:
        name = _symbol(kernel)
        x, y, z = grid(kernel)
        code = codegen.submit(llvm_ir(module, [name]), cpu)
        pending[name] = functools.partial(_image, code, name, (x, y, z), LEVELS[cpu])
    return pending


def grid(kernel: ir.Operation) -> tuple[Dim, Dim, Dim]:
    """A lowered cpu kernel's grid (`hexir.grid`): ints, or the expressions a kernel of
    symbolic sizes has (`hextir-to-loops`)."""
    attr = kernel.attributes["hexir.grid"]
    if isinstance(attr, ir.ArrayAttr):
        x, y, z = (dims.parse(ir.StringAttr(g).value) for g in attr)
    else:
        x, y, z = (int(g) for g in attr)
    return x, y, z


def _image(code: Future, name: str, grid: tuple[Dim, Dim, Dim], level: int) -> HostImage:
    try:
        return HostImage(code.result(), grid, level)
    except host_codegen.RejectedIR as err:
        raise CompileError(f"LLVM rejected the IR of cpu kernel '{name}': {err}") from None
    except RuntimeError as err:  # a worker that died
        raise CompileError(f"cpu kernel '{name}': {err}") from None


def llvm_version() -> str:
    """The version of the LLVM inside llvmlite, e.g. `22.1.0`."""
    return ".".join(map(str, host_codegen.llvm_binding().llvm_version_info))


def _symbol(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value
