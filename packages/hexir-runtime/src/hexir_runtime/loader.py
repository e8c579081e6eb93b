"""Map a `.hxb` read-only and parse it in place.

The whole file is mapped, never read: hexir-format validates headers and tables and hands
back rodata and device images as memoryview slices of the mapping, so loading a 1 GiB module
touches the same few pages as loading a 1 KiB one, and a CONST binds a read-only view of the
weights instead of a copy.

Only the weights (rodata) stay in the mapping: everything else a run needs (the commands, the slot
and kernel tables, the kernels' code) is copied at load. Changing the file under a loaded module is
therefore defined up to one case: `check_unchanged`, at the start of every call, refuses a call when
the mapped file was changed in place (its size or modification time, read from the open file, so
renaming another file over the path changes nothing: the mapping still holds the old one), in one
line; what it cannot catch is the file shrinking *during* a call that reads the weights, which, as
with numpy's `memmap`, ends the process with SIGBUS. `copy=True` reads the whole file into memory
instead, for a file that may change.

Closing is explicit. The mapping is unmapped at once when nothing else still looks at it; if a
view escaped (an array the caller kept), the mapping stays alive until the last view goes, so
closing can never leave a dangling view.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import replace

import hexir_format as hf
from hexir_format.files import open_regular
from hexir_runtime.errors import LoadError

Source = str | os.PathLike[str] | bytes | bytearray | memoryview
IN_MEMORY = "<memory>"


class MappedModule:
    """A parsed module and the read-only mapping its weights point into.

    `source` is a path, or the module's bytes (a module loaded from memory: `bytes` are used
    in place, a `bytearray` or `memoryview` is copied once so a kernel never sees it change).
    `copy=True` reads a file into memory rather than mapping it.
    """

    def __init__(self, source: Source, *, copy: bool = False):
        self._file = None  # the mapped file, kept open to stat it
        self._fd = -1  # its descriptor while it is open
        if isinstance(source, bytes | bytearray | memoryview):
            self.path = IN_MEMORY
            data = source if isinstance(source, bytes) else bytes(source)
            if not data:
                raise LoadError(f"cannot load {IN_MEMORY}: invalid module: it is empty")
            self._map: bytes | mmap.mmap | None = data
        elif isinstance(source, str | os.PathLike):
            self.path = str(source)
            self._map, self._file = _read_file(self.path, copy)
            if self._file is not None:
                self._fd = self._file.fileno()
                st = os.fstat(self._fd)
                self._size, self._mtime_ns = st.st_size, st.st_mtime_ns
        else:
            raise LoadError(f"cannot load a {type(source).__name__}: expected a path or the "
                            "module's bytes")
        try:
            module = hf.parse(self._map)
        except hf.FormatError as e:
            self._release()
            raise LoadError(f"cannot load '{self.path}': invalid module: {e}") from None
        code = tuple(replace(e, image=None if e.image is None else bytes(e.image))
                     for e in module.executables)
        self.module: hf.Module | None = replace(module, executables=code)

    def check_unchanged(self) -> None:
        """Refuse to go on when the mapped file was changed in place since it was loaded."""
        fd = self._fd  # (every call's: one fstat and two compares, with the cache cold)
        if fd < 0:
            return
        st = os.fstat(fd)
        if st.st_size != self._size or st.st_mtime_ns != self._mtime_ns:
            raise LoadError(f"'{self.path}' changed on disk after it was loaded (truncated or "
                            "rewritten in place); load it again, or load it with copy=True to "
                            "read a file that may change")

    def close(self) -> None:
        """Drop the parsed module and unmap the file (deferred while a view is still in use)."""
        self.module = None
        self._release()

    def _release(self) -> None:
        self._fd = -1
        if self._file is not None:
            self._file.close()
        mapping, self._map = self._map, None
        if not isinstance(mapping, mmap.mmap):
            return
        try:
            mapping.close()
        except BufferError:
            # A view of the mapping is still in use; the mmap object goes, and is unmapped,
            # when the last view does.
            pass


def _read_file(path: str, copy: bool):
    """(the file mapped read-only, the open file) or, with `copy`, (its bytes, None); a
    one-line `io error` / `invalid module` LoadError otherwise."""
    try:
        f = open_regular(path)
    except OSError as e:
        raise LoadError(f"cannot load '{path}': io error: {e.strerror or e}") from None
    try:
        if os.fstat(f.fileno()).st_size == 0:
            raise LoadError(f"cannot load '{path}': invalid module: the file is empty")
        if copy:
            return f.read(), None
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), f
    except (OSError, ValueError, MemoryError) as e:  # something that cannot be mapped or read
        f.close()
        raise LoadError(f"cannot load '{path}': io error: {getattr(e, 'strerror', None) or e}") \
            from None
    except BaseException:
        f.close()
        raise
    finally:
        if copy:
            f.close()
