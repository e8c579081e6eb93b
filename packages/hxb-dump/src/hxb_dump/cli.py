"""`hxb-dump FILE [--rodata] [--json] [--image KERNEL [-o PATH]] [--sass KERNEL]`.

Thin on purpose: `examine` gathers the facts, `listing` or JSON prints them, `images` writes
or disassembles a kernel. Exit 0 for a sound module, 1 (after as much of the listing as was
safe and one `hxb-dump: error: ...` line) for a damaged file or a request it cannot meet,
2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import hexir_format
from hexir_format import HexirError
from hexir_format.files import terminate_as_interrupt, write_atomically
from hxb_dump import images, listing
from hxb_dump.__about__ import __version__
from hxb_dump.examine import Report, examine, kernel_image

PROG = "hxb-dump"


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad command line is one line that points at --help (not the usage)."""

    def error(self, message: str):
        self.exit(2, f"{PROG}: error: {message}; see '{PROG} --help'\n")


class _Version(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{PROG} {__version__}\nhexir-format {hexir_format.__version__}")
        parser.exit(0)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Show what a Hexir .hxb module holds.",
                allow_abbrev=False)
    p.add_argument("file", metavar="FILE", help="the .hxb module")
    p.add_argument("--rodata", action="store_true",
                   help="also print the constants in rodata, typed by the slots they bind")
    p.add_argument("--json", action="store_true", help="print the same facts as JSON")
    p.add_argument("--image", metavar="KERNEL",
                   help="write KERNEL's image to a file (cuda: for cuobjdump --dump-sass; "
                        "cpu: for objdump -d)")
    p.add_argument("-o", "--output", metavar="PATH",
                   help="where --image writes (default: KERNEL.bin)")
    p.add_argument("--sass", metavar="KERNEL",
                   help="print KERNEL's SASS with cuobjdump (cubin or fatbin images)")
    p.add_argument("--version", action=_Version, nargs=0,
                   help="print the versions of hxb-dump and its format")
    return p


def main(argv: list[str] | None = None) -> int:
    arguments = parser()
    try:
        args = arguments.parse_args(argv)
        if args.output is not None and args.image is None:
            arguments.error("-o/--output needs --image KERNEL")
    except SystemExit as e:  # argparse: 2 for bad arguments, 0 for --help/--version
        return e.code if isinstance(e.code, int) else 2
    terminate_as_interrupt()  # SIGTERM, like Ctrl-C, leaves no partial --image file
    try:
        return run(args)
    except BrokenPipeError:  # `hxb-dump big.hxb | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"{PROG}: error: interrupted", file=sys.stderr)
        return 130


def run(args: argparse.Namespace) -> int:
    report = examine(args.file, values=args.rodata)
    notes: list[str] = []
    if report.error is None:
        report.error = _extras(args, report, notes)
    if args.json:
        facts = report.facts | ({"error": report.error} if report.error else {})
        print(json.dumps(_json_safe(facts), indent=2))
    else:
        lines = listing.render(report.facts, rodata=args.rodata) + notes
        if lines:
            print("\n".join(lines))
        if "sass" in report.facts:
            print(report.facts["sass"], end="")
    if report.error:
        sys.stdout.flush()
        print(f"{PROG}: error: {hexir_format.printable(report.error)}", file=sys.stderr)
        return 1
    return 0


def _extras(args: argparse.Namespace, report: Report, notes: list[str]) -> str | None:
    """Carry out --image and --sass; the error that stopped them, if any."""
    assert report.module is not None  # examine returns a module whenever there is no error
    try:
        if args.image is not None:
            image = kernel_image(report.module, args.image, args.file)
            path = args.output or f"{args.image}.bin"
            try:
                write_atomically(path, image)
            except OSError as e:
                return f"cannot write the image of '{args.image}' to '{path}': {e.strerror or e}"
            report.facts["wrote"] = path
            notes.append(f"    wrote {path} ({images.next_step(image, path)})")
        if args.sass is not None:
            image = kernel_image(report.module, args.sass, args.file)
            report.facts["sass"] = images.sass(args.sass, image)
    except HexirError as e:
        return str(e)
    return None


def _json_safe(value: object) -> object:
    """JSON has no NaN or infinity; rodata may hold them, so they become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value
