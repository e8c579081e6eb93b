"""Regenerate the compiler-built fixtures in the repository's `fixtures/` directory.

    python -m hexir_compiler.fixtures [fixtures-dir]

The runtime's tests run only against checked-in `.hxb` files, never the compiler; this is how
those files are made, and `tests/test_fixtures.py` fails when they drift from what the
compiler now produces. `builtin-cpu.hxb` is the built-in program on the cpu (version 5: the
linear is x86-64 code); `builtin-cuda.hxb` places its linear on cuda (the constants live on
the GPU, the product is copied back for the print), which needs the CUDA toolkit to build.
(`builtin.hxb`, the 488-byte version-3 module of the earlier C implementation, is not made
here: it is the seed's file, kept byte for byte so the runtime shows it still runs.) The
`*-split` / `*-mixed` modules place some ops on cuda and the rest on the cpu, so the
runtime's tests can check the transfers the compiler inserted against the all-cpu module;
the `*-cuda` example modules put every op on cuda, for a GPU run against the cpu fixtures.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hexir_format.files import write_atomically

from hexir_compiler.errors import CompileError, diagnostic
from hexir_compiler.pipeline import Options, compile_file
from hexir_compiler.placement import PLACEABLE

REPO = Path(__file__).resolve().parents[4]
DEFAULT_DIR = REPO / "fixtures"
ON_CUDA = "cuda"
EVERY_OP_ON_CUDA = {op: ON_CUDA for op in PLACEABLE if op.startswith("hexir.")}

# fixture name -> (source relative to the repository, None for the built-in program; options)
FIXTURES: dict[str, tuple[str | None, Options]] = {
    "builtin-cpu.hxb": (None, Options("hxb")),
    "builtin-cuda.hxb": (None, Options("hxb", {"hexir.linear": ON_CUDA})),
    "linear-relu.hxb": ("fixtures/linear-relu.mlir", Options("hxb")),
    "linear-relu-split.hxb": (
        "fixtures/linear-relu.mlir", Options("hxb", {"hexir.linear": ON_CUDA, "hexir.relu": "cpu"})),
    "mlp-f32-mixed.hxb": (
        "examples/mlp.mlir",
        Options("hxb", {"hexir.linear": ON_CUDA, "hexir.add": ON_CUDA, "hexir.relu": ON_CUDA})),
    # The example networks with every op on cuda: what a machine with a GPU runs against the
    # cpu fixtures (mlp-f32.hxb, ...) using the runtime alone.
    **{
        f"{net}-{dtype}-cuda.hxb": (
            f"examples/{net}{'' if dtype == 'f32' else '-f64'}.mlir", Options("hxb", EVERY_OP_ON_CUDA))
        for net in ("mlp", "transformer_block")
        for dtype in ("f32", "f64")
    },
}


def build(name: str) -> bytes:
    """The bytes the compiler produces now for fixture `name`."""
    source, options = FIXTURES[name]
    return compile_file(None if source is None else REPO / source, options)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0]) if argv else DEFAULT_DIR
    out.mkdir(parents=True, exist_ok=True)
    for name in FIXTURES:
        try:
            data = build(name)
        except CompileError as err:
            sys.stderr.write(f"{name}: {diagnostic(err)}\n")
            return 1
        write_atomically(str(out / name), data)
        sys.stderr.write(f"wrote {out / name} ({len(data)} bytes)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
