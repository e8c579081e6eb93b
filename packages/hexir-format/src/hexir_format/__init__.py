"""hexir-format: the `.hxb` layout, declared once, with a typed model in front of it, and the
shape rules of the ops and kernel kinds it records (`hexir_format.signatures`)."""

from hexir_format import generation, library, plan, validate
from hexir_format.__about__ import __version__
from hexir_format.errors import FormatError, HexirError, ValidationError, printable
from hexir_format.model import (
    BINARY_KINDS,
    CODE_KINDS,
    CPU_LEVELS,
    LATEST_VERSION,
    MAGIC,
    MAX_BLOCK,
    MAX_BLOCK_THREADS,
    MAX_GRID,
    MAX_NAME,
    MAX_RANK,
    OPERAND_NAMES,
    V3_KINDS,
    V3_OPS,
    V4_DTYPES,
    V5_DTYPES,
    Command,
    Device,
    DType,
    Executable,
    Function,
    Generation,
    KernelKind,
    Layout,
    Module,
    Op,
    Section,
    SectionKind,
    Slot,
    Symbol,
    TensorType,
)
from hexir_format.reader import parse, parse_layout
from hexir_format.signatures import ShapeError, signature_problem
from hexir_format.writer import build, minimum_version, write

__all__ = [
    "BINARY_KINDS", "CODE_KINDS", "CPU_LEVELS", "LATEST_VERSION", "MAGIC", "MAX_BLOCK",
    "MAX_BLOCK_THREADS", "MAX_GRID", "MAX_NAME", "MAX_RANK", "OPERAND_NAMES", "V3_KINDS",
    "V3_OPS", "V4_DTYPES", "V5_DTYPES",
    "Command", "DType", "Device", "Executable", "FormatError", "Function", "Generation",
    "HexirError",
    "KernelKind", "Layout", "Module", "Op", "Section", "SectionKind", "ShapeError", "Slot",
    "Symbol", "TensorType", "ValidationError", "__version__", "build", "generation", "library",
    "minimum_version", "parse", "parse_layout", "plan", "printable", "signature_problem",
    "validate", "write",
]
