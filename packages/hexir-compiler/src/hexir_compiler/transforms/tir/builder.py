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

from hexir_compiler import symbolic
from hexir_compiler.dialects.hextir import SYMBOLS, WORKGROUP
from hexir_compiler.mlir import arith, ir, memref, vector
from hexir_format import dims
from hexir_format.dims import Dim, Expr

#: A loop's attribute: its symbolic upper bound, as `hexir_format.dims` writes it.
EXTENT = "hexir.extent"
Fold = Callable[[list[ir.Value], list[ir.Value]], list[ir.Value]]
#: A serial loop's range: its extent (from 0), or [start, end) computed in the kernel.
Extent = Dim | tuple[ir.Value, ir.Value]


class KernelBuilder:
    """Builds the body of one prim_func; every op it creates carries `loc`.

    Index constants and float constants are created once per kernel at the top of the entry
    block, so the loops below can share them (and thread_binding loops get constant bounds,
    which the GPU lowering reads as grid and block extents).

    A shape may hold symbolic dims (`hexir_format.dims.Expr`). Such a kernel takes, after
    its buffers, the value of each symbol its shapes (and `symbols`) read, as an index
    (`hexir.symbols` names them), and each buffer of a symbolic shape as a flat
    `memref<?xT>`; `args` are then views of those buffers in their whole shapes (sizes and
    row-major strides computed from the symbols once, at the top), so a generator indexes
    them as it indexes a static buffer. Every extent the builder takes (`index`, `loop`,
    `less_than`, ...) may be an expression: it is computed once per kernel, at the top.
    """

    def __init__(
        self,
        *,
        ip: ir.InsertionPoint,
        name: str,
        device: str,
        kind: str,
        params: Sequence[float],
        shapes: Sequence[Sequence[Dim]],
        elements: Sequence[ir.Type],
        loc: ir.Location,
        host_level: int = 2,
        symbols: Sequence[str] = (),
    ) -> None:
        self.device = device
        self.host_level = host_level  # the x86-64 level cpu code is for (hexir_format.CPU_LEVELS)
        self.element = elements[-1]  # the destination's: what most kernels compute in
        self.loc = loc
        self._constants: dict[tuple[str, str, float | str], ir.Value] = {}
        self._once: dict[ir.Value, ir.Value] = {}  # load_once's
        self._last_constant: ir.Operation | None = None
        self.symbols = tuple(sorted(symbolic.symbols(d for shape in shapes for d in shape)
                                    | set(symbols)))
        with loc:
            self.index_type = ir.IndexType.get()
            types = [_buffer_type(shape, storage(element))
                     for shape, element in zip(shapes, elements, strict=True)]
            sizes = [self.index_type] * len(self.symbols)
            attributes = {
                "sym_name": ir.StringAttr.get(name),
                "function_type": ir.TypeAttr.get(ir.FunctionType.get([*types, *sizes], [])),
                "device": ir.StringAttr.get(device),
                "hexir.kernel": ir.StringAttr.get(kind),
                "hexir.params": ir.DenseF64ArrayAttr.get([float(p) for p in params]),
            }
            if self.symbols:
                attributes[SYMBOLS] = ir.ArrayAttr.get(
                    [ir.StringAttr.get(n) for n in self.symbols])
            self.func = ir.Operation.create(
                "hextir.prim_func", attributes=attributes, regions=1, ip=ip
            )
            self.entry = self.func.regions[0].blocks.append(*types, *sizes)
            with ir.InsertionPoint(self.entry):
                ir.Operation.create("hextir.return")
        arguments = list(self.entry.arguments)
        self._sizes: dict[Expr, ir.Value] = {
            Expr.symbol(n): v for n, v in zip(self.symbols, arguments[len(types):], strict=True)}
        self.args: list[ir.Value] = [
            self._view(arg, shape, element)
            for arg, shape, element in zip(arguments, shapes, elements, strict=False)]
        self.elements = dict(zip(self.args, elements, strict=True))
        self._body_ip = ir.InsertionPoint.at_block_terminator(self.entry)

    @contextmanager
    def building(self) -> Iterator[None]:
        """Insert the kernel body before the entry block's `hextir.return`."""
        with self.loc, self._body_ip:
            yield

    # -- constants -------------------------------------------------------------------------

    def index(self, value: Dim) -> ir.Value:
        """`value` as an index: a constant, or an expression's value (computed at the top)."""
        if isinstance(value, Expr):
            return self._size(value)
        return self._constant("index", value, self.index_type)

    def float(self, value: float) -> ir.Value:
        """`value` in the destination's element type (a float kernel's constants)."""
        return self.constant(value, self.element)

    def constant(self, value: builtins.float | Expr, type_: ir.Type) -> ir.Value:
        """`value` as a constant of the scalar type `type_` (float, integer or i1), or of
        every lane of the vector type `type_` (a formula evaluated on vectors)."""
        if isinstance(type_, ir.VectorType):
            vector_type = ir.VectorType(type_)
            return self.splat(self.constant(value, vector_type.element_type),
                              vector_type.shape[0])
        if isinstance(value, Expr):  # a size as a number the kernel computes with
            return self._size_as(value, type_)
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
            self._constants[key] = self._at_top(lambda: arith.constant(type_, value))
        return self._constants[key]

    def _size_as(self, d: Expr, type_: ir.Type) -> ir.Value:
        """The value of the expression `d` as a `type_` (an integer or a float), made once."""
        key = ("size", str(type_), dims.render(d))
        if key not in self._constants:
            size = self.index(d)
            if isinstance(type_, ir.IndexType):
                return size
            i64 = ir.IntegerType.get_signless(64)
            value = self._at_top(lambda: arith.index_cast(i64, size))
            if isinstance(type_, ir.IntegerType) and ir.IntegerType(type_).width < 64:
                value = self._at_top(lambda: arith.trunci(type_, value))
            elif not isinstance(type_, ir.IntegerType):
                value = self._at_top(lambda: arith.sitofp(type_, value))
            self._constants[key] = value
        return self._constants[key]

    def _at_top(self, make: Callable[[], ir.Value]) -> ir.Value:
        """`make()`'s op placed after the kernel's constants and sizes made so far."""
        if self._last_constant is None:
            ip = ir.InsertionPoint.at_block_begin(self.entry)
        else:
            ip = ir.InsertionPoint.after(self._last_constant)
        with self.loc, ip:
            result = make()
        self._last_constant = result.owner
        return result

    def _size(self, d: Expr) -> ir.Value:
        """The value of the expression `d`, computed once at the top from the symbols."""
        if d in self._sizes:
            return self._sizes[d]
        total: ir.Value | None = None
        for monomial, coefficient in d.terms:
            term: ir.Value | None = None
            for atom in monomial:
                factor = self._atom(atom)
                term = factor if term is None else self._at_top(
                    functools.partial(arith.muli, term, factor))
            assert term is not None
            if coefficient != 1:
                term = self._at_top(functools.partial(arith.muli, term,
                                                      self.index(coefficient)))
            total = term if total is None else self._at_top(
                functools.partial(arith.addi, total, term))
        assert total is not None
        if d.const:
            total = self._at_top(functools.partial(arith.addi, total, self.index(d.const)))
        self._sizes[d] = total
        return total

    def _atom(self, atom) -> ir.Value:
        if atom.op < 0:
            if Expr.symbol(atom.name) not in self._sizes:
                raise ValueError(f"kernel size '{atom.name}' is not among its symbols "
                                 f"({', '.join(self.symbols)})")
            return self._sizes[Expr.symbol(atom.name)]
        x, y = (self.index(o) for o in atom.operands)
        make = {dims.Opcode.FLOORDIV: arith.floordivsi, dims.Opcode.CEILDIV: arith.ceildivsi,
                dims.Opcode.MIN: arith.minsi, dims.Opcode.MAX: arith.maxsi}.get(
                    dims.Opcode(atom.op))
        if make is not None:
            return self._at_top(lambda: make(x, y))
        quotient = self._at_top(lambda: arith.floordivsi(x, y))  # MOD: x - (x // y) * y
        product = self._at_top(lambda: arith.muli(quotient, y))
        return self._at_top(lambda: arith.subi(x, product))

    def _view(self, arg: ir.Value, shape: Sequence[Dim], element: ir.Type) -> ir.Value:
        """A buffer as its kernel indexes it: itself when its shape is static, else the view
        of the flat argument in its whole shape."""
        if symbolic.is_static(shape):
            return arg
        strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
        dynamic_size, dynamic_stride = (ir.ShapedType.get_dynamic_size(),
                                        ir.ShapedType.get_dynamic_stride_or_offset())
        with self.loc:
            layout = ir.StridedLayoutAttr.get(
                0, [dynamic_stride if isinstance(s, Expr) else s for s in strides])
            type_ = ir.MemRefType.get(
                [dynamic_size if isinstance(d, Expr) else d for d in shape], storage(element),
                layout)
        sizes = [self.index(d) for d in shape if isinstance(d, Expr)]
        steps = [self.index(s) for s in strides if isinstance(s, Expr)]
        return self._at_top(lambda: memref.reinterpret_cast(
            type_, arg, [], sizes, steps, [0],
            [dynamic_size if isinstance(d, Expr) else d for d in shape],
            [dynamic_stride if isinstance(s, Expr) else s for s in strides]))

    # -- index arithmetic (multiplying by 1 is skipped, so the printed IR stays readable) ----

    def mul(self, a: ir.Value, b: Dim) -> ir.Value:
        return a if b == 1 else arith.muli(a, self.index(b))

    def linearize(self, coords: Sequence[ir.Value], shape: Sequence[Dim]) -> ir.Value:
        """Row-major flat index of `coords` in `shape` (constant 0 for rank 0)."""
        flat: ir.Value | None = None
        for coord, extent in zip(coords, shape, strict=True):
            flat = coord if flat is None else arith.addi(self.mul(flat, extent), coord)
        return self.index(0) if flat is None else flat

    def delinearize(self, flat: ir.Value, shape: Sequence[Dim]) -> list[ir.Value]:
        """Row-major coordinates of `flat` in `shape`; the caller guarantees flat < size.
        Each coordinate is `rest - (rest / extent) * extent`, not `rest % extent`: one
        division per axis, and LLVM folds `row * extent + col` back to `flat`, so it can
        see that neighbouring lanes' addresses are adjacent and aligned."""
        coords: list[ir.Value] = []
        rest = flat
        for axis in reversed(range(len(shape))):
            extent = shape[axis]
            if extent == 1:
                coords.append(self.index(0))
                continue
            if all(d == 1 for d in shape[:axis]):  # the outermost axis that is not 1
                coords.append(rest)
            else:
                quotient = arith.divui(rest, self.index(extent))
                coords.append(arith.subi(rest, arith.muli(quotient, self.index(extent))))
                rest = quotient
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

    def load_once(self, buffer: ir.Value) -> ir.Value:
        """The one element of a buffer of one element, loaded at the kernel's top (once per
        kernel, not in its loops: LLVM cannot hoist a load that a store of the kernel might
        alias), as `load` gives it."""
        if buffer not in self._once:
            rank = ir.MemRefType(buffer.type).rank
            at = [self.index(0)] * rank
            self._once[buffer] = self._at_top(lambda: self.load(buffer, at))
        return self._once[buffer]

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

    def prefetch(self, buffer: ir.Value, indices: Sequence[ir.Value]) -> None:
        """A hint that buffer[indices] is read soon: its cache line fetched into L2 (x86's
        prefetcht1), with no effect on the results. A read far enough ahead that L1 would
        lose the line before its use."""
        memref.prefetch(buffer, list(indices), False, 2, True)

    def load_strided(self, buffer: ir.Value, indices: Sequence[ir.Value], step: int,
                     lanes: int, register: int) -> ir.Value:
        """buffer[indices], buffer[indices + step], ... (`lanes` of them along the innermost
        axis) as one vector<lanes>: the run they lie in read as two whole vectors of the
        largest power of two of lanes it holds (at most `register`), the second ending at
        the run's end -- overlapping the first where the run is shorter than both -- and
        one two-source shuffle of them into the lanes. Nothing past the run is read, and
        no load is masked: the run's rest read by a masked load (vmaskmovps) made AVX2's
        stride-2 convs 2-5x slower on Zen 3 than two plain loads (MobileNetV2's stride-2
        3x3 depthwise at 56x56, one thread: 749 against 218 us). A run longer than two
        such vectors is one load of its length, which LLVM splits into pieces, each a load
        and shuffles of its own; a run of neighbours (`step` 1) is read the same way."""
        span = step * (lanes - 1) + 1
        chunk = min(register, 1 << (span.bit_length() - 1))  # the largest power of two <= span
        if step == 1 and span == chunk:  # whole vectors
            return self.load_vector(buffer, indices, lanes)
        if span > 2 * chunk:
            return self.shuffle(self.load_vector(buffer, indices, span),
                                list(range(0, span, step)))
        first = self.load_vector(buffer, indices, chunk)
        if span == chunk:
            return self.shuffle(first, list(range(0, span, step)))
        later = span - chunk  # where the second vector starts in the run
        second = self.load_vector(buffer, [*indices[:-1], arith.addi(
            indices[-1], self.index(later))], chunk)
        return vector.shuffle(first, second, [e if e < chunk else chunk + e - later
                                              for e in range(0, span, step)])

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

    def transpose(self, rows: Sequence[ir.Value]) -> list[ir.Value]:
        """The columns of `rows` (R vectors of L lanes, R a power of two that divides L): L
        vectors of R lanes, the i-th holding lane i of each row in order. log2(R) rounds of
        two-source interleaves within groups of R lanes -- round e pairs rows e apart and
        interleaves runs of e lanes, x86's unpack instructions at R = 4 (unpcklps, then
        unpcklpd) -- leave each column in one group of one vector; a column is then that
        group (at R = 4 and L = 16, four zmm become sixteen 16-byte stores after eight
        interleaves -- LLVM emits four zmm unpacks and 20 narrower shuffles -- where lane by
        lane they were 64 extracts and 64 scalar stores)."""
        count, lanes = len(rows), ir.VectorType(rows[0].type).shape[0]
        assert count & (count - 1) == 0 and lanes % count == 0, (count, lanes)
        vectors = list(rows)
        held = [[(r, c) for c in range(lanes)] for r in range(count)]  # (row, lane) a lane has
        run = 1
        while run < count:
            for i in (i for i in range(count) if not i & run):
                j, both = i + run, held[i] + held[i + run]
                half = count // run // 2  # runs of `run` lanes per half group
                lo: list[int] = []
                hi: list[int] = []
                for group in range(0, lanes, count):
                    for q in range(half):
                        for first, into in ((group + q * run, lo), (group + (half + q) * run, hi)):
                            into += [*range(first, first + run),
                                     *range(lanes + first, lanes + first + run)]
                x, y = vectors[i], vectors[j]
                vectors[i], vectors[j] = vector.shuffle(x, y, lo), vector.shuffle(x, y, hi)
                held[i], held[j] = [both[m] for m in lo], [both[m] for m in hi]
            run *= 2
        where = {held[v][g][1]: (v, g) for v in range(count) for g in range(0, lanes, count)}
        columns = []
        for c in range(lanes):
            v, g = where[c]
            assert held[v][g:g + count] == [(r, c) for r in range(count)], (c, held[v])
            columns.append(vector.shuffle(vectors[v], vectors[v], list(range(g, g + count))))
        return columns

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
    def loop(self, extent: Dim, kind: str, bind: str | None = None, *,
             start: ir.Value | None = None, step: int = 1) -> Iterator[ir.Value]:
        """A `hextir.for` over start (default 0), start + step, ... < extent without carried
        values; yields the induction variable."""
        op = self._for(start, extent, step, kind, bind, [])
        body = op.regions[0].blocks[0]
        with ir.InsertionPoint(body):
            yield body.arguments[0]
            _yield([])

    def strided(self, start: ir.Value, end: Dim, step: int, inits: Sequence[ir.Value],
                body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:
        """Serial loop start, start + step, ... < end carrying `inits` (a thread's share of a
        cooperative loop: start = its thread index, step = the block's threads)."""
        op = self._for(start, end, step, "serial", None, inits)
        block = op.regions[0].blocks[0]
        with ir.InsertionPoint(block):
            _yield(body(block.arguments[0], list(block.arguments)[1:]))
        return list(op.results)

    def fold(self, extents: Sequence[Extent], inits: Sequence[ir.Value],
             body: Fold) -> list[ir.Value]:
        """Serial loop nest over `extents` (each an extent from 0, or a [start, end) computed
        in the kernel) carrying `inits`; `body(ivs, carried)` -> next."""
        if not extents:
            return body([], list(inits))
        start, end = extents[0] if isinstance(extents[0], tuple) else (None, extents[0])
        op = self._for(start, end, 1, "serial", None, inits)
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

    def less_than(self, value: ir.Value, bound: Dim) -> ir.Value:
        return arith.cmpi(arith.CmpIPredicate.ult, value, self.index(bound))

    def all_of(self, conditions: Sequence[ir.Value]) -> ir.Value | None:
        """The conjunction of `conditions` (and-ed left to right); None when there are none."""
        return functools.reduce(arith.andi, conditions) if conditions else None

    def _for(self, start: ir.Value | None, end: Dim | ir.Value, step: int, kind: str,
             bind: str | None, inits: Sequence[ir.Value]) -> ir.Operation:
        attributes = {"kind": ir.StringAttr.get(kind)}
        if isinstance(end, Expr):  # what the cpu grid of a loop over it is (hextir-to-loops)
            attributes[EXTENT] = ir.StringAttr.get(dims.render(end))
        if bind is not None:
            attributes["bind"] = ir.StringAttr.get(bind)
        op = ir.Operation.create(
            "hextir.for",
            results=[value.type for value in inits],
            operands=[self.index(0) if start is None else start,
                      end if isinstance(end, ir.Value) else self.index(end),
                      self.index(step), *inits],
            attributes=attributes,
            regions=1,
        )
        op.regions[0].blocks.append(self.index_type, *[value.type for value in inits])
        return op


def _buffer_type(shape: Sequence[Dim], element: ir.Type) -> ir.MemRefType:
    """A kernel argument's type: the buffer's static shape, or flat where it is symbolic."""
    if symbolic.is_static(shape):
        return ir.MemRefType.get([d for d in shape if isinstance(d, int)], element)
    return ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], element)


def storage(element: ir.Type) -> ir.Type:
    """How a tensor element lies in a kernel's buffer: as itself, but a bool (i1) as a byte."""
    if isinstance(element, ir.IntegerType) and ir.IntegerType(element).width == 1:
        return ir.IntegerType.get_signless(8)
    return element


def _yield(values: Sequence[ir.Value]) -> None:
    ir.Operation.create("hextir.yield", operands=list(values))
