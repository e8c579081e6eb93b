"""hexir-runtime: load a `.hxb` and run it on cpu (the x86-64 code it carries, linked in
process) or cuda (driver API).

No compiler, MLIR or LLVM is ever imported, and the CUDA bindings are imported only when a
cuda device is asked for.
"""

from hexir_format import HexirError
from hexir_runtime.__about__ import __version__
from hexir_runtime.api import EntryPoint, Module, load
from hexir_runtime.device_arrays import DeviceArray
from hexir_runtime.errors import (
    ClosedError,
    DeviceError,
    EntryNotFound,
    ExecutionError,
    InputError,
    LoadError,
    PlacementError,
    RuntimeFailure,
    ValidationError,
)
from hexir_runtime.interpreter import Execution
from hexir_runtime.validate import DEFAULT_MAX_ALLOC_BYTES, Signature

__all__ = [
    "DEFAULT_MAX_ALLOC_BYTES", "ClosedError", "DeviceArray", "DeviceError", "EntryNotFound",
    "EntryPoint",
    "Execution", "ExecutionError", "HexirError", "InputError", "LoadError", "Module",
    "PlacementError", "RuntimeFailure", "Signature", "ValidationError", "__version__", "load",
]
