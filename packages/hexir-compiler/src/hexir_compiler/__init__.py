"""hexir-compiler: the `hexir` and `hextir` dialects, their passes, and the `.hxb` serializer."""

from hexir_compiler.__about__ import __version__
from hexir_compiler.errors import CompileError
from hexir_compiler.pipeline import compile

__all__ = ["CompileError", "__version__", "compile"]
