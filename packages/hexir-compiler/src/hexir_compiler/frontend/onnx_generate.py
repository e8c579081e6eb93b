"""`-generate`: a decoder-with-past step model wrapped into a `generate` entry point.

The step model is what Hugging Face Optimum and onnxruntime-genai export: inputs the token
ids [batch, seq], the attention mask [batch, past + seq], the position ids [batch, seq] and
each layer's cached keys and values [batch, heads, past, head_dim]; outputs the logits
[batch, seq, vocab] and the grown caches [batch, heads, past + seq, head_dim]. Its names are
Optimum's unless `-generate=` names them (`Spec`). The step is imported as the module's
`main` as any model is; this module finds its roles by name, holds its size symbols to what
the decode loop gives them (past from 0, for the prefill's empty cache), and records the
loop as the module attribute `hexir.generate`, which every stage prints and the serializer
writes as the module's generate entry point (`hexir_format.Generation`). The loop itself
is the runtime's (`hexir_runtime.generate`).

The loop is bounded by `max_length`, the positions a call may use: the model's position
table (a Gather of a constant table by the position ids), which a position past it would
index out of range -- Hexir's Gather clamps such an index, so generating past the table
would go on silently wrong -- else `max_length=` or DEFAULT_MAX_LENGTH.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hexir_compiler.mlir import ir

#: The attribute the step's module carries: the generate entry point, by names.
ATTRIBUTE = "hexir.generate"
#: The positions a call may use when the model has no position table (rotary models).
DEFAULT_MAX_LENGTH = 2048
#: The ops a position id passes through unchanged on its way to a position table.
_PASS_THROUGH = frozenset({"Identity", "Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten"})


class SpecError(ValueError):
    """A malformed `-generate=` value (a usage error)."""


@dataclass(frozen=True)
class Spec:
    """What `-generate=` says: the step's names, the end-of-sequence token, the bound."""

    ids: str = "input_ids"
    mask: str = "attention_mask"
    positions: str = "position_ids"
    logits: str = "logits"
    past: str = "past_key_values.*"  # a `*` stands for the part a past and its present share
    present: str = "present.*"
    eos: int = -1
    max_length: int | None = None
    name: str = "generate"


_NAMES = ("ids", "mask", "positions", "logits", "name")


def parse_spec(text: str) -> Spec:
    """`eos=50256,max_length=1024,cache=past_*:present_*,ids=tokens` -> a Spec; SpecError
    (one line) for anything else."""
    fields: dict = {}
    seen: set[str] = set()
    for item in filter(None, text.split(",")):
        key, eq, value = item.partition("=")
        if key in seen:
            raise SpecError(f"-generate: '{key}' is given twice")
        seen.add(key)
        if not eq or not value:
            raise SpecError(f"-generate: '{item}' is not key=value (keys: eos, max_length, "
                            "cache, ids, mask, positions, logits, name)")
        if key in ("eos", "max_length"):
            if not value.isdigit():
                raise SpecError(f"-generate: {key}={value}; expected a non-negative integer")
            fields[key] = int(value)
        elif key == "cache":
            past, colon, present = value.partition(":")
            if not colon or past.count("*") != 1 or present.count("*") != 1:
                raise SpecError(f"-generate: cache={value}; expected PAST:PRESENT, each with "
                                "one * for the layer's part, e.g. past_key_values.*:present.*")
            fields["past"], fields["present"] = past, present
        elif key in _NAMES:
            fields[key] = value
        else:
            raise SpecError(f"-generate: unknown key '{key}' (keys: eos, max_length, cache, "
                            "ids, mask, positions, logits, name)")
    if fields.get("max_length", 2) < 2:
        raise SpecError(f"-generate: max_length={fields['max_length']}; it must be at least 2")
    return Spec(**fields)


@dataclass(frozen=True)
class Plan:
    """The step's roles by name, what its symbols are held to, and the loop's bound."""

    spec: Spec
    cache: tuple[tuple[str, str], ...]  # (past input, present output) names
    max_length: int
    input_shapes: dict[str, tuple[int | str, ...]]  # -input-shape entries holding the symbols

    def attribute(self) -> ir.Attribute:
        s = self.spec
        return ir.DictAttr.get({
            "name": ir.StringAttr.get(s.name), "step": ir.StringAttr.get("main"),
            "ids": ir.StringAttr.get(s.ids), "mask": ir.StringAttr.get(s.mask),
            "positions": ir.StringAttr.get(s.positions), "logits": ir.StringAttr.get(s.logits),
            "cache": ir.ArrayAttr.get([ir.StringAttr.get(n) for pair in self.cache
                                       for n in pair]),
            "eos": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), s.eos),
            "max_length": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), self.max_length),
        })


def plan(model, spec: Spec, where: str, shapes: dict) -> Plan:
    """The generate entry point of the step `model`, or a ModelError (one line) naming what
    is missing: a role's input or output, a past without its present, an input no role
    gives, a bound past the position table."""
    from hexir_compiler.frontend.onnx import ModelError

    graph = model.graph
    constant = {i.name: tuple(i.dims) for i in graph.initializer}
    constant |= {n.output[0]: tuple(a.t.dims) for n in graph.node if n.op_type == "Constant"
                 for a in n.attribute if a.name == "value"}
    inputs = {vi.name: vi for vi in graph.input if vi.name not in constant}
    outputs = [vi.name for vi in graph.output]
    for role, name, side, names, key in (
            ("token ids", spec.ids, "input", inputs, "ids"),
            ("attention mask", spec.mask, "input", inputs, "mask"),
            ("position ids", spec.positions, "input", inputs, "positions"),
            ("logits", spec.logits, "output", outputs, "logits")):
        if name not in names:
            raise ModelError(f"{where}: -generate: the model has no {side} '{name}' (its "
                             f"{role}; its {side}s: {', '.join(names)}); name it with "
                             f"-generate={key}=NAME")
    pattern = re.compile(re.escape(spec.past).replace(r"\*", "(.+)") + "$")
    cache = []
    for name in inputs:
        if found := pattern.match(name):
            present = spec.present.replace("*", found[1])
            if present not in outputs:
                raise ModelError(f"{where}: -generate: past '{name}' has no present "
                                 f"'{present}' among the outputs; name the pairs with "
                                 "-generate=cache=PAST:PRESENT")
            cache.append((name, present))
    if not cache:
        raise ModelError(f"{where}: -generate: no input matches '{spec.past}' (the cached keys "
                         "and values); name them with -generate=cache=PAST:PRESENT")
    given = {spec.ids, spec.mask, spec.positions, *(p for p, _ in cache)}
    if stray := [n for n in inputs if n not in given]:
        raise ModelError(f"{where}: -generate: input '{stray[0]}' is none of the step's "
                         "(token ids, attention mask, position ids, cache); the decode loop "
                         "gives only those")
    table = _position_table(graph, spec.positions, constant)
    if spec.max_length is not None and table is not None and spec.max_length > table:
        raise ModelError(f"{where}: -generate: max_length={spec.max_length}, but the model's "
                         f"position table has {table} rows: positions past {table - 1} would "
                         "read outside it")
    bound = spec.max_length or table or DEFAULT_MAX_LENGTH
    return Plan(spec, tuple(cache), bound, _holds(inputs, spec, cache, bound, shapes))


def _position_table(graph, positions: str, constant: dict) -> int | None:
    """The rows of the constant table the position ids index (through reshapes and casts),
    if any: the most positions the model has."""
    reached, rows = {positions}, []
    changed = True
    while changed:
        changed = False
        for node in graph.node:
            if node.op_type in _PASS_THROUGH and node.input and node.input[0] in reached \
                    and node.output[0] not in reached:
                reached.add(node.output[0])
                changed = True
    for node in graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in reached \
                and node.input[0] in constant and constant[node.input[0]] \
                and not any(a.name == "axis" and a.i for a in node.attribute):
            rows.append(constant[node.input[0]][0])
    return min(rows) if rows else None


def _holds(inputs: dict, spec: Spec, cache, bound: int,
           shapes: dict) -> dict[str, tuple[int | str, ...]]:
    """-input-shape entries for the pasts (those -input-shape does not give): the past length
    -- a past's one symbol that the token ids do not name -- held to 0..bound - 1, so that
    the prefill's empty cache is a size the module takes."""
    def dim_params(name: str) -> list[int | str] | None:
        t = inputs[name].type.tensor_type
        if not t.HasField("shape"):
            return None  # the importer refuses a shapeless input
        found: list[int | str] = []
        for d in t.shape.dim:
            if not d.HasField("dim_value") and not d.dim_param.isidentifier():
                return None  # unnamed or an expression: left as the model has it
            found.append(int(d.dim_value) if d.HasField("dim_value") else d.dim_param)
        return found

    token = set(dim_params(spec.ids) or ())
    holds = {}
    for past, _ in cache:
        found = dim_params(past)
        if past in shapes or found is None:
            continue
        holds[past] = tuple(f"{d}:0..{bound - 1}" if isinstance(d, str) and d not in token
                            else d for d in found)
    return holds
