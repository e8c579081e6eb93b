"""The oracle can fail: tir_interp rejects the kernel mistakes a schedule can make.

Hand-written kernels, each wrong in one way (a missing guard, two threads on one element,
a racing parallel loop, an element never written, a binding on the cpu, an op the device
lowering does not take), next to the correct version of the same kernel.
"""

from __future__ import annotations

import numpy as np
import pytest

from hexir_compiler.dialects import context
from hexir_compiler.mlir import ir
from tir_interp import InterpError, Kernel

# out[i] = x[i] * 2 for 40 elements, as 2 blocks x 32 threads; {GUARD} is the bounds check.
COPY = """\
"hextir.prim_func"() ({{
^bb0(%x: memref<40xf32>, %out: memref<40xf32>):
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c32 = arith.constant 32 : index
  %c40 = arith.constant 40 : index
  %c64 = arith.constant 64 : index
  %two = arith.constant 2.0 : f32
  "hextir.for"(%c0, %c2, %c1) ({{
  ^bb0(%b: index):
    "hextir.for"(%c0, %c32, %c1) ({{
    ^bb0(%t: index):
      %base = arith.muli %b, %c32 : index
      %i = arith.addi %base, {INDEX} : index
      %in = arith.cmpi ult, %i, {BOUND} : index
      "hextir.if"(%in) ({{
        %v = "hextir.buffer_load"(%x, %i) : (memref<40xf32>, index) -> f32
        %w = {OP} %v, %two : f32
        "hextir.buffer_store"(%w, %out, %i) : (f32, memref<40xf32>, index) -> ()
        "hextir.yield"() : () -> ()
      }}) : (i1) -> ()
      "hextir.yield"() : () -> ()
    }}) {{bind = "threadIdx.x", kind = "thread_binding"}} : (index, index, index) -> ()
    "hextir.yield"() : () -> ()
  }}) {{bind = "blockIdx.x", kind = "{OUTER}"}} : (index, index, index) -> ()
  "hextir.return"() : () -> ()
}}) {{device = "{DEVICE}", function_type = (memref<40xf32>, memref<40xf32>) -> (), hexir.kernel = "mul", hexir.params = array<f64>, sym_name = "k"}} : () -> ()
"""
GOOD = {
    "INDEX": "%t",
    "BOUND": "%c40",
    "OP": "arith.mulf",
    "OUTER": "thread_binding",
    "DEVICE": "cuda",
}


def _run(**change: str) -> np.ndarray:
    text = COPY.format(**(GOOD | change))
    if change.get("OUTER") == "parallel":  # a parallel loop takes no bind
        text = text.replace('bind = "blockIdx.x", ', "")
    with context():
        module = ir.Module.parse(text)
        kernel = Kernel(module.body.operations[0])
        x = np.arange(40, dtype=np.float32)
        out = np.full(40, np.nan, dtype=np.float32)
        kernel(x, out)
        return out


def test_the_correct_kernel_runs_as_two_blocks_of_32_threads() -> None:
    np.testing.assert_array_equal(_run(), np.arange(40, dtype=np.float32) * 2)


def test_a_guard_too_loose_reads_out_of_bounds() -> None:
    with pytest.raises(InterpError, match=r"buffer #0 of shape \(40,\) indexed at \(40,\)"):
        _run(BOUND="%c64")


def test_an_element_never_written_is_reported() -> None:
    with pytest.raises(InterpError, match="k wrote 32 of the 40 destination elements"):
        _run(BOUND="%c32")


def test_two_threads_on_one_element_race() -> None:
    with pytest.raises(InterpError, match="race: .*writes buffer #1"):
        _run(INDEX="%c0")


def test_a_thread_binding_loop_in_a_cpu_kernel_is_refused() -> None:
    with pytest.raises(InterpError, match="a cpu kernel has a thread_binding loop"):
        _run(DEVICE="cpu")


def test_an_op_the_device_lowering_does_not_take_is_refused() -> None:
    with pytest.raises(InterpError, match="no semantics for 'arith.remf'"):
        _run(OP="arith.remf")


# out[0] = x[i] for every i: fine in order, a race when the loop says parallel.
LAST = """\
"hextir.prim_func"() ({{
^bb0(%x: memref<4xf64>, %out: memref<1xf64>):
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  "hextir.for"(%c0, %c4, %c1) ({{
  ^bb0(%i: index):
    %v = "hextir.buffer_load"(%x, %i) : (memref<4xf64>, index) -> f64
    "hextir.buffer_store"(%v, %out, %c0) : (f64, memref<1xf64>, index) -> ()
    "hextir.yield"() : () -> ()
  }}) {{kind = "{KIND}"}} : (index, index, index) -> ()
  "hextir.return"() : () -> ()
}}) {{device = "cpu", function_type = (memref<4xf64>, memref<1xf64>) -> (), hexir.kernel = "reduce_max", hexir.params = array<f64: 0.0, 0.0>, sym_name = "last"}} : () -> ()
"""


@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_parallel_iterations_on_one_element_race(kind: str) -> None:
    with context():
        module = ir.Module.parse(LAST.format(KIND=kind))
        kernel = Kernel(module.body.operations[0])
        out = np.zeros(1)
        if kind == "serial":
            kernel(np.arange(4.0), out)
            assert out[0] == 3.0
            return
        with pytest.raises(InterpError, match="race"):
            kernel(np.arange(4.0), out)


def test_buffers_must_have_the_kernel_s_shape_and_element_type() -> None:
    with context():
        module = ir.Module.parse(COPY.format(**GOOD))
        kernel = Kernel(module.body.operations[0])
        out = np.zeros(40, dtype=np.float32)
        with pytest.raises(InterpError, match=r"buffer #0 is float32\[39\], the kernel takes"):
            kernel(np.zeros(39, dtype=np.float32), out)
        with pytest.raises(InterpError, match=r"buffer #0 is float64\[40\], the kernel takes"):
            kernel(np.zeros(40), out)
