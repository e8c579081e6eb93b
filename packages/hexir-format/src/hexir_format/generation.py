"""What a generate entry point (`model.Generation`) must be to run: checked by the validator,
so that the runtime's decode loop never meets a step it cannot drive.

The loop feeds the step its token ids, mask, positions and cache, and reads its logits and
presents; the record names them by index. Every field comes from the file, so each index
must name an input or output of the step, every input must have exactly one role (the loop
gives nothing else), and the types must relate as a decoder-with-past step's do, in its
own size symbols: ids [batch, seq] i64 (positions the same), mask [batch, past + seq] i64,
logits [batch, seq, vocab] float, each past [..., past, ...] along one axis and its present
the same with `past + seq` there. The loop binds batch = 1, prefills with past = 0 and
seq = the prompt, then steps with seq = 1 and past up to `max_length` - 1: the symbols'
ranges must allow all of it, so the loop is bounded by what the module declares.
"""

from __future__ import annotations

from collections.abc import Mapping

from hexir_format import dims
from hexir_format.dims import Dim
from hexir_format.errors import ValidationError
from hexir_format.model import DType, Generation, Module, TensorType

#: The element types logits and caches may have.
FLOATS = frozenset({DType.F32, DType.F64})


def check(module: Module, signatures: Mapping[str, tuple[tuple[TensorType, ...],
                                                         tuple[TensorType, ...]]]) -> None:
    """Every generation of `module` against the (inputs, outputs) types of the entry points
    (`signatures`, by name); ValidationError on the first problem."""
    if module.generations and module.version < 6:
        raise ValidationError(f"generate entry '{module.generations[0].name}' needs version 6; "
                              f"this module is version {module.version}", field="version")
    names: set[str] = set()
    for g in module.generations:
        where = f"generate entry '{g.name}'"
        if g.name in signatures or g.name in names:
            raise ValidationError(f"{where}: the name is already an entry point's",
                                  entry=g.name, field="name")
        names.add(g.name)
        if g.step not in signatures:
            raise ValidationError(f"{where}: its step '{g.step}' is not an entry point",
                                  entry=g.name, field="step")
        if problem := _problem(g, *signatures[g.step], module):
            raise ValidationError(f"{where} (step '{g.step}'): {problem}", entry=g.name,
                                  field="generate")


def _problem(g: Generation, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...],
             module: Module) -> str | None:
    roles = [("ids", g.ids), ("mask", g.mask), ("positions", g.positions)]
    roles += [(f"cache {n} past", past) for n, (past, _) in enumerate(g.cache)]
    results = [("logits", g.logits)] + [(f"cache {n} present", present)
                                        for n, (_, present) in enumerate(g.cache)]
    for side, named, count in (("input", roles, len(inputs)), ("output", results, len(outputs))):
        seen: dict[int, str] = {}
        for role, index in named:
            if index >= count:
                return f"{role} is {side} {index}, but the step has {count} {side}s"
            if index in seen:
                return f"{role} and {seen[index]} are both {side} {index}"
            seen[index] = role
        if side == "input" and len(seen) != count:
            free = min(set(range(count)) - set(seen))
            return f"input {free} of the step has no role (the loop gives only ids, mask, " \
                   "positions and the cache)"
    if not g.cache:
        return "it has no cache (a step without past keys and values recomputes the prompt)"
    ids, mask, positions, logits = inputs[g.ids], inputs[g.mask], inputs[g.positions], \
        outputs[g.logits]
    if ids.dtype is not DType.I64 or ids.rank != 2:
        return f"ids is {ids}; expected [batch, seq] of i64"
    batch, seq = ids.shape
    if not (_symbol(batch) and _symbol(seq)) or batch == seq:
        return f"ids is {ids}; expected two distinct size symbols, [batch, seq]"
    if positions != ids:
        return f"positions is {positions}; expected {ids}, the type of ids"
    if logits.dtype not in FLOATS or logits.rank != 3 or logits.shape[:2] != (batch, seq) \
            or not isinstance(logits.shape[2], int):
        return f"logits is {logits}; expected [{batch}, {seq}, vocab] of f32 or f64"
    if g.eos >= logits.shape[2]:
        return f"eos {g.eos} is outside the vocabulary of the logits, 0..{logits.shape[2] - 1}"
    past = None
    for n, (i, o) in enumerate(g.cache):
        before, after = inputs[i], outputs[o]
        axes = [a for a, d in enumerate(before.shape)
                if _symbol(d) and d not in (batch, seq) and (past is None or d == past)]
        if before.dtype not in FLOATS or len(axes) != 1:
            return f"cache {n} past is {before}; expected floats with one axis the past " \
                   "length (a size symbol of its own, the same in every past)"
        axis = axes[0]
        past = before.shape[axis]
        others = [d for a, d in enumerate(before.shape) if a != axis]
        if any(dims.free_symbols(d) - dims.free_symbols(batch) for d in others):
            return f"cache {n} past is {before}; only its axis {axis} may be the past length"
        grown = TensorType(before.dtype, (*before.shape[:axis], dims.add(past, seq),
                                          *before.shape[axis + 1:]))
        if after != grown:
            return f"cache {n} present is {after}; expected {grown}, its past grown by seq"
    assert past is not None
    if mask != TensorType(DType.I64, (batch, dims.add(past, seq))):
        return f"mask is {mask}; expected {batch}x({dims.render(dims.add(past, seq))})xi64"
    ranges = {s.name: (s.lo, s.hi) for s in module.symbols}
    for symbol, lo, hi, why in ((batch, 1, 1, "one sequence"),
                                (past, 0, g.max_length - 1, "an empty cache to max_length - 1"),
                                (seq, 1, g.max_length - 1, "one token to max_length - 1")):
        name = dims.render(symbol)
        have = ranges.get(name)
        if have is None or have[0] > lo or have[1] < hi:
            shown = f"{have[0]}..{have[1]}" if have else "not a symbol of the module"
            return f"{name} must take {lo}..{hi} ({why}, max_length {g.max_length}); " \
                   f"the module allows {shown}"
    return None


def _symbol(d: Dim) -> bool:
    """Whether `d` is one size symbol alone (not a number, nor an expression)."""
    return not isinstance(d, int) and dims.render(d).isidentifier()
