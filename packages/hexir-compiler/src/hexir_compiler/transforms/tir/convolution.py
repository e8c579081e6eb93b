"""The cpu schedules of `hexir.conv`: register tiles of fused multiply-adds, no per-element
branches in the inner loop.

Three schedules, by how many output channels a group has (Mg = M / group) and the window:

- channel panels (Mg > 1: ordinary, grouped and 1x1 convs): an implicit GEMM whose rows are
  output pixels and whose columns are a group's output channels. A block is `rows` neighbouring
  pixels (the output's spatial positions flattened, so a 7x7 map wastes nothing) by `width`
  channels (`schedule.conv_tile`: 4 x 16 f32 at x86-64-v3, eight ymm accumulators; 8 x 32 at
  v4, sixteen zmm), summed in registers over the kernel window (outer loops) and the group's
  input channels (the innermost loop): each step loads the panel's weights (`width / lanes`
  vectors), broadcasts one input value per pixel and does rows x vectors vector multiply-adds
  (`contract`: FMA where the level has it). The vectors are written out
  (`KernelBuilder.load_vector`, `splat`, `lane`), not left to LLVM's SLP vectorizer: that one
  vectorized the same loops or gave up on them by what followed them (ResNet-18's 56x56 3x3
  conv with a residual add in its epilogue ran as scalar FMAs with the sums on the stack: 88.8
  against 13.9 ms for the conv without it, one profile at x86-64-v3; explicit vectors, 19.9 and
  16.7 on the same loaded machine). A constant weight is packed at compile time (hexir-lower-to-
  tir names the layout, `packing`: [group x panels, *kernel, Cg, 16] for f32 --
  `schedule.CONV_PANEL_BYTES`, the same at every level -- zeros past the group's channels), so
  a step's weights are whole vectors, a tile of several panels reading each from its own
  contiguous run (a group's last tile computes the zero columns of its last vector and stores
  only its own channels); an input weight is read where it lies. A 1x1 conv is this GEMM with a
  window of one offset. A block's pixels are neighbours, so its broadcasts read one or two
  cache lines a step and the next block reads them again from L1; the whole channel sum stays
  in registers (one thread, cpu time, ResNet-18's convs: 56x56 3x3 1.98x ORT with pixels a
  block apart against 2.30x; summing the channels in L1-sized slices with the partial sums kept
  in the destination cost 2.56x against 1.36x without).
- pixel panels (1x1, stride 1, unpadded, a plane of at least a vector: `uses_pixel_panels`): the
  same GEMM with its vectors along the pixels instead of the channels, so that the epilogue and
  the stores are vector-wide (see `_pixel_panels`); with a window, for convs of few
  multiply-adds per output (`uses_pixel_windows`: a first conv on RGB), whose channel-panel
  stores cost more than their sums (`bench/conv.py`, as below: EfficientNet-B0's 3 -> 32 3x3
  stride 2 1.63 -> 0.97x ORT, SqueezeNet's 3 -> 64 1.76 -> 0.97x).
- the channel panels' block goes out by channel (`_store_columns`): its sums transposed in
  registers (`KernelBuilder.transpose`) so that each channel's pixels -- adjacent in NCHW --
  are one vector store, the fused epilogue on the channel vectors before (a bias: one load
  a vector) or on each channel's pixels after (a residual: one load a channel). Stored lane
  by lane, each pixel's channels a plane apart, a 4 x 64 block at x86-64-v4 was 256 extracts
  and scalar stores: `bench/conv.py --target=x86-64-v4 --threads=1`, hexir / ORT before and
  after in one session: ResNet-18's 7x7 stride-2 stem 1.31 -> 1.06-1.10, its 3x3 convs
  1.06-1.17 -> 1.02-1.08, SqueezeNet's 16 -> 64 3x3 1.15 -> 1.07-1.09, ResNeXt-style grouped
  3x3 at 56x56 1.20 -> 1.09. A block with a pixel in the padding selects each of its
  broadcasts against a zero vector (LLVM: a branch per pixel, invariant in the channel
  loop), not its scalar before the broadcast (a masked load, then a broadcast from a
  register on the multiply-adds' pipes).
- pixel vectors (Mg == 1: depthwise and its like): a block is up to `schedule.depthwise_pixels`
  neighbouring pixels along the innermost output axis, one channel, the weight a broadcast
  scalar, the window unrolled: each step loads the pixels' inputs as register-wide vectors (one
  load of the run they lie in; at stride 2, the run read as whole registers, the last one
  masked, and one two-source shuffle: `KernelBuilder.load_strided`) and does a vector
  multiply-add each. A row of at most MAX_KNOWN_ROW_BLOCKS blocks (its window's innermost axis
  unrolled) is cut into blocks at compile time, so which lanes of each load fall in the padding
  is known there (`_known_lanes`: the run between the first and last lane inside, and a shuffle
  with zeros); a longer row is split into its border runs (placed at compile time the same way)
  and its interior run (the innermost axis's windows inside the input), each in power-of-two
  blocks; a window too wide to unroll is a loop over its outer axes with its innermost axis's
  offsets unrolled, so its border lanes are placed at compile time too (they were gathered one
  by one: ConvNeXt's 7x7 depthwise at 56x56, 28x28 and 14x14, hexir / ORT as below, 3.24, 5.28,
  6.06 -> 1.65, 1.97, 1.65-1.83, the last as a plane). A small stride-1 plane whose rows are as
  wide as the input's is one grid iteration (`_plane_vectors`): vectors along its flattened
  pixels, every block and window offset placed at compile time. Measured with `bench/conv.py
  --target=x86-64-v4 --threads=1 --clock=cpu` (hexir / ORT, before and after, one session each,
  load average 5-7): 5x5 depthwise at 7x7 9.20 -> 1.26-1.31, at 14x14 2.68 -> 1.14-1.26, at
  28x28 2.43 -> 2.30, 5x5 stride 2 at 56x56 3.61 -> 1.80, MobileNetV2's 3x3 at 14x14 1.80 ->
  0.75-0.92, at 7x7 1.76 -> 0.86-1.16, stride 2 at 56x56 2.28 -> 1.41 (its rows had gathered
  their border lanes one by one and loaded a stride-2 run of 31 elements, which LLVM split into
  five loads and their shuffles). Written as vectors for the reason the panels are: LLVM
  compiled these loops to scalar FMAs (MobileNetV2's 56x56 depthwise 3x3, one thread: 4.55x ORT
  scalar, 2.26x as vectors; stride 2: 3.19x, 2.68x). A block's pixels being neighbours along the
  innermost axis, the fused epilogue runs on the sum vectors and each is one vector store where
  its formulas take vectors (`kernel.Epilogue.vectors`): lane by lane, the bias, the relu's
  compare and blend and the store were scalar instructions per pixel, more than the window's
  vector FMAs (the same conv with bias + relu at x86-64-v4, one thread: 2.42x ORT lane by lane,
  1.04x on vectors; stride 2: 2.39x, 1.19x).

Padding: a block whose every window lies inside the input (its "interior", decided once per
block; for pixel vectors, along the outer axes once per row) runs a copy of the loops with no
masks at all; a border block runs a copy where each pixel's position per kernel offset is
clamped into the input and its value replaced by 0 outside (a select, invariant in the channel
loop): padding adds 0, as the reference's zero padding does. A channel-panel border block's
window loops run only the offsets that read the input for one of its pixels at least
(`Geometry.reached`, from the block's highest and lowest base; the others would add only zeros):
an atrous conv's window lies mostly in the padding (DeepLabV3's ASPP: a 3x3 conv of dilation 12
on a 14x14 map, every block a border block, 396 of its 1764 pixel x offset steps reach the
input: `bench/conv.py`, hexir / ORT 3.27 -> 0.85 in one session, the model 1.43 -> 1.08), and a
3x3 conv's first and last rows skip a third of their window. Strides and dilations are affine
index arithmetic. The parallel loop (the cpu grid) is batch x groups x channel panels x chunks
of pixel blocks (TARGET_ITERATIONS; the chunks outside the panels where the input outweighs the
weight: `_grid`), batch x channels x rows, or batch x channels (a small depthwise plane); the
sums go through the fused epilogue (bias, activation, residual add) at the store. No output is
computed twice.
"""

from __future__ import annotations

import functools
import itertools
import math as pymath
from collections.abc import Callable, Sequence

from hexir_compiler import symbolic
from hexir_compiler.mlir import arith, ir, vector
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.contraction import PANEL, _multiply_add
from hexir_compiler.transforms.tir.kernel import Epilogue, GraphOp
from hexir_compiler.transforms.tir.schedule import (
    PIXEL_PANEL_INPUTS,
    conv_panel,
    conv_tile,
    depthwise_pixels,
    pixel_panel,
    register_lanes,
)

#: The most window offsets a pixel-vector block unrolls (5 x 5): its steps are a few vector
#: multiply-adds each, too few to pay for a loop of their own (a 3 x 3 depthwise conv's
#: window loops ran 1 step of 4 vectors per iteration).
MAX_UNROLLED_WINDOW = 25
#: Independent sums a pixel-vector block with an unrolled window keeps at least: a block
#: of fewer vectors sums each in several chains (window offset i into chain i mod chains),
#: added at the end. One chain a vector was a row of dependent FMAs, one latency each (4
#: cycles) where the core could start two a cycle -- EfficientNet's 5x5 depthwise at
#: 28x28, rows of 16 + 8 + 4 pixels, a block a vector: 25 FMAs in a row per block
#: (`bench/conv.py --target=x86-64-v4 --threads=1`, hexir / ORT before and after in one
#: session: 1.84 -> 1.59; its stride-2 5x5 at 56x56, 2.33 -> 1.86; MobileNetV2's 3x3 at
#: 56x56, 1.24 -> 1.10-1.23).
DEPTHWISE_CHAINS = 4
#: The most vector x window-offset steps a depthwise plane unrolls (`_plane_vectors`): at
#: x86-64-v4 (16 f32 a vector) a 14x14 plane under a 5x5 window (325) or a 7x7 one (637:
#: ConvNeXt's, 1.65-1.83x ORT as a plane, 2.40 by rows) or a 28x28 one under a 3x3 window
#: (441), not a 28x28 plane under a 5x5 window (1225).
MAX_PLANE_STEPS = 640
#: A depthwise row of at most this many blocks (`schedule.depthwise_pixels` pixels each) is
#: cut into blocks at compile time whose padding lanes are known (`_known_lanes`) when its
#: window's innermost axis is unrolled: 256 pixels at v4, every row of the CNNs' 112x112
#: maps and below.
MAX_KNOWN_ROW_BLOCKS = 4
#: The most multiply-adds per output (input channels a group x window) of a conv with a
#: window that takes the pixel-vector form (`uses_pixel_windows`): a 3x3 conv on three
#: colour channels (27) and less. As channel panels such a conv's block of 4 pixels x 64
#: channels did 27 steps of 16 multiply-adds and then 256 single-lane stores, each pixel's
#: 64 channels a plane apart (SqueezeNet 1.1's 3 -> 64 3x3 stride-2 conv: 4.76 ms, 20% of
#: the model, at 8.9 GFLOP/s).
MAX_PIXEL_WINDOW_MACS = 32
#: The least share of its vectors' lanes a 1x1 conv's plane fills for the pixel-vector form
#: (`uses_pixel_panels`): each vector of the plane's rest costs a whole one, a 7x7 plane's
#: 49 pixels at v4 four vectors (77%), and the channel panels waste less there (a block of 4
#: pixels, the 49th one a quarter block): `bench/conv.py --target=x86-64-v4 --threads=1`,
#: hexir / ORT, pixel vectors against channel panels: EfficientNet's 320 -> 1280 at 7x7
#: 1.13 against 1.04, ResNeXt-style 400 -> 400 at 7x7 1.08 against 1.03, SqueezeNet's
#: 512 -> 1000 at 13x13 (88%) 1.04 against 1.02; at 14x14 (94%) 1.00 against 1.13.
PIXEL_PANEL_FILL = 0.9
#: Parallel iterations a conv kernel aims for (batch x panels x pixel chunks): enough to
#: balance a thread pool of a few cores; each chunk keeps at least MIN_CHUNK_BLOCKS blocks.
TARGET_ITERATIONS = 32
MIN_CHUNK_BLOCKS = 4


class Geometry:
    """Shapes and window parameters of one conv (`op`'s, checked by the caller)."""

    def __init__(self, op: GraphOp) -> None:
        x, w = op.inputs[:2]
        self.batch, self.channels, self.spatial = x[0], x[1], list(x[2:])
        self.group = op.int_attr("group")
        self.strides, self.pads = op.ints_attr("strides"), op.ints_attr("pads")
        self.dilations = op.ints_attr("dilations")
        self.kernel = list(w[2:])
        self.per_group_in, self.per_group_out = w[1], w[0] // self.group
        self.out = list(op.output[2:])
        rank = len(self.spatial)
        # which bounds a window can cross: low where there is begin padding, high where the
        # last output's window reaches past the input's end
        self.low = [self.pads[d] > 0 for d in range(rank)]
        self.high = [(self.out[d] - 1) * self.strides[d] - self.pads[d]
                     + (self.kernel[d] - 1) * self.dilations[d] >= self.spatial[d]
                     for d in range(rank)]
        self.padded = any(self.low) or any(self.high)

    @property
    def pixels_outside(self) -> bool:
        """Whether the cpu grid runs its chunks of output pixels outside its channel tiles:
        when an image's input is at least as large as the weight (`_grid`)."""
        weight = self.group * self.per_group_out * self.per_group_in * pymath.prod(self.kernel)
        return self.channels * pymath.prod(self.spatial) >= weight

    def inside_range(self, d: int) -> tuple[int, int]:
        """[first, end) of the output positions along dim `d` whose windows lie inside the
        input along it (first <= end)."""
        size, s, p = self.out[d], self.strides[d], self.pads[d]
        first = min(size, -(-p // s)) if self.low[d] else 0
        if not self.high[d]:
            return first, size
        last = self.spatial[d] - 1 - (self.kernel[d] - 1) * self.dilations[d] + p
        return first, max(first, min(size, last // s + 1 if last >= 0 else 0))

    def base(self, b: KernelBuilder, outs: Sequence[ir.Value]) -> list[ir.Value]:
        """The input position of kernel offset 0 for output position `outs` (may be < 0)."""
        return [arith.subi(b.mul(o, s), b.index(p)) if p else b.mul(o, s)
                for o, s, p in zip(outs, self.strides, self.pads, strict=False)]

    def interior(self, b: KernelBuilder, bases: Sequence[Sequence[ir.Value]],
                 dims: Sequence[int]) -> ir.Value | None:
        """Whether every window at `bases` (one per pixel) lies inside the input along
        `dims`; None when none can cross."""
        checks = []
        for base in bases:
            for d in dims:
                at = base[d]
                if self.low[d]:
                    checks.append(arith.cmpi(arith.CmpIPredicate.sge, at, b.index(0)))
                if self.high[d]:
                    last = self.spatial[d] - 1 - (self.kernel[d] - 1) * self.dilations[d]
                    checks.append(arith.cmpi(arith.CmpIPredicate.sle, at, b.index(last)))
        return b.all_of(checks)

    def reached(self, b: KernelBuilder, bases: Sequence[Sequence[ir.Value]],
                d: int) -> int | tuple[ir.Value, ir.Value]:
        """The kernel offsets along dim `d` whose input lies inside it for some pixel at
        `bases` (one base per pixel): the whole extent where no window crosses a bound along
        `d`, else [first, end) computed from the block's highest and lowest base (an offset
        k is inside for base p when 0 <= p + k * dilation < size)."""
        k, dilation = self.kernel[d], self.dilations[d]
        if not (self.low[d] or self.high[d]):
            return k
        at = [base[d] for base in bases]
        zero = first = b.index(0)
        end = b.index(k)
        if self.low[d]:  # ceil(-p / dilation) for the highest base p, 0 when p >= 0
            behind = arith.maxsi(arith.subi(zero, functools.reduce(arith.maxsi, at)), zero)
            first = arith.minsi(arith.divui(arith.addi(behind, b.index(dilation - 1)),
                                            b.index(dilation)), end)
        if self.high[d]:  # floor((size - 1 - p) / dilation) + 1 for the lowest base p
            room = arith.subi(b.index(self.spatial[d] - 1 + dilation),
                              functools.reduce(arith.minsi, at))
            end = arith.minsi(arith.divui(arith.maxsi(room, zero), b.index(dilation)), end)
        return first, end

    def position(self, b: KernelBuilder, base: Sequence[ir.Value], ks: Sequence[ir.Value],
                 masked: Sequence[int]) -> tuple[list[ir.Value], ir.Value | None]:
        """(input position at kernel offsets `ks`, clamped into the input along the `masked`
        dims; whether it is inside, when it can be outside along them)."""
        at, inside = [], []
        for d, (start, k) in enumerate(zip(base, ks, strict=True)):
            pos = arith.addi(start, b.mul(k, self.dilations[d]))
            if d in masked and (self.low[d] or self.high[d]):
                if self.low[d]:
                    inside.append(arith.cmpi(arith.CmpIPredicate.sge, pos, b.index(0)))
                    pos_low = arith.maxsi(pos, b.index(0))
                else:
                    pos_low = pos
                if self.high[d]:
                    inside.append(arith.cmpi(arith.CmpIPredicate.slt, pos,
                                             b.index(self.spatial[d])))
                    pos = arith.minsi(pos_low, b.index(self.spatial[d] - 1))
                else:
                    pos = pos_low
            at.append(pos)
        return at, b.all_of(inside)


def uses_panels(op: GraphOp) -> bool:
    """Whether `op` takes the channel-panel schedule (else pixel vectors)."""
    w = op.inputs[1]
    return w[0] // op.int_attr("group") > 1


def uses_pixel_panels(op: GraphOp, level: int, element_bytes: int,
                      epilogue: Epilogue | None) -> bool:
    """Whether a channel-panel conv takes the pixel-vector form (`_pixel_panels`): 1x1,
    stride 1, no padding, fewer input channels a group than `schedule.PIXEL_PANEL_INPUTS` at
    `level`, a plane of at least a vector's pixels at `level` that fills its vectors
    (PIXEL_PANEL_FILL) and an epilogue that takes vectors (or none)."""
    x, w = op.inputs[:2]
    limit = PIXEL_PANEL_INPUTS[level]
    if not uses_panels(op) or any(k != 1 for k in w[2:]) or len(x) < 3 or \
            (limit is not None and w[1] >= limit):
        return False
    if any(s != 1 for s in op.ints_attr("strides")) or any(op.ints_attr("pads")):
        return False
    pixels, lanes = pymath.prod(x[2:]), register_lanes(level, element_bytes)
    full, rest = divmod(pixels, lanes)  # the rest: a vector per power of two (`_blocks_from`)
    return full > 0 and pixels >= PIXEL_PANEL_FILL * lanes * (full + rest.bit_count()) and (
        epilogue is None or epilogue.vectors)


def uses_pixel_windows(op: GraphOp, level: int, element_bytes: int,
                       epilogue: Epilogue | None) -> bool:
    """Whether a channel-panel conv with a window takes the pixel-vector form
    (`_pixel_windows`): at most MAX_PIXEL_WINDOW_MACS multiply-adds per output (a network's
    first conv, on three colour channels), an unrolled window, strides of at most 2 along
    the rows, rows of at least a vector's pixels and of at most MAX_KNOWN_ROW_BLOCKS x
    `schedule.depthwise_pixels`, and an epilogue that takes vectors (or none)."""
    if not uses_panels(op) or uses_pixel_panels(op, level, element_bytes, epilogue):
        return False
    g = Geometry(op)
    width = g.out[-1] if g.out else 0
    return (g.per_group_in * pymath.prod(g.kernel) <= MAX_PIXEL_WINDOW_MACS
            and pymath.prod(g.kernel) <= MAX_UNROLLED_WINDOW and len(g.out) >= 1
            and g.strides[-1] <= 2
            and register_lanes(level, element_bytes) <= width
            <= MAX_KNOWN_ROW_BLOCKS * depthwise_pixels(level, element_bytes)
            and (epilogue is None or epilogue.vectors))


def panel_columns(element_bytes: int, per_group_out: int) -> int:
    """Output channels per packed panel of a constant weight: `schedule.conv_panel`, the same
    at every level, or a group's channels when fewer."""
    return max(1, min(conv_panel(element_bytes), per_group_out))


def tile_columns(level: int, element_bytes: int, per_group_out: int, panel: int | None) -> int:
    """Output channels of a block at `level`: the level's tile width (a whole number of
    packed panels of `panel` channels, when the weight is packed), or a group's channels --
    rounded up to whole panels -- when fewer."""
    columns = conv_tile(level, element_bytes)[1]
    if panel is None:
        return max(1, min(columns, per_group_out))
    return min(max(columns // panel, 1) * panel, -(-per_group_out // panel) * panel)


def emit_cpu(b: KernelBuilder, op: GraphOp, epilogue: Epilogue | None) -> None:
    """The cpu conv of `op` (see the module docstring), inside `b.building()`."""
    g = Geometry(op)
    if 0 in (g.batch, g.per_group_out, pymath.prod(g.out), g.group):
        return  # no outputs
    if uses_pixel_panels(op, b.host_level, ir.FloatType(b.element).width // 8, epilogue):
        _pixel_panels(b, op, g, epilogue)
    elif uses_pixel_windows(op, b.host_level, ir.FloatType(b.element).width // 8, epilogue):
        _pixel_windows(b, op, g, epilogue)
    elif uses_panels(op):
        _panels(b, op, g, epilogue)
    elif uses_plane_vectors(g, b.host_level, ir.FloatType(b.element).width // 8):
        _plane_vectors(b, g, epilogue)
    else:
        _pixel_vectors(b, g, epilogue)


def uses_plane_vectors(g: Geometry, level: int, element_bytes: int) -> bool:
    """Whether a pixel-vector conv (Mg == 1) takes the whole-plane form (`_plane_vectors`):
    2-D, stride 1, output rows as wide as the input's (so that a plane's neighbouring
    output pixels read neighbouring input elements at every window offset), and a plane
    small enough to unroll: at most MAX_PLANE_STEPS vectors x window offsets at `level`."""
    if len(g.out) != 2 or any(s != 1 for s in g.strides) or g.out[1] != g.spatial[1]:
        return False
    vectors = -(-pymath.prod(g.out) // register_lanes(level, element_bytes))
    return vectors * pymath.prod(g.kernel) <= MAX_PLANE_STEPS


def _chunks(b: KernelBuilder, outer: int, blocks: int) -> int:
    """Chunks of pixel blocks per outer iteration (batch x panels)."""
    if blocks == 0:
        return 1
    wanted = -(-TARGET_ITERATIONS // max(1, symbolic.least(outer)))
    return max(1, min(wanted, blocks // MIN_CHUNK_BLOCKS))


def _grid(b: KernelBuilder, g: Geometry, flat: ir.Value, tiles: int,
          chunks: int) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
    """(image, group, channel tile, pixel chunk) of the channel panels' cpu grid iteration
    `flat`. The pool gives each thread a contiguous range of the grid (`hal/threads.py`).
    With the tiles outside, a thread computes some channels of the whole plane and reads
    the whole input; with the pixel chunks outside (`Geometry.pixels_outside`), all the
    channels of part of the plane, reading that part of the input and the whole weight. A
    conv's input was mostly written by the kernel before it, split among the threads by
    channel (a depthwise conv's grid, an element-wise kernel's flat range), and a line
    another core wrote is slow to read on the machines we measure on (`hal/threads.py`):
    with the pixels outside, a thread reads half as much of the other's part (two
    threads). Where the weight is the larger (ResNet-18's 3x3s past its first stage),
    each thread would read all of it, and the tiles stay outside.
    `bench/models.py --baseline`, default threads, hexir / ORT in one run, before -> after:
    MobileNetV2 1.34 -> 1.24, SqueezeNet 1.1 1.25 -> 1.22, ResNet-18 1.20 -> 1.11,
    EfficientNet-B0 1.25 -> 1.24, ShuffleNetV2 0.94 -> 0.93, ConvNeXt-T 1.03 -> 1.05
    (in an earlier run the pixels outside for every conv: MobileNetV2 1.30 -> 1.22, the
    others within 0.05, as noisy as this machine's runs are)."""
    if g.pixels_outside:
        n, group, chunk, tile = b.delinearize(flat, [g.batch, g.group, chunks, tiles])
    else:
        n, group, tile, chunk = b.delinearize(flat, [g.batch, g.group, tiles, chunks])
    return n, group, tile, chunk


def _blocks_of(b: KernelBuilder, chunk: ir.Value, chunks: int, full: int, rows: int,
               remainder: int, body: Callable[[ir.Value | int, int], None]) -> None:
    """Run `body(block index, 0)` for this chunk's full blocks (contiguous ranges of `full`),
    and for the last chunk `body(first pixel, remainder)` for the pixels past them."""
    per = -(-full // chunks) if full else 0
    if per:
        with b.loop(per, "serial") as i:
            block = arith.addi(b.mul(chunk, per), i)
            with b.guard(b.less_than(block, full) if per * chunks > full else None):
                body(block, 0)
    if remainder:
        last = arith.cmpi(arith.CmpIPredicate.eq, chunk, b.index(chunks - 1))
        with b.guard(last if chunks > 1 else None):
            body(full * rows, remainder)


def _split_interior(b: KernelBuilder, g: Geometry, bases: Sequence[Sequence[ir.Value]],
                    dims: Sequence[int], run: Callable[[list[int]], None]) -> None:
    """`run(masked dims)`: none of `dims` masked when every window of the block lies inside
    the input along them, all of them otherwise."""
    inside = g.interior(b, bases, dims)
    if inside is None:
        run([])
        return
    outside = arith.cmpi(arith.CmpIPredicate.eq, inside,
                         b.constant(0, ir.IntegerType.get_signless(1)))
    with b.guard(inside):
        run([])
    with b.guard(outside):
        run(list(dims))


def _panels(b: KernelBuilder, op: GraphOp, g: Geometry, epilogue: Epilogue | None) -> None:
    data, weight, *_, out = b.args
    packed = PANEL in op.attributes
    element_bytes = ir.FloatType(b.element).width // 8
    rows, _ = conv_tile(b.host_level, element_bytes)
    panel_width = ir.MemRefType(weight.type).shape[-1] if packed else 0  # 0: not packed
    width = tile_columns(b.host_level, element_bytes, g.per_group_out, panel_width or None)
    lanes = register_lanes(b.host_level, element_bytes)
    if width % lanes:
        lanes = width  # one vector of a narrow tile's columns
    panels_per_group = -(-g.per_group_out // panel_width) if packed else 0
    per_group = -(-g.per_group_out // width)
    tail = g.per_group_out - (per_group - 1) * width  # the last tile's columns
    pixels = pymath.prod(g.out)
    rows = max(1, min(rows, pixels))
    full, remainder = divmod(pixels, rows)
    outer = g.batch * g.group * per_group
    chunks = _chunks(b, outer, full)
    # a whole block's sums go out by channel, its pixels one vector (`_store_columns`)
    by_columns = rows > 1 and rows & (rows - 1) == 0 and lanes % rows == 0 and (
        epilogue is None or epilogue.vectors)
    with b.loop(outer * chunks, "parallel") as flat:
        n, group, panel, chunk = _grid(b, g, flat, per_group, chunks)
        first_in = b.mul(group, g.per_group_in)
        first_out = arith.addi(b.mul(group, g.per_group_out), b.mul(panel, width))
        if packed:  # the tile's first packed panel: a tile is whole panels, or one narrower
            panel_at = arith.addi(b.mul(group, panels_per_group),
                                  b.mul(panel, max(1, width // panel_width)))

        def block(index: ir.Value | int, short: int, columns: int) -> None:
            count = short or rows
            if short:  # pixels past the full blocks, from pixel `index` on
                flats = [b.index(index + j) for j in range(short)]
            else:  # neighbouring pixels: their inputs share cache lines
                first_pixel = b.mul(index, rows)
                flats = [first_pixel, *(arith.addi(first_pixel, b.index(j))
                                        for j in range(1, rows))]
            outs = [b.delinearize(p, g.out) for p in flats]
            bases = [g.base(b, o) for o in outs]
            channels = [first_out, *(arith.addi(first_out, b.index(t))
                                     for t in range(1, columns))]
            vectors = -(-columns // lanes)  # a last tile's vectors past its channels: none
            zero = b.float(0.0)
            zeros = b.splat(zero, lanes)

            def run(masked: list[int]) -> None:
                def step(ivs: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
                    *ks, c = ivs
                    channel = arith.addi(first_in, c)
                    if packed:  # whole vectors: zeros past a group's last channel
                        ys = [b.load_vector(weight, [
                            arith.addi(panel_at, b.index(v * lanes // panel_width)),
                            *ks, c, b.index(v * lanes % panel_width)], lanes)
                            for v in range(vectors)]
                    else:
                        ys = [b.vector_of([b.load(weight, [channels[t], c, *ks])
                                           if t < columns else zero
                                           for t in range(v * lanes, (v + 1) * lanes)])
                              for v in range(vectors)]
                    xs = []
                    for base in bases:
                        at, inside = g.position(b, base, ks, masked)
                        value = b.load(data, [n, channel, *at])
                        xs.append(b.splat(value, lanes) if inside is None else
                                  arith.select(inside, b.splat(value, lanes), zeros))
                    return _multiply_add(acc, xs, ys)

                window = [g.reached(b, bases, d) if d in masked else g.kernel[d]
                          for d in range(len(g.kernel))]
                sums = b.fold([*window, g.per_group_in], [b.splat(zero, lanes)] *
                              (count * vectors), step)
                if not short and by_columns:
                    _store_columns(b, sums, outs, channels, columns, lanes, n, epilogue)
                    return
                for r, o in enumerate(outs):
                    for v in range(vectors):
                        total = sums[r * vectors + v]
                        mine = range(v * lanes, min(columns, (v + 1) * lanes))
                        on_vector = epilogue is not None and epilogue.vectors and \
                            len(mine) == lanes  # a last tile's partial vector: by lanes
                        if on_vector and epilogue is not None:  # on the channels' vector
                            total = epilogue(b, total, [n, channels[mine[0]], *o], axis=1)
                        for t in mine:
                            at = [n, channels[t], *o]
                            value = b.lane(total, t % lanes)
                            if epilogue is not None and not on_vector:
                                value = epilogue(b, value, at)
                            b.store(value, out, at)

            _split_interior(b, g, bases, range(len(g.out)), run)

        def blocks(columns: int) -> None:
            _blocks_of(b, chunk, chunks, full, rows, remainder,
                       lambda index, short: block(index, short, columns))

        _by_tile(b, panel, per_group, width, tail, blocks)


def _store_columns(b: KernelBuilder, sums: Sequence[ir.Value], outs: Sequence[list[ir.Value]],
                   channels: Sequence[ir.Value], columns: int, lanes: int, n: ir.Value,
                   epilogue: Epilogue | None) -> None:
    """Store a whole block of channel panels -- `sums[r * vectors + v]`: pixel r's channels
    v * lanes on, the pixels neighbours in the flattened plane -- as one vector of the
    block's pixels per channel (`KernelBuilder.transpose`): in NCHW a channel's pixels are
    adjacent, its channels a plane apart. The epilogue runs on the channel vectors before
    the transposition where its operands do not vary along the plane (a bias: one load a
    vector, its ops on `rows` vectors), else on each channel's pixels after it (a residual:
    one load a channel, where along the channels it was gathered lane by lane)."""
    rows, rank = len(outs), len(outs[0])
    vectors = len(sums) // rows
    plane = tuple(range(2, 2 + rank))
    late = epilogue is not None and epilogue.varies_along(plane, 2 + rank)
    for v in range(vectors):
        mine = range(v * lanes, min(columns, (v + 1) * lanes))
        pixels = [sums[r * vectors + v] for r in range(rows)]
        if epilogue is not None and not late and len(mine) == lanes:
            pixels = [epilogue(b, p, [n, channels[mine[0]], *o], axis=1)
                      for p, o in zip(pixels, outs, strict=True)]
        for t, column in zip(mine, b.transpose(pixels)[:len(mine)], strict=True):
            at = [n, channels[t], *outs[0]]
            if epilogue is not None and (late or len(mine) < lanes):
                column = epilogue(b, column, at, axis=plane)
            b.store_vector(column, b.args[-1], at)


def _pixel_panels(b: KernelBuilder, op: GraphOp, g: Geometry,
                  epilogue: Epilogue | None) -> None:
    """A 1x1 conv as a GEMM whose vectors run along the pixels (`uses_pixel_panels`): a
    block is a vector of neighbouring pixels of the output plane -- flattened: a 1x1
    stride-1 unpadded conv's input and output planes are indexed alike, so a vector may
    span rows -- by `schedule.pixel_panel` output channels, one accumulator vector per
    channel; each step over the group's input channels loads the pixels' inputs as one
    vector and multiplies it by each channel's weight, a broadcast scalar (an FMA's
    broadcast operand at v4). The sums, a vector per channel along the pixels, go through
    the epilogue and the store a vector at a time. The cpu grid is batch x groups x channel
    tiles x chunks of the plane's vectors (`_chunks`); the plane's last pixels are
    power-of-two vectors past the last whole one. Cut by rows instead, a 13x13 or 7x7 plane
    had no row of a vector's pixels and took the channel panels, whose stores are lane by
    lane, each pixel's channels a plane apart (`bench/conv.py --target=x86-64-v4
    --threads=1 --clock=cpu`, hexir / ORT before and after: EfficientNet-B0's 112 -> 672 at
    14x14 1.31 -> 0.93, MobileNetV2's 144 -> 32 at 28x28 1.30 -> 1.12; SqueezeNet's
    512 -> 1000 at 13x13 and EfficientNet's 320 -> 1280 at 7x7, 1.07 and 1.10 either way)."""
    data, weight, *_, out = b.args
    packed = PANEL in op.attributes
    element_bytes = ir.FloatType(b.element).width // 8
    lanes = register_lanes(b.host_level, element_bytes)
    width = min(pixel_panel(b.host_level), g.per_group_out)
    panel_width = ir.MemRefType(weight.type).shape[-1] if packed else 0
    panels_per_group = -(-g.per_group_out // panel_width) if packed else 0
    rank = len(g.out)
    per_group = -(-g.per_group_out // width)
    tail = g.per_group_out - (per_group - 1) * width
    pixels = pymath.prod(g.out)
    full, remainder = divmod(pixels, lanes)
    outer = g.batch * g.group * per_group
    chunks = _chunks(b, outer, full)
    plane = tuple(range(2, 2 + rank))  # the epilogue's lanes run along the flat plane
    with b.loop(outer * chunks, "parallel") as flat:
        n, group, tile, chunk = _grid(b, g, flat, per_group, chunks)
        first_in = b.mul(group, g.per_group_in)
        first_out = arith.addi(b.mul(group, g.per_group_out), b.mul(tile, width))
        in_group = b.mul(tile, width)  # the tile's first channel within its group

        def weights(c: ir.Value, columns: int, count: int) -> list[ir.Value]:
            values = []
            for t in range(columns):
                q = arith.addi(in_group, b.index(t))
                if packed:
                    at = [arith.addi(b.mul(group, panels_per_group),
                                     arith.divui(q, b.index(panel_width))),
                          *([b.index(0)] * rank), c, arith.remui(q, b.index(panel_width))]
                else:
                    at = [arith.addi(b.mul(group, g.per_group_out), q), c,
                          *([b.index(0)] * rank)]
                values.append(b.splat(b.load(weight, at), count))
            return values

        def block(columns: int, start: ir.Value, count: int) -> None:
            zero = b.float(0.0)
            where = b.delinearize(start, g.out)

            def step(ivs: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
                (c,) = ivs
                x = b.load_vector(data, [n, arith.addi(first_in, c), *where], count)
                return _multiply_add(acc, [x], weights(c, columns, count))

            sums = b.fold([g.per_group_in], [b.splat(zero, count)] * columns, step)
            for t, total in enumerate(sums):
                at = [n, arith.addi(first_out, b.index(t)), *where]
                b.store_vector(total if epilogue is None else
                               epilogue(b, total, at, axis=plane), out, at)

        def tiles(columns: int) -> None:
            def body(index: ir.Value | int, short: int) -> None:
                if not short:  # a whole vector: block `index`
                    block(columns, b.mul(index, lanes), lanes)
                    return
                for first, count in _blocks_from(index, short, lanes):  # the plane's rest
                    block(columns, b.index(first), count)
            _blocks_of(b, chunk, chunks, full, lanes, remainder, body)

        _by_tile(b, tile, per_group, width, tail, tiles)


def _pixel_windows(b: KernelBuilder, op: GraphOp, g: Geometry,
                   epilogue: Epilogue | None) -> None:
    """A conv with a window and few multiply-adds per output (`uses_pixel_windows`) as
    `_pixel_panels` computes a 1x1: a block is a vector of neighbouring pixels of one output
    row by `schedule.pixel_panel` output channels, an accumulator vector per channel; each
    step (an input channel and an unrolled window offset) loads the pixels' inputs as one
    vector -- a strided run at stride 2 (`KernelBuilder.load_strided`), the padding's lanes
    zeroed by a shuffle, placed at compile time (`_known_lanes`: the row is cut into blocks
    at compile time) -- and multiplies it by each channel's weight, a broadcast scalar. The
    rows above and below the input are the outer axes' border (`_split_interior`). The sums
    go through the epilogue and the stores a vector of pixels at a time."""
    data, weight, *_, out = b.args
    packed = PANEL in op.attributes
    element_bytes = ir.FloatType(b.element).width // 8
    register = register_lanes(b.host_level, element_bytes)
    width = min(pixel_panel(b.host_level), g.per_group_out)
    panel_width = ir.MemRefType(weight.type).shape[-1] if packed else 0
    panels_per_group = -(-g.per_group_out // panel_width) if packed else 0
    inner = len(g.out) - 1
    per_group = -(-g.per_group_out // width)
    tail = g.per_group_out - (per_group - 1) * width
    rows = g.out[:-1]
    with b.loop(g.batch * g.group * per_group * pymath.prod(rows), "parallel") as flat:
        n, group, tile, *row = b.delinearize(flat, [g.batch, g.group, per_group, *rows])
        first_in = b.mul(group, g.per_group_in)
        first_out = arith.addi(b.mul(group, g.per_group_out), b.mul(tile, width))
        in_group = b.mul(tile, width)  # the tile's first channel within its group
        row_base = g.base(b, [*row, b.index(0)])

        def weights(c: ir.Value, ks: Sequence[int], columns: int, count: int) -> list[ir.Value]:
            values = []
            for t in range(columns):
                q = arith.addi(in_group, b.index(t))
                if packed:
                    at = [arith.addi(b.mul(group, panels_per_group),
                                     arith.divui(q, b.index(panel_width))),
                          *(b.index(k) for k in ks), c, arith.remui(q, b.index(panel_width))]
                else:
                    at = [arith.addi(b.mul(group, g.per_group_out), q), c,
                          *(b.index(k) for k in ks)]
                values.append(b.splat(b.load(weight, at), count))
            return values

        def block(columns: int, start: int, count: int, masked: list[int]) -> None:
            zero = b.float(0.0)
            step = g.strides[inner]

            def channel(ivs: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
                (c,) = ivs
                in_channel = arith.addi(first_in, c)
                for ks in itertools.product(*(range(k) for k in g.kernel)):
                    at, inside = g.position(b, row_base, [b.index(k) for k in ks], masked)
                    offset = ks[inner] * g.dilations[inner] - g.pads[inner]
                    cols = [(start + j) * step + offset for j in range(count)]
                    x = _known_lanes(b, data, functools.partial(
                        lambda col, prefix: [*prefix, b.index(col)],
                        prefix=[n, in_channel, *at[:-1]]),
                        cols, [0 <= col < g.spatial[inner] for col in cols], register)
                    if x is None:
                        continue
                    if inside is not None:
                        x = arith.select(inside, x, b.splat(zero, count))
                    acc = _multiply_add(acc, [x], weights(c, ks, columns, count))
                return acc

            sums = b.fold([g.per_group_in], [b.splat(zero, count)] * columns, channel)
            for t, total in enumerate(sums):
                at = [n, arith.addi(first_out, b.index(t)), *row, b.index(start)]
                b.store_vector(total if epilogue is None else epilogue(b, total, at), out, at)

        def tiles(columns: int) -> None:
            def run(masked: list[int]) -> None:
                for start, count in _blocks_from(0, g.out[-1], register):
                    block(columns, start, count, masked)
            _split_interior(b, g, [row_base], range(inner), run)

        _by_tile(b, tile, per_group, width, tail, tiles)


def _by_tile(b: KernelBuilder, tile: ir.Value, tiles: int, width: int, tail: int,
             emit: Callable[[int], None]) -> None:
    """`emit(columns)` for tile `tile` of a group's `tiles`: `width` channels, or `tail` for
    a group's last tile when it has fewer (then there are several: width < Mg)."""
    if tail == width:
        emit(width)
        return
    with b.guard(b.less_than(tile, tiles - 1)):
        emit(width)
    with b.guard(arith.cmpi(arith.CmpIPredicate.eq, tile, b.index(tiles - 1))):
        emit(tail)


def _pixel_vectors(b: KernelBuilder, g: Geometry, epilogue: Epilogue | None) -> None:
    data, weight, *_, out = b.args
    element_bytes = ir.FloatType(b.element).width // 8
    inner = len(g.out) - 1
    lanes = depthwise_pixels(b.host_level, element_bytes)
    register = register_lanes(b.host_level, element_bytes)
    first, end = g.inside_range(inner)
    rows = g.out[:-1]
    unrolled = pymath.prod(g.kernel) <= MAX_UNROLLED_WINDOW
    # the innermost axis's offsets unrolled (a loop over the others' when the whole window
    # is not), so that a block's padding lanes are known at compile time (`_known_lanes`)
    inner_unrolled = g.kernel[-1] <= MAX_UNROLLED_WINDOW
    with b.loop(g.batch * g.group * pymath.prod(rows), "parallel") as flat:
        n, m, *row = b.delinearize(flat, [g.batch, g.group, *rows])
        first_in = b.mul(m, g.per_group_in)
        row_base = g.base(b, row)

        def block(start: ir.Value, count: int, masked_inner: bool,
                  known: int | None = None) -> None:
            """`count` pixels of the row from `start` (`known`: the same, when the block is
            placed at compile time)."""
            outs = [[*row, start if j == 0 else arith.addi(start, b.index(j))]
                    for j in range(count)]
            bases = [g.base(b, o) for o in outs]
            width = min(count, register)  # lanes of a vector of the block's pixels
            zero = b.float(0.0)

            def run(masked: list[int]) -> None:
                def pixels(channel: ir.Value, ks: Sequence[ir.Value], j: int,
                           static: int | None) -> ir.Value | None:
                    """The inputs of pixels j*width ... at window offset `ks` (`static`:
                    its innermost one as an integer, when that axis is unrolled), a vector;
                    None when each is padding."""
                    mine = bases[j * width:(j + 1) * width]
                    step = g.strides[inner]
                    if masked_inner and known is not None and static is not None:
                        at, inside = g.position(b, mine[0], ks, masked)
                        offset = static * g.dilations[inner] - g.pads[inner]
                        cols = [(known + j * width + lane) * step + offset
                                for lane in range(width)]
                        vector_ = _known_lanes(
                            b, data, lambda col: [n, channel, *at[:-1], b.index(col)], cols,
                            [0 <= c < g.spatial[inner] for c in cols], register)
                    elif not masked_inner:  # every window inside along the innermost axis
                        at, inside = g.position(b, mine[0], ks, masked)
                        vector_ = b.load_strided(data, [n, channel, *at], step, width,
                                                 register)
                    else:
                        values = []
                        for base in mine:
                            at, inside = g.position(b, base, ks, [*masked, inner])
                            value = b.load(data, [n, channel, *at])
                            values.append(value if inside is None else
                                          arith.select(inside, value, zero))
                        return b.vector_of(values)
                    if vector_ is None or inside is None:
                        return vector_
                    return arith.select(inside, vector_, b.splat(zero, width))

                def step(ivs: list[ir.Value], acc: list[ir.Value],
                         static: int | None = None) -> list[ir.Value]:
                    *ks, c = ivs
                    y = b.splat(b.load(weight, [m, c, *ks]), width)
                    channel = arith.addi(first_in, c)
                    acc = list(acc)
                    for j in range(count // width):
                        x = pixels(channel, ks, j, static)
                        if x is not None:
                            acc[j] = _multiply_add([acc[j]], [x], [y])[0]
                    return acc

                vectors = count // width
                # the unrolled offsets: the window's, else its innermost axis's (in a loop
                # over the others), else none (a loop over the whole window)
                looped = [] if unrolled else g.kernel[:-1] if inner_unrolled else g.kernel
                offsets = list(itertools.product(*(range(k) for k in g.kernel[len(looped):])))
                chains = min(len(offsets), -(-DEPTHWISE_CHAINS // vectors))

                def channel(ivs: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
                    *outer, c = ivs  # (the loop's window offsets, when it has some)
                    acc = list(acc)
                    for i, ks in enumerate(offsets):  # offset i into chain i % chains
                        chain = slice(i % chains * vectors, (i % chains + 1) * vectors)
                        acc[chain] = step([*outer, *(b.index(k) for k in ks), c], acc[chain],
                                          ks[-1] if ks else None)
                    return acc

                inits = [b.splat(zero, width)] * (vectors * chains)
                sums = b.fold([*looped, g.per_group_in], inits, channel)
                sums = [functools.reduce(arith.addf, sums[j::vectors]) for j in range(vectors)]
                if epilogue is None or epilogue.vectors:  # a vector's pixels are neighbours
                    for j, total in enumerate(sums):
                        at = [n, m, *outs[j * width]]
                        b.store_vector(total if epilogue is None else epilogue(b, total, at),
                                       out, at)
                    return
                for j, o in enumerate(outs):
                    at = [n, m, *o]
                    value = b.lane(sums[j // width], j % width)
                    b.store(value if epilogue is None else epilogue(b, value, at), out, at)

            _split_interior(b, g, [row_base], range(inner), run)

        def known_blocks(lo: int, hi: int) -> None:
            for at, count in _blocks_from(lo, hi - lo, lanes):
                block(b.index(at), count, True, at)

        if inner_unrolled and g.out[-1] <= MAX_KNOWN_ROW_BLOCKS * lanes:
            known_blocks(0, g.out[-1])  # the whole row, every block placed at compile time
            return
        for lo, hi, masked_inner in ((0, first, True), (first, end, False),
                                     (end, g.out[-1], True)):
            if masked_inner and inner_unrolled and hi - lo < lanes:
                known_blocks(lo, hi)
            else:
                _runs(b, lo, hi - lo, lanes,
                      functools.partial(block, masked_inner=masked_inner))


def _blocks_from(start: int, length: int, lanes: int) -> list[tuple[int, int]]:
    """[start, start + length) as (first, count) blocks: of `lanes`, then of decreasing
    powers of two (as `_runs` cuts a run, at compile time)."""
    blocks = []
    while length:
        count = lanes if length >= lanes else 1 << (length.bit_length() - 1)
        blocks.append((start, count))
        start, length = start + count, length - count
    return blocks


def _known_lanes(b: KernelBuilder, data: ir.Value, at: Callable[[int], list[ir.Value]],
                 sources: Sequence[int], inside: Sequence[bool],
                 register: int) -> ir.Value | None:
    """The vector of the elements of `data` at offsets `sources[lane]` (`at(source)`: its
    indices) where `inside[lane]`, 0 elsewhere (None when no lane is inside), for
    `sources` known at compile time, equally spaced: the lanes from the first inside to the
    last read as one strided run (`KernelBuilder.load_strided`: its elements in between lie
    in the buffer), and a shuffle that places them and zeros the rest."""
    if not any(inside):
        return None
    lanes = len(sources)
    lo = inside.index(True)
    hi = lanes - list(inside)[::-1].index(True)
    step = sources[1] - sources[0] if lanes > 1 else 1
    run = b.load_strided(data, at(sources[lo]), step, hi - lo, register)
    if all(inside):
        return run
    span = hi - lo
    picks = [j - lo if inside[j] else span for j in range(lanes)]
    return vector.shuffle(run, b.splat(b.float(0.0), 1), picks)


def _plane_vectors(b: KernelBuilder, g: Geometry, epilogue: Epilogue | None) -> None:
    """A small depthwise plane (`uses_plane_vectors`) as vectors along its flattened pixels:
    the cpu grid is batch x channels, each iteration a whole output plane in blocks of
    `schedule.depthwise_pixels`, every block and window offset unrolled at compile time.
    With stride 1 and rows as wide as the input's, output pixel p reads input element
    p + offset at each window offset, so a vector of neighbouring pixels is one load of
    neighbouring inputs; which lanes fall in the padding (a row above or below the input, a
    column past either edge, where the flat index wraps into the next row) is known at
    compile time, so only the run from the first lane inside to the last is loaded and a
    shuffle with zeros clears the rest: no per-pixel branch, no lane-by-lane gather. Rows
    of 7 or 14 split into border and interior runs (`_pixel_vectors`) were vectors of 2 and
    1 pixels gathered lane by lane at the borders."""
    data, weight, *_, out = b.args
    element_bytes = ir.FloatType(b.element).width // 8
    register = register_lanes(b.host_level, element_bytes)
    block_pixels = depthwise_pixels(b.host_level, element_bytes)
    (height, width), (in_height, in_width) = g.out, g.spatial
    pixels = height * width
    zero = b.float(0.0)
    with b.loop(g.batch * g.group, "parallel") as flat:
        n, m = b.delinearize(flat, [g.batch, g.group])
        first_in = b.mul(m, g.per_group_in)
        def block(start: int, count: int) -> None:
            lanes = min(count, register)
            firsts = range(start, start + count, lanes)  # each vector's first pixel

            def window(channel: ir.Value, ks: tuple[int, ...], first: int) -> ir.Value | None:
                """The inputs of pixels first ... first + lanes - 1 at window offset `ks`,
                zeros in the padding; None when every one is padding."""
                rows, cols = (k * d - p for k, d, p in zip(ks, g.dilations, g.pads,
                                                            strict=False))
                pixels_ = range(first, first + lanes)
                return _known_lanes(
                    b, data, lambda source: [n, channel, b.index(source // in_width),
                                             b.index(source % in_width)],
                    [q + rows * in_width + cols for q in pixels_],  # rows as wide as out's
                    [0 <= q // width + rows < in_height and 0 <= q % width + cols < in_width
                     for q in pixels_], register)

            def channel(c: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
                in_channel = arith.addi(first_in, c[0])
                acc = list(acc)
                for ks in itertools.product(*(range(k) for k in g.kernel)):
                    y = b.splat(b.load(weight, [m, c[0], *(b.index(k) for k in ks)]), lanes)
                    for v, first in enumerate(firsts):
                        x = window(in_channel, ks, first)
                        if x is not None:
                            acc[v] = _multiply_add([acc[v]], [x], [y])[0]
                return acc

            sums = b.fold([g.per_group_in], [b.splat(zero, lanes)] * len(firsts), channel)
            for first, total in zip(firsts, sums, strict=True):
                if epilogue is None or epilogue.vectors:
                    at = [n, m, b.index(first // width), b.index(first % width)]
                    b.store_vector(total if epilogue is None else
                                   epilogue(b, total, at, axis=(2, 3)), out, at)
                    continue
                for j in range(lanes):  # an epilogue that takes only scalars
                    at = [n, m, b.index((first + j) // width), b.index((first + j) % width)]
                    b.store(epilogue(b, b.lane(total, j), at), out, at)

        for start, count in _blocks_from(0, pixels, block_pixels):
            block(start, count)


def _runs(b: KernelBuilder, start: int, length: int, lanes: int,
          body: Callable[[ir.Value, int], None]) -> None:
    """`body(first, count)` over [start, start + length) in blocks of `lanes` (a loop), then
    the rest in blocks of decreasing powers of two: every block's sums are a power-of-two
    vector, which LLVM keeps in whole registers (a <24 x float> it splits into scalars)."""
    if length >= lanes:
        with b.loop(length // lanes, "serial") as i:
            body(arith.addi(b.mul(i, lanes), b.index(start)) if start else b.mul(i, lanes), lanes)
    at, rest = start + length - length % lanes, length % lanes
    while rest:
        count = 1 << (rest.bit_length() - 1)
        body(b.index(at), count)
        at, rest = at + count, rest - count
