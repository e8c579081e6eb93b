"""DLPack for device arrays, without a new dependency: the capsule ABI through ctypes.

A DLPack tensor is a `DLManagedTensor` (the tensor's pointer, device, dtype, shape and strides,
plus a deleter) in a PyCapsule named "dltensor". `read` takes the capsule an object's
`__dlpack__` hands over and describes it; the capsule is kept, unconsumed, with the call that
uses it (its producer frees the tensor when the capsule dies, as the protocol allows for a
capsule nobody renamed). `capsule` makes one for a `DeviceArray`: the struct and the array
stay alive until the consumer calls the deleter, or the capsule dies unconsumed.

Only the legacy (unversioned) capsule is spoken: every library that reads DLPack 1.0 still
reads it, and asking a producer for it is asking without `max_version`.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

KDL_CUDA = 2
_NAME = b"dltensor"  # module-level: a capsule's name must outlive it


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", DELETER)]


_CODES = {0: "int", 1: "uint", 2: "float", 6: "bool"}  # kDLInt, kDLUInt, kDLFloat, kDLBool
_KINDS = {"i": 0, "u": 1, "f": 2, "b": 6}  # numpy's dtype.kind -> the DLPack code

_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                                 ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))
# in a capsule's destructor the capsule is dying: it is passed as a bare pointer, never an
# object (a reference taken to it there would resurrect it)
_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def read(capsule: Any) -> tuple[int, int, np.dtype, tuple[int, ...], tuple[int, ...] | None]:
    """(device type, address, dtype, shape, strides in bytes or None) of a "dltensor"
    capsule; ValueError (or TypeError) where it is not one or its dtype has no numpy one."""
    address = _get_pointer(capsule, _NAME)
    t = DLManagedTensor.from_address(address).dl_tensor
    name = _CODES.get(t.dtype.code)
    if name is None or t.dtype.lanes != 1:
        raise ValueError(f"DLPack dtype code {t.dtype.code}, {t.dtype.bits} bits, "
                         f"{t.dtype.lanes} lanes has no numpy dtype")
    dtype = np.dtype(np.bool_) if name == "bool" else np.dtype(f"{name}{t.dtype.bits}")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None if not t.strides else tuple(t.strides[i] * dtype.itemsize
                                               for i in range(t.ndim))
    return t.device.device_type, (t.data or 0) + t.byte_offset, dtype, shape, strides


_exported: dict[int, tuple[Any, ...]] = {}  # struct address -> what it keeps alive


@DELETER
def _delete(managed: int) -> None:
    _exported.pop(managed, None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _destroy_capsule(capsule: int) -> None:
    """A capsule nobody consumed (its name is still "dltensor") frees its tensor."""
    if _is_valid_raw(capsule, _NAME):
        _delete(_get_pointer_raw(capsule, _NAME))


def capsule(owner: Any, address: int, dtype: np.dtype, shape: tuple[int, ...],
            device_id: int) -> Any:
    """A "dltensor" capsule for C-contiguous device memory that `owner` keeps alive."""
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    managed = DLManagedTensor()
    managed.dl_tensor = DLTensor(address, DLDevice(KDL_CUDA, device_id), len(shape),
                                 DLDataType(_KINDS[dtype.kind], dtype.itemsize * 8, 1), dims,
                                 None, 0)
    managed.deleter = _delete
    _exported[ctypes.addressof(managed)] = (owner, managed, dims)
    return _new_capsule(ctypes.addressof(managed), _NAME,
                        ctypes.cast(_destroy_capsule, ctypes.c_void_p))
