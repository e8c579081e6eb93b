"""hxb-dump's own error, under Hexir's root, so the CLI reports it as one line and exits 1."""

from hexir_format import HexirError


class DumpError(HexirError):
    """A module that parses but does not hold together, or a request the module cannot meet."""
