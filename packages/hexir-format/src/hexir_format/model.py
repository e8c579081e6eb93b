"""The typed model of a `.hxb` module: what the writer takes and the reader returns.

Frozen dataclasses, so nothing outside this package handles construct's raw containers.
Payloads (rodata, device images) may be `bytes` or `memoryview` slices of a mapping; the
model compares them by content.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from hexir_format import dims
from hexir_format.dims import Dim

MAGIC = b"HEXIRMOD"
VERSIONS = (3, 4, 5, 6)
LATEST_VERSION = 6
MAX_RANK = 6
#: x86-64 psABI levels a host image is compiled for, by the number a v5 executable (and a v6
#: entry point's variant) records.
CPU_LEVELS = {1: "x86-64", 2: "x86-64-v2", 3: "x86-64-v3", 4: "x86-64-v4"}
NAME_BYTES = 32
#: The longest symbol or kernel name, in UTF-8 bytes: NUL-terminated in a NAME_BYTES field.
MAX_NAME = NAME_BYTES - 1
#: The longest input or output name (version 5's names section), in UTF-8 bytes.
MAX_IO_NAME = 4096
#: The most bytes an array may span (numpy's limit), counting a zero dimension as 1.
MAX_BYTES = 2**63 - 1
#: CUDA's launch limits (every architecture since sm_30): threads per block, and the grid's
#: and the block's extent per dimension (x, y, z). The validator refuses a launch outside
#: them; the compiler never emits one.
MAX_BLOCK_THREADS = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
#: The largest value a size symbol's range may reach (`Symbol.hi`).
MAX_SYMBOL = 2**62


class Device(IntEnum):
    CPU = 0
    CUDA = 1

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def from_name(cls, name: str) -> Device:
        """`cpu`, `cuda` or its alias `gpu`."""
        key = {"gpu": "cuda"}.get(name, name)
        try:
            return cls[key.upper()]
        except KeyError:
            raise ValueError(f"'{name}' is not a device; expected cpu or cuda") from None


class DType(IntEnum):
    """Element types; the integer and boolean ones (3-5) are version 5's. A bool is one byte,
    0 or 1 (numpy's `bool`); kernels read any nonzero byte as true.

    STRING (version 6) is a string tensor (ONNX's `string`). Its elements in memory are int64
    *handles*: handle h in [0, len(Module.strings)) names the module's h-th string, and the
    runtime numbers a call's own strings (its string inputs, what a library kernel makes)
    after those. So a string slot, an ALLOC or a CONST of handles is sized like an i64 one
    (`itemsize` 8, `storage` int64); only library kernels read or write strings."""

    F32 = 1
    F64 = 2
    I32 = 3
    I64 = 4
    BOOL = 5
    STRING = 6

    def __str__(self) -> str:
        return {DType.BOOL: "i1", DType.STRING: "str"}.get(self, self.name.lower())

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def numpy(self) -> str:
        """The numpy dtype name, so callers need not import numpy to compare."""
        return _NUMPY[self]

    @property
    def storage(self) -> str:
        """The numpy dtype name of one element in memory: `numpy`, but int64 (a handle) for
        STRING, whose `numpy` is `str` (what a caller passes and gets back)."""
        return "int64" if self is DType.STRING else _NUMPY[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.F32, DType.F64)

    @classmethod
    def from_name(cls, name: str) -> DType:
        """`f32`, `f64`, `i32`, `i64`, `i1` (as MLIR writes them) or a numpy name."""
        for dtype in cls:
            if name in (str(dtype), dtype.numpy):
                return dtype
        raise ValueError(f"'{name}' is not an element type; expected one of "
                         f"{', '.join(map(str, cls))}")


_ITEMSIZE = {DType.F32: 4, DType.F64: 8, DType.I32: 4, DType.I64: 8, DType.BOOL: 1,
             DType.STRING: 8}
_NUMPY = {DType.F32: "float32", DType.F64: "float64", DType.I32: "int32", DType.I64: "int64",
          DType.BOOL: "bool", DType.STRING: "str"}
#: The element types before version 5.
V4_DTYPES = frozenset({DType.F32, DType.F64})
#: The element types before version 6.
V5_DTYPES = frozenset({*V4_DTYPES, DType.I32, DType.I64, DType.BOOL})


class SectionKind(IntEnum):
    SYMBOLS = 1
    PROGRAM = 2
    RODATA = 3
    EXECUTABLES = 4
    SLOTS = 5
    NAMES = 6  # version 5, optional: the names of entry points' inputs and outputs
    PLAN = 7  # version 5, optional: each intermediate's offset in its device's arena
    SIZES = 8  # version 6, optional: a dynamic module's size symbols and expression programs
    STRINGS = 9  # version 6, optional: the module's string table (`Module.strings`)
    GENERATE = 10  # version 6, optional: entry points that run a decode loop (`Generation`)

    def __str__(self) -> str:
        return self.name.lower()


class Op(IntEnum):
    END = 0
    ALLOC = 1
    CONST = 2
    DISPATCH = 3
    PRINT = 4
    INPUT = 5
    OUTPUT = 6
    COPY = 7

    def __str__(self) -> str:
        return self.name.lower()


# Named operands of each command, in order; DISPATCH's slots follow its named operands.
OPERAND_NAMES: dict[Op, tuple[str, ...]] = {
    Op.END: (),
    Op.ALLOC: ("slot", "bytes"),
    Op.CONST: ("slot", "rodata_offset", "bytes"),
    Op.DISPATCH: ("executable", "argc"),
    Op.PRINT: ("slot", "rows", "cols"),
    Op.INPUT: ("slot", "index"),
    Op.OUTPUT: ("slot", "index"),
    Op.COPY: ("dst", "src"),
}
V3_OPS = frozenset({Op.END, Op.ALLOC, Op.CONST, Op.DISPATCH, Op.PRINT})
# (op, operand name) -> its position: one dict lookup per `command.slot` on the hot path.
_OPERAND_AT = {(op, name): i for op, names in OPERAND_NAMES.items()
               for i, name in enumerate(names)}


class KernelKind(IntEnum):
    MATMUL = 1
    ADD = 2
    RELU = 3
    SUB = 4
    MUL = 5
    DIV = 6
    SIGMOID = 7
    TANH = 8
    EXP = 9
    SQRT = 10
    NEG = 11
    GELU = 12
    SOFTMAX = 13
    LAYER_NORM = 14
    TRANSPOSE = 15
    RESHAPE = 16
    REDUCE_SUM = 17
    REDUCE_MEAN = 18
    REDUCE_MAX = 19
    # Any other element-wise op (version 5: compiled kernels only): inputs broadcast to the
    # destination, the computation is the kernel's code. A new element-wise op needs no kind.
    MAP = 20
    # Any other kernel (version 5, compiled only): arguments of the types it declares, inputs
    # then the destination; what it computes is its code (concat, gather, conv, pooling, ...).
    GENERIC = 21
    # A function of the runtime's own library (version 6, cpu, no image), named by the
    # executable's name (`hexir_format.library`): what no compiled kernel computes, such as
    # the string functions. Its arguments and params are what the library's signature says.
    LIBRARY = 22

    def __str__(self) -> str:
        return self.name.lower()

    @property
    def arity(self) -> int | None:
        """Number of inputs (the destination comes after them); None: any number >= 1."""
        if self in (KernelKind.MAP, KernelKind.GENERIC, KernelKind.LIBRARY):
            return None
        if self in BINARY_KINDS or self is KernelKind.MATMUL:
            return 2
        return 3 if self is KernelKind.LAYER_NORM else 1

    @property
    def least_args(self) -> int:
        """The fewest arguments (inputs and the destination) a kernel of the kind takes: a
        generic kernel may have no inputs (it computes its destination from the call's sizes:
        `hexir.sizes`), a map one, a library function one (its signature says more)."""
        if self in (KernelKind.GENERIC, KernelKind.LIBRARY):
            return 1
        return 2 if self.arity is None else self.arity + 1

    def takes(self, argc: int) -> bool:
        """Whether `argc` arguments (inputs and the destination) fit the kind."""
        return argc >= self.least_args if self.arity is None else argc == self.arity + 1


BINARY_KINDS = frozenset({KernelKind.ADD, KernelKind.SUB, KernelKind.MUL, KernelKind.DIV})
#: Kinds whose computation is only their compiled code: any element types, an image required.
CODE_KINDS = frozenset({KernelKind.MAP, KernelKind.GENERIC})
V3_KINDS = frozenset({KernelKind.MATMUL, KernelKind.ADD, KernelKind.RELU})


@dataclass(frozen=True)
class Symbol:
    """A size symbol of a dynamic module (version 6): a name its dimensions use and the
    inclusive range of values a call may give it, 0 <= lo <= hi <= MAX_SYMBOL."""

    name: str
    lo: int
    hi: int

    def __str__(self) -> str:
        return f"{self.name} in {self.lo}..{self.hi}"


def render_dim(d: Dim) -> str:
    """A dimension as a tensor type spells it: `16`, `batch`, or an expression (or a symbol
    whose name holds an `x`, which separates dimensions) in parentheses: `(past + seq)`."""
    if isinstance(d, int):
        return str(d)
    text = dims.render(d)
    return text if text.isidentifier() and "x" not in text else f"({text})"


@dataclass(frozen=True)
class TensorType:
    """An element type and a shape; a dimension is an int, or (version 6, a dynamic module)
    a `dims.Expr` over the module's size symbols. A constant expression is always an int
    (the `dims` algebra folds it), so a static type compares equal however it was built."""

    dtype: DType
    shape: tuple[Dim, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(type(d) is int for d in self.shape)

    @property
    def size(self) -> Dim:
        if self.is_static:
            return math.prod(self.static_shape)
        total: Dim = 1
        for d in self.shape:
            total = dims.mul(total, d)
        return total

    @property
    def nbytes(self) -> Dim:
        size = self.size
        return size * self.dtype.itemsize if isinstance(size, int) else \
            dims.mul(size, self.dtype.itemsize)

    @property
    def static_shape(self) -> tuple[int, ...]:
        """The shape of a static type, as ints: for what only ever sees static types (the
        memory plan, the runtime once a call's sizes are bound); a ValueError otherwise."""
        if not self.is_static:
            raise ValueError(f"{self} is not a static type")
        return self.shape  # type: ignore[return-value]  # every dimension an int, checked

    @property
    def static_nbytes(self) -> int:
        """`nbytes` of a static type (as `static_shape`)."""
        return math.prod(self.static_shape) * self.dtype.itemsize

    def symbols(self) -> frozenset[str]:
        """The size symbols the shape reads."""
        return frozenset().union(*(dims.free_symbols(d) for d in self.shape))

    def evaluate(self, env: Mapping[str, int]) -> TensorType:
        """The static type for the symbols' values in `env` (checked int64 arithmetic: a
        `dims.DimError` when a value does not fit)."""
        if self.is_static:
            return self
        return TensorType(self.dtype, tuple(dims.evaluate(d, env) for d in self.shape))

    def __str__(self) -> str:
        return "x".join([*(render_dim(d) for d in self.shape), str(self.dtype)])

    @classmethod
    def parse(cls, text: str) -> TensorType:
        """`2x3xf32` (or `f64` for a scalar); a dimension may be a symbol (`batchx3xf32`) or
        an expression in parentheses (`(past + seq)x64xf32`), as `str` writes them."""
        *parts, dtype = _split_dims(text)
        shape: list[Dim] = []
        for part in parts:
            inner = part[1:-1] if part.startswith("(") and part.endswith(")") else part
            try:
                d = int(part) if part.strip().isdigit() else dims.parse(inner)
            except dims.DimError:
                raise ValueError(f"'{text}' is not a tensor type; expected e.g. 2x3xf32 or "
                                 f"batchx3xf32 ('{part}' is not a dimension)") from None
            if isinstance(d, int) and d < 0:
                raise ValueError(f"'{text}' has a negative dimension")
            shape.append(d)
        return cls(DType.from_name(dtype), tuple(shape))


def _split_dims(text: str) -> list[str]:
    """`text` split at each `x` outside parentheses (an unbalanced one is a ValueError)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            break
        if ch == "x" and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"'{text}' is not a tensor type: unbalanced parentheses")
    parts.append(text[start:])
    if any(not p for p in parts):
        raise ValueError(f"'{text}' is not a tensor type; expected e.g. 2x3xf32")
    return parts


@dataclass(frozen=True)
class Slot:
    """A buffer of the program (v4): where it lives and what it holds."""

    device: Device
    type: TensorType


@dataclass(frozen=True)
class Command:
    """A command and its operands, ints; ALLOC's `bytes` may be a `dims.Expr` in a dynamic
    module (version 6)."""

    op: Op
    operands: tuple[Dim, ...] = ()

    def __getattr__(self, name: str) -> Any:
        at = _OPERAND_AT.get((object.__getattribute__(self, "op"), name))
        operands = object.__getattribute__(self, "operands")
        if at is not None and at < len(operands):
            return operands[at]
        raise AttributeError(name)

    @property
    def slots(self) -> tuple[int, ...]:
        """DISPATCH's argument slots (the last one is the destination)."""
        return self.operands[2:] if self.op is Op.DISPATCH else ()  # type: ignore[return-value]

    @classmethod
    def end(cls) -> Command:
        return cls(Op.END)

    @classmethod
    def alloc(cls, slot: int, nbytes: Dim) -> Command:
        return cls(Op.ALLOC, (slot, nbytes))

    @classmethod
    def const(cls, slot: int, rodata_offset: int, nbytes: int) -> Command:
        return cls(Op.CONST, (slot, rodata_offset, nbytes))

    @classmethod
    def dispatch(cls, executable: int, slots: tuple[int, ...] | list[int]) -> Command:
        return cls(Op.DISPATCH, (executable, len(slots), *slots))

    @classmethod
    def print(cls, slot: int, rows: int, cols: int) -> Command:
        return cls(Op.PRINT, (slot, rows, cols))

    @classmethod
    def input(cls, slot: int, index: int) -> Command:
        return cls(Op.INPUT, (slot, index))

    @classmethod
    def output(cls, slot: int, index: int) -> Command:
        return cls(Op.OUTPUT, (slot, index))

    @classmethod
    def copy(cls, dst: int, src: int) -> Command:
        return cls(Op.COPY, (dst, src))

    def __str__(self) -> str:
        names = OPERAND_NAMES[self.op]
        parts = [f"{n}={render_dim(v)}" for n, v in zip(names, self.operands, strict=False)]
        parts += [f"%{v}" for v in self.operands[len(names) :]]
        return " ".join([str(self.op), *parts])


@dataclass(frozen=True)
class Function:
    """An entry point (or, from version 6, one level's variant of it): a symbol and the
    commands from its program offset to its END.

    `inputs` and `outputs` name its inputs and results by index (version 5's names section,
    e.g. an ONNX graph's); empty when the module names none, else one name per index.
    """

    name: str
    commands: tuple[Command, ...]
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    #: Version 6: the x86-64 level (CPU_LEVELS) this variant of the entry point was compiled
    #: for; a module may hold one variant per level under one name, and the runtime runs the
    #: highest its host supports. 0: the only one (every module before version 6).
    cpu_level: int = 0


def _payload_eq(a: bytes | memoryview | None, b: bytes | memoryview | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return bytes(a) == bytes(b)


@dataclass(frozen=True, eq=False)
class Executable:
    """A kernel: what it computes, where, on which argument types, and its device image.

    `image` is the kernel's code: a device image (PTX, CUBIN or fatbin) on cuda, a host image
    (an x86-64 ELF relocatable object, version 5) on cpu; None for a descriptor, whose body the
    runtime supplies (versions 3 and 4). `grid` and `block` are the launch geometry (x, y, z):
    on cuda blocks and threads; on cpu grid x is the extent of the kernel's outermost parallel
    loop, which the runtime splits across threads, and block is (1, 1, 1). All zero when there
    is no image.

    In a dynamic module (version 6) the argument types and the launch geometry may be
    expressions over the module's size symbols, evaluated for each call's sizes; `operands`
    are the indices (into `Module.symbols`) of the symbols whose values the kernel receives,
    as int64 arguments after its buffers: on cpu `void kernel(void *buf0, ..., int64 s0, ...,
    int64 lo, int64 hi)`, on cuda appended to the kernel parameters.
    """

    name: str
    kind: KernelKind
    device: Device
    args: tuple[TensorType, ...]
    params: tuple[float, ...] = ()
    image: bytes | memoryview | None = None
    grid: tuple[Dim, Dim, Dim] = (0, 0, 0)
    block: tuple[Dim, Dim, Dim] = (0, 0, 0)
    cpu_level: int = 0  # v5 host image: the x86-64 level it needs (CPU_LEVELS); else 0
    operands: tuple[int, ...] = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Executable):
            return NotImplemented
        mine = (self.name, self.kind, self.device, self.args, self.params, self.grid, self.block,
                self.cpu_level, self.operands)
        theirs = (other.name, other.kind, other.device, other.args, other.params, other.grid,
                  other.block, other.cpu_level, other.operands)
        return mine == theirs and _payload_eq(self.image, other.image)

    def __hash__(self) -> int:
        return hash((self.name, self.kind, self.device, self.args))

    @property
    def destination(self) -> TensorType:
        return self.args[-1]

    @property
    def extents(self) -> tuple[int, int, int] | None:
        """Version 3's description of the kernel, (m, n, k), where it applies: a rank-2
        matmul, add or relu whose arguments share one element type and agree in shape."""
        args = self.args
        arity = self.kind.arity
        if self.kind not in V3_KINDS or arity is None or len(args) != arity + 1 or any(
                t.rank != 2 or t.dtype is not args[-1].dtype or not t.is_static for t in args):
            return None
        (m, n), k = args[-1].shape, args[0].shape[1] if self.kind is KernelKind.MATMUL else 0
        want = [(m, k), (k, n), (m, n)] if self.kind is KernelKind.MATMUL else [(m, n)] * len(args)
        found = (m, n, k) if [t.shape for t in args] == want else None
        return found  # type: ignore[return-value]  # static, checked above


@dataclass(frozen=True)
class Generation:
    """An entry point that generates text (version 6's generate section): a decode loop the
    runtime runs over another entry point, `step`, a decoder-with-past step model.

    The step's inputs are the token ids [batch, seq], the attention mask [batch, past + seq],
    the position ids [batch, seq] and the cached keys and values of the earlier positions,
    each [..., past, ...] along one axis (`cache`: (input index, output index) pairs, each
    past paired with the present the step returns, [..., past + seq, ...]); its output
    `logits` is [batch, seq, vocab]. The loop: one step over the prompt (past = 0), then one
    step per new token, the argmax of the last logits, until `max_new_tokens` (the caller's)
    or `eos` (-1: none; the caller may give another). The state is the cache: held by the
    runtime for one call, sized for at most `max_length` positions (prompt and new tokens
    together), which the module declares (the model's position table, where it has one)."""

    name: str  # the entry point it makes, e.g. "generate"
    step: str  # the entry point it runs each step
    ids: int  # the step's input indices: token ids, attention mask, position ids
    mask: int
    positions: int
    logits: int  # the step's output index of the logits
    cache: tuple[tuple[int, int], ...]  # (past input index, present output index) pairs
    eos: int  # the end-of-sequence token id, -1 for none
    max_length: int  # the most positions (prompt + new tokens) one call may use

    def __str__(self) -> str:
        eos = f"eos {self.eos}" if self.eos >= 0 else "no eos"
        return (f"{self.name}: greedy decode loop over {self.step}, {eos}, at most "
                f"{self.max_length} positions, {len(self.cache)} cache tensors")


@dataclass(frozen=True)
class Section:
    kind: int
    flags: int
    offset: int
    size: int

    @property
    def name(self) -> str:
        try:
            return str(SectionKind(self.kind))
        except ValueError:
            return f"kind{self.kind}"


@dataclass(frozen=True)
class Layout:
    """The header and section table: what can be shown of a file before trusting its payloads."""

    file_size: int
    version: int
    flags: int
    sections: tuple[Section, ...]

    def section(self, kind: SectionKind) -> Section | None:
        return next((s for s in self.sections if s.kind == kind), None)


@dataclass(frozen=True, eq=False)
class Module:
    """A whole `.hxb`. `slots` is empty in version 3, where buffers are untyped.

    `placements` is the memory plan (version 5's plan section, `hexir_format.plan`): (slot,
    offset in its device's arena) for every intermediate, by slot; empty when the module has
    none, and the runtime then gives each intermediate a buffer of its own.

    `symbols` (version 6) are a dynamic module's size symbols: every `dims.Expr` in it reads
    only these. A module is dynamic iff it has any; it then has no memory plan (the runtime
    plans each call's sizes).

    `strings` (version 6's strings section) is the module's string table: a STRING tensor's
    handle h < len(strings) names strings[h] (a string constant's values are such handles).

    `generations` (version 6's generate section) are its decode-loop entry points.
    """

    version: int
    functions: tuple[Function, ...]
    rodata: bytes | memoryview = b""
    executables: tuple[Executable, ...] = ()
    slots: tuple[Slot, ...] = ()
    layout: Layout | None = field(default=None, repr=False)
    placements: tuple[tuple[int, int], ...] = ()
    symbols: tuple[Symbol, ...] = ()
    strings: tuple[str, ...] = ()
    generations: tuple[Generation, ...] = ()

    @property
    def is_dynamic(self) -> bool:
        return bool(self.symbols)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Module):
            return NotImplemented
        mine = (self.version, self.functions, self.executables, self.slots, self.placements,
                self.symbols, self.strings, self.generations)
        theirs = (other.version, other.functions, other.executables, other.slots,
                  other.placements, other.symbols, other.strings, other.generations)
        return mine == theirs and _payload_eq(self.rodata, other.rodata)

    def __hash__(self) -> int:
        return hash((self.version, self.functions))

    def function(self, name: str) -> Function | None:
        return next((f for f in self.functions if f.name == name), None)

    def generation(self, name: str) -> Generation | None:
        return next((g for g in self.generations if g.name == name), None)
