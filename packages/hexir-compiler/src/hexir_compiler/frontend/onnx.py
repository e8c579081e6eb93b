"""The ONNX frontend: a model file (or an `onnx.ModelProto`) -> a `hexir` graph module.

What it accepts: IR versions 3-14, the default domain at opsets 1-28 (the newest the onnx
1.23 package defines), symbolic dimensions (named symbols of the graph's tensor types,
`symbolic`, which kernels need bound with `input_shapes`, the `-input-shape` flag), element
types f32, f64, i32, i64 and bool. A model at opset 1-12 is
first upgraded to opset 13 by `onnx.version_converter` (ONNX's own adapters between op
versions), so the handlers need know only the op versions of opsets 13-28; an upgrade that
fails is refused naming the node it failed on. Each node is translated by its handler in
`onnx_ops` for the op version the model's opset selects; a version no handler knows is
refused by name. A graph input that has an initializer (IR 3, where every initializer is also
listed as an input) is that constant, as in ONNX Runtime.

Values are either runtime tensors (MLIR values) or compile-time constants (numpy arrays):
initializers, Constant nodes, inputs fixed with `fixed_inputs` (`-fix-input`), and anything
computed only from those. A node whose inputs are all constants is folded at import by the
ONNX reference implementation, so shape arithmetic (Shape, Size, ConstantOfShape,
Gather/Concat/Slice of shapes, Cast of constants) never reaches a kernel. A constant that a
runtime op uses becomes a `hexir.constant` made straight from the array's buffer.

Besides tensors, a value may be an ONNX sequence (`Sequence`) inside the graph, never at its
inputs or outputs: its length is always known at import, and it is a list of its elements
while every position used on it is a constant, one stacked tensor once a runtime position is
(`onnx_sequence`). The training domain's Gradient is differentiated at import by reverse
mode, its gradients ordinary values of the graph (`onnx_gradient`).

Every refusal is a `ModelError`, one line naming the node or tensor. A refused node does not
stop the import: the nodes after it are read too (those that need its outputs are skipped),
and the error lists every refusal, unsupported ops grouped (`Refusals`).
"""

from __future__ import annotations

import mmap
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from hexir_compiler import symbolic
from hexir_compiler.element_types import STRING
from hexir_compiler.errors import CompileError
from hexir_compiler.frontend import onnx_external, onnx_generate
from hexir_compiler.mlir import ir
from hexir_format import dims, printable
from hexir_format.dims import Dim, Expr

IR_VERSIONS = range(3, 15)
OPSETS = range(1, 29)
#: The opset the handlers start at; an older model is upgraded to it first.
UPGRADE_TO = 13
DOMAINS = ("", "ai.onnx")

#: ONNX TensorProto element type -> numpy dtype, for the types Hexir has.
DTYPES: dict[int, np.dtype] = {1: np.dtype("float32"), 11: np.dtype("float64"),
                               6: np.dtype("int32"), 7: np.dtype("int64"), 9: np.dtype("bool")}
MLIR = {np.dtype("float32"): "f32", np.dtype("float64"): "f64", np.dtype("int32"): "i32",
        np.dtype("int64"): "i64", np.dtype("bool"): "i1", np.dtype(str): STRING}
#: ONNX's STRING: a string tensor's dtype here. Not in DTYPES: a string is never a constant
#: (an initializer, a Constant, a cast's target); it is a graph input or output, or a value
#: `onnx_ops.STRING_OPS` compute (the runtime's library kernels).
ONNX_STRING, STRING_DTYPE = 8, np.dtype(str)


#: An initializer of at least this many bytes lives in its MLIR attribute from the start
#: (`Importer._initializer`); smaller ones (shapes, axes) stay numpy arrays.
_IN_PLACE = 1 << 16


class ModelError(CompileError):
    """A model Hexir cannot import; the message names the node or tensor. One that refuses
    the model for several reasons has `lines`, one per reason (its message joins them)."""

    lines: tuple[str, ...] = ()


class Refusals:
    """Every reason the import refuses a model, gathered over the whole graph so that one run
    names them all: a kind of unsupported node (an op Hexir does not import, an op version it
    does not implement, a domain it does not read) is one line that lists each op and the
    nodes that use it; any other refusal is a line of its own."""

    MAX_NODES = 3  # the nodes named for one op; the rest are counted

    def __init__(self, name: str) -> None:
        self.name = name
        # (singular, plural) -> {key: (note, node names)}, or a whole line -> None, in the
        # order first met
        self._entries: dict = {}

    def unsupported(self, nouns: tuple[str, str], key: str, note: str | None, node: str) -> None:
        self._entries.setdefault(nouns, {}).setdefault(key, (note, []))[1].append(node)

    def refuse(self, line: str) -> None:
        self._entries.setdefault(line, None)

    def check(self) -> None:
        """Raise the one `ModelError` that holds every refusal, if any."""
        lines = [printable(self._line(e, g)) for e, g in self._entries.items()]
        if lines:
            err = ModelError("; ".join(lines))
            err.lines = tuple(lines) if len(lines) > 1 else ()
            raise err

    def _line(self, entry, groups: dict | None) -> str:
        if groups is None:
            return entry
        singular, plural = entry
        listed = []
        for key, (note, nodes) in groups.items():
            named = ", ".join(nodes[:self.MAX_NODES]) + (", ..." if len(nodes) > self.MAX_NODES
                                                         else "")
            count = f"{len(nodes)} node{'s' if len(nodes) > 1 else ''}: {named}"
            listed.append(f"{key} ({f'{note}; ' if note else ''}{count})")
        return (f"{self.name}: {len(groups)} {singular if len(groups) == 1 else plural}: "
                f"{', '.join(listed)}")


@dataclass
class Tensor:
    """A value of the graph: a runtime MLIR value, or a constant known at compile time."""

    shape: tuple[Dim, ...]  # an int, or a symbolic expression (`batch`, `past + seq`)
    dtype: np.dtype
    value: ir.Value | None = None
    #: a constant's values (`is not None`: it is one); an object array of `Dim`s where an
    #: integer constant holds symbolic sizes (the Shape of a dynamic tensor, and what shape
    #: arithmetic makes of it)
    const: np.ndarray | None = None


@dataclass
class Sequence:
    """An ONNX sequence value (`seq(tensor)`), which lives only between the ops that read and
    write sequences (`onnx_sequence`): its length is always known at import. It is held as its
    elements while every position used on it is a constant, and as one stacked tensor
    [length, *element] once a runtime position was (see `onnx_sequence` for the view that
    converts one form into the other)."""

    dtype: np.dtype
    items: list[Tensor] | None = None
    stacked: Tensor | None = None

    @property
    def length(self) -> int:
        if self.items is not None:
            return len(self.items)
        length = self.stacked.shape[0] if self.stacked is not None else 0
        assert isinstance(length, int), "a sequence's length is known at import"
        return length


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ModelError("reading ONNX models needs the onnx package: "
                         "pip install 'hexir-compiler[onnx]'") from None
    return onnx


def load_model(source):
    """An `onnx.ModelProto` from a path or a model. A file's big initializers are parsed as
    external-data references to their bytes in it, and a model saved with external data keeps
    its initializers' references: `Importer._initializer` reads each when it makes its
    constant, so the protobuf never holds the weights next to their attributes
    (`onnx_external`). The other tensors' external data (a Constant's, a subgraph's) is loaded
    here, next to the model, as ONNX's loader does."""
    onnx = _onnx()
    if isinstance(source, onnx.ModelProto):
        return source
    path = Path(source)
    try:
        with path.open("rb") as file:
            status = os.fstat(file.fileno())
            if status.st_size and stat.S_ISREG(status.st_mode):
                with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as whole:
                    data = onnx_external.without_weights(whole, path.name, _IN_PLACE)
            else:  # empty, or a pipe: nothing to leave on disk
                data = file.read()
    except OSError as err:
        raise ModelError(f"{path}: cannot read the model: {err.strerror}") from None
    except onnx_external.Refused as err:
        raise ModelError(f"{path}: not an ONNX model (the protobuf does not parse: {err})") \
            from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as err:  # noqa: BLE001 -- protobuf's DecodeError has no stable import path
        raise ModelError(f"{path}: not an ONNX model (the protobuf does not parse: "
                         f"{str(err) or type(err).__name__})") from None
    if not model.graph.node and not model.graph.output:
        raise ModelError(f"{path}: not an ONNX model (it has no graph)")
    try:
        from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

        for tensor in onnx_external.nested_tensors(model):
            if uses_external_data(tensor):
                load_external_data_for_tensor(tensor, str(path.parent))
    except Exception as err:  # noqa: BLE001 -- OSError, or the checker's on external data
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ModelError(f"{path}: cannot read external data: {first}") from None
    return model


def import_model(source, input_shapes: Mapping[str, tuple[int | str, ...]] | None = None,
                 fixed_inputs: Mapping[str, object] | None = None,
                 generate: onnx_generate.Spec | None = None) -> ir.Module:
    """The hexir graph of the model at `source`, built in the current MLIR context; with
    `generate`, a decoder-with-past step whose decode loop the module records
    (`onnx_generate`)."""
    model = load_model(source)
    file = None if hasattr(source, "graph") else Path(source)
    name = os.fspath(source) if file is not None else "<model>"
    shapes = dict(input_shapes or {})
    wrapped = None
    if generate is not None:
        wrapped = onnx_generate.plan(model, generate, name, shapes)
        shapes = {**wrapped.input_shapes, **shapes}
    module = Importer(model, name, shapes, dict(fixed_inputs or {}), file).run()
    if wrapped is not None:
        module.operation.attributes[onnx_generate.ATTRIBUTE] = wrapped.attribute()
    return module


class Importer:
    def __init__(self, model, name: str, shapes: dict, fixed: dict,
                 file: Path | None) -> None:
        self.onnx = _onnx()
        self.model, self.name = model, name
        #: the model's file, where its initializers' external data is found (`_initializer`)
        self.file = file
        self.shapes, self.fixed = shapes, fixed
        #: each symbol's inclusive range, where the model bounds it (`require`)
        self.ranges: dict[str, tuple[int, int]] = {}
        #: symbols -input-shape gives a size (at any input): that size everywhere
        self.bound: dict[str, int] = {}
        self.values: dict[str, Tensor | Sequence] = {}
        self.refusals = Refusals(name)
        #: the shapes the model declares (graph outputs, value_info), where it does
        self.declared = {vi.name: vi.type.tensor_type.shape
                         for vi in (*model.graph.output, *model.graph.value_info)
                         if vi.type.HasField("tensor_type")
                         and vi.type.tensor_type.HasField("shape")}

    # ---- checks of the model as a whole -------------------------------------------------

    def _check_versions(self) -> int:
        m = self.model
        if m.ir_version not in IR_VERSIONS:
            raise ModelError(f"{self.name}: IR version {m.ir_version} is outside the "
                             f"{IR_VERSIONS[0]}-{IR_VERSIONS[-1]} Hexir reads")
        opset = next((e.version for e in reversed(m.opset_import) if e.domain in DOMAINS), None)
        if opset is None:
            raise ModelError(f"{self.name}: the model imports no default-domain opset")
        if opset not in OPSETS:
            raise ModelError(f"{self.name}: opset {opset} is outside the {OPSETS[0]}-"
                             f"{OPSETS[-1]} Hexir reads")
        self.declared_opset = opset  # what a handler reads for a meaning the upgrade misses
        if opset < UPGRADE_TO:
            self.model = self._upgrade(opset)
            return UPGRADE_TO
        return opset

    def _upgrade(self, opset: int):
        """The model converted from `opset` to `UPGRADE_TO` by ONNX's version converter; its
        failure names the first node that fails to convert on its own."""
        from onnx import version_converter

        try:
            return version_converter.convert_version(self.model, UPGRADE_TO)
        except Exception as err:  # noqa: BLE001 -- RuntimeError with a C++ assertion's text
            whole = _converter_reason(err)
        types = self._types()
        for index, node in enumerate(self.model.graph.node):
            label = f"node '{node.name}' ({node.op_type})" if node.name else \
                f"node {index} ({node.op_type})"
            where = f"{self.name}: {label}: cannot upgrade it from opset {opset} to {UPGRADE_TO}"
            if node.domain not in DOMAINS:
                continue  # the converter leaves other domains alone; the emitter refuses them
            try:
                self.onnx.defs.get_schema(node.op_type, opset, node.domain)
            except self.onnx.defs.SchemaError:
                raise ModelError(f"{where}: {node.op_type} is not an op of opset {opset}") \
                    from None
            try:
                version_converter.convert_version(self._alone(node, opset, types), UPGRADE_TO)
            except Exception as err:  # noqa: BLE001 -- as above
                raise ModelError(f"{where}: {_converter_reason(err)}") from None
        raise ModelError(f"{self.name}: cannot upgrade the model from opset {opset} to "
                         f"{UPGRADE_TO}: {whole}")

    def _types(self) -> dict:
        """Each tensor's type as shape inference gives it (empty where inference fails)."""
        try:
            graph = self.onnx.shape_inference.infer_shapes(self.model).graph
        except Exception:  # noqa: BLE001 -- inference's own; then guess float
            return {}
        types = {v.name: v.type for v in (*graph.input, *graph.value_info, *graph.output)}
        types.update({t.name: self.onnx.helper.make_tensor_type_proto(t.data_type, t.dims)
                      for t in graph.initializer})
        return types

    def _alone(self, node, opset: int, types: dict):
        """A model of `node` alone, its inputs typed as `types` says (float where it does not
        know), for finding the node an upgrade fails on."""
        helper = self.onnx.helper
        inputs = []
        for name in dict.fromkeys(n for n in node.input if n):
            vi = helper.make_tensor_value_info(name, self.onnx.TensorProto.FLOAT, None)
            if name in types:
                vi.type.CopyFrom(types[name])
            inputs.append(vi)
        outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
        graph = helper.make_graph([node], "alone", inputs, outputs)
        return helper.make_model(graph, ir_version=self.model.ir_version,
                                 opset_imports=[helper.make_opsetid("", opset)])

    # ---- building ------------------------------------------------------------------------

    def run(self) -> ir.Module:
        from hexir_compiler.frontend import onnx_ops

        self.opset = self._check_versions()
        graph = self.model.graph
        initializers = {t.name for t in graph.initializer}
        inputs = [i.name for i in graph.input if i.name not in initializers]
        for flag, given in (("-fix-input", self.fixed), ("-input-shape", self.shapes)):
            for name in given:
                if name not in inputs:
                    raise ModelError(f"{self.name}: {flag} names '{name}', which is not an "
                                     f"input of the graph (its inputs: "
                                     f"{', '.join(inputs) or 'none'})")
        self._bind_given_sizes(graph)
        with ir.Location.name(self.name):
            module = ir.Module.create()
            for init in graph.initializer:
                self.values[init.name] = self._initializer(init)
            arguments = [vi for vi in graph.input if vi.name not in initializers]
            types, names = [], []
            for vi in arguments:
                if vi.name in self.fixed:
                    self.values[vi.name] = self._fixed(vi)
                    continue
                shape, dtype = self._input_type(vi)
                types.append(_tensor_type(shape, dtype))
                names.append(vi.name)
                self.values[vi.name] = Tensor(shape, dtype)
            emitter = onnx_ops.Emitter(self)
            # its function_type is set below, once the results are known
            func = ir.Operation.create("func.func", regions=1, ip=ir.InsertionPoint(module.body),
                                       attributes={"sym_name": ir.StringAttr.get("main"),
                                                   "arg_attrs": _named(names)})
            block = func.regions[0].blocks.append(*types)
            for arg, name in zip(block.arguments, names, strict=False):
                value = self.values[name]
                assert isinstance(value, Tensor)
                value.value = arg
            with ir.InsertionPoint(block):
                for index, node in enumerate(graph.node):
                    emitter.node(node, index)
                for vi in graph.output:
                    if vi.name not in self.values and vi.name not in emitter.unknown:
                        self.refusals.refuse(f"{self.name}: graph output '{vi.name}' is "
                                             "computed by no node")
                for vi in graph.output:
                    if isinstance(self.values.get(vi.name), Sequence):
                        self.refusals.refuse(f"{self.name}: graph output '{vi.name}' is a "
                                             "sequence; Hexir's graphs return tensors (a "
                                             "sequence may live inside the graph)")
                self.refusals.check()
                results = [emitter.tensor(cast(Tensor, self.values[vi.name]))
                           for vi in graph.output]
                ir.Operation.create("func.return", operands=results)
            func.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get(types, [r.type for r in results]))
            func.attributes["res_attrs"] = _named(vi.name for vi in graph.output)
            if self.ranges:  # what the model holds its symbols to (`require`)
                func.attributes["hexir.ranges"] = ir.DictAttr.get({
                    name: ir.DenseI64ArrayAttr.get(list(bounds))
                    for name, bounds in sorted(self.ranges.items())})
            _drop_dead(block)
        return module

    def _dtype(self, elem_type: int, what: str, strings: bool = False) -> np.dtype:
        """The dtype of `what`'s element type; STRING only where `strings` (a graph input)."""
        if strings and elem_type == ONNX_STRING:
            return STRING_DTYPE
        if elem_type not in DTYPES:
            name = self.onnx.TensorProto.DataType.Name(elem_type) if elem_type in \
                self.onnx.TensorProto.DataType.values() else str(elem_type)
            also = " (and STRING, as a graph input)" if elem_type == ONNX_STRING else ""
            raise ModelError(f"{self.name}: {what} has element type {name}; Hexir has "
                             f"FLOAT, DOUBLE, INT32, INT64 and BOOL{also}")
        return DTYPES[elem_type]

    def _initializer(self, init) -> Tensor:
        what = f"initializer '{init.name}'"
        dtype = self._dtype(init.data_type, what)
        if init.data_location == self.onnx.TensorProto.EXTERNAL:
            try:
                array = onnx_external.read(init, dtype, self.file)
            except onnx_external.Refused as err:
                raise ModelError(f"{self.name}: {what} (shape {list(init.dims)}): {err}") \
                    from None
        else:
            try:
                array = self.onnx.numpy_helper.to_array(init)
            except Exception as err:  # noqa: BLE001 -- a short buffer
                raise ModelError(f"{self.name}: {what} (shape {list(init.dims)}): its data "
                                 f"does not hold its shape: {str(err).splitlines()[0]}") \
                    from None
        if array.shape != tuple(init.dims) or array.dtype != dtype:
            raise ModelError(f"{self.name}: {what}: data of shape {list(array.shape)}, "
                             f"declared {list(init.dims)}")
        if array.nbytes >= _IN_PLACE and dtype != np.bool_:
            # The weight's one lasting copy is the attribute its constant will hold (MLIR
            # makes it once: the constant's later `get` finds it); the values read at
            # import are a view of it, and the array read from the file is dropped, so
            # the weights are held once (`load_model` left them out of the protobuf).
            attr = ir.DenseElementsAttr.get(np.require(array, requirements="C"),
                                            type=_tensor_type(array.shape, dtype))
            array = np.asarray(attr).reshape(array.shape)
        return Tensor(tuple(array.shape), dtype, const=array)

    def _fixed(self, vi) -> Tensor:
        """An input fixed at compile time: its values, which must fit its type and shape."""
        where = f"{self.name}: -fix-input '{vi.name}'"
        dtype = self._dtype(vi.type.tensor_type.elem_type, f"input '{vi.name}'")
        given = np.asarray(self.fixed[vi.name])
        try:
            array = given.astype(dtype)
        except (TypeError, ValueError):
            array = None
        if array is None or not np.array_equal(array, given, equal_nan=dtype.kind == "f"):
            raise ModelError(f"{where} has {given.dtype} values {given.reshape(-1)[:4].tolist()}"
                             f"...; they do not fit the input's {dtype}")
        dims = vi.type.tensor_type.shape.dim
        declared = [d.dim_value if d.HasField("dim_value") else None for d in dims]
        if vi.type.tensor_type.HasField("shape") and (
                len(declared) != array.ndim
                or any(d is not None and d != n
                       for d, n in zip(declared, array.shape, strict=False))):
            raise ModelError(f"{where} has shape {list(array.shape)}; the input is declared "
                             f"{[d if d is not None else '?' for d in declared]}")
        return Tensor(tuple(array.shape), dtype, const=array)

    def _input_type(self, vi) -> tuple[tuple[Dim, ...], np.dtype]:
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise ModelError(f"{self.name}: input '{vi.name}' is not a tensor")
        dtype = self._dtype(t.elem_type, f"input '{vi.name}'", strings=True)
        if vi.name in self.shapes:
            given = tuple(self.shapes[vi.name])
            if t.HasField("shape") and len(t.shape.dim) != len(given):
                raise ModelError(f"{self.name}: -input-shape gives input '{vi.name}' rank "
                                 f"{len(given)}; the model says rank {len(t.shape.dim)}")
            dims_ = list(t.shape.dim) if t.HasField("shape") else [None] * len(given)
            return tuple(self._given(vi.name, d, dim, value)
                         for d, (dim, value) in enumerate(zip(dims_, given, strict=True))), dtype
        if not t.HasField("shape"):
            raise ModelError(f"{self.name}: input '{vi.name}' has no shape; give it with "
                             f"-input-shape={vi.name}=<d0>x<d1>...")
        return tuple(self._dim(vi.name, d, dim) for d, dim in enumerate(t.shape.dim)), dtype

    def _given(self, name: str, axis: int, dim, value: int | str) -> Dim:
        """Input `name`'s dimension `axis` as -input-shape gives it: a size; or symbolic --
        a symbol's name, a range `lo..hi` of the model's own symbol there, or both
        (`batch:1..64`), the range then held on the symbol (`ranges`)."""
        where = f"{self.name}: -input-shape gives input '{name}' dimension {axis}"
        fixed = dim.dim_value if dim is not None and dim.HasField("dim_value") else None
        if isinstance(value, int):
            if fixed is not None and fixed != value:
                raise ModelError(f"{where} = {value}; the model fixes it at {fixed}")
            return int(value)
        try:
            symbol, span = symbolic.given_dimension(value)
        except dims.DimError as err:
            raise ModelError(f"{where}: {err}") from None
        if fixed is not None:
            raise ModelError(f"{where} = '{value}'; the model fixes it at {fixed}")
        if not symbol:
            own = self._dim(name, axis, dim) if dim is not None else None
            if isinstance(own, int):
                raise ModelError(f"{where} = '{value}', but -input-shape sizes the symbol "
                                 f"there {own} at another input")
            if not isinstance(own, Expr) or len(own.symbols()) != 1 or \
                    own != Expr.symbol(next(iter(own.symbols()))):
                raise ModelError(f"{where} = '{value}', a range, but the model names no "
                                 f"symbol there to hold to it; write <symbol>:{value}")
            symbol = next(iter(own.symbols()))
        if span:
            low, high = span
            lo, hi = self.ranges.get(symbol, (0, dims.INT64_MAX))
            if max(lo, low) > min(hi, high):
                raise ModelError(f"{where} = '{value}'; '{symbol}' is already held to "
                                 f"{lo}..{hi}")
            self.ranges[symbol] = (max(lo, low), min(hi, high))
        return Expr.symbol(symbol)

    def require(self, low: Dim, high: Dim) -> None:
        """Hold the sizes to low <= high: nothing to do where the symbols' ranges prove it; a
        bound on the one symbol it constrains (`seq <= 512`) where it is a symbol against a
        constant; a NodeError where it fails for every size or cannot be kept as a range."""
        from hexir_compiler.frontend.onnx_ops import NodeError

        try:
            if dims.less_equal(low, high, self.ranges):
                return
            raise NodeError(f"needs {dims.render(low)} <= {dims.render(high)}, which no size "
                            "gives")
        except dims.DimError:
            pass
        for symbol, bound, upper in ((high, low, False), (low, high, True)):
            if isinstance(symbol, dims.Expr) and isinstance(bound, int) and \
                    symbol == dims.Expr.symbol(next(iter(symbol.symbols()))):
                name = next(iter(symbol.symbols()))
                # (a dimension is at least 1 unless -input-shape says 0 may be)
                lo, hi = self.ranges.get(name, (1, dims.INT64_MAX))
                self.ranges[name] = (lo, min(hi, bound)) if upper else (max(lo, bound), hi)
                return
        raise NodeError(f"needs {dims.render(low)} <= {dims.render(high)}, which depends on "
                        "the sizes")

    def _dim(self, name: str, axis: int, dim) -> Dim:
        """An input's dimension: its value, or the symbol its `dim_param` names (an
        expression such as `past_sequence_length + 1` is read as one); one with neither is
        a symbol of its own, `<input>_<axis>`. A symbol -input-shape sized at any input is
        that size at every one (`_bind_given_sizes`)."""
        d = _declared(name, axis, dim)
        if isinstance(d, Expr) and d.symbols() <= self.bound.keys():
            return dims.evaluate(d, self.bound)
        return d

    def _bind_given_sizes(self, graph) -> None:
        """The symbols -input-shape gives a size, wherever the model names them: binding
        `seq` at `input_ids` binds it at `attention_mask` too (`bound`); two sizes for one
        symbol are refused naming both."""
        source: dict[str, str] = {}
        for vi in graph.input:
            given = self.shapes.get(vi.name)
            if given is None or not vi.type.tensor_type.HasField("shape"):
                continue
            for axis, (dim, value) in enumerate(zip(vi.type.tensor_type.shape.dim, given,
                                                    strict=False)):
                if not isinstance(value, int) or dim.HasField("dim_value"):
                    continue
                symbol = _declared(vi.name, axis, dim)
                if not isinstance(symbol, Expr) or len(symbol.symbols()) != 1 or \
                        symbol != Expr.symbol(next(iter(symbol.symbols()))):
                    continue
                (name,) = symbol.symbols()
                if name in self.bound and self.bound[name] != value:
                    raise ModelError(f"{self.name}: -input-shape gives '{name}' = "
                                     f"{self.bound[name]} at {source[name]} but {value} at "
                                     f"input '{vi.name}' dimension {axis}")
                self.bound[name], source[name] = value, f"input '{vi.name}' dimension {axis}"


def _declared(name: str, axis: int, dim) -> Dim:
    """Input `name`'s dimension `axis` as the model declares it (`Importer._dim`)."""
    if dim.HasField("dim_value") and dim.dim_value >= 0:
        return int(dim.dim_value)
    if dim.dim_param:
        try:
            return dims.parse(dim.dim_param)
        except dims.DimError:
            return dims.Expr.symbol(_identifier(dim.dim_param))
    return dims.Expr.symbol(_identifier(f"{name}_{axis}"))


def _converter_reason(err: Exception) -> str:
    """The version converter's message without its C++ file and assertion prefix."""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text.split(" failed: ", 1)[-1]


def _drop_dead(block: ir.Block) -> None:
    """Erase the ops whose results nothing uses (a decomposition's unused outputs, constants
    only a folded node read), last first so each erasure can free its operands' producers."""
    for view in reversed(list(block.operations)):
        op = view.operation
        if op.name.startswith("hexir.") and op.results and not any(
                list(r.uses) for r in op.results):
            op.erase()


def _named(names) -> ir.ArrayAttr:
    """A function's `arg_attrs` or `res_attrs`: each argument or result's `hexir.name`."""
    return ir.ArrayAttr.get([ir.DictAttr.get({"hexir.name": ir.StringAttr.get(n)}) for n in names])


def _tensor_type(shape: tuple[Dim, ...], dtype: np.dtype) -> ir.Type:
    return symbolic.tensor_type(shape, ir.Type.parse(MLIR[np.dtype(dtype)]))


def _identifier(text: str) -> str:
    """`text` as a symbol name: every character that cannot be in a Python identifier is
    `_`, and a leading digit gets a `_` before it."""
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in text) or "_"
    return f"_{name}" if name[0].isdigit() else name
