"""hexir-lower-to-tir: each graph compute op becomes a `hextir` kernel and a `hexir.call_tir`.

For every compute op (in walk order) a `hextir.prim_func` is appended to the module body,
named `<mnemonic>_<counter>` with one counter for the whole module (`linear_0`, `relu_1`,
...), taking one memref per operand plus the destination. The op is replaced by
`hexir.call_tir @name(operands...)` that keeps the op's `device`. The prim func records
`device`, the format's kernel kind (`hexir.kernel`; linear and matmul are both "matmul") and
its params (`hexir.params`).

How each kernel runs is decided here and written into its loops (see `tir.schedule`): cpu
kernels get `parallel` loops over the output, cuda kernels get loops bound to
blockIdx/threadIdx with a bounds guard; reduction axes are `serial` on both devices.

Ops that `hexir-fuse` put in one group (`hexir.group`) become one kernel, made at the
group's last op and named after the ops it covers (`linear_add_relu_0`, or
`<first>_<n>ops_<last>_<counter>` when that is too long for a kernel name); its inputs are
the group's operands from outside it, a contraction's two first (`tir.fusion`).

`hexir.constant`, `hexir.print`, `hexir.transfer`, `hexir.call_tir` and func ops stay as they are,
but for one rewrite: a cpu matmul or linear whose rhs is a constant matrix, where the schedule packs
it (`schedule.panel_width`), reads a new constant, that matrix in column panels
(`contraction.PANEL`), and so does a cpu conv with a constant weight that the channel-panel schedule
reads, each made once per constant, layout and width; the old one goes when nothing else reads it.
The new constant holds the same value and names its layout (`packing`): the packed elements are
made as the `.hxb` is written, so the MLIR context never holds a weight twice. An op placed
nowhere (no `device`) is lowered for the default device, the cpu.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import cast

from hexir_compiler import packing, symbolic
from hexir_compiler.dialects.hexir import segment_sizes
from hexir_compiler.element_types import ELEMENTS
from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import ir
from hexir_compiler.ops import CONTRACTIONS
from hexir_compiler.placement import DEVICES, device_of
from hexir_compiler.target import host
from hexir_compiler.transforms.hexir_fuse import GROUP, LEAVES
from hexir_compiler.transforms.tir import PLANS, GraphOp, convolution, fusion
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.contraction import PANEL
from hexir_compiler.transforms.tir.kernel import Shape
from hexir_compiler.transforms.tir.schedule import panel_width
from hexir_format import MAX_NAME
from hexir_format.dims import DimError
from hexir_format.signatures import ShapeError

PASS_NAME = "hexir-lower-to-tir"


def hexir_lower_to_tir(op: ir.Operation, pass_) -> None:
    """The pass entry point for `PassManager.add(hexir_lower_to_tir, name=PASS_NAME)`."""
    try:
        run(op)
    except CompileError as error:
        (error.location or op.location).emit_error(str(error))
        pass_.signal_pass_failure()


def run(module: ir.Module | ir.Operation, cpu: str | None = None) -> None:
    """Lower every compute op of `module` in place; cpu kernels are scheduled for the host
    CPU level `cpu` (`-target=cpu:...`; None: `target.host.DEFAULT_CPU`).

    Raises CompileError (`hexir.<op>: ...`, with the op's location) when one cannot be
    lowered.
    """
    module = module.operation
    body = module.regions[0].blocks[0]
    made = module.attributes[host.LEVEL_ATTR] if host.LEVEL_ATTR in module.attributes else None
    if made is not None:  # a printed stage fed back: its kernels are for their own level
        made_for = ir.StringAttr(made).value
        if cpu is not None and cpu != made_for:
            raise CompileError(f"the module's kernels were made for {made_for} "
                               f"({host.LEVEL_ATTR} = \"{made_for}\"); it cannot be compiled "
                               f"for {cpu}: compile the source, or a stage above mlir-tir")
        cpu = made_for
    level = host.level(cpu)
    module.attributes[host.LEVEL_ATTR] = ir.StringAttr.get(cpu or host.DEFAULT_CPU)
    taken = {
        ir.StringAttr(op.attributes["sym_name"]).value
        for op in (view.operation for view in body.operations)
        if "sym_name" in op.attributes
    }
    counter = 0
    packed: dict = {}  # (constant, layout, width) -> its packed copy
    ops = _compute_ops(module)
    groups: dict[tuple, list[ir.Operation]] = {}
    for op in ops:
        if GROUP in op.attributes:
            key = (op.parent, ir.IntegerAttr(op.attributes[GROUP]).value)
            groups.setdefault(key, []).append(op)
    for op in ops:
        members = [op]
        if GROUP in op.attributes:
            members = groups[(op.parent, ir.IntegerAttr(op.attributes[GROUP]).value)]
            if op != members[-1]:
                continue  # lowered with its group, at the group's last op
        # (named after the ops it computes: a group's leaves only say where it reads)
        named = [m for m in members if m.name.removeprefix("hexir.") not in LEAVES] or members
        stem = "_".join(m.name.removeprefix("hexir.") for m in named)
        while f"{stem}_{counter}" in taken or len(f"{stem}_{counter}") > MAX_NAME:
            if len(f"{stem}_{counter}") > MAX_NAME:
                first, last = (m.name.removeprefix("hexir.") for m in (named[0], named[-1]))
                stem = f"{first}_{len(named)}ops_{last}"
            else:
                counter += 1
        name = f"{stem}_{counter}"
        counter += 1
        _lower(members, name, body, level, packed)
    for constant in {key[0] for key in packed}:
        if not list(constant.uses):
            constant.owner.erase()


def _compute_ops(module: ir.Operation) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("hexir.") and op.name.removeprefix("hexir.") in PLANS:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found


def _lower(members: list[ir.Operation], name: str, module_body: ir.Block, level: int,
           packed: dict) -> None:
    """One kernel for an op or a fusion group, called where its last op was; the others are
    erased. A lone op's inputs are its operands; a group's are its operands from outside it,
    each once, a contraction's two first."""
    sink, lone = members[-1], len(members) == 1
    produced = {m.results[0]: i for i, m in enumerate(members)}
    head = next((m for m in members
                 if lone or m.name.removeprefix("hexir.") in CONTRACTIONS), None)
    inputs: list[ir.Value] = list(head.operands) if head is not None else []
    steps = []
    for member in members:
        graph_op, _ = _read(member)
        if member is head:  # its operands are the first inputs (the rhs perhaps packed)
            graph_op = _pack_rhs(member, graph_op, inputs, level, packed)
            steps.append(fusion.Step(graph_op, tuple(("input", i) for i in range(2))))
            continue
        sources = []
        for value in member.operands:
            if value in produced:
                sources.append(("step", produced[value]))
                continue
            if value not in inputs:
                inputs.append(value)
            sources.append(("input", inputs.index(value)))
        steps.append(fusion.Step(graph_op, tuple(sources)))
    # (symbolic sizes are Exprs: `tir.kernel.Shape` says how generators take them)
    shapes = [cast(Shape, symbolic.shape_of(v.type)) for v in inputs]
    output = cast(Shape, symbolic.shape_of(sink.results[0].type))
    try:
        kernel = PLANS[graph_op.mnemonic](graph_op) if lone else \
            fusion.plan_group(steps, shapes, output)
    except ShapeError as error:
        raise CompileError(f"{sink.name}: {error}", sink.location) from None
    except CompileError as error:
        if not lone:
            raise
        raise CompileError(str(error), sink.location) from None
    elements = [ir.RankedTensorType(v.type).element_type for v in (*inputs, sink.results[0])]
    _replace(members, kernel, name, inputs, [*shapes, output], elements, module_body, level)


def _replace(members: list[ir.Operation], kernel, name: str, inputs: list[ir.Value],
             shapes: list, elements: list[ir.Type], module_body: ir.Block,
             level: int) -> None:
    """Write `kernel`'s prim_func, call it where the last of `members` was, erase them all
    (only the last one's result is used outside them)."""
    sink = members[-1]
    device = _device(sink)
    builder = KernelBuilder(
        ip=ir.InsertionPoint(module_body),
        name=name,
        device=device,
        kind=kernel.kind,
        params=kernel.params,
        shapes=shapes,
        elements=elements,
        loc=sink.location,
        host_level=level,
        symbols=kernel.symbols,
    )
    try:
        kernel.emit(builder)
    except CompileError as error:
        builder.func.erase()
        raise CompileError(f"{sink.name}: {error}", sink.location) from None
    call = ir.Operation.create(
        "hexir.call_tir",
        results=[sink.results[0].type],
        operands=inputs,
        attributes={
            "callee": ir.FlatSymbolRefAttr.get(name),
            "device": ir.StringAttr.get(device),
            "operandSegmentSizes": segment_sizes(len(inputs)),
        },
        loc=sink.location,
        ip=ir.InsertionPoint(sink),
    )
    sink.results[0].replace_all_uses_with(call.results[0])
    for member in reversed(members):
        member.erase()


def _pack_rhs(op: ir.Operation, graph_op: GraphOp, inputs: list[ir.Value], level: int,
              packed: dict) -> GraphOp:
    """`graph_op` marked PANEL, its rhs (`inputs[1]`) replaced by the packed constant, where
    the schedule packs it (see the module docstring); else `graph_op` unchanged."""
    if graph_op.mnemonic not in ("conv", "matmul", "linear"):
        return graph_op
    rhs = op.operands[1]
    if not isinstance(rhs, ir.OpResult) or rhs.owner.name != "hexir.constant":
        return graph_op
    element = ir.RankedTensorType(rhs.type).element_type
    if graph_op.mnemonic == "conv":
        if _device(op) != "cpu" or not convolution.uses_panels(graph_op):
            return graph_op
        group = graph_op.int_attr("group")
        width = convolution.panel_columns(ir.FloatType(element).width // 8,
                                          graph_op.inputs[1][0] // group)
        layout: tuple[str, tuple[int, ...]] = ("conv", (group, width))
    elif len(graph_op.inputs[1]) == 2:
        depth, cols = graph_op.inputs[1]
        macs = symbolic.hint(math.prod(graph_op.inputs[0][:-1]) * depth * cols)
        panel = panel_width(_device(op), level, macs, ir.FloatType(element).width // 8,
                            symbolic.hint(depth * cols))
        if panel is None:
            return graph_op
        width = panel
        layout = ("columns", (width,))
    else:
        return graph_op
    key = (rhs, graph_op.mnemonic == "conv", width)
    if key not in packed:
        value = ir.DenseElementsAttr(rhs.owner.attributes["value"])
        shape = packing.packed_shape(*layout, tuple(ir.ShapedType(value.type).shape))
        with rhs.owner.location:
            packed[key] = ir.Operation.create(
                "hexir.constant", results=[ir.RankedTensorType.get(list(shape), element)],
                attributes={**{n: rhs.owner.attributes[n] for n in rhs.owner.attributes},
                            packing.ATTRIBUTE: packing.attribute(*layout)},
                ip=ir.InsertionPoint(rhs.owner)).result
    inputs[1] = packed[key]
    attributes = {**graph_op.attributes, PANEL: ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                                   width)}
    return dataclasses.replace(graph_op, attributes=attributes)


def _read(op: ir.Operation) -> tuple[GraphOp, list[ir.Type]]:
    """The op's shapes, element types and attributes (the op verifier has checked which
    element types it takes)."""
    types = [value.type for value in (*op.operands, *op.results)]
    shapes = []
    for type_ in types:
        shape = None
        if isinstance(type_, ir.RankedTensorType):
            with contextlib.suppress(DimError):
                shape = symbolic.shape_of(type_)
        if shape is None or str(ir.RankedTensorType(type_).element_type) not in ELEMENTS:
            raise CompileError(
                f"{op.name}: expected ranked tensors of static or symbolic shape and element "
                f"type {', '.join(ELEMENTS)}, found {type_}", op.location
            )
        shapes.append(shape)
    shaped = [ir.RankedTensorType(t) for t in types]
    attributes = {name: op.attributes[name] for name in op.attributes}
    graph_op = GraphOp(op.name.removeprefix("hexir."), tuple(cast(Shape, s) for s in shapes[:-1]),
                       cast(Shape, shapes[-1]), attributes,
                       tuple(str(t.element_type) for t in shaped))
    return graph_op, [t.element_type for t in shaped]


def _device(op: ir.Operation) -> str:
    device = device_of(op)
    if device not in DEVICES:
        raise CompileError(
            f'{op.name}: device must be "cpu" or "cuda", found "{device}"', op.location
        )
    return device
