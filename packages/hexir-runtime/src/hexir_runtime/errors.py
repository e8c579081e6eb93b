"""The runtime's errors, all under `hexir_format.HexirError`.

Each says what was expected, what was found and where, in one line, so `hexir-run` can print
it as-is and exit 1, and an embedding program can catch one class per kind of failure.
"""

import hexir_format as hf
from hexir_format import HexirError


class RuntimeFailure(HexirError):
    """Root of the runtime's own errors (named so it does not shadow the builtin)."""


class LoadError(RuntimeFailure):
    """The file could not be opened, mapped or parsed (`io error` / `invalid module`)."""


class ValidationError(RuntimeFailure, hf.ValidationError):
    """A module that parses but would misbehave if run (`hexir_format.validate`'s verdict, or
    a descriptor this runtime has no body for); names the entry, command and field."""


class DeviceError(RuntimeFailure):
    """A device could not be created or a HAL operation failed (CUDA errors carry their name)."""


class PlacementError(DeviceError):
    """A kernel or buffer is placed on a device this run does not have."""


class EntryNotFound(RuntimeFailure, LookupError, AttributeError):
    """The requested entry point does not exist; the message lists those that do. An
    AttributeError too, so `m.forward` on a module without `forward` raises it."""


class InputError(RuntimeFailure):
    """Arguments that do not match an entry point's signature, or unreadable `--input` text."""


class ExecutionError(RuntimeFailure):
    """A command failed while running; names the entry and the command index."""


class ClosedError(RuntimeFailure):
    """The module was closed and can no longer run."""
