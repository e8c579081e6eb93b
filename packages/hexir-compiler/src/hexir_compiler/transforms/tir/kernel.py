"""The interface between the pass and the kernel generators.

The pass reads a graph op into a `GraphOp` (shapes and attributes, no MLIR op handle), a
generator's `plan` checks it and returns a `Kernel`: the format's kernel kind, its params and
an `emit` that writes the body through a `KernelBuilder`. The op verifiers normally reject bad
shapes first; planning re-derives the result shape with the same rules (`hexir_format.signatures`)
because a kernel that trusted a wrong result type would index outside its buffers. It fails
with a CompileError (or a ShapeError) naming what was expected and what was found; the pass
attaches the op's location.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import ir
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_format.signatures import fmt

#: A shape as the generators read it. Typed as ints, which most of them are; a symbolic size
#: is a `dims.Expr`, which takes the arithmetic they do on extents (+, *, //, %, ==) and
#: refuses an order comparison (a TypeError), so a schedule decision on it cannot pass
#: unnoticed: where one is needed the generator decides on what is static (`symbolic.hint`,
#: `least`, `at_most`). test_dynamic_models and test_symbolic_kernels run them on symbols.
Shape = tuple[int, ...]


@dataclass(frozen=True)
class GraphOp:
    """One `hexir` compute op as the kernel generators see it."""

    mnemonic: str
    inputs: tuple[Shape, ...]
    output: Shape
    attributes: dict[str, ir.Attribute] = field(default_factory=dict)
    #: The element types (as MLIR writes them: f32, i64, i1, ...) of the inputs, then the result.
    elements: tuple[str, ...] = ()

    def expect_output(self, shape: Sequence[int]) -> None:
        """Fail unless the result type has `shape`, the shape the op's semantics give."""
        if tuple(shape) != self.output:
            raise CompileError(
                f"hexir.{self.mnemonic}: expected a result of shape {fmt(shape)}, "
                f"found {fmt(self.output)}"
            )

    def int_attr(self, name: str) -> int:
        attr = self._attr(name, ir.IntegerAttr, "an integer")
        return int(attr.value)

    def float_attr(self, name: str) -> float:
        return float(self._attr(name, ir.FloatAttr, "a float").value)

    def bool_attr(self, name: str, default: bool) -> bool:
        if name not in self.attributes:
            return default
        return bool(self._attr(name, ir.BoolAttr, "a boolean").value)

    def string_attr(self, name: str, default: str) -> str:
        if name not in self.attributes:
            return default
        return str(self._attr(name, ir.StringAttr, "a string").value)

    def ints_attr(self, name: str) -> list[int]:
        return [int(v) for v in self._attr(name, ir.DenseI64ArrayAttr, "an array<i64: ...>")]

    def _attr(self, name: str, kind: type, what: str) -> ir.Attribute:
        attr = self.attributes.get(name)
        if attr is None:
            raise CompileError(f"hexir.{self.mnemonic}: missing attribute '{name}' ({what})")
        if not isinstance(attr, kind):
            try:
                return kind(attr)
            except (TypeError, ValueError):
                pass
            raise CompileError(
                f"hexir.{self.mnemonic}: attribute '{name}' must be {what}, found {attr}"
            )
        return attr


@dataclass(frozen=True)
class Epilogue:
    """An element-wise epilogue (`tir.fusion` makes them): `epilogue(builder, a contraction's
    value at an output element, its coordinates)` is the value to store there. Where
    `vectors`, the value may also be a vector of neighbours along one output axis (`axis`,
    the innermost by default) or along consecutive axes flattened (a tuple: a plane's
    pixels), the coordinates then the first one's, and the result is the vector of theirs:
    its operands are loaded as vectors (gathered lane by lane where their elements along
    the lanes are not adjacent in memory) and its ops run on them, instead of lane by
    lane. `operands` are the shapes of the operands it reads (numpy-broadcast to the
    output), so a schedule can tell along which axes they vary (`varies_along`)."""

    apply: Callable[[KernelBuilder, ir.Value, list[ir.Value], int | tuple[int, ...]],
                    ir.Value]
    vectors: bool = False
    operands: tuple[tuple[int, ...], ...] = ()

    def varies_along(self, axes: Sequence[int], rank: int) -> bool:
        """Whether an operand has more than one element along one of the output's `axes`
        (of its `rank`): then a vector along them reads it as a vector, not a broadcast."""
        return any(varying_axes(shape, rank, axes) for shape in self.operands)

    def __call__(self, b: KernelBuilder, value: ir.Value, at: list[ir.Value],
                 axis: int | tuple[int, ...] = -1) -> ir.Value:
        return self.apply(b, value, at, axis)


def varying_axes(operand: Sequence[int], rank: int, axes: Sequence[int]) -> list[int]:
    """Those of the output's `axes` (of its `rank`, each in [0, rank)) along which an
    operand of shape `operand`, numpy-broadcast to the output, has more than one element."""
    offset = rank - len(operand)  # the operand's dim of output axis a is a - offset
    return [a for a in axes if a >= offset and operand[a - offset] != 1]


#: Reads an operand's element at the given coordinates.
Read = Callable[[list[ir.Value]], ir.Value]


@dataclass(frozen=True)
class Prologue:
    """A fused element-wise chain computing a reduction's data operand (`tir.fusion`):
    `value(b, at)` evaluates it at the operand's coordinates `at`; `operands` are the kernel
    argument positions of the reduction's other operands (layer_norm's scale and shift).
    `vector(b, at, lanes)`, where the chain's formulas all take vectors, evaluates it at
    `lanes` neighbours along the innermost axis from `at` as one vector."""

    value: Callable[[KernelBuilder, list[ir.Value]], ir.Value]
    operands: tuple[int, ...] = ()
    vector: Callable[[KernelBuilder, list[ir.Value], int], ir.Value] | None = None


@dataclass(frozen=True)
class Kernel:
    """A planned kernel: format kind, params, and how to write its body."""

    kind: str
    emit: Callable[[KernelBuilder], None]
    params: tuple[float, ...] = ()
    #: Symbols whose values the kernel takes though no buffer's shape reads them.
    symbols: tuple[str, ...] = ()


def broadcast_indices(
    b: KernelBuilder, coords: Sequence[ir.Value], shape: Shape, out: Sequence[int]
) -> list[ir.Value]:
    """Indices into an operand of `shape` numpy-broadcast to `out` at `coords`."""
    offset = len(out) - len(shape)
    return [
        coords[offset + d] if extent == out[offset + d] else b.index(0)
        for d, extent in enumerate(shape)
    ]
