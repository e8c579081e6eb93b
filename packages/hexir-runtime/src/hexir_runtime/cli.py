"""`hexir-run`: run a `.hxb` module, or exercise a device's HAL with `--selftest`.

    hexir-run <module.hxb> [--device=cpu|cuda] [--entry=NAME] [--quiet]
              [--input=[NAME=]TYPE=VALUES | --input=[NAME=]@FILE.npy | --input=@FILE.npz]...
              [--output=@FILE.npz | --output=@FILE.npy] [--benchmark=N] [--profile[=N]]
              [--no-cuda-graphs]
    hexir-run --selftest [--device=cpu|cuda]
    hexir-run --version

Exit status: 0 ok, 1 the module could not be loaded or run, 2 bad arguments (a malformed
`--input` included). Every failure is one line on stderr starting with `hexir-run: `; there
are no tracebacks for bad input.

Output, as compilers' run tools do it: stdout carries what the program PRINTs and then the
entry's results (unless `--output` writes them to a file), so it can be piped or compared;
the banner (the module's sections, the devices it runs on) goes to stderr, and `--quiet`
leaves it out.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from hexir_format import Device, DType, HexirError
from hexir_format.files import terminate_as_interrupt
from hexir_runtime import hal
from hexir_runtime.api import Module
from hexir_runtime.device_arrays import DevicePointer
from hexir_runtime.errors import EntryNotFound, InputError, ValidationError
from hexir_runtime.tensors_io import gather, output_path, parse_input, write_outputs

PROG = "hexir-run"
USAGE = """\
usage: hexir-run <module.hxb> [--device=cpu|cuda] [--entry=NAME] [--quiet]
                 [--input=[NAME=]TYPE=VALUES | --input=[NAME=]@FILE.npy | --input=@FILE.npz]...
                 [--output=@FILE.npz | --output=@FILE.npy] [--benchmark=N] [--profile[=N]]
                 [--no-cuda-graphs]
       hexir-run --selftest [--device=cpu|cuda]
       hexir-run --version

  --device=cpu|cuda     make cuda available (the cpu always is); each kernel runs where the
                        compiler placed it, and a module that never needs cuda runs on the cpu
  --no-cuda-graphs      launch each cuda kernel on every call instead of replaying each run
                        of kernels as one captured cuda graph
  --entry=NAME          the entry point to run (default: main); a generate entry point
                        (hexir -generate) takes input_ids and max_new_tokens and returns
                        sequences
  --input=TYPE=VALUES   the next input: 2x3xf32=1,2,3,4,5,6 (one value fills the tensor);
                        integers for i32 and i64 (2xi64=7,-1), 1/0 or true/false for i1,
                        words for str (2xstr=monday,tuesday; others: a .npy of str)
  --input=@FILE.npy     the next input, from a .npy file
  --input=NAME=TYPE=VALUES, --input=NAME=@FILE.npy
                        the input NAME, where the module names its inputs (after those
                        given by position)
  --input=@FILE.npz     the inputs: its arrays named as the entry's inputs, else input_0,
                        input_1, ... (else every array, in file order)
  --output=@FILE.npz    write the results under the entry's output names (output_0,
                        output_1, ... where the module names none) instead of printing them
  --output=@FILE.npy    write the only result
  -q, --quiet           no banner on stderr (stdout has the PRINTs and results either way)
  --benchmark=N         time N calls (after up to 10 warm-up calls): min, median, max
  --profile[=N]         time each kernel over N calls (default 20): its time, share of the
                        call, GFLOP/s and GB/s against the machine's peaks, and the
                        runtime's own overhead per call
  --selftest            a round trip through the device's HAL
  --version             print the versions of hexir-run and its format

Integers print as integers and i1 values as 1 and 0, by PRINT and in the results."""
SELFTEST_VALUES = np.array([1.0, 2.0, 3.0, 4.0])
PROFILE_CALLS = 20


class UsageError(Exception):
    """Bad command-line arguments: exit status 2."""


@dataclass
class Options:
    path: str | None = None
    device: str = "cpu"
    entry: str = "main"
    quiet: bool = False
    selftest: bool = False
    help: bool = False
    version: bool = False
    inputs: list[str] = field(default_factory=list)
    output: str | None = None
    benchmark: int = 0
    profile: int = 0
    cuda_graphs: bool = True


def parse_args(argv: list[str]) -> Options:
    opts = Options()
    for arg in argv:
        name, eq, value = arg.partition("=")
        if arg in ("-q", "--quiet"):
            opts.quiet = True
        elif arg == "--selftest":
            opts.selftest = True
        elif arg in ("-h", "--help"):
            opts.help = True
        elif arg == "--version":
            opts.version = True
        elif arg == "--no-cuda-graphs":
            opts.cuda_graphs = False
        elif arg == "--profile":
            opts.profile = PROFILE_CALLS
        elif name in ("--device", "--entry", "--input", "--output", "--benchmark",
                      "--profile") and not eq:
            raise UsageError(f"{name} needs a value: {name}=...")
        elif name == "--device":
            try:
                Device.from_name(value)
            except ValueError:
                raise UsageError(f"unknown device '{value}'; expected cpu or cuda") from None
            opts.device = value
        elif name == "--entry":
            opts.entry = value
        elif name == "--input":
            opts.inputs.append(value)
        elif name == "--output":
            opts.output = value
        elif name in ("--benchmark", "--profile"):
            if not value.isdigit() or int(value) < 1:
                raise UsageError(f"{name}={value}: expected a number of calls, 1 or more")
            setattr(opts, name[2:], int(value))
        elif arg.startswith("-"):
            raise UsageError(f"unknown option '{arg}' (see {PROG} --help)")
        elif opts.path is not None:
            raise UsageError(f"one module at a time: got '{opts.path}' and '{arg}'")
        else:
            opts.path = arg
    if opts.path is None and not (opts.selftest or opts.help or opts.version):
        raise UsageError(f"no module given; usage: {PROG} <module.hxb> [--device=cpu|cuda] "
                         "[--entry=NAME] [--quiet]")
    return opts


def versions() -> str:
    import hexir_format
    from hexir_runtime import __version__

    return (f"hexir-run {__version__} (hexir-runtime)\n"
            f"hexir-format {hexir_format.__version__}\nnumpy {np.__version__}")


def selftest(device_name: str, out: TextIO) -> int:
    """Allocate 32 bytes, write four doubles, wait, read them back and compare."""
    device = hal.create_device(device_name)
    try:
        print(f"device        : {device.name}", file=out)
        buffer = device.allocate(SELFTEST_VALUES.nbytes)
        device.write(buffer, SELFTEST_VALUES)
        device.wait()
        back = device.read(buffer).view(np.float64)
        device.release(buffer)
    finally:
        device.close()
    ok = np.array_equal(back, SELFTEST_VALUES)
    print(f"hal roundtrip : {'ok' if ok else 'MISMATCH'} ({SELFTEST_VALUES.nbytes} bytes)",
          file=out)
    return 0 if ok else 1


def banner(module: Module, entry: str, out: TextIO) -> None:
    print(f"module        : {module.path}", file=out)
    print(f"version       : {module.version}", file=out)
    print(f"sections      : {len(module.layout.sections)}", file=out)
    for i, s in enumerate(module.layout.sections):
        print(f"  [{i}] {s.name:<12} offset={s.offset:<10} size={s.size}", file=out)
    for device in module.devices_used(entry):
        threads = f", {module.cpu_threads} thread{'s' * (module.cpu_threads != 1)}" \
            if device.kind is Device.CPU else ""
        code = module.cpu_code(entry) if device.kind is Device.CPU else None
        print(f"device        : {device.name}{threads}{f', host code {code}' if code else ''}",
              file=out)
    print("--", file=out)


def print_rows(array: np.ndarray, out: TextIO) -> None:
    """A PRINT: each value followed by a space, one line per row; a float as C's `%f`, an
    integer as `%d`, an i1 as 1 or 0 (what `--input` reads back)."""
    text = (lambda v: f"{float(v):f} ") if array.dtype.kind == "f" else (lambda v: f"{int(v)} ")
    for row in array:
        out.write("".join(map(text, row)) + "\n")
    out.flush()


def print_result(index: int, name: str | None, array: np.ndarray, out: TextIO) -> None:
    """A result numpy-style, after its index, its name (when the module names it) and type;
    i1 values as 1 and 0, as PRINT writes them; strings quoted and escaped as Python writes
    them (`['MONDAY' 'TUESDAY']`), so one holding a newline stays on its line."""
    dtype = DType.STRING if array.dtype.kind == "U" else DType.from_name(array.dtype.name)
    shape = "x".join([*map(str, array.shape), str(dtype)])
    print(f"result[{index}]{f' {name}' if name else ''}: {shape}", file=out)
    print(np.array2string(array, threshold=1000, edgeitems=3,
                          formatter={"bool": lambda v: str(int(v))}), file=out)


def benchmark(module: Module, entry: str, inputs: list[np.ndarray | DevicePointer], calls: int,
              out: TextIO) -> int:
    """Time `calls` calls after as many warm-up calls (up to 10), like iree-benchmark-module:
    each call whole (inputs bound, kernels run, results read back), PRINTs not shown."""
    for _ in range(min(calls, 10)):
        module.execute(entry, inputs)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        module.execute(entry, inputs)
        times.append(time.perf_counter() - start)
    times.sort()
    commands = len(module.entry_points[entry]._plan.commands)
    us = [t * 1e6 for t in (times[0], times[len(times) // 2], times[-1])]
    print(f"benchmark     : {entry}, {calls} calls after {min(calls, 10)} warm-up, {commands} "
          f"commands, {module.cpu_threads} cpu thread{'s' * (module.cpu_threads != 1)}",
          file=out)
    print(f"per call      : min {us[0]:.1f} us, median {us[1]:.1f} us, max {us[2]:.1f} us",
          file=out)
    return 0


def run_module(opts: Options, out: TextIO, err: TextIO) -> int:
    try:
        given = [parse_input(text) for text in opts.inputs]
    except InputError as e:
        raise UsageError(str(e)) from None
    if opts.output is not None:
        output_path(opts.output)
    try:
        assert opts.path is not None, "parse_args gives a path unless --help/--version/--selftest"
        module = Module(opts.path, opts.device, cuda_graphs=opts.cuda_graphs)
    except ValidationError as e:
        raise HexirError(f"cannot load '{opts.path}': invalid module: {e}") from None
    with module:
        if any(g.name == opts.entry for g in module.generations):
            return run_generation(module, opts, given, out, err)
        try:
            entry = module.prepare(opts.entry)
        except EntryNotFound as e:
            raise HexirError(f"{opts.entry} failed: not found: {e}") from None
        if opts.device == "cuda" and all(d.kind is not Device.CUDA
                                         for d in module.devices_used(opts.entry)):
            raise HexirError(f"--device=cuda: '{opts.path}' has no cuda kernels (its entry "
                             f"{opts.entry} runs on the cpu alone); compile it with "
                             "-placement=cuda (or -placement=OP=cuda) to run on the GPU, or "
                             "leave out --device=cuda")
        positional, named = gather(given, entry.signature.input_names)
        inputs = entry.check_inputs(*positional, **named)  # every refusal before the banner
        if opts.output is not None and not entry.signature.outputs:
            raise HexirError(f"--output={opts.output}: {opts.entry} returns nothing, so there "
                             "is nothing to write")
        if opts.benchmark:
            return benchmark(module, opts.entry, inputs, opts.benchmark, out)
        if opts.profile:
            print(module.profile(opts.entry, *inputs, calls=opts.profile), file=out)
            return 0
        if not opts.quiet:
            banner(module, opts.entry, err)
        result = module.execute(opts.entry, inputs, on_print=lambda a: print_rows(a, out))
    if opts.output is not None:
        write_outputs(opts.output, result.results)
    else:
        names = result.output_names or (None,) * len(result.outputs)
        for i, (name, array) in enumerate(zip(names, result.outputs, strict=True)):
            print_result(i, name, array, out)
    return 0


#: A generate entry point's inputs, in order, and its one result.
GENERATE_INPUTS = ("input_ids", "max_new_tokens")
GENERATE_OUTPUT = "sequences"


def run_generation(module: Module, opts: Options, given: list, out: TextIO,
                   err: TextIO) -> int:
    """`--entry=` a generate entry point: its inputs `input_ids` and `max_new_tokens` (by
    name or in that order), its result `sequences` (the prompt and the new tokens)."""
    if opts.benchmark or opts.profile:
        flag = "--benchmark" if opts.benchmark else "--profile"
        step = module.generation_step(opts.entry)
        raise HexirError(f"{flag} times one call of an entry point's kernels; {opts.entry} is a "
                         f"decode loop: time its step (--entry={step}) or the loop with "
                         "bench/generate.py")
    positional, named = gather(given, GENERATE_INPUTS)
    if stray := [n for n in named if n not in GENERATE_INPUTS]:
        raise InputError(f"{opts.entry} has no input '{stray[0]}' (its inputs: "
                         f"{', '.join(GENERATE_INPUTS)})")
    if len(positional) > len(GENERATE_INPUTS) - len(named):
        raise InputError(f"{opts.entry} takes {len(GENERATE_INPUTS)} inputs "
                         f"({', '.join(GENERATE_INPUTS)}); got {len(positional) + len(named)}")
    values = dict(zip([n for n in GENERATE_INPUTS if n not in named], positional,
                      strict=False)) | named
    if missing := [n for n in GENERATE_INPUTS if n not in values]:
        raise InputError(f"{opts.entry} needs input '{missing[0]}' (--input={missing[0]}=...)")
    if not opts.quiet:
        banner(module, module.generation_step(opts.entry), err)
        loop = next(g for g in module.generations if g.name == opts.entry)
        print(f"generate      : {loop}", file=err)
    sequences = module.generate(values["input_ids"], values["max_new_tokens"],
                                entry=opts.entry)
    if opts.output is not None:
        write_outputs(opts.output, {GENERATE_OUTPUT: sequences})
    else:
        print_result(0, GENERATE_OUTPUT, sequences, out)
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    terminate_as_interrupt()
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as e:
        print(f"{PROG}: {e}", file=err)
        return 2
    try:
        if opts.help or opts.version:
            print(USAGE if opts.help else versions(), file=out)
            return 0
        if opts.selftest:
            return selftest(opts.device, out)
        return run_module(opts, out, err)
    except UsageError as e:
        print(f"{PROG}: {e}", file=err)
        return 2
    except HexirError as e:
        out.flush()
        prefix = "hal selftest failed: " if opts.selftest else ""
        print(f"{PROG}: {prefix}{e}", file=err)
        return 1
    except MemoryError:  # anywhere: the module's buffers, an input, a result's text
        out.flush()
        what = "running the HAL selftest" if opts.selftest else f"running '{opts.path}'"
        print(f"{PROG}: out of memory {what}", file=err)
        return 1
    except BrokenPipeError:  # `hexir-run m.hxb | head`: stop quietly, like the C runtime
        if out is sys.stdout:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=err)
        return 130
