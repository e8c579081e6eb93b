"""The bases of the Python-defined dialects, as the type checker sees them.

The MLIR bindings are untyped (`ext` is Any to mypy), yet mypy checks a class statement's
keywords (`class LinearOp(HexirOp, name="linear")`) against `object.__init_subclass__` even
when the base is Any. To the type checker these are classes that take those keywords and
whose instances have any attribute; at run time they are `ext`'s own.
"""

from typing import TYPE_CHECKING, Any

from hexir_compiler.mlir import ext

if TYPE_CHECKING:

    class Dialect:
        Operation: Any
        operations: list[Any]

        def __init_subclass__(cls, *, name: str) -> None: ...

    class Operation:
        """A dialect's `Operation` (its ops' base)."""

        def __init_subclass__(cls, *, name: str = ..., traits: Any = ...) -> None: ...

        def __init__(self, *args: Any, **kwargs: Any) -> None: ...

        def __getattr__(self, attribute: str) -> Any: ...

else:
    Dialect = ext.Dialect
