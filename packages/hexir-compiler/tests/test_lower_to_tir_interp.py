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
}}) {{device = "{DEVICE}", function_type = (memref<40xf32>, memref<40xf32>) -> (),
    hexir.kernel = "mul", hexir.params = array<f64>, sym_name = "k"}} : () -> ()
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
    with pytest.raises(InterpError, match=r"race: .*writes buffer #1"):
        _run(INDEX="%c0")


def test_a_thread_binding_loop_in_a_cpu_kernel_is_refused() -> None:
    with pytest.raises(InterpError, match="a cpu kernel has a thread_binding loop"):
        _run(DEVICE="cpu")


def test_an_op_the_device_lowering_does_not_take_is_refused() -> None:
    with pytest.raises(InterpError, match=r"no semantics for 'math.atan2'"):
        _run(OP="math.atan2")


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
}}) {{device = "cpu", function_type = (memref<4xf64>, memref<1xf64>) -> (),
    hexir.kernel = "reduce_max", hexir.params = array<f64: 0.0, 0.0>, sym_name = "last"}} : () -> ()
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


# out[b*32 + t] = x[b*32 + 31 - t] through the block's shared memory: 2 blocks x 32 threads.
# {STAGE} writes the shared buffer, {SYNC} orders the block, {READ} is the index read back and
# {AFTER} runs after the read.
REVERSE = """\
"hextir.prim_func"() ({{
^bb0(%x: memref<64xf32>, %out: memref<64xf32>):
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %c31 = arith.constant 31 : index
  %c32 = arith.constant 32 : index
  "hextir.for"(%c0, %c2, %c1) ({{
  ^bb0(%b: index):
    %s = "hextir.alloc_buffer"() : () -> memref<32xf32, #gpu.address_space<workgroup>>
    "hextir.for"(%c0, %c32, %c1) ({{
    ^bb0(%t: index):
      %base = arith.muli %b, %c32 : index
      %i = arith.addi %base, %t : index
      %low = arith.cmpi ult, %t, %c16 : index
      %v = "hextir.buffer_load"(%x, %i) : (memref<64xf32>, index) -> f32
      {STAGE}
      {SYNC}
      %r = arith.subi {READ}, %t : index
      %w = "hextir.buffer_load"(%s, %r)
          : (memref<32xf32, #gpu.address_space<workgroup>>, index) -> f32
      "hextir.buffer_store"(%w, %out, %i) : (f32, memref<64xf32>, index) -> ()
      {AFTER}
      "hextir.yield"() : () -> ()
    }}) {{bind = "threadIdx.x", kind = "thread_binding"}} : (index, index, index) -> ()
    "hextir.yield"() : () -> ()
  }}) {{bind = "blockIdx.x", kind = "thread_binding"}} : (index, index, index) -> ()
  "hextir.return"() : () -> ()
}}) {{device = "cuda", function_type = (memref<64xf32>, memref<64xf32>) -> (),
    hexir.kernel = "generic", hexir.params = array<f64>, sym_name = "r"}} : () -> ()
"""
STORE = ('"hextir.buffer_store"(%v, %s, %t) : '
         "(f32, memref<32xf32, #gpu.address_space<workgroup>>, index) -> ()")
BARRIER = '"hextir.barrier"() : () -> ()'
REVERSED = {"STAGE": STORE, "SYNC": BARRIER, "READ": "%c31", "AFTER": ""}


def _guarded(op: str) -> str:
    return f'"hextir.if"(%low) ({{\n {op}\n "hextir.yield"() : () -> ()\n }}) : (i1) -> ()'


def _reverse(**change: str) -> np.ndarray:
    with context():
        module = ir.Module.parse(REVERSE.format(**(REVERSED | change)))
        kernel = Kernel(module.body.operations[0])
        x = np.arange(64, dtype=np.float32)
        out = np.full(64, np.nan, dtype=np.float32)
        kernel(x, out)
        return out


def test_threads_exchange_through_shared_memory_after_a_barrier() -> None:
    expected = np.arange(64, dtype=np.float32).reshape(2, 32)[:, ::-1].reshape(-1)
    np.testing.assert_array_equal(_reverse(), expected)


def test_without_the_barrier_a_thread_reads_what_another_has_not_yet_written() -> None:
    # Thread 0 runs first and reads s[31]: thread 31 has not stored it yet.
    with pytest.raises(InterpError, match=r"reads shared buffer 0\[31\] before any thread"):
        _reverse(SYNC="")


def test_a_write_after_the_barrier_races_with_another_thread_s_read() -> None:
    # Thread 16 reads s[15], which thread 15 rewrites after its own read, in the same phase.
    with pytest.raises(InterpError, match=r"race: .* reads shared buffer 0\[15\] written by "
                                          r".* with no barrier between"):
        _reverse(AFTER=STORE)


def test_a_write_over_what_another_thread_read_in_the_same_phase_races() -> None:
    # Threads 16..31 rewrite s[16..31] after threads 0..15 read them (write after read).
    high = "%high = arith.cmpi uge, %t, %c16 : index"
    later = _guarded(STORE).replace("%low", "%high")
    with pytest.raises(InterpError, match=r"race: .* writes shared buffer 0\[16\] read by "
                                          r".* with no barrier between"):
        _reverse(AFTER=f"{high}\n{later}")


def test_the_same_write_after_a_second_barrier_is_ordered() -> None:
    _reverse(AFTER=f"{BARRIER}\n{STORE}")


def test_a_barrier_that_some_threads_skip_is_divergence() -> None:
    with pytest.raises(InterpError, match="barrier divergence in block"):
        _reverse(AFTER=_guarded(BARRIER))


def test_reading_shared_memory_no_thread_wrote_is_reported() -> None:
    with pytest.raises(InterpError, match=r"reads shared buffer 0.*before any thread wrote it"):
        _reverse(STAGE=_guarded(STORE))


def test_a_shared_buffer_read_out_of_bounds_is_reported() -> None:
    with pytest.raises(InterpError, match=r"shared buffer 0 of shape \(32,\) indexed at \(32,\)"):
        _reverse(READ="%c32")
