"""Which passes run for each `-emit` stage: one chain, each stage the previous one refined.

| stage       | pass (module)                                | what it adds                     |
| ----------- | -------------------------------------------- | -------------------------------- |
| mlir        | (parse and verify)                           | the graph as written             |
| mlir-hetero | hexir-partition, hexir-insert-transfers      | devices on ops, copies between   |
| mlir-tir    | hexir-fuse, hexir-lower-to-tir,              | each op or fused group a kernel, |
|             | hexir-dedupe-kernels                         | identical kernels one            |
| mlir-linalg | hextir-to-loops                              | kernels as loop nests on buffers |
| mlir-gpu    | hexir-kernels-to-gpu                         | cuda kernels as gpu.module/func  |
| mlir-llvm   | hexir-kernels-to-llvm                        | every kernel in LLVM / NVVM      |
| llvm        | translation                                  | LLVM IR of host and device code  |
| hxb         | serializer (host objects, fatbins, commands) | a loadable module                |

Every pass acts only on what is still above its level, so any printed MLIR stage fed back
into `hexir` with the same flags continues down the same chain and gives the same `.hxb`.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import BinaryIO

import hexir_format as hf
from hexir_compiler import builtin, dialects, serialize
from hexir_compiler.dialects import context
from hexir_compiler.errors import CompileError
from hexir_compiler.frontend import onnx_generate
from hexir_compiler.mlir import ir
from hexir_compiler.target import cuda, host, host_codegen, parse_targets
from hexir_compiler.transforms import (
    hexir_dedupe_kernels,
    hexir_fuse,
    hexir_insert_transfers,
    hexir_kernels_to_gpu,
    hexir_kernels_to_llvm,
    hexir_lower_to_tir,
    hexir_partition,
    hextir_to_loops,
)
from hexir_format import MAGIC

DESCRIPTIONS = {
    "mlir": "the graph as written (hexir dialect)",
    "mlir-hetero": "placement as device attributes, transfers between devices inserted",
    "mlir-tir": "each compute op a hextir kernel whose loops carry their schedule",
    "mlir-linalg": "kernels as loop nests on buffers (scf, memref; the seed's stage name, no "
                   "linalg ops)",
    "mlir-gpu": "cuda kernels as gpu.module/gpu.func; cpu kernels stay loops",
    "mlir-llvm": "every kernel in the LLVM dialect (cpu) or NVVM (cuda)",
    "llvm": "LLVM IR of the host kernels and the device kernels",
    "hxb": "a loadable .hxb module (see -o)",
}
STAGES = tuple(DESCRIPTIONS)


@dataclass(frozen=True)
class Options:
    stage: str
    placement: Mapping[str, str] = field(default_factory=dict)
    chip: str | None = None  # CUDA architecture, e.g. "sm_90"; None = the default image
    #: Host CPU levels, e.g. "x86-64-v3", or a tuple of several; None: target.host.DEFAULT_CPUS.
    #: A .hxb holds a program per level; the text stages from mlir-tir on show the lowest's.
    cpu: str | tuple[str, ...] | None = None
    #: An ONNX model's inputs: shapes binding symbolic dimensions, and values fixed at
    #: compile time (shape or axes operands), by input name.
    input_shapes: Mapping[str, tuple[int | str, ...]] = field(default_factory=dict)
    fixed_inputs: Mapping[str, object] = field(default_factory=dict)
    fuse: bool = True  # hexir-fuse before the kernels are made (`-fusion=off`: one per op)
    #: Worker processes for the host kernels' LLVM code generation: None, one per core for a
    #: compile of many kernels (`target.host_codegen.workers`); 0, none. The `.hxb` is the
    #: same byte for byte whatever the number.
    jobs: int | None = None
    #: An ONNX decoder-with-past step model's decode loop, as a `generate` entry point
    #: (`-generate`, `frontend.onnx_generate`); None: the model alone.
    generate: onnx_generate.Spec | None = None


class ParseError(CompileError):
    """The input is not a valid program; the message is MLIR's first diagnostic."""

    def __init__(self, message: str, location: ir.Location | None = None):
        super().__init__(message, location)
        self.verifying = bool(_VERIFIER.match(message))  # it parsed, and an op broke a rule


_VERIFIER = re.compile(r"'[\w.$]+' op ")  # how every op verifier's message starts
STDIN = "-"


def is_onnx(source) -> bool:
    """Whether `source` is an ONNX model (an `.onnx` path, or an `onnx.ModelProto`)."""
    return hasattr(source, "graph") or str(source).endswith(".onnx")


def is_compiled_module(data: bytes) -> bool:
    """Whether `data` starts like a `.hxb` (which is what a compile writes, not reads)."""
    return data.startswith(MAGIC)


def _is_onnx_bytes(data: bytes) -> bool:
    """Whether stdin holds an ONNX model rather than MLIR text: a serialized ModelProto opens
    with its ir_version (field 1, a varint: byte 0x08), which no MLIR text does, and is binary
    where MLIR is UTF-8."""
    if data.startswith(b"\x08"):
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _onnx_model(data: bytes):
    """The ONNX model on stdin (the frontend's one-line ModelError when onnx is missing or
    the bytes are no model)."""
    from hexir_compiler.frontend import onnx as frontend

    model = frontend._onnx().ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as err:  # noqa: BLE001 (protobuf's DecodeError has no stable import path)
        raise frontend.ModelError(f"stdin: neither MLIR text nor an ONNX model (the protobuf "
                                  f"does not parse: {str(err) or type(err).__name__})") from None
    return model


def load(path, options: Options | None = None) -> ir.Module:
    """Parse and verify `path` (`-`: stdin; an `.onnx` model is imported) in the current
    context, or build the built-in program (None)."""
    if options is not None and options.generate is not None and not is_onnx(path) and \
            path != STDIN:
        raise CompileError(f"-generate wraps an ONNX decoder-with-past step model; "
                           f"'{path or '-builtin'}' is not one")
    if path is None:
        return builtin.build()
    if is_onnx(path):
        from hexir_compiler.frontend import onnx

        options = options or Options("mlir")
        module = onnx.import_model(path, options.input_shapes, options.fixed_inputs,
                                   options.generate)
        dialects.trim_heap()  # the model's protobuf and arrays are gone; the weights stay
        try:
            _verify(module)
        except CompileError as err:  # an op the import made breaks a rule: the model's fault
            raise onnx.ModelError(str(err), err.location) from None
        return module
    text = None
    if path == STDIN:
        data = sys.stdin.buffer.read()
        if is_compiled_module(data):
            raise ParseError("the data on stdin is a compiled module (.hxb), not a program to "
                             "compile: run it with hexir-run, or list it with hxb-dump")
        if _is_onnx_bytes(data):
            return load(_onnx_model(data), options)
        text = data.decode("utf-8", errors="replace")
    try:
        return ir.Module.parse(text) if path == STDIN else ir.Module.parseFile(path)
    except ir.MLIRError as err:
        if not err.error_diagnostics:
            raise _silent_parse_failure(path, text) from None
        first = err.error_diagnostics[0]
        raise ParseError(first.message, first.location) from None


_CUSTOM_FORM = re.compile(r"^(\s*(?:%[\w#:.$-]+(?:\s*,\s*%[\w#:.$-]+)*\s*=\s*)?)(hext?ir\.\w+)")


def _silent_parse_failure(path: str, text: str | None) -> ParseError:
    """A parse failure MLIR reported no diagnostic for.

    The one known case: an op of a Python-defined (IRDL) dialect written in custom assembly
    (`hexir.linear %a, %w : ...`); IRDL dialects have no custom syntax and their parse hook
    fails silently. Find that op and say what to write instead.
    """
    if text is None:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    for number, line in enumerate(text.splitlines(), 1):
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


def _place(module: ir.Module, options: Options) -> None:
    hexir_partition.run(module, options.placement)
    hexir_insert_transfers.run(module)


def _kernels(module: ir.Module, options: Options) -> None:
    _fuse(module, options)
    _lower_to_tir(module, _made_for(module) or host.cpus(options.cpu)[0])


def _lower_to_tir(module: ir.Module, cpu: str) -> None:
    hexir_lower_to_tir.run(module, cpu)
    hexir_dedupe_kernels.run(module)


def _fuse(module: ir.Module, options: Options) -> None:
    if options.fuse:
        hexir_fuse.run(module)


def _made_for(module: ir.Module) -> str | None:
    """The level a module's kernels were made for (a stage from mlir-tir on), else None."""
    attrs = module.operation.attributes
    return ir.StringAttr(attrs[host.LEVEL_ATTR]).value if host.LEVEL_ATTR in attrs else None


#: The MLIR stages after `mlir` and the passes that produce each from the one before.
PASSES: tuple[tuple[str, Callable[[ir.Module, Options], None]], ...] = (
    ("mlir-hetero", _place),
    ("mlir-tir", _kernels),
    ("mlir-linalg", lambda module, options: hextir_to_loops.run(module)),
    ("mlir-gpu", lambda module, options: hexir_kernels_to_gpu.run(module)),
    ("mlir-llvm", lambda module, options: hexir_kernels_to_llvm.run(
        module, cuda.architectures(options.chip))),
)


def lower(module: ir.Module, options: Options, stage: str) -> ir.Module:
    """`module` lowered in place through every pass up to the MLIR stage `stage`."""
    for _, step in PASSES[: STAGES.index(stage)]:
        step(module, options)
        _verify(module)
    return module


def run(module: ir.Module, options: Options) -> ir.Module | str | hf.Module:
    """`module` lowered to `options.stage`: a module (MLIR stages), LLVM IR text, or the .hxb
    model (`serialize.build` makes its bytes)."""
    if options.stage not in STAGES:
        raise CompileError(f"'{options.stage}' is not a stage; expected one of {', '.join(STAGES)}")
    if options.stage not in ("llvm", "hxb"):
        return lower(module, options, options.stage)
    if options.stage == "hxb":
        model, rodata = _hxb(module, options)
        return replace(model, rodata=rodata.join())
    lower(module, options, "mlir-llvm")
    parts = [f"; hexir: cpu kernels, {host.TRIPLE}\n{host.llvm_ir(module)}"]
    parts += [f"; hexir: cuda kernel @{name}, nvptx64-nvidia-cuda\n{text}"
              for name, text in cuda.llvm_ir(module)]
    return "\n".join(parts)


def _hxb(module: ir.Module, options: Options) -> tuple[hf.Module, serialize.Rodata]:
    """The `.hxb` model of `module`, its rodata empty, and the constants that go there: a
    program per host level (`Options.cpu`), the module taken through the level-independent
    passes once (placement, fusion) and through the rest once per level, each level's
    kernels compiled for it; one level gives a version 5 module exactly as before, several a
    version 6 module of variants (`serialize.Variants`). A level's LLVM code generation goes
    on in worker processes (`Options.jobs`) while the next level is lowered.

    A module whose kernels are already made (a printed stage from mlir-tir on) holds its
    own level's program only, and one with no cpu kernels one program (its level is moot)."""
    made = _made_for(module)
    if made is not None:
        if options.cpu is not None and host.cpus(options.cpu) != (made,):
            raise CompileError(f"the module's kernels were made for {made} ({host.LEVEL_ATTR} "
                               f"= \"{made}\"); it cannot be compiled for "
                               f"{', '.join(host.cpus(options.cpu))}: compile the source, or a "
                               "stage above mlir-tir")
        levels: tuple[str, ...] = (made,)
    else:
        levels = host.cpus(options.cpu)
    if len(levels) == 1 or made is not None:
        lower(module, options, "mlir-llvm")
        rodata = serialize.Rodata()
        with _codegen(module, 1, options) as codegen:
            model = serialize.to_model(module, options.chip, levels[0], codegen, rodata)
            return serialize.with_generations(model, module), rodata
    lower(module, options, "mlir-hetero")
    _fuse(module, options)
    _verify(module)
    variants = serialize.Variants(options.chip)
    with contextlib.ExitStack() as stack:
        for level in levels:
            copy = _clone(module)
            _lower_to_tir(copy, level)
            _verify(copy)
            for _, step in PASSES[STAGES.index("mlir-tir"):]:
                step(copy, options)
                _verify(copy)
            if not host.has_kernels(copy):  # no host code (every op on cuda): one program
                rodata = serialize.Rodata()
                model = serialize.to_model(copy, options.chip, level, rodata=rodata)
                return serialize.with_generations(model, module), rodata
            if variants.codegen is None:  # (the first level shows how many kernels there are)
                variants.codegen = stack.enter_context(_codegen(copy, len(levels), options))
            variants.add(copy, level)
            del copy  # (the next level's clone need not sit beside it)
        return serialize.with_generations(variants.model(rodata=False), module), \
            variants.rodata


def _codegen(module: ir.Module, levels: int, options: Options) -> host_codegen.Codegen:
    """Where the host kernels of `module` (at mlir-llvm), made for `levels` levels, get their
    code: worker processes, or this one (`host_codegen.workers`)."""
    kernels = len(host.kernels(module)) * levels
    return host_codegen.Codegen(host_codegen.workers(kernels, options.jobs))


def _clone(module: ir.Module) -> ir.Module:
    """A copy of `module` to lower for one level (constants' values are uniqued attributes,
    shared with the original, not copied)."""
    copy = ir.Module.create(module.operation.location)
    attrs = module.operation.attributes
    for name in list(attrs):
        copy.operation.attributes[name] = attrs[name]
    for view in module.body.operations:
        copy.body.append(view.operation.clone())
    return copy


def compile_file(path, options: Options, out: BinaryIO | None = None) -> str | bytes | None:
    """Parse `path` (None: the built-in program; an `.onnx` path or an `onnx.ModelProto`:
    the model) and produce the stage's output; at stage hxb with `out` (a binary file), the
    `.hxb` is written there (and None returned) straight from the constants' attributes,
    whose bytes are never copied into one buffer."""
    with context():
        module = load(None if path is None else path if is_onnx(path) else str(path), options)
        if options.stage != "hxb":
            result = run(module, options)
            if isinstance(result, ir.Module):
                return str(result)
        else:
            result, rodata = _hxb(module, options)
            if out is not None:
                serialize.write(result, rodata, out)
                result = None
            else:
                result = replace(result, rodata=rodata.join())
            del rodata
    # The module goes, and with it the context, before the .hxb's bytes are made: the
    # context's attributes hold the weights.
    del module
    dialects.release()
    return serialize.build(result) if isinstance(result, hf.Module) else result


def _verify(module: ir.Module) -> None:
    try:
        module.operation.verify()
    except ir.MLIRError as err:
        first = err.error_diagnostics[0] if err.error_diagnostics else None
        if first is None:
            raise CompileError(f"the lowered module does not verify: {err}") from None
        raise CompileError(first.message, first.location) from None


def compile(source, emit: str = "hxb", *, placement: str | Mapping[str, str] | None = None,
            target: str | None = None,
            input_shapes: Mapping[str, tuple[int | str, ...]] | None = None,
            fixed_inputs: Mapping[str, object] | None = None, fuse: bool = True,
            generate: str | None = None) -> str | bytes:
    """`source` (a `.mlir` or `.onnx` path, an `onnx.ModelProto`, or None: the built-in
    program) compiled to the stage `emit`: `.hxb` bytes, or the stage's text.

    `placement` is what `-placement` takes (`"cuda"`, `"cuda,hexir.softmax=cpu"`) or a dict
    of op name to device; `target` what `-target` takes; `fuse=False` makes one kernel per op;
    `generate` what `-generate=` takes (`""`: Optimum's names, no end-of-sequence token), for
    an ONNX decoder-with-past step model. Raises `CompileError` (one line).
    """
    from hexir_compiler import placement as placement_

    if isinstance(placement, str):
        placement = placement_.parse_placement([placement])
    chip = cpu = None
    if target:
        chip, cpu = parse_targets([target])
    spec = None
    if generate is not None:
        try:
            spec = onnx_generate.parse_spec(generate)
        except onnx_generate.SpecError as err:
            raise CompileError(str(err)) from None
    options = Options(emit, dict(placement or {}), chip, cpu, dict(input_shapes or {}),
                      dict(fixed_inputs or {}), fuse, generate=spec)
    try:
        result = compile_file(source, options)
        assert result is not None, "compile_file gives the output where it writes no file"
        return result
    except CompileError as err:  # the frontend names the CLI's flags; here, the arguments
        message = _FLAGS.sub(_argument, str(err))
        if message == str(err):
            raise
        raise type(err)(message, err.location) from None


# The CLI flags a frontend message may name (`-input-shape=x=<d0>x<d1>...` in full).
_FLAGS = re.compile(r"-input-shape=(\S+?)=<d0>x<d1>\.\.\.|-input-shape\b|-fix-input\b")


def _argument(flag: re.Match) -> str:
    """`compile`'s argument in place of a CLI flag."""
    if flag[1] is not None:
        return f"input_shapes={{{flag[1]!r}: (d0, d1, ...)}}"
    return "input_shapes" if flag[0] == "-input-shape" else "fixed_inputs"
