"""Emit one `hextir.prim_func`: buffers, index arithmetic, loops, guards.

Kernel generators (elementwise, contraction, reduction) describe *what* a kernel computes in
terms of this builder; the builder owns the *how* of writing hextir ops. Ops are created in
generic form by name, so the only coupling to the dialect definitions is the IR contract (op
names, operand order, attribute names), not the Python classes that declare them.
"""

from __future__ import annotations

import builtins
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from hexir_compiler.dialects.hextir import WORKGROUP
from hexir_compiler.mlir import arith, ir, vector

Fold = Callable[[list[ir.Value], list[ir.Value]], list[ir.Value]]


class KernelBuilder:
    """Builds the body of one prim_func; every op it creates carries `loc`.

    Index constants and float constants are created once per kernel at the top of the entry
    block, so the loops below can share them (and thread_binding loops get constant bounds,
    which the GPU lowering reads as grid and block extents).
    """

    def __init__(
        self,
        *,
        ip: ir.InsertionPoint,
        name: str,
        device: str,
        kind: str,
        params: Sequence[float],
        shapes: Sequence[Sequence[int]],
        elements: Sequence[ir.Type],
        loc: ir.Location,
        host_level: int = 2,
    ) -> None:
        self.device = device
        self.host_level = host_level  # the x86-64 level cpu code is for (hexir_format.CPU_LEVELS)
        self.element = elements[-1]  # the destination's: what most kernels compute in
        self.loc = loc
        self._constants: dict[tuple[str, str, float], ir.Value] = {}
        self._last_constant: ir.Operation | None = None
        with loc:
            self.index_type = ir.IndexType.get()
            types = [ir.MemRefType.get(list(shape), storage(element))
                     for shape, element in zip(shapes, elements, strict=True)]
            attributes = {
                "sym_name": ir.StringAttr.get(name),
                "function_type": ir.TypeAttr.get(ir.FunctionType.get(types, [])),
                "device": ir.StringAttr.get(device),
                "hexir.kernel": ir.StringAttr.get(kind),
                "hexir.params": ir.DenseF64ArrayAttr.get([float(p) for p in params]),
            }
            self.func = ir.Operation.create(
                "hextir.prim_func", attributes=attributes, regions=1, ip=ip
            )
            self.entry = self.func.regions[0].blocks.append(*types)
            with ir.InsertionPoint(self.entry):
                ir.Operation.create("hextir.return")
        self.args: list[ir.Value] = list(self.entry.arguments)
        self.elements = dict(zip(self.args, elements, strict=True))
        self._body_ip = ir.InsertionPoint.at_block_terminator(self.entry)

    @contextmanager
    def building(self) -> Iterator[None]:
        """Insert the kernel body before the entry block's `hextir.return`."""
        with self.loc, self._body_ip:
            yield

    # -- constants -------------------------------------------------------------------------

    def index(self, value: int) -> ir.Value:
        return self._constant("index", value, self.index_type)

    def float(self, value: float) -> ir.Value:
        """`value` in the destination's element type (a float kernel's constants)."""
        return self.constant(value, self.element)

    def constant(self, value: builtins.float, type_: ir.Type) -> ir.Value:
        """`value` as a constant of the scalar type `type_` (float, integer or i1), or of
        every lane of the vector type `type_` (a formula evaluated on vectors)."""
        if isinstance(type_, ir.VectorType):
            vector_type = ir.VectorType(type_)
            return self.splat(self.constant(value, vector_type.element_type),
                              vector_type.shape[0])
        if isinstance(type_, ir.IndexType):
            return self.index(int(value))
        if isinstance(type_, ir.IntegerType):
            width = ir.IntegerType(type_).width
            value = int(value)
            if width == 1:
                value = 1 if value else 0
        return self._constant("scalar", value, type_)

    def _constant(self, tag: str, value: builtins.float, type_: ir.Type) -> ir.Value:
        key = (tag, str(type_), value)
        if key not in self._constants:
            if self._last_constant is None:
                ip = ir.InsertionPoint.at_block_begin(self.entry)
            else:
                ip = ir.InsertionPoint.after(self._last_constant)
            with self.loc:
                result = arith.constant(type_, value, ip=ip)
            self._last_constant = result.owner
            self._constants[key] = result
        return self._constants[key]

    # -- index arithmetic (multiplying by 1 is skipped, so the printed IR stays readable) ----

    def mul(self, a: ir.Value, b: int) -> ir.Value:
        return a if b == 1 else arith.muli(a, self.index(b))

    def linearize(self, coords: Sequence[ir.Value], shape: Sequence[int]) -> ir.Value:
        """Row-major flat index of `coords` in `shape` (constant 0 for rank 0)."""
        flat: ir.Value | None = None
        for coord, extent in zip(coords, shape, strict=True):
            flat = coord if flat is None else arith.addi(self.mul(flat, extent), coord)
        return self.index(0) if flat is None else flat

    def delinearize(self, flat: ir.Value, shape: Sequence[int]) -> list[ir.Value]:
        """Row-major coordinates of `flat` in `shape`; the caller guarantees flat < size.
        Each coordinate is `rest - (rest / extent) * extent`, not `rest % extent`: one
        division per axis, and LLVM folds `row * extent + col` back to `flat`, so it can
        see that neighbouring lanes' addresses are adjacent and aligned."""
        total = math.prod(shape)
        coords: list[ir.Value] = []
        rest, stride = flat, 1
        for extent in reversed(shape):
            if extent == 1:
                coords.append(self.index(0))
                continue
            if stride * extent >= total:  # the outermost axis that is not 1: flat < total
                coords.append(rest)
            else:
                quotient = arith.divui(rest, self.index(extent))
                coords.append(arith.subi(rest, arith.muli(quotient, self.index(extent))))
                rest = quotient
            stride *= extent
        return coords[::-1]

    # -- memory ----------------------------------------------------------------------------

    def load(self, buffer: ir.Value, indices: Sequence[ir.Value]) -> ir.Value:
        """buffer[indices] as a value of the tensor's element type (a bool: any nonzero byte
        is true)."""
        element = self.elements[buffer]
        op = ir.Operation.create(
            "hextir.buffer_load", results=[storage(element)], operands=[buffer, *indices]
        )
        if storage(element) == element:
            return op.result
        return arith.cmpi(arith.CmpIPredicate.ne, op.result, self.constant(0, storage(element)))

    def store(self, value: ir.Value, buffer: ir.Value, indices: Sequence[ir.Value]) -> None:
        """buffer[indices] = value (a bool as the byte 0 or 1)."""
        if storage(self.elements[buffer]) != self.elements[buffer]:
            value = arith.extui(storage(self.elements[buffer]), value)
        ir.Operation.create("hextir.buffer_store", operands=[value, buffer, *indices])

    # -- cpu vectors (a schedule that names its registers instead of leaving them to LLVM's
    # SLP vectorizer, which gives up on a large block of sums: see `convolution`) ----------

    def load_vector(self, buffer: ir.Value, indices: Sequence[ir.Value], lanes: int) -> ir.Value:
        """buffer[indices], ... buffer[indices + lanes - 1] along the innermost axis as one
        vector<lanes x element> (a float buffer's)."""
        return vector.load(ir.VectorType.get([lanes], self.elements[buffer]), buffer,
                           list(indices))

    def load_strided(self, buffer: ir.Value, indices: Sequence[ir.Value], step: int,
                     lanes: int, register: int) -> ir.Value:
        """buffer[indices], buffer[indices + step], ... (`lanes` of them along the innermost
        axis) as one vector<lanes>: the run they lie in read as whole vectors of `register`
        lanes -- the last one a masked load of the run's rest, which reads nothing past it
        -- and at most two of them shuffled into the lanes (one two-source permute at
        x86-64-v4). A run of any other length (`lanes` x `step` elements, not a power of
        two) is split by LLVM into pieces, each a load and shuffles of its own; a run of
        neighbours of such a length (`step` 1) is read the same way."""
        span = step * (lanes - 1) + 1
        chunk = min(register, 1 << (span - 1).bit_length())
        if step == 1 and span == chunk:  # whole vectors
            return self.load_vector(buffer, indices, lanes)
        if span > 2 * chunk:
            return self.shuffle(self.load_vector(buffer, indices, span),
                                list(range(0, span, step)))
        element = self.elements[buffer]
        parts = []
        for first in range(0, span, chunk):
            at = [*indices[:-1], arith.addi(indices[-1], self.index(first))
                  if first else indices[-1]]
            length = min(chunk, span - first)
            if length == chunk:
                parts.append(self.load_vector(buffer, at, chunk))
                continue
            type_ = ir.VectorType.get([chunk], element)
            mask = vector.constant_mask(ir.VectorType.get([chunk], ir.IntegerType.get_signless(1)),
                                        [length])
            parts.append(vector.maskedload(type_, buffer, at, mask,
                                           self.splat(self.constant(0.0, element), chunk)))
        return vector.shuffle(parts[0], parts[-1], list(range(0, span, step)))

    def store_vector(self, value: ir.Value, buffer: ir.Value, indices: Sequence[ir.Value]) -> None:
        """buffer[indices], ... = the lanes of the vector `value`, along the innermost axis."""
        vector.store(value, buffer, list(indices))

    def splat(self, value: ir.Value, lanes: int) -> ir.Value:
        """A vector<lanes> of `value` (a broadcast)."""
        return vector.broadcast(ir.VectorType.get([lanes], value.type), value)

    def vector_of(self, values: Sequence[ir.Value]) -> ir.Value:
        """The vector whose lanes are `values`."""
        return vector.from_elements(ir.VectorType.get([len(values)], values[0].type),
                                    list(values))

    def shuffle(self, value: ir.Value, lanes: Sequence[int]) -> ir.Value:
        """The vector of `value`'s lanes `lanes`, in that order (every other one: a stride)."""
        return vector.shuffle(value, value, list(lanes))

    def lane(self, value: ir.Value, index: int) -> ir.Value:
        """Lane `index` of the vector `value`."""
        return vector.extract(value, [], [index])

    def shared(self, shape: Sequence[int], element: ir.Type | None = None) -> ir.Value:
        """A buffer of `shape` in the block's shared memory (a cuda kernel's staging area)."""
        element = element or self.element
        t = ir.MemRefType.get(list(shape), storage(element),
                              memory_space=ir.Attribute.parse(WORKGROUP))
        buffer = ir.Operation.create("hextir.alloc_buffer", results=[t]).result
        self.elements[buffer] = element
        return buffer

    def barrier(self) -> None:
        """Every thread of the block waits here; shared writes before it are seen after it."""
        ir.Operation.create("hextir.barrier")

    # -- control flow ----------------------------------------------------------------------

    @contextmanager
    def loop(self, extent: int, kind: str, bind: str | None = None, *,
             start: ir.Value | None = None, step: int = 1) -> Iterator[ir.Value]:
        """A `hextir.for` over start (default 0), start + step, ... < extent without carried
        values; yields the induction variable."""
        op = self._for(start, extent, step, kind, bind, [])
        body = op.regions[0].blocks[0]
        with ir.InsertionPoint(body):
            yield body.arguments[0]
            _yield([])

    def strided(self, start: ir.Value, end: int, step: int, inits: Sequence[ir.Value],
                body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:
        """Serial loop start, start + step, ... < end carrying `inits` (a thread's share of a
        cooperative loop: start = its thread index, step = the block's threads)."""
        op = self._for(start, end, step, "serial", None, inits)
        block = op.regions[0].blocks[0]
        with ir.InsertionPoint(block):
            _yield(body(block.arguments[0], list(block.arguments)[1:]))
        return list(op.results)

    def fold(self, extents: Sequence[int], inits: Sequence[ir.Value], body: Fold) -> list[ir.Value]:
        """Serial loop nest over `extents` carrying `inits`; `body(ivs, carried)` -> next."""
        if not extents:
            return body([], list(inits))
        op = self._for(None, extents[0], 1, "serial", None, inits)
        block = op.regions[0].blocks[0]
        with ir.InsertionPoint(block):
            iv, carried = block.arguments[0], list(block.arguments)[1:]
            nxt = self.fold(extents[1:], carried, lambda ivs, c: body([iv, *ivs], c))
            _yield(nxt)
        return list(op.results)

    @contextmanager
    def guard(self, condition: ir.Value | None) -> Iterator[None]:
        """`hextir.if condition { ... }`; no op at all when there is nothing to guard."""
        if condition is None:
            yield
            return
        op = ir.Operation.create("hextir.if", operands=[condition], regions=1)
        with ir.InsertionPoint(op.regions[0].blocks.append()):
            yield
            _yield([])

    def less_than(self, value: ir.Value, bound: int) -> ir.Value:
        return arith.cmpi(arith.CmpIPredicate.ult, value, self.index(bound))

    def all_of(self, conditions: Sequence[ir.Value]) -> ir.Value | None:
        """The conjunction of `conditions` (and-ed left to right); None when there are none."""
        return functools.reduce(arith.andi, conditions) if conditions else None

    def _for(self, start: ir.Value | None, end: int, step: int, kind: str, bind: str | None,
             inits: Sequence[ir.Value]) -> ir.Operation:
        attributes = {"kind": ir.StringAttr.get(kind)}
        if bind is not None:
            attributes["bind"] = ir.StringAttr.get(bind)
        op = ir.Operation.create(
            "hextir.for",
            results=[value.type for value in inits],
            operands=[self.index(0) if start is None else start, self.index(end),
                      self.index(step), *inits],
            attributes=attributes,
            regions=1,
        )
        op.regions[0].blocks.append(self.index_type, *[value.type for value in inits])
        return op


def storage(element: ir.Type) -> ir.Type:
    """How a tensor element lies in a kernel's buffer: as itself, but a bool (i1) as a byte."""
    if isinstance(element, ir.IntegerType) and ir.IntegerType(element).width == 1:
        return ir.IntegerType.get_signless(8)
    return element


def _yield(values: Sequence[ir.Value]) -> None:
    ir.Operation.create("hextir.yield", operands=list(values))
