"""Reading a file only if it is one, and writing one so no reader ever sees half of it.

Every tool that reads a module or an input goes through `open_regular`: a FIFO, a device or
a directory is refused before anything waits on it (opening a FIFO for reading blocks until
a writer comes). Every tool that writes an output (`hexir -o`, `hexir-run --output`,
`hxb-dump --image`) goes through `atomic_write`: the bytes go to an unnamed file in the
target's directory (Linux `O_TMPFILE`; elsewhere a hidden temporary file), which is linked
into place only once complete, so an interrupted run, even one killed with SIGKILL, leaves
no partial file behind. The result gets the mode an ordinary `open` would give (0666 less
the umask), not a temporary file's 0600.
"""

from __future__ import annotations

import os
import secrets
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
         stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """`path` opened for reading, or OSError; `not a regular file` for anything else (the
    open cannot block: it is non-blocking until the file is known to be regular)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise OSError(0, f"it is {kind}, not a regular file", str(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


@contextmanager
def atomic_write(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file to write; on a clean exit it becomes `path`, on any error it vanishes.

    OSError from creating the file (a missing or read-only directory) propagates before the
    body runs."""
    target = Path(path)
    umask = os.umask(0)  # read by setting it, so set it back
    os.umask(umask)
    mode = 0o666 & ~umask
    try:
        fd, tmp = os.open(target.parent, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, mode), None
    except (AttributeError, OSError):  # no O_TMPFILE here, or not on this filesystem
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            if tmp is None:  # give the unnamed file a name beside the target, then move it
                tmp = str(target.parent / f".{target.name}.{secrets.token_hex(8)}.tmp")
                fds = os.open("/proc/self/fd", os.O_RDONLY | os.O_CLOEXEC)
                try:  # linkat(AT_SYMLINK_FOLLOW) of the fd's /proc link: the file, not the link
                    os.link(str(out.fileno()), tmp, src_dir_fd=fds, follow_symlinks=True)
                finally:
                    os.close(fds)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` through `atomic_write`."""
    with atomic_write(path) as out:
        out.write(data)


def terminate_as_interrupt() -> None:
    """Make SIGTERM end a command line tool the way Ctrl-C does (KeyboardInterrupt), so what
    it was writing is cleaned up the same way (the default action would skip every cleanup)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)
