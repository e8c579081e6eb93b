"""Map a `.hxb` read-only and parse it in place.

The whole file is mapped, never read: hexir-format validates headers and tables and hands
back rodata and device images as memoryview slices of the mapping, so loading a 1 GiB module
touches the same few pages as loading a 1 KiB one, and a CONST binds a read-only view of the
weights instead of a copy.

Closing is explicit. The mapping is unmapped at once when nothing else still looks at it; if a
view escaped (an array the caller kept), the mapping stays alive until the last view goes, so
closing can never leave a dangling view.
"""

from __future__ import annotations

import mmap
import os

import hexir_format as hf

from hexir_runtime.errors import LoadError

Source = str | os.PathLike[str] | bytes | bytearray | memoryview
IN_MEMORY = "<memory>"


class MappedModule:
    """A parsed module and the read-only mapping its payloads point into.

    `source` is a path, or the module's bytes (a module loaded from memory: `bytes` are used
    in place, a `bytearray` or `memoryview` is copied once so a kernel never sees it change).
    """

    def __init__(self, source: Source):
        if isinstance(source, bytes | bytearray | memoryview):
            self.path = IN_MEMORY
            data = source if isinstance(source, bytes) else bytes(source)
            if not data:
                raise LoadError(f"cannot load {IN_MEMORY}: invalid module: it is empty")
            self._map = data
        elif isinstance(source, str | os.PathLike):
            self.path = str(source)
            self._map = _map_file(self.path)
        else:
            raise LoadError(f"cannot load a {type(source).__name__}: expected a path or the "
                            "module's bytes")
        try:
            self.module: hf.Module | None = hf.parse(self._map)
        except hf.FormatError as e:
            self._release()
            raise LoadError(f"cannot load '{self.path}': invalid module: {e}") from None

    @property
    def closed(self) -> bool:
        return self.module is None

    def close(self) -> None:
        """Drop the parsed module and unmap the file (deferred while a view is still in use)."""
        self.module = None
        self._release()

    def _release(self) -> None:
        mapping, self._map = self._map, None
        if not isinstance(mapping, mmap.mmap):
            return
        try:
            mapping.close()
        except BufferError:
            # A view of the mapping is still in use; the mmap object goes, and is unmapped,
            # when the last view does.
            pass

    def __enter__(self) -> MappedModule:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _map_file(path: str) -> mmap.mmap:
    """The file mapped read-only, or a one-line `io error` / `invalid module` LoadError."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise LoadError(f"cannot load '{path}': invalid module: the file is empty")
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise LoadError(f"cannot load '{path}': io error: {e.strerror or e}") from None
    except ValueError as e:  # mmap of something that cannot be mapped (a pipe, ...)
        raise LoadError(f"cannot load '{path}': io error: {e}") from None
