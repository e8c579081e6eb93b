"""Workarounds that make `ext` (numba-cuda-mlir 0.6.0) dialects usable for Hexir.

1. `load`: `ext.Dialect.load` runs `canonicalize, cse` over the generated IRDL module. In IRDL an
SSA constraint value is a variable: every operand or result constrained by the same value must have
the *same* type. CSE merges the identical `irdl.any` constraints of all fields, so after it
`"hextir.for"(%lb, %ub, %step, %acc : f64)` is rejected with "expected 'index' but got 'f64'".
`load` is `ext.Dialect.load` minus that pass pipeline, plus the dialect's opaque types
(`TYPES`, declared with IRDL's `irdl.type`: `ext`'s Python-defined types do not load here).

2. `mark_loaded`: the bindings import a dialect's Python module (`<prefix>.<namespace>`) before
they make a Python object for one of its ops, and remember only imports that succeeded; for a
dialect defined outside their package every op object cost a failed import (a search of
`sys.path`: 13 s of a profiled ViT-B/16 compile). `mark_loaded` adds our package as a prefix,
so the first lookup finds the dialect's module and the bindings stop looking.

3. `without_segment_sizes`: positional accessors and a builder that writes no segment-size
attributes, for ops with at most one variadic group (see its docstring).
"""

import functools
from typing import Any

from hexir_compiler.mlir import ext, ir

_cext = ext._cext

__all__ = ["load", "mark_loaded", "without_segment_sizes"]


def load(dialect: Any) -> None:
    """Emit, register and attach `dialect` (an `ext.Dialect` subclass: the bindings are
    untyped) in the current context."""
    if dialect.types or dialect.attributes:
        raise TypeError(f"{dialect.name}: Python-defined types and attributes are not loaded here")
    dialect._mlir_module = dialect._emit_module()
    _add_types(dialect)
    ext.irdl.load_dialects(dialect._mlir_module)
    for op in dialect.operations:
        op._attach_traits()
    _cext.globals._register_dialect_impl(dialect.DIALECT_NAMESPACE, dialect, replace=True)
    for op in dialect.operations:
        _cext.register_operation(dialect, replace=True)(op)
        _cext.register_op_adaptor(op, replace=True)(op.Adaptor)


def _add_types(dialect: Any) -> None:
    """Declare the dialect's opaque types (`TYPES`: names, no parameters) in its IRDL
    module, before its ops: `ext` defines types as Python classes, which `load` refuses, but
    IRDL's own `irdl.type` needs nothing from Python."""
    names = getattr(dialect, "TYPES", ())
    if not names:
        return
    found = next(op for op in dialect._mlir_module.body.operations
                 if op.operation.name == "irdl.dialect")
    at = ir.InsertionPoint.at_block_begin(found.regions[0].blocks[0])
    for name in names:
        op = ir.Operation.create("irdl.type", regions=1, ip=at,
                                 attributes={"sym_name": ir.StringAttr.get(name)})
        op.regions[0].blocks.append()


def mark_loaded(*dialects: Any) -> None:
    """Let the bindings find each of `dialects` (`ext.Dialect` subclasses, each defined in the
    module `<package>.<namespace>`) as a loaded dialect module; once per process."""
    for dialect in dialects:
        package, _, module = dialect.__module__.rpartition(".")
        if module != dialect.DIALECT_NAMESPACE:
            raise TypeError(f"{dialect.__name__} must be defined in a module named "
                            f"'{dialect.DIALECT_NAMESPACE}', not '{dialect.__module__}'")
        if package not in _cext.globals.dialect_search_modules:
            _cext.globals.append_dialect_search_prefix(package)


def without_segment_sizes(op: Any) -> None:
    """Make `op` work without operandSegmentSizes / resultSegmentSizes.

    IRDL asks for those attributes only when an op has two or more variadic groups; ours have
    at most one, so the generic form never carries them. `ext`, though, reads every variadic
    group through them and its builder writes them. With one variadic group, positions say
    it all: the accessors below slice by position, and the builder drops the attributes.
    """
    operands, _, results, _ = ext.partition_fields(op._fields)
    for defs, values in ((operands, "operands"), (results, "results")):
        variadic = [i for i, d in enumerate(defs) if d.variadicity != ext.Variadicity.single]
        assert len(variadic) <= 1, f"{op.OPERATION_NAME}: at most one variadic group"
        for i, d in enumerate(defs):
            setattr(op, d.name, property(_accessor(values, i, len(defs), variadic)))
    build = op.__init__

    @functools.wraps(build)
    def __init__(self, *args, **kwargs):
        build(self, *args, **kwargs)
        attrs = self.operation.attributes
        for name in ("operandSegmentSizes", "resultSegmentSizes"):
            if name in attrs:
                del attrs[name]

    # ext's own builders carry the fields as their signature; so does this one.
    __init__.__signature__ = build.__signature__  # type: ignore[attr-defined]
    op.__init__ = __init__


def _accessor(values: str, i: int, count: int, variadic: list[int]):
    def get(self):
        seq = list(getattr(self, values))
        if not variadic or i < variadic[0]:
            return seq[i]
        if i == variadic[0]:
            return seq[i : len(seq) - (count - 1 - i)]
        return seq[len(seq) - count + i]

    return get
