"""`python -m hexir_compiler.transforms`: run named passes on one file, like mlir-opt.

The pass tests use it to watch one pass at a time (the `hexir` CLI runs whole -emit stages):

    python -m hexir_compiler.transforms --pass=hexir-partition,hexir-lower-to-tir in.mlir

A name with a module in this package (`hexir-lower-to-tir` -> `hexir_lower_to_tir.py`)
runs that module's `run(module)`; `hexir-partition` also takes `--placement`. Anything else is
an upstream pass or pipeline element (`one-shot-bufferize{...}`, `canonicalize`). The result
goes to stdout; an error is one line on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys

from hexir_compiler.dialects import context
from hexir_compiler.errors import CompileError, diagnostic
from hexir_compiler.mlir import ir, passmanager
from hexir_compiler.placement import parse_placement
from hexir_format import HexirError


def split_pipeline(text: str) -> list[str]:
    """Split on the commas that are not inside `{...}` or `(...)` option lists."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "{("
        depth -= ch in "})"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def run_passes(module: ir.Module, names: list[str], placement: dict[str, str]) -> None:
    for name in names:
        local = _local_pass(name)
        if local is None:
            passmanager.PassManager.parse(f"builtin.module({name})").run(module.operation)
        elif name == "hexir-partition":
            local.run(module, placement)
        else:
            local.run(module)


def _local_pass(name: str):
    if not re.fullmatch(r"hext?ir-[a-z0-9-]+", name):
        return None
    try:
        return importlib.import_module(f"hexir_compiler.transforms.{name.replace('-', '_')}")
    except ModuleNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hexir_compiler.transforms",
                                     allow_abbrev=False)
    parser.add_argument("input")
    parser.add_argument("--pass", dest="passes", default="", help="comma-separated pass names")
    parser.add_argument("--placement", action="append", default=[], help="<op>=<device>,...")
    args = parser.parse_args(argv)
    try:
        placement = parse_placement(args.placement)
        with context():
            module = ir.Module.parseFile(args.input)
            run_passes(module, split_pipeline(args.passes), placement)
            print(module)
    except ir.MLIRError as err:
        print(_diagnostic(err), file=sys.stderr)
        return 1
    except (HexirError, ValueError) as err:
        print(diagnostic(err).splitlines()[0], file=sys.stderr)
        return 1
    return 0


def _diagnostic(err: ir.MLIRError) -> str:
    first = err.error_diagnostics[0] if err.error_diagnostics else None
    if first is None:
        return f"error: {str(err).splitlines()[0]}"
    return diagnostic(CompileError(first.message, first.location))


if __name__ == "__main__":
    sys.exit(main())
