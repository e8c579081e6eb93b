"""The `hexir` command: compile a program (or the built-in one) to one `-emit` stage.

    hexir [options] [input.mlir | model.onnx | - | -builtin]

MLIR and LLVM IR go to stdout (or `-o`), so stages can be piped; `-` reads the program from
stdin, as MLIR tools do; no input (or `-builtin`) compiles the built-in program. `-emit=hxb`
writes `-o` (default out.hxb) through a temporary file, so a failed compile leaves no file
behind. Exit status, as in the earlier C++ tool: 0 done; 2 bad options (one line, and a
pointer to --help); 255 an input that cannot be read, parsed or verified (an ONNX model
Hexir cannot import included); 4 a pass that fails; 1 no .hxb could be written.
"""

from __future__ import annotations

import os
import select
import stat
import sys
from dataclasses import dataclass, field

from hexir_compiler import placement as placement_
from hexir_compiler import symbolic
from hexir_compiler.errors import CompileError, diagnostic
from hexir_compiler.frontend import onnx_generate
from hexir_compiler.frontend.onnx import ModelError
from hexir_compiler.pipeline import (
    DESCRIPTIONS,
    STAGES,
    STDIN,
    Options,
    ParseError,
    compile_file,
    is_compiled_module,
)
from hexir_compiler.serialize import SerializeError
from hexir_compiler.target import TargetError, host, parse_targets
from hexir_format import MAGIC
from hexir_format.dims import DimError
from hexir_format.files import atomic_write, terminate_as_interrupt, write_atomically

EXIT_USAGE, EXIT_INPUT, EXIT_PASS, EXIT_OUTPUT = 2, 255, 4, 1


class UsageError(CompileError):
    """A bad command line: answered with one line that points at --help."""


@dataclass
class Args:
    stage: str | None = None
    output: str | None = None
    input: str | None = None
    placement: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    help: bool = False
    version: bool = False
    builtin: bool = False
    input_shapes: list[str] = field(default_factory=list)
    fixed_inputs: list[str] = field(default_factory=list)
    fusion: str = "on"
    generate: str | None = None


def usage() -> str:
    lines = [
        "usage: hexir [options] [input.mlir | model.onnx | - | -builtin]",
        "",
        "Compiles input.mlir (hexir dialect, MLIR generic form), or stdin for '-'; with no",
        "input (or -builtin), the built-in program: print(linear([[3, 1], [2, 2]], [[1, 5],",
        "[5, 2]])).",
        "",
        "  -emit=<stage>          what to produce (required):",
        *(f"      {s:<13}      {DESCRIPTIONS[s]}" for s in STAGES),
        "  -o <file>              output file (hxb: default out.hxb; others: stdout)",
        "  -target=<dev>[:<arch>] cpu[:<level>] or cuda[:sm_XX] (comma-separated, repeatable);",
        f"                         an .hxb holds host code for {', '.join(host.DEFAULT_CPUS)}",
        "                         (the runtime runs the best its CPU has) unless levels are",
        f"                         named ({', '.join(host.CPUS)}); text stages from mlir-tir",
        "                         on show the lowest level's kernels",
        "  -placement=<op>=<dev>  place an op on a device (comma-separated, repeatable);",
        "  -placement=<dev>       a bare device (or *=<dev>) is the default for every op not",
        "                         named: -placement=cuda,hexir.softmax=cpu",
        "  -input-shape=<in>=<d0>x<d1>...  an ONNX input's shape, binding symbolic dimensions",
        "                         (comma-separated, repeatable): -input-shape=x=8x784; a",
        "                         dimension may stay symbolic, named or bounded:",
        "                         -input-shape=ids=batch:1..8xseq:1..512, x=1..64x3x224x224",
        "  -fix-input=<in>=<values>  fix an ONNX input (a shape or axes operand) at compile",
        "                         time: 1,2,3 (int64), or @file.npy; repeatable",
        "  -generate[=<k>=<v>,...]  wrap an ONNX decoder-with-past step model (Optimum's",
        "                         names) into an entry point 'generate': a greedy decode loop",
        "                         with its KV cache, run by the runtime (hexir-run",
        "                         --entry=generate); keys: eos=<id>, max_length=<n>,",
        "                         cache=<past*>:<present*>, ids=, mask=, positions=, logits=",
        "  -fusion=on|off         fuse element-wise chains, contraction epilogues,",
        "                         reduction prologues and concats of one axis into one",
        "                         kernel each (hexir-fuse; default on)",
        "  -version               print the versions of hexir, its format and its MLIR and LLVM",
        "",
        "examples:",
        "  hexir -emit=hxb -o model.hxb",
        "  hexir -emit=mlir-tir -placement=hexir.linear=cuda,hexir.relu=cpu prog.mlir",
        "  hexir -emit=hxb -placement=cuda -target=cuda:sm_90 -o gpu.hxb prog.mlir",
        "  cat prog.mlir | hexir -emit=mlir-hetero -placement=hexir.linear=gpu -",
        "  hexir -emit=hxb -input-shape=input=8x784 -o mlp.hxb mlp.onnx",
        "  hexir -emit=hxb -generate=eos=50256 -o gen.hxb decoder_with_past.onnx",
        "",
        *placement_.usage_lines(),
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> Args:
    args = Args()
    it = iter(argv)
    for arg in it:
        name, eq, value = arg.partition("=")
        if name in ("-h", "-help", "--help"):
            args.help = True
        elif arg in ("-version", "--version"):
            args.version = True
        elif arg in ("-builtin", "--builtin"):
            args.builtin = True
        elif name in ("-emit", "--emit") and eq:
            args.stage = value
        elif name in ("-placement", "--placement") and eq:
            args.placement.append(value)
        elif name in ("-target", "--target") and eq:
            args.targets.append(value)
        elif name in ("-input-shape", "--input-shape") and eq:
            args.input_shapes.append(value)
        elif name in ("-fix-input", "--fix-input") and eq:
            args.fixed_inputs.append(value)
        elif name in ("-generate", "--generate"):
            args.generate = value
        elif name in ("-fusion", "--fusion") and eq:
            if value not in ("on", "off"):
                raise UsageError(f"-fusion={value}: expected on or off")
            args.fusion = value
        elif name == "-o":
            args.output = value if eq else next(it, None)
            if not args.output:
                raise UsageError("-o needs a file name")
        elif arg.startswith("-") and arg != "-":
            raise UsageError(f"unknown option '{arg}'")
        elif args.input is not None:
            raise UsageError(f"more than one input file ('{args.input}' and '{arg}')")
        else:
            args.input = arg
    if args.builtin and args.input is not None:
        raise UsageError("-builtin compiles the built-in program; got an input too "
                         f"('{args.input}')")
    return args


def versions() -> str:
    """What `-version` prints: this package, the format, the MLIR bindings and llvmlite."""
    from importlib.metadata import version

    import llvmlite

    import hexir_format
    from hexir_compiler import __version__

    return (f"hexir {__version__} (hexir-compiler)\n"
            f"hexir-format {hexir_format.__version__}\n"
            f"MLIR bindings: numba-cuda-mlir {version('numba-cuda-mlir')}\n"
            f"llvmlite {llvmlite.__version__} (LLVM {host.llvm_version()})\n")


def options(args: Args) -> Options:
    if args.stage is None:
        raise UsageError("no -emit=<stage> given, so there is nothing to produce")
    if args.stage not in STAGES:
        raise UsageError(f"'{args.stage}' is not a stage; expected one of {', '.join(STAGES)}")
    try:
        chip, cpu = parse_targets(args.targets)
        placement = placement_.parse_placement(args.placement)
    except (TargetError, placement_.PlacementError) as err:
        raise UsageError(str(err)) from None
    if args.generate is not None and not (args.input == STDIN or
                                          str(args.input or "").endswith(".onnx")):
        raise UsageError(f"-generate wraps an ONNX decoder-with-past step model; "
                         f"'{args.input or '-builtin'}' is not one")
    try:
        generate = None if args.generate is None else onnx_generate.parse_spec(args.generate)
    except onnx_generate.SpecError as err:
        raise UsageError(str(err)) from None
    return Options(args.stage, placement, chip, cpu, parse_shapes(args.input_shapes),
                   parse_fixed(args.fixed_inputs), args.fusion == "on", generate=generate)


def parse_shapes(entries: list[str]) -> dict[str, tuple[int | str, ...]]:
    """`["x=8x784,y=3"]` -> `{"x": (8, 784), "y": (3,)}` (`x=` alone: a scalar). A dimension
    may also stay symbolic: a name (`batch`), a range of the model's own symbol there
    (`1..64`), or both (`batch:1..64`), kept as text for the importer (`frontend.onnx`)."""
    shapes = {}
    for text in entries:
        for entry in text.split(","):
            name, eq, dims = entry.partition("=")
            parsed = tuple(_dimension(d) for d in dims.split("x")) if dims else ()
            shape = tuple(d for d in parsed if d is not None)
            if not eq or not name or len(shape) != len(parsed):
                raise UsageError(f"invalid -input-shape entry '{entry}'; expected "
                                 "<input>=<d0>x<d1>..., each a size, a symbol, a range lo..hi "
                                 "or symbol:lo..hi, e.g. x=8x784 or ids=1..8xseq:1..512")
            shapes[name] = shape
    return shapes


def _dimension(text: str) -> int | str | None:
    """A size, or a symbolic dimension's text (checked here, read by the importer); None
    where it is neither."""
    if text.isdigit():
        return int(text)
    try:
        symbolic.given_dimension(text)
    except DimError:
        return None
    return text


def parse_fixed(entries: list[str]) -> dict[str, object]:
    """`["axes=0,1", "shape=@s.npy"]` -> {name: values}: int64 lists, or arrays from .npy."""
    import numpy as np

    fixed = {}
    for entry in entries:
        name, eq, values = entry.partition("=")
        if not eq or not name:
            raise UsageError(f"invalid -fix-input entry '{entry}'; expected <input>=1,2,3 or "
                             "<input>=@file.npy")
        if values.startswith("@"):
            try:
                fixed[name] = np.load(values[1:], allow_pickle=False)
            except (OSError, ValueError) as err:
                raise UsageError(f"-fix-input {name}: cannot read {values[1:]}: "
                                 f"{getattr(err, 'strerror', None) or err}") from None
            continue
        try:
            fixed[name] = np.array([int(v) for v in values.split(",")] if values else [],
                                   dtype=np.int64)
        except ValueError:
            raise UsageError(f"invalid -fix-input entry '{entry}'; values are integers "
                             "separated by commas, or @file.npy") from None
    return fixed


def run(argv: list[str]) -> int:
    """The whole command, minus the process: messages go to stderr, output to stdout/-o."""
    try:
        args = parse_args(argv)
        if args.help:
            sys.stdout.write(usage())
            return 0
        if args.version:
            sys.stdout.write(versions())
            return 0
        opts = options(args)
    except UsageError as err:
        sys.stderr.write(f"error: {err}; see 'hexir --help'\n")
        return EXIT_USAGE
    if args.input is None and not args.builtin and _stdin_has_data():
        sys.stderr.write("error: stdin has data, but no input was named, so the built-in "
                         "program would be compiled and stdin ignored: name '-' to compile "
                         "stdin (or -builtin for the built-in program); see 'hexir --help'\n")
        return EXIT_USAGE
    if args.input not in (None, STDIN) and not os.access(args.input, os.R_OK):
        reason = "no such file" if not os.path.exists(args.input) else "permission denied"
        sys.stderr.write(f"error: could not open {args.input}: {reason}\n")
        return EXIT_INPUT
    if args.input not in (None, STDIN) and _is_module_file(args.input):
        sys.stderr.write(f"error: {args.input} is a compiled module (.hxb), not a program to "
                         "compile: run it with hexir-run, or list it with hxb-dump\n")
        return EXIT_INPUT
    try:
        if opts.stage == "hxb":
            return _write_module(args, opts)
        result = compile_file(args.input, opts)
        assert result is not None, "a stage other than hxb gives its text"
    except ParseError as err:
        name = "the program on stdin" if args.input == STDIN else args.input
        verdict = f"{name} does not verify" if err.verifying else f"could not parse {name}"
        sys.stderr.write(f"{diagnostic(err)}\nerror: {verdict}\n")
        return EXIT_INPUT
    except CompileError as err:  # a model it cannot import, a failed pass, no .hxb to write
        sys.stderr.write(f"{diagnostic(err)}\n")
        return (EXIT_INPUT if isinstance(err, ModelError) else
                EXIT_OUTPUT if isinstance(err, SerializeError) else EXIT_PASS)
    return _emit(result, args)


def _stdin_has_data() -> bool:
    """Whether stdin is a file or pipe with bytes waiting (never a terminal, never a wait):
    what `hexir ... < model.onnx` without `-` would silently ignore."""
    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd):
            return False
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            return os.fstat(fd).st_size > os.lseek(fd, 0, os.SEEK_CUR)
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            # readable now: data, or the end (a closed, empty pipe); a pipe still open with
            # nothing in it yet is no data here
            return bool(select.select([fd], [], [], 0)[0]) and bool(os.read(fd, 1))
    except (AttributeError, OSError, ValueError):  # no stdin, or one replaced (pytest)
        pass
    return False


def _is_module_file(path: str) -> bool:
    """Whether `path` is a regular file that starts like a `.hxb`. A pipe (`hexir
    <(...)`, a FIFO) is not read here: the bytes read would be gone for the compile."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            return is_compiled_module(f.read(len(MAGIC)))
    except OSError:
        return False


def _write_module(args: Args, opts: Options) -> int:
    """Compile to a `.hxb` written straight to -o (default out.hxb), announced on stderr:
    the file appears only once complete (`atomic_write`), and the weights go from the
    compiler's constants to the file, never all into one buffer."""
    path = args.output or "out.hxb"
    try:
        with atomic_write(path) as out:
            compile_file(args.input, opts, out)
    except OSError as err:  # creating the file, or writing it (a full disk)
        sys.stderr.write(f"error: cannot open '{path}': {err.strerror}\n")
        return EXIT_OUTPUT
    sys.stderr.write(f"wrote {path}\n")
    return 0


def _emit(result: str | bytes, args: Args) -> int:
    """Text to stdout (or -o); a module to -o (default out.hxb), announced on stderr."""
    if isinstance(result, str):
        result = result if result.endswith("\n") else result + "\n"
        if args.output is None:
            sys.stdout.write(result)
            return 0
    path = args.output or "out.hxb"
    data = result if isinstance(result, bytes) else result.encode()
    try:
        write_atomically(path, data)
    except OSError as err:
        sys.stderr.write(f"error: cannot open '{path}': {err.strerror}\n")
        return EXIT_OUTPUT
    if isinstance(result, bytes):
        sys.stderr.write(f"wrote {path}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    terminate_as_interrupt()  # SIGTERM, like Ctrl-C, leaves no partial output
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
