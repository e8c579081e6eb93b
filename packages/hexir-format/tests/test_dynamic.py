"""Dynamic modules (version 6): size symbols, expressions in tensor types, ALLOC's bytes and
launch geometry, kernels' size operands -- in the model, on disk, and in the validator."""

from __future__ import annotations

import re
import struct
from dataclasses import replace

import pytest

import hexir_format as hf
from hexir_format import (
    Command,
    Device,
    DType,
    Executable,
    Function,
    KernelKind,
    Slot,
    dims,
    records,
)
from hexir_format import TensorType as T
from hexir_format import layout as L
from hexir_format.model import Symbol

batch, past, seq = (dims.Expr.symbol(n) for n in ("batch", "past", "seq"))
PTX = b"// a kernel's device code; the validator reads only its launch geometry\n"


def linear(x_dim: dims.Dim = batch, grid: dims.Dim | None = None,
           block: dims.Dim = 128, lo: int = 1, hi: int = 64,
           version: int = 6) -> hf.Module:
    """x: batchx4xf32 -> matmul(W 4x3) -> relu -> batchx3xf32, on cuda: one thread per
    element of the result, the kernels told `batch`."""
    x, w, h = T(DType.F32, (x_dim, 4)), T(DType.F32, (4, 3)), T(DType.F32, (x_dim, 3))
    grid = dims.ceildiv(x_dim * 3, 128) if grid is None else grid
    mm = Executable("mm", KernelKind.MATMUL, Device.CUDA, (x, w, h), (), PTX, (grid, 1, 1),
                    (block, 1, 1), operands=(0,))
    relu = Executable("relu", KernelKind.RELU, Device.CUDA, (h, h), (), PTX, (grid, 1, 1),
                      (block, 1, 1), operands=(0,))
    main = Function("main", (Command.input(0, 0), Command.const(1, 0, 48),
                             Command.alloc(2, h.nbytes), Command.dispatch(0, (0, 1, 2)),
                             Command.alloc(3, h.nbytes), Command.dispatch(1, (2, 3)),
                             Command.output(3, 0)), ("x",), ("y",))
    return hf.Module(version, (main,), bytes(48), (mm, relu),
                     tuple(Slot(Device.CUDA, t) for t in (x, w, h, h)),
                     symbols=(Symbol("batch", lo, hi),))


def cache() -> hf.Module:
    """Two inputs over three symbols, one solved: ids batchxseqxi64, mask
    batchx(past + seq)xi1, both returned (no kernels)."""
    ids, mask = T(DType.I64, (batch, seq)), T(DType.BOOL, (batch, past + seq))
    main = Function("main", (Command.input(0, 0), Command.input(1, 1), Command.copy(2, 1),
                             Command.output(0, 0), Command.output(2, 1)),
                    ("ids", "mask"), ("ids", "mask"))
    return hf.Module(6, (main,), b"", (), tuple(Slot(Device.CPU, t) for t in (ids, mask, mask)),
                     symbols=(Symbol("batch", 1, 8), Symbol("past", 0, 1024),
                              Symbol("seq", 1, 512)))


# ---- the model -----------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["batchx3x224x224xf32", "(past + seq)x64xf32", "2x3xf32",
                                  "f64", "(max_len)x2xi1", "(2 * seq)x(seq // 64)xi64"])
def test_tensor_types_render_and_parse_back(text):
    t = T.parse(text)
    assert str(t) == text and T.parse(str(t)) == t


def test_a_type_is_static_or_evaluates_for_the_symbols():
    t = T(DType.F32, (batch, 3, past + seq))
    assert not t.is_static and T(DType.F32, (2, 3)).is_static
    assert t.nbytes == 12 * batch * (past + seq)
    assert t.evaluate({"batch": 2, "past": 1, "seq": 3}) == T(DType.F32, (2, 3, 4))
    assert t.symbols() == {"batch", "past", "seq"}
    assert T.parse("(seq - seq + 4)xf32").shape == (4,)  # a constant is an int


def test_a_bad_tensor_type_is_one_line():
    for text in ["(batchx3xf32", "2xx3xf32", "(a ** 2)x3xf32", "2x-3xf32"]:
        with pytest.raises(ValueError, match=re.escape(text)):
            T.parse(text)


# ---- on disk -------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [linear, cache])
def test_a_dynamic_module_round_trips(make):
    module = make()
    data = hf.build(module)
    read = hf.parse(data)
    assert read == module and hf.build(read) == data
    assert hf.minimum_version(module) == 6 and read.is_dynamic
    assert read.layout.section(hf.SectionKind.SIZES) is not None
    hf.validate.check(read)


def test_a_static_module_has_no_sizes_section():
    module = replace(linear(4), symbols=())
    module = replace(module, executables=tuple(replace(e, operands=())
                                               for e in module.executables))
    assert hf.parse(hf.build(module)).layout.section(hf.SectionKind.SIZES) is None


def test_each_expression_is_stored_once():
    data = hf.build(linear())
    h = L.SizesHeader.parse(data[hf.parse(data).layout.section(hf.SectionKind.SIZES).offset:])
    # batch, 12 * batch (ALLOC), ceildiv(3 * batch, 128) (grid): three programs for 13 fields
    assert (h.symbol_count, h.program_count, h.operand_count) == (1, 3, 2)


@pytest.mark.parametrize("module, message", [
    (replace(linear(), version=5), "need version 6"),
    (replace(linear(), symbols=()), "takes symbol 0 as an operand; the module has 0"),
    (replace(linear(), symbols=(Symbol("n", 1, 2),)), "'batch' is not in the symbol table"),
    (replace(linear(), placements=((2, 0),)), "no memory plan"),
    (replace(linear(), symbols=(Symbol("batch", 5, 2),)), "expected 0 <= lo <= hi"),
    (replace(linear(), symbols=(Symbol("batch", 1, 2), Symbol("batch", 1, 2))), "one twice"),
    (linear(grid=2**31), "size 2147483648 does not fit its field in version 6"),
])
def test_the_writer_refuses(module, message):
    with pytest.raises(hf.FormatError, match=message):
        hf.build(module)


def _field(data: bytes, kind: str, path: str, n: int = 0) -> int:
    """The file offset of field `path` of the `n`th record of `kind`."""
    found = [r for r in records.records(data) if r.kind == kind][n]
    return found.offset + (L.offset_of(found.decl, path) if path else 0)


def _patch(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


@pytest.mark.parametrize("kind, path, fmt, value, field, message", [
    ("size_symbol", "lo", "<Q", 100, "lo", r"range 100\.\.64"),
    ("size_symbol", "hi", "<Q", 2**62 + 1, "hi", "hi <= 4611686018427387904"),
    ("size_symbol", "name", "<B", ord("-"), "name", "not an identifier"),
    ("program_entry", "words", "<I", dims.MAX_WORDS + 1, "offset", "expected 1 to 256 words"),
    ("program_entry", "offset", "<I", 4, "offset", "expected 1 to"),
    ("word", "", "<q", 99, "program", "opcode 99"),  # the first program's opcode
    ("operand", "symbol", "<I", 1, "symbol", "not a size symbol"),
    ("operand", "executable", "<I", 2, "executable", "not an executable"),
])
def test_the_reader_refuses_damage_to_the_sizes_section_at_its_field(kind, path, fmt, value,
                                                                     field, message):
    data = hf.build(linear())
    at = _field(data, kind, path)
    with pytest.raises(hf.FormatError, match=message) as e:
        hf.parse(_patch(data, at, fmt, value))
    assert e.value.field == field
    if kind == "word":  # a program is named by where it starts
        assert e.value.offset == at
    elif field == path:
        assert e.value.offset == at


def test_a_symbol_index_out_of_the_table_is_refused():
    data = hf.build(linear())
    at = _field(data, "word", "", 3)  # the first program is ALLOC's 12 * batch: CONST 12,
    # SYM 0, MUL; its SYM's immediate
    with pytest.raises(hf.FormatError, match="symbol 7 is not in the table of 1"):
        hf.parse(_patch(data, at, "<q", 7))


@pytest.mark.parametrize("kind, path, fmt, tag, field", [
    ("argument", "dims[0]", "<Q", L.TAG64 | 9, "dims"),
    ("slot", "type.dims[0]", "<Q", L.TAG64 | 9, "dims"),
    ("executable", "grid_x", "<I", L.TAG32 | 9, "grid_x"),
])
def test_a_field_naming_an_expression_that_is_not_there_is_refused_at_it(kind, path, fmt, tag,
                                                                         field):
    data = hf.build(linear())
    at = _field(data, kind, path)
    with pytest.raises(hf.FormatError, match="names expression #9, but the module has 3") as e:
        hf.parse(_patch(data, at, fmt, tag))
    assert e.value.field == field
    assert e.value.offset == at - (at - _field(data, kind, path.rsplit(".", 1)[0] + ".dims"
                                                 if "." in path else "dims")
                                   if field == "dims" else 0)


def test_a_tagged_alloc_in_a_module_without_sizes_is_refused():
    module = replace(linear(4), symbols=())
    module = replace(module, executables=tuple(replace(e, operands=())
                                               for e in module.executables))
    data = hf.build(module)
    alloc = next(r for r in records.records(data) if r.label.startswith("alloc@"))
    at = alloc.offset + L.offset_of(L.Command, "operands[1]")
    with pytest.raises(hf.FormatError, match="names expression #0, but the module has 0") as e:
        hf.parse(_patch(data, at, "<Q", L.TAG64))
    assert (e.value.field, e.value.offset) == ("bytes", at)


def test_tags_mean_nothing_before_version_6():
    data = hf.build(hf.Module(5, (Function("main", (Command.alloc(0, 8),)),), b"", (),
                              (Slot(Device.CPU, T(DType.F64, (1,))),)))
    at = _field(data, "slot", "type.dims[0]")
    with pytest.raises(hf.FormatError, match="span more than"):
        hf.parse(_patch(data, at, "<Q", L.TAG64 | 1))


# ---- the validator -------------------------------------------------------------------------

def _check(module: hf.Module) -> None:
    hf.validate.check(hf.parse(hf.build(module)))


@pytest.mark.parametrize("module, message", [
    (linear(batch - 2), r"'batch - 2' can be -1 for the symbols' ranges \(batch in 1\.\.64\)"),
    (linear(dims.floordiv(8, batch - 1) + 1), "may divide by zero"),
    (linear(grid=batch * 2**26), "launch grid"),
    (linear(grid=1, block=batch * 32, hi=64), r"block \(32 \* batch, 1, 1\), ranging over "
                                              r"\[\(32, 2048\)"),
    (linear(grid=1, block=batch * 32, hi=32), None),
    (linear(grid=batch - 1), "outside"),  # 0 blocks for batch = 1
])
def test_the_validator_bounds_every_expression(module, message):
    if message is None:
        _check(module)
        return
    with pytest.raises(hf.ValidationError, match=message):
        _check(module)


@pytest.mark.parametrize("module, message", [
    (replace(linear(), version=5), "need version 6"),
    (replace(linear(), placements=((2, 0), (3, 64))), "no memory plan"),
    (replace(linear(), symbols=(Symbol("batch", 9, 2),)), r"range 9\.\.2"),
    (replace(linear(), symbols=(Symbol("n", 1, 2),)), "reads 'batch', which is not a size"),
])
def test_the_validator_refuses_what_the_writer_would(module, message):
    with pytest.raises(hf.ValidationError, match=message):
        hf.validate.check(module)


def test_a_block_of_too_many_threads_for_some_sizes_is_refused():
    module = linear(grid=1)
    exes = tuple(replace(e, block=(batch * 16, 4, 1)) for e in module.executables)
    with pytest.raises(hf.ValidationError, match=r"\(16 \* batch, 4, 1\) is up to 4096 threads"):
        _check(replace(module, executables=exes))


def test_an_operand_out_of_range_is_refused():
    module = linear()
    module = replace(module, executables=(replace(module.executables[0], operands=(1,)),
                                          module.executables[1]))
    with pytest.raises(hf.ValidationError, match="symbol 1 is not one of the module's 1"):
        hf.validate.check(module)


def test_a_kernel_of_other_sizes_than_its_slot_is_refused():
    module = linear()
    other = T(DType.F32, (batch + 1, 3))
    mm = module.executables[0]
    module = replace(module, executables=(replace(mm, args=(*mm.args[:2], other)),
                                          module.executables[1]))
    with pytest.raises(hf.ValidationError, match=r"'mm'\), args: matmul of batchx4xf32, "
                                                 r"4x3xf32 gives batchx3, destination is "
                                                 r"\(batch \+ 1\)x3xf32"):
        _check(module)


def test_the_signature_and_the_allocation_are_symbolic():
    plan = hf.validate.check(cache()).entries["main"]
    assert plan.signature.named() == ("(ids: batchxseqxi64, mask: batchx(past + seq)xi1) -> "
                                      "(ids: batchxseqxi64, mask: batchx(past + seq)xi1)")
    assert plan.alloc_bytes == 8 * batch * seq + 2 * batch * (past + seq)


def _words(data: bytes) -> list[int]:
    """The offsets of the sizes section's words. `linear()`'s programs: 12 * batch (ALLOC's
    bytes: CONST 12 SYM 0 MUL, words 0-4), batch (5-6), ceildiv(3 * batch, 128) (the grid:
    CONST 3 SYM 0 MUL CONST 128 CEILDIV, 7-14)."""
    return [r.offset for r in records.records(data) if r.kind == "word"]


def test_the_validator_refuses_damaged_expressions_by_their_bounds():
    data = hf.build(linear())
    words = _words(data)
    negative = _patch(data, words[1], "<q", -12)  # ALLOC's bytes: -12 * batch
    with pytest.raises(hf.ValidationError, match=r"command 2 \(alloc\), bytes: '-12 \* batch' "
                                                 r"can be -768"):
        hf.validate.check(hf.parse(negative))
    wide = _patch(data, _field(data, "size_symbol", "hi"), "<Q", 2**40)  # the grid outgrows
    with pytest.raises(hf.ValidationError, match=r"grid: launch grid \(ceildiv\(3 \* batch, "
                                                 r"128\), 1, 1\), ranging over"):
        hf.validate.check(hf.parse(wide))
    # the grid's divisor 128 made `batch`, whose range then starts at 0
    divisor = _patch(_patch(data, words[12], "<q", int(dims.Opcode.SYM)), words[13], "<q", 0)
    hf.validate.check(hf.parse(divisor))  # batch >= 1: a divisor that is never 0
    zero = _patch(divisor, _field(data, "size_symbol", "lo"), "<Q", 0)
    with pytest.raises(hf.ValidationError, match=r"grid_x: 'ceildiv\(3 \* batch, batch\)' may "
                                                 r"divide by zero: its divisor ranges over "
                                                 r"\[0, 64\]"):
        hf.validate.check(hf.parse(zero))
