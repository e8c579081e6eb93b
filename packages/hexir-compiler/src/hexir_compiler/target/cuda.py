"""Device code for cuda kernels: NVVM (at mlir-llvm) -> PTX -> CUBIN -> fatbin.

`compile_kernels` gives every cuda kernel (a `gpu.module` that hexir-kernels-to-llvm has
converted to NVVM) a `DeviceImage` for its executable entry: a fatbin holding PTX for `sm_75`
(the driver compiles it for whatever GPU loads it, sm_75 or newer) and a CUBIN for sm_75;
`target="sm_90"` adds PTX generated for sm_90 (forward compatible: a newer GPU JIT-compiles
it) and the CUBIN ptxas makes from it, so that GPU runs code made for it without a JIT
step. The entry function has the kernel's name and takes one device pointer per buffer (bare
pointers).

MLIR makes the PTX, one per NVVM target of the gpu.module (`gpu-module-to-binary{format=isa}`,
libdevice linked in for the `__nv_*` math functions); `ptxas` and `fatbinary` from the CUDA
toolkit make the rest. Running them here rather than through MLIR's `format=fatbin` keeps the
parts uncompressed (so `hexir_format.images` can list their kernels, for the check below and
for hxb-dump) and turns a tool's failure into a one-line CompileError.
"""

import os
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import gpu, ir, llvm, passmanager
from hexir_compiler.target.cuda_toolkit import CudaToolkit, find_toolkit
from hexir_format import FormatError
from hexir_format.images import parts

#: The PTX every cuda kernel is compiled to; the oldest GPU the image loads on.
BASE_ARCH = 75
TO_PTX = "builtin.module(gpu-module-to-binary{format=isa})"


@dataclass(frozen=True)
class DeviceImage:
    """One kernel's device code (a fatbin) and the geometry it is launched with (x, y, z)."""

    image: bytes
    grid: tuple[int, int, int]
    block: tuple[int, int, int]


def architectures(target: str | None) -> tuple[int, ...]:
    """The CUBIN architectures for `target` ("sm_90" or None): always sm_75, plus target's."""
    if target is None:
        return (BASE_ARCH,)
    match = re.fullmatch(r"sm_(\d+)", target)
    if not match or int(match[1]) < BASE_ARCH:
        raise CompileError(
            f"expected a CUDA architecture sm_{BASE_ARCH} or newer, like sm_90; got '{target}'"
        )
    return tuple(sorted({BASE_ARCH, int(match[1])}))


def compile_kernels(module: ir.Module, target: str | None = None) -> dict[str, DeviceImage]:
    """A device image per cuda kernel of `module` (NVVM gpu.modules, at mlir-llvm), by name;
    `module` is left untouched."""
    archs = architectures(target)
    with module.context, ir.Location.unknown():
        ptx = _kernels_as_ptx(module)
    if not ptx:
        return {}
    toolkit = find_toolkit()

    for name, (texts, _, _) in ptx.items():
        missing = [arch for arch in archs if arch not in texts]
        if missing:
            raise CompileError(
                f"cuda kernel '{name}' was lowered for {_chips(texts)}, not for "
                f"{_chips(missing)}: give mlir-llvm input the -target it was made with")

    def assemble(name: str) -> DeviceImage:
        texts, grid, block = ptx[name]
        return _fatbin(name, {arch: texts[arch] for arch in archs}, grid, block, toolkit)

    # ptxas dominates and runs one process per kernel: run them side by side.
    with ThreadPoolExecutor(max_workers=min(len(ptx), os.cpu_count() or 1)) as pool:
        return dict(zip(ptx, pool.map(assemble, ptx), strict=True))


def _kernels_as_ptx(module: ir.Module) -> dict[str, tuple[dict[int, bytes], tuple, tuple]]:
    """The PTX for each NVVM target (by architecture) and the launch geometry (grid, block)
    of each cuda kernel, by name."""
    kernels = ir.Module.create()
    kernels.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
    geometry = {}
    for view in module.body.operations:
        op = view.operation
        if op.name == "gpu.module" and "hexir.grid" in op.attributes:
            geometry[_symbol(op)] = (tuple(op.attributes["hexir.grid"]),
                                     tuple(op.attributes["hexir.block"]))
            kernels.body.append(op.clone())
    if not geometry:
        return {}
    try:
        passmanager.PassManager.parse(TO_PTX).run(kernels.operation)
    except ir.MLIRError as err:
        first = err.error_diagnostics[0].message if err.error_diagnostics else str(err)
        raise CompileError("could not compile cuda kernels to PTX: "
                           f"{first.splitlines()[0]}") from None
    ptx = {}
    for view in kernels.body.operations:  # now gpu.binary ops, named like their gpu.module
        name = _symbol(view.operation)
        objects = [gpu.ObjectAttr(o) for o in ir.ArrayAttr(view.operation.attributes["objects"])]
        texts = {_arch(o.target): o.object for o in objects}
        ptx[name] = (texts, *geometry[name])
    return ptx


def _arch(target: ir.Attribute) -> int:
    """The architecture of an `#nvvm.target`; MLIR prints no chip when it is the default,
    sm_75, the one hexir-kernels-to-llvm always asks for."""
    chip = re.search(r'chip = "sm_(\d+)"', str(target))
    return int(chip[1]) if chip else BASE_ARCH


def _chips(archs) -> str:
    return ", ".join(f"sm_{arch}" for arch in sorted(archs))


def llvm_ir(module: ir.Module) -> list[tuple[str, str]]:
    """(kernel name, LLVM IR for nvptx64) of each cuda kernel of `module` (at mlir-llvm)."""
    found = []
    with module.context, ir.Location.unknown():
        for view in module.body.operations:
            op = view.operation
            if op.name != "gpu.module" or "hexir.grid" not in op.attributes:
                continue
            scratch = ir.Module.create()
            scratch.operation.attributes["llvm.target_triple"] = ir.StringAttr.get(
                "nvptx64-nvidia-cuda")
            for inner in op.regions[0].blocks[0].operations:
                scratch.body.append(inner.operation.clone())
            found.append((_symbol(op), llvm.translate_module_to_llvmir(scratch.operation)))
    return found


def _fatbin(name: str, ptx: dict[int, bytes], grid, block, toolkit: CudaToolkit) -> DeviceImage:
    """Assemble a CUBIN from each architecture's PTX and wrap them all in one fatbin."""
    archs = tuple(ptx)
    with tempfile.TemporaryDirectory(prefix="hexir-cuda-") as tmp:
        images = []
        for arch, text in ptx.items():
            source = Path(tmp, f"{name}.sm_{arch}.ptx")
            cubin = source.with_suffix(".cubin")
            source.write_bytes(text)
            _tool(toolkit.ptxas, [f"--gpu-name=sm_{arch}", "-O3", str(source), "-o", str(cubin)],
                  name)
            images += [f"--image3=kind=ptx,sm={arch},file={source}",
                       f"--image3=kind=elf,sm={arch},file={cubin}"]
        fatbin = Path(tmp, f"{name}.fatbin")
        _tool(toolkit.fatbinary, ["-64", "--compress=false", f"--create={fatbin}", *images], name)
        image = fatbin.read_bytes()
    _check_names(name, image, archs)
    return DeviceImage(image, _xyz(grid), _xyz(block))


def _tool(tool: Path, args: list[str], kernel: str) -> None:
    try:
        done = subprocess.run([str(tool), *args], capture_output=True, text=True, check=False)
    except OSError as err:
        raise CompileError(f"could not run {tool}: {err.strerror}") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        detail = detail or [f"exit status {done.returncode}"]
        raise CompileError(f"{tool.name} failed on cuda kernel '{kernel}': {detail[0]}")


def _check_names(name: str, image: bytes, archs: tuple[int, ...]) -> None:
    """Refuse an image whose parts do not all define `name` (a kernel without device code)."""
    try:
        found = {(p.kind, p.arch): p.kernels for p in parts(image)}
    except FormatError as err:
        raise CompileError(f"device image of cuda kernel '{name}': {err}") from None
    for part in [(kind, arch) for kind in ("ptx", "elf") for arch in archs]:
        if name not in found.get(part, ()):
            raise CompileError(
                f"device image of cuda kernel '{name}' has no {part[0]} entry '{name}' for "
                f"sm_{part[1]} (found {sorted(found)})"
            )


def _symbol(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def _xyz(sizes) -> tuple[int, int, int]:
    x, y, z = (int(s) for s in sizes)
    return (x, y, z)
