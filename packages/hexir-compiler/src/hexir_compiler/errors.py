"""The compiler's error: a program, flag or stage Hexir refuses, with a one-line message.

Derives from `hexir_format.HexirError` so a caller catches everything Hexir reports about bad
input with one `except`. The message is what the CLI prints after `error: ` (or, when it
already carries a location, as `<file>:<line>:<col>: error: ...`).
"""

from hexir_format import HexirError


class CompileError(HexirError):
    """A program or option the compiler cannot turn into output."""
