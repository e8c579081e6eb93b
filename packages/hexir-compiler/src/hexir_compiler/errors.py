"""The compiler's error: a program, flag or stage Hexir refuses, with a one-line message.

Derives from `hexir_format.HexirError` so a caller catches everything Hexir reports about bad
input with one `except`. An error about one op carries its location; `diagnostic` renders it
the way MLIR does, `prog.mlir:3:8: error: <message>`, and `error: <message>` without one.
"""

from __future__ import annotations

import re

from hexir_format import HexirError

_FILE_LINE_COL = re.compile(r'^loc\("(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)')
# An imported model's ops are named, not placed in a file: `loc("model.onnx: node 'c' (Conv)")`.
_NAMED = re.compile(r'^loc\("(?P<name>[^"]+)"\)$')


class CompileError(HexirError):
    """A program or option the compiler cannot turn into output."""

    def __init__(self, message: str, location=None) -> None:
        super().__init__(message)
        self.location = location


def where(location) -> str | None:
    """`file:line:col` of an `ir.Location` (or its text), the name of a named one (an imported
    model's node), None when it names neither."""
    match = _FILE_LINE_COL.match(str(location))
    if match:
        return f"{match['file']}:{match['line']}:{match['col']}"
    named = _NAMED.match(str(location))
    return named["name"] if named else None


def diagnostic(err: Exception) -> str:
    """What a CLI prints for `err`: one line, or one per problem where it names several (an
    ONNX model's refusals), each rendered alike."""
    message = str(err)
    location = getattr(err, "location", None)
    op = getattr(err, "op", None)
    if location is None and op is not None:
        location = op.location
    place = where(location)
    if place is None and re.match(r"^\S+:\d+:\d+: error: ", message):
        return message  # already rendered with its location
    return "\n".join(f"{place}: error: {line}" if place else f"error: {line}"
                     for line in getattr(err, "lines", ()) or (message,))
