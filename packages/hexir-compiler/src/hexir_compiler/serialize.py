"""The serializer: a module at mlir-llvm -> a `.hxb` model.

Each entry `func.func` becomes an entry point: a flat list of commands over numbered buffers
(slots). Each kernel a `hexir.call_tir` names becomes an executable with its code: a cpu
kernel (an `llvm.func`) the host image `target.host` compiles for it, a cuda kernel (an NVVM
`gpu.module`) the device image `target.cuda` makes. An executable's argument types are those
of its call (the kernel itself, by now, takes bare pointers).

Per op of a function's body, in order:
- function argument i -> a cpu slot, `INPUT(slot, i)` (inputs arrive from the host);
- `hexir.constant` with users -> its elements (splats expanded) appended to RODATA at an
  8-aligned offset, `CONST(slot, offset, bytes)`; an unused constant is skipped;
- `hexir.call_tir` -> `ALLOC(dst, bytes)`, `DISPATCH(executable, inputs..., dst)`;
- `hexir.transfer` -> `COPY(dst, src)`, dst on the transfer's destination device;
- `hexir.print` -> `PRINT(slot, rows, cols)` (rows x cols = all elements, last dim as cols);
- `func.return` -> `OUTPUT(slot, i)` per returned value (the format writes the `END`);
- `hexir.string_normalizer` (an op the runtime computes: a library kernel) -> its stopwords
  as a constant of the module's strings (`Module.strings`; a string element is a handle,
  its index there), `ALLOC(dst, bytes)` and a `DISPATCH` of a `library` executable whose
  params are the op's attributes.

Each function's intermediates (ALLOC and COPY destinations) are then placed in one arena per
device by liveness (`hexir_format.plan.assign`): the module's memory plan.

Constants are stored once per distinct value (`Rodata`). Every cpu kernel carrying a host
image makes the module version 5 (`hexir_format`'s `minimum_version`); a program lowered for
several host levels is one version 6 module whose entry points are a variant per level
(`Variants`). The format still reads and writes versions 3 and 4.
"""

from __future__ import annotations

import contextlib
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

import hexir_format as hf
from hexir_compiler import packing, symbolic
from hexir_compiler.dialects.hexir import CASE_CHANGE_ACTIONS
from hexir_compiler.dialects.hextir import SYMBOLS
from hexir_compiler.element_types import STRING
from hexir_compiler.errors import CompileError
from hexir_compiler.frontend import onnx_generate
from hexir_compiler.mlir import ir
from hexir_compiler.target import cuda, host, host_codegen
from hexir_compiler.transforms.hextir_to_loops import is_kernel
from hexir_format import library, plan
from hexir_format.model import Symbol


class SerializeError(CompileError):
    """An op the host program cannot express; `location` says where."""


def serialize(module: ir.Module, target: str | None = None, cpu: str | None = None,
              rodata: Rodata | None = None) -> hf.Module:
    """The `.hxb` model of `module`; `target` is the CUDA architecture (e.g. "sm_90"), `cpu`
    the host CPU level (e.g. "x86-64-v3"). With `rodata` (shared by the levels of one
    module), the constants go there and the model's own rodata is left empty."""
    return prepare(module, target, cpu, rodata)()


def prepare(module: ir.Module, target: str | None = None, cpu: str | None = None,
            rodata: Rodata | None = None,
            codegen: host_codegen.Codegen | None = None) -> Callable[[], hf.Module]:
    """`serialize`, in two steps: everything that reads `module` now (the host kernels'
    code handed to `codegen`, which may make it in other processes), the model when the
    returned function is called (once that code is made)."""
    entries = [op for op in _ops(module, "func.func") if not is_kernel(op)]
    if not entries:
        raise CompileError("the module has no func.func, so there is no entry point to write")
    symbols = _symbols(module, entries)
    names = [s.name for s in symbols]
    executables, index = _executables(module, entries, target, cpu, codegen, names)
    writer = _Writer(index, rodata or Rodata())
    functions = [writer.function(op) for op in entries]
    data = b"" if rodata else writer.rodata.join()

    def model() -> hf.Module:
        exes = [exe() for exe in executables] + writer.library
        # a dynamic module's buffers are planned by the runtime, for each call's sizes
        placements = () if symbols else _memory_plan(functions, writer.slots, exes)
        return hf.Module(5, tuple(functions), data, tuple(exes), tuple(writer.slots),
                         placements=placements, symbols=symbols, strings=tuple(writer.strings))
    return model


#: The sizes a symbol may take where the model does not say (a dimension of at least 1; the
#: upper bound keeps every size a kernel computes from it far inside 64 bits).
DEFAULT_RANGE = (1, 2**31 - 1)


def _symbols(module: ir.Module, entries: list[ir.Operation]) -> tuple[Symbol, ...]:
    """The module's symbols, by name: every one an entry point's types or a kernel read,
    each with the range the entry points hold it to (`hexir.ranges`, the importer's
    `require`), else DEFAULT_RANGE."""
    names: set[str] = set()
    ranges: dict[str, tuple[int, int]] = {}
    for entry in entries:
        ftype = ir.FunctionType(ir.TypeAttr(entry.attributes["function_type"]).value)
        for t in (*ftype.inputs, *ftype.results):
            if isinstance(t, ir.RankedTensorType):
                names |= symbolic.symbols(symbolic.shape_of(t))
        if "hexir.ranges" in entry.attributes:
            for named in ir.DictAttr(entry.attributes["hexir.ranges"]):
                # (an explicit range is the symbol's own: `-input-shape=past:0..256` lets
                # `past` be 0, a prefill's empty cache)
                lo, hi = ranges.get(named.name, (0, DEFAULT_RANGE[1]))
                low, high = ir.DenseI64ArrayAttr(named.attr)
                ranges[named.name] = (max(lo, low), min(hi, high))
    for view in module.body.operations:
        if is_kernel(view.operation) and SYMBOLS in view.operation.attributes:
            names |= {ir.StringAttr(n).value for n in view.operation.attributes[SYMBOLS]}
    return tuple(Symbol(n, *ranges.get(n, DEFAULT_RANGE)) for n in sorted(names))


def _bytes(data: np.ndarray) -> memoryview:
    """`data`'s bytes (no copy where it is C-contiguous)."""
    return np.ascontiguousarray(data).data.cast("B") if data.size else memoryview(b"")


@dataclass(frozen=True)
class Packed:
    """A packed constant's bytes (`packing`), made when they are written and dropped after:
    held as RODATA's pieces until the `.hxb` is written, the packed copies of a big model's
    weights would double its peak memory again."""

    value: ir.Attribute  # the weight as given (its attribute lives as long as the context)
    layout: tuple[str, tuple[int, ...]]
    dtype: np.dtype
    nbytes: int

    def __call__(self) -> memoryview:
        return _bytes(packing.pack(*self.layout, packing.elements(self.value, self.dtype)))


@dataclass
class Rodata:
    """A module's constants, each distinct value stored once: a constant equal byte for byte
    to one already written (a tied weight; the weights every level's program shares) takes
    its offset. Each value starts at an 8-byte boundary. The pieces are mostly views of the
    constants' attributes, joined once at the end (appending to one buffer copied the weights
    up to twice more), or written one by one (`pieces`) where the `.hxb` goes to a file; a
    packed constant's piece makes its bytes as it is written (`Packed`).

    Values are found by length and CRC-32 (four times as fast as a cryptographic hash over a
    big model's weights), and a match is compared byte for byte; a packed value by its
    attribute and layout (MLIR uniques attributes: equal weights are one attribute)."""

    pieces: list = field(default_factory=list)
    size: int = 0
    seen: dict[tuple[int, int], list[tuple[int, memoryview]]] = field(default_factory=dict)
    #: offsets by attribute (a packed value's: with its layout): MLIR uniques attributes, so
    #: the same weight in every level's program is one attribute, and its bytes need reading
    #: once, not once per level
    known: dict = field(default_factory=dict)

    def add(self, value: memoryview | Packed, key=None) -> int:
        """The offset of `value`'s bytes (a C-contiguous byte view, or a packed constant);
        `key`, where given, the uniqued attribute (and layout) those bytes are the value of
        (a packed constant's is needed: its bytes are not at hand to compare)."""
        if key is not None and key in self.known:
            return self.known[key]
        if isinstance(value, Packed):
            offset = self._append(value, value.nbytes)
        else:
            same = self.seen.setdefault((len(value), zlib.crc32(value)), [])
            bytes_ = np.frombuffer(value, np.uint8)
            found = next((at for at, other in same
                          if np.array_equal(bytes_, np.frombuffer(other, np.uint8))), None)
            offset = self._append(value, len(value)) if found is None else found
            if found is None:
                same.append((offset, value))
        if key is not None:
            self.known[key] = offset
        return offset

    def _append(self, piece: memoryview | Packed, nbytes: int) -> int:
        offset, pad = self.size, -nbytes % 8
        self.pieces += [piece, bytes(pad)]
        self.size += nbytes + pad
        return offset

    def join(self) -> bytes:
        return b"".join(p() if isinstance(p, Packed) else p for p in self.pieces)


@dataclass
class Variants:
    """One program lowered for several host levels, serialized level by level (each level's
    MLIR module can go once it is read; its host code may still be in the making) into one
    version 6 model: every entry point a variant per level, the levels' constants stored
    once (`Rodata`), kernels equal in every field (cuda's, which no level changes) stored
    once."""

    target: str | None = None
    codegen: host_codegen.Codegen | None = None
    rodata: Rodata = field(default_factory=Rodata)
    levels: list[tuple[Callable[[], hf.Module], str]] = field(default_factory=list)

    def add(self, module: ir.Module, cpu: str) -> None:
        """`module` (at mlir-llvm) as the variants for level `cpu`."""
        with _serialize_errors():
            self.levels.append((prepare(module, self.target, cpu, self.rodata, self.codegen),
                                cpu))

    def model(self, rodata: bool = True) -> hf.Module:
        """The model, once every level's host code is made; its rodata joined, or (False)
        left empty for the caller to write from `self.rodata.pieces`."""
        functions: list[hf.Function] = []
        slots: list[hf.Slot] = []
        placements: list[tuple[int, int]] = []
        kernels: dict[hf.Executable, int] = {}
        for prepared, cpu in self.levels:
            with _serialize_errors():
                model = prepared()
            base, level = len(slots), host.level(cpu)
            index = [kernels.setdefault(exe, len(kernels)) for exe in model.executables]
            slots += model.slots
            placements += [(base + slot, offset) for slot, offset in model.placements]
            functions += [replace(f, cpu_level=level, commands=tuple(
                _renumbered(c, base, index) for c in f.commands)) for f in model.functions]
        # (every level's program has the same symbols and strings: one graph's)
        return hf.Module(6, tuple(functions), self.rodata.join() if rodata else b"",
                         tuple(kernels), tuple(slots), placements=tuple(placements),
                         symbols=model.symbols, strings=model.strings)


#: The operands that name a slot, by name (DISPATCH's slots come after its named operands).
_SLOT_OPERANDS = frozenset({"slot", "dst", "src"})


def _renumbered(command: hf.Command, base: int, kernels: list[int]) -> hf.Command:
    """`command` with its slots moved up by `base` and its executable renumbered."""
    names = hf.OPERAND_NAMES[command.op]
    operands = [base + v if n in _SLOT_OPERANDS else kernels[v]  # type: ignore[index]
                if n == "executable" else v  # (an executable's index is an int)
                for n, v in zip(names, command.operands, strict=False)]
    operands += [base + v for v in command.operands[len(names):]]
    return hf.Command(command.op, tuple(operands))


def _memory_plan(functions: list[hf.Function], slots: list[hf.Slot],
                 executables: list[hf.Executable]) -> tuple:
    """Every intermediate's place in its device's arena, by liveness (`hexir_format.plan`):
    buffers whose lifetimes do not overlap share bytes, and an element-wise result may take
    the bytes of an input that dies there."""
    types = {i: s.type for i, s in enumerate(slots)}
    devices = {i: s.device for i, s in enumerate(slots)}
    kinds = [e.kind for e in executables]
    offsets: dict[int, int] = {}
    for function in functions:
        offsets |= plan.assign(function.commands, types, devices, kinds)
    return tuple(sorted(offsets.items()))


def to_model(module: ir.Module, target: str | None = None, cpu: str | None = None,
             codegen: host_codegen.Codegen | None = None,
             rodata: Rodata | None = None) -> hf.Module:
    """The `.hxb` model of `module` at the version it needs (`build` makes its bytes; with
    `rodata`, the constants go there and the model's own is left empty); every failure here
    is a `SerializeError`."""
    with _serialize_errors():
        model = prepare(module, target, cpu, rodata, codegen)()
        return replace(model, version=hf.minimum_version(model))


def with_generations(model: hf.Module, module: ir.Module) -> hf.Module:
    """`model` with the generate entry point `module` records (`hexir.generate`, made by
    `frontend.onnx_generate`): its roles' names resolved to the step's input and output
    indices; version 6, which holds it. The validator checks the rest when the module is
    loaded (`hexir_format.generation`)."""
    if onnx_generate.ATTRIBUTE not in module.operation.attributes:
        return model
    found = ir.DictAttr(module.operation.attributes[onnx_generate.ATTRIBUTE])

    def text(key: str) -> str:
        return ir.StringAttr(found[key]).value

    step = model.function(text("step"))
    if step is None or not step.inputs or not step.outputs:
        raise SerializeError(f"{onnx_generate.ATTRIBUTE}: the step '{text('step')}' is not an "
                             "entry point that names its inputs and outputs")

    def index(names: tuple[str, ...], name: str, side: str) -> int:
        if name not in names:
            raise SerializeError(f"{onnx_generate.ATTRIBUTE}: the step has no {side} '{name}'")
        return names.index(name)

    pairs = [ir.StringAttr(a).value for a in ir.ArrayAttr(found["cache"])]
    cache = tuple((index(step.inputs, past, "input"), index(step.outputs, present, "output"))
                  for past, present in zip(pairs[::2], pairs[1::2], strict=True))
    generation = hf.Generation(
        text("name"), step.name, index(step.inputs, text("ids"), "input"),
        index(step.inputs, text("mask"), "input"),
        index(step.inputs, text("positions"), "input"),
        index(step.outputs, text("logits"), "output"), cache,
        ir.IntegerAttr(found["eos"]).value, ir.IntegerAttr(found["max_length"]).value)
    return replace(model, generations=(generation,), version=max(model.version, 6))


def build(model: hf.Module) -> bytes:
    """The bytes of `model` (from `to_model`). It needs no MLIR, so the caller can release the
    module's context first: its attributes hold every weight, twice where a matmul's are
    packed, and the format's writer makes two more copies of the read-only data."""
    with _serialize_errors():
        return hf.build(model)


def write(model: hf.Module, rodata: Rodata, out) -> None:
    """`model` (its rodata empty) to the binary file `out`, the constants written from
    `rodata`'s pieces, views of their attributes or packed weights made one at a time as
    they are written: the weights are never copied into one buffer (the caller keeps the
    MLIR context, which owns them, until this returns)."""
    with _serialize_errors():
        hf.write(model, out, rodata.pieces)


def to_bytes(module: ir.Module, target: str | None = None, cpu: str | None = None) -> bytes:
    """The `.hxb` bytes of `module` (one level's program); every failure here is a
    `SerializeError`."""
    return build(to_model(module, target, cpu))


@contextlib.contextmanager
def _serialize_errors():
    """A format error as a `SerializeError` (with the op's location where it names one)."""
    try:
        yield
    except SerializeError:
        raise
    except hf.HexirError as err:  # device code, or a limit of the format
        location = getattr(err, "location", None) or getattr(
            getattr(err, "op", None), "location", None
        )
        raise SerializeError(str(err), location) from err


def _ops(module: ir.Module, name: str) -> list[ir.Operation]:
    return [op.operation for op in module.body.operations if op.operation.name == name]


def _attr_str(op: ir.Operation, name: str, default: str | None = None) -> str:
    """The string attribute `name` of `op`, or `default` where it has none (KeyError where it
    has none and no default is given: an attribute the op always carries)."""
    if name in op.attributes or default is None:
        return ir.StringAttr(op.attributes[name]).value
    return default


def tensor_type(t: ir.Type) -> hf.TensorType:
    """The format's type for a tensor (static or symbolic) or a static memref."""
    shaped = ir.ShapedType(t)
    try:
        element = str(shaped.element_type)
        dtype = hf.DType.STRING if element == STRING else hf.DType.from_name(element)
    except ValueError as err:
        raise CompileError(str(err)) from None
    if len(shaped.shape) > hf.MAX_RANK:
        raise CompileError(
            f"{t} has rank {len(shaped.shape)}; a .hxb holds at most rank {hf.MAX_RANK}"
        )
    if isinstance(t, ir.RankedTensorType):
        return hf.TensorType(dtype, symbolic.shape_of(t))
    return hf.TensorType(dtype, tuple(shaped.shape))


def _executables(module: ir.Module, entries: list[ir.Operation], target: str | None,
                 cpu: str | None, codegen: host_codegen.Codegen | None,
                 symbols: list[str]):
    """Every kernel a call names, in module order (each a function giving its executable
    once its code is made), and its index by name."""
    calls = _call_types(entries)
    kernels = [op for op in (v.operation for v in module.body.operations)
               if op.name in ("llvm.func", "gpu.module") and is_kernel(op)
               and _attr_str(op, "sym_name") in calls]
    unlowered = next((op for op in (v.operation for v in module.body.operations)
                      if op.name in ("hextir.prim_func", "func.func") and is_kernel(op)), None)
    if unlowered is not None:
        raise SerializeError("kernel is not lowered to LLVM; the serializer takes a module at "
                             "mlir-llvm", unlowered.location)
    # a host kernel's image is to come (a function), a cuda kernel's is made here
    images: dict[str, Callable[[], host.HostImage] | cuda.DeviceImage] = dict(
        host.submit_kernels(module, cpu, codegen))
    if any(_attr_str(op, "device", "cpu") == "cuda" for op in kernels):
        images.update(cuda.compile_kernels(module, target))
    executables = [_executable(op, calls[_attr_str(op, "sym_name")], images, symbols)
                   for op in kernels]
    return executables, {_attr_str(op, "sym_name"): i for i, op in enumerate(kernels)}
def _call_types(entries: list[ir.Operation]) -> dict[str, list[ir.Type]]:
    """callee name -> the tensor types of its buffers (inputs, then the destination)."""
    found: dict[str, list[ir.Type]] = {}

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "hexir.call_tir":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            found.setdefault(callee, [*(v.type for v in op.operands), op.results[0].type])
        return ir.WalkResult.ADVANCE

    for entry in entries:
        entry.walk(visit)
    return found


def _executable(kernel: ir.Operation, types: list[ir.Type], images: dict,
                symbols: list[str]) -> Callable[[], hf.Executable]:
    """The executable of `kernel`, checked now, given (with its image) when called."""
    name = _attr_str(kernel, "sym_name")
    if len(name.encode()) > hf.MAX_NAME:
        raise SerializeError(f"kernel name '{name}' is longer than {hf.MAX_NAME} bytes",
                             kernel.location)
    pending = images.get(name)
    if pending is None:
        raise SerializeError(f"kernel '{name}' has no code", kernel.location)
    device = hf.Device.from_name(_attr_str(kernel, "device", "cpu"))
    kind = hf.KernelKind[_attr_str(kernel, "hexir.kernel").upper()]
    args = tuple(tensor_type(t) for t in types)
    params = tuple(kernel.attributes["hexir.params"]) if "hexir.params" in kernel.attributes \
        else ()
    # The rule the runtime validates against: never write a module the runtime would refuse.
    problem = hf.signature_problem(kind, args, params)
    if problem:
        raise SerializeError(f"kernel '{name}': {problem}", kernel.location)
    # the values it takes after its buffers: the symbols it names, by their index
    operands = tuple(symbols.index(ir.StringAttr(n).value)
                     for n in kernel.attributes[SYMBOLS]) if SYMBOLS in kernel.attributes \
        else ()

    def executable() -> hf.Executable:
        image = pending() if callable(pending) else pending
        return hf.Executable(
            name, kind, device, args, params, image=image.image, grid=tuple(image.grid),
            block=(1, 1, 1) if device is hf.Device.CPU else tuple(image.block),
            cpu_level=image.level if device is hf.Device.CPU else 0, operands=operands,
        )
    return executable


def _io_names(func: ir.Operation) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The `hexir.name` of every argument and result (an imported model's input and output
    names), or none when not every one is named."""
    names = []
    for key in ("arg_attrs", "res_attrs"):
        entries = ir.ArrayAttr(func.attributes[key]) if key in func.attributes else []
        found = [ir.StringAttr(entry["hexir.name"]).value
                 for entry in map(ir.DictAttr, entries) if "hexir.name" in entry]
        names.append(tuple(found) if found and len(found) == len(entries) else ())
    return names[0], names[1]


@dataclass
class _Writer:
    """Slots, RODATA, strings and commands, shared by every function of the module."""

    executables: dict[str, int]
    rodata: Rodata = field(default_factory=Rodata)
    slots: list[hf.Slot] = field(default_factory=list)
    #: the library kernels' executables, after the compiled ones (each distinct one once)
    library: list[hf.Executable] = field(default_factory=list)
    #: the module's strings, each once; a string element is its index here (a handle)
    strings: dict[str, int] = field(default_factory=dict)

    def new_slot(self, device: str, t: ir.Type | hf.TensorType) -> int:
        self.slots.append(hf.Slot(hf.Device.from_name(device),
                                  t if isinstance(t, hf.TensorType) else tensor_type(t)))
        return len(self.slots) - 1

    def function(self, func: ir.Operation) -> hf.Function:
        name = _attr_str(func, "sym_name")
        if len(name.encode()) > hf.MAX_NAME:
            raise SerializeError(
                f"function name '{name}' is longer than {hf.MAX_NAME} bytes", func.location
            )
        if not len(func.regions[0].blocks):
            raise SerializeError(
                f"function @{name} is a declaration; an entry point needs a body", func.location
            )
        block = func.regions[0].blocks[0]
        slot_of: dict[ir.Value, int] = {}
        commands: list[hf.Command] = []
        for i, arg in enumerate(block.arguments):
            slot_of[arg] = self.new_slot("cpu", arg.type)
            commands.append(hf.Command.input(slot_of[arg], i))
        for view in block.operations:
            commands += self._op(view.operation, slot_of)
        return hf.Function(name, tuple(commands), *_io_names(func))

    def _op(self, op: ir.Operation, slot_of: dict) -> list[hf.Command]:
        name = op.name
        if name == "hexir.constant":
            return self._constant(op, slot_of)
        if name == "hexir.call_tir":
            return self._call(op, slot_of)
        if name == "hexir.transfer":
            src = self._slot(op, op.operands[0], slot_of)
            dst = self._result(op, slot_of, _attr_str(op, "dst"))
            return [hf.Command.copy(dst, src)]
        if name == "hexir.print":
            return [self._print(op, slot_of)]
        if name == "hexir.string_normalizer":
            return self._string_normalizer(op, slot_of)
        if name == "func.return":
            return [
                hf.Command.output(self._slot(op, v, slot_of), i) for i, v in enumerate(op.operands)
            ]
        raise SerializeError("cannot serialize this op into a host program", op.location)

    def _result(self, op: ir.Operation, slot_of: dict, device: str | None = None) -> int:
        device = device or _attr_str(op, "device", "cpu")
        slot = self.new_slot(device, op.results[0].type)
        slot_of[op.results[0]] = slot
        return slot

    def _slot(self, op: ir.Operation, value: ir.Value, slot_of: dict) -> int:
        if value not in slot_of:
            raise SerializeError(
                "operand has no slot; it is not produced by a constant, a "
                "call or a transfer in this function",
                op.location,
            )
        return slot_of[value]

    def _constant(self, op: ir.Operation, slot_of: dict) -> list[hf.Command]:
        if not list(op.results[0].uses):
            return []
        value = op.attributes["value"]
        if not isinstance(value, ir.DenseFPElementsAttr | ir.DenseIntElementsAttr):
            raise SerializeError("expected a dense constant", op.location)
        ttype = tensor_type(op.results[0].type)
        dtype = np.dtype(ttype.dtype.numpy).newbyteorder("<")
        try:
            layout = packing.of(op)
        except packing.PackingError as err:
            raise SerializeError(str(err), op.location) from None
        nbytes = ttype.static_nbytes
        if layout is not None:  # packed as it is written: one packed weight at a time
            offset = self.rodata.add(Packed(value, layout, dtype, nbytes),
                                     (value, op.attributes[packing.ATTRIBUTE]))
        else:
            # The buffer protocol gives the elements (a splat's too, repeated) without a
            # Python loop; a view with a 0 in its shape cannot be cast.
            offset = self.rodata.add(_bytes(packing.elements(value, dtype)), value)
        slot = self._result(op, slot_of)
        return [hf.Command.const(slot, offset, nbytes)]

    def _call(self, op: ir.Operation, slot_of: dict) -> list[hf.Command]:
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        if callee not in self.executables:
            raise SerializeError("callee has no executable entry", op.location)
        args = [self._slot(op, v, slot_of) for v in op.operands]
        dst = self._result(op, slot_of)
        nbytes = tensor_type(op.results[0].type).nbytes
        return [
            hf.Command.alloc(dst, nbytes),
            hf.Command.dispatch(self.executables[callee], [*args, dst]),
        ]

    def _string_normalizer(self, op: ir.Operation, slot_of: dict) -> list[hf.Command]:
        """The stopwords as a constant (handles of the module's strings), then the library
        kernel `string_normalizer` on (input, stopwords), its params the case change (its
        index in CASE_CHANGE_ACTIONS) and the case sensitivity."""
        words = [ir.StringAttr(w).value for w in ir.ArrayAttr(op.attributes["stopwords"])]
        handles = np.array([self.strings.setdefault(w, len(self.strings)) for w in words],
                           "<i8")
        stopwords = hf.TensorType(hf.DType.STRING, (len(words),))
        const = self.new_slot("cpu", stopwords)
        offset = self.rodata.add(handles.data.cast("B") if words else memoryview(b""))
        x = self._slot(op, op.operands[0], slot_of)
        args = (tensor_type(op.operands[0].type), stopwords, tensor_type(op.results[0].type))
        action = CASE_CHANGE_ACTIONS.index(_attr_str(op, "case_change_action"))
        params = (float(action), float(ir.BoolAttr(op.attributes["is_case_sensitive"]).value))
        return [hf.Command.const(const, offset, handles.nbytes),
                *self._library(op, "string_normalizer", args, params, [x, const], slot_of)]

    def _library(self, op: ir.Operation, name: str, args: tuple[hf.TensorType, ...],
                 params: tuple[float, ...], inputs: list[int], slot_of: dict
                 ) -> list[hf.Command]:
        """ALLOC and DISPATCH of the runtime's library kernel `name` (`hexir_format.library`)
        on the slots `inputs`, into `op`'s result."""
        problem = library.problem(name, args, params)
        if problem:
            raise SerializeError(f"library kernel '{name}': {problem}", op.location)
        exe = hf.Executable(name, hf.KernelKind.LIBRARY, hf.Device.CPU, args, params)
        if exe not in self.library:
            self.library.append(exe)
        dst = self._result(op, slot_of)
        index = len(self.executables) + self.library.index(exe)
        return [hf.Command.alloc(dst, args[-1].nbytes), hf.Command.dispatch(index,
                                                                            [*inputs, dst])]

    def _print(self, op: ir.Operation, slot_of: dict) -> hf.Command:
        slot = self._slot(op, op.operands[0], slot_of)
        t = tensor_type(op.operands[0].type)
        if not t.is_static:
            raise SerializeError("hexir.print takes a tensor of static shape (PRINT's rows and "
                                 f"columns are numbers), found {op.operands[0].type}",
                                 op.location)
        shape = t.static_shape
        cols = shape[-1] if shape else 1
        rows = math.prod(shape[:-1]) if shape else 1
        return hf.Command.print(slot, rows, cols)
