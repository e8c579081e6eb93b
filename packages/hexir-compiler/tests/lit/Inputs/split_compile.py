"""Compile each `// -----` chunk of a file with `hexir -emit=mlir`, one after another.

lit's answer to mlir-opt's --split-input-file: every chunk keeps its line numbers (earlier
lines become blank), and is written under the original file name, so a diagnostic reads
`invalid-hexir.mlir:12:8: error: ...` and a test checks it with [[@LINE]]. Each chunk's
stderr, and its exit status, go to stdout for FileCheck.
"""

import contextlib
import io
import sys
import tempfile
from pathlib import Path

from hexir_compiler.cli import main

SEPARATOR = "// -----"


def chunks(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    out, start = [], 0
    for i, line in enumerate([*lines, SEPARATOR]):
        if line.strip() == SEPARATOR:
            out.append("\n" * start + "".join(lines[start:i]))
            start = i + 1
    return out


def run(path: Path, extra: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / path.name
        for chunk in chunks(path.read_text()):
            target.write_text(chunk)
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                status = main([*extra, str(target)])
            sys.stdout.write(err.getvalue())
            sys.stdout.write(f"exit {status}\n")


if __name__ == "__main__":
    run(Path(sys.argv[1]), sys.argv[2:] or ["-emit=mlir"])
