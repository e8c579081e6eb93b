"""The damage campaign: every field of every kind of module, set to hostile values.

For each fixture (the seed's v3 file, the v4 test modules, the compiler's v5 and v6 modules, a
dynamic v6 module, a v6 module of strings) the field map lists every header, section-table,
symbol, command-operand, executable, argument type, param and slot field, a dynamic module's
sizes section (its header, size symbols, program entries and program words) and the strings
section (its header and entries), at its offset, from the layout's
own declarations. Each field in turn, and then fixed-seed pairs of fields, gets hostile
values (0, 1, off by one, the largest values of its width, ...), and every truncation of
one module per version is tried, with a fixed-seed sample of byte flips. Each mutant must
be, for the API:

- refused with one line (a `HexirError`, no traceback), or
- run, with the original module's answer on the same inputs, unless the damage explains a
  different one: a weight (rodata), a param's value, a kernel's kind (one with the same type
  rule; a v3 descriptor's kind is its code), or a command that now names another buffer,
  input, output, kernel or constant of the same type (another valid program; see
  `rewires`). Anything else that runs and answers differently is a silent wrong answer.

And hxb-dump must agree: it calls a mutant damaged exactly when hexir-format's validator
(the runtime's) does, and it lists every mutant it does not refuse. A mutation inside a
kernel's code (an image) is parsed and validated but not run: code is trusted, as documented;
so is a kernel's list of size operands (the sizes section's operand entries), which is part of
its code's calling convention and which nothing in an image can be checked against. A
dynamic module runs with each symbol at 3 (within its range).
The CLI (`hexir-run`) is checked on a sample: exit 0 or 1, one stderr line, no traceback.
"""

from __future__ import annotations

import io
import os
import random
import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
from conftest import FIXTURES
from hexir_format import records
from hexir_runtime.cli import main as hexir_run

examine = pytest.importorskip("hxb_dump.examine")

RUNTIME_FIXTURES = FIXTURES.parent / "packages" / "hexir-runtime" / "tests" / "fixtures"
SOURCES = [FIXTURES / "builtin.hxb", RUNTIME_FIXTURES / "v4-mlp.hxb",
           FIXTURES / "builtin-cpu.hxb", FIXTURES / "linear-relu.hxb",
           FIXTURES / "transformer_block-f32.hxb", RUNTIME_FIXTURES / "v6-dynamic.hxb",
           FIXTURES / "strnorm.hxb", FIXTURES / "generate.hxb"]
#: A string input runs with the words its fixture's model expects (`fixtures/strnorm.npz`):
#: a StringNormalizer keeps the compiled count of strings only for such data.
WORDS = np.load(FIXTURES / "strnorm.npz")["x"]
CAP = 1 << 26  # 64 MiB per run: a damaged size that is legal but huge stays cheap
# Fields tried per module: all of them, but a fixed-seed sample of a larger module's; the
# longer campaign (`HEXIR_MUTATIONS=all`) takes all.
SAMPLE = None if os.environ.get("HEXIR_MUTATIONS") == "all" else 150
#: Modules whose own records are a few among many ordinary ones: those records always, and a
#: smaller sample of the rest (the other modules' campaigns cover them). The transformer's
#: 4,059 fields are of the kinds the smaller modules have, each mutant a run of its 39
#: kernels (150 of them took 9-11 minutes on a loaded 2-core machine).
FOCUS = {"generate.hxb": ({"generate", "generation", "cache_pair"}, 8),
         "transformer_block-f32.hxb": (set(), 60)}
#: A generate entry point's run in the campaign: this prompt, this many new tokens.
PROMPT, NEW_TOKENS = np.array([[1, 2, 3]], np.int64), 4


@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    width: int  # bytes: 1, 4 or 8 (integers), or 8 with `real` (an f64 param)
    real: bool = False
    explains: bool = False  # a different answer is the damage's meaning (weights, params)
    code: bool = False  # inside a kernel's image: validated, never run
    kind: str = ""  # the record's (`records.Record.kind`)


REFERENCES = {"slot", "src", "dst", "index", "executable", "rodata_offset"}


def rewires(version: int, op: hf.Op, operand: str) -> bool:
    """Whether a command operand that still validates after the damage names something else
    of the same type: another buffer, input, output, kernel or constant of its size. That is
    another valid program, whose different answer the damage explains. Sizes (bytes, argc,
    a typed PRINT's rows and cols) are not: they must be refused, or change nothing."""
    untyped_print = version == 3 and op is hf.Op.PRINT and operand in ("rows", "cols")
    return operand in REFERENCES or operand.startswith("slot") or untyped_print


# The records the campaign damages: every fixed one but the optional names and plan sections'.
DAMAGED = {"header", "section", "symbol", "command", "executables", "executable", "argument",
           "param", "slot", "sizes", "size_symbol", "program_entry", "word", "strings",
           "string", "generate", "generation", "cache_pair"}
#: A dynamic module's records that are part of a kernel's calling convention: validated,
#: never run (as code is).
CONVENTION = {"operand"}


def field_map(data: bytes) -> list[Field]:
    module = hf.parse(data)
    fields: list[Field] = []
    images: list[Field] = []  # an executable's code, after its argument types and params
    for record in records.records(data):
        if images and not record.label.startswith(f"{images[0].name.split('.')[0]}."):
            fields, images = fields + images, []
        if record.kind in DAMAGED:
            fields += [replace(f, kind=record.kind) for f in record_fields(module, record)]
        if record.kind in CONVENTION:
            fields += [replace(f, code=True) for f in record_fields(module, record)]
        if record.kind == "executable" and record.values.image_size:
            start = exes_offset(module) + record.values.image_offset
            images = [Field(f"{record.label}.image+{k}", start + k, 2, code=True)
                      for k in (16, 18, 40, 58, 60, 62)]  # a few bytes of its ELF header
    fields += images
    rodata = module.layout.section(hf.SectionKind.RODATA)
    fields += [Field(f"rodata+{k}", rodata.offset + k, 4, explains=True)
               for k in range(0, min(rodata.size, 64), 8)]
    return fields


def exes_offset(module: hf.Module) -> int:
    return module.layout.section(hf.SectionKind.EXECUTABLES).offset


def record_fields(module: hf.Module, record: records.Record) -> Iterator[Field]:
    """The record's fields as the campaign names and damages them: a name's (or the magic's)
    first byte stands for it; a param is a real whose change the damage explains; a command's
    operands are named by its op, and a renamed version 6 variant is another valid program."""
    if record.kind == "command":
        op = hf.Op(record.values.kind)
        names = [*hf.OPERAND_NAMES[op], *(f"slot{j}" for j in range(len(record.values.operands)))]
        short = {"kind": "kind", "operand_count": "count"}
        for f in records.fields(record):
            index = int(f.path[len("operands["):-1]) if f.path.startswith("operands[") else None
            name = short[f.path] if index is None else names[index]
            yield Field(f"{record.label}.{name}", f.offset, f.width,
                        explains=index is not None and rewires(module.version, op, name))
        return
    for f in records.fields(record):
        if record.kind == "param":
            yield Field(record.label, f.offset, f.width, real=True, explains=True)
        elif record.kind == "generation" and f.path == "eos":  # another token ends the loop
            yield Field(f"{record.label}.{f.path}", f.offset, f.width, explains=True)
        elif f.format is None:  # a byte string
            renamed = module.version >= 6 and record.kind == "symbol"
            yield Field(f"{record.label}.{f.path}", f.offset, 1, explains=renamed)
        else:
            yield Field(f"{record.label}.{f.path}", f.offset, f.width)


def hostile(field: Field, original: int | float) -> list[int | float]:
    if field.real:
        return [0.0, -1.0, 0.5, 2.0, 1e300, float("nan"), float("inf"), original + 1]
    top = (1 << (8 * field.width)) - 1
    values = {0, 1, 2, 3, 7, 8, 9, 64, top, top - 1, top >> 1, (top >> 1) + 1,
              original + 1, original - 1, original * 2, original + 8}
    if field.width == 8:
        values |= {1 << 32, (1 << 32) + 8, 1 << 40}
    return sorted(v for v in values if 0 <= v <= top and v != original)


def read(data: bytes, field: Field) -> int | float:
    fmt = "<d" if field.real else {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[field.width]
    return struct.unpack_from(fmt, data, field.offset)[0]


def write(data: bytearray, field: Field, value: int | float) -> None:
    fmt = "<d" if field.real else {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[field.width]
    struct.pack_into(fmt, data, field.offset, value)


def input_types(module: hr.Module, entry: hr.EntryPoint) -> list[hf.TensorType]:
    """The entry's input types; a dynamic module's with each symbol at 3 (or the nearest
    value its range allows)."""
    env = {s.name: min(max(3, s.lo), s.hi) for s in module.symbols}
    return [t.evaluate(env) for t in entry.signature.inputs]


def inputs_of(module: hr.Module) -> dict[str, list[np.ndarray]]:
    rng = np.random.default_rng(7)
    return {name: [WORDS.reshape(t.shape) if t.dtype is hf.DType.STRING else
                   rng.standard_normal(t.shape).astype(t.dtype.numpy)
                   for t in input_types(module, entry)]
            for name, entry in module.entry_points.items()}


def of_type(a: np.ndarray, t: hf.TensorType) -> bool:
    """Whether `a` is an input of `t`'s element type (strings: a numpy str array)."""
    return a.dtype.kind == "U" if t.dtype is hf.DType.STRING else a.dtype == np.dtype(
        t.dtype.numpy)


def answer(data: bytes, inputs: dict[str, list[np.ndarray]] | None, *, run: bool = True):
    """("refused", message) or ("ran", {entry: (outputs, printed)}); anything but a
    HexirError propagates and fails the test."""
    try:
        with hr.load(data, max_alloc_bytes=CAP) as m:
            if not run:
                for name in m.entry_points:
                    m.prepare(name)
                return "loaded", None
            got = {}
            for name, entry in m.entry_points.items():
                args = list((inputs or {}).values())[len(got)] if inputs and len(got) < len(
                    inputs) else None
                want = entry.signature.inputs  # a dynamic one's: the sizes as given
                if args is None or len(args) != len(want) or any(
                        not of_type(a, t) or a.ndim != t.rank or
                        (t.is_static and a.shape != t.shape)
                        for a, t in zip(args, want, strict=True)):
                    args = [np.ones(t.shape, t.dtype.numpy) for t in input_types(m, entry)]
                run_ = m.execute(name, args)
                got[name] = (run_.outputs, run_.printed)
            for g in m.generations:  # the decode loop, its state and its bound
                got[g.name] = ((m.generate(PROMPT, NEW_TOKENS, entry=g.name),), [])
            return "ran", got
    except hf.HexirError as e:
        message = str(e)
        assert "\n" not in message, message
        return "refused", message


def same(a, b) -> bool:
    """The same answers, entry by entry in order (a damaged name is visible, not silent)."""
    if len(a) != len(b):
        return False
    for (outs_a, printed_a), (outs_b, printed_b) in zip(a.values(), b.values(), strict=True):
        mine, theirs = [*outs_a, *printed_a], [*outs_b, *printed_b]
        if len(outs_a) != len(outs_b) or len(mine) != len(theirs):
            return False
        if any(x.shape != y.shape or x.dtype != y.dtype or
               not np.array_equal(x, y, equal_nan=x.dtype.kind != "U")
               for x, y in zip(mine, theirs, strict=True)):
            return False
    return True


def sound(data: bytes) -> bool:
    try:
        hf.validate.check(hf.parse(data))
        return True
    except hf.HexirError:
        return False


def check_mutant(data: bytes, mutant: bytes, baseline, inputs, fields: list[Field], where: str,
                 tmp_path) -> str:
    code = any(f.code for f in fields)
    outcome, result = answer(mutant, inputs, run=not code)
    # hxb-dump agrees with the validator the runtime runs.
    path = tmp_path / "mutant.hxb"
    path.write_bytes(mutant)
    report = examine.examine(str(path), values=False)
    assert (report.error is None) == sound(mutant), f"{where}: dump says {report.error!r}"
    if report.error is not None:
        assert outcome == "refused", f"{where}: the dump refuses ({report.error}), the API ran"
    if outcome == "ran" and not same(result, baseline):
        explained = any(f.explains for f in fields) or any(
            f.name.endswith(".kind") and f.name.startswith("exe[") for f in fields)
        assert explained, f"{where}: a silent wrong answer"
    return outcome


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_every_field_with_hostile_values(tmp_path, source):
    data = source.read_bytes()
    with hr.load(data) as m:
        inputs = inputs_of(m)
    outcome, baseline = answer(data, inputs)
    assert outcome == "ran"
    counts = {"refused": 0, "ran": 0, "loaded": 0}
    fields = field_map(data)
    focus, sample = FOCUS.get(source.name, (set(), SAMPLE))
    if SAMPLE and len(fields) > 2 * sample:
        rest = [f for f in fields if f.kind not in focus]
        fields = [f for f in fields if f.kind in focus] + \
            random.Random(source.name).sample(rest, sample)
    for field in fields:
        for value in hostile(field, read(data, field)):
            mutant = bytearray(data)
            write(mutant, field, value)
            where = f"{source.name}: {field.name} = {value}"
            counts[check_mutant(data, bytes(mutant), baseline, inputs, [field], where,
                                tmp_path)] += 1
    assert counts["refused"] > 0 and sum(counts.values()) > 10 * len(fields) // 2, counts
    print(f"{source.name}: {len(fields)} fields, {counts}")


@pytest.mark.parametrize("source", SOURCES[:4], ids=lambda p: p.name)
def test_pairs_of_fields(tmp_path, source):
    data = source.read_bytes()
    with hr.load(data) as m:
        inputs = inputs_of(m)
    _, baseline = answer(data, inputs)
    fields = [f for f in field_map(data) if not f.code]
    rng = random.Random(source.name)
    for _ in range(150):
        pair = rng.sample(fields, 2)
        mutant = bytearray(data)
        for f in pair:
            write(mutant, f, rng.choice(hostile(f, read(data, f))))
        where = f"{source.name}: {pair[0].name}, {pair[1].name}"
        check_mutant(data, bytes(mutant), baseline, inputs, pair, where, tmp_path)


@pytest.mark.parametrize("source", [FIXTURES / "builtin.hxb", RUNTIME_FIXTURES / "v4-mlp.hxb",
                                    FIXTURES / "builtin-cpu.hxb",
                                    RUNTIME_FIXTURES / "v6-dynamic.hxb"], ids=lambda p: p.name)
def test_every_truncation_is_refused_in_one_line(source):
    data = source.read_bytes()
    for length in range(len(data)):
        outcome, _message = answer(data[:length], None)
        assert outcome == "refused", f"{source.name} cut at {length} ran"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_byte_flips_outside_code(tmp_path, source):
    data = source.read_bytes()
    with hr.load(data) as m:
        inputs = inputs_of(m)
    _, baseline = answer(data, inputs)
    module = hf.parse(data)
    exes = module.layout.section(hf.SectionKind.EXECUTABLES)
    rodata = module.layout.section(hf.SectionKind.RODATA)
    strings = module.layout.section(hf.SectionKind.STRINGS)
    # a string's bytes (after the strings section's entries) are data, as weights are
    text = (strings.offset + 8 + 8 * len(module.strings), strings.offset + strings.size) \
        if strings else (0, 0)
    code, at = [], exes.offset  # the images lie in executable order
    for e in module.executables:
        if e.image is not None:
            at = bytes(data).find(bytes(e.image), at)
            code.append((at, len(e.image)))
            at += len(e.image)
    rng = random.Random(f"flips {source.name}")
    for _ in range(300):
        at = rng.randrange(len(data))
        if any(start <= at < start + size for start, size in code):
            continue
        mutant = bytearray(data)
        mutant[at] ^= 1 << rng.randrange(8)
        weight = rodata.offset <= at < rodata.offset + rodata.size or \
            text[0] <= at < text[1]
        where = f"{source.name}: bit flip at {at}"
        check_mutant(data, bytes(mutant), baseline, inputs,
                     [Field("flip", at, 1, explains=weight)], where, tmp_path)


def test_the_command_line_answers_every_kind_of_damage_in_one_line(tmp_path):
    data = (FIXTURES / "builtin-cpu.hxb").read_bytes()
    rng = random.Random("cli")
    fields = [f for f in field_map(data) if not f.code]
    path = tmp_path / "m.hxb"
    for field in rng.sample(fields, 40):
        mutant = bytearray(data)
        write(mutant, field, rng.choice(hostile(field, read(data, field))))
        path.write_bytes(bytes(mutant))
        out, err = io.StringIO(), io.StringIO()
        code = hexir_run([str(path), "--quiet"], out, err)
        assert code in (0, 1), field
        if code:
            assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("hexir-run: ")
