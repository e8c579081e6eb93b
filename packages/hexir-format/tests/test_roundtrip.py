"""The round trip is the contract: bytes -> model -> bytes, and model -> bytes -> model."""

import mmap
import pathlib
import struct
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hexir_format as hf
from hexir_format import (
    Command,
    Device,
    DType,
    Executable,
    Function,
    KernelKind,
    Module,
    Slot,
    TensorType,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures"

F64 = DType.F64


def test_builtin_fixture_layout(builtin):
    layout = hf.parse_layout(builtin)
    assert layout.file_size == 488 and layout.version == 3
    assert [(s.name, s.offset, s.size) for s in layout.sections] == [
        ("symbols", 120, 40), ("program", 160, 176), ("rodata", 336, 64),
        ("executables", 400, 88)]


def test_builtin_fixture_model(builtin):
    module = hf.parse(builtin)
    (main,) = module.functions
    assert main.name == "main"
    assert [str(c) for c in main.commands] == [
        "const slot=0 rodata_offset=0 bytes=32", "const slot=1 rodata_offset=32 bytes=32",
        "alloc slot=2 bytes=32", "dispatch executable=0 argc=3 %0 %1 %2",
        "print slot=2 rows=2 cols=2"]
    assert struct.unpack("<8d", module.rodata) == (3, 1, 2, 2, 1, 5, 5, 2)
    (exe,) = module.executables
    assert (exe.name, exe.kind, exe.device, exe.image) == ("linear_0", KernelKind.MATMUL,
                                                          Device.CPU, None)
    assert exe.args == (TensorType(F64, (2, 2)),) * 3


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.hxb")), ids=lambda p: p.name)
def test_every_fixture_round_trips(path: pathlib.Path):
    """fixtures/*.hxb are valid modules (the damaged ones live in fixtures/hostile/)."""
    data = path.read_bytes()
    module = hf.parse(data)
    assert hf.build(module) == data
    assert hf.parse(hf.build(module)) == module


def test_payloads_are_views_of_the_mapping(tmp_path, builtin):
    path = tmp_path / "m.hxb"
    path.write_bytes(builtin)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        module = hf.parse(mapped)
        assert isinstance(module.rodata, memoryview)
        assert module.rodata.obj is mapped
        module.rodata.release()


def _v4_module() -> Module:
    f32 = DType.F32
    x, w, y = TensorType(f32, (2, 3)), TensorType(f32, (3, 4)), TensorType(f32, (2, 4))
    return Module(
        4,
        (Function("main", (Command.input(0, 0), Command.const(1, 0, 48),
                           Command.copy(2, 0), Command.alloc(3, 32),
                           Command.dispatch(0, (2, 1, 3)), Command.copy(4, 3),
                           Command.output(4, 0))),
         Function("other", (Command.alloc(3, 32), Command.print(3, 2, 4)))),
        bytes(48),
        (Executable("linear_0", KernelKind.MATMUL, Device.CUDA, (x, w, y), (),
                    b"//\n.entry linear_0", (1, 1, 1), (16, 16, 1)),
         Executable("softmax_1", KernelKind.SOFTMAX, Device.CPU, (y, y), (1.0,))),
        (Slot(Device.CPU, x), Slot(Device.CUDA, w), Slot(Device.CUDA, x), Slot(Device.CUDA, y),
         Slot(Device.CPU, y)),
    )


def test_v4_round_trip():
    module = _v4_module()
    data = hf.build(module)
    assert hf.parse(data) == module
    assert hf.build(hf.parse(data)) == data
    assert [s.name for s in hf.parse_layout(data).sections] == [
        "symbols", "program", "rodata", "executables", "slots"]
    assert all(s.offset % 8 == 0 for s in hf.parse_layout(data).sections)


def test_minimum_version():
    assert hf.minimum_version(hf.parse((FIXTURES / "builtin.hxb").read_bytes())) == 3
    assert hf.minimum_version(_v4_module()) == 4


def test_v3_refuses_what_it_cannot_express():
    module = _v4_module()
    with pytest.raises(hf.FormatError, match="version 3 cannot express"):
        hf.build(Module(3, module.functions, module.rodata, module.executables, ()))


# --- property tests: random valid modules ---------------------------------------------------

names = st.text("abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=31)
dims = st.lists(st.integers(0, 9), max_size=6).map(tuple)
types = st.builds(TensorType, st.sampled_from(DType), dims)
u64 = st.integers(0, 2**64 - 1)


@st.composite
def commands(draw):
    op = draw(st.sampled_from([o for o in hf.Op if o is not hf.Op.END]))
    if op is hf.Op.DISPATCH:
        return Command.dispatch(draw(u64), draw(st.lists(u64, max_size=5)))
    return Command(op, tuple(draw(st.lists(u64, min_size=len(hf.OPERAND_NAMES[op]),
                                           max_size=len(hf.OPERAND_NAMES[op])))))


@st.composite
def executables(draw):
    kind = draw(st.sampled_from(KernelKind))
    argc = kind.arity + 1 if kind.arity is not None else draw(st.integers(2, 4))
    args = tuple(draw(st.lists(types, min_size=argc, max_size=argc)))
    image = draw(st.one_of(st.none(), st.binary(min_size=1, max_size=40)))
    geometry = st.tuples(*[st.integers(1, 2**31)] * 3) if image else st.just((0, 0, 0))
    device = draw(st.sampled_from(Device))
    level = draw(st.integers(1, 4)) if device is Device.CPU and image else 0  # v5 records it
    return Executable(draw(names), kind, device, args,
                      tuple(draw(st.lists(st.floats(allow_nan=False), max_size=4))), image,
                      draw(geometry), draw(geometry), level)


@st.composite
def modules(draw):
    fnames = draw(st.lists(names, max_size=4, unique=True))
    io = st.lists(st.text(min_size=1, max_size=12).filter(lambda t: t.isprintable()
                                                          and "\0" not in t),
                  max_size=3, unique=True).map(tuple)
    functions = tuple(Function(n, tuple(draw(st.lists(commands(), max_size=6))), draw(io),
                               draw(io)) for n in fnames)
    exes = tuple(draw(st.lists(executables(), max_size=4)))
    slots = tuple(draw(st.lists(st.builds(Slot, st.sampled_from(Device), types), max_size=5)))
    # A cpu kernel with an image (a host image), an integer or boolean type, or names need
    # version 5; a string type or a library kernel version 6 (which may hold a string
    # table); the rest stay version 4.
    typed = [s.type for s in slots] + [t for e in exes for t in e.args]
    version = 5 if (any(e.device is Device.CPU and e.image is not None for e in exes)
                    or any(t.dtype not in hf.V4_DTYPES for t in typed)
                    or any(f.inputs or f.outputs for f in functions)) else 4
    if any(t.dtype not in hf.V5_DTYPES for t in typed) or \
            any(e.kind is KernelKind.LIBRARY for e in exes):
        version = 6
    strings = tuple(draw(st.lists(st.text(max_size=8), max_size=4))) if version == 6 else ()
    if version == 6:  # whose sizes' top bit names an expression: keep it clear
        functions = tuple(replace(f, commands=tuple(
            Command(c.op, (c.operands[0], c.operands[1] % 2**63)) if c.op is hf.Op.ALLOC else c
            for c in f.commands)) for f in functions)
        exes = tuple(replace(e, grid=tuple(min(g, 2**31 - 1) for g in e.grid),
                             block=tuple(min(b, 2**31 - 1) for b in e.block)) for e in exes)
    return Module(version, functions, draw(st.binary(max_size=64)), exes, slots,
                  strings=strings)


@settings(max_examples=150, deadline=None)
@given(modules())
def test_random_v4_to_v6_modules_round_trip(module):
    data = hf.build(module)
    parsed = hf.parse(data)
    assert parsed == module
    assert hf.build(parsed) == data


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_v3_modules_round_trip(data):
    m, n, k = (data.draw(st.integers(0, 2**32 - 1)) for _ in range(3))
    t = lambda *s: TensorType(F64, s)
    exes = (Executable("mm", KernelKind.MATMUL, Device.CUDA, (t(m, k), t(k, n), t(m, n)),
                       (), b"\x7fELF", (2, 3, 1), (4, 5, 1)),
            Executable("r", KernelKind.RELU, Device.CPU, (t(m, n), t(m, n))))
    ops = [o for o in hf.V3_OPS if o is not hf.Op.END]
    cmds = tuple(Command(o, (1,) * len(hf.OPERAND_NAMES[o]))
                 for o in ops if o is not hf.Op.DISPATCH)
    module = Module(3, (Function("main", cmds),), data.draw(st.binary(max_size=32)), exes)
    raw = hf.build(module)
    assert hf.parse(raw) == module and hf.build(hf.parse(raw)) == raw
