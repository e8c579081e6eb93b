"""The graph dialect `hexir`: neural-network ops on f32/f64 tensors, in MLIR generic form.

Defined with the bindings' IRDL-based `ext` API, so ops print and parse only in the generic
form (`"hexir.linear"(%a, %w) : (...) -> ...`). IRDL checks only that declared attributes are
present; every type and shape rule is a `check` method here, so a bad program gets one
located message that says what was expected and what was found. Optional attributes
(`approximate`) and the placement attribute `device` are discardable, checked when present.
"""

import types
from collections.abc import Sequence
from typing import Any

from hexir_format import signatures

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
from hexir_compiler.mlir import ext, ir
from hexir_compiler.transforms.tir import elementwise


class Hexir(ext.Dialect, name="hexir"):
    pass


class HexirOp(Hexir.Operation):
    """Base of every hexir op (no name: not an op itself)."""

    def check(self) -> None:
        """Raise `Invalid` (or `ShapeError`) when the op breaks a rule; see `_verify`."""

    def verify_invariants(self) -> bool:
        return verify(self)


def _result(op) -> tuple[tuple[int, ...], str]:
    return tensor(op.results[0], "result")


class ConstantOp(HexirOp, name="constant"):
    """A literal tensor; `value` is dense f32/f64 elements (a splat is allowed)."""

    value: Any
    result: ext.Result[Any]

    def check(self) -> None:
        _result(self)
        value = self.operation.attributes["value"]
        if not isinstance(value, ir.DenseFPElementsAttr):
            raise Invalid(f"value must be dense floating-point elements, got {value}")
        vtype = ir.RankedTensorType(value.type)
        if vtype != self.results[0].type:
            raise Invalid(f"value has type {vtype} but the result is {self.results[0].type}")


class LinearOp(HexirOp, name="linear"):
    """input [..., K] x weight [K, N] -> [..., N] (no bias, no transpose)."""

    input: ext.Operand[Any]
    weight: ext.Operand[Any]
    result: ext.Result[Any]

    def check(self) -> None:
        x, ex = tensor(self.operands[0], "input")
        w, ew = tensor(self.operands[1], "weight")
        r, er = _result(self)
        same_element(("input", ex), ("weight", ew), ("result", er))
        expect_shape(r, signatures.linear(x, w))


class MatmulOp(HexirOp, name="matmul"):
    """a [..., M, K] x b [..., K, N] -> [..., M, N]; batch dimensions broadcast."""

    lhs: ext.Operand[Any]
    rhs: ext.Operand[Any]
    result: ext.Result[Any]

    def check(self) -> None:
        a, ea = tensor(self.operands[0], "lhs")
        b, eb = tensor(self.operands[1], "rhs")
        r, er = _result(self)
        same_element(("lhs", ea), ("rhs", eb), ("result", er))
        expect_shape(r, signatures.matmul(a, b, vectors=False))


class _Binary(HexirOp):
    """Element-wise a op b with numpy broadcasting."""

    lhs: ext.Operand[Any]
    rhs: ext.Operand[Any]
    result: ext.Result[Any]

    def check(self) -> None:
        a, ea = tensor(self.operands[0], "lhs")
        b, eb = tensor(self.operands[1], "rhs")
        r, er = _result(self)
        same_element(("lhs", ea), ("rhs", eb), ("result", er))
        expect_shape(r, signatures.broadcast(a, b))


class _Unary(HexirOp):
    """Element-wise f(x); the result has the operand's type."""

    input: ext.Operand[Any]
    result: ext.Result[Any]

    def check(self) -> None:
        tensor(self.operands[0], "input")
        _result(self)
        if self.results[0].type != self.operands[0].type:
            raise Invalid(
                f"result type {self.results[0].type} differs from the input type "
                f"{self.operands[0].type}"
            )


def _elementwise(base: type, mnemonic: str) -> type:
    """The op class `hexir.<mnemonic>` on `base`'s rules (a class statement, made by name)."""
    camel = "".join(part.title() for part in mnemonic.split("_"))
    return types.new_class(f"{camel}Op", (base,), {"name": mnemonic})


# The plain element-wise ops are declared by their kernels' tables (transforms/tir/
# elementwise.py): an entry there is the op's meaning, and this makes it an op of the dialect.
ELEMENTWISE = {
    **{m: _elementwise(_Unary, m) for m in elementwise.UNARY},
    **{m: _elementwise(_Binary, m) for m in elementwise.BINARY},
}


GELU_APPROXIMATIONS = ("none", "tanh")


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
        x, ex = tensor(self.operands[0], "input")
        g, eg = tensor(self.operands[1], "gamma")
        b, eb = tensor(self.operands[2], "beta")
        r, er = _result(self)
        same_element(("input", ex), ("gamma", eg), ("beta", eb), ("result", er))
        epsilon = ir.FloatAttr(self.operation.attributes["epsilon"]).value
        expect_shape(r, signatures.layer_norm(x, g, b, epsilon))


class TransposeOp(HexirOp, name="transpose"):
    """Permute dimensions: result dim i = input dim permutation[i]."""

    input: ext.Operand[Any]
    permutation: Any
    result: ext.Result[Any]

    def check(self) -> None:
        x, ex = tensor(self.operands[0], "input")
        r, er = _result(self)
        same_element(("input", ex), ("result", er))
        perm = i64_array(self.operation.attributes["permutation"], "permutation")
        expect_shape(r, signatures.transpose(x, perm))


class ReshapeOp(HexirOp, name="reshape"):
    """Same elements in row-major order, the result type's shape."""

    input: ext.Operand[Any]
    result: ext.Result[Any]

    def check(self) -> None:
        x, ex = tensor(self.operands[0], "input")
        r, er = _result(self)
        same_element(("input", ex), ("result", er))
        signatures.reshape(x, r)


class _Reduce(HexirOp):
    """Reduce over `axes` (array<i64>; none: every axis, as in ONNX); `keepdims` keeps them as
    size-1 dimensions."""

    input: ext.Operand[Any]
    axes: Any
    keepdims: Any
    result: ext.Result[Any]

    def check(self) -> None:
        x, ex = tensor(self.operands[0], "input")
        r, er = _result(self)
        same_element(("input", ex), ("result", er))
        attrs = self.operation.attributes
        axes = i64_array(attrs["axes"], "axes")
        if not isinstance(attrs["keepdims"], ir.BoolAttr):
            raise Invalid(f"attribute 'keepdims' must be true or false, got {attrs['keepdims']}")
        expect_shape(r, signatures.reduce(x, axes, ir.BoolAttr(attrs["keepdims"]).value))


class ReduceSumOp(_Reduce, name="reduce_sum"):
    pass


class ReduceMeanOp(_Reduce, name="reduce_mean"):
    pass


class ReduceMaxOp(_Reduce, name="reduce_max"):
    pass


class PrintOp(HexirOp, name="print"):
    """Print a tensor on the host (a memref once the linalg path has bufferized it)."""

    input: ext.Operand[Any]

    def check(self) -> None:
        value = self.operands[0]
        if isinstance(value.type, ir.MemRefType):
            memref(value, "input")
        else:
            tensor(value, "input")


class CallTirOp(HexirOp, name="call_tir"):
    """Call the kernel `callee` with the inputs plus a destination.

    The kernel is the symbol `callee` at whatever level the module is: a hextir.prim_func
    (mlir-tir), a func.func of loops (mlir-linalg; a cpu one takes two more index arguments,
    its range), a gpu.module holding the gpu.func of that name (mlir-gpu), or an llvm.func /
    NVVM gpu.module (mlir-llvm). Where the kernel still has buffer types they must be the
    call's tensor types. The inputs are declared as `first` plus the variadic `rest`: IRDL
    binds a variadic operand's constraint once, so all of `rest` share one type.
    """

    callee: ir.FlatSymbolRefAttr
    first: ext.Operand[Any]
    rest: Sequence[ext.Operand[Any]]
    result: ext.Result[Any]

    def check(self) -> None:
        _result(self)
        name = ir.FlatSymbolRefAttr(self.operation.attributes["callee"]).value
        kernel = lookup_symbol(self.operation, name)
        if kernel is None or kernel.name not in KERNEL_OPS or (
            kernel.name != "hextir.prim_func" and "hexir.kernel" not in kernel.attributes
        ):
            raise Invalid(f"'{name}' does not reference a kernel (a hextir.prim_func or its "
                          "lowering)")
        buffers = _kernel_buffers(kernel, name)
        if buffers is None:
            return
        inputs = len(self.operands)
        if len(buffers) != inputs + 1:
            raise Invalid(
                f"expected @{name} to take {inputs + 1} buffers ({inputs} inputs + 1 "
                f"destination), but it takes {len(buffers)}"
            )
        for i, (value, buf) in enumerate(zip([*self.operands, self.results[0]], buffers)):
            shape, elem = tensor(value, f"operand #{i}" if i < inputs else "result")
            bshape, belem = memref(buf, f"buffer #{i} of @{name}")
            if (shape, elem) != (bshape, belem):
                raise Invalid(f"{value.type} does not match buffer #{i} of @{name}, {buf}")


KERNEL_OPS = ("hextir.prim_func", "func.func", "gpu.module", "llvm.func")


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
