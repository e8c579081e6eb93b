"""For each program and each MLIR stage: compile the program to the stage, feed the printed
stage back into `hexir -emit=hxb` with the same flags, and compare with compiling the
program straight to `.hxb`. Prints `<program> <stage>: same` or `... DIFFERENT (a vs b bytes)`.
A stage from mlir-tir on holds one x86-64 level's kernels (its `hexir.cpu` attribute), so it
is compared with the program compiled straight for that level (`-target=cpu:<level>`); the
stages above it, with the program compiled with the flags alone (every level they name).

    stages_fed_back.py OUTDIR FLAGS PROGRAM...     (FLAGS: one argument, may be "")

Runs the CLI in-process (`hexir_compiler.cli.main`), so the files are what `hexir` writes.
"""

import contextlib
import io
import re
import sys
from pathlib import Path

from hexir_compiler.cli import main
from hexir_compiler.pipeline import STAGES


def hexir(*argv: str) -> None:
    with contextlib.redirect_stderr(io.StringIO()) as err:
        status = main(list(argv))
    if status != 0:
        sys.exit(f"hexir {' '.join(argv)} failed ({status}): {err.getvalue().strip()}")


out, flags, *programs = sys.argv[1:]
flags = flags.split()
for program in programs:
    name = Path(program).stem if program != "-" else "builtin"
    source = [] if program == "-" else [program]
    direct = Path(out, f"{name}.hxb")
    hexir("-emit=hxb", *flags, "-o", str(direct), *source)
    for stage in STAGES:
        if stage in ("llvm", "hxb"):
            continue
        printed = Path(out, f"{name}.{stage}.mlir")
        again = Path(out, f"{name}.{stage}.hxb")
        hexir(f"-emit={stage}", *flags, "-o", str(printed), *source)
        hexir("-emit=hxb", *flags, "-o", str(again), str(printed))
        level = re.search(r'hexir\.cpu = "([\w-]+)"', printed.read_text(errors="replace")[:4096])
        want = direct
        if level is not None:
            want = Path(out, f"{name}.{level[1]}.hxb")
            if not want.exists():
                hexir("-emit=hxb", *flags, f"-target=cpu:{level[1]}", "-o", str(want), *source)
        a, b = want.read_bytes(), again.read_bytes()
        verdict = "same" if a == b else f"DIFFERENT ({len(a)} vs {len(b)} bytes)"
        print(f"{name} {stage}: {verdict}")
