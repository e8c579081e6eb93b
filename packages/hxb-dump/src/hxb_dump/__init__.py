"""hxb-dump: show what a Hexir `.hxb` module holds.

A second reader of the format, for people: the header and section table, entry points and
their commands, slots, constants and kernels with their device images. `examine` gathers the
facts as plain data; `listing.render` prints them as text and the CLI's `--json` as JSON.
"""

from hxb_dump.__about__ import __version__
from hxb_dump.errors import DumpError
from hxb_dump.examine import Report, examine
from hxb_dump.listing import render

__all__ = ["DumpError", "Report", "__version__", "examine", "render"]
