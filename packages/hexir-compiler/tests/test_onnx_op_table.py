"""The README's table of ONNX ops says what the frontend has: every op with a handler, each
with exactly the op versions it implements, and no op it does not import."""

from __future__ import annotations

import re
from pathlib import Path

from hexir_compiler.frontend import onnx_ops

README = Path(__file__).resolve().parents[1] / "README.md"


def _table() -> dict[str, tuple[int, ...]]:
    """op -> the op versions its row lists (the numbers outside the parentheses)."""
    text = README.read_text()
    header = "| op | op versions (opsets) | reads | element types |"
    assert header in text
    rows = {}
    for line in text[text.index(header):].splitlines()[2:]:
        if not line.startswith("| "):
            break
        ops, versions = (cell.strip() for cell in line.split("|")[1:3])
        listed = tuple(int(v) for v in re.findall(r"\d+", re.sub(r"\([^)]*\)", "", versions)))
        for op in ops.split(", "):
            assert op not in rows, f"{op} has two rows"
            rows[op] = listed
    return rows


def test_the_readme_lists_every_op_the_frontend_imports_with_its_versions():
    table = _table()
    assert sorted(table) == sorted(onnx_ops.HANDLERS)
    for op, versions in onnx_ops.VERSIONS.items():
        assert table[op] == versions, (op, table[op], versions)
