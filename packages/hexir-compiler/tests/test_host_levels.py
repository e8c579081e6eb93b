"""A module holds a program per x86-64 level (format version 6): each level's variant of a
default module is the program `-target=cpu:<level>` compiles alone (which is why the suites
that compile many models compile for the host's level only, `conftest.HOST_TARGET`), the
levels share their constants, and a stage that records its level compiles for it alone."""

from __future__ import annotations

from pathlib import Path

import pytest

import hexir_compiler
import hexir_format as hf
from hexir_compiler import CompileError
from hexir_compiler.target import cuda_toolkit

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def program(module: hf.Module, function: hf.Function) -> list[tuple]:
    """`function`'s commands with every reference replaced by what it names: a slot by its
    type and the order it first appears in, a kernel by its fields and code, a constant by
    its bytes -- equal for two modules exactly when they run the same program."""
    slots: dict[int, int] = {}
    rodata = bytes(module.rodata)

    def slot(i: int) -> tuple:
        return (slots.setdefault(i, len(slots)), module.slots[i].device, module.slots[i].type)

    out = []
    for c in function.commands:
        names = hf.OPERAND_NAMES[c.op]
        row: list = [c.op]
        for name, value in zip(names, c.operands, strict=False):
            if name in ("slot", "dst", "src"):
                row.append(slot(value))
            elif name == "executable":
                e = module.executables[value]
                row.append((e.name, e.kind, e.device, e.args, e.params, bytes(e.image or b""),
                            e.grid, e.block, e.cpu_level))
            elif name == "rodata_offset":
                row.append(rodata[value:value + c.operands[2]])
            else:
                row.append(value)
        row += [slot(v) for v in c.operands[len(names):]]
        out.append(tuple(row))
    return out


@pytest.mark.parametrize("source", [None, EXAMPLES / "mlp.mlir"], ids=["builtin", "mlp"])
def test_each_variant_is_the_program_its_level_compiles_alone(source):
    default = hf.parse(hexir_compiler.compile(source))
    assert default.version == 6
    assert [f.cpu_level for f in default.functions] == [2, 3, 4]
    for variant in default.functions:
        level = hf.CPU_LEVELS[variant.cpu_level]
        alone = hf.parse(hexir_compiler.compile(source, target=f"cpu:{level}"))
        assert alone.version == 5
        (only,) = alone.functions
        assert program(default, variant) == program(alone, only), level


def test_the_levels_store_each_constant_once():
    """The MLP's weights (packed into 64-byte panels at every level) are stored once: the
    three-level module's rodata is the one-level module's."""
    default = hf.parse(hexir_compiler.compile(EXAMPLES / "mlp.mlir"))
    alone = hf.parse(hexir_compiler.compile(EXAMPLES / "mlp.mlir", target="cpu:x86-64-v3"))
    assert bytes(default.rodata) == bytes(alone.rodata)


def test_a_stage_from_mlir_tir_on_compiles_for_its_own_level_only(tmp_path):
    text = tmp_path / "tir.mlir"
    text.write_text(hexir_compiler.compile(None, "mlir-tir", target="cpu:x86-64-v3"))
    assert 'hexir.cpu = "x86-64-v3"' in text.read_text().splitlines()[0]
    fed_back = hf.parse(hexir_compiler.compile(text))
    assert fed_back.version == 5 and {e.cpu_level for e in fed_back.executables} == {3}
    with pytest.raises(CompileError, match=r"^the module's kernels were made for x86-64-v3 "
                                           r"\(hexir.cpu = \"x86-64-v3\"\); it cannot be "
                                           r"compiled for x86-64-v2: compile the source"):
        hexir_compiler.compile(text, target="cpu:x86-64-v2")


def has_toolkit() -> bool:
    try:
        cuda_toolkit.find_toolkit()
        return True
    except CompileError:
        return False


@pytest.mark.skipif(not has_toolkit(), reason="no CUDA toolkit (ptxas, libdevice)")
def test_a_module_with_no_cpu_kernels_holds_one_program():
    """Every op on cuda: no host code, so no level to choose between."""
    module = hf.parse(hexir_compiler.compile(None, placement="cuda"))
    assert module.version == 5 and [f.cpu_level for f in module.functions] == [0]
