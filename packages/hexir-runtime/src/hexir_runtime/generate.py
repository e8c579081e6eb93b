"""A generate entry point's decode loop (`hexir_format.Generation`): prefill, then one token
at a time, greedy, until `max_new_tokens` or the end-of-sequence token.

The cache is the loop's state: a window of `window` positions per past, allocated once per
call (concurrent calls each have their own) and written in place, one position per token.
Every decode step therefore has the same shapes -- seq 1, past `window` -- so it runs one
planned program of the step (`Resident.sized` hits) instead of planning a new binding for
every past length, which costs ~30x a step. The positions not yet written are masked out by
the attention mask (0), and the new token's own key and value, which the step appends at
position `window` of its present, are copied to their slot in the window: the step's
attention sees exactly the tokens a growing cache holds, with the true position ids.

Who drives the steps depends on where the step runs (`Loop`):
- all compiled cpu kernels (`Loop.native`): the runtime's native code, GENERATE of
  `hal/threads.o`, on an arena of the decode step held for the call: the windows are that
  arena's own past inputs, and per token the loop writes the token, its position and the
  mask there, runs the step's kernels (one SEQUENCE), copies each present's new position
  into its window and takes the argmax of the logits -- no Python per token;
- the attention on cuda (`Loop.on_device`): the windows and presents are device arrays the
  loop holds, the new position moves device to device, and only the token, its position,
  the mask and the logits cross (the step is called from Python per token);
- anything else (`Loop.in_python`, kernels without a native form): the windows are host
  arrays fed to each step call, whose results are read in place (`EntryPoint._reading`):
  of its grown caches only the new position is copied, of its logits the last row.

The window holds the prompt and the new tokens, rounded up to one of four sizes per doubling
(`window`) and capped at the module's `max_length` - 1: the step's attention and its cache
copies over unused slots cost at most a quarter more than the positions in use, and few
distinct windows keep their programs cached across calls. (Powers of two were measured
10% slower per token on a 95-position generation, window 127 against 96: GPT-2 at hidden
256, one thread.)
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from hexir_format import Generation, TensorType, dims
from hexir_runtime.device_arrays import DeviceArray
from hexir_runtime.errors import InputError
from hexir_runtime.hal import threads
from hexir_runtime.hal.cuda import CudaDevice

if TYPE_CHECKING:
    from hexir_runtime.api import EntryPoint, Module
    from hexir_runtime.arena import Arena
    from hexir_runtime.interpreter import Program

#: The smallest cache window the loop allocates.
MIN_WINDOW = 16
#: The most tokens one native call of the loop makes: Python runs between them only to see
#: a KeyboardInterrupt (and no later than this many tokens).
NATIVE_TOKENS = 64


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
    if new == 0:
        return ids
    loop = Loop(g, r, ids, new, eos, window(prompt + new - 1, g.max_length), on_token)
    if new == 1:  # the prefill's token alone: no cache to keep, no decode step to plan
        tokens: list[int] = []
        loop.first(loop.prefill(step, None), tokens)
        return np.array([[*ids[0].tolist(), *tokens]], np.int64)
    decode = loop.decode_feeds()
    device = step._output_device(g.cache[0][1]) if g.cache else None
    if isinstance(device, CudaDevice):  # the attention on a GPU
        tokens = loop.on_device(step, decode, device)
    else:
        tokens = step._holding(decode, lambda program, arena: loop.native(program, arena, step))
        if tokens is None:  # kernels without a native form: the loop in Python
            tokens = loop.in_python(step, decode)
    return np.array([[*ids[0].tolist(), *tokens]], np.int64)


@dataclass
class Loop:
    """One generation's loop: its prompt, count, end token and window."""

    g: Generation
    r: Roles
    ids: np.ndarray
    new: int
    eos: int
    size: int  # the window
    on_token: Callable[[int], Any] | None

    @property
    def prompt(self) -> int:
        return self.ids.shape[1]

    def decode_feeds(self) -> list[Any]:
        """A decode step's inputs (seq 1, past `size`): the token, its position, the mask
        (the window's positions, then the token's own), zeroed caches."""
        g, r = self.g, self.r
        feeds: list[Any] = [None] * len(r.inputs)
        feeds[g.ids], feeds[g.positions] = np.zeros((1, 1), np.int64), np.zeros((1, 1), np.int64)
        feeds[g.mask] = np.zeros((1, self.size + 1), np.int64)
        for i, _ in g.cache:
            t = r.inputs[i].evaluate({r.batch: 1, r.past: self.size, r.seq: 1})
            feeds[i] = np.zeros(t.static_shape, t.dtype.numpy)
        return feeds

    def prefill(self, step: EntryPoint, caches: Sequence[np.ndarray] | None) -> int:
        """The prompt through the step (past 0): its keys and values into the first
        positions of each window (`caches`, the rest zeroed; None: kept nowhere); the
        first token."""
        g, r, prompt = self.g, self.r, self.prompt
        feeds: list[Any] = [None] * len(r.inputs)
        feeds[g.ids], feeds[g.mask] = self.ids, np.ones((1, prompt), np.int64)
        feeds[g.positions] = np.arange(prompt, dtype=np.int64)[None]
        empty = {r.batch: 1, r.past: 0, r.seq: prompt}
        for i, _ in g.cache:
            t = r.inputs[i].evaluate(empty)
            feeds[i] = np.zeros(t.static_shape, t.dtype.numpy)

        def keep(results: Sequence[np.ndarray]) -> int:
            """The presents' prompt positions into the windows (views of the step's
            buffers: nothing else is copied out), and the choice."""
            for cache, (_, o), axis in zip(caches or (), g.cache, r.axes, strict=False):
                _at(cache, axis, slice(0, prompt))[...] = _at(results[o], axis, slice(0, prompt))
                _at(cache, axis, slice(prompt, None))[...] = 0
            return int(np.argmax(results[g.logits][0, -1]))
        return step._reading(feeds, keep)

    def first(self, chosen: int, tokens: list[int]) -> bool:
        """`chosen` appended and streamed; whether the loop goes on."""
        tokens.append(chosen)
        if self.on_token is not None:
            self.on_token(chosen)
        return chosen != self.eos and len(tokens) < self.new

    def native(self, program: Program, arena: Arena, step: EntryPoint) -> list[int] | None:
        """The loop as GENERATE commands the runtime's native code runs (`threads`): the
        step's kernels, the cache copies, the mask and the choice, with no Python per
        token; the cache is the held arena's own past inputs. None when the step has kernels
        without a native form."""
        g, r, size = self.g, self.r, self.size
        sequence = program.native_steps(arena)
        found = [program.input_view(arena, i)
                 for i in (g.ids, g.positions, g.mask, *(i for i, _ in g.cache))]
        if sequence is None or any(v is None for v in found):
            return None
        ids, positions, mask, *pasts = cast(list[np.ndarray], found)
        results = arena.result_views
        chosen = self.prefill(step, pasts)
        mask[...] = 0
        mask[0, :self.prompt] = mask[0, size] = 1
        tokens: list[int] = []
        if not self.first(chosen, tokens):
            return tokens
        out = np.zeros(self.new, np.int64)
        record = threads.Record(threads.GENERATE, threads.GEN_FIELDS, vocab=r.vocab,
                                filled=self.prompt, token=chosen, eos=self.eos,
                                wide=int(results[g.logits].dtype == np.float64))
        record["sequence"] = sequence.address
        record.held.append(sequence)
        for name, view in (("logits", results[g.logits]), ("ids", ids), ("positions", positions),
                           ("mask", mask), ("tokens", out)):
            record[name] = record.hold(view)
        copies = np.array([_slot(past.ctypes.data, past.shape, results[o].ctypes.data,
                                 results[o].shape, results[o].itemsize, axis, size)
                           for past, (_, o), axis in zip(pasts, g.cache, r.axes, strict=True)],
                          np.int64).reshape(-1, len(threads.COPY_FIELDS))
        record["copies"], record["ncopies"] = record.hold(copies), len(copies)
        while True:  # a native call per NATIVE_TOKENS tokens; per token when streaming
            left = self.new - len(tokens)
            record["count"] = min(left, NATIVE_TOKENS) if self.on_token is None else 1
            record["tokens"] = out.ctypes.data + 8 * len(tokens)
            record.run()
            made = out[len(tokens):len(tokens) + record["produced"]].tolist()
            if self.on_token is not None:
                if not self.first(made[0], tokens):
                    return tokens
                continue
            tokens += made
            if made[-1] == self.eos or len(tokens) == self.new:
                return tokens

    def in_python(self, step: EntryPoint, feeds: list[Any]) -> list[int]:
        """The loop in Python, one step call per token, for a step that runs on another
        device (or with kernels without a native form): the windows are arrays here, fed
        each step; of its results the new positions are copied and the logits read."""
        g, r, size, prompt = self.g, self.r, self.size, self.prompt
        caches = [feeds[i] for i, _ in g.cache]
        chosen = self.prefill(step, caches)
        tokens: list[int] = []
        filled = prompt
        mask, token, position = feeds[g.mask], feeds[g.ids], feeds[g.positions]
        mask[0, :prompt] = mask[0, size] = 1

        def keep(results: Sequence[np.ndarray]) -> int:
            """The step's new keys and values into the windows at `filled`; its choice."""
            for cache, (_, o), axis in zip(caches, g.cache, r.axes, strict=True):
                _at(cache, axis, filled)[...] = _at(results[o], axis, size)
            return int(np.argmax(results[g.logits][0, -1]))
        while self.first(chosen, tokens):
            token[0, 0], position[0, 0] = chosen, filled
            chosen = step._reading(feeds, keep)
            mask[0, filled] = 1
            filled += 1
        return tokens


    def on_device(self, step: EntryPoint, feeds: list[Any], device: CudaDevice) -> list[int]:
        """The loop for a step whose caches a device computes (cuda): the windows and the
        step's presents are device arrays the loop holds for the call, so the cache never
        crosses to the host after the prefill's upload: per token the step reads the windows
        and writes the presents there (the runtime's device-to-device copies into and out
        of its buffers), the new position moves device to device, and only the token, its
        position, the mask and the logits cross."""
        g, r, size, prompt = self.g, self.r, self.size, self.prompt
        outputs = step.signature.outputs
        at = {r.batch: 1, r.past: size, r.seq: 1}
        out: list[Any] = [np.empty(t.static_shape, t.dtype.numpy)
                          for t in (o.evaluate(at) for o in outputs)]
        held: list[DeviceArray] = []
        try:
            windows = []
            for i, o in g.cache:
                window, present = (_device_array(device, t.evaluate(at), held)
                                   for t in (r.inputs[i], outputs[o]))
                windows.append(window)
                feeds[i], out[o] = window, present
            host = [np.zeros(w.shape, w.dtype) for w in windows]
            chosen = self.prefill(step, host)
            for window, cache in zip(windows, host, strict=True):  # the one upload
                device.write(device.borrow(_address(window), cache.nbytes),
                             cache.reshape(-1).view(np.uint8))
            copies = [_slot(_address(w), w.shape, _address(out[o]), out[o].shape,
                            w.dtype.itemsize, axis, size)
                      for w, (_, o), axis in zip(windows, g.cache, r.axes, strict=True)]
            mask, token, position = feeds[g.mask], feeds[g.ids], feeds[g.positions]
            mask[0, :prompt] = mask[0, size] = 1
            tokens: list[int] = []
            filled = prompt
            while self.first(chosen, tokens):
                token[0, 0], position[0, 0] = chosen, filled
                step(*feeds, out=out)
                for c in copies:
                    device.copy_rows(c.dst + filled * c.bytes, c.dst_stride, c.src,
                                     c.src_stride, c.bytes, c.outer)
                chosen = int(np.argmax(out[g.logits][0, -1]))
                mask[0, filled] = 1
                filled += 1
            return tokens
        finally:
            device.wait()
            for array in held:
                array.release()


def _device_array(device: CudaDevice, t: TensorType, held: list[DeviceArray]) -> DeviceArray:
    """A zeroed device array of type `t` (static), added to `held`."""
    buffer = device.export(t.static_nbytes)
    array = DeviceArray(device, buffer, np.dtype(t.dtype.storage), t.static_shape)
    held.append(array)
    device.zero(buffer)
    return array


def _address(array: DeviceArray) -> int:
    return array.__cuda_array_interface__["data"][0]


class Slot(NamedTuple):
    """How a decode step's new position (`size`, after the window, in its present) moves to
    its place in the window (at `filled`): `bytes` from each of `outer` blocks (a head
    each) of the present, `src_stride` apart, to the window's blocks `dst_stride` apart, at
    `dst + filled * bytes`. Its fields are GENERATE's copy record (`threads.COPY_FIELDS`)
    and `CudaDevice.copy_rows`' arguments."""

    src: int
    dst: int
    outer: int
    src_stride: int
    dst_stride: int
    bytes: int


def _slot(past: int, past_shape: tuple[int, ...], present: int,
          present_shape: tuple[int, ...], itemsize: int, axis: int, size: int) -> Slot:
    """The `Slot` of a past window at address `past` and its present at `present` (host or
    device memory), the cache's positions along `axis`."""
    inner = itemsize * math.prod(present_shape[axis + 1:])
    return Slot(present + size * inner, past, math.prod(present_shape[:axis]),
                present_shape[axis] * inner, past_shape[axis] * inner, inner)


def _at(array: np.ndarray, axis: int, index: int | slice) -> np.ndarray:
    """array[..., index, ...] along `axis`: a view."""
    return array[(slice(None),) * axis + (index,)]
