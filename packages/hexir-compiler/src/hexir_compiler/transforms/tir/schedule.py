"""Where a kernel's parallel iteration space goes: cpu loops or cuda threads.

The schedule is a decision written into the IR as loop kinds, so everything after this pass
(the GPU lowering, the serializer's grid/block, a reader of `-emit=mlir-tir`) sees it instead
of inferring it:

- cpu: one `parallel` loop per axis of the space (axes of extent 1 get the constant 0).
- cuda, flat: `blockIdx.x` x `threadIdx.x` (256 threads, fewer -- rounded to a warp -- for
  small spaces), flat index = block * threads + thread, delinearized into the axes; a
  `hextir.if flat < size` guard unless the threads cover the space exactly.
- cuda, matrix: output tiles of `ty` x `tx` threads on blockIdx.y/x and threadIdx.y/x, the
  flattened batch on blockIdx.z, and a guard on the rows/columns that do not divide. Tiles
  are 16 x 16; a short matrix gets fewer rows and up to 256 columns, a narrow one fewer
  columns, never fewer than a warp (32 threads) per block.

Reduction axes are never in the space: kernels run them as serial loops inside one iteration.

- cpu, contraction: a call of the runtime's routine (`hextir.library_call`, the host BLAS)
  instead of loops. Measured on the example networks' matmul shapes (`bench/cpu.py`), the
  compiled loops (one output element per iteration, a serial k loop that may not be
  reassociated) run 1.3-29x slower than numpy's BLAS, more as the matrices grow, so every
  cpu matmul takes the call; cuda matmuls stay loops.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import arith, ir
from hexir_compiler.transforms.tir.builder import KernelBuilder

THREADS = 256
WARP = 32
TILE = 16
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535


def uses_library(b: KernelBuilder) -> bool:
    """Whether a contraction on `b`'s device is a library call rather than loops."""
    return b.device == "cpu"


@contextmanager
def parallel(b: KernelBuilder, extents: Sequence[int]) -> Iterator[list[ir.Value]]:
    """Iterate the space `extents` in parallel; yields one index per axis."""
    if b.device == "cuda":
        with _flat_threads(b, extents) as coords:
            yield coords
        return
    with _parallel_nest(b, extents) as coords:
        yield coords


@contextmanager
def matrix(
    b: KernelBuilder, batch: Sequence[int], rows: int, cols: int
) -> Iterator[tuple[list[ir.Value], ir.Value, ir.Value]]:
    """Iterate batch x rows x cols; yields (batch coordinates, row, column)."""
    if b.device != "cuda":
        with _parallel_nest(b, [*batch, rows, cols]) as coords:
            yield coords[:-2], coords[-2], coords[-1]
        return
    ty = min(TILE, _next_power_of_two(rows))
    tx = max(WARP // ty, min(_next_power_of_two(cols), THREADS // ty))
    grid_y, grid_x, grid_z = _blocks(rows, ty), _blocks(cols, tx), max(1, math.prod(batch))
    _check_grid("y", grid_y, MAX_GRID_YZ)
    _check_grid("z", grid_z, MAX_GRID_YZ)
    _check_grid("x", grid_x, MAX_GRID_X)
    with ExitStack() as stack:
        bz = b.index(0)
        if grid_z > 1:
            bz = stack.enter_context(b.loop(grid_z, "thread_binding", "blockIdx.z"))
        by = stack.enter_context(b.loop(grid_y, "thread_binding", "blockIdx.y"))
        bx = stack.enter_context(b.loop(grid_x, "thread_binding", "blockIdx.x"))
        iy = stack.enter_context(b.loop(ty, "thread_binding", "threadIdx.y"))
        ix = stack.enter_context(b.loop(tx, "thread_binding", "threadIdx.x"))
        row = arith.addi(b.mul(by, ty), iy)
        col = arith.addi(b.mul(bx, tx), ix)
        checks = [
            b.less_than(index, extent)
            for index, extent, covered in ((row, rows, grid_y * ty), (col, cols, grid_x * tx))
            if covered != extent
        ]
        condition = arith.andi(*checks) if len(checks) == 2 else (checks or [None])[0]
        with b.guard(condition):
            yield b.delinearize(bz, batch), row, col


@contextmanager
def _parallel_nest(b: KernelBuilder, extents: Sequence[int]) -> Iterator[list[ir.Value]]:
    with ExitStack() as stack:
        yield [
            b.index(0) if extent == 1 else stack.enter_context(b.loop(extent, "parallel"))
            for extent in extents
        ]


@contextmanager
def _flat_threads(b: KernelBuilder, extents: Sequence[int]) -> Iterator[list[ir.Value]]:
    size = math.prod(extents)
    threads = min(THREADS, max(WARP, _blocks(size, WARP) * WARP))
    blocks = _blocks(size, threads)
    _check_grid("x", blocks, MAX_GRID_X)
    with (
        b.loop(blocks, "thread_binding", "blockIdx.x") as block,
        b.loop(threads, "thread_binding", "threadIdx.x") as thread,
    ):
        flat = arith.addi(b.mul(block, threads), thread)
        condition = None if blocks * threads == size else b.less_than(flat, size)
        with b.guard(condition):
            yield b.delinearize(flat, extents)


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
