"""The root of every error Hexir raises on purpose, and the format's own error.

Each package derives its errors from `HexirError`, so an embedding program can catch
everything Hexir reports about bad input with one `except`, and CLIs can tell a user's
mistake (one line, exit 1) from a bug (a traceback).
"""


class HexirError(Exception):
    """Something Hexir refuses, with a message fit for one line on stderr."""


class FormatError(HexirError):
    """A `.hxb` that breaks the layout: the message names the field and the byte offset."""

    def __init__(self, message: str, *, field: str | None = None, offset: int | None = None):
        super().__init__(message)
        self.field = field
        self.offset = offset
