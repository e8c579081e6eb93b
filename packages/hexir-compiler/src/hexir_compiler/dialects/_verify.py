"""What every Python-defined op's verifier shares: type inspection and located errors.

An op class defines `check(self)`, raising `Invalid` (or a `ShapeError`) with the message;
`verify` (called from each base op class's `verify_invariants`) turns that into a diagnostic
at the op's location, prefixed the way MLIR prefixes its own verifier messages
(`'hexir.linear' op ...`), so a user sees
`prog.mlir:3:8: error: 'hexir.linear' op inner dimensions differ: 3 vs 2`.
"""

from __future__ import annotations

from hexir_compiler import symbolic
from hexir_compiler.element_types import ELEMENTS, STORAGE
from hexir_compiler.mlir import ir
from hexir_compiler.placement import DEVICES
from hexir_format.dims import Dim, DimError
from hexir_format.signatures import ShapeError, fmt


class Invalid(Exception):
    """A verifier's finding; the message is the diagnostic text without the op prefix."""


def verify(op) -> bool:
    """Run `op.check()` and report the first problem at the op.

    The body of every `verify_invariants` (nanobind op classes admit one base, so this is a
    function rather than a mixin).
    """
    try:
        check_arity(op)
        check_attributes(op)
        check_device(op)
        op.check()
    except (Invalid, ShapeError) as err:
        op.location.emit_error(f"'{op.operation.name}' op {err}")
        return False
    return True


def check_arity(op) -> None:
    """As many operands, results and regions as declared (at most one variadic group each).

    The Python verifier runs even when IRDL's own checks fail, so neither this nor
    `check_attributes` may be left to IRDL: `check` relies on both.
    """
    operation = op.operation
    for field_type, kind, values in (("OperandDef", "operand", operation.operands),
                                     ("ResultDef", "result", operation.results),
                                     ("RegionDef", "region", operation.regions)):
        fields = [f for f in op._fields if type(f).__name__ == field_type]
        fixed = sum(1 for f in fields if f.variadicity.name == "single")
        variadic = len(fields) > fixed
        if len(values) == fixed or (variadic and len(values) > fixed):
            continue
        expected = f"at least {fixed}" if variadic else str(fixed)
        raise Invalid(f"expects {expected} {kind}{'s' if fixed != 1 else ''}, got {len(values)}")


def check_attributes(op) -> None:
    """Declared attributes are present and of their declared kind."""
    attrs = op.operation.attributes
    for field in op._fields:
        if type(field).__name__ != "AttributeDef":
            continue
        if field.name not in attrs:
            raise Invalid(f"requires attribute '{field.name}'")
        kind = field.constraint
        declared = isinstance(kind, type) and issubclass(kind, ir.Attribute)
        if declared and not isinstance(attrs[field.name], kind):
            raise Invalid(
                f"attribute '{field.name}' must be {_noun(kind)}, got {attrs[field.name]}"
            )


def _noun(kind: type) -> str:
    return {
        ir.IntegerAttr: "an integer (e.g. 1 : i64)",
        ir.FloatAttr: "a float (e.g. 1.0e-05 : f64)",
        ir.StringAttr: "a string",
        ir.FlatSymbolRefAttr: "a symbol reference (@name)",
        ir.TypeAttr: "a type",
    }.get(kind, kind.__name__)


def check_device(op) -> None:
    """`device` is discardable (written by hexir-partition) but, when present, a device."""
    attrs = op.operation.attributes
    if "device" not in attrs:
        return
    device = string_attr(attrs["device"], "device")
    if device not in DEVICES:
        raise Invalid(f"device '{device}' is not a device; expected cpu or cuda")


def string_attr(attr: ir.Attribute, name: str) -> str:
    if not isinstance(attr, ir.StringAttr):
        raise Invalid(f"attribute '{name}' must be a string, got {attr}")
    return attr.value


def i64_array(attr: ir.Attribute, name: str) -> list[int]:
    if not isinstance(attr, ir.DenseI64ArrayAttr):
        raise Invalid(f"attribute '{name}' must be array<i64: ...>, got {attr}")
    return list(attr)


def tensor(value: ir.Value, what: str,
           allowed: tuple[str, ...] = ELEMENTS) -> tuple[tuple[Dim, ...], str]:
    """(shape, element type) of a ranked tensor of an `allowed` type, else `Invalid`; a
    dynamic dimension is the expression its type's encoding gives (`symbolic`)."""
    return _shaped(value.type, what, ir.RankedTensorType, "tensor", allowed)


def memref(value_or_type: ir.Value | ir.Type, what: str,
           dynamic: bool = False) -> tuple[tuple[int | None, ...], str]:
    """(shape, element type) of a memref of a buffer's storage type, else `Invalid`: static
    with the identity layout, or where `dynamic`, also a dynamic kernel's buffer -- a flat
    `memref<?xT>` argument, or the view of it a kernel indexes (`?` sizes and strides, the
    innermost stride 1) -- a dynamic size read as None."""
    t = value_or_type.type if isinstance(value_or_type, ir.Value) else value_or_type
    kept = tuple(STORAGE.get(e, e) for e in ELEMENTS)
    if dynamic and isinstance(t, ir.MemRefType) and not ir.MemRefType(t).has_static_shape:
        ranked = ir.MemRefType(t)
        layout = ranked.layout
        strides, _ = ranked.get_strides_and_offset()
        if str(ranked.element_type) not in kept:
            raise Invalid(f"{what} must have element type {_or(kept)}, got {t}")
        if not ((isinstance(layout, ir.AffineMapAttr) and ranked.rank == 1)
                or (isinstance(layout, ir.StridedLayoutAttr) and strides and strides[-1] == 1)):
            raise Invalid(f"{what} must be a flat memref<?x...> or a view of one with unit "
                          f"innermost stride, got {t}")
        dynamic_size = ir.ShapedType.get_dynamic_size()
        return (tuple(None if d == dynamic_size else int(d) for d in ranked.shape),
                str(ranked.element_type))
    dims, elem = _shaped(t, what, ir.MemRefType, "memref", kept)
    shape = tuple(d for d in dims if isinstance(d, int))  # _shaped refuses a dynamic memref
    layout = ir.MemRefType(t).layout
    if not (
        isinstance(layout, ir.AffineMapAttr)
        and layout.value == ir.AffineMap.get_identity(len(shape))
    ):
        raise Invalid(f"{what} must have the identity layout, got {t}")
    return shape, elem


def _shaped(t: ir.Type, what: str, cls: type, noun: str,
            allowed: tuple[str, ...]) -> tuple[tuple[Dim, ...], str]:
    if not isinstance(t, cls):
        raise Invalid(f"{what} must be a ranked {noun} of {_or(allowed)}, got {t}")
    st = cls(t)
    if cls is ir.RankedTensorType:
        try:
            shape = symbolic.shape_of(t)
        except DimError as err:
            raise Invalid(f"{what}: {err}") from None
    elif not st.has_static_shape:
        raise Invalid(f"{what} must have a static shape, got {t}")
    else:
        shape = tuple(int(d) for d in st.shape)
    elem = str(st.element_type)
    if elem not in allowed:
        raise Invalid(f"{what} must have element type {_or(allowed)}, got {t}")
    return shape, elem


def _or(names: tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def same_element(*pairs: tuple[str, str]) -> str:
    """All (what, element type) pairs agree; returns the element type."""
    first_what, first = pairs[0]
    for what, elem in pairs[1:]:
        if elem != first:
            raise Invalid(f"element types differ: {first_what} is {first} but {what} is {elem}")
    return first


def expect_shape(result: tuple[Dim, ...], expected: tuple[Dim, ...]) -> None:
    if tuple(result) != tuple(expected):
        raise Invalid(f"result shape {fmt(result)} does not match the expected {fmt(expected)}")


def lookup_symbol(op: ir.Operation, name: str) -> ir.Operation | None:
    """The op named `@name` in the module that holds `op` (its direct children only)."""
    module = op.parent
    while module is not None and module.name != "builtin.module":
        module = module.parent
    if module is None:
        return None
    for child in module.regions[0].blocks[0].operations:
        attrs = child.operation.attributes
        if "sym_name" in attrs and ir.StringAttr(attrs["sym_name"]).value == name:
            return child.operation
    return None
