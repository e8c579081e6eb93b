"""Where a kernel's parallel iteration space goes: cpu loops or cuda threads.

The schedule is a decision written into the IR as loop kinds, so everything after this pass
(the GPU lowering, the serializer's grid/block, a reader of `-emit=mlir-tir`) sees it instead
of inferring it:

- cpu: one `parallel` loop per axis of the space (axes of extent 1 get the constant 0).
- cuda, flat: `blockIdx.x` x `threadIdx.x` (256 threads, fewer -- rounded to a warp -- for
  small spaces), flat index = block * threads + thread, delinearized into the axes; a
  `hextir.if flat < size` guard unless the threads cover the space exactly; a space of more
  than GRID_STRIDE_BLOCKS blocks is swept by a grid of that many, each thread striding by
  the grid's size (a grid-stride loop). Element-wise
  kernels take `lanes`: when the innermost extent divides by 16 bytes' worth of the
  destination's elements (4 f32, 2 f64), each thread takes that many neighbours along the
  innermost axis, loading them all before it stores any (a store could alias a later load,
  which would keep LLVM from merging them), and LLVM, seeing adjacent accesses to buffers
  aligned to 16 bytes (the runtime's promise, hexir-kernels-to-gpu's `llvm.align`), makes
  them one 128-bit load or store.
- cpu, matrix rows (a contraction whose rhs is not packed into panels): one
  parallel loop over blocks of output rows (the batch axes outside it; when the rhs has none,
  every lhs row is one tall matrix) as tall as the level's register tile (ROW_TILES); each
  block walks its columns a tile's width at a time and sums the tile over k in registers
  (carried values of one serial k loop: LLVM's SLP vectorizer makes them vector registers,
  each rhs load serving every row), each step a multiply-add it may fuse (`contract`), in
  k order. A matrix of fewer rows than the tile widens the tile's columns instead, and one
  of fewer than FEW_ROW_BLOCKS row blocks (no batch axes) puts its column tiles in the
  parallel loop too.
- cuda, GEMM tiles (`gemm_tiles`): a block of `ty` x `tx` = 256 threads computes a `bm` x `bn`
  tile of the output, each thread `tm` x `tn` of its elements (rows ty apart, columns tx
  apart, so a warp's stores are coalesced) in registers; the k axis is walked in steps of
  `bk`, each step's slices of both operands staged through shared memory by all the block's
  threads (k-contiguous loads of the lhs, n-contiguous loads of the rhs: coalesced, 16 bytes
  a thread where the rows divide into such pieces), zeros where the tile overhangs the
  matrix. The rule: 16 x 16 threads (a matrix with fewer than
  16 rows gets as many thread rows as it has rows -- a power of two -- and up to 256 threads
  in all as columns, as many as it has columns, never fewer than a warp per block), and
  each thread takes 4, 2 or 1 rows (columns) as the matrix has at least 4, 2 or 1 times the
  block's thread rows (columns); bk = 16.

Reduction axes are never in the space of `parallel`: kernels run them as serial loops inside
one iteration. A long reduction on cuda is a row instead (`rows`):

- cuda, transpose tiles (`tiled_transpose`): a permutation that moves the innermost axis
  goes through a 32 x 32 tile of shared memory (33 columns wide, so a column read hits 32
  banks): 32 x 8 threads read the tile along the input's innermost axis, 4 rows each, and
  after a barrier write it along the output's innermost axis, so both sides are coalesced
  instead of one being a gather with a stride. The other axes are blockIdx.z.
- cpu, transpose tiles (`register_transpose`): a permutation that moves the innermost axis
  goes T x T elements at a time through registers (T: a register's lanes, 8 f32 at v3):
  T vector loads along the input's innermost axis, `KernelBuilder.transpose`, T vector
  stores along the output's; the grid is the other axes and the tiles' rows, each walking
  its row of tiles, the edges the tiles do not cover copied element by element.
- cuda, rows: one block per row (blockIdx.x over the flattened rows) of `threads` threads --
  the next power of two of the row's length, at most 256 -- which share the row: thread t
  takes elements t, t + threads, ... (neighbouring threads, neighbouring elements: coalesced),
  and their partial results meet in a tree in shared memory, halving the active threads at
  each barrier. A row shorter than ROW_MIN stays one thread's serial loop (`parallel`):
  a block would leave most of its threads idle.

- cpu, contraction: always compiled loops (no kernel calls a library: the runtime's thread
  pool is the only one in the process). A matmul whose rhs is a constant matrix of more than
  PANEL_MIN_MACS multiply-adds, or of PANEL_MIN_BYTES or more (a matrix-vector product
  streams it), reads it packed at compile time into column panels
  (`panel_width`): the panels, each split into groups of row blocks when there are too few of
  them to share among the threads (`panel_groups`), are the cpu grid; each row block of
  PANEL_TILES rows sums its products with its panel over k in registers. Every other matmul
  (activation x activation products, attention's QK^T and PV with their batch axes, small
  weights) is matrix rows. Measured with `bench/cpu.py` (one-op modules, the call included):
  on x86-64-v4 the row loops win against the host BLAS from 2 x 2 x 2 up to 8 x 784 x 256
  (1.6 M multiply-adds: 101 against 175 us) and lose from 512 x 128 x 128 (8.4 M: 165 against
  146 us) on, as the rhs streams through the cache once per row block: that is where a
  constant rhs is packed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import arith, ir
from hexir_compiler.symbolic import is_static
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_format import MAX_GRID
from hexir_format.dims import Dim

THREADS = 256
WARP = 32
TILE = 16
ROW_MIN = 64
#: The most blocks a flat kernel launches: beyond 4096 x 256 threads (the space of 16 M f32
#: at 4 lanes a thread), each thread strides over the space instead of the grid growing.
GRID_STRIDE_BLOCKS = 4096
#: The grid of a flat kernel over a symbolic space (blocks of THREADS), which strides over
#: whatever the call's sizes make it: eight blocks for each of an H200's 132 SMs, and the
#: threads past a small space's end only test their index once.
SYMBOLIC_BLOCKS = 1056
#: The register tile a cpu matmul sums over k, by x86-64 level: (rows, bytes of columns).
#: Eight vector accumulators at every level, enough multiply-adds in flight to hide their
#: latency, with room left for the rhs loads and the broadcast: 8 of 32 AVX-512 registers
#: (4 x 32 f32), 8 of 16 AVX ones (4 x 16 f32), 8 of 16 SSE ones (2 x 16 f32); each rhs load
#: serves every row of the tile. 4 x 64 f32 at v4 (16 zmm) compiled the transformer block
#: example in 10.1 s against 5.6 (LLVM vectorizes each accumulator's GELU epilogue) and was
#: not faster within this machine's noise (76-111 against 85-114 us a call).
ROW_TILES = {4: (4, 128), 3: (4, 64), 2: (2, 64), 1: (2, 64)}
#: A matrix of fewer rows than its level's tile keeps the eight accumulators by widening the
#: tile's columns (a matrix-vector product at v4: 1 x 128 f32), and one of fewer row blocks
#: than this (with no batch axes) spreads each block's column tiles over the grid as well:
#: an unrolled GRU's per-step h x R products (1 x 256 by 256 x 512, and 256 x 256 with its
#: gates as the epilogue) were one thread's serial loop over 32-column tiles. Two threads,
#: GRU hidden 256, 64 steps, two layers, medians of 300 calls: 2.71 ms a call as it was,
#: 1.60 with the wider tile, 1.10 with the tiles on the grid too (ONNX Runtime: 1.06).
FEW_ROW_BLOCKS = 8

#: Combines two partial results (each a list of values) into one.
Combine = Callable[[list[ir.Value], list[ir.Value]], list[ir.Value]]


#: The most multiply-adds a cpu matmul on a constant rhs does as matrix rows; beyond, the
#: compiler packs the rhs into panels (see the module docstring and `panel_width`).
PANEL_MIN_MACS = 1 << 22
#: ... or whose constant rhs is at least this many bytes: a matrix-vector product (one row
#: of multiply-adds per weight) streams its rhs from memory once, and a panel streams it
#: contiguously where unpacked rows N apart do not (EfficientNet-B0's 1280 x 1000 head,
#: cold in cache within the model: 495 -> 168 us).
PANEL_MIN_BYTES = 1 << 20


#: The cpu register tile of a matmul whose constant rhs the compiler packs into column
#: panels (rows, panel bytes, panels side by side), by x86-64 level. The panel is 64 bytes
#: (16 f32) at every level, so the packed weights are the same bytes for each level's program
#: of a module, which stores them once (`serialize.Rodata`); a level whose tile is wider reads
#: several panels at once, each its own contiguous stream. At v3 5 rows x 2 ymm, ten
#: accumulators, each k step 2 panel loads, a broadcast a row and an FMA a vector; six rows
#: (MLAS's tile) would load less per FMA, but LLVM then keeps all six broadcasts live and
#: spills three accumulators to the stack: 17.6 against 40.2 G multiply-adds/s on one Zen 3
#: core. At v4 8 rows x 2 panels (a zmm each), sixteen accumulators: a Zen 5 core retires two
#: 16-lane FMAs a cycle at a 4-cycle latency, so 8 x 1 (one zmm of one panel: eight
#: accumulators, nine loads to eight FMAs) left it latency- and load-bound. The example MLP's
#: two kernels (64 x 512 x 2048 and 64 x 2048 x 512, f32, 2 threads, `hexir-run --profile`,
#: medians of 300 calls, us): 390 and 404 with 8 x 1 (66-71% of the measured peak), 291-305
#: and 293-314 with 8 x 2 (92-98%), 321 and 323 with 8 x 3, 310 and 339 with 12 x 2, 326 and
#: 343 with 10 x 2, 362 and 388 with 4 x 4, 389 and 655 with 16 x 1; the MLP went from 1.24x
#: ONNX Runtime's time to 0.60-0.93x (1.02 in one run of 14; bench/README.md).
#: At v1 and v2 (SSE, 16 registers, no FMA) 2 rows x 4 xmm, eight accumulators: 1.96-2.21x
#: ORT against 1.97-2.33x for 4 rows x 2 xmm (32-byte panels).
PANEL_TILES = {1: (2, 64, 1), 2: (2, 64, 1), 3: (5, 64, 1), 4: (8, 64, 2)}
#: A panel kernel's cpu grid has at least this many iterations when the matrix has enough
#: row blocks: the pool splits the grid into 8 chunks per thread (`hal/threads.py`), so a
#: matmul with few panels (N = 512: 32 at v3) still reaches every core with even chunks.
PANEL_GRID = 64


def panel_width(device: str, level: int, macs: int, element_bytes: int,
                weights: int = 0) -> int | None:
    """Columns per panel of a cpu matmul's constant [K, N] rhs, packed at compile time as
    [ceil(N / width), K, width] (zeros past N), or None to keep it as it is.

    Packed above PANEL_MIN_MACS, or for a rhs of `weights` elements of PANEL_MIN_BYTES or
    more: each panel is one contiguous K x width block, read once per
    row block of the lhs while the block's sums stay in registers. Unpacked, the rhs's rows
    are N elements apart, so a panel's cache lines collide in the caches' sets. Measured on a
    Zen 3 core (64 x 512 x 2048 f32, one thread): a C model of these loops does 41.7 G
    multiply-adds/s packed and 27.4 unpacked, OpenBLAS's sgemm (numpy's) 29.5; the compiled
    kernel, called through the runtime, 33-37 (ONNX Runtime's MLAS, its weights prepacked
    at load too, 31-34)."""
    if device != "cpu" or (macs <= PANEL_MIN_MACS and
                           weights * element_bytes < PANEL_MIN_BYTES):
        return None
    return PANEL_TILES[level][1] // element_bytes


def panel_groups(panels: int, row_blocks: int) -> int:
    """Into how many groups of consecutive row blocks each panel's rows are split, so that
    panels x groups reaches PANEL_GRID where the matrix has the row blocks for it; a group
    keeps its panel in cache across its row blocks."""
    return max(1, min(row_blocks, -(-PANEL_GRID // max(panels, 1))))


#: The register tile of a cpu conv's channel panels (`convolution`), by x86-64 level:
#: (output pixels, bytes of output channels), written as explicit vectors whose weights the
#: multiply-adds read from memory (an FMA's memory operand), so the registers hold the
#: accumulators and the pixels' broadcasts. Measured with `bench/conv.py --threads=1
#: --clock=cpu` (one core of this AMD EPYC, hexir / ORT, ResNet-18's 56x56, 14x14 and 7x7 3x3
#: convs and its 3x3 stride-2 one, MobileNetV2's 24 -> 144 1x1):
#: - v4: 8 x 2 zmm, 16 of the 32 registers accumulating. On a Zen 5 host (two 512-bit FMAs a
#:   cycle; interleaved `Module.profile`, best of 6, two threads, ResNet-18's 3x3 convs at
#:   56x56, 28x28, 14x14 and 7x7, its stride-2 ones and its stem, us): 506-526, 495-528,
#:   515-556, 681-705, 276-404 and 606-674 against 528-539, 515-531, 533-537, 789-792,
#:   285-393 and 558 for 4 x 4 (the call 9503-9523 against 9921 us; ORT's nodes 511-521,
#:   526-530, 558-562, 750-752, 273-384 and 568); 6 x 4 and 8 x 3 slower at every size, 12 x
#:   2 and 14 x 2 spill. The whole call, paired A/B on a contended machine: within 1-3%.
#:   MobileNetV2, EfficientNet-B0, ShuffleNetV2 and SqueezeNet (mostly 1x1 and depthwise
#:   convs, which take other forms) within 2% either way. On the AVX-512 host before, 4 x 4
#:   zmm had won (hexir / ORT): 1.12, 1.06, 1.13, 1.10, 1.54,
#:   against 1.18, 1.09, 1.19, 1.56, 1.73 for 8 x 2 zmm, 1.20, 1.17, 1.76, 1.31, 1.60 for
#:   10 x 2, 1.22, 1.25, 1.32, 1.47, 1.89 for 12 x 2, and 1.42, 1.62, 1.84, -, 1.62 for the
#:   first guess, 8 x 1 zmm (whose stores are one channel's pixels, each a plane apart);
#:   with the stores by channel, 4 x 4 still (the stem, 56x56, 14x14, 7x7, stride 2,
#:   SqueezeNet's 3x3: 1.10, 1.02, 1.05, 1.04, 1.02, 1.08 against 1.15, 1.02, 1.05, 1.07,
#:   1.03, 1.07 for 8 x 2);
#: - v3: 4 x 2 ymm, eight accumulators: since a block's stores go out by channel
#:   (`convolution._store_columns`, a power of two of pixels), ResNet-18's stem, 56x56,
#:   14x14, 7x7 and stride-2 convs and SqueezeNet's 3x3 at 1.17, 1.26, 1.41, 1.65, 1.28, 1.22
#:   against 1.24, 1.32, 2.01, 2.43, 1.64, 1.40 for 6 x 2 stored lane by lane (before,
#:   6 x 2 had beaten 4 x 2: 2.20x against 2.47x at 14x14; 3 x 4 ymm: 2.32);
#: - v2 (SSE: no FMA, a product needs a register of its own): 2 x 4 xmm, 3.49, 4.05, 3.24,
#:   4.06, 2.96 against 4.52, 4.87, 4.20, 3.66, 3.33 for 4 x 2 xmm and 3.78-4.30 for 3 x 4.
#: The tile is a whole number of CONV_PANEL_BYTES panels at every level.
CONV_TILES = {4: (8, 128), 3: (4, 64), 2: (2, 64), 1: (2, 64)}
#: Bytes of output channels per packed panel of a conv's constant weight
#: (`packing`'s conv layout), the same at every level: a module that carries a program
#: per level stores one packed copy of each weight (identical constants are deduplicated),
#: and a tile of several panels reads each from its own run (CONV_TILES' v4 figures are
#: with 64-byte panels).
CONV_PANEL_BYTES = 64
#: Output channels of a 1x1 conv's pixel-vector block (`convolution._pixel_panels`), by
#: x86-64 level: one accumulator vector per channel, with room for the input vector and the
#: broadcasts: 16 of the 32 zmm at v4, 8 of the 16 ymm or xmm below. Measured as CONV_TILES
#: (MobileNetV2's 16 -> 96 1x1 at 112x112 and 24 -> 144 at 56x56, SqueezeNet's 16 -> 64 at
#: 55x55, all with bias + relu): v4 0.97, 0.97, 1.44x ORT against 1.88-2.24, 1.47-1.77,
#: 1.86-2.48 as channel panels, whose stores and epilogue went lane by lane, a channel's
#: plane apart; v3 1.13, 0.92, 1.52 against 2.33, 1.44, 1.98; v2 1.81, 2.67, 3.20 against
#: 3.55, 3.34, 3.35.
PIXEL_PANELS = {4: 16, 3: 8, 2: 8, 1: 8}
#: A 1x1 conv takes the pixel-vector form below this many input channels a group, by
#: level (None: at any count). With few, each output's epilogue and store cost as much as
#: its multiply-adds, and the form makes them vector-wide; with more, v3's and v2's channel
#: panels have the larger register tile (SqueezeNet's 1x1s, pixel vectors against channel
#: panels, one thread, v3: 32 -> 128 at 27x27 2.25 against 1.36x ORT; 64 -> 256, 128 -> 16,
#: 256 -> 32 and 512 -> 64: 2.14-2.43 against 1.14-1.44). At v4 the two forms draw on
#: those convs (1.00-1.52 against 1.16-1.61) and the whole models gain from pixel vectors
#: everywhere (`bench/models.py`, default threads, in one run each, after / ORT with the
#: limit of 32 and, in the run before, without: MobileNetV2 1.49 and 1.23, SqueezeNet 1.1
#: 1.38 and 1.10, against 1.92 and 2.03, 1.36 and 1.40 for the starting commit).
PIXEL_PANEL_INPUTS = {4: None, 3: 32, 2: 32, 1: 32}


def pixel_panel(level: int) -> int:
    """Output channels of a 1x1 conv's pixel-vector block at `level` (PIXEL_PANELS)."""
    return PIXEL_PANELS[level]


#: Bytes of output pixels a depthwise conv's block sums in registers, by level: four of the
#: level's vector registers (ymm at v3, zmm at v4, xmm below). At v4 the size barely
#: matters (MobileNetV2's 56x56 depthwise 3x3 and its stride-2 one, lane-by-lane epilogue:
#: 2.37, 2.40x ORT with 256 bytes, 2.33, 2.62 with 128, 2.63, 2.39 with 64): the rows'
#: borders and the epilogue cost more than the window's FMAs.
DEPTHWISE_BYTES = {4: 256, 3: 128, 2: 64, 1: 64}


def conv_tile(level: int, element_bytes: int) -> tuple[int, int]:
    """(pixels, output channels) of a conv block at x86-64 `level` (CONV_TILES)."""
    rows, width = CONV_TILES[level]
    return rows, max(1, width // element_bytes)


def conv_panel(element_bytes: int) -> int:
    """Output channels per packed panel of a conv weight (CONV_PANEL_BYTES)."""
    return max(1, CONV_PANEL_BYTES // element_bytes)


#: Bytes of one vector register by x86-64 level: xmm (SSE) below v3, ymm (AVX2) at v3,
#: zmm (AVX-512) at v4.
REGISTER_BYTES = {4: 64, 3: 32, 2: 16, 1: 16}


def register_lanes(level: int, element_bytes: int) -> int:
    """Elements of one vector register at x86-64 `level` (REGISTER_BYTES)."""
    return max(1, REGISTER_BYTES[level] // element_bytes)


def depthwise_pixels(level: int, element_bytes: int) -> int:
    """Output pixels of a depthwise conv block at x86-64 `level` (DEPTHWISE_BYTES)."""
    return max(1, DEPTHWISE_BYTES[level] // element_bytes)


VECTOR_BYTES = 16
HOST_VECTOR_BYTES = 64


@contextmanager
def parallel(b: KernelBuilder, extents: Sequence[int]) -> Iterator[list[ir.Value]]:
    """Iterate the space `extents` in parallel (`lanes`, one lane); yields one index per axis."""
    with lanes(b, extents, 1) as (coords,):
        yield coords


@dataclass(frozen=True)
class Tiles:
    """A GEMM block's shape: threads ty x tx, each tm x tn outputs, k staged bk at a time."""

    ty: int
    tx: int
    tm: int
    tn: int
    bk: int = 16

    @property
    def bm(self) -> int:
        return self.ty * self.tm

    @property
    def bn(self) -> int:
        return self.tx * self.tn


def gemm_tiles(rows: int, cols: int) -> Tiles:
    """The tile shape for a rows x cols output (the rule in the module docstring)."""
    ty = min(TILE, _next_power_of_two(rows))
    tx = max(WARP // ty, min(_next_power_of_two(cols), THREADS // ty))

    def per_thread(extent: int, threads: int) -> int:
        return next(n for n in (4, 2, 1) if extent >= n * threads or n == 1)

    return Tiles(ty, tx, per_thread(rows, ty), per_thread(cols, tx))


@contextmanager
def matrix_rows(
    b: KernelBuilder, batch: Sequence[int], rows: int
) -> Iterator[tuple[list[ir.Value], ir.Value]]:
    """cpu: iterate batch x rows (each iteration a whole output row); yields (batch
    coordinates, row)."""
    with _parallel_nest(b, [*batch, rows]) as coords:
        yield coords[:-1], coords[-1]


@dataclass
class GemmBlock:
    """One block of a GEMM grid, as one of its threads sees it."""

    batch: ir.Value  # the flattened batch index
    row: ir.Value  # the tile's first row and column
    col: ir.Value
    ty: ir.Value  # the thread's row and column in the block
    tx: ir.Value
    thread: ir.Value  # ty * tx-extent + tx: its number in the block
    shared_at: ir.InsertionPoint  # before the thread loops: where shared buffers go


@contextmanager
def gemm_blocks(b: KernelBuilder, batch: int, rows: int, cols: int,
                tiles: Tiles) -> Iterator[GemmBlock]:
    """cuda: the grid of `tiles` over batch x rows x cols (batch on blockIdx.z)."""
    grid_y, grid_x = _blocks(rows, tiles.bm), _blocks(cols, tiles.bn)
    _check_grid("x", grid_x, MAX_GRID[0])
    _check_grid("y", grid_y, MAX_GRID[1])
    _check_grid("z", batch, MAX_GRID[2])
    with ExitStack() as stack:
        bz = b.index(0)
        if batch > 1:
            bz = stack.enter_context(b.loop(batch, "thread_binding", "blockIdx.z"))
        by = stack.enter_context(b.loop(grid_y, "thread_binding", "blockIdx.y"))
        bx = stack.enter_context(b.loop(grid_x, "thread_binding", "blockIdx.x"))
        ty = stack.enter_context(b.loop(tiles.ty, "thread_binding", "threadIdx.y"))
        tx = stack.enter_context(b.loop(tiles.tx, "thread_binding", "threadIdx.x"))
        thread = arith.addi(b.mul(ty, tiles.tx), tx)
        yield GemmBlock(bz, b.mul(by, tiles.bm), b.mul(bx, tiles.bn), ty, tx, thread,
                        ir.InsertionPoint(ty.owner.owner))


def by_rows(b: KernelBuilder, extent: Dim, space: Sequence[Dim] = ()) -> bool:
    """Whether a reduction over `extent` elements (in a `space` of rows) runs as a row shared
    by a block's threads: on cuda, for static sizes (one block a row: a grid of static
    geometry; a symbolic one is a thread's serial loop, as a short row is)."""
    return b.device == "cuda" and is_static(space) and isinstance(extent, int) and \
        extent >= ROW_MIN


@dataclass
class Row:
    """One row of a `rows` kernel, as one of its block's threads sees it."""

    b: KernelBuilder
    coords: list[ir.Value]  # the row's coordinates in the row space
    thread: ir.Value
    threads: int
    extent: int
    shared_at: ir.InsertionPoint  # before the thread loop: where shared buffers go

    def fold(self, inits: Sequence[ir.Value],
             step: Callable[[ir.Value, list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:
        """This thread's share of the row, carrying `inits` (a partial result)."""
        return self.b.strided(self.thread, self.extent, self.threads, inits, step)

    def each(self, body: Callable[[ir.Value], None]) -> None:
        """Run `body(k)` for this thread's elements k of the row."""
        def step(k: ir.Value, carried: list[ir.Value]) -> list[ir.Value]:
            body(k)
            return []
        self.fold([], step)

    def reduce(self, partial: Sequence[ir.Value], combine: Combine) -> list[ir.Value]:
        """The whole row's result from every thread's `partial`, through a shared-memory tree;
        every thread gets it."""
        b = self.b
        with self.shared_at:
            scratch = [b.shared([self.threads], v.type) for v in partial]
        for buffer, value in zip(scratch, partial, strict=True):
            b.store(value, buffer, [self.thread])
        b.barrier()
        half = self.threads // 2
        while half:
            with b.guard(b.less_than(self.thread, half)):
                partner = arith.addi(self.thread, b.index(half))
                mine = [b.load(buffer, [self.thread]) for buffer in scratch]
                theirs = [b.load(buffer, [partner]) for buffer in scratch]
                for buffer, value in zip(scratch, combine(mine, theirs), strict=True):
                    b.store(value, buffer, [self.thread])
            b.barrier()
            half //= 2
        return [b.load(buffer, [b.index(0)]) for buffer in scratch]

    @contextmanager
    def first_thread(self) -> Iterator[None]:
        """Only thread 0 of the block runs the body (one store of a row's single result)."""
        with self.b.guard(self.b.less_than(self.thread, 1)):
            yield


@contextmanager
def rows(b: KernelBuilder, space: Sequence[int], extent: int) -> Iterator[Row]:
    """Iterate the rows of `space`, each `extent` long, a block per row (cuda only)."""
    threads = min(THREADS, _next_power_of_two(extent))
    count = math.prod(space)
    _check_grid("x", count, MAX_GRID[0])
    with b.loop(max(1, count), "thread_binding", "blockIdx.x") as block:
        coords = b.delinearize(block, space)
        with b.loop(threads, "thread_binding", "threadIdx.x") as thread:
            loop = thread.owner.owner
            yield Row(b, coords, thread, threads, extent, ir.InsertionPoint(loop))


TRANSPOSE_TILE = 32
TRANSPOSE_ROWS = 8  # thread rows per tile: each thread moves TRANSPOSE_TILE / 8 elements


def transposes_by_tiles(b: KernelBuilder, shape: Sequence[int], perm: Sequence[int]) -> bool:
    """Whether `tiled_transpose` takes this permutation: cuda, the innermost axis moves,
    both innermost extents are at least a warp, and the other axes fit on blockIdx.z."""
    if b.device != "cuda" or not perm or perm[-1] == len(shape) - 1 or \
            not is_static(shape):
        return False
    rest = math.prod(e for d, e in enumerate(shape) if d not in (perm[-1], len(shape) - 1))
    return min(shape[-1], shape[perm[-1]]) >= WARP and rest <= MAX_GRID[1]


def tiled_transpose(b: KernelBuilder, shape: Sequence[int], perm: Sequence[int],
                    load: Callable[[list[ir.Value]], ir.Value],
                    store: Callable[[ir.Value, list[ir.Value]], None]) -> None:
    """out = transpose(x, perm) through shared tiles (see the module docstring); `load(at)`
    reads x at input coordinates, `store(value, at)` writes out at output coordinates."""
    inner, outer = len(shape) - 1, perm[-1]  # the input axes that are innermost in x, in out
    others = [d for d in range(len(shape)) if d not in (inner, outer)]
    tile, rows = TRANSPOSE_TILE, TRANSPOSE_ROWS
    with ExitStack() as stack:
        bz = b.index(0)
        rest = math.prod(shape[d] for d in others)
        if rest > 1:
            bz = stack.enter_context(b.loop(rest, "thread_binding", "blockIdx.z"))
        by = stack.enter_context(b.loop(_blocks(shape[outer], tile), "thread_binding",
                                        "blockIdx.y"))
        bx = stack.enter_context(b.loop(_blocks(shape[inner], tile), "thread_binding",
                                        "blockIdx.x"))
        staging = b.shared([tile, tile + 1])
        ty = stack.enter_context(b.loop(rows, "thread_binding", "threadIdx.y"))
        tx = stack.enter_context(b.loop(tile, "thread_binding", "threadIdx.x"))
        fixed = dict(zip(others, b.delinearize(bz, [shape[d] for d in others]), strict=True))
        first = {outer: b.mul(by, tile), inner: b.mul(bx, tile)}

        def each(row_axis: int, col_axis: int, body) -> None:
            """body(row in tile, column in tile, input coordinates) where both are inside."""
            col = arith.addi(first[col_axis], tx)
            for i in range(tile // rows):
                in_tile = arith.addi(ty, b.index(i * rows))
                row = arith.addi(first[row_axis], in_tile)
                at = {**fixed, row_axis: row, col_axis: col}
                inside = arith.andi(b.less_than(row, shape[row_axis]),
                                    b.less_than(col, shape[col_axis]))
                with b.guard(inside):
                    body(in_tile, tx, [at[d] for d in range(len(shape))])

        each(outer, inner, lambda r, c, at: b.store(load(at), staging, [r, c]))
        b.barrier()
        each(inner, outer, lambda r, c, at: store(b.load(staging, [c, r]),
                                                   [at[p] for p in perm]))


def transpose_tile(b: KernelBuilder, shape: Sequence[Dim], perm: Sequence[int]) -> int | None:
    """The tile of `register_transpose` where it takes this permutation: on the cpu, static,
    the innermost axis moved, elements of 4 or 8 bytes, and both innermost extents at least a
    tile (T = a register's lanes)."""
    if b.device != "cpu" or not perm or perm[-1] == len(shape) - 1 or not is_static(shape):
        return None
    width = b.element.width if isinstance(b.element, ir.FloatType | ir.IntegerType) else 0
    if width not in (32, 64):
        return None
    tile = register_lanes(b.host_level, width // 8)
    return tile if all(isinstance(e, int) and e >= tile for e in (shape[-1], shape[perm[-1]])) \
        else None


def register_transpose(b: KernelBuilder, shape: Sequence[int], perm: Sequence[int],
                       x: ir.Value, out: ir.Value, tile: int) -> None:
    """out = transpose(x, perm) by tiles through registers (the module docstring). The input
    axis that becomes the output's innermost (`outer`) is cut into the grid's tiles of rows;
    one walks the input's innermost axis (`inner`) a tile at a time, the rest of its rows
    (fewer than a tile) element by element, and the last row tile, when it is partial, is
    copied element by element. One element at a time, each output element read the input a
    row apart -- LLVM does not vectorize that gather: SegFormer-B0's 68 transposes took 3.7
    ms on one thread, ORT's 1.0; 1.3 by tiles (bench/README.md)."""
    inner, outer = len(shape) - 1, perm[-1]
    others = [d for d in range(len(shape)) if d not in (inner, outer)]
    rows, cols = shape[outer], shape[inner]
    whole_rows, whole_cols = rows // tile, cols // tile
    with parallel(b, [*(shape[d] for d in others), -(-rows // tile)]) as coords:
        fixed = dict(zip(others, coords[:-1], strict=True))
        first = b.mul(coords[-1], tile)

        def source(row: ir.Value, col: ir.Value) -> list[ir.Value]:
            at = {**fixed, outer: row, inner: col}
            return [at[d] for d in range(len(shape))]

        def copy(row: ir.Value, col: ir.Value) -> None:
            at = source(row, col)
            b.store(b.load(x, at), out, [at[p] for p in perm])

        def each(count: int, start: ir.Value, extent: int, col_start: int) -> None:
            """Element by element: `count` rows from `start`, columns from `col_start`."""
            with b.loop(count, "serial") as r, b.loop(extent - col_start, "serial") as c:
                copy(arith.addi(start, r), arith.addi(c, b.index(col_start)))

        whole = None if rows % tile == 0 else b.less_than(coords[-1], whole_rows)
        with b.guard(whole):
            with b.loop(whole_cols, "serial") as t:
                col = b.mul(t, tile)
                loaded = [b.load_vector(x, source(arith.addi(first, b.index(r)), col), tile)
                          for r in range(tile)]
                for c, column in enumerate(b.transpose(loaded)):
                    at = source(first, arith.addi(col, b.index(c)))
                    b.store_vector(column, out, [at[p] for p in perm])
            if cols % tile:
                each(tile, first, cols, whole_cols * tile)
        if whole is not None:
            last = arith.cmpi(arith.CmpIPredicate.uge, coords[-1], b.index(whole_rows))
            with b.guard(last):
                each(rows % tile, first, cols, 0)


@contextmanager
def _parallel_nest(b: KernelBuilder, extents: Sequence[int]) -> Iterator[list[ir.Value]]:
    """cpu: a parallel loop per axis (none for an axis of 1). The outermost is the grid the
    runtime splits among threads, so where sizes are symbolic the axes up to the last
    symbolic one are one flat loop, delinearized: a batch of 1 would otherwise be a grid of
    one iteration, run by one thread (GPT-2 at 1 x 128: its element-wise and row kernels
    took twice the static module's time). In a space of three axes or more the innermost
    keeps a loop of its own (contiguous, and no division an element: BERT's attention mask
    [batch, 1, seq, seq] flattened whole took 0.55 ms of a 6 ms call)."""
    symbolic_axes = [d for d, extent in enumerate(extents) if not isinstance(extent, int)]
    split = symbolic_axes[-1] + 1 if symbolic_axes else 0
    if split == len(extents) >= 3:
        split -= 1
    with ExitStack() as stack:
        outer: list[ir.Value] = []
        if split:
            flat = stack.enter_context(b.loop(math.prod(extents[:split]), "parallel"))
            outer = b.delinearize(flat, extents[:split])
        yield [*outer, *(
            b.index(0) if extent == 1 else stack.enter_context(b.loop(extent, "parallel"))
            for extent in extents[split:])]


@contextmanager
def lanes(b: KernelBuilder, extents: Sequence[int],
          n: int | None = None) -> Iterator[list[list[ir.Value]]]:
    """Like `parallel`, for a body that reads and writes only at its coordinates (or
    broadcasts of them): yields the coordinates of each lane an iteration owns
    (`vector_lanes`, or `n`), for the body to load every lane before it stores any. On the
    cpu that order is what lets LLVM's SLP vectorizer make the lanes one vector without
    asking whether the destination overlaps an input: it may, exactly, when the kernel runs
    in place (a loop vectorizer's overlap check would send that case to scalar code)."""
    n = vector_lanes(b, extents) if n is None else n
    if b.device == "cuda":
        with _flat_threads(b, extents, n) as owned:
            yield owned
        return
    with _parallel_nest(b, [*extents[:-1], extents[-1] // n] if n > 1 else extents) as coords:
        loops = [c.owner.owner for c in coords if isinstance(c, ir.BlockArgument)]
        if n > 1 and loops:  # the innermost loop: vectors within its iterations only
            loops[-1].attributes["lanes"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), n)
        yield _lanes_from(b, coords if n == 1 else [*coords[:-1], b.mul(coords[-1], n)], n)


def _lanes_from(b: KernelBuilder, coords: list[ir.Value], lanes: int) -> list[list[ir.Value]]:
    """The coordinates of `lanes` neighbours along the innermost axis, from `coords`."""
    # nuw: the lane stays in the row (the innermost extent divides by lanes), and saying so
    # lets LLVM see the lanes' addresses as consecutive.
    no_wrap = ir.Attribute.parse("#arith.overflow<nsw, nuw>")
    return [coords, *([*coords[:-1], arith.addi(coords[-1], b.index(lane),
                                                overflow_flags=no_wrap)]
                      for lane in range(1, lanes))]


def vector_lanes(b: KernelBuilder, extents: Sequence[int]) -> int:
    """Elements per iteration (a cuda thread, a cpu loop step) for a vectorizable space:
    16 bytes (cuda: one 128-bit access) or 64 bytes (cpu: an AVX-512 register, two AVX or
    four SSE ones) of the destination's element when the innermost extent divides by that
    many, else 1. On the cpu an extent that does not divide by 64 bytes' worth takes the
    most of 32 or 16 bytes' worth it divides by: a 28- or 56-wide plane's element-wise
    kernel (EfficientNet's squeeze-excitation products) in vectors of 4 or 8 f32, where it
    had been scalar."""
    width = ir.FloatType(b.element).width if isinstance(b.element, ir.FloatType) else (
        ir.IntegerType(b.element).width if isinstance(b.element, ir.IntegerType) else 8)
    lanes = (VECTOR_BYTES if b.device == "cuda" else HOST_VECTOR_BYTES) * 8 // max(width, 8)
    least = VECTOR_BYTES * 8 // max(width, 8)
    if width < 32 or not extents:
        return 1
    while lanes >= least and extents[-1] % lanes:
        lanes //= 2
    return lanes if lanes >= least else 1


@contextmanager
def _flat_threads(b: KernelBuilder, extents: Sequence[int],
                  lanes: int = 1) -> Iterator[list[list[ir.Value]]]:
    size = math.prod(extents) // lanes
    if isinstance(size, int):
        threads = min(THREADS, max(WARP, _blocks(size, WARP) * WARP))
        blocks = min(_blocks(size, threads), GRID_STRIDE_BLOCKS)
    else:  # a launch's geometry is static, so a symbolic space is swept by a fixed grid
        threads, blocks = THREADS, SYMBOLIC_BLOCKS
    with ExitStack() as stack:
        block = stack.enter_context(b.loop(blocks, "thread_binding", "blockIdx.x"))
        thread = stack.enter_context(b.loop(threads, "thread_binding", "threadIdx.x"))
        flat = arith.addi(b.mul(block, threads), thread)
        static = isinstance(size, int)
        if not static or blocks * threads < size:  # a grid-stride loop: the grid sweeps on
            flat = stack.enter_context(b.loop(size, "serial", start=flat, step=blocks * threads))
        condition = None if not static or blocks * threads <= size else \
            b.less_than(flat, size)
        with b.guard(condition):
            yield _lanes_from(b, b.delinearize(b.mul(flat, lanes), extents), lanes)


def _check_grid(axis: str, extent: int, limit: int) -> None:
    if extent > limit:
        raise CompileError(
            f"cuda kernel needs {extent} blocks on grid axis {axis}, more than the {limit} allowed"
        )


def _blocks(size: int, per_block: int) -> int:
    """Blocks of `per_block` covering `size` (at least one: a launch needs a grid)."""
    return max(1, -(-size // per_block))


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()
