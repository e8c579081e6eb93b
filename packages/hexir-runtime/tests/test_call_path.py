"""The call path: an entry is made into bound steps once per load, and a call runs in an
arena of buffers kept between calls, so a steady call allocates, zeroes and frees nothing;
calls in flight at once each have their own arena, with the answers of single calls."""

from __future__ import annotations

import io
import re
import threading
from dataclasses import replace

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
import modules
from conftest import FIXTURES
from hexir_format import Command, Device, Executable, Function, KernelKind, Slot
from hexir_runtime import api
from hexir_runtime.cli import main as hexir_run
from hexir_runtime.hal import cpu


def test_a_steady_call_allocates_nothing(monkeypatch):
    allocations = []
    original = cpu.CpuDevice._allocate

    def counting(self, *args):
        allocations.append(args)
        return original(self, *args)

    monkeypatch.setattr(cpu.CpuDevice, "_allocate", counting)
    with hr.load(FIXTURES / "mlp-f32.hxb") as m:
        x = np.load(FIXTURES / "mlp-f32.npz")["input_0"]
        first = m.main(x)
        made = len(allocations)
        for _ in range(5):
            np.testing.assert_array_equal(m.main(x), first)
    assert made > 0 and len(allocations) == made  # the arena, made by the first call only


def test_the_common_call_skips_the_general_checks_with_the_same_answers(monkeypatch):
    """Exact numpy inputs go straight to the steps (`EntryPoint._plain`); anything else, here
    a Fortran-ordered copy, still takes the general path, and both agree bit for bit."""
    checked = []
    original = api.check_inputs
    monkeypatch.setattr(api, "check_inputs", lambda *a: checked.append(a) or original(*a))
    with hr.load(FIXTURES / "mlp-f32.hxb") as m:
        x = np.load(FIXTURES / "mlp-f32.npz")["input_0"]
        plain = m.main(x)
        assert not checked
        fortran = np.asfortranarray(x)
        assert not fortran.flags.c_contiguous
        np.testing.assert_array_equal(m.main(fortran), plain)
        assert len(checked) == 1
        np.testing.assert_array_equal(m.execute("main", [x]).outputs[0], plain)


def test_eight_threads_give_the_answers_of_single_calls():
    rng = np.random.default_rng(3)
    with hr.load(FIXTURES / "transformer_block-f32.hxb") as m:
        (t,) = m.main.signature.inputs
        xs = [rng.standard_normal(t.shape).astype(np.float32) for _ in range(8)]
        want = [m.main(x) for x in xs]
        got: dict[int, list[np.ndarray]] = {i: [] for i in range(8)}

        def worker(i: int) -> None:
            for _ in range(200):
                got[i].append(m.main(xs[i]))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        arenas = len(m._resident.programs["main"]._arenas)
    for i in range(8):
        assert len(got[i]) == 200
        for y in got[i]:
            np.testing.assert_array_equal(y, want[i])
    assert 1 <= arenas <= 8  # at most one per call in flight


def test_a_buffer_read_before_it_is_written_is_zeroed_every_call(tmp_path):
    """Kernel add reads slot 1 before relu writes it: without zeroing, the second call would
    add the first call's relu. (The compiler never writes such a module.)"""
    m2 = hf.TensorType(hf.DType.F64, (2, 2))
    commands = (Command.input(0, 0), Command.alloc(1, 32), Command.alloc(2, 32),
                Command.dispatch(0, (0, 1, 2)), Command.dispatch(1, (0, 1)),
                Command.output(2, 0))
    exes = (Executable("add_0", KernelKind.ADD, Device.CPU, (m2, m2, m2)),
            Executable("relu_1", KernelKind.RELU, Device.CPU, (m2, m2)))
    path = modules.write(tmp_path, "stale.hxb", hf.Module(
        4, (Function("main", commands),), b"", exes, (Slot(Device.CPU, m2),) * 3))
    x = np.arange(4.0).reshape(2, 2)
    with hr.load(path) as m:
        for _ in range(3):
            np.testing.assert_array_equal(m.main(x), x)


def _reads_its_destination_first() -> bytes:
    """The transformer block with one operand rewired in every level's variant: the first
    dispatch (after the first ten commands) with an input of its destination's type reads
    its own destination there instead, before anything wrote it."""
    module = hf.parse((FIXTURES / "transformer_block-f32.hxb").read_bytes())
    variants = []
    for f in module.functions:
        commands = list(f.commands)
        i, j = next((i, j) for i, c in enumerate(commands) if i > 10 and c.op is hf.Op.DISPATCH
                    for j, slot in enumerate(c.slots[:-1])
                    if module.slots[slot].type == module.slots[c.slots[-1]].type)
        c = commands[i]
        slots = list(c.slots)
        slots[j] = slots[-1]
        commands[i] = Command.dispatch(c.executable, slots)
        variants.append(replace(f, commands=tuple(commands)))
    return hf.build(replace(module, functions=tuple(variants)))


def test_a_kernel_that_reads_its_own_destination_first_sees_zeros_every_call():
    """No call sees another's data, nor the bytes of a buffer that died earlier in the call:
    the answer is the same on a fresh load, after a call with other inputs, and without the
    memory plan (where the destination has bytes of its own)."""
    damaged = _reads_its_destination_first()
    unplanned = hf.build(replace(hf.parse(damaged), placements=()))
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal((2, 16, 64)).astype(np.float32) for _ in range(2))
    with hr.load(damaged) as m:
        first = m.main(a)
        m.main(b)
        np.testing.assert_array_equal(m.main(a), first)
    with hr.load(unplanned) as m:
        m.main(b)
        np.testing.assert_array_equal(m.main(a), first)


def test_benchmark_times_calls_and_prints_min_median_max():
    out, err = io.StringIO(), io.StringIO()
    code = hexir_run([str(FIXTURES / "builtin-cpu.hxb"), "--benchmark=50"], out, err)
    assert (code, err.getvalue()) == (0, "")
    first, second = out.getvalue().splitlines()
    assert re.fullmatch(r"benchmark     : main, 50 calls after 10 warm-up, 5 commands, "
                        r"\d+ cpu threads?", first)
    assert second.startswith("per call      : min ") and " median " in second
    low, mid, high = (float(v) for v in re.findall(r"(?:min|median|max) ([0-9.]+) us", second))
    assert 0 < low <= mid <= high


@pytest.mark.parametrize("value", ["0", "x", "-3", ""])
def test_benchmark_takes_a_positive_count(value):
    out, err = io.StringIO(), io.StringIO()
    assert hexir_run([str(FIXTURES / "builtin.hxb"), f"--benchmark={value}"], out, err) == 2
    assert err.getvalue().startswith("hexir-run: --benchmark")


def test_a_reshape_is_a_view_of_its_input(monkeypatch):
    """The transformer block's four reshapes launch nothing and allocate nothing: each
    destination is its input's buffer (the bytes are the same, in row-major order)."""
    launched = []
    original = cpu.CpuDevice.bind

    def counting(self, loaded, buffers):
        launched.append(loaded.exe.kind)
        return original(self, loaded, buffers)

    monkeypatch.setattr(cpu.CpuDevice, "bind", counting)
    with hr.load(FIXTURES / "transformer_block-f32.hxb") as m:
        data = np.load(FIXTURES / "transformer_block-f32.npz")
        np.testing.assert_allclose(m.main(data["input_0"]), data["output_0"], rtol=1e-4,
                                   atol=1e-5)
        program = m._resident.programs["main"]
        kinds = [m._mapped.module.executables[c.executable].kind
                 for c in m._plans["main"].commands if c.op is hf.Op.DISPATCH]
    assert kinds.count(KernelKind.RESHAPE) == 4 and len(program.views) == 4
    assert KernelKind.RESHAPE not in launched and len(launched) == len(kinds) - 4
    assert len(program.alias) == 4


def test_results_can_go_into_arrays_the_caller_owns():
    with hr.load(FIXTURES / "mlp-f32.hxb") as m:
        x = np.load(FIXTURES / "mlp-f32.npz")["input_0"]
        want = m.main(x)
        y = np.full(want.shape, np.nan, np.float32)
        assert m.main(x, out=y) is y
        np.testing.assert_array_equal(y, want)
        run = m.execute("main", [x], out=[y])
        assert run.outputs[0] is y


@pytest.mark.parametrize("out, message", [
    (np.zeros((8, 10), np.float64), "got a float64 array of shape 8x10"),
    (np.zeros((10, 8), np.float32).T, "got a non-contiguous float32 array of shape 8x10"),
    (np.zeros((8, 11), np.float32), "got a float32 array of shape 8x11"),
    ([1, 2], "returns 1 result; out= gives 2"),
    ("x", "out[0] of main: expected a writable C-contiguous 8x10xf32 array, got a str"),
])
def test_out_arrays_of_the_wrong_kind_are_refused_before_the_call(out, message):
    with hr.load(FIXTURES / "mlp-f32.hxb") as m:
        x = np.load(FIXTURES / "mlp-f32.npz")["input_0"]
        with pytest.raises(hr.InputError) as info:
            m.main(x, out=out)
    assert message in str(info.value)
    if isinstance(out, np.ndarray):
        assert "expected a writable C-contiguous 8x10xf32 array" in str(info.value)


def test_a_read_only_out_array_is_refused():
    with hr.load(FIXTURES / "mlp-f32.hxb") as m:
        x = np.load(FIXTURES / "mlp-f32.npz")["input_0"]
        y = np.zeros((8, 10), np.float32)
        y.flags.writeable = False
        with pytest.raises(hr.InputError, match="got a read-only float32 array"):
            m.main(x, out=y)


def test_a_planned_module_puts_its_intermediates_in_one_arena_per_device(monkeypatch):
    """The transformer block's 20 intermediates: one cpu allocation of the plan's peak (plus
    one buffer per input), not one per intermediate; the answer is the fixture's."""
    allocations = []
    original = cpu.CpuDevice._allocate

    def counting(self, size, *args):
        allocations.append(size)
        return original(self, size, *args)

    monkeypatch.setattr(cpu.CpuDevice, "_allocate", counting)
    module = hf.parse((FIXTURES / "transformer_block-f32.hxb").read_bytes())
    entry = hf.validate.check(module).entries["main"]
    assert len(entry.offsets) == 20 and entry.arenas[Device.CPU] < sum(
        module.slots[s].type.nbytes for s in entry.offsets) / 3
    data = np.load(FIXTURES / "transformer_block-f32.npz")
    with hr.load(FIXTURES / "transformer_block-f32.hxb") as m:
        got = m.main(data["input_0"])
    assert entry.arenas[Device.CPU] in allocations
    assert len(allocations) <= 1 + len(entry.signature.inputs)
    scale = np.abs(data["output_0"]).max()
    assert np.abs(got - data["output_0"]).max() <= 1e-5 * scale


def test_a_buffer_read_before_written_is_zeroed_where_it_is_bound_under_a_plan():
    """Slot 3 shares slot 2's bytes once slot 2 is dead; a kernel reads slot 3 before any
    writes it, so it must see zeros there, not slot 2's product."""
    m2 = hf.TensorType(hf.DType.F64, (2, 2))
    builtin = hf.parse((FIXTURES / "builtin-cpu.hxb").read_bytes())
    commands = (Command.input(0, 0), Command.const(1, 0, 32), Command.alloc(2, 32),
                Command.dispatch(0, (0, 1, 2)), Command.alloc(4, 32),
                Command.dispatch(0, (2, 1, 4)), Command.alloc(3, 32), Command.alloc(5, 32),
                Command.dispatch(0, (3, 1, 5)), Command.output(4, 0), Command.output(5, 1))
    slots = tuple(Slot(Device.CPU, m2) for _ in range(6))
    module = hf.Module(5, (Function("main", commands),), builtin.rodata, builtin.executables,
                       slots, placements=((2, 0), (3, 0), (4, 64), (5, 128)))
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    with hr.load(hf.build(module)) as m:
        product, zero_product = m.main(x)
        again, _ = m.main(x)
    a = np.array([[3.0, 1.0], [2.0, 2.0]])
    np.testing.assert_array_equal(product, (x @ a) @ a)
    np.testing.assert_array_equal(zero_product, np.zeros((2, 2)))
    np.testing.assert_array_equal(again, product)


def test_a_plan_offset_counts_against_max_alloc_bytes_at_load():
    """One offset moved to 8 GiB makes an 8 GiB arena: refused at load under a 1 MiB cap."""
    module = hf.parse((FIXTURES / "mlp-f32.hxb").read_bytes())
    (slot, _), *rest = module.placements
    far = hf.build(replace(module, placements=((slot, 8 << 30), *rest)))
    with pytest.raises(hr.ValidationError, match=rf"main \[x86-64-v2\]: plan: slot {slot} at "
                       rf"offset {8 << 30} makes a call allocate .* more than the cap of 1048576"):
        hr.load(far, max_alloc_bytes=1 << 20)


def test_a_calls_compiled_kernels_run_as_one_native_sequence(monkeypatch):
    """The MLP's kernels, one after another, are one SEQUENCE step (one foreign call, no
    Python between them); the answers are those of each kernel run on its own."""
    from hexir_runtime.hal import threads

    with hr.load(FIXTURES / "mlp-f32.hxb") as m:
        x = np.load(FIXTURES / "mlp-f32.npz")["input_0"]
        together = m.main(x)
        (arena,) = m._resident.programs["main"]._arenas
        kernels = [s for s in arena.steps if s.job is not None]
        sequences = [s for s in arena.runs if s.label.endswith("(cpu sequence)")]
        assert len(kernels) >= 2 and len(sequences) == 1
        assert len(arena.runs) == len(arena.steps) - len(kernels) + 1
        monkeypatch.setattr(threads, "sequence", lambda jobs: None)  # no sequences: each
        with hr.load(FIXTURES / "mlp-f32.hxb") as alone:  # kernel its own foreign call
            np.testing.assert_array_equal(alone.main(x), together)
            (arena,) = alone._resident.programs["main"]._arenas
            assert arena.runs == arena.steps


def _unaligned(x: np.ndarray) -> np.ndarray:
    """A copy of `x` one byte past an element boundary (numpy's ALIGNED flag off)."""
    raw = np.zeros(x.nbytes + 1, np.uint8)
    u = raw[1:].view(x.dtype).reshape(x.shape)
    u[...] = x
    assert not u.flags.aligned
    return u


def test_an_input_only_cpu_kernels_read_is_read_where_it_lies(monkeypatch):
    """The MLP's input is read by its first kernel alone: a call points the sequence's
    kernels at the caller's array instead of copying it into the arena (`arena.direct_inputs`),
    so the arena's input buffer stays as it was made while each new array gets its own
    answer, bit for bit the copying path's; an array off its element alignment is copied
    in and the kernels pointed back at the buffer, and the next aligned array is read where
    it lies again (the buffer keeps the unaligned one's values)."""
    from hexir_runtime import interpreter

    data = np.load(FIXTURES / "mlp-f32.npz")
    rng = np.random.default_rng(3)
    arrays = [data["input_0"], rng.standard_normal(data["input_0"].shape).astype(np.float32)]
    unaligned = _unaligned(arrays[1] * 2)
    with hr.load(FIXTURES / "mlp-f32.hxb") as m:
        got = [m.main(a) for a in arrays]
        program = m._resident.programs["main"]
        assert list(program.kernel_inputs) == [0]
        (arena,) = program._arenas
        buffer = program.input_view(arena, 0)
        assert not buffer.any()  # never written: the kernels read the callers' arrays
        got.append(m.main(unaligned))
        np.testing.assert_array_equal(buffer, unaligned)
        got.append(m.main(arrays[0]))
        np.testing.assert_array_equal(buffer, unaligned)
    monkeypatch.setattr(interpreter.Program, "_read_by_cpu_kernels_only", lambda self: {})
    with hr.load(FIXTURES / "mlp-f32.hxb") as copying:
        want = [copying.main(a) for a in (*arrays, unaligned, arrays[0])]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_allclose(got[0], data["output_0"], rtol=1e-5)


def test_an_input_that_is_also_a_result_is_copied_in():
    """The MLP with its input returned as a second result: the result is read from the
    arena's buffer, so the input is copied there as before, and comes back unchanged."""
    module = hf.parse((FIXTURES / "mlp-f32.hxb").read_bytes())
    functions = []
    for f in module.functions:
        (given,) = [c for c in f.commands if c.op is hf.Op.INPUT]
        functions.append(replace(f, commands=(*f.commands, Command.output(given.slot, 1))))
    x = np.load(FIXTURES / "mlp-f32.npz")["input_0"]
    with hr.load(hf.build(replace(module, functions=tuple(functions)))) as m:
        logits, same = m.main(x)
        assert m._resident.programs["main"].kernel_inputs == {}
        np.testing.assert_array_equal(same, x)
        np.testing.assert_array_equal(logits, hr.load(FIXTURES / "mlp-f32.hxb").main(x))
