"""A test-only interpreter of the `gpu.func` kernels hextir-to-gpu writes, on numpy arrays.

With no GPU on the build machine, this is how the GPU lowering is shown to keep a kernel's
meaning: the kernel is launched as CUDA would (every thread of the grid recorded on its
gpu.module runs the body once, `gpu.block_id` / `gpu.thread_id` give its coordinates) and
its result must equal what `tir_interp` computes from the hextir kernel it came from. The
scalar semantics (arith, math) are tir_interp's own table, so the two can only differ where
the lowering changed the program: loops, guards, indices, buffers, geometry.

A block's threads run in lock step from `gpu.barrier` to `gpu.barrier`, and its workgroup
attributions (the shared buffers) are one array per block; races, divergence at barriers and
reads of unwritten shared memory are found by tir_interp's own rules (`_Launch`,
`lock_step`). Every access is bounds-checked.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from hexir_compiler.mlir import ir
from tir_interp import (
    _CONVERSIONS,
    _SCALAR,
    InterpError,
    StepCompiler,
    Suspends,
    _cmpf,
    _cmpi,
    _constant,
    _conversion,
    _Launch,
    _resume_for,
    _run_all,
    _run_for,
    _Thread,
    resume_all,
    run_block,
    suspends,
)

Step = Callable[["_Thread"], None]
AXES = ("x", "y", "z")
_ELEMENT = {"f32": np.float32, "f64": np.float64, "index": np.int64, "i1": np.bool_,
            "i8": np.int8, "i32": np.int32, "i64": np.int64}


class GpuKernel(StepCompiler):
    """The kernel of one `gpu.module` (after hexir-kernels-to-gpu); call it with one array per
    buffer."""

    def __init__(self, gpu_module: ir.Operation) -> None:
        module = gpu_module.operation
        self.grid = [int(v) for v in module.attributes["hexir.grid"]]
        self.block = [int(v) for v in module.attributes["hexir.block"]]
        func = module.regions[0].blocks[0].operations[0].operation
        if func.name != "gpu.func" or "gpu.kernel" not in func.attributes:
            raise InterpError(f"expected a gpu.func kernel first in the module, got {func.name}")
        self.name = ir.StringAttr(func.attributes["sym_name"]).value
        self._slots: dict[ir.Value, int] = {}
        self._barriers = 0
        entry = func.regions[0].blocks[0]
        count = len(ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value).inputs)
        arguments = list(entry.arguments)
        self._args = [self._slot(a) for a in arguments[:count]]
        self._workgroup = {self._slot(a): (n, ir.MemRefType(a.type))
                           for n, a in enumerate(arguments[count:])}
        self._body = self._compile_block(entry, "gpu.return")

    def __call__(self, *buffers: np.ndarray) -> None:
        launch = _Launch()
        for block in itertools.product(*(range(n) for n in self.grid)):
            shared = {slot: np.full(tuple(t.shape), np.nan, _ELEMENT[str(t.element_type)])
                      for slot, (_, t) in self._workgroup.items()}
            threads = []
            for thread in itertools.product(*(range(n) for n in self.block)):
                t = _Thread(len(self._slots), list(buffers), launch)
                t.coords = {f"block_id {a}": i for a, i in zip(AXES, block, strict=True)}
                t.coords |= {f"thread_id {a}": i for a, i in zip(AXES, thread, strict=True)}
                t.owner, t.block, t.shared = ("thread", block, thread), block, shared
                for slot, buffer in zip(self._args, buffers, strict=True):
                    t.env[slot] = buffer
                for slot, array in shared.items():
                    t.env[slot] = array
                threads.append(t)
            run_block(threads, self._body, block)

    # -- compilation -----------------------------------------------------------------------

    def _compile(self, op: ir.Operation) -> Step:
        name = op.name
        ins = [self._slot(v) for v in op.operands]
        outs = [self._slot(v) for v in op.results]
        if name in ("gpu.block_id", "gpu.thread_id"):
            dim = str(op.attributes["dimension"]).rstrip(">")[-1]
            key, out = f"{name[4:]} {dim}", outs[0]
            return lambda t: t.env.__setitem__(out, t.coords[key])
        if name == "gpu.barrier":
            number = self._barriers
            self._barriers += 1

            def barrier(t: _Thread):
                yield number

            return Suspends(barrier)
        if name == "scf.for":
            return self._compile_for(op, ins, outs)
        if name == "scf.if":
            if len(op.regions[1].blocks) or outs:
                raise InterpError("scf.if with an else branch or results is not written here")
            body = self._compile_block(op.regions[0].blocks[0], "scf.yield")
            cond = ins[0]
            if suspends(body):
                return Suspends(lambda t: resume_all(t, body) if t.env[cond] else iter(()))
            return lambda t: _run_all(t, body) if t.env[cond] else None
        if name in ("memref.load", "memref.store"):
            return self._compile_access(ins, outs, write=name == "memref.store")
        if name == "arith.constant":
            value, out = _constant(op), outs[0]
            return lambda t: t.env.__setitem__(out, value)
        fn = (
            _SCALAR.get(name)
            or (name == "arith.cmpi" and _cmpi(op))
            or (name == "arith.cmpf" and _cmpf(op))
            or (name in _CONVERSIONS and _conversion(op))
        )
        if not fn:
            raise InterpError(f"no semantics for '{name}' in a gpu kernel")
        out = outs[0]
        return lambda t: t.env.__setitem__(out, fn(*(t.env[i] for i in ins)))

    def _compile_for(self, op: ir.Operation, ins: list[int], outs: list[int]) -> Step:
        block = op.regions[0].blocks[0]
        params = [self._slot(a) for a in block.arguments]
        ops = block.operations
        yielded = [self._slot(v) for v in ops[len(ops) - 1].operation.operands]
        body = self._compile_block(block, "scf.yield")
        if suspends(body):
            return Suspends(lambda t: _resume_for(t, ins, outs, params, body, yielded))

        return lambda t: _run_for(t, ins, outs, params, body, yielded, False)

    def _compile_access(self, ins: list[int], outs: list[int], write: bool) -> Step:
        if write:
            value, buffer, *indices = ins
        else:
            (buffer, *indices), (value,) = ins, outs
        shared = buffer in self._workgroup
        if not shared and buffer not in self._args:
            raise InterpError(f"{self.name}: an access to a buffer that is neither an argument "
                              "nor a workgroup attribution")
        number = self._workgroup[buffer][0] if shared else self._args.index(buffer)

        def access(t: _Thread) -> None:
            array = t.env[buffer]
            index = tuple(t.env[i] for i in indices)
            if len(index) != array.ndim or any(
                not 0 <= i < n for i, n in zip(index, array.shape, strict=True)
            ):
                raise InterpError(f"buffer of shape {array.shape} indexed at {index}")
            if shared:
                key = ("shared", number, t.block)
                if not write and (key, index) not in t.launch.writers:
                    raise InterpError(f"{t.owner} reads shared buffer {number}{list(index)} "
                                      "before any thread wrote it")
                t.launch.touch(t, key, index, write)
            else:
                t.launch.touch(t, number, index, write)
            if write:
                array[index] = t.env[value]
            else:
                t.env[value] = array[index]

        return access
