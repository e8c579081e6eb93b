"""The root of every error Hexir raises on purpose, and the format's own error.

Each package derives its errors from `HexirError`, so an embedding program can catch
everything Hexir reports about bad input with one `except`, and CLIs can tell a user's
mistake (one line, exit 1) from a bug (a traceback).
"""


def printable(text: str) -> str:
    """`text` with control characters escaped: names come off disk, and a newline or an
    escape sequence in one must not forge output lines or drive the terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


class HexirError(Exception):
    """Something Hexir refuses, with a message fit for one line on stderr: whatever the
    message quotes (a name from a file, a path), it is made printable, so it stays one line."""

    def __init__(self, message: object = "", *args: object):
        super().__init__(printable(str(message)), *args)


class FormatError(HexirError):
    """A `.hxb` that breaks the layout: the message names the field and the byte offset."""

    def __init__(self, message: str, *, field: str | None = None, offset: int | None = None):
        super().__init__(message)
        self.field = field
        self.offset = offset


class ValidationError(HexirError):
    """A module that parses but does not hold together (`hexir_format.validate`).

    The message names the entry point, the command and its file offset, and the field; they
    are kept as attributes too (None for module-level problems such as a bad executable).
    """

    def __init__(self, message: str, *, entry: str | None = None, command: int | None = None,
                 field: str | None = None, offset: int | None = None):
        super().__init__(message)
        self.entry = entry
        self.command = command
        self.field = field
        self.offset = offset
