"""A test-only interpreter of `hextir.prim_func` kernels on numpy arrays.

It gives evidence that a kernel computes the right values *under the schedule it declares*,
with no GPU and no runtime:

- cpu kernels run their loops in order; a `parallel` loop's iterations are owners, and two
  iterations of one parallel loop touching the same output element is a race.
- cuda kernels run as a launch does after `hexir-kernels-to-gpu`: the grid and block are the extents
  of the thread_binding loops (unbound axes 1), and every thread runs the whole body once,
  where a thread_binding loop runs its body once with the induction variable set to the
  thread's block/thread index on that axis. Guards (`hextir.if`) are honoured as written.
- A block's threads run in lock step from barrier to barrier (`hextir.barrier`): each runs
  until it reaches one, and the block moves on when all have. A thread that ends while
  others wait, or threads waiting at different barriers, is an error (divergence). Each
  block has its own shared buffers (`hextir.alloc_buffer`); reading an element of one that
  no thread has written is an error.
- Races: two threads touching one element, one of them writing, conflict unless a barrier of
  their block lies between the two accesses (the same block, different phases). Reads are
  recorded too, so a write after another thread's read in the same phase is a race as
  well as a read after another's write.
- Every access is bounds-checked (numpy would silently wrap a negative index), every op
  must be one the device lowering accepts (hextir, arith, math; on the cpu also the vector
  ops of `KernelBuilder`'s cpu vectors: load, broadcast, from_elements, shuffle, extract, a vector
  being a 1-D numpy array), and floats are computed in the buffers' precision (numpy f32 or
  f64 scalars).

The body is compiled once into closures over a slot array, so a launch of a few thousand
threads over small shapes takes well under a second.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator

import numpy as np

from hexir_compiler.mlir import ir

Step = Callable[["_Thread"], None]
AXES = ("x", "y", "z")


class InterpError(AssertionError):
    """The kernel is wrong: out of bounds, racing, unsupported op, or malformed schedule."""


class _Thread:
    """Per-run state: slot values, the current owner (thread or parallel iterations), and for
    a cuda thread its block's shared buffers and phase (the barriers it has passed)."""

    def __init__(self, size: int, buffers: list[np.ndarray], launch: _Launch) -> None:
        self.env: list = [None] * size
        self.buffers = buffers
        self.launch = launch
        self.coords: dict[str, int] = {}
        self.owner: tuple = ()
        self.block: tuple = ()
        self.phase = 0
        self.shared: dict[int, np.ndarray] = {}


class _Launch:
    """Who wrote, and who has read since, every element touched during one kernel run."""

    def __init__(self) -> None:
        self.writers: dict[tuple, tuple] = {}
        self.readers: dict[tuple, set] = {}
        self.instances = itertools.count()

    def touch(self, t: _Thread, buffer, index: tuple[int, ...], write: bool) -> None:
        key = (buffer, index)
        me = (t.owner, t.block, t.phase)
        previous = self.writers.get(key)
        if previous is not None and _conflict(previous, me):
            what = "writes" if write else "reads"
            raise InterpError(
                f"race: {t.owner} {what} {_name(buffer)}{list(index)} written by {previous[0]}"
                f"{_phases(previous, me)}"
            )
        if write:
            for reader in self.readers.pop(key, ()):
                if _conflict(reader, me):
                    raise InterpError(
                        f"race: {t.owner} writes {_name(buffer)}{list(index)} read by "
                        f"{reader[0]}{_phases(reader, me)}"
                    )
            self.writers[key] = me
        else:
            self.readers.setdefault(key, set()).add(me)


def _name(buffer) -> str:
    return f"buffer #{buffer}" if isinstance(buffer, int) else f"shared buffer {buffer[1]}"


def _phases(a: tuple, b: tuple) -> str:
    return " with no barrier between" if a[1] and a[1] == b[1] else ""


def _conflict(a: tuple, b: tuple) -> bool:
    """Whether accesses `a` and `b` (owner, block, phase) may run in either order."""
    (owner_a, block_a, phase_a), (owner_b, block_b, phase_b) = a, b
    if owner_a and owner_a[0] == "thread":
        return owner_a != owner_b and not (block_a == block_b and phase_a != phase_b)
    for (loop_a, iv_a), (loop_b, iv_b) in zip(owner_a, owner_b, strict=False):
        if loop_a != loop_b:
            return False
        if iv_a != iv_b:
            return True
    return False


class StepCompiler:
    """Turns a block of ops into a list of steps over numbered value slots; the kernel
    interpreters (this one and gpu_interp's) differ only in `_compile`, one op at a time."""

    _slots: dict[ir.Value, int]

    def _compile(self, op: ir.Operation) -> Step:
        raise NotImplementedError

    def _slot(self, value: ir.Value) -> int:
        if value not in self._slots:
            self._slots[value] = len(self._slots)
        return self._slots[value]

    def _compile_block(self, block: ir.Block, terminator: str) -> list[Step]:
        ops = [view.operation for view in block.operations]
        if not ops or ops[-1].name != terminator:
            raise InterpError(f"block does not end with {terminator}")
        return [self._compile(op) for op in ops[:-1]]


class Suspends:
    """A step that may wait at a barrier: a generator function, yielding the barrier's number
    each time the thread reaches one. Steps without barriers inside stay plain functions, so
    a kernel without barriers runs as fast as before."""

    def __init__(self, run: Callable[[_Thread], Iterator[int]]) -> None:
        self.run = run


def suspends(body: list) -> bool:
    return any(type(step) is Suspends for step in body)


def resume_all(t, body: list):
    """Run `body` in thread `t`, suspending at each barrier (a generator)."""
    for step in body:
        if type(step) is Suspends:
            yield from step.run(t)
        else:
            step(t)


def run_block(threads: list, body: list, block: tuple) -> None:
    """Run one block's `threads` through `body`: one after another when it has no barrier,
    in lock step (`lock_step`) when it has."""
    with np.errstate(all="ignore"):
        if suspends(body):
            lock_step(threads, body, block)
        else:
            for t in threads:
                _run_all(t, body)


def lock_step(threads: list, body: list, block: tuple) -> None:
    """Run a block's `threads` through `body` from barrier to barrier, in lock step."""
    runs = [(t, resume_all(t, body)) for t in threads]
    while runs:
        waiting, finished = [], []
        for t, run in runs:
            try:
                waiting.append((t, run, next(run)))
            except StopIteration:
                finished.append(t)
        if waiting and finished:
            raise InterpError(
                f"barrier divergence in block {block}: thread {finished[0].owner} ended while "
                f"thread {waiting[0][0].owner} waits at barrier #{waiting[0][2]}"
            )
        barriers = sorted({at for _, _, at in waiting})
        if len(barriers) > 1:
            raise InterpError(f"barrier divergence in block {block}: threads wait at barriers "
                              f"{', '.join(f'#{b}' for b in barriers)}")
        for t, _, _ in waiting:
            t.phase += 1
        runs = [(t, run) for t, run, _ in waiting]


class Kernel(StepCompiler):
    """A compiled prim_func; call it with one array per buffer (the last is written)."""

    def __init__(self, prim_func: ir.Operation) -> None:
        self.op = prim_func.operation
        attrs = self.op.attributes
        self.name = ir.StringAttr(attrs["sym_name"]).value
        self.device = ir.StringAttr(attrs["device"]).value
        self.kind = ir.StringAttr(attrs["hexir.kernel"]).value
        self.params = [float(p) for p in ir.DenseF64ArrayAttr(attrs["hexir.params"])]
        self.grid = [1, 1, 1]
        self.block = [1, 1, 1]
        self._bound: set[str] = set()
        self._slots: dict[ir.Value, int] = {}
        entry = self.op.regions[0].blocks[0]
        #: a kernel of symbolic sizes: the symbols whose values follow its buffers
        self.symbols = [ir.StringAttr(n).value for n in attrs["hexir.symbols"]] \
            if "hexir.symbols" in attrs else []
        arguments = list(entry.arguments)
        buffers = arguments[:len(arguments) - len(self.symbols)]
        self._args = [self._slot(a) for a in buffers]
        self._size_args = [self._slot(a) for a in arguments[len(buffers):]]
        self._buffer_types = {
            slot: a.type for slot, a in zip(self._args, buffers, strict=True)
        }
        self._views: dict[int, int] = {}  # a reinterpret_cast's result -> the flat argument
        self._stored = self._stored_buffers()
        self._shared: dict[int, int] = {}  # alloc_buffer result slot -> its number
        self._barriers = 0
        self._body = self._compile_block(entry, terminator="hextir.return")

    def _stored_buffers(self) -> set[int]:
        stored: set[int] = set()

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name in ("hextir.buffer_store", "vector.store"):
                stored.add(self._slot(op.operands[1]))
            return ir.WalkResult.ADVANCE

        self.op.walk(visit)
        return stored

    @property
    def threads(self) -> int:
        return math.prod(self.grid) * math.prod(self.block)

    def __call__(self, *buffers: np.ndarray, sizes: dict[str, int] | None = None) -> None:
        """Run the kernel on `buffers` (in their own shapes; a kernel of symbolic sizes takes
        each flat, as its calling convention does, and the symbols' values `sizes`)."""
        if len(buffers) != len(self._args):
            raise InterpError(f"{self.name} takes {len(self._args)} buffers, got {len(buffers)}")
        missing = set(self.symbols) - set(sizes or {})
        if missing:
            raise InterpError(f"{self.name} takes the sizes {self.symbols}; missing {missing}")
        self._given = [int((sizes or {})[n]) for n in self.symbols]
        flat = []
        for number, (slot, array) in enumerate(zip(self._args, buffers, strict=True)):
            memref = ir.MemRefType(self._buffer_types[slot])
            if (
                (array.shape != tuple(memref.shape) and memref.has_static_shape)
                or array.dtype != {**_FLOAT, **_INT}[str(memref.element_type)]
            ):
                found = f"{array.dtype}{list(array.shape)}"
                raise InterpError(f"buffer #{number} is {found}, the kernel takes {memref}")
            if not memref.has_static_shape and not array.flags.c_contiguous:
                raise InterpError(f"buffer #{number} must be C-contiguous (it is passed flat)")
            flat.append(array if memref.has_static_shape else array.reshape(-1))
        buffers = tuple(flat)
        launch = _Launch()
        if self.device == "cpu":
            self._run(list(buffers), launch, {}, ())
        else:
            self._launch(list(buffers), launch)
        destination = len(buffers) - 1
        written = sum(1 for number, _ in launch.writers if number == destination)
        if written != buffers[-1].size:
            raise InterpError(
                f"{self.name} wrote {written} of the {buffers[-1].size} destination elements"
            )

    def _launch(self, buffers: list[np.ndarray], launch: _Launch) -> None:
        for block in itertools.product(*(range(n) for n in reversed(self.grid))):
            shared: dict[int, np.ndarray] = {}
            threads = []
            for thread in itertools.product(*(range(n) for n in reversed(self.block))):
                coords = {f"blockIdx.{a}": i for a, i in zip(AXES, reversed(block), strict=True)}
                coords |= {f"threadIdx.{a}": i for a, i in zip(AXES, reversed(thread), strict=True)}
                t = self._thread(buffers, launch, coords, ("thread", block, thread))
                t.block, t.shared = block, shared
                threads.append(t)
            run_block(threads, self._body, block)

    def _run(self, buffers, launch, coords, owner) -> None:
        t = self._thread(buffers, launch, coords, owner)
        with np.errstate(all="ignore"):
            _run_all(t, self._body)

    def _thread(self, buffers, launch, coords, owner) -> _Thread:
        t = _Thread(len(self._slots), buffers, launch)
        t.coords, t.owner = coords, owner
        for slot, buffer in zip(self._args, buffers, strict=True):
            t.env[slot] = buffer
        for slot, value in zip(self._size_args, self._given, strict=True):
            t.env[slot] = value
        return t

    # -- compilation -----------------------------------------------------------------------

    def _compile(self, op: ir.Operation) -> Step:
        name = op.name
        ins = [self._slot(v) for v in op.operands]
        outs = [self._slot(v) for v in op.results]
        if name == "hextir.for":
            return self._compile_for(op, ins, outs)
        if name == "hextir.if":
            body = self._compile_block(op.regions[0].blocks[0], "hextir.yield")
            if suspends(body):
                return Suspends(lambda t: resume_all(t, body) if t.env[ins[0]] else iter(()))
            return lambda t: _run_if(t, ins[0], body)
        if name == "hextir.barrier":
            return self._compile_barrier()
        if name == "hextir.alloc_buffer":
            return self._compile_alloc(op, outs[0])
        if name in ("hextir.buffer_load", "hextir.buffer_store"):
            return self._compile_access(op, ins, outs)
        if name.startswith("vector."):
            return self._compile_vector(op, ins, outs)
        if name == "memref.reinterpret_cast":
            return self._compile_view(op, ins, outs[0])
        if name == "memref.prefetch":
            return self._compile_prefetch(ins)
        if name == "arith.constant":
            value = _constant(op)
            out = outs[0]
            return lambda t: t.env.__setitem__(out, value)
        fn = (
            _SCALAR.get(name)
            or (name == "arith.cmpi" and _cmpi(op))
            or (name == "arith.cmpf" and _cmpf(op))
            or (name in _CONVERSIONS and _conversion(op))
        )
        if not fn:
            raise InterpError(f"no semantics for '{name}' (not an op the device lowering takes)")
        out = outs[0]
        if len(ins) == 1:
            a = ins[0]
            return lambda t: t.env.__setitem__(out, fn(t.env[a]))
        if len(ins) == 2:
            a, b = ins
            return lambda t: t.env.__setitem__(out, fn(t.env[a], t.env[b]))
        a, b, c = ins
        return lambda t: t.env.__setitem__(out, fn(t.env[a], t.env[b], t.env[c]))

    def _compile_for(self, op: ir.Operation, ins: list[int], outs: list[int]) -> Step:
        kind = ir.StringAttr(op.attributes["kind"]).value
        block = op.regions[0].blocks[0]
        params = [self._slot(a) for a in block.arguments]
        yielded = [self._slot(v) for v in _last(block).operands]
        body = self._compile_block(block, "hextir.yield")
        if kind != "thread_binding":
            if suspends(body):
                if kind == "parallel":
                    raise InterpError(f"{self.name}: a barrier inside a parallel loop")
                return Suspends(lambda t: _resume_for(t, ins, outs, params, body, yielded))
            return lambda t: _run_for(t, ins, outs, params, body, yielded, kind == "parallel")
        if self.device != "cuda":
            raise InterpError(f"{self.name}: a {self.device} kernel has a thread_binding loop")
        axis = ir.StringAttr(op.attributes["bind"]).value
        lb, ub, step = (_constant_operand(op, i) for i in range(3))
        if len(ins) != 3 or (lb, step) != (0, 1) or ub <= 0 or axis in self._bound:
            raise InterpError(f"{self.name}: malformed thread_binding loop on {axis}")
        self._bound.add(axis)
        kind_, _, dim = axis.partition(".")
        (self.grid if kind_ == "blockIdx" else self.block)[AXES.index(dim)] = ub
        iv = params[0]

        if suspends(body):
            def resume_bound(t: _Thread):
                t.env[iv] = t.coords[axis]
                yield from resume_all(t, body)

            return Suspends(resume_bound)

        def bound(t: _Thread) -> None:
            t.env[iv] = t.coords[axis]
            _run_all(t, body)

        return bound

    def _compile_barrier(self) -> Suspends:
        if self.device != "cuda":
            raise InterpError(f"{self.name}: a {self.device} kernel has a barrier")
        number = self._barriers
        self._barriers += 1

        def barrier(t: _Thread):
            yield number

        return Suspends(barrier)

    def _compile_alloc(self, op: ir.Operation, out: int) -> Step:
        """The block's shared buffer: made by the first of its threads to get here, filled
        with garbage (NaN, or a pattern) so that a read of what no thread wrote shows."""
        if self.device != "cuda":
            raise InterpError(f"{self.name}: a {self.device} kernel allocates shared memory")
        memref = ir.MemRefType(op.results[0].type)
        shape, dtype = tuple(memref.shape), {**_FLOAT, **_INT}[str(memref.element_type)]
        self._buffer_types[out] = memref
        self._shared[out] = len(self._shared)

        def alloc(t: _Thread) -> None:
            if out not in t.shared:
                garbage = np.nan if np.issubdtype(dtype, np.floating) else 0x5A
                t.shared[out] = np.full(shape, garbage, dtype)
            t.env[out] = t.shared[out]

        return alloc

    def _compile_vector(self, op: ir.Operation, ins: list[int], outs: list[int]) -> Step:
        """The cpu vector ops: a load of `lanes` elements along the innermost axis (bounds-
        checked, recorded as reads of each), a broadcast, a vector of scalars, a shuffle, a
        lane."""
        if self.device != "cpu":
            raise InterpError(f"{self.name}: a {self.device} kernel has '{op.name}'")
        if op.name == "vector.store":
            return self._vector_store(op, ins)
        out = outs[0]
        if op.name == "vector.broadcast":
            lanes, (a,) = ir.VectorType(op.results[0].type).shape[0], ins
            return lambda t: t.env.__setitem__(out, np.full(lanes, t.env[a]))
        if op.name == "vector.from_elements":
            return lambda t: t.env.__setitem__(out, np.array([t.env[i] for i in ins]))
        if op.name == "vector.shuffle":
            mask = list(ir.DenseI64ArrayAttr(op.attributes["mask"]))
            a, b = ins
            return lambda t: t.env.__setitem__(out, np.concatenate([t.env[a], t.env[b]])[mask])
        if op.name == "vector.extract":
            position = list(ir.DenseI64ArrayAttr(op.attributes["static_position"]))
            if len(ins) != 1 or len(position) != 1:
                raise InterpError(f"{self.name}: vector.extract of one static lane only")
            lane, (a,) = position[0], ins
            return lambda t: t.env.__setitem__(out, t.env[a][lane])
        if op.name == "vector.constant_mask":  # the first n lanes set
            lanes = ir.VectorType(op.results[0].type).shape[0]
            (n,) = list(ir.DenseI64ArrayAttr(op.attributes["mask_dim_sizes"]))
            return lambda t: t.env.__setitem__(out, np.arange(lanes) < n)
        if op.name == "vector.maskedload":
            return self._masked_load(op, ins, out)
        if op.name != "vector.load":
            raise InterpError(f"no semantics for '{op.name}' (not an op the cpu lowering takes)")
        buffer, *indices = ins
        number, fixed = self._buffer(buffer, "a vector load from")
        lanes = ir.VectorType(op.results[0].type).shape[0]
        tracked = buffer in self._stored

        def load(t: _Thread) -> None:
            shape = fixed if fixed is not None else t.env[buffer].shape
            index = tuple([t.env[i] for i in indices])
            if len(index) != len(shape) or not all(
                    0 <= i < n for i, n in zip(index, shape, strict=True)) \
                    or index[-1] + lanes > shape[-1]:
                raise InterpError(f"buffer #{number} of shape {shape}: {lanes} lanes from "
                                  f"{index}")
            row = t.env[buffer][index[:-1]]
            if tracked:
                for i in range(index[-1], index[-1] + lanes):
                    t.launch.touch(t, number, (*index[:-1], i), False)
            t.env[out] = row[index[-1]:index[-1] + lanes].copy()

        return load

    def _vector_store(self, op: ir.Operation, ins: list[int]) -> Step:
        """vector.store: the lanes written along the innermost axis from the indices, every
        one bounds-checked and recorded as a write."""
        value, buffer, *indices = ins
        number, fixed = self._buffer(buffer, "a vector store to")
        lanes = ir.VectorType(op.operands[0].type).shape[0]

        def store(t: _Thread) -> None:
            shape = fixed if fixed is not None else t.env[buffer].shape
            index = tuple([t.env[i] for i in indices])
            if len(index) != len(shape) or not all(
                    0 <= i < n for i, n in zip(index, shape, strict=True)) \
                    or index[-1] + lanes > shape[-1]:
                raise InterpError(f"buffer #{number} of shape {shape}: {lanes} lanes stored "
                                  f"at {index}")
            for i in range(index[-1], index[-1] + lanes):
                t.launch.touch(t, number, (*index[:-1], i), True)
            t.env[buffer][index[:-1]][index[-1]:index[-1] + lanes] = t.env[value]

        return store

    def _masked_load(self, op: ir.Operation, ins: list[int], out: int) -> Step:
        """vector.maskedload: the set lanes read from the buffer (each bounds-checked and
        recorded), the others taken from the pass-through vector."""
        buffer, *indices, mask, passthru = ins
        number, fixed = self._buffer(buffer, "a vector load from")
        tracked = buffer in self._stored

        def load(t: _Thread) -> None:
            shape = fixed if fixed is not None else t.env[buffer].shape
            index = tuple([t.env[i] for i in indices])
            value = np.array(t.env[passthru]).copy()
            for lane in np.flatnonzero(t.env[mask]):
                at = (*index[:-1], index[-1] + lane)
                if len(at) != len(shape) or not all(0 <= i < n for i, n in zip(at, shape,
                                                                                strict=True)):
                    raise InterpError(f"buffer #{number} of shape {shape}: masked lane {lane} "
                                      f"at {at}")
                if tracked:
                    t.launch.touch(t, number, at, False)
                value[lane] = t.env[buffer][at]
            t.env[out] = value

        return load

    def _compile_view(self, op: ir.Operation, ins: list[int], out: int) -> Step:
        """memref.reinterpret_cast: a flat argument seen in its whole shape (a kernel of
        symbolic sizes); the view must lie inside the argument's elements."""
        source, *dynamic = ins
        if source not in self._args:
            raise InterpError(f"{self.name}: a view of a buffer that is not an argument")
        self._views[out] = source
        marker = ir.ShapedType.get_dynamic_size()
        static_sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
        static_strides = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
        if list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"])) != [0]:
            raise InterpError(f"{self.name}: a view at an offset")
        stride_marker = ir.ShapedType.get_dynamic_stride_or_offset()

        def view(t: _Thread) -> None:
            given = iter(t.env[i] for i in dynamic)
            shape = [next(given) if d == marker else d for d in static_sizes]
            strides = [next(given) if d == stride_marker else d for d in static_strides]
            flat = t.env[source]
            if any(n < 0 for n in shape) or (
                    all(shape) and sum((n - 1) * k for n, k in zip(shape, strides,
                                                                    strict=True)) >= flat.size):
                raise InterpError(f"a view {shape} (strides {strides}) of buffer "
                                  f"#{self._args.index(source)}, {flat.size} elements")
            t.env[out] = np.lib.stride_tricks.as_strided(
                flat, shape, [k * flat.itemsize for k in strides])

        return view

    def _buffer(self, slot: int, what: str) -> tuple[int, tuple[int, ...] | None]:
        """The argument number of a buffer a kernel accesses, and its static shape (None: a
        view, whose shape the call's sizes give)."""
        if slot in self._views:
            return self._args.index(self._views[slot]), None
        if slot not in self._args:
            raise InterpError(f"{self.name}: {what} a buffer that is not an argument")
        return self._args.index(slot), tuple(ir.MemRefType(self._buffer_types[slot]).shape)

    def _compile_prefetch(self, ins: list[int]) -> Step:
        """A prefetch: no effect on the results, but its element must be in the buffer (the
        kernels prefetch only what a later step of theirs reads)."""
        buffer, *indices = ins
        number, fixed = self._buffer(buffer, "a prefetch from")

        def prefetch(t: _Thread) -> None:
            shape = fixed if fixed is not None else t.env[buffer].shape
            index = tuple([t.env[i] for i in indices])
            if len(index) != len(shape) or \
                    not all(0 <= i < n for i, n in zip(index, shape, strict=True)):
                raise InterpError(f"buffer #{number} of shape {shape} prefetched at {index}")

        return prefetch

    def _compile_access(self, op: ir.Operation, ins: list[int], outs: list[int]) -> Step:
        write = op.name == "hextir.buffer_store"
        if write:
            value, buffer, *indices = ins
        else:
            (buffer, *indices), (value,) = ins, outs
        shared = self._shared.get(buffer)
        if buffer not in self._args and buffer not in self._views and shared is None:
            raise InterpError(f"{self.name}: an access to a buffer that is neither an argument "
                              "nor a shared buffer allocated before it")
        number, fixed = self._buffer(buffer, "an access to") if shared is None else \
            (shared, tuple(ir.MemRefType(self._buffer_types[buffer]).shape))
        label = f"buffer #{number}" if shared is None else f"shared buffer {shared}"
        rank = ir.MemRefType(op.operands[1 if write else 0].type).rank
        if len(indices) != rank:
            raise InterpError(f"{label} of rank {rank} takes {rank} indices")
        # Reading a buffer this kernel never writes cannot race: only those reads go unrecorded.
        tracked = write or buffer in self._stored or shared is not None

        def access(t: _Thread) -> None:
            env = t.env
            shape = fixed if fixed is not None else env[buffer].shape
            index = tuple([env[i] for i in indices])
            for i, n in zip(index, shape, strict=True):
                if not 0 <= i < n:
                    raise InterpError(f"{label} of shape {shape} indexed at {index}")
            if shared is not None:
                key = ("shared", number, t.block)
                if not write and (key, index) not in t.launch.writers:
                    raise InterpError(f"{t.owner} reads {label}{list(index)} before any thread "
                                      "wrote it (a missing barrier, or a skipped write)")
                t.launch.touch(t, key, index, write)
            elif tracked:
                t.launch.touch(t, number, index, write)
            if write:
                env[buffer][index] = env[value]
            else:
                env[value] = env[buffer][index]

        return access


def _run_all(t: _Thread, body: list[Step]) -> None:
    for step in body:
        step(t)


def _run_if(t: _Thread, cond: int, body: list[Step]) -> None:
    if t.env[cond]:
        _run_all(t, body)


def _resume_for(t, ins, outs, params, body, yielded):
    """A serial loop with a barrier inside (a generator, like resume_all)."""
    lb, ub, step, *carried = (t.env[i] for i in ins)
    for iv in range(lb, ub, step):
        t.env[params[0]] = iv
        for slot, value in zip(params[1:], carried, strict=True):
            t.env[slot] = value
        yield from resume_all(t, body)
        carried = [t.env[i] for i in yielded]
    for slot, value in zip(outs, carried, strict=True):
        t.env[slot] = value


def _run_for(t, ins, outs, params, body, yielded, parallel: bool) -> None:
    lb, ub, step, *carried = (t.env[i] for i in ins)
    instance = next(t.launch.instances) if parallel else None
    owner = t.owner
    for iv in range(lb, ub, step):
        if parallel:
            t.owner = (*owner, (instance, iv))
        t.env[params[0]] = iv
        for slot, value in zip(params[1:], carried, strict=True):
            t.env[slot] = value
        _run_all(t, body)
        carried = [t.env[i] for i in yielded]
    t.owner = owner
    for slot, value in zip(outs, carried, strict=True):
        t.env[slot] = value


def _last(block: ir.Block) -> ir.Operation:
    ops = block.operations
    return ops[len(ops) - 1].operation


def _constant(op: ir.Operation):
    attr = op.attributes["value"]
    type_ = op.results[0].type
    if isinstance(type_, ir.IndexType):
        return int(ir.IntegerAttr(attr).value)
    if isinstance(type_, ir.IntegerType) and ir.IntegerType(type_).width == 1:
        return bool(ir.IntegerAttr(attr).value)
    if isinstance(type_, ir.IntegerType):
        return _INT[str(type_)](ir.IntegerAttr(attr).value)
    return _FLOAT[str(type_)](ir.FloatAttr(attr).value)


def _constant_operand(op: ir.Operation, i: int) -> int:
    owner = op.operands[i].owner
    owner = owner.operation if isinstance(owner, ir.OpView) else owner
    if not isinstance(owner, ir.Operation) or owner.name != "arith.constant":
        raise InterpError("a thread_binding loop needs constant bounds")
    return int(ir.IntegerAttr(owner.attributes["value"]).value)


_FLOAT = {"f32": np.float32, "f64": np.float64}
_INT = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64}
#: The numpy type of a bitcast's operand, by its MLIR type.
_BITS = {"f16": np.float16, "f32": np.float32, "f64": np.float64, **_INT}
_CMPI = {0: "eq", 1: "ne", 2: "lt", 3: "le", 4: "gt", 5: "ge", 6: "lt", 7: "le", 8: "gt", 9: "ge"}
_COMPARE = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}
# Ordered float predicates (false when either side is NaN), by arith.cmpf's numbering.
_CMPF = {1: "eq", 2: "gt", 3: "ge", 4: "lt", 5: "le", 6: "ne"}
_UNE = 13  # unordered or not equal: true when either side is NaN
_UNO = 14  # unordered: true when either side is NaN


def _cmpi(op: ir.Operation):
    return _COMPARE[_CMPI[ir.IntegerAttr(op.attributes["predicate"]).value]]


def _cmpf(op: ir.Operation):
    predicate = ir.IntegerAttr(op.attributes["predicate"]).value
    if predicate == _UNE:
        return lambda a, b: bool(np.isnan(a) or np.isnan(b) or a != b)
    if predicate == _UNO:
        return lambda a, b: bool(np.isnan(a) or np.isnan(b))
    if predicate not in _CMPF:
        raise InterpError(f"arith.cmpf predicate {predicate} is not supported here")
    compare = _COMPARE[_CMPF[predicate]]
    return lambda a, b: bool(not (np.isnan(a) or np.isnan(b)) and compare(a, b))


def _erf(x):
    """erf of a scalar, or of each lane of a vector (an epilogue on a register of columns)."""
    if isinstance(x, np.ndarray) and x.ndim:
        return np.array([math.erf(float(v)) for v in x.reshape(-1)],
                        x.dtype).reshape(x.shape)
    return type(x)(math.erf(float(x)))


def _unsigned(fn, a: int, b: int) -> int:
    if a < 0 or b < 0:
        raise InterpError(f"unsigned op on a negative index {a}, {b}")
    return fn(a, b)


def _divui(a: int, b: int) -> int:
    if b == 0 or a < 0:
        raise InterpError(f"arith.divui {a} / {b}")
    return a // b


def _remui(a: int, b: int) -> int:
    if b == 0 or a < 0:
        raise InterpError(f"arith.remui {a} % {b}")
    return a % b


def _divsi(a, b):
    """Signed division truncating toward zero; the hardware traps on / 0 and MIN / -1."""
    if b == 0 or (b == -1 and a == np.iinfo(type(a)).min):
        raise InterpError(f"arith.divsi {a} / {b} traps")
    q = abs(int(a)) // abs(int(b))
    return type(a)(q if (a < 0) == (b < 0) else -q)


def _remsi(a, b):
    """The remainder of `_divsi`, the sign of the dividend; traps where division does."""
    if b == 0 or (b == -1 and a == np.iinfo(type(a)).min):
        raise InterpError(f"arith.remsi {a} % {b} traps")
    return np.fmod(a, b)


def _int_op(fn):
    """An integer op in the operands' width, wrapping as the hardware does."""
    def run(*xs):
        with np.errstate(over="ignore"):
            return fn(*xs)
    return run


# Conversions: the result type decides the value's numpy type.
_CONVERSIONS = {"arith.bitcast", "arith.extsi", "arith.extui", "arith.trunci", "arith.sitofp",
                "arith.uitofp", "arith.fptosi", "arith.extf", "arith.truncf", "arith.index_cast"}


def _conversion(op: ir.Operation):
    to = op.results[0].type
    name = op.name
    if isinstance(to, ir.IndexType):
        return int
    text = str(to)
    if text == "i1":
        return bool
    cast = _INT.get(text) or _FLOAT[text]
    if name == "arith.fptosi":
        def fptosi(x):
            if not np.isfinite(x) or not np.iinfo(cast).min <= x <= np.iinfo(cast).max:
                raise InterpError(f"arith.fptosi of {x} to {text} is poison")
            return cast(math.trunc(float(x)))
        return fptosi
    if name == "arith.bitcast":  # the same bits, read as the result type
        return lambda x: np.array(x, _BITS[str(op.operands[0].type)]).view(cast)[()]
    if name == "arith.extui":
        return lambda x: cast(int(x) & ((1 << ir.IntegerType(op.operands[0].type).width) - 1))
    if name == "arith.trunci":
        return lambda x: np.array(int(x)).astype(np.int64).astype(cast)[()]
    if name == "arith.uitofp":
        return lambda x: cast(int(x) & ((1 << ir.IntegerType(op.operands[0].type).width) - 1))
    return lambda x: cast(x)


def _fma(a, b, c):
    """a * b + c rounded once (f32 through f64, where the product is exact)."""
    if isinstance(a, np.float32):
        return np.float32(np.float64(a) * np.float64(b) + np.float64(c))
    return a * b + c


def _floordivsi(a, b):
    if b == 0:
        raise InterpError(f"arith.floordivsi {a} / {b} traps")
    return type(a)(int(a) // int(b))


def _ceildivsi(a, b):
    if b == 0:
        raise InterpError(f"arith.ceildivsi {a} / {b} traps")
    return type(a)(-(-int(a) // int(b)))


_SCALAR: dict[str, Callable] = {
    "math.fma": _fma,
    "arith.divsi": _divsi,
    "arith.floordivsi": _floordivsi,
    "arith.ceildivsi": _ceildivsi,
    "arith.maxsi": lambda a, b: max(a, b),
    "arith.minsi": lambda a, b: min(a, b),
    "arith.minui": lambda a, b: _unsigned(min, a, b),
    "math.absi": _int_op(lambda a: type(a)(abs(a)) if not isinstance(a, int) else abs(a)),
    "math.log": np.log,
    "math.powf": np.power,
    "arith.addi": _int_op(lambda a, b: a + b),
    "arith.subi": _int_op(lambda a, b: a - b),
    "arith.muli": _int_op(lambda a, b: a * b),
    "arith.divui": _divui,
    "arith.remui": _remui,
    "arith.remsi": _remsi,
    "arith.andi": lambda a, b: a & b,  # on integers bitwise, on i1 (Python bools) logical
    "arith.ori": lambda a, b: a | b,
    "arith.xori": lambda a, b: a ^ b,
    "arith.select": lambda c, a, b: a if c else b,
    "arith.addf": lambda a, b: a + b,
    "arith.subf": lambda a, b: a - b,
    "arith.mulf": lambda a, b: a * b,
    "arith.divf": lambda a, b: a / b,
    "arith.maximumf": lambda a, b: np.maximum(a, b),
    "arith.minimumf": lambda a, b: np.minimum(a, b),
    "arith.negf": lambda a: -a,
    "math.absf": np.abs,
    "math.exp": np.exp,
    "math.tanh": np.tanh,
    "math.sqrt": np.sqrt,
    "math.erf": _erf,
    "arith.remf": np.fmod,
    "math.floor": np.floor,
    "math.ceil": np.ceil,
    "math.roundeven": np.rint,  # halves to even
    "math.sin": np.sin,
    "math.cos": np.cos,
    "math.tan": np.tan,
    "math.asin": np.arcsin,
    "math.acos": np.arccos,
    "math.atan": np.arctan,
    "math.sinh": np.sinh,
    "math.cosh": np.cosh,
    "math.asinh": np.arcsinh,
    "math.acosh": np.arccosh,
    "math.atanh": np.arctanh,
}
