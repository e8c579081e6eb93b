"""The graph dialect `hexir`: neural-network ops on tensors, in MLIR generic form.

Element types are f32, f64, i32, i64 and i1 (bool); each op says which it takes (the table in
the compiler README lists every op).

Defined with the bindings' IRDL-based `ext` API, so ops print and parse only in the generic
form (`"hexir.linear"(%a, %w) : (...) -> ...`). IRDL checks only that declared attributes are
present; every type and shape rule is a `check` method here, so a bad program gets one
located message that says what was expected and what was found. Optional attributes
(`approximate`) and the placement attribute `device` are discardable, checked when present.
"""

import math
import types
from typing import TYPE_CHECKING, Any

from hexir_compiler import packing, symbolic
from hexir_compiler.dialects._bases import Dialect
from hexir_compiler.dialects._verify import (
    DEVICES,
    Invalid,
    expect_shape,
    i64_array,
    lookup_symbol,
    memref,
    same_element,
    string_attr,
    tensor,
    verify,
)
from hexir_compiler.element_types import ELEMENTS, FLOATS, NUMBERS, STORAGE, STRING
from hexir_compiler.mlir import ext, ir
from hexir_compiler.ops import BINARY, GELU_APPROXIMATIONS, UNARY, Elementwise
from hexir_format import dims, signatures
from hexir_format.dims import Dim


class Hexir(Dialect, name="hexir"):
    #: `!hexir.string`, the element type of string tensors (`element_types.STRING`).
    TYPES = ("string",)


if TYPE_CHECKING:
    from hexir_compiler.dialects._bases import Operation as _Operation
else:
    _Operation = Hexir.Operation


class HexirOp(_Operation):
    """Base of every hexir op (no name: not an op itself)."""

    def check(self) -> None:
        """Raise `Invalid` (or `ShapeError`) when the op breaks a rule; see `_verify`."""

    def verify_invariants(self) -> bool:
        return verify(self)


def _result(op) -> tuple[tuple[Dim, ...], str]:
    return tensor(op.results[0], "result")


def _shapes(op, *names: str, takes: tuple[str, ...] = ELEMENTS) -> list[tuple[Dim, ...]]:
    """The shapes of the operands, called `names` (tensors of an element type in `takes`),
    then of the result: all of one element type."""
    operands = [tensor(value, what, takes) for value, what in zip(op.operands, names, strict=False)]
    result, element = _result(op)
    same_element(*((what, e) for what, (_, e) in zip(names, operands, strict=False)),
                 ("result", element))
    return [*(shape for shape, _ in operands), result]


class ConstantOp(HexirOp, name="constant"):
    """A literal tensor; `value` is dense elements of the result type (a splat is allowed),
    or, where `packing` names a layout a cpu kernel reads (`packing`), of the shape that
    layout packs into the result's."""

    value: Any
    result: ext.Result[Any]

    def check(self) -> None:
        _result(self)
        value = self.operation.attributes["value"]
        if not isinstance(value, ir.DenseFPElementsAttr | ir.DenseIntElementsAttr):
            raise Invalid(f"value must be dense elements, got {value}")
        vtype = ir.RankedTensorType(value.type)
        result = ir.RankedTensorType(self.results[0].type)
        try:
            layout = packing.of(self.operation)
        except packing.PackingError as err:
            raise Invalid(str(err)) from None
        if layout is None:
            if vtype != result:
                raise Invalid(f"value has type {vtype} but the result is {result}")
            return
        try:
            shape = packing.packed_shape(*layout, tuple(vtype.shape))
        except packing.PackingError as err:
            raise Invalid(str(err)) from None
        if vtype.element_type != result.element_type or not result.has_static_shape or \
                tuple(result.shape) != shape:
            packed = f"tensor<{''.join(f'{d}x' for d in shape)}{vtype.element_type}>"
            raise Invalid(f"value of type {vtype} packed as {layout[0]} is {packed}, but the "
                          f"result is {result}")


class SizesOp(HexirOp, name="sizes"):
    """Sizes as data: an i64 tensor whose elements are `values`, each an integer or a
    symbolic expression (`"seq"`, `"past + seq"`) evaluated for the call's sizes -- the Shape
    of a dynamic tensor, and shape arithmetic on it, where a model computes with it."""

    values: Any
    result: ext.Result[Any]

    def check(self) -> None:
        shape, element = _result(self)
        if element != "i64" or not symbolic.is_static(shape):
            raise Invalid(f"the result must be a static i64 tensor, got {self.results[0].type}")
        values = self.operation.attributes["values"]
        if not isinstance(values, ir.ArrayAttr) or not all(
                isinstance(v, ir.StringAttr) for v in values):
            raise Invalid("values must be an array of strings")
        count = math.prod(d for d in shape if isinstance(d, int))
        if len(values) != count:
            raise Invalid(f"values has {len(values)} entries for a result of {count} elements")
        for v in values:
            try:
                dims.parse(ir.StringAttr(v).value)
            except dims.DimError as err:
                raise Invalid(f"values: {err}") from None


class LinearOp(HexirOp, name="linear"):
    """input [..., K] x weight [K, N] -> [..., N] (no bias, no transpose)."""

    input: ext.Operand[Any]
    weight: ext.Operand[Any]
    result: ext.Result[Any]

    def check(self) -> None:
        x, w, r = _shapes(self, "input", "weight", takes=FLOATS)
        expect_shape(r, signatures.linear(x, w))


class MatmulOp(HexirOp, name="matmul"):
    """a [..., M, K] x b [..., K, N] -> [..., M, N]; batch dimensions broadcast."""

    lhs: ext.Operand[Any]
    rhs: ext.Operand[Any]
    result: ext.Result[Any]

    def check(self) -> None:
        a, b, r = _shapes(self, "lhs", "rhs", takes=FLOATS)
        expect_shape(r, signatures.matmul(a, b, vectors=False))


class _Binary(HexirOp):
    """Element-wise a op b with numpy broadcasting; both operands of one element type in
    `takes`, the result of that type or `gives`."""

    lhs: ext.Operand[Any]
    rhs: ext.Operand[Any]
    result: ext.Result[Any]
    takes = NUMBERS  # plain class attributes: annotated ones would be IRDL fields
    gives = None

    def check(self) -> None:
        a, ea = tensor(self.operands[0], "lhs", self.takes)
        b, eb = tensor(self.operands[1], "rhs", self.takes)
        r, er = _result(self)
        same_element(("lhs", ea), ("rhs", eb))
        if er != (self.gives or ea):
            raise Invalid(f"result element type is {er}; expected {self.gives or ea}")
        expect_shape(r, signatures.broadcast(a, b))


class _Unary(HexirOp):
    """Element-wise f(x) on an element type in `takes`; the result has the operand's type."""

    input: ext.Operand[Any]
    result: ext.Result[Any]
    takes = FLOATS

    def check(self) -> None:
        tensor(self.operands[0], "input", self.takes)
        _result(self)
        if self.results[0].type != self.operands[0].type:
            raise Invalid(
                f"result type {self.results[0].type} differs from the input type "
                f"{self.operands[0].type}"
            )


def _elementwise(base: type, mnemonic: str, spec: Elementwise) -> type:
    """The op class `hexir.<mnemonic>` on `base`'s rules with `spec`'s element types (a class
    statement, made by name)."""
    camel = "".join(part.title() for part in mnemonic.split("_"))
    body = {"takes": spec.takes, "gives": spec.gives}
    return types.new_class(f"{camel}Op", (base,), {"name": mnemonic},
                           lambda ns: ns.update(body))


# The plain element-wise ops are declared by the op registry's tables (`ops.py`): an entry
# there is the op's type rule, and this makes it an op of the dialect.
ELEMENTWISE_OPS = {
    **{m: _elementwise(_Unary, m, spec) for m, spec in UNARY.items()},
    **{m: _elementwise(_Binary, m, spec) for m, spec in BINARY.items()},
}


class WhereOp(HexirOp, name="where"):
    """where(condition, x, y): x where the i1 condition holds, else y, the condition broadcast.

    x and y have the result's type (an importer broadcasts them to it first): only the
    condition broadcasts in this op.
    """

    condition: ext.Operand[Any]
    lhs: ext.Operand[Any]
    rhs: ext.Operand[Any]
    result: ext.Result[Any]

    def check(self) -> None:
        c, _ = tensor(self.operands[0], "condition", ("i1",))
        x, _ = tensor(self.operands[1], "x")
        tensor(self.operands[2], "y")
        if self.operands[1].type != self.operands[2].type:
            raise Invalid(f"x is {self.operands[1].type} but y is {self.operands[2].type}; "
                          "expected one type")
        if self.results[0].type != self.operands[1].type:
            raise Invalid(f"result type {self.results[0].type} differs from x's type "
                          f"{self.operands[1].type}")
        expect_shape(x, signatures.broadcast(c, x))


class CastOp(HexirOp, name="cast"):
    """Each element converted to the result's element type (numpy's astype)."""

    input: ext.Operand[Any]
    result: ext.Result[Any]

    def check(self) -> None:
        x, _ = tensor(self.operands[0], "input")
        r, _ = _result(self)
        expect_shape(r, x)


class ExpandOp(HexirOp, name="expand"):
    """The input broadcast to the result's shape (numpy's broadcast_to)."""

    input: ext.Operand[Any]
    result: ext.Result[Any]

    def check(self) -> None:
        x, r = _shapes(self, "input")
        if signatures.broadcast(x, r) != r:
            raise Invalid(f"input shape {signatures.fmt(x)} does not broadcast to the result "
                          f"shape {signatures.fmt(r)}")


class ConcatOp(HexirOp, name="concat"):
    """lhs and rhs, of one rank, joined along `axis` (numpy's concatenate of two: IRDL's
    variadic operands are all of one type, and parts differ in size. An importer writes more
    as a tree of these, and `hexir-fuse` makes concats of one axis one kernel)."""

    lhs: ext.Operand[Any]
    rhs: ext.Operand[Any]
    axis: ir.IntegerAttr
    result: ext.Result[Any]

    def check(self) -> None:
        a, b, r = _shapes(self, "lhs", "rhs")
        axis = ir.IntegerAttr(self.operation.attributes["axis"]).value
        expect_shape(r, signatures.concat([a, b], axis))


class SliceOp(HexirOp, name="slice"):
    """Result element i on axis d is input element starts[d] + i * steps[d] (steps may be
    negative; ONNX's Slice with its bounds resolved)."""

    input: ext.Operand[Any]
    starts: Any
    steps: Any
    result: ext.Result[Any]

    def check(self) -> None:
        x, r = _shapes(self, "input")
        attrs = self.operation.attributes
        signatures.slice_(x, i64_array(attrs["starts"], "starts"),
                          i64_array(attrs["steps"], "steps"), r)


class GatherOp(HexirOp, name="gather"):
    """numpy's take(data, indices, axis): an index below 0 counts from the end; one out of
    range reads the nearest element (ONNX leaves it undefined; it never reads out of bounds)."""

    data: ext.Operand[Any]
    indices: ext.Operand[Any]
    axis: ir.IntegerAttr
    result: ext.Result[Any]

    def check(self) -> None:
        d, ed = tensor(self.operands[0], "data")
        i, _ = tensor(self.operands[1], "indices", ("i32", "i64"))
        r, er = _result(self)
        same_element(("data", ed), ("result", er))
        axis = ir.IntegerAttr(self.operation.attributes["axis"]).value
        expect_shape(r, signatures.gather(d, i, axis))


class ConvOp(HexirOp, name="conv"):
    """input [N, C, *S] with weight [M, C / group, *K] -> [N, M, *out], cross-correlation as
    in ONNX's Conv (no bias: add it); pads are (begins..., ends...)."""

    input: ext.Operand[Any]
    weight: ext.Operand[Any]
    strides: Any
    pads: Any
    dilations: Any
    group: ir.IntegerAttr
    result: ext.Result[Any]

    def check(self) -> None:
        x, w, r = _shapes(self, "input", "weight", takes=FLOATS)
        a = self.operation.attributes
        expect_shape(r, signatures.conv(
            x, w, ir.IntegerAttr(a["group"]).value, i64_array(a["strides"], "strides"),
            i64_array(a["pads"], "pads"), i64_array(a["dilations"], "dilations")))


POOL_KINDS = ("max", "average")


class PoolOp(HexirOp, name="pool"):
    """A `kind` (max or average) pooling window over the spatial dims of [N, C, *S]; padding
    is never a value: max ignores it, average divides by the window's elements inside the
    input, or with `count_include_pad` by those inside the padded extent."""

    input: ext.Operand[Any]
    kind: ir.StringAttr
    kernel: Any
    strides: Any
    pads: Any
    dilations: Any
    ceil_mode: Any
    count_include_pad: Any
    result: ext.Result[Any]

    def check(self) -> None:
        x, r = _shapes(self, "input", takes=FLOATS)
        a = self.operation.attributes
        kind = string_attr(a["kind"], "kind")
        if kind not in POOL_KINDS:
            raise Invalid(f'kind must be "max" or "average", got "{kind}"')
        for flag in ("ceil_mode", "count_include_pad"):
            if not isinstance(a[flag], ir.BoolAttr):
                raise Invalid(f"attribute '{flag}' must be true or false, got {a[flag]}")
        if len(x) < 3:
            raise Invalid(f"input must be [N, C, spatial...], got {signatures.fmt(x)}")
        kernel, strides, pads, dilations = (
            i64_array(a[k], k) for k in ("kernel", "strides", "pads", "dilations"))
        spatial = signatures.window(x[2:], kernel, strides, pads, dilations,
                                    ir.BoolAttr(a["ceil_mode"]).value)
        expect_shape(r, (*x[:2], *spatial))


# ---- indexing by data, scans, selection (ONNX GatherElements, ScatterElements, ScatterND,
# CumSum, ArgMax, ArgMin, TopK) -----------------------------------------------------------

INDICES = ("i32", "i64")
SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _axis_attr(op, rank: int) -> int:
    return signatures.normalize_axis(ir.IntegerAttr(op.operation.attributes["axis"]).value, rank)


def _flags(op, *names: str) -> None:
    for flag in names:
        value = op.operation.attributes[flag]
        if not isinstance(value, ir.BoolAttr):
            raise Invalid(f"attribute '{flag}' must be true or false, got {value}")


def _reduction(op, element: str) -> None:
    kind = string_attr(op.operation.attributes["reduction"], "reduction")
    if kind not in SCATTER_REDUCTIONS:
        raise Invalid(f"reduction must be one of {', '.join(SCATTER_REDUCTIONS)}, got \"{kind}\"")
    if kind != "none" and element == "i1":
        raise Invalid(f"reduction \"{kind}\" of i1 is not defined; expected \"none\"")


class GatherElementsOp(HexirOp, name="gather_elements"):
    """result[p] = data[p with p[axis] = indices[p]] (numpy's take_along_axis): negative
    indices count from the end, out-of-range ones read the nearest element, as `gather`."""

    data: ext.Operand[Any]
    indices: ext.Operand[Any]
    axis: ir.IntegerAttr
    result: ext.Result[Any]

    def check(self) -> None:
        d, ed = tensor(self.operands[0], "data")
        i, _ = tensor(self.operands[1], "indices", INDICES)
        r, er = _result(self)
        same_element(("data", ed), ("result", er))
        expect_shape(r, signatures.gather_elements(d, i, _axis_attr(self, len(d))))


class ScatterElementsOp(HexirOp, name="scatter_elements"):
    """The data with each updates[p] combined into the element at p with p[axis] =
    indices[p], in row-major order of p (`reduction` none: replaced, the last one written
    wins; add, mul, max, min: combined). Indices as `gather_elements` reads them."""

    data: ext.Operand[Any]
    indices: ext.Operand[Any]
    updates: ext.Operand[Any]
    axis: ir.IntegerAttr
    reduction: ir.StringAttr
    result: ext.Result[Any]

    def check(self) -> None:
        d, ed = tensor(self.operands[0], "data")
        i, _ = tensor(self.operands[1], "indices", INDICES)
        u, eu = tensor(self.operands[2], "updates")
        r, er = _result(self)
        same_element(("data", ed), ("updates", eu), ("result", er))
        _reduction(self, ed)
        expect_shape(r, signatures.scatter_elements(d, i, u, _axis_attr(self, len(d))))


class ScatterNdOp(HexirOp, name="scatter_nd"):
    """The data with each slice updates[m] combined into data[indices[m]] (indices [..., k]
    name the first k coordinates), in row-major order of m; `reduction` and out-of-range or
    negative coordinates as in `scatter_elements`."""

    data: ext.Operand[Any]
    indices: ext.Operand[Any]
    updates: ext.Operand[Any]
    reduction: ir.StringAttr
    result: ext.Result[Any]

    def check(self) -> None:
        d, ed = tensor(self.operands[0], "data")
        i, _ = tensor(self.operands[1], "indices", INDICES)
        u, eu = tensor(self.operands[2], "updates")
        r, er = _result(self)
        same_element(("data", ed), ("updates", eu), ("result", er))
        _reduction(self, ed)
        expect_shape(r, signatures.scatter_nd(d, i, u))


class CumsumOp(_Unary, name="cumsum"):
    """Running sums along `axis`; `exclusive` leaves out the element itself, `reverse` sums
    from the end (ONNX's CumSum)."""

    axis: ir.IntegerAttr
    exclusive: Any
    reverse: Any
    takes = NUMBERS

    def check(self) -> None:
        super().check()
        _flags(self, "exclusive", "reverse")
        shape, _ = tensor(self.operands[0], "input")
        if not shape:
            raise Invalid("input must have rank 1 or more, got a scalar")
        _axis_attr(self, len(shape))


class _ArgReduce(HexirOp):
    """The i64 position along `axis` of the first (`select_last_index`: last) greatest or
    least element; NaN counts as both, as in numpy; `keepdims` keeps the axis as 1."""

    input: ext.Operand[Any]
    axis: ir.IntegerAttr
    keepdims: Any
    select_last_index: Any
    result: ext.Result[Any]

    def check(self) -> None:
        x, _ = tensor(self.operands[0], "input", NUMBERS)
        r, _ = tensor(self.results[0], "result", ("i64",))
        _flags(self, "keepdims", "select_last_index")
        if not x:
            raise Invalid("input must have rank 1 or more, got a scalar")
        axis = _axis_attr(self, len(x))
        if x[axis] == 0:
            raise Invalid(f"axis {axis} of {signatures.fmt(x)} is empty: it has no extreme")
        keepdims = ir.BoolAttr(self.operation.attributes["keepdims"]).value
        expect_shape(r, signatures.reduce(x, [axis], keepdims))


class ArgMaxOp(_ArgReduce, name="arg_max"):
    pass


class ArgMinOp(_ArgReduce, name="arg_min"):
    pass


class TopKOp(HexirOp, name="top_k"):
    """The i64 positions along `axis` of the `k` greatest (`largest` false: least) elements,
    best first; equal elements in index order, NaN greater than every number (numpy's sort
    order). The values are a `gather_elements` of these."""

    input: ext.Operand[Any]
    k: ir.IntegerAttr
    axis: ir.IntegerAttr
    largest: Any
    result: ext.Result[Any]

    def check(self) -> None:
        x, _ = tensor(self.operands[0], "input", NUMBERS)
        r, _ = tensor(self.results[0], "result", ("i64",))
        _flags(self, "largest")
        k = ir.IntegerAttr(self.operation.attributes["k"]).value
        expect_shape(r, signatures.top_k(x, k, ir.IntegerAttr(
            self.operation.attributes["axis"]).value))


class GeluOp(_Unary, name="gelu"):
    """x * Phi(x); `approximate` = "none" (erf, the default when absent) or "tanh"."""

    def check(self) -> None:
        super().check()
        attrs = self.operation.attributes
        if "approximate" in attrs:
            mode = string_attr(attrs["approximate"], "approximate")
            if mode not in GELU_APPROXIMATIONS:
                raise Invalid(f'approximate must be "none" or "tanh", got "{mode}"')


class SoftmaxOp(_Unary, name="softmax"):
    """softmax along `axis` (i64, negative counts from the end)."""

    axis: ir.IntegerAttr

    def check(self) -> None:
        super().check()
        shape, _ = tensor(self.operands[0], "input")
        axis = ir.IntegerAttr(self.operation.attributes["axis"]).value
        signatures.normalize_axis(axis, len(shape))


class LayerNormOp(HexirOp, name="layer_norm"):
    """Normalize over the last dimension D, then scale by gamma [D] and shift by beta [D].

    `epsilon` (added to the variance) is finite and may be 0, as in ONNX.
    """

    input: ext.Operand[Any]
    gamma: ext.Operand[Any]
    beta: ext.Operand[Any]
    epsilon: ir.FloatAttr
    result: ext.Result[Any]

    def check(self) -> None:
        x, g, b, r = _shapes(self, "input", "gamma", "beta", takes=FLOATS)
        epsilon = ir.FloatAttr(self.operation.attributes["epsilon"]).value
        expect_shape(r, signatures.layer_norm(x, g, b, epsilon))


class TransposeOp(HexirOp, name="transpose"):
    """Permute dimensions: result dim i = input dim permutation[i]."""

    input: ext.Operand[Any]
    permutation: Any
    result: ext.Result[Any]

    def check(self) -> None:
        x, r = _shapes(self, "input")
        perm = i64_array(self.operation.attributes["permutation"], "permutation")
        expect_shape(r, signatures.transpose(x, perm))


class ReshapeOp(HexirOp, name="reshape"):
    """Same elements in row-major order, the result type's shape."""

    input: ext.Operand[Any]
    result: ext.Result[Any]

    def check(self) -> None:
        x, r = _shapes(self, "input")
        signatures.reshape(x, r)


class _Reduce(HexirOp):
    """Reduce over `axes` (array<i64>; none: every axis, as in ONNX); `keepdims` keeps them as
    size-1 dimensions."""

    input: ext.Operand[Any]
    axes: Any
    keepdims: Any
    result: ext.Result[Any]
    takes = NUMBERS

    def check(self) -> None:
        x, r = _shapes(self, "input", takes=self.takes)
        attrs = self.operation.attributes
        axes = i64_array(attrs["axes"], "axes")
        if not isinstance(attrs["keepdims"], ir.BoolAttr):
            raise Invalid(f"attribute 'keepdims' must be true or false, got {attrs['keepdims']}")
        expect_shape(r, signatures.reduce(x, axes, ir.BoolAttr(attrs["keepdims"]).value))


class ReduceSumOp(_Reduce, name="reduce_sum"):
    pass


class ReduceProdOp(_Reduce, name="reduce_prod"):
    pass


class ReduceMeanOp(_Reduce, name="reduce_mean"):
    takes = FLOATS


class ReduceMaxOp(_Reduce, name="reduce_max"):
    takes = ELEMENTS  # max of bools: any


class ReduceMinOp(_Reduce, name="reduce_min"):
    takes = ELEMENTS  # min of bools: all


class StringNormalizerOp(HexirOp, name="string_normalizer"):
    """ONNX's StringNormalizer on a string tensor [C] or [1, C]: drop the elements equal to a
    stopword (`is_case_sensitive` false: equal ignoring case), then change the rest's case
    (`case_change_action`: NONE, LOWER or UPPER); nothing left gives one empty string. How
    many are left depends on the data, so the result's length is the one the module was
    compiled for, and a call whose data gives another is refused. The runtime computes it
    (a library kernel, `hexir_format.library`), on the cpu."""

    input: ext.Operand[Any]
    case_change_action: ir.StringAttr
    is_case_sensitive: Any
    stopwords: Any
    result: ext.Result[Any]

    def check(self) -> None:
        x, _ = tensor(self.operands[0], "input", (STRING,))
        r, _ = tensor(self.results[0], "result", (STRING,))
        attrs = self.operation.attributes
        action = string_attr(attrs["case_change_action"], "case_change_action")
        if action not in CASE_CHANGE_ACTIONS:
            raise Invalid(f"case_change_action '{action}' is not one of "
                          f"{', '.join(CASE_CHANGE_ACTIONS)}")
        _flags(self, "is_case_sensitive")
        words = attrs["stopwords"]
        if not isinstance(words, ir.ArrayAttr) or not all(
                isinstance(w, ir.StringAttr) for w in words):
            raise Invalid("attribute 'stopwords' must be an array of strings")
        if len(x) not in (1, 2) or (len(x) == 2 and x[0] != 1):
            raise Invalid(f"input must be [C] or [1, C], got {signatures.fmt(x)}")
        if len(r) != len(x) or (len(r) == 2 and r[0] != 1):
            raise Invalid(f"result must have the input's rank ({signatures.fmt(x)}), got "
                          f"{signatures.fmt(r)}")
        if not len(words) and r != x:
            raise Invalid(f"with no stopwords the result is the input's shape "
                          f"{signatures.fmt(x)}, got {signatures.fmt(r)}")
        if "device" in attrs and string_attr(attrs["device"], "device") != "cpu":
            raise Invalid("runs on the cpu only (the runtime computes it), not on "
                          f"{string_attr(attrs['device'], 'device')}")


#: StringNormalizer's case_change_action values, in the order the library numbers them.
CASE_CHANGE_ACTIONS = ("NONE", "LOWER", "UPPER")


class PrintOp(HexirOp, name="print"):
    """Print a tensor on the host; a memref (a function's buffer argument) prints the same."""

    input: ext.Operand[Any]

    def check(self) -> None:
        value = self.operands[0]
        if isinstance(value.type, ir.MemRefType):
            memref(value, "input")
        else:
            tensor(value, "input")


MAX_KERNEL_INPUTS = 8


def segment_sizes(inputs: int) -> ir.Attribute:
    """`operandSegmentSizes` of a call_tir with `inputs` inputs."""
    if not 0 <= inputs <= MAX_KERNEL_INPUTS:
        raise ValueError(f"a kernel takes 0 to {MAX_KERNEL_INPUTS} inputs, not {inputs}")
    return ir.DenseI32ArrayAttr.get([1] * inputs + [0] * (MAX_KERNEL_INPUTS - inputs))


class CallTirOp(HexirOp, name="call_tir"):
    """Call the kernel `callee` with the inputs plus a destination.

    The kernel is the symbol `callee` at whatever level the module is: a hextir.prim_func
    (mlir-tir), a func.func of loops (mlir-linalg; a cpu one takes two more index arguments,
    its range), a gpu.module holding the gpu.func of that name (mlir-gpu), or an llvm.func /
    NVVM gpu.module (mlir-llvm). Where the kernel still has buffer types they must be the
    call's tensor types.

    IRDL binds a variadic group's constraint once -- all its values one type -- but a kernel's
    inputs differ (a fused kernel takes a matrix, a weight and a bias), so each input is its
    own optional group, `in0` to `in{MAX_KERNEL_INPUTS - 1}`, and the call carries
    `operandSegmentSizes` (`segment_sizes` makes it): at most MAX_KERNEL_INPUTS inputs.
    """

    callee: ir.FlatSymbolRefAttr
    in0: ext.Operand[Any] | None
    in1: ext.Operand[Any] | None
    in2: ext.Operand[Any] | None
    in3: ext.Operand[Any] | None
    in4: ext.Operand[Any] | None
    in5: ext.Operand[Any] | None
    in6: ext.Operand[Any] | None
    in7: ext.Operand[Any] | None
    result: ext.Result[Any]

    def check(self) -> None:
        _result(self)
        inputs = len(self.operands)
        if not 0 <= inputs <= MAX_KERNEL_INPUTS:
            raise Invalid(f"calls a kernel with {inputs} inputs; a kernel takes 0 to "
                          f"{MAX_KERNEL_INPUTS}")
        attrs = self.operation.attributes
        sizes, expected = attrs.get("operandSegmentSizes"), segment_sizes(inputs)
        if sizes is None or list(ir.DenseI32ArrayAttr(sizes)) != list(expected):
            raise Invalid(f"operandSegmentSizes must be {expected}: "
                          "each input its own group, first to last")
        name = ir.FlatSymbolRefAttr(attrs["callee"]).value
        kernel = lookup_symbol(self.operation, name)
        if kernel is None or kernel.name not in KERNEL_SYMBOLS or (
            kernel.name != "hextir.prim_func" and "hexir.kernel" not in kernel.attributes
        ):
            raise Invalid(f"'{name}' does not reference a kernel (a hextir.prim_func or its "
                          "lowering)")
        buffers = _kernel_buffers(kernel, name)
        if buffers is None:
            return
        if len(buffers) != inputs + 1:
            raise Invalid(
                f"expected @{name} to take {inputs + 1} buffers ({inputs} inputs + 1 "
                f"destination), but it takes {len(buffers)}"
            )
        values = [*self.operands, self.results[0]]
        for i, (value, buf) in enumerate(zip(values, buffers, strict=False)):
            shape, elem = tensor(value, f"operand #{i}" if i < inputs else "result")
            bshape, belem = memref(buf, f"buffer #{i} of @{name}", dynamic=True)
            flat = "hexir.symbols" in kernel.attributes and not symbolic.is_static(shape)
            # (a flat buffer, its sizes passed apart: only its element type tells)
            if (not flat and shape != bshape) or STORAGE.get(elem, elem) != belem:
                raise Invalid(f"{value.type} does not match buffer #{i} of @{name}, {buf}")


#: The ops a call_tir's callee may be, at each stage.
KERNEL_SYMBOLS = ("hextir.prim_func", "func.func", "gpu.module", "llvm.func")


def _kernel_buffers(kernel: ir.Operation, name: str) -> list[ir.Type] | None:
    """The memref arguments of a kernel (None once lowered to pointers)."""
    if kernel.name == "llvm.func":
        return None
    if kernel.name == "gpu.module":
        inner = [op.operation for op in kernel.regions[0].blocks[0].operations]
        found = [op for op in inner if op.name == "gpu.func"]
        if not found:  # already NVVM: llvm.funcs inside
            return None
        kernel = found[0]
    ftype = kernel.attributes.get("function_type")
    if not (isinstance(ftype, ir.TypeAttr) and isinstance(ftype.value, ir.FunctionType)):
        raise Invalid(f"@{name} has no function_type, so its buffers are unknown")
    inputs = list(ir.FunctionType(ftype.value).inputs)
    while inputs and isinstance(inputs[-1], ir.IndexType):  # a cpu kernel's range
        inputs.pop()
    return inputs


class TransferOp(HexirOp, name="transfer"):
    """Copy a tensor from device `src` to device `dst` (inserted by hexir-insert-transfers)."""

    input: ext.Operand[Any]
    src: ir.StringAttr
    dst: ir.StringAttr
    result: ext.Result[Any]

    def check(self) -> None:
        tensor(self.operands[0], "input")
        if self.results[0].type != self.operands[0].type:
            raise Invalid(
                f"result type {self.results[0].type} differs from the input type "
                f"{self.operands[0].type}"
            )
        attrs = self.operation.attributes
        src, dst = (string_attr(attrs[k], k) for k in ("src", "dst"))
        for key, dev in (("src", src), ("dst", dst)):
            if dev not in DEVICES:
                raise Invalid(f"{key} '{dev}' is not a device; expected cpu or cuda")
        if src == dst:
            raise Invalid(f"transfer from {src} to itself")
