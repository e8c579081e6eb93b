"""The memory plan: lifetimes, the planner the compiler uses, and the check the runtime relies
on."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hexir_format as hf
from hexir_format import (
    Command,
    Device,
    DType,
    Function,
    KernelKind,
    Module,
    Slot,
    TensorType,
    plan,
)

CPU, CUDA = Device.CPU, Device.CUDA
K = KernelKind


def _bytes(n: int) -> TensorType:
    """A tensor type of `n` bytes (n one-byte bools)."""
    return TensorType(DType.BOOL, (n,))


def test_lifetimes_run_from_binding_to_last_use_and_outputs_to_the_end():
    commands = (Command.input(0, 0), Command.alloc(1, 8), Command.dispatch(0, (0, 1)),
                Command.alloc(2, 8), Command.dispatch(0, (1, 2)), Command.copy(3, 2),
                Command.output(3, 0))
    spans = plan.lifetimes(commands)
    assert spans == {1: plan.Lifetime(1, 4), 2: plan.Lifetime(3, 5), 3: plan.Lifetime(5, 7)}


def test_a_reshape_keeps_its_input_live_as_long_as_its_destination():
    commands = (Command.alloc(1, 8), Command.dispatch(0, (0, 1)), Command.alloc(2, 8),
                Command.dispatch(1, (1, 2)), Command.alloc(3, 8), Command.dispatch(0, (2, 3)),
                Command.output(3, 0))
    assert plan.lifetimes(commands)[1].last == 3
    kinds = [K.MATMUL, K.RESHAPE]
    assert plan.lifetimes(commands, kinds)[1].last == 5  # 2 may be 1's bytes


def test_a_chain_shares_two_buffers():
    # x -> a -> b -> c -> d: each kernel reads the one before, so two buffers alternate.
    commands = [Command.input(0, 0)]
    for slot in range(1, 5):
        commands += [Command.alloc(slot, 100), Command.dispatch(0, (slot - 1, slot))]
    commands.append(Command.output(4, 0))
    types, devices = dict.fromkeys(range(5), _bytes(100)), dict.fromkeys(range(5), CPU)
    offsets = plan.assign(commands, types, devices, [K.MATMUL])
    assert offsets == {1: 0, 2: 128, 3: 0, 4: 128}
    assert plan.arenas(offsets, types, devices) == {CPU: 228}
    assert plan.problem(commands, offsets, types, devices, [K.MATMUL]) is None


def test_an_element_wise_chain_runs_in_place_in_one_buffer():
    commands = [Command.input(0, 0)]
    for slot in range(1, 5):
        commands += [Command.alloc(slot, 100), Command.dispatch(0, (slot - 1, slot))]
    commands.append(Command.output(4, 0))
    types, devices = dict.fromkeys(range(5), _bytes(100)), dict.fromkeys(range(5), CPU)
    assert plan.in_place(commands, types, devices, [K.RELU]) == {2: 1, 3: 2, 4: 3}
    offsets = plan.assign(commands, types, devices, [K.RELU])
    assert offsets == {1: 0, 2: 0, 3: 0, 4: 0}
    assert plan.problem(commands, offsets, types, devices, [K.RELU]) is None
    # the same plan for a kernel that is not element-wise shares bytes between live buffers
    assert "live at once" in plan.problem(commands, offsets, types, devices, [K.TRANSPOSE])


def test_in_place_needs_an_input_that_dies_there_with_the_result_s_size():
    commands = (Command.input(0, 0), Command.alloc(1, 8), Command.dispatch(0, (0, 1)),
                Command.alloc(2, 8), Command.dispatch(0, (1, 2)), Command.alloc(3, 8),
                Command.dispatch(0, (1, 3)), Command.output(2, 0), Command.output(3, 1))
    same = dict.fromkeys(range(4), _bytes(8))
    cpu = dict.fromkeys(range(4), CPU)
    assert plan.in_place(commands, same, cpu, [K.ADD]) == {3: 1}  # 1 is read by both
    assert plan.in_place(commands, {**same, 3: _bytes(4)}, cpu, [K.ADD]) == {}
    assert plan.in_place(commands, same, {**cpu, 3: CUDA}, [K.ADD]) == {}


def test_each_device_has_its_own_arena():
    commands = (Command.alloc(1, 64), Command.dispatch(0, (0, 1)), Command.copy(2, 1),
                Command.output(2, 0))
    types, devices = {1: _bytes(64), 2: _bytes(64)}, {1: CUDA, 2: CPU}
    offsets = plan.assign(commands, types, devices, [K.MATMUL])
    assert offsets == {1: 0, 2: 0}
    assert plan.arenas(offsets, types, devices) == {CUDA: 64, CPU: 64}


@st.composite
def programs(draw):
    """A random entry: kernels over a growing set of slots, a few copies, some outputs."""
    count = draw(st.integers(1, 12))
    types = {0: _bytes(8), **{s: _bytes(draw(st.sampled_from([0, 8, 64, 100, 300])))
                              for s in range(1, count + 1)}}
    devices = {0: CPU, **{s: draw(st.sampled_from([CPU, CUDA])) for s in range(1, count + 1)}}
    commands = [Command.input(0, 0)]
    for slot in range(1, count + 1):
        reads = draw(st.lists(st.integers(0, slot - 1), max_size=3))
        kernel = draw(st.integers(0, 1))
        commands += [Command.alloc(slot, types[slot].nbytes),
                     Command.dispatch(kernel, (*reads, slot))]
    outputs = draw(st.lists(st.integers(1, count), max_size=3, unique=True))
    commands += [Command.output(s, i) for i, s in enumerate(outputs)]
    return commands, types, devices


@settings(max_examples=200, deadline=None)
@given(programs())
def test_the_planner_never_shares_bytes_between_live_buffers(program):
    """Kernel 0 is element-wise (in place allowed), kernel 1 not."""
    commands, types, devices = program
    kinds = [K.ADD, K.MATMUL]
    offsets = plan.assign(commands, types, devices, kinds)
    assert plan.problem(commands, offsets, types, devices, kinds) is None
    spans, over = plan.lifetimes(commands, kinds), plan.in_place(commands, types, devices, kinds)
    sizes = {s: types[s].nbytes for s in types}
    for a in spans:  # the brute-force statement of the same rule
        for b in spans:
            live = spans[a].first <= spans[b].last and spans[b].first <= spans[a].last
            meet = offsets[a] < offsets[b] + sizes[b] and offsets[b] < offsets[a] + sizes[a]
            exact = offsets[a] == offsets[b] and (over.get(a) == b or over.get(b) == a)
            if a < b and devices[a] is devices[b] and sizes[a] and sizes[b] and not exact:
                assert not (live and meet), (a, b)
    for device, size in plan.arenas(offsets, types, devices).items():
        assert size <= sum(-(-sizes[s] // 64) * 64 for s in spans if devices[s] is device)


def _shares_bytes(commands, offsets, types, devices, kinds) -> bool:
    """The rule `plan.problem` checks, stated pair by pair (quadratic; the check is not)."""
    spans, over = plan.lifetimes(commands, kinds), plan.in_place(commands, types, devices, kinds)
    sizes = {s: types[s].nbytes for s in types}
    return any(a < b and devices[a] is devices[b] and sizes[a] and sizes[b]
               and spans[a].first <= spans[b].last and spans[b].first <= spans[a].last
               and offsets[a] < offsets[b] + sizes[b] and offsets[b] < offsets[a] + sizes[a]
               and not (offsets[a] == offsets[b] and (over.get(a) == b or over.get(b) == a))
               for a in spans for b in spans)


@settings(max_examples=300, deadline=None)
@given(programs(), st.data())
def test_the_check_refuses_exactly_the_plans_that_share_live_bytes(program, data):
    """Any offsets, damaged ones included: refused exactly when two live buffers meet."""
    commands, types, devices = program
    kinds = [K.ADD, K.MATMUL]
    spans = plan.lifetimes(commands, kinds)
    offsets = {s: 64 * data.draw(st.integers(0, 6)) for s in spans}
    verdict = plan.problem(commands, offsets, types, devices, kinds)
    assert (verdict is not None) == _shares_bytes(commands, offsets, types, devices, kinds), \
        verdict


M = TensorType(DType.F32, (2, 8))  # 64 bytes


def _module(placements) -> Module:
    commands = (Command.input(0, 0), Command.alloc(1, 64), Command.alloc(2, 64),
                Command.output(1, 0), Command.output(2, 1))
    return Module(5, (Function("main", commands),), b"", (), (Slot(CPU, M),) * 3,
                  placements=placements)


def test_a_plan_round_trips_and_the_validator_gives_each_entry_its_arenas():
    module = _module(((1, 0), (2, 64)))
    parsed = hf.parse(hf.build(module))
    assert parsed == module and parsed.placements == ((1, 0), (2, 64))
    entry = hf.validate.check(parsed).entries["main"]
    assert entry.offsets == {1: 0, 2: 64} and entry.arenas == {CPU: 128}


def test_two_live_outputs_in_the_same_bytes_are_refused():
    with pytest.raises(hf.ValidationError, match="slots 1 and 2 are live at once"):
        hf.validate.check(hf.parse(hf.build(_module(((1, 0), (2, 0))))))


def test_the_writer_keeps_plans_out_of_version_4_and_in_slot_order():
    with pytest.raises(hf.FormatError, match="needs version 5"):
        hf.build(Module(4, (), b"", (), (Slot(CPU, M),), placements=((0, 0),)))
    with pytest.raises(hf.FormatError, match="each slot once, in increasing order"):
        hf.build(_module(((2, 64), (1, 0))))
    assert hf.minimum_version(_module(((1, 0), (2, 64)))) == 5


def _plan_section(data: bytes) -> int:
    return hf.parse_layout(data).section(hf.SectionKind.PLAN).offset


@pytest.mark.parametrize("at, fmt, value, message", [
    (0, "I", 5, "plan: count 5 at offset"),
    (4, "I", 1, "plan: reserved field"),
    (8, "I", 3, "plan entry 0: slot 3"),  # past the 3 slots
    (24, "I", 1, "plan entry 1: slot 1 at offset"),  # not after the previous one
    (12, "I", 7, "plan entry 0: reserved field"),
    (16, "Q", 1 << 63, "is beyond any arena"),
])
def test_a_damaged_plan_section_is_refused_by_field(at, fmt, value, message):
    data = bytearray(hf.build(_module(((1, 0), (2, 64)))))
    struct.pack_into("<" + fmt, data, _plan_section(data) + at, value)
    with pytest.raises(hf.FormatError, match=message):
        hf.parse(bytes(data))


@pytest.mark.parametrize("touch", [Command.dispatch(0, (2, 3)), Command.dispatch(0, (0, 2)),
                                   Command.print(2, 2, 2)], ids=["read", "written", "printed"])
def test_an_in_place_result_is_never_touched_before_the_kernel_that_overwrites_its_input(touch):
    """An element-wise result may take the bytes of an input that dies at its kernel, but not
    when something reads or writes it between its ALLOC and that kernel: the bytes are still
    the input's then (and a damaged plan that shares them is refused)."""
    m2 = TensorType(DType.F64, (2, 2))
    commands = (Command.input(0, 0), Command.alloc(1, 32), Command.dispatch(0, (0, 1)),
                Command.alloc(2, 32), Command.alloc(3, 32), touch,
                Command.dispatch(0, (1, 2)), Command.output(2, 0), Command.output(3, 1))
    kinds = [K.RELU]
    types, devices = {i: m2 for i in range(4)}, {i: CPU for i in range(4)}
    assert plan.in_place(commands, types, devices, kinds) == {}
    offsets = {1: 0, 2: 0, 3: 64}
    assert "share bytes" in plan.problem(commands, offsets, types, devices, kinds)
    untouched = commands[:5] + commands[6:]
    assert plan.in_place(untouched, types, devices, kinds) == {2: 1}
    assert plan.problem(untouched, offsets, types, devices, kinds) is None


def test_a_plan_offset_counts_against_the_allocation_cap():
    """An arena is as large as its furthest buffer's end: an offset of 2^40 is a 1 TiB arena,
    refused by the validator (its default cap, hxb-dump's) as a call would refuse it."""
    far = hf.parse(hf.build(_module(((1, 0), (2, 1 << 40)))))
    with pytest.raises(hf.ValidationError, match=r"main: plan: slot 2 at offset 1099511627776 "
                       r"makes a call allocate 1099511627904 bytes \(the cpu arena "
                       r"1099511627840, inputs 64\), more than the cap of 17179869184 bytes"):
        hf.validate.check(far)
    near = hf.parse(hf.build(_module(((1, 0), (2, 8 << 30)))))
    assert hf.validate.check(near).entries["main"].arenas == {CPU: (8 << 30) + 64}
    with pytest.raises(hf.ValidationError, match=r"more than the cap of 1048576 bytes"):
        hf.validate.check(near, max_alloc_bytes=1 << 20)
