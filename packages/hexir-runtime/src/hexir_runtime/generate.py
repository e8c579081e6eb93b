"""A generate entry point's decode loop (`hexir_format.Generation`): prefill, then one token
at a time, greedy, until `max_new_tokens` or the end-of-sequence token.

The cache is the loop's state: a window of `window` positions per past, allocated once per
call (concurrent calls each have their own) and written in place, one position per token.
Every decode step therefore has the same shapes -- seq 1, past `window` -- so it runs one
planned program of the step (`Resident.sized` hits) instead of planning a new binding for
every past length, which costs ~30x a step. The positions not yet written are masked out by
the attention mask (0), and the new token's own key and value, which the step appends at
position `window` of its present, are copied to their slot in the window: the step's
attention sees exactly the tokens a growing cache holds, with the true position ids. The
step's results are read where it wrote them (`EntryPoint._reading`): of its grown caches
only that one position is copied, and of its logits the last row is read.

The window holds the prompt and the new tokens, rounded up to one of four sizes per doubling
(`window`) and capped at the module's `max_length` - 1: the step's attention and its cache
copies over unused slots cost at most a quarter more than the positions in use, and few
distinct windows keep their programs cached across calls. (Powers of two were measured
10% slower per token on a 95-position generation, window 127 against 96: GPT-2 at hidden
256, one thread.)
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hexir_format import Generation, TensorType, dims
from hexir_runtime.errors import InputError

if TYPE_CHECKING:
    from hexir_runtime.api import Module

#: The smallest cache window the loop allocates.
MIN_WINDOW = 16


@dataclass(frozen=True)
class Roles:
    """A generation's step read for the loop: the size symbols' names, each past's cache
    axis, and the vocabulary the logits cover."""

    batch: str
    seq: str
    past: str
    axes: tuple[int, ...]  # per cache pair: the past length's axis
    inputs: tuple[TensorType, ...]
    vocab: int


def roles(g: Generation, inputs: Sequence[TensorType], outputs: Sequence[TensorType]) -> Roles:
    """The symbols and axes of a generation the validator passed (`hexir_format.generation`)."""
    batch, seq = (dims.render(d) for d in inputs[g.ids].shape)
    axes, past = [], ""
    for i, _ in g.cache:
        axis, d = next((a, d) for a, d in enumerate(inputs[i].shape)
                       if not isinstance(d, int) and dims.render(d) not in (batch, seq))
        axes.append(axis)
        past = dims.render(d)
    vocab = outputs[g.logits].shape[2]
    assert isinstance(vocab, int)
    return Roles(batch, seq, past, tuple(axes), tuple(inputs), vocab)


def window(positions: int, max_length: int) -> int:
    """The cache window for `positions` cached positions: the least size >= positions among
    16, 20, 24, 28, 32, 40, 48, ... (four steps per doubling: at most a quarter more than
    the positions, at most four windows -- programs planned once -- per doubling of the
    length), capped at max_length - 1 (the most the loop ever caches)."""
    size = MIN_WINDOW
    while size < positions:
        size += 1 << (size.bit_length() - 3)  # a quarter of the power of two below it
    return min(size, max_length - 1)


def prompt_of(input_ids: Any, name: str, vocab: int) -> np.ndarray:
    """`input_ids` as the loop's [1, P] int64 prompt, or an InputError (one line)."""
    try:
        ids = np.asarray(input_ids)
    except (TypeError, ValueError) as e:
        raise InputError(f"{name}: input_ids must be token ids, [1, P] int64: {e}") from None
    shape = "x".join(map(str, ids.shape)) or "a scalar"
    if ids.ndim != 2 or ids.shape[0] != 1 or ids.shape[1] < 1:
        raise InputError(f"{name}: input_ids must be [1, P] token ids with P >= 1; got {shape}")
    if ids.dtype.kind not in "iu":
        raise InputError(f"{name}: input_ids must be integer token ids; got {ids.dtype}")
    if ids.min() < 0 or ids.max() >= vocab:
        bad = int(ids.min() if ids.min() < 0 else ids.max())
        raise InputError(f"{name}: token id {bad} in input_ids is outside the vocabulary "
                         f"0..{vocab - 1}")
    return np.ascontiguousarray(ids, np.int64)


def count_of(value: Any, what: str, name: str) -> int:
    """A count given as an int or a one-element integer array (`hexir-run`'s 1xi64)."""
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "iu":
        raise InputError(f"{name}: {what} must be one integer; got {array.dtype} of shape "
                         f"{'x'.join(map(str, array.shape)) or 'scalar'}")
    return operator.index(array.reshape(())[()])


def run(module: Module, g: Generation, input_ids: Any, max_new_tokens: Any,
        eos_token_id: int | None = None,
        on_token: Callable[[int], Any] | None = None) -> np.ndarray:
    """The prompt followed by up to `max_new_tokens` greedy tokens, [1, P + n]; stops after
    the end-of-sequence token (`eos_token_id`, else the module's). `on_token` sees each new
    token as it is chosen."""
    step = module.entry_points[g.step]
    signature = step.signature
    r = roles(g, signature.inputs, signature.outputs)
    ids = prompt_of(input_ids, g.name, r.vocab)
    new = count_of(max_new_tokens, "max_new_tokens", g.name)
    eos = g.eos if eos_token_id is None else count_of(eos_token_id, "eos_token_id", g.name)
    prompt = ids.shape[1]
    if eos >= r.vocab or eos < -1:
        raise InputError(f"{g.name}: eos_token_id {eos} is outside the vocabulary 0..{r.vocab - 1} "
                         "(-1: none)")
    if new < 0:
        raise InputError(f"{g.name}: max_new_tokens must be >= 0; got {new}")
    if prompt + new > g.max_length:
        raise InputError(f"{g.name}: a prompt of {prompt} tokens and max_new_tokens={new} need "
                         f"{prompt + new} positions; the module allows at most {g.max_length}")
    tokens = [int(t) for t in ids[0]]
    if new == 0:
        return ids
    size = window(prompt + new - 1, g.max_length)
    caches = []  # the state: each past's window, the first `filled` positions in use
    for i, _ in g.cache:
        t = r.inputs[i].evaluate({r.batch: 1, r.past: size, r.seq: 1})
        caches.append(np.zeros(t.static_shape, t.dtype.numpy))
    feeds: list[Any] = [None] * len(r.inputs)
    feeds[g.ids], feeds[g.mask] = ids, np.ones((1, prompt), np.int64)
    feeds[g.positions] = np.arange(prompt, dtype=np.int64)[None]
    empty = {r.batch: 1, r.past: 0, r.seq: prompt}
    for i, _ in g.cache:
        t = r.inputs[i].evaluate(empty)
        feeds[i] = np.zeros(t.static_shape, t.dtype.numpy)
    filled = 0

    def keep(results: Sequence[np.ndarray]) -> int:
        """The step's choice; its new keys and values copied into the window at `filled` --
        from views of the step's buffers: only those positions are ever copied out."""
        # the prefill's presents are the prompt's positions; a decode step's new one is at
        # `size`, after the window it was given
        source, target = (slice(0, prompt),) * 2 if filled == 0 else (size, filled)
        for cache, (_, o), axis in zip(caches, g.cache, r.axes, strict=True):
            _at(cache, axis, target)[...] = _at(results[o], axis, source)
        return int(np.argmax(results[g.logits][0, -1]))

    chosen = step._reading(feeds, keep)
    filled = prompt
    for (i, _), cache in zip(g.cache, caches, strict=True):
        feeds[i] = cache
    mask = np.zeros((1, size + 1), np.int64)
    mask[0, :prompt] = mask[0, size] = 1
    feeds[g.mask] = mask
    token, position = np.zeros((1, 1), np.int64), np.zeros((1, 1), np.int64)
    feeds[g.ids], feeds[g.positions] = token, position
    while True:
        tokens.append(chosen)
        if on_token is not None:
            on_token(chosen)
        if chosen == eos or len(tokens) - prompt == new:
            break
        token[0, 0], position[0, 0] = chosen, filled
        chosen = step._reading(feeds, keep)
        mask[0, filled] = 1
        filled += 1
    return np.array([tokens], np.int64)


def _at(array: np.ndarray, axis: int, index: int | slice) -> np.ndarray:
    """array[..., index, ...] along `axis`: a view."""
    return array[(slice(None),) * axis + (index,)]
