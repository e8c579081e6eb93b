"""Writing a file so that no reader, and no interrupted run, ever sees half of it.

Every tool that writes an output (`hexir -o`, `hexir-run --output`, `hxb-dump --image`) goes
through here: the bytes go to a temporary file beside the target, which replaces the target
only once it is complete, and gets the mode an ordinary `open` would give (0666 less the
umask), not mkstemp's 0600.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


@contextmanager
def atomic_write(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file to write; on a clean exit it becomes `path`, on any error it vanishes.

    OSError from creating the temporary file (a missing or read-only directory) propagates
    before the body runs."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` through `atomic_write`."""
    with atomic_write(path) as out:
        out.write(data)
