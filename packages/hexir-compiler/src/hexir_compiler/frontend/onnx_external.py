"""A model file's weights read from disk one tensor at a time, never all held at once.

Parsed as it is, a model file holds its initializers' bytes in the protobuf for the whole
import, next to the MLIR attributes the import makes of them (each big weight's one lasting
copy, `onnx.Importer._initializer`): twice the weights at the import's peak. So
`without_weights` walks the file's protobuf wire format and gives the parser a model whose big
initializers are external-data references to their own bytes in the model file (location: the
file's name, offset, length; a valid ONNX reference, which ONNX's tools, the version converter
among them, carry as it is), and `read` reads one external tensor -- one of those, or one of a
model saved with external data -- into a fresh array the importer makes its attribute from
and drops.

Everything read from disk is untrusted: the walk checks every length against the bytes that
hold it, and `read` checks a location as ONNX's own loader does (relative, inside the model's
directory, no symbolic or hard link) and the offset and length against the file and the
tensor's shape. Each refusal is a `Refused` whose text ends the importer's one-line error.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np

# The wire format's field numbers the walk reads or writes (onnx.proto).
_GRAPH = 7  # ModelProto.graph
_INITIALIZER = 5  # GraphProto.initializer
_RAW_DATA, _EXTERNAL_DATA, _DATA_LOCATION = 9, 13, 14  # TensorProto's
_KEY, _VALUE = 1, 2  # StringStringEntryProto's
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
_VARINT, _FIXED64, _LENGTH, _GROUP, _GROUP_END, _FIXED32 = range(6)


class Refused(Exception):
    """Why a model's bytes cannot be read: the end of the line of the importer's
    `ModelError`, which names the model (and the tensor)."""


def without_weights(data, name: str, threshold: int) -> bytes:
    """The serialized model `data` (the whole of the file called `name`), with each
    initializer of its graph whose raw_data holds at least `threshold` bytes an external-data
    reference to those bytes in the file itself; every other field as it is, so the rest
    parses exactly as `data` would. `data` is anything indexable by byte (an mmap: the
    weights' pages are never read)."""
    out = []
    for number, wire, start, value, end in _fields(data, 0, len(data)):
        if number == _GRAPH and wire == _LENGTH:
            out.append(_length_delimited(_GRAPH, _graph(data, value, end, name, threshold)))
        else:
            out.append(data[start:end])
    return b"".join(out)


def nested_tensors(model) -> Iterator:
    """The tensors of `model` other than its graph's initializers: those of node attributes
    (a Constant's value) and of subgraphs and functions, as ONNX's loader finds them. The
    handlers read these with `numpy_helper`, so their external data is loaded up front."""
    yield from _attribute_tensors(model.graph)
    for function in model.functions:
        yield from _attribute_tensors(function)


def read(tensor, dtype: np.dtype, model: Path | None) -> np.ndarray:
    """The values of `tensor`, whose data is external, as `dtype` elements of its shape, read
    into a fresh array. `model`: the model's file, whose directory is where locations lead
    (the file itself may be named: `without_weights` names it); None for a model given as an
    object, whose locations lead from the current directory, as `numpy_helper` reads them."""
    entries = {e.key: e.value for e in tensor.external_data}  # the last of a key holds
    location = entries.get("location", "")
    offset = _count(entries, "offset")
    length = _count(entries, "length")
    if any(d < 0 for d in tensor.dims):
        raise Refused(f"its shape {list(tensor.dims)} has a negative dimension")
    needed = math.prod(tensor.dims) * dtype.itemsize
    if model is not None and os.path.normpath(location) == model.name:
        path = model
    else:
        path = _located(location, model.parent if model is not None else Path())
    try:
        file = path.open("rb", buffering=0)
    except OSError as err:
        raise Refused(f"cannot read its external data '{location}': {err.strerror}") from None
    with file:
        size = os.fstat(file.fileno()).st_size
        start = offset or 0
        if start > size or (length is not None and start + length > size):
            span = f"bytes {start}-{start + length}" if length is not None else \
                f"byte {start} on"
            raise Refused(f"its external data ({span}) lies past the end of '{location}', "
                          f"which has {size} bytes")
        length = size - start if length is None else length
        if length != needed:
            raise Refused(f"its external data is {length} bytes; shape {list(tensor.dims)} of "
                          f"{dtype} needs {needed}")
        array = np.empty(math.prod(tensor.dims), dtype)
        view = array.data.cast("B")
        file.seek(start)
        done = 0
        while done < length:
            got = file.readinto(view[done:])
            if not got:
                raise Refused(f"its external data '{location}' ended at byte {start + done} "
                              f"as it was read (it had {size} bytes)")
            done += got
    return array.reshape(tuple(tensor.dims))


def _count(entries: dict[str, str], key: str) -> int | None:
    """External data's offset or length, a non-negative integer where given."""
    if key not in entries:
        return None
    try:
        value = int(entries[key])
    except ValueError:
        value = -1
    if value < 0:
        raise Refused(f"its external data's {key} '{entries[key]}' is not a byte count")
    return value


def _located(location: str, directory: Path) -> Path:
    """The file `location` names in `directory`, refused where ONNX's loader refuses it: an
    empty or absolute location, one with `..` (anywhere, as ONNX's loader checks) or a NUL,
    a symbolic link (there or in a directory
    on the way) out of the directory, anything but a regular file, or a file with another
    hard link (which may be anywhere)."""
    where = f"its external data location '{location}'"
    if not location:
        raise Refused("its external data names no location")
    if os.path.isabs(location):
        raise Refused(f"{where} is an absolute path; it must be relative to the model's "
                      "directory")
    if ".." in os.path.normpath(location):
        raise Refused(f"{where} has '..' in it, which may lead out of the model's directory")
    if "\0" in location:
        raise Refused(f"{where} has a NUL character, which no file's name has")
    path = directory / location
    if path.is_symlink():
        raise Refused(f"{where} is a symbolic link")
    if os.path.commonpath([os.path.realpath(path), os.path.realpath(directory)]) != \
            os.path.realpath(directory):
        raise Refused(f"{where} leads out of the model's directory (through a symbolic link)")
    try:
        status = path.stat()
    except OSError:
        return path  # opening it says why
    if not stat.S_ISREG(status.st_mode):
        raise Refused(f"{where} is not a regular file")
    if status.st_nlink > 1:
        raise Refused(f"{where} is a file with {status.st_nlink} hard links, which may lead "
                      "out of the model's directory")
    return path


def _attribute_tensors(graph) -> Iterator:
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            for sub in (*((attribute.g,) if attribute.HasField("g") else ()), *attribute.graphs):
                yield from sub.initializer
                yield from _attribute_tensors(sub)


def _graph(data, start: int, end: int, name: str, threshold: int) -> bytes:
    """The GraphProto in data[start:end] with its big initializers as references."""
    out = []
    for number, wire, field, value, stop in _fields(data, start, end):
        tensor = None
        if number == _INITIALIZER and wire == _LENGTH:
            tensor = _tensor(data, value, stop, name, threshold)
        out.append(data[field:stop] if tensor is None
                   else _length_delimited(_INITIALIZER, tensor))
    return b"".join(out)


def _tensor(data, start: int, end: int, name: str, threshold: int) -> bytes | None:
    """The TensorProto in data[start:end] as a reference to its raw_data's bytes in the file,
    or None to keep it as it is: its raw_data (the last one: protobuf keeps the last of a
    field) is under `threshold` bytes, or it already says where its data is."""
    fields = list(_fields(data, start, end))
    raw = [f for f in fields if f[:2] == (_RAW_DATA, _LENGTH)]
    if not raw or raw[-1][4] - raw[-1][3] < threshold or \
            any(f[0] in (_EXTERNAL_DATA, _DATA_LOCATION) for f in fields):
        return None
    offset, length = raw[-1][3], raw[-1][4] - raw[-1][3]
    kept = [data[f[2]:f[4]] for f in fields if f[:2] != (_RAW_DATA, _LENGTH)]
    references = [_length_delimited(_EXTERNAL_DATA, _length_delimited(_KEY, key.encode())
                                    + _length_delimited(_VALUE, value))
                  for key, value in (("location", os.fsencode(name)),
                                     ("offset", str(offset).encode()),
                                     ("length", str(length).encode()))]
    location = _varint_bytes(_DATA_LOCATION << 3 | _VARINT) + _varint_bytes(_EXTERNAL)
    return b"".join([*kept, *references, location])


def _fields(data, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(number, wire type, where the field starts, where its value starts (a length-delimited
    field's bytes, after their length), where it ends) of each field of the message in
    data[start:end]; a `Refused` where one runs past its end or is not a field protobuf
    reads."""
    at = start
    while at < end:
        tag, value = _varint(data, at, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise Refused(f"field number 0 at byte {at}")
        stop = _skip(data, value, end, number, wire)
        if wire == _LENGTH:  # its value is its bytes, after their length
            value = _varint(data, value, end)[1]
        yield number, wire, at, value, stop
        at = stop


def _skip(data, at: int, end: int, number: int, wire: int) -> int:
    """Where the value of field `number`, of type `wire`, that starts at `at` ends."""
    if wire == _VARINT:
        stop = _varint(data, at, end)[1]
    elif wire == _FIXED64:
        stop = at + 8
    elif wire == _FIXED32:
        stop = at + 4
    elif wire == _LENGTH:
        length, stop = _varint(data, at, end)
        stop += length
    elif wire == _GROUP:  # its fields, up to the end-group tag of its number
        stop = at
        while True:
            tag, stop = _varint(data, stop, end)
            if tag == number << 3 | _GROUP_END:
                break
            stop = _skip(data, stop, end, tag >> 3, tag & 7)
    else:
        raise Refused(f"field {number}'s value at byte {at} has wire type {wire}, which "
                      "protobuf does not read there")
    if stop > end:
        raise Refused(f"field {number}'s value at byte {at} runs to byte {stop}, past the end "
                      f"of its message at byte {end}")
    return stop


def _varint(data, at: int, end: int) -> tuple[int, int]:
    """The varint at data[at], and where it ends."""
    value = shift = 0
    for index in range(at, min(end, at + 10)):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    raise Refused(f"the varint at byte {at} is cut off or too long")


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _varint_bytes(number << 3 | _LENGTH) + _varint_bytes(len(payload)) + payload
