"""Each ONNX op as hexir ops: a handler per op, for the op versions of opsets 13-28.

A handler takes the node's inputs (`Tensor`s; None for an omitted optional one) and its
attributes with their ONNX defaults, and returns its outputs. An ONNX op that is a
composition of hexir ops is decomposed here (Gemm, LeakyRelu, HardSigmoid, HardSwish,
Softsign, IsNaN, IsInf, Reciprocal, Clip, LogSoftmax, BatchNormalization,
LayerNormalization over several axes, Sum, Flatten/Squeeze/Unsqueeze as reshapes); the rest
map onto one hexir op each. `VERSIONS` lists the op versions each handler implements; a node
selecting another is refused by name.
The ops composed of several hexir ops with constant index tables or masks (Split, Pad,
Resize, Einsum, ...) are in `onnx_ops_composite`, which registers them here on import.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import overload

import numpy as np

from hexir_compiler import symbolic
from hexir_compiler.dialects.hexir import MAX_KERNEL_INPUTS
from hexir_compiler.frontend.onnx import (
    DOMAINS,
    DTYPES,
    MLIR,
    STRING_DTYPE,
    ModelError,
    Sequence,
    Tensor,
    _tensor_type,
)
from hexir_compiler.mlir import ir
from hexir_format import dims, signatures
from hexir_format.dims import Dim, Expr

Handler = Callable[..., list[Tensor]]
#: The ops that need only their input's shape: always folded at import, never handled.
SHAPE_OPS = ("Shape", "Size")
HANDLERS: dict[str, Handler] = {}
VERSIONS: dict[str, tuple[int, ...]] = {}
#: The ops whose first input must be float32 or float64, checked before the handler runs.
FLOATS_ONLY: set[str] = set()
#: The ops that read or write sequence values (`onnx_sequence`), and Identity, which passes
#: one on; never folded (a sequence is not an array the reference evaluator is given).
TAKES_SEQUENCES: set[str] = {"Identity"}
#: The ops that read a string tensor (`onnx_strings`), and Identity, which passes one on.
TAKES_STRINGS: set[str] = {"Identity"}
#: The training domain, whose Gradient is differentiated at import (`onnx_gradient`).
TRAINING = "ai.onnx.preview.training"


#: Ops that draw random values: never folded (the values would be numpy's, not those of the
#: runtime that made the test data; even with a seed, ONNX Runtime's generator differs), so
#: refused by name -- a model whose weights are drawn so cannot be compared with anything.
RANDOM = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                    "Bernoulli", "Multinomial"})


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
        self._consts: dict[int, tuple[np.ndarray | None, ir.Value]] = {}
        #: The values of nodes that were refused (or that read one): none of their readers is
        #: translated, and none of them is refused again for it.
        self.unknown: set[str] = set()

    # ---- nodes ---------------------------------------------------------------------------

    def node(self, node, index: int) -> None:
        """Translate `node`, or add why not to the importer's refusals and mark its outputs
        unknown: the nodes after it are still read, so that one run names every problem."""
        label = f"node '{node.name}'" if node.name else f"node {index}"
        name = f"'{node.name}'" if node.name else label  # as a list of refused nodes names it
        where = f"{self.importer.name}: {label} ({node.op_type})"
        try:
            outputs = self._node(node, name, where)
        except ModelError as err:
            self.importer.refusals.refuse(str(err))
            outputs = None
        if outputs is None:
            self.unknown.update(n for n in node.output if n)
            return
        for output, tensor in zip(node.output, outputs, strict=False):
            if output:
                self.importer.values[output] = tensor

    def _node(self, node, name: str, where: str) -> list[Tensor] | None:
        """Its outputs; None once its refusal is recorded, or when an input is unknown."""
        values = self.importer.values
        for input_ in node.input:
            if input_ and input_ not in values and input_ not in self.unknown:
                raise ModelError(f"{where}: input '{input_}' is computed by no earlier node and "
                                 "is not a graph input or initializer")
        if node.op_type in RANDOM:
            raise ModelError(f"{where}: {node.op_type} draws random values, which Hexir does "
                             "not fold or compute (seeded or not, they would not be ONNX "
                             "Runtime's)")
        blocked = any(input_ in self.unknown for input_ in node.input)
        inputs = [values.get(input_) if input_ else None for input_ in node.input]
        if node.domain == TRAINING and node.op_type == "Gradient":
            from hexir_compiler.frontend import onnx_gradient

            return None if blocked else onnx_gradient.gradient(self, node, where)
        sequences = [n for n, t in zip(node.input, inputs, strict=False)
                     if isinstance(t, Sequence)]
        if sequences and node.op_type not in TAKES_SEQUENCES:
            raise ModelError(f"{where}: input '{sequences[0]}' is a sequence; "
                             f"{node.op_type} takes tensors")
        strings = [n for n, t in zip(node.input, inputs, strict=False)
                   if isinstance(t, Tensor) and t.dtype == STRING_DTYPE]
        if strings and node.op_type not in TAKES_STRINGS:
            raise ModelError(f"{where}: input '{strings[0]}' is a string tensor; Hexir "
                             f"computes strings only with {', '.join(sorted(TAKES_STRINGS))}")
        problem, schema = self._support(node)
        if node.domain in DOMAINS and not blocked and not sequences and \
                node.op_type not in TAKES_SEQUENCES and self._folds(node, inputs):
            return self._fold(node, inputs, where)
        if problem is not None:
            self.importer.refusals.unsupported(*problem, name)
            return None
        if blocked:
            return None
        with ir.Location.name(where):  # what a later pass's error about its ops names
            return self._translate(node, inputs, where, schema)

    @staticmethod
    def _folds(node, inputs: list) -> bool:
        """Whether the node is computed at import: every input known (Shape and Size need only
        the shape; ConstantOfShape may have no input)."""
        known = all(t is not None and t.const is not None for t in inputs)
        return node.op_type in SHAPE_OPS or (
            known and bool(inputs or node.op_type == "ConstantOfShape"))

    def _support(self, node):
        """(None, its schema) for a node Hexir translates, else (the kind of problem and the
        key it is listed under, as `Refusals.unsupported` takes them, None)."""
        opset = self.importer.opset
        if node.domain not in DOMAINS:
            return (("domain Hexir does not read", "domains Hexir does not read"),
                    f"'{node.domain}'", None), None
        if node.op_type in SHAPE_OPS:
            return None, None  # folded whenever its input's shape is known
        if node.op_type not in HANDLERS:
            return (("op Hexir does not import", "ops Hexir does not import"), node.op_type,
                    None), None
        try:
            schema = self.onnx.defs.get_schema(node.op_type, opset, node.domain)
        except self.onnx.defs.SchemaError:
            return ((f"op that is not an op of opset {opset}",
                     f"ops that are not ops of opset {opset}"), node.op_type, None), None
        if schema.since_version not in VERSIONS[node.op_type]:
            return ((f"op version (of opset {opset}) Hexir does not implement",
                     f"op versions (of opset {opset}) Hexir does not implement"),
                    f"{node.op_type} {schema.since_version}",
                    f"Hexir has {', '.join(map(str, VERSIONS[node.op_type]))}"), None
        return None, schema

    def _translate(self, node, inputs: list, where: str, schema) -> list[Tensor]:
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}
        self.outputs = len(node.output)  # what an output count decides (Split's parts) reads
        self.current = node  # (what a declared output shape decides reads its name)
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
            shape = sizes(inputs[0].shape)
            # ONNX clamps start and end (negative: from the back) to [0, rank], as slicing does
            return [constant(shape[attrs.get("start", 0):attrs.get("end")], np.int64)]
        if node.op_type == "Size":
            return [constant(sizes([math.prod(inputs[0].shape)]).reshape(()), np.int64)]
        if any(t is not None and t.const is not None and t.const.dtype == object
               for t in inputs):
            from hexir_compiler.frontend import onnx_symbolic

            return onnx_symbolic.fold(self, node, inputs, where)
        if node.op_type == "GatherElements" and node.domain in ("", "ai.onnx"):
            # onnx.reference's GatherElements fails once an axis has more than 64 elements
            # (np.choose's limit; its fallback is wrong), as a BERT embedding's buffered
            # token type ids of a longer context do: numpy's take_along_axis is the op
            data, indices = inputs
            try:
                axis = _axis(next((a.i for a in node.attribute if a.name == "axis"), 0),
                             len(data.shape))
                signatures.gather_elements(data.shape, indices.shape, axis)
                _indices(indices, [data.shape[axis]])
            except (NodeError, signatures.ShapeError) as err:
                raise ModelError(f"{where}: {err}") from None
            index = np.where(indices.const < 0, indices.const + data.shape[axis], indices.const)
            return [constant(np.take_along_axis(data.const, index.astype(np.int64), axis))]
        from onnx.reference import ReferenceEvaluator

        helper = self.onnx.helper
        names = [f"i{k}" if t is not None else "" for k, t in enumerate(inputs)]
        outs = [f"o{k}" for k, n in enumerate(node.output)]
        copy = helper.make_node(node.op_type, names, outs, domain=node.domain)
        copy.attribute.extend(node.attribute)
        graph = helper.make_graph(
            [copy], "fold",
            [helper.make_tensor_value_info(n, self.onnx.helper.np_dtype_to_tensor_dtype(t.dtype),
                                           t.shape)
             for n, t in zip(names, inputs, strict=False) if n],
            [helper.make_tensor_value_info(n, 0, None) for n in outs])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("",
                                                                            self.importer.opset)])
        try:
            results = ReferenceEvaluator(model).run(
                None, {n: t.const for n, t in zip(names, inputs, strict=False) if n})
        except Exception as err:  # noqa: BLE001 -- whatever the evaluator's op code raises
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
        if t.const is not None and t.const.dtype == object and key not in self._consts:
            # sizes used as data: their values at run time (`hexir.sizes`)
            values = ir.ArrayAttr.get([ir.StringAttr.get(dims.render(v))
                                       for v in t.const.reshape(-1)])
            op = ir.Operation.create("hexir.sizes", results=[_tensor_type(t.shape, t.dtype)],
                                     attributes={"values": values})
            self._consts[key] = (t.const, op.result)
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
        shape, dtype = dims_of(shape), np.dtype(dtype)
        if any(isinstance(d, int) and d < 0 for d in shape):
            raise NodeError(f"gives the negative shape {list(shape)}")
        op = ir.Operation.create(
            f"hexir.{name}", results=[_tensor_type(shape, dtype)],
            operands=[self.tensor(t) for t in inputs],
            attributes={k: _attribute(v) for k, v in attrs.items()})
        return Tensor(shape, dtype, value=op.result)

    def concat(self, parts: list[Tensor], axis: int) -> Tensor:
        """`parts` (checked: one rank and element type, equal off `axis`) joined along `axis`:
        a constant when all are, else a tree of two-operand concats whose nodes take at most
        MAX_KERNEL_INPUTS parts, each node a left chain (`hexir-fuse` makes a chain one
        kernel): each element is copied once per level, log8 of the count, where one chain
        would copy the first part once per later one. Empty parts are left out."""
        parts = [p for p in parts if p.shape[axis] != 0] or parts[:1]
        if all(p.const is not None for p in parts):
            return constant(np.concatenate([p.const for p in parts], axis=axis))
        while len(parts) > 1:
            nodes = []
            for at in range(0, len(parts), MAX_KERNEL_INPUTS):
                node = parts[at]
                for part in parts[at + 1:at + MAX_KERNEL_INPUTS]:
                    shape = list(node.shape)
                    shape[axis] = dims.add(shape[axis], part.shape[axis])
                    node = self.op("concat", [node, part], shape, node.dtype, axis=axis)
                nodes.append(node)
            parts = nodes
        return parts[0]

    # ---- helpers the handlers share ------------------------------------------------------

    def elementwise(self, name: str, *xs: Tensor, dtype=None) -> Tensor:
        try:
            shape = functools.reduce(signatures.broadcast, (x.shape for x in xs))
        except signatures.ShapeError as err:
            raise ValueError(str(err)) from None
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
        shape = dims_of(shape)
        if x.const is not None:
            return constant(x.const.reshape(shape))
        if shape == x.shape:
            return x
        return self.op("reshape", [x], shape, x.dtype)

    def expand(self, x: Tensor, shape) -> Tensor:
        shape = dims_of(shape)
        if x.shape == shape:
            return x
        if x.const is not None and symbolic.is_static(shape):
            return constant(np.broadcast_to(x.const, shape).copy())
        return self.op("expand", [x], shape, x.dtype)

    def transpose(self, x: Tensor, perm) -> Tensor:
        perm = [int(p) for p in perm]
        if x.const is not None:
            return constant(np.ascontiguousarray(np.transpose(x.const, perm)))
        return self.op("transpose", [x], [x.shape[p] for p in perm], x.dtype,
                       permutation=perm)

    def cast(self, x: Tensor, dtype) -> Tensor:
        dtype = np.dtype(dtype)
        if x.dtype == dtype:
            return x
        if x.const is not None:
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


def constant(array: np.ndarray, dtype=None) -> Tensor:
    """A constant tensor of `array`; an object array of sizes (`dims.Dim`s, for the
    integer `dtype`) becomes an ordinary integer array once no element is symbolic."""
    array = np.asarray(array)
    if array.dtype == object:
        if all(isinstance(v, int) for v in array.reshape(-1)):
            array = array.astype(dtype or np.int64)
        else:
            return Tensor(tuple(array.shape), np.dtype(dtype or np.int64), const=array)
    return Tensor(tuple(array.shape), array.dtype, const=array)


def broadcast_shapes(*shapes) -> tuple[Dim, ...]:
    """numpy's broadcast_shapes over dims that may be symbolic (a ValueError as numpy's)."""
    try:
        return functools.reduce(signatures.broadcast, (dims_of(s) for s in shapes), ())
    except signatures.ShapeError as err:
        raise ValueError(str(err)) from None


def sizes(shape) -> np.ndarray:
    """A shape as an int64 array, or an object array of its dims where one is symbolic."""
    values = list(shape)
    if all(isinstance(d, int | np.integer) for d in values):
        return np.array(values, np.int64)
    out = np.empty(len(values), object)
    out[:] = values
    return out


def static(shape, what: str) -> tuple[int, ...]:
    """`shape` when every dim is known at compile time, else a NodeError naming the first
    symbolic one: for the ops whose decomposition depends on the sizes (a split's parts, a
    tiling's index tables)."""
    for axis, d in enumerate(shape):
        if isinstance(d, Expr):
            raise NodeError(f"needs a static {what}; its dimension {axis} is "
                            f"'{dims.render(d)}' (bind the size with -input-shape)")
    return tuple(int(d) for d in shape)


def dims_of(shape) -> tuple[Dim, ...]:
    """A shape as a tuple of dims: ints (numpy's as Python's) and symbolic expressions."""
    return tuple(d if isinstance(d, Expr) else int(d) for d in shape)


def _attribute(value) -> ir.Attribute:
    if isinstance(value, ir.Attribute):
        return value
    if isinstance(value, bool):
        return ir.BoolAttr.get(value)
    if isinstance(value, int | np.integer):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))
    if isinstance(value, float):
        return ir.FloatAttr.get(ir.F64Type.get(), value)
    if isinstance(value, str):
        return ir.StringAttr.get(value)
    return ir.DenseI64ArrayAttr.get([int(v) for v in value])


def known(t: Tensor, what: str) -> np.ndarray:
    """The value of an operand that must be known at compile time."""
    if t.const is None:
        raise NodeError(f"its {what} operand must be known at compile time (an initializer, a "
                        "Constant, or an input fixed with -fix-input)")
    return np.asarray(t.const)


@overload
def const_ints(t: Tensor, what: str) -> list[int]: ...
@overload
def const_ints(t: Tensor | None, what: str) -> list[int] | None: ...
def const_ints(t: Tensor | None, what: str) -> list[int] | None:
    """The values of a shape or axes operand, which must be known at compile time."""
    if t is None:
        return None
    values = known(t, what).reshape(-1)
    symbols = sorted(symbolic.symbols(v for v in values if isinstance(v, Expr)))
    if symbols:
        raise NodeError(f"its {what} operand depends on the symbolic size "
                        f"'{symbols[0]}'; this op needs it known at compile time (bind the "
                        "size with -input-shape)")
    return [int(v) for v in values]


def const_dims(t: Tensor, what: str) -> list[Dim]:
    """The values of a shape operand, known at compile time or symbolic sizes."""
    return list(dims_of(known(t, what).reshape(-1)))


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
for _onnx, _hexir in (("GreaterOrEqual", "greater"), ("LessOrEqual", "less")):
    def _compare_or_equal(e, xs, a, v, _hexir=_hexir):
        """a > b or a == b (a NaN compares false, as ONNX's does: not `not (a < b)`)."""
        if xs[0].dtype == xs[1].dtype == np.bool_:
            raise NodeError(f"{_hexir} of bool is not supported")
        strict = e.binary(_hexir, xs[0], xs[1], dtype=np.bool_)
        return [e.binary("or", strict, e.binary("equal", xs[0], xs[1], dtype=np.bool_))]
    handles(_onnx, 12, 16)(_compare_or_equal)

_UNARY = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
          "Erf": "erf", "Neg": "neg", "Abs": "abs", "Sign": "sign", "Floor": "floor",
          "Ceil": "ceil"}
for _onnx, _hexir in _UNARY.items():
    handles(_onnx, 13, floats=_hexir not in ("neg", "abs", "sign"))(
        lambda e, xs, a, v, _hexir=_hexir: [e.elementwise(_hexir, xs[0])])
for _onnx, _versions in (("Sin", (7, 22)), ("Cos", (7, 22)), ("Tan", (7, 22)),
                         ("Asin", (7, 22)), ("Acos", (7, 22)), ("Atan", (7, 22)),
                         ("Sinh", (9, 22)), ("Cosh", (9, 22)), ("Asinh", (9, 22)),
                         ("Acosh", (9, 22)), ("Atanh", (9, 22)), ("Round", (11, 22)),
                         ("Mish", (18, 22)), ("Softplus", (1, 22))):
    _hexir = _onnx.lower()
    handles(_onnx, *_versions, floats=True)(
        lambda e, xs, a, v, _hexir=_hexir: [e.elementwise(_hexir, xs[0])])
# ONNX's And/Or/Xor/Not take bools, its Bitwise* integers: one hexir op each for both.
for _onnx, _hexir, _versions, _kind in (
        ("And", "and", (7,), "b"), ("Or", "or", (7,), "b"), ("Xor", "xor", (7,), "b"),
        ("Not", "not", (1,), "b"), ("BitwiseAnd", "and", (18,), "i"),
        ("BitwiseOr", "or", (18,), "i"), ("BitwiseXor", "xor", (18,), "i"),
        ("BitwiseNot", "not", (18,), "i")):
    def _bitwise(e, xs, a, v, _onnx=_onnx, _hexir=_hexir, _kind=_kind):
        if xs[0].dtype.kind != _kind:
            raise NodeError(f"{_onnx} of {xs[0].dtype} is not supported; Hexir computes it on "
                            f"{'bool' if _kind == 'b' else 'int32 and int64'}")
        return [e.binary(_hexir, *xs) if len(xs) == 2 else e.elementwise(_hexir, xs[0])]
    handles(_onnx, *_versions)(_bitwise)


@handles("Mod", 13, 28)
def _mod(e, xs, a, v):
    x, y = xs
    if a.get("fmod", 0):
        return [e.binary("fmod", x, y)]
    if x.dtype.kind != "f":
        return [e.binary("mod", x, y)]
    if v < 28:
        raise NodeError(f"Mod of {x.dtype} needs fmod=1 before opset 28 (ONNX defines only C's "
                        "fmod on floats there)")
    # Mod-28's floor modulo of floats, the sign of the divisor: C's fmod moved by one divisor
    # where it is nonzero and its sign differs from the divisor's -- exact, as numpy's mod,
    # and x mod +-inf is x, or the divisor when their signs differ (the spec's special case)
    r = e.binary("fmod", x, y)
    y = e.expand(y, r.shape)
    zero = e.scalar(0, x.dtype)
    moved = e.elementwise("and", e.elementwise("not", e.binary("equal", r, zero, dtype=np.bool_)),
                          e.elementwise("xor", e.binary("less", r, zero, dtype=np.bool_),
                                        e.binary("less", y, zero, dtype=np.bool_)))
    return [e.op("where", [moved, e.binary("add", r, y), r], r.shape, x.dtype)]


@handles("IsNaN", 13, 20, floats=True)
def _is_nan(e, xs, a, v):
    x = xs[0]
    return [e.elementwise("not", e.elementwise("equal", x, x, dtype=np.bool_))]


@handles("IsInf", 10, 20, floats=True)
def _is_inf(e, xs, a, v):
    x = xs[0]
    positive, negative = a.get("detect_positive", 1), a.get("detect_negative", 1)
    if positive and negative:
        x = e.elementwise("abs", x)
    elif not (positive or negative):
        return [constant(np.zeros(x.shape, np.bool_))]
    infinity = e.scalar(np.inf if positive else -np.inf, x.dtype)
    return [e.elementwise("equal", x, infinity, dtype=np.bool_)]


@handles("Softsign", 1, 22, floats=True)
def _softsign(e, xs, a, v):
    x = xs[0]  # x / (1 + |x|): no overflow short of |x| = inf
    return [e.binary("div", x, e.binary("add", e.scalar(1, x.dtype), e.elementwise("abs", x)))]


@handles("Dropout", 13, 22, floats=True)
def _dropout(e, xs, a, v):
    """Inference: the input unchanged and the optional mask all true; so is training mode with
    a ratio of 0, which drops nothing."""
    x, ratio, training = [*xs, None, None][:3]
    if training is not None and np.any(known(training, "training_mode")):
        dropped = 0.5 if ratio is None else float(known(ratio, "ratio").reshape(-1)[0])
        if dropped != 0:
            raise NodeError(f"training_mode is true (ratio {dropped:g}); Hexir compiles "
                            "inference, where Dropout passes its input through")
    return [x, constant(np.ones(x.shape, np.bool_))]


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
        if (n := _small_power(x, y)) is not None:  # x * x (* x), as ONNX Runtime's kernel
            # does: a pow is a libm call per element, which keeps its loop scalar (GPT-2's
            # GELU, x^3: 292 us of a 32-token prefill's 1024-wide layer, against 18)
            return [functools.reduce(lambda p, _: e.binary("mul", p, x), range(n - 1), x)]
        return [e.binary("pow", x, e.cast(y, x.dtype))]
    # An integer base: computed in f64 (exact while |result| < 2**53), cast back as numpy does.
    f64 = np.dtype("float64")
    return [e.cast(e.binary("pow", e.cast(x, f64), e.cast(y, f64)), x.dtype)]


def _small_power(x: Tensor, y: Tensor) -> int | None:
    """2 or 3 where the exponent is that constant everywhere and does not broadcast x."""
    if y.const is None or y.const.dtype == object or y.const.size == 0:
        return None
    first = y.const.reshape(-1)[0]
    if first not in (2, 3) or not (y.const == first).all():
        return None
    try:
        fits = broadcast_shapes(x.shape, y.shape) == dims_of(x.shape)
    except ValueError:
        return None
    return int(first) if fits else None


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


@handles("HardSwish", 14, 22, floats=True)
def _hard_swish(e, xs, a, v):
    return [e.binary("mul", xs[0], _hard_sigmoid(e, xs, {"alpha": 1 / 6}, v)[0])]


# Activations with parameters: a hexir op whose second operand is the parameter.
handles("Elu", 6, 22, floats=True)(lambda e, xs, a, v: [
    e.binary("elu", xs[0], e.scalar(a.get("alpha", 1.0), xs[0].dtype))])
handles("Selu", 6, 22, floats=True)(lambda e, xs, a, v: [e.binary(
    "mul", e.binary("elu", xs[0], e.scalar(a.get("alpha", 1.67326319217681884765625),
                                           xs[0].dtype)),
    e.scalar(a.get("gamma", 1.05070102214813232421875), xs[0].dtype))])
handles("ThresholdedRelu", 10, 22, floats=True)(lambda e, xs, a, v: [
    e.binary("thresholded_relu", xs[0], e.scalar(a.get("alpha", 1.0), xs[0].dtype))])


@handles("Shrink", 9, floats=True)
def _shrink(e, xs, a, v):
    x = xs[0]
    lambd, bias = a.get("lambd", 0.5), e.scalar(a.get("bias", 0.0), x.dtype)
    low = e.elementwise("less", x, e.scalar(-lambd, x.dtype), dtype=np.bool_)
    high = e.elementwise("greater", x, e.scalar(lambd, x.dtype), dtype=np.bool_)
    inside = e.op("where", [high, e.binary("sub", x, bias), e.expand(e.scalar(0, x.dtype),
                                                                   x.shape)], x.shape, x.dtype)
    return [e.op("where", [low, e.binary("add", x, bias), inside], x.shape, x.dtype)]


@handles("PRelu", 9, 16, floats=True)
def _prelu(e, xs, a, v):
    x, slope = xs
    if e.importer.declared_opset < 7 and slope.shape == x.shape[1:2] and len(x.shape) > 2:
        # PRelu-1 and -6 take one slope per channel (axis 1); the version converter leaves
        # the slope as it is, which broadcasting from opset 7 on would read on the last axis
        slope = e.reshape(slope, (*slope.shape, *(1,) * (len(x.shape) - 2)))
    try:
        fits = broadcast_shapes(x.shape, slope.shape) == x.shape
    except ValueError:
        fits = False
    if not fits:  # ONNX broadcasts the slope to the input, never the other way
        raise NodeError(f"slope of shape {list(slope.shape)} does not broadcast to the input's "
                        f"{list(x.shape)}")
    return [e.binary("prelu", x, slope)]


@handles("Gelu", 20, floats=True)
def _gelu(e, xs, a, v):
    x = xs[0]
    return [e.op("gelu", [x], x.shape, x.dtype, approximate=_string(a, "approximate", "none"))]


def _string(a: dict, name: str, default: str) -> str:
    value = a.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


@handles("Clip", 13)
def _clip(e, xs, a, v):
    x, low, high = [*xs, None, None][:3]
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
        shape = broadcast_shapes(cond.shape, x.shape, y.shape)
    except ValueError:
        raise NodeError("condition, x and y do not broadcast") from None
    return [e.op("where", [e.expand(cond, shape), e.expand(x, shape), e.expand(y, shape)],
                 shape, x.dtype)]


@handles("Cast", 13, 19, 21, 23, 24, 25, 28)
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
    x, scale, bias = [*xs, None][:3]
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


@handles("LRN", 13, floats=True)
def _lrn(e, xs, a, v):
    """x / (bias + alpha / size * (the sum of x^2 over `size` neighbouring channels)) ^ beta:
    the sum is an average pool (padding counted) over the channels of x^2 seen as one
    [N, 1, C, spatial] image, times `size`, which cancels alpha's 1 / size."""
    x = xs[0]
    if len(x.shape) < 3:
        raise NodeError(f"input has rank {len(x.shape)}; expected [N, C, D1, ...]")
    size = int(a["size"])
    if size < 1:
        raise NodeError(f"size {size} is not positive")
    n, c = x.shape[:2]
    image = (n, 1, c, math.prod(x.shape[2:]))
    squares = e.reshape(e.binary("mul", x, x), image)
    window = e.op("pool", [squares], image, x.dtype, kind="average", kernel=[size, 1],
                  strides=[1, 1], pads=[(size - 1) // 2, 0, size // 2, 0], dilations=[1, 1],
                  ceil_mode=False, count_include_pad=True)
    scaled = e.binary("add", e.binary("mul", e.reshape(window, x.shape),
                                      e.scalar(a.get("alpha", 1e-4), x.dtype)),
                      e.scalar(a.get("bias", 1.0), x.dtype))
    return [e.binary("div", x, e.binary("pow", scaled, e.scalar(a.get("beta", 0.75), x.dtype)))]


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

    epsilon = a.get("epsilon", 1e-5)
    stats = [t.const for t in (scale, bias, mean, var)]
    if isinstance(channels[0], int) and all(c is not None and c.dtype.kind == "f"
                                            and c.size == channels[0] for c in stats):
        # constants (a BatchNorm after a concat or a linear, not folded into a conv by the
        # exporter): x * k + shift with k = scale / sqrt(var + eps), shift = bias - mean * k,
        # as ONNX Runtime computes it; one multiply-add an element instead of a subtract, a
        # divide, a multiply and an add, and no sqrt of the constants at run time
        # (DenseNet-121's 61 pre-activation BatchNorms + ReLU and their 62 sqrt kernels, one
        # profile each: 5.5 -> 2.6-3.1 ms)
        g, b, m, v = (np.asarray(c, np.float64).reshape(-1) for c in stats)
        k = g / np.sqrt(v + epsilon)
        return [e.binary("add", e.binary("mul", x, per_channel(constant(k.astype(x.dtype)))),
                         per_channel(constant((b - m * k).astype(x.dtype))))]
    spread = e.elementwise("sqrt", e.binary("add", per_channel(var), e.scalar(epsilon, x.dtype)))
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


def _dims(shape) -> str:
    """`[batch, 6, 2 * seq]`: a shape as a diagnostic writes it."""
    return f"[{', '.join(dims.render(d) for d in shape)}]"


@handles("Reshape", 13, 14, 19, 21, 23, 24, 25)
def _reshape(e, xs, a, v):
    x, shape = xs[0], const_dims(xs[1], "shape")
    allow_zero = a.get("allowzero", 0)
    out = [x.shape[d] if s == 0 and not allow_zero else s for d, s in enumerate(shape)]
    if out.count(-1) > 1:
        raise NodeError(f"shape {shape} has more than one -1")
    if -1 in out:
        rest = dims.divide_exactly(math.prod(x.shape), math.prod(d for d in out if d != -1))
        if rest is None:
            raise NodeError(f"cannot reshape {_dims(x.shape)} to {_dims(shape)}")
        out[out.index(-1)] = rest
    if math.prod(out) != math.prod(x.shape) or any(isinstance(d, int) and d < 0 for d in out):
        fixed = " (the export fixed a size the input leaves dynamic)" if not \
            symbolic.is_static(x.shape) and symbolic.is_static(out) else ""
        raise NodeError(f"cannot reshape {_dims(x.shape)} ({dims.render(math.prod(x.shape))} "
                        f"elements) to {_dims(shape)}{fixed}")
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
    given = const_ints(xs[1] if len(xs) > 1 else None, "axes")
    rank = len(x.shape)
    if given is None:
        given = [d for d, n in enumerate(x.shape) if n == 1]
    axes = {_axis(d, rank) for d in given}
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
    x, shape = xs[0], const_dims(xs[1], "shape")
    try:
        out = signatures.broadcast(x.shape, tuple(shape))
    except signatures.ShapeError:
        raise NodeError(f"{list(x.shape)} does not broadcast with {shape}") from None
    return [e.expand(x, out)]


@handles("Concat", 13)
def _concat(e, xs, a, v):
    parts = [x for x in xs if x is not None]
    rank = len(parts[0].shape)
    axis = _axis(a["axis"], rank)
    if any(p.dtype != parts[0].dtype or len(p.shape) != rank for p in parts):
        raise NodeError("operands differ in element type or rank")
    for part in parts[1:]:
        if any(p != q for d, (p, q) in enumerate(zip(parts[0].shape, part.shape, strict=True))
               if d != axis):
            raise NodeError(f"shapes {list(parts[0].shape)} and {list(part.shape)} differ off "
                            f"axis {axis}")
    return [e.concat(parts, axis)]


@handles("Slice", 13)
def _slice(e, xs, a, v):
    x = xs[0]
    rank = len(x.shape)
    starts, ends = const_dims(xs[1], "starts"), const_dims(xs[2], "ends")
    axes = const_ints(xs[3] if len(xs) > 3 else None, "axes") or list(range(len(starts)))
    steps = const_ints(xs[4] if len(xs) > 4 else None, "steps") or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise NodeError("starts, ends, axes and steps differ in length")
    begin, stride, shape = [0] * rank, [1] * rank, list(x.shape)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=False):
        axis = _axis(axis, rank)
        if step == 0:
            raise NodeError("a step is 0")
        n = x.shape[axis]
        if isinstance(n, int) and isinstance(start, int) and isinstance(end, int):
            indices = range(n)[slice(start, end, step)]
            begin[axis], stride[axis], shape[axis] = (indices.start if len(indices) else 0,
                                                      step, len(indices))
        else:
            begin[axis], shape[axis] = _symbolic_slice(e, n, start, end, step)
    return [e.op("slice", [x], shape, x.dtype, starts=begin, steps=stride)]


def _symbolic_slice(e, n: Dim, start: Dim, end: Dim, step: int) -> tuple[int, Dim]:
    """(first index, length) of start:end on an axis of n elements where n or end is
    symbolic: negative ends count from the back, an end past any size means the whole axis,
    and the slice must lie inside the axis, 0 <= start <= end <= n -- proved for the
    symbols' ranges, or made a range of the one symbol it bounds (`seq` <= 512 for the
    first `seq` of 512 positions), which a call's sizes are then held to."""
    if step != 1:
        raise NodeError(f"a step of {step} over the symbolic extent {dims.render(n)}")
    if isinstance(start, int) and start < 0:
        start = dims.add(n, start)
    if isinstance(end, int) and end < 0:
        end = dims.add(n, end)
    elif isinstance(end, int) and end >= 1 << 31:  # INT_MAX and friends: to the end
        end = n
    if not isinstance(start, int):
        raise NodeError(f"starts at the symbolic index {dims.render(start)}")
    for low, high in ((0, start), (start, end), (end, n)):
        e.importer.require(low, high)
    return start, dims.add(end, -start)


@handles("Gather", 13)
def _gather(e, xs, a, v):
    data, indices = xs
    if indices.dtype not in (np.int32, np.int64):
        raise NodeError(f"indices are {indices.dtype}; expected int32 or int64")
    axis = _axis(a.get("axis", 0), len(data.shape))
    extent = data.shape[axis]
    if indices.const is not None and isinstance(extent, Expr):
        # a known index into a symbolic axis: the sizes are held to the index's range
        for k in {int(k) for k in indices.const.reshape(-1)}:
            e.importer.require(k + 1 if k >= 0 else -k, extent)
    elif indices.const is not None:
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
        batch = broadcast_shapes(lhs.shape[:-2], rhs.shape[:-2])
    except ValueError:
        raise NodeError(f"batch dimensions of {list(x.shape)} and {list(y.shape)} do not "
                        "broadcast") from None
    out = e.op("matmul", [lhs, rhs], (*batch, lhs.shape[-2], rhs.shape[-1]), x.dtype)
    rows = x.shape[-2:-1] if len(x.shape) > 1 else ()
    cols = y.shape[-1:] if len(y.shape) > 1 else ()
    return [e.reshape(out, (*batch, *rows, *cols))]


@handles("Gemm", 13, floats=True)
def _gemm(e, xs, a, v):
    A, B, C = [*xs, None][:3]
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
            C = constant((C.const * beta).astype(C.dtype)) if C.const is not None else \
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
    x, w, bias = [*xs, None][:3]
    if len(w.shape) != len(x.shape):
        raise NodeError(f"weight has rank {len(w.shape)}; the input has {len(x.shape)}")
    kernel = list(a.get("kernel_shape", w.shape[2:]))
    strides, pads, dilations = _window_attrs(a, x, kernel)
    if w.const is not None and kernel == list(w.shape[2:]):
        w, pads, dilations = _reached_offsets(w, x.shape[2:], strides, pads, dilations)
    shape = signatures.conv(x.shape, w.shape, a.get("group", 1), strides, pads, dilations)
    y = e.op("conv", [x, w], shape, x.dtype, strides=strides, pads=pads, dilations=dilations,
             group=int(a.get("group", 1)))
    if bias is not None:
        y = e.binary("add", y, e.reshape(bias, (w.shape[0],) + (1,) * (len(x.shape) - 2)))
    return [y]


def _reached_offsets(w: Tensor, spatial, strides: list[int], pads: list[int],
                     dilations: list[int]) -> tuple[Tensor, list[int], list[int]]:
    """A constant conv weight `w` cut to the window offsets that read the input at some
    output position, with the pads (and dilations) that keep the output's size: an offset
    that only ever lands in the zero padding adds nothing to any output. DeepLab's atrous
    convs, dilation 24 and 36 on a 14x14 map, are 1x1 convs on the centre offset; computed
    in full they were 3x3 convs of nine times the work, and their borders' masked copies
    of the loops most of the model's compile time."""
    rank = len(spatial)
    keep, pads, dilations = [slice(None)] * rank, list(pads), list(dilations)
    for d, size in enumerate(spatial):
        k, s, dil, begin = w.shape[2 + d], strides[d], dilations[d], pads[d]
        if not isinstance(size, int) or not isinstance(k, int) or k < 2:
            continue
        out = (size + begin + pads[rank + d] - dil * (k - 1) - 1) // s + 1
        reached = []
        for t in range(k):  # the first output position at or past the input's start
            first = max(0, -(-(begin - t * dil) // s))
            if first < out and first * s - begin + t * dil < size:
                reached.append(t)
        if not reached or (reached[0], reached[-1]) == (0, k - 1):
            continue
        lo, hi = reached[0], reached[-1]
        low, high = begin - lo * dil, pads[rank + d] - (k - 1 - hi) * dil
        if low < 0 or high < 0:
            continue
        keep[d], pads[d], pads[rank + d] = slice(lo, hi + 1), low, high
        if lo == hi:
            dilations[d] = 1
    if all(k == slice(None) for k in keep):
        return w, pads, dilations
    cut = np.asarray(w.const)[(slice(None), slice(None), *keep)]
    return constant(np.ascontiguousarray(cut)), pads, dilations


@handles("ConvTranspose", 11, 22, floats=True)
def _conv_transpose(e, xs, a, v):
    """A convolution of the input with zeros inserted between its elements (strides - 1 of
    them per step), padded by (kernel - 1) x dilation less the transposed pads, with the
    weight's two channel axes swapped (per group) and its kernel flipped."""
    x, w, bias = [*xs, None][:3]
    rank = len(x.shape)
    if rank < 3 or len(w.shape) != rank:
        raise NodeError(f"expected an input [N, C, spatial...] and a weight of its rank, got "
                        f"{list(x.shape)} and {list(w.shape)}")
    group = int(a.get("group", 1))
    channels, per_group = w.shape[:2]
    if group < 1 or x.shape[1] != channels or channels % group:
        raise NodeError(f"group {group}: the weight {list(w.shape)} needs {channels} input "
                        f"channels, a multiple of group; the input has {x.shape[1]}")
    kernel = list(w.shape[2:])
    if list(a.get("kernel_shape", kernel)) != kernel:
        raise NodeError(f"kernel_shape {list(a['kernel_shape'])} differs from the weight's "
                        f"{kernel}")
    spatial = rank - 2
    strides = list(a.get("strides", [1] * spatial))
    dilations = list(a.get("dilations", [1] * spatial))
    extra = list(a.get("output_padding", [0] * spatial))
    sizes = x.shape[2:]
    reach = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=False)]
    full = [s * (n - 1) + o + r for s, n, o, r in zip(strides, sizes, extra, reach, strict=False)]
    auto_pad = _string(a, "auto_pad", "NOTSET")
    starts, out = _transposed_pads(a, auto_pad, full, sizes, strides, spatial)
    # The zero-inserted input, n * s long (its last s - 1 zeros count as padding below).
    for d, step in enumerate(strides):
        if step > 1:
            x = _spread(e, x, 2 + d, step)
    lows = [r - 1 - b for r, b in zip(reach, starts, strict=False)]
    highs = [o + b - n * s for o, b, n, s in zip(out, starts, sizes, strides, strict=False)]
    kernels = e.reshape(w, (group, channels // group, per_group, *kernel))
    kernels = e.reshape(e.transpose(kernels, (0, 2, 1, *range(3, rank + 1))),
                        (group * per_group, channels // group, *kernel))
    kernels = _flip(e, kernels, range(2, rank))
    pads = [max(0, p) for p in lows + highs]
    shape = signatures.conv(x.shape, kernels.shape, group, [1] * spatial, pads, dilations)
    y = e.op("conv", [x, kernels], shape, x.dtype, strides=[1] * spatial, pads=pads,
             dilations=dilations, group=group)
    crop = [max(0, -p) for p in lows]
    if crop != [0] * spatial or list(shape[2:]) != out:
        y = e.op("slice", [y], (*shape[:2], *out), x.dtype, starts=[0, 0, *crop],
                 steps=[1] * rank)
    if bias is not None:
        y = e.binary("add", y, e.reshape(bias, (shape[1],) + (1,) * spatial))
    return [y]


def _transposed_pads(a, auto_pad: str, full, sizes, strides, spatial):
    """(the pads before each spatial axis, the output's spatial shape) of a ConvTranspose,
    as the ONNX reference computes them: explicit pads (and output_shape, where given, as the
    shape); else SAME_* auto_pad: the padding that gives output_shape (default: input x
    stride), split as auto_pad says; else none before, the output cut or extended after to
    output_shape where given."""
    given = list(a.get("output_shape", []))[-spatial:] if "output_shape" in a else None
    if "pads" in a:
        pads = list(a["pads"])
        return pads[:spatial], given or [f - b - e for f, b, e in zip(full, pads[:spatial],
                                                                      pads[spatial:], strict=False)]
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise NodeError(f"auto_pad '{auto_pad}' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID")
    if auto_pad in ("NOTSET", "VALID"):
        return [0] * spatial, given or full
    out = given or [n * s for n, s in zip(sizes, strides, strict=False)]
    totals = [f - o for f, o in zip(full, out, strict=False)]
    return [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in totals], out


def _spread(e, x: Tensor, axis: int, step: int) -> Tensor:
    """`x` with step - 1 zeros after each element along `axis` (its extent times step)."""
    shape = list(x.shape)
    column = e.reshape(x, (*shape[:axis + 1], 1, *shape[axis + 1:]))
    zeros = e.op("expand", [constant(np.zeros((1,) * (len(shape) + 1), x.dtype))],
                 (*shape[:axis + 1], step - 1, *shape[axis + 1:]), x.dtype)
    both = e.op("concat", [column, zeros], (*shape[:axis + 1], step, *shape[axis + 1:]),
                x.dtype, axis=axis + 1)
    shape[axis] *= step
    return e.reshape(both, shape)


def _flip(e, t: Tensor, axes) -> Tensor:
    """`t` reversed along `axes`."""
    axes = list(axes)
    if t.const is not None:
        return constant(np.ascontiguousarray(np.flip(t.const, axes)))
    return e.op("slice", [t], t.shape, t.dtype,
                starts=[n - 1 if d in axes else 0 for d, n in enumerate(t.shape)],
                steps=[-1 if d in axes else 1 for d in range(len(t.shape))])


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


# ---- indexing by data, scans, selection --------------------------------------------------

def _indices(indices: Tensor, extents) -> None:
    """Indices must be int32/int64; known ones must lie in their axes (`extents`: one per
    coordinate of an index tuple, the last axis of `indices`, or one for every index). Unknown
    ones are wrapped and clamped by the kernel."""
    if indices.dtype not in (np.int32, np.int64):
        raise NodeError(f"indices are {indices.dtype}; expected int32 or int64")
    if indices.const is None or not indices.const.size:
        return
    values = indices.const.reshape(-1, len(extents))
    for d, extent in enumerate(extents):
        bad = values[:, d][(values[:, d] < -extent) | (values[:, d] >= extent)]
        if bad.size:
            raise NodeError(f"index {int(bad[0])} is out of range for an axis of extent {extent}")


def _numbers(x: Tensor, op: str) -> None:
    if x.dtype == np.bool_:
        raise NodeError(f"{op} of bool is not supported; Hexir computes it on numbers")


def _arg(hexir: str, op: str):
    def handler(e, xs, a, v):
        x = xs[0]
        _numbers(x, op)
        if not x.shape:
            raise NodeError(f"{op} of a scalar")
        axis = _axis(a.get("axis", 0), len(x.shape))
        if x.shape[axis] == 0:
            raise NodeError(f"axis {axis} of {list(x.shape)} is empty: it has no extreme")
        keepdims = bool(a.get("keepdims", 1))
        shape = [1 if d == axis else n for d, n in enumerate(x.shape) if keepdims or d != axis]
        return [e.op(hexir, [x], shape, np.int64, axis=axis, keepdims=keepdims,
                     select_last_index=bool(a.get("select_last_index", 0)))]
    return handler


handles("ArgMax", 13)(_arg("arg_max", "ArgMax"))
handles("ArgMin", 13)(_arg("arg_min", "ArgMin"))


@handles("CumSum", 11, 14)
def _cumsum(e, xs, a, v):
    x = xs[0]
    _numbers(x, "CumSum")
    axis = const_ints(xs[1], "axis")
    if len(axis) != 1 or not x.shape:
        raise NodeError(f"expected one axis of a tensor of rank 1 or more, got axis {axis} of "
                        f"{list(x.shape)}")
    return [e.op("cumsum", [x], x.shape, x.dtype, axis=_axis(axis[0], len(x.shape)),
                 exclusive=bool(a.get("exclusive", 0)), reverse=bool(a.get("reverse", 0)))]


@handles("TopK", 11, 24)
def _top_k(e, xs, a, v):
    x = xs[0]
    _numbers(x, "TopK")
    k = const_ints(xs[1], "K")
    if len(k) != 1 or not x.shape:
        raise NodeError(f"expected one K and a tensor of rank 1 or more, got K {k} of "
                        f"{list(x.shape)}")
    axis = _axis(a.get("axis", -1), len(x.shape))
    shape = signatures.top_k(x.shape, k[0], axis)
    indices = e.op("top_k", [x], shape, np.int64, k=k[0], axis=axis,
                   largest=bool(a.get("largest", 1)))
    # sorted=0 leaves the order open: the sorted one is one of them
    return [e.op("gather_elements", [x, indices], shape, x.dtype, axis=axis), indices]


@handles("GatherElements", 13)
def _gather_elements(e, xs, a, v):
    data, indices = xs
    axis = _axis(a.get("axis", 0), len(data.shape))
    shape = signatures.gather_elements(data.shape, indices.shape, axis)
    _indices(indices, [data.shape[axis]])
    return [e.op("gather_elements", [data, indices], shape, data.dtype, axis=axis)]


def _scatter_reduction(a, data: Tensor) -> str:
    reduction = _string(a, "reduction", "none")
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise NodeError(f"reduction '{reduction}' is not none, add, mul, max or min")
    if reduction != "none" and data.dtype == np.bool_:
        raise NodeError(f"reduction '{reduction}' of bool is not supported")
    return reduction


@handles("ScatterElements", 13, 16, 18)
def _scatter_elements(e, xs, a, v):
    data, indices, updates = xs
    if updates.dtype != data.dtype:
        raise NodeError(f"updates are {updates.dtype} but data are {data.dtype}")
    axis = _axis(a.get("axis", 0), len(data.shape))
    shape = signatures.scatter_elements(data.shape, indices.shape, updates.shape, axis)
    _indices(indices, [data.shape[axis]])
    return [e.op("scatter_elements", [data, indices, updates], shape, data.dtype, axis=axis,
                 reduction=_scatter_reduction(a, data))]


@handles("ScatterND", 13, 16, 18)
def _scatter_nd(e, xs, a, v):
    data, indices, updates = xs
    if updates.dtype != data.dtype:
        raise NodeError(f"updates are {updates.dtype} but data are {data.dtype}")
    shape = signatures.scatter_nd(data.shape, indices.shape, updates.shape)
    _indices(indices, data.shape[:indices.shape[-1]])
    return [e.op("scatter_nd", [data, indices, updates], shape, data.dtype,
                 reduction=_scatter_reduction(a, data))]


# ---- ops in their own modules, each registering itself here -------------------------------
# The ops composed of the above, the recurrent layers (RNN, GRU, LSTM) and the sequence ops.
# Imported last, as they import this module's registry: importing it registers them wherever
# the handlers are read.
from hexir_compiler.frontend import (  # noqa: E402, F401
    onnx_ops_composite,
    onnx_rnn,
    onnx_sequence,
    onnx_strings,
)
