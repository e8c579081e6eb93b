"""Each ONNX op as hexir ops: a handler per op, for the op versions of opsets 13-25.

A handler takes the node's inputs (`Tensor`s; None for an omitted optional one) and its
attributes with their ONNX defaults, and returns its outputs. An ONNX op that is a
composition of hexir ops is decomposed here (Gemm, LeakyRelu, HardSigmoid, Softplus,
Reciprocal, Clip, LogSoftmax, BatchNormalization, LayerNormalization over several axes, Sum,
Flatten/Squeeze/Unsqueeze as reshapes); the rest map onto one hexir op each. `VERSIONS` lists
the op versions each handler implements; a node selecting another is refused by name.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
from hexir_format import signatures

from hexir_compiler.frontend.onnx import DOMAINS, DTYPES, MLIR, ModelError, Tensor, _tensor_type
from hexir_compiler.mlir import ir

Handler = Callable[..., list[Tensor]]
HANDLERS: dict[str, Handler] = {}
VERSIONS: dict[str, tuple[int, ...]] = {}
#: The ops whose first input must be float32 or float64, checked before the handler runs.
FLOATS_ONLY: set[str] = set()


def handles(op_type: str, *versions: int, floats: bool = False):
    def register(fn: Handler) -> Handler:
        HANDLERS[op_type] = fn
        VERSIONS[op_type] = versions
        if floats:
            FLOATS_ONLY.add(op_type)
        return fn
    return register


class NodeError(Exception):
    """A handler's refusal (as is a `signatures.ShapeError`); the emitter prefixes the node."""


class Emitter:
    """Creates hexir ops for the importer's current block; one per model."""

    def __init__(self, importer) -> None:
        self.importer = importer
        self.onnx = importer.onnx
        # id(array) -> (array, its hexir.constant); holding the array keeps its id unique.
        self._consts: dict[int, tuple[np.ndarray, ir.Value]] = {}

    # ---- nodes ---------------------------------------------------------------------------

    def node(self, node, index: int) -> None:
        label = f"node '{node.name}' ({node.op_type})" if node.name else \
            f"node {index} ({node.op_type})"
        where = f"{self.importer.name}: {label}"
        if node.domain not in DOMAINS:
            raise ModelError(f"{where}: domain '{node.domain}' is not one Hexir reads")
        values = self.importer.values
        for name in node.input:
            if name and name not in values:
                raise ModelError(f"{where}: input '{name}' is computed by no earlier node and "
                                 "is not a graph input or initializer")
        inputs = [values[name] if name else None for name in node.input]
        with ir.Location.name(where):  # what a later pass's error about its ops names
            outputs = self._translate(node, inputs, where)
        for name, tensor in zip(node.output, outputs, strict=False):
            if name:
                values[name] = tensor

    def _translate(self, node, inputs: list, where: str) -> list[Tensor]:
        known = all(t is not None and t.is_const for t in inputs)
        if node.op_type in ("Shape", "Size") or (known and (
                inputs or node.op_type == "ConstantOfShape")):
            return self._fold(node, inputs, where)
        if node.op_type not in HANDLERS:
            raise ModelError(f"{where}: {node.op_type} is not an op Hexir imports")
        try:
            schema = self.onnx.defs.get_schema(node.op_type, self.importer.opset, node.domain)
        except Exception:
            raise ModelError(f"{where}: {node.op_type} is not an op of opset "
                             f"{self.importer.opset}") from None
        if schema.since_version not in VERSIONS[node.op_type]:
            raise ModelError(f"{where}: version {schema.since_version} of {node.op_type} (opset "
                             f"{self.importer.opset}) is not one Hexir implements; it has "
                             f"{', '.join(map(str, VERSIONS[node.op_type]))}")
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}
        try:
            if node.op_type in FLOATS_ONLY:
                _floats(inputs[0], node.op_type)
            outputs = HANDLERS[node.op_type](self, inputs, attrs, schema.since_version)
        except (NodeError, signatures.ShapeError) as err:
            raise ModelError(f"{where}: {err}") from None
        except (IndexError, TypeError) as err:
            raise ModelError(f"{where}: missing or malformed inputs or attributes "
                             f"({err})") from None
        extra = [n for n in node.output[len(outputs):] if n]
        if extra:
            raise ModelError(f"{where}: output '{extra[0]}' (optional output "
                             f"{len(outputs)}) is not one Hexir computes")
        return outputs

    def _fold(self, node, inputs: list, where: str) -> list[Tensor]:
        """The node's outputs computed now, when every input is known (Shape and Size need
        only shapes)."""
        if node.op_type == "Shape":
            attrs = {a.name: a.i for a in node.attribute}
            shape = np.array(inputs[0].shape, np.int64)
            # ONNX clamps start and end (negative: from the back) to [0, rank], as slicing does
            return [constant(shape[attrs.get("start", 0):attrs.get("end")])]
        if node.op_type == "Size":
            return [constant(np.array(math.prod(inputs[0].shape), np.int64))]
        from onnx.reference import ReferenceEvaluator

        helper = self.onnx.helper
        names = [f"i{k}" if t is not None else "" for k, t in enumerate(inputs)]
        outs = [f"o{k}" for k, n in enumerate(node.output)]
        copy = helper.make_node(node.op_type, names, outs, domain=node.domain)
        copy.attribute.extend(node.attribute)
        graph = helper.make_graph(
            [copy], "fold",
            [helper.make_tensor_value_info(n, self.onnx.helper.np_dtype_to_tensor_dtype(t.dtype),
                                           t.shape) for n, t in zip(names, inputs) if n],
            [helper.make_tensor_value_info(n, 0, None) for n in outs])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("",
                                                                            self.importer.opset)])
        try:
            results = ReferenceEvaluator(model).run(
                None, {n: t.const for n, t in zip(names, inputs) if n})
        except Exception as err:
            raise ModelError(f"{where}: folding it at import failed: "
                             f"{str(err).splitlines()[0] if str(err) else type(err).__name__}"
                             ) from None
        folded = []
        for array in results:
            array = np.asarray(array)
            if array.dtype not in MLIR:
                raise ModelError(f"{where}: it gives {array.dtype} values; Hexir has float32, "
                                 "float64, int32, int64 and bool")
            folded.append(constant(array))
        return folded

    # ---- values --------------------------------------------------------------------------

    def tensor(self, t: Tensor) -> ir.Value:
        """The MLIR value of `t`, making a `hexir.constant` of a constant (once per array)."""
        if t.value is not None:
            return t.value
        key = id(t.const)
        if key not in self._consts:
            array = np.require(t.const, requirements="C")  # keeps a scalar 0-d
            type_ = _tensor_type(t.shape, t.dtype)
            attr = ir.DenseElementsAttr.get(array, type=type_)
            op = ir.Operation.create("hexir.constant", results=[type_],
                                     attributes={"value": attr})
            self._consts[key] = (t.const, op.result)
        return self._consts[key][1]

    def op(self, name: str, inputs: list[Tensor], shape, dtype, **attrs) -> Tensor:
        """`hexir.<name>` of `inputs` with a result of `shape` x `dtype`."""
        shape, dtype = tuple(int(d) for d in shape), np.dtype(dtype)
        if any(d < 0 for d in shape):
            raise NodeError(f"gives the negative shape {list(shape)}")
        op = ir.Operation.create(
            f"hexir.{name}", results=[_tensor_type(shape, dtype)],
            operands=[self.tensor(t) for t in inputs],
            attributes={k: _attribute(v) for k, v in attrs.items()})
        return Tensor(shape, dtype, value=op.result)

    # ---- helpers the handlers share ------------------------------------------------------

    def elementwise(self, name: str, *xs: Tensor, dtype=None) -> Tensor:
        shape = np.broadcast_shapes(*(x.shape for x in xs))
        return self.op(name, list(xs), shape, dtype or xs[0].dtype)

    def binary(self, name: str, a: Tensor, b: Tensor, dtype=None) -> Tensor:
        if a.dtype != b.dtype:
            raise NodeError(f"operands are {a.dtype} and {b.dtype}; expected one type")
        try:
            return self.elementwise(name, a, b, dtype=dtype)
        except ValueError:
            raise NodeError(f"shapes {list(a.shape)} and {list(b.shape)} do not broadcast") \
                from None

    def scalar(self, value, dtype) -> Tensor:
        return constant(np.array(value, dtype=dtype))

    def reshape(self, x: Tensor, shape) -> Tensor:
        shape = tuple(int(d) for d in shape)
        if x.is_const:
            return constant(x.const.reshape(shape))
        if shape == x.shape:
            return x
        return self.op("reshape", [x], shape, x.dtype)

    def expand(self, x: Tensor, shape) -> Tensor:
        shape = tuple(shape)
        if x.shape == shape:
            return x
        if x.is_const:
            return constant(np.broadcast_to(x.const, shape).copy())
        return self.op("expand", [x], shape, x.dtype)

    def transpose(self, x: Tensor, perm) -> Tensor:
        perm = [int(p) for p in perm]
        if x.is_const:
            return constant(np.ascontiguousarray(np.transpose(x.const, perm)))
        return self.op("transpose", [x], [x.shape[p] for p in perm], x.dtype,
                       permutation=perm)

    def cast(self, x: Tensor, dtype) -> Tensor:
        dtype = np.dtype(dtype)
        if x.dtype == dtype:
            return x
        if x.is_const:
            return constant(x.const.astype(dtype))
        return self.op("cast", [x], x.shape, dtype)

    def reduce(self, name: str, x: Tensor, axes, keepdims: bool) -> Tensor:
        rank = len(x.shape)
        axes = sorted({a + rank if a < 0 else a for a in axes})
        if any(not 0 <= a < rank for a in axes):
            raise NodeError(f"axes {list(axes)} are out of range for rank {rank}")
        shape = [1 if d in axes else e for d, e in enumerate(x.shape)] if keepdims else \
            [e for d, e in enumerate(x.shape) if d not in axes]
        return self.op(name, [x], shape, x.dtype, axes=list(axes), keepdims=bool(keepdims))


def constant(array: np.ndarray) -> Tensor:
    array = np.asarray(array)
    return Tensor(tuple(array.shape), array.dtype, const=array)


def _attribute(value) -> ir.Attribute:
    if isinstance(value, bool):
        return ir.BoolAttr.get(value)
    if isinstance(value, int | np.integer):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))
    if isinstance(value, float):
        return ir.FloatAttr.get(ir.F64Type.get(), value)
    if isinstance(value, str):
        return ir.StringAttr.get(value)
    return ir.DenseI64ArrayAttr.get([int(v) for v in value])


def const_ints(t: Tensor | None, what: str) -> list[int] | None:
    """The values of a shape or axes operand, which must be known at compile time."""
    if t is None:
        return None
    if not t.is_const:
        raise NodeError(f"its {what} operand must be known at compile time (an initializer, a "
                        "Constant, or an input fixed with -fix-input)")
    return [int(v) for v in np.asarray(t.const).reshape(-1)]


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise NodeError(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _floats(x: Tensor, op: str) -> None:
    if x.dtype.kind != "f":
        raise NodeError(f"{op} of {x.dtype} is not supported; Hexir computes it on float32 and "
                        "float64")


# ---- element-wise ------------------------------------------------------------------------

for _onnx, _hexir in (("Add", "add"), ("Sub", "sub"), ("Mul", "mul"), ("Div", "div")):
    handles(_onnx, 13, 14)(lambda e, xs, a, v, _hexir=_hexir: [e.binary(_hexir, xs[0], xs[1])])
for _onnx, _hexir in (("Max", "max"), ("Min", "min"), ("Sum", "add")):  # of any operand count
    handles(_onnx, 13)(lambda e, xs, a, v, _hexir=_hexir: [
        functools.reduce(lambda r, x: e.binary(_hexir, r, x), xs[1:], xs[0])])
for _onnx, _hexir, _versions in (("Equal", "equal", (13, 19)), ("Less", "less", (13,)),
                                 ("Greater", "greater", (13,))):
    def _compare(e, xs, a, v, _hexir=_hexir):
        if _hexir != "equal" and xs[0].dtype == xs[1].dtype == np.bool_:
            raise NodeError(f"{_hexir} of bool is not supported")
        return [e.binary(_hexir, xs[0], xs[1], dtype=np.bool_)]
    handles(_onnx, *_versions)(_compare)

_UNARY = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
          "Erf": "erf", "Neg": "neg", "Abs": "abs"}
for _onnx, _hexir in _UNARY.items():
    handles(_onnx, 13, floats=_hexir not in ("neg", "abs"))(
        lambda e, xs, a, v, _hexir=_hexir: [e.elementwise(_hexir, xs[0])])


@handles("Relu", 13, 14)
def _relu(e, xs, a, v):
    x = xs[0]
    if x.dtype.kind == "f":
        return [e.elementwise("relu", x)]
    return [e.binary("max", x, e.scalar(0, x.dtype))]


@handles("Pow", 13, 15)
def _pow(e, xs, a, v):
    x, y = xs
    if x.dtype.kind == "f":
        return [e.binary("pow", x, e.cast(y, x.dtype))]
    # An integer base: computed in f64 (exact while |result| < 2**53), cast back as numpy does.
    f64 = np.dtype("float64")
    return [e.cast(e.binary("pow", e.cast(x, f64), e.cast(y, f64)), x.dtype)]


@handles("Reciprocal", 13, floats=True)
def _reciprocal(e, xs, a, v):
    return [e.binary("div", e.scalar(1, xs[0].dtype), xs[0])]


@handles("LeakyRelu", 6, 16, floats=True)
def _leaky_relu(e, xs, a, v):
    x = xs[0]
    scaled = e.binary("mul", x, e.scalar(a.get("alpha", 0.01), x.dtype))
    negative = e.elementwise("less", x, e.scalar(0, x.dtype), dtype=np.bool_)
    return [e.op("where", [negative, scaled, x], x.shape, x.dtype)]


@handles("HardSigmoid", 6, 22, floats=True)
def _hard_sigmoid(e, xs, a, v):
    x = xs[0]
    line = e.binary("add", e.binary("mul", x, e.scalar(a.get("alpha", 0.2), x.dtype)),
                    e.scalar(a.get("beta", 0.5), x.dtype))
    return [e.binary("max", e.binary("min", line, e.scalar(1, x.dtype)), e.scalar(0, x.dtype))]


@handles("Softplus", 1, 22, floats=True)
def _softplus(e, xs, a, v):
    x = xs[0]
    return [e.elementwise("log", e.binary("add", e.elementwise("exp", x), e.scalar(1, x.dtype)))]


@handles("Gelu", 20, floats=True)
def _gelu(e, xs, a, v):
    x = xs[0]
    return [e.op("gelu", [x], x.shape, x.dtype, approximate=_string(a, "approximate", "none"))]


def _string(a: dict, name: str, default: str) -> str:
    value = a.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


@handles("Clip", 13)
def _clip(e, xs, a, v):
    x, low, high = (xs + [None, None])[:3]
    result = x
    if low is not None:
        result = e.binary("max", result, _scalar_operand(e, low, x, "min"))
    if high is not None:
        result = e.binary("min", result, _scalar_operand(e, high, x, "max"))
    return [result]


def _scalar_operand(e, t: Tensor, x: Tensor, what: str) -> Tensor:
    if t.shape not in ((), (1,)):
        raise NodeError(f"its {what} operand has shape {list(t.shape)}; expected a scalar")
    if t.dtype != x.dtype:
        raise NodeError(f"its {what} operand is {t.dtype}; the input is {x.dtype}")
    return e.reshape(t, ()) if t.shape else t


@handles("Where", 9, 16)
def _where(e, xs, a, v):
    cond, x, y = xs
    if cond.dtype != np.bool_ or x.dtype != y.dtype:
        raise NodeError(f"expected a bool condition and two operands of one type, got "
                        f"{cond.dtype}, {x.dtype}, {y.dtype}")
    try:
        shape = np.broadcast_shapes(cond.shape, x.shape, y.shape)
    except ValueError:
        raise NodeError("condition, x and y do not broadcast") from None
    return [e.op("where", [e.expand(cond, shape), e.expand(x, shape), e.expand(y, shape)],
                 shape, x.dtype)]


@handles("Cast", 13, 19, 21, 23, 24, 25)
def _cast(e, xs, a, v):
    to = a["to"]
    if to not in DTYPES:
        raise NodeError(f"casting to {e.onnx.TensorProto.DataType.Name(to)} is not supported; "
                        "Hexir has FLOAT, DOUBLE, INT32, INT64 and BOOL")
    return [e.cast(xs[0], DTYPES[to])]


@handles("CastLike", 15, 19, 21, 23, 24, 25)
def _cast_like(e, xs, a, v):
    return [e.cast(xs[0], xs[1].dtype)]


@handles("Identity", 13, 14, 16, 19, 21, 23, 24, 25)
def _identity(e, xs, a, v):
    return [xs[0]]


@handles("Constant", 13, 19, 21, 23, 24, 25)
def _constant(e, xs, a, v):
    if "value" in a:
        if a["value"].data_type not in DTYPES:
            raise NodeError("its value has an element type Hexir does not have")
        return [constant(e.onnx.numpy_helper.to_array(a["value"]))]
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in a:
            return [constant(np.array(a[key], dtype=dtype))]
    raise NodeError("only value, value_float(s) and value_int(s) constants are supported")


# ---- normalization and softmax -----------------------------------------------------------

@handles("Softmax", 13, floats=True)
def _softmax(e, xs, a, v):
    x = xs[0]
    return [e.op("softmax", [x], x.shape, x.dtype, axis=_axis(a.get("axis", -1), len(x.shape)))]


@handles("LogSoftmax", 13, floats=True)
def _log_softmax(e, xs, a, v):
    x = xs[0]
    axis = _axis(a.get("axis", -1), len(x.shape))
    shifted = e.binary("sub", x, e.reduce("reduce_max", x, [axis], True))
    total = e.reduce("reduce_sum", e.elementwise("exp", shifted), [axis], True)
    return [e.binary("sub", shifted, e.elementwise("log", total))]


@handles("LayerNormalization", 17, floats=True)
def _layer_norm(e, xs, a, v):
    x, scale, bias = (xs + [None])[:3]
    rank = len(x.shape)
    axis = _axis(a.get("axis", -1), rank)
    epsilon = float(a.get("epsilon", 1e-5))
    axes = list(range(axis, rank))
    mean = e.reduce("reduce_mean", x, axes, True)
    centered = e.binary("sub", x, mean)
    variance = e.reduce("reduce_mean", e.binary("mul", centered, centered), axes, True)
    spread = e.elementwise("sqrt", e.binary("add", variance, e.scalar(epsilon, x.dtype)))
    inverse = e.binary("div", e.scalar(1, x.dtype), spread)
    depth = x.shape[-1:]
    if axis == rank - 1 and scale.shape == depth and (bias is None or bias.shape == depth):
        # One fused kernel; the decomposition above stays only for Mean and InvStdDev, and
        # the import's dead-code pass drops it when the node's other outputs go unused.
        beta = bias if bias is not None else constant(np.zeros(depth, x.dtype))
        y = e.op("layer_norm", [x, scale, beta], x.shape, x.dtype, epsilon=epsilon)
    else:
        y = e.binary("mul", e.binary("mul", centered, inverse), scale)
        if bias is not None:
            y = e.binary("add", y, bias)
    return [y, mean, inverse]


@handles("BatchNormalization", 9, 14, 15, floats=True)
def _batch_norm(e, xs, a, v):
    x, scale, bias, mean, var = xs
    if a.get("training_mode", 0):
        raise NodeError("training_mode=1 is not supported; Hexir compiles inference")
    if len(x.shape) < 2:
        raise NodeError(f"input has rank {len(x.shape)}; expected [N, C, ...]")
    channels = (x.shape[1],) + (1,) * (len(x.shape) - 2)

    def per_channel(t: Tensor) -> Tensor:
        return e.reshape(e.cast(t, x.dtype), channels)

    spread = e.elementwise("sqrt", e.binary("add", per_channel(var),
                                            e.scalar(a.get("epsilon", 1e-5), x.dtype)))
    normal = e.binary("div", e.binary("sub", x, per_channel(mean)), spread)
    return [e.binary("add", e.binary("mul", normal, per_channel(scale)), per_channel(bias))]


# ---- reductions --------------------------------------------------------------------------

def _reduction(hexir: str):
    def handler(e, xs, a, v):
        x = xs[0]
        axes = a["axes"] if "axes" in a else const_ints(xs[1] if len(xs) > 1 else None, "axes")
        keepdims = bool(a.get("keepdims", 1))
        if not axes:
            if a.get("noop_with_empty_axes", 0):
                return [x]
            axes = list(range(len(x.shape)))
        if hexir == "reduce_mean":
            _floats(x, "ReduceMean")
        if hexir == "reduce_sum" and x.dtype == np.bool_:
            raise NodeError("ReduceSum of bool is not supported")
        return [e.reduce(hexir, x, axes, keepdims)]
    return handler


handles("ReduceSum", 13)(_reduction("reduce_sum"))
handles("ReduceMean", 13, 18)(_reduction("reduce_mean"))
handles("ReduceMax", 13, 18, 20)(_reduction("reduce_max"))
handles("ReduceMin", 13, 18, 20)(_reduction("reduce_min"))


@handles("GlobalAveragePool", 1, 22, floats=True)
def _global_average_pool(e, xs, a, v):
    x = xs[0]
    return [e.reduce("reduce_mean", x, list(range(2, len(x.shape))), True)]


# ---- shapes and data movement ------------------------------------------------------------

@handles("Transpose", 13, 21, 23, 24, 25)
def _transpose(e, xs, a, v):
    x = xs[0]
    perm = a.get("perm", list(reversed(range(len(x.shape)))))
    if sorted(perm) != list(range(len(x.shape))):
        raise NodeError(f"perm {list(perm)} is not a permutation of the {len(x.shape)} axes")
    return [e.transpose(x, perm)]


@handles("Reshape", 13, 14, 19, 21, 23, 24, 25)
def _reshape(e, xs, a, v):
    x, shape = xs[0], const_ints(xs[1], "shape")
    allow_zero = a.get("allowzero", 0)
    out = [x.shape[d] if s == 0 and not allow_zero else s for d, s in enumerate(shape)]
    if out.count(-1) > 1:
        raise NodeError(f"shape {shape} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or math.prod(x.shape) % known:
            raise NodeError(f"cannot reshape {list(x.shape)} to {shape}")
        out[out.index(-1)] = math.prod(x.shape) // known
    if math.prod(out) != math.prod(x.shape) or any(d < 0 for d in out):
        raise NodeError(f"cannot reshape {list(x.shape)} ({math.prod(x.shape)} elements) to "
                        f"{shape}")
    return [e.reshape(x, out)]


@handles("Flatten", 13, 21, 23, 24, 25)
def _flatten(e, xs, a, v):
    x = xs[0]
    rank = len(x.shape)
    axis = a.get("axis", 1)
    if not -rank <= axis <= rank:
        raise NodeError(f"axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    return [e.reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))]


@handles("Squeeze", 13, 21, 23, 24, 25)
def _squeeze(e, xs, a, v):
    x = xs[0]
    axes = const_ints(xs[1] if len(xs) > 1 else None, "axes")
    rank = len(x.shape)
    if axes is None:
        axes = [d for d, n in enumerate(x.shape) if n == 1]
    axes = {_axis(d, rank) for d in axes}
    if any(x.shape[d] != 1 for d in axes):
        raise NodeError(f"cannot squeeze axes {sorted(axes)} of {list(x.shape)}: not all are 1")
    return [e.reshape(x, [n for d, n in enumerate(x.shape) if d not in axes])]


@handles("Unsqueeze", 13, 21, 23, 24, 25)
def _unsqueeze(e, xs, a, v):
    x = xs[0]
    given = const_ints(xs[1], "axes")
    rank = len(x.shape) + len(given)
    axes = {_axis(d, rank) for d in given}
    if len(axes) != len(given):
        raise NodeError("axes name an axis twice")
    rest = iter(x.shape)
    return [e.reshape(x, [1 if d in axes else next(rest) for d in range(rank)])]


@handles("Expand", 13)
def _expand(e, xs, a, v):
    x, shape = xs[0], const_ints(xs[1], "shape")
    try:
        out = np.broadcast_shapes(x.shape, tuple(shape))
    except ValueError:
        raise NodeError(f"{list(x.shape)} does not broadcast with {shape}") from None
    return [e.expand(x, out)]


@handles("Concat", 13)
def _concat(e, xs, a, v):
    parts = [x for x in xs if x is not None]
    rank = len(parts[0].shape)
    axis = _axis(a["axis"], rank)
    if any(p.dtype != parts[0].dtype or len(p.shape) != rank for p in parts):
        raise NodeError("operands differ in element type or rank")
    result = parts[0]
    for part in parts[1:]:
        if any(p != q for d, (p, q) in enumerate(zip(result.shape, part.shape)) if d != axis):
            raise NodeError(f"shapes {list(result.shape)} and {list(part.shape)} differ off "
                            f"axis {axis}")
        shape = list(result.shape)
        shape[axis] += part.shape[axis]
        result = e.op("concat", [result, part], shape, result.dtype, axis=axis)
    return [result]


@handles("Slice", 13)
def _slice(e, xs, a, v):
    x = xs[0]
    rank = len(x.shape)
    starts, ends = const_ints(xs[1], "starts"), const_ints(xs[2], "ends")
    axes = const_ints(xs[3] if len(xs) > 3 else None, "axes") or list(range(len(starts)))
    steps = const_ints(xs[4] if len(xs) > 4 else None, "steps") or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise NodeError("starts, ends, axes and steps differ in length")
    begin, stride, shape = [0] * rank, [1] * rank, list(x.shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = _axis(axis, rank)
        if step == 0:
            raise NodeError("a step is 0")
        indices = range(x.shape[axis])[slice(start, end, step)]
        begin[axis], stride[axis], shape[axis] = (indices.start if len(indices) else 0,
                                                  step, len(indices))
    return [e.op("slice", [x], shape, x.dtype, starts=begin, steps=stride)]


@handles("Gather", 13)
def _gather(e, xs, a, v):
    data, indices = xs
    if indices.dtype not in (np.int32, np.int64):
        raise NodeError(f"indices are {indices.dtype}; expected int32 or int64")
    axis = _axis(a.get("axis", 0), len(data.shape))
    if indices.is_const:
        extent = data.shape[axis]
        bad = indices.const[(indices.const < -extent) | (indices.const >= extent)]
        if bad.size:
            raise NodeError(f"index {int(bad.flat[0])} is out of range for axis {axis} of "
                            f"extent {extent}")
    shape = (*data.shape[:axis], *indices.shape, *data.shape[axis + 1:])
    return [e.op("gather", [data, indices], shape, data.dtype, axis=axis)]


# ---- contractions and windows ------------------------------------------------------------

@handles("MatMul", 13, floats=True)
def _matmul(e, xs, a, v):
    x, y = xs
    if x.dtype != y.dtype:
        raise NodeError(f"operands are {x.dtype} and {y.dtype}; expected one type")
    if not x.shape or not y.shape:
        raise NodeError("MatMul of a scalar")
    lhs = e.reshape(x, (1, *x.shape)) if len(x.shape) == 1 else x
    rhs = e.reshape(y, (*y.shape, 1)) if len(y.shape) == 1 else y
    if lhs.shape[-1] != rhs.shape[-2]:
        raise NodeError(f"inner dimensions differ: {list(x.shape)} and {list(y.shape)}")
    try:
        batch = np.broadcast_shapes(lhs.shape[:-2], rhs.shape[:-2])
    except ValueError:
        raise NodeError(f"batch dimensions of {list(x.shape)} and {list(y.shape)} do not "
                        "broadcast") from None
    out = e.op("matmul", [lhs, rhs], (*batch, lhs.shape[-2], rhs.shape[-1]), x.dtype)
    rows = x.shape[-2:-1] if len(x.shape) > 1 else ()
    cols = y.shape[-1:] if len(y.shape) > 1 else ()
    return [e.reshape(out, (*batch, *rows, *cols))]


@handles("Gemm", 13, floats=True)
def _gemm(e, xs, a, v):
    A, B, C = (xs + [None])[:3]
    if len(A.shape) != 2 or len(B.shape) != 2:
        raise NodeError(f"expected matrices, got {list(A.shape)} and {list(B.shape)}")
    if a.get("transA", 0):
        A = e.transpose(A, (1, 0))
    if a.get("transB", 0):
        B = e.transpose(B, (1, 0))
    if A.shape[1] != B.shape[0]:
        raise NodeError(f"inner dimensions differ: {list(A.shape)} and {list(B.shape)}")
    y = e.op("matmul", [A, B], (A.shape[0], B.shape[1]), A.dtype)
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    if alpha != 1.0:
        y = e.binary("mul", y, e.scalar(alpha, A.dtype))
    if C is not None and beta != 0.0:
        if beta != 1.0:
            C = constant((C.const * beta).astype(C.dtype)) if C.is_const else \
                e.binary("mul", C, e.scalar(beta, C.dtype))
        y = e.binary("add", y, C)
    return [y]


def _window_attrs(a, x: Tensor, kernel: list[int]):
    spatial = len(x.shape) - 2
    if spatial < 1:
        raise NodeError(f"input has rank {len(x.shape)}; expected [N, C, spatial...]")
    strides = list(a.get("strides", [1] * spatial))
    dilations = list(a.get("dilations", [1] * spatial))
    pads = list(a.get("pads", [0] * 2 * spatial))
    auto_pad = _string(a, "auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * 2 * spatial
        for d in range(spatial):
            out = -(-x.shape[2 + d] // strides[d])
            total = max(0, (out - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1
                        - x.shape[2 + d])
            small, large = total // 2, total - total // 2
            pads[d], pads[spatial + d] = (small, large) if auto_pad == "SAME_UPPER" else \
                (large, small)
    elif auto_pad == "VALID":
        pads = [0] * 2 * spatial
    elif auto_pad != "NOTSET":
        raise NodeError(f"auto_pad '{auto_pad}' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID")
    return strides, pads, dilations


@handles("Conv", 11, 22, floats=True)
def _conv(e, xs, a, v):
    x, w, bias = (xs + [None])[:3]
    if len(w.shape) != len(x.shape):
        raise NodeError(f"weight has rank {len(w.shape)}; the input has {len(x.shape)}")
    kernel = list(a.get("kernel_shape", w.shape[2:]))
    strides, pads, dilations = _window_attrs(a, x, kernel)
    shape = signatures.conv(x.shape, w.shape, a.get("group", 1), strides, pads, dilations)
    y = e.op("conv", [x, w], shape, x.dtype, strides=strides, pads=pads, dilations=dilations,
             group=int(a.get("group", 1)))
    if bias is not None:
        y = e.binary("add", y, e.reshape(bias, (w.shape[0],) + (1,) * (len(x.shape) - 2)))
    return [y]


def _pool(kind: str):
    def handler(e, xs, a, v):
        x = xs[0]
        kernel = list(a["kernel_shape"])
        strides, pads, dilations = _window_attrs(a, x, kernel)
        ceil_mode = bool(a.get("ceil_mode", 0))
        spatial = signatures.window(x.shape[2:], kernel, strides, pads, dilations, ceil_mode)
        return [e.op("pool", [x], (*x.shape[:2], *spatial), x.dtype, kind=kind, kernel=kernel,
                     strides=strides, pads=pads, dilations=dilations, ceil_mode=ceil_mode,
                     count_include_pad=bool(a.get("count_include_pad", 0)))]
    return handler


handles("MaxPool", 12, 22, floats=True)(_pool("max"))
handles("AveragePool", 11, 19, 22, floats=True)(_pool("average"))


# The recurrent layers (RNN, GRU, LSTM) have their own module; importing it here registers
# them wherever the handlers are read.
from hexir_compiler.frontend import onnx_rnn  # noqa: F401
