"""`hexir.linear` and `hexir.matmul`: both the format's `matmul` kernel.

np.matmul semantics: a [..., M, K] @ b [..., K, N] -> [..., M, N] with the batch dimensions
broadcast. `linear` is input [..., K] @ weight [K, N]: its leading input dimensions are the
batch and rows, and a vector input [K] has no row axis in the result.

On the cpu every matmul is compiled loops, at every x86-64 level: matrix rows
(`schedule.matrix_rows`: a block of rows summed in registers, a column tile at a time, the
batch axes and row blocks in parallel -- and the column tiles, where there are few row
blocks), or, for a big one whose rhs is a constant matrix, loops over that matrix packed by
hexir-lower-to-tir into column panels (`schedule.panel_width`; the op's PANEL attribute says
how wide), the cpu grid, each summing its group of the lhs's row blocks against its panel
(or, for a matrix of few rows, several panels) in registers. Either way the epilogue is
applied to the sums as they are stored, a register of a row's columns at a time where it
takes vectors. On cuda the kernel
is a tiled GEMM (`schedule.gemm_tiles`): each block stages k-slices of both operands in
shared memory and each thread accumulates its tm x tn outputs in registers with fused
multiply-adds (`math.fma`: one rounding per step, in k order, as the serial sum is). When
the rhs has no batch dimensions, the lhs's batch and rows are one tall matrix (a `linear` on
[2, 16, 64] is one 32-row GEMM, not two of 16 rows).
"""

from __future__ import annotations

import math as pymath
from collections.abc import Sequence
from typing import cast

from hexir_compiler import symbolic
from hexir_compiler.mlir import arith, ir, math
from hexir_compiler.transforms.tir.builder import KernelBuilder
from hexir_compiler.transforms.tir.kernel import Epilogue, GraphOp, Kernel, broadcast_indices
from hexir_compiler.transforms.tir.schedule import (
    FEW_ROW_BLOCKS,
    PANEL_TILES,
    ROW_TILES,
    gemm_blocks,
    gemm_tiles,
    matrix_rows,
    panel_groups,
    parallel,
    register_lanes,
    vector_lanes,
)
from hexir_format import dims, signatures
from hexir_format.dims import INT64_MAX, Dim

#: The attribute hexir-lower-to-tir gives a matmul or linear whose rhs it packed into panels
#: of this many columns (the kernel's rhs argument is then [panels, K, width]).
PANEL = "hexir.panel"
#: k steps per iteration of a panel kernel's k loop: 5-6% faster than one on a Zen 3 core
#: (64 x 512 x 2048 and 64 x 2048 x 512, interleaved); 4 and 8 gain nothing more.
UNROLL = 2


def plan_matmul(op: GraphOp, epilogue: Epilogue | None = None) -> Kernel:
    """The matmul kernel of `op`, applying `epilogue` to each product before it is stored
    (the kernel's arguments are then lhs, rhs, the epilogue's inputs, the destination)."""
    a, w = op.inputs[:2]
    if op.mnemonic == "linear":
        op.expect_output(signatures.linear(a, w))
    else:
        op.expect_output(signatures.matmul(a, w, vectors=False))

    def emit(b: KernelBuilder) -> None:
        with b.building():
            if b.device == "cuda" and not symbolic.is_static([*a, *w]):
                _per_element(b, op, epilogue)
            elif b.device == "cuda":
                _tiled(b, op, epilogue)
            elif PANEL in op.attributes:
                _panels(b, op, epilogue)
            else:
                _rows(b, op, epilogue)

    # a packed rhs is not the format's matmul signature (rhs [..., K, N]): a generic kernel
    plain = epilogue is None and PANEL not in op.attributes
    return Kernel("matmul" if plain else "generic", emit)


def _matrices(op: GraphOp) -> tuple:
    """What both schedules read of `op`'s shapes: lhs and rhs shapes, whether the lhs has a
    row axis, the lhs, rhs and broadcast batch shapes, whether the product is one tall matrix
    (the rhs has no batch: every lhs row is a row of it), its rows, columns and depth."""
    a, w = op.inputs[:2]
    has_rows = len(a) >= 2
    a_batch, w_batch = a[:-2], w[:-2]
    tall = not w_batch
    rows = pymath.prod(a[:-1]) if tall else (a[-2] if has_rows else 1)
    return (a, w, has_rows, a_batch, w_batch, signatures.broadcast(a_batch, w_batch), tall,
            rows, w[-1], a[-1])


def _rows(b: KernelBuilder, op: GraphOp, epilogue: Epilogue | None) -> None:
    """The cpu loops of `op` (see the module docstring), inside `b.building()`."""
    a, _w, has_rows, a_batch, w_batch, batch, tall, rows, cols, depth = _matrices(op)
    lhs, rhs = b.args[:2]
    tile_rows, tile_bytes = ROW_TILES[b.host_level]
    height = max(1, symbolic.at_most(rows, tile_rows))  # no rows: no blocks
    # a matrix of fewer rows than the tile (a matrix-vector product) widens the columns
    # instead, keeping the tile's independent accumulators (see ROW_TILES)
    width = max(1, tile_bytes * (tile_rows // height) // (ir.FloatType(b.element).width // 8))
    blocks = cast(int, dims.ceildiv(rows, height))  # (an Expr where rows is: `kernel.Shape`)
    tiles, rest = cols // width, cols % width
    # too few row blocks to share among the threads: each block's column tiles (the last
    # perhaps partial) are iterations of the grid too (see FEW_ROW_BLOCKS)
    spread = 0
    if (tall or not batch) and isinstance(blocks, int) and blocks < FEW_ROW_BLOCKS and \
            isinstance(cols, int) and tiles + bool(rest) > 1:
        spread = tiles + bool(rest)
    with matrix_rows(b, [] if tall else batch, blocks * max(spread, 1)) as (coords, it):
        block_row, tile = it, None
        if spread:
            block_row = arith.divui(it, b.index(spread)) if blocks > 1 else b.index(0)
            tile = arith.subi(it, b.mul(block_row, spread)) if blocks > 1 else it
        first = b.mul(block_row, height)
        # a block that overhangs the matrix computes (and stores) its last row again
        mine = _block_rows(b, first, height, rows)

        if tall:
            lhs_at = [b.delinearize(r, a[:-1]) if a[:-1] else [] for r in mine]
            out_at = [b.delinearize(r, op.output[:-1]) if a[:-1] else [] for r in mine]
            rhs_at = []
        else:
            lhs_batch = broadcast_indices(b, coords, a_batch, batch)
            lhs_at = [[*lhs_batch, *([r] * has_rows)] for r in mine]
            out_at = [[*coords, *([r] * has_rows)] for r in mine]
            rhs_at = broadcast_indices(b, coords, w_batch, batch)

        def block(j0: ir.Value, n: int) -> None:
            """Columns [j0, j0 + n) of the block's rows, summed in registers over k."""
            js = [j0, *(arith.addi(j0, b.index(t)) for t in range(1, n))]

            def step(k: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
                ys = [b.load(rhs, [*rhs_at, *k, j]) for j in js]
                xs = [b.load(lhs, [*row, *k]) for row in lhs_at]
                return _multiply_add(acc, xs, ys)

            sums = b.fold([depth], [b.float(0.0)] * (n * height), step)
            _store(b, sums, [[*row, j] for row in out_at for j in js], epilogue, n)

        if tile is not None:  # this iteration's one column tile
            if tiles:
                with b.guard(b.less_than(tile, tiles) if rest else None):
                    block(b.mul(tile, width), width)
            if rest:
                with b.guard(arith.cmpi(arith.CmpIPredicate.eq, tile, b.index(tiles))):
                    block(b.index(cols - rest), rest)
            return
        if tiles != 0:
            with b.loop(tiles, "serial") as jb:
                block(b.mul(jb, width), width)
        if isinstance(rest, int):
            if rest:
                block(b.index(cols - rest), rest)
        else:  # a symbolic width: the columns past the last whole tile one at a time
            with b.loop(rest, "serial") as j:
                block(arith.addi(b.index(cols - rest), j), 1)


def _block_rows(b: KernelBuilder, first: ir.Value, height: int, rows: int) -> list[ir.Value]:
    """The rows of the block starting at `first`; one that overhangs the matrix repeats its
    last row (computed and stored again)."""
    return [first, *(arith.minui(arith.addi(first, b.index(r)), b.index(rows - 1))
                     for r in range(1, height))]


def _store(b: KernelBuilder, sums: list[ir.Value], at: list[list[ir.Value]],
           epilogue: Epilogue | None, columns: int = 1) -> None:
    """Each sum through the epilogue (when there is one) into the destination at `at`. The
    sums are rows of `columns` consecutive columns: an epilogue that takes vectors runs on
    a register's worth of a row's columns at a time, and each is one vector store (the
    columns past the last whole register one by one): a GRU step's gates as the epilogue
    of its 1 x 128 matrix-vector tile, unrolled per column, took LLVM 17 s to compile at
    three levels against 7 s before the tile widened."""
    out = b.args[-1]
    lanes = register_lanes(b.host_level, ir.FloatType(b.element).width // 8) \
        if b.device == "cpu" else 0
    if epilogue is not None and epilogue.vectors and 1 < lanes <= columns:
        scalar: list[int] = []
        for first in range(0, len(sums), columns):
            whole = columns - columns % lanes
            for c in range(first, first + whole, lanes):
                value = epilogue(b, b.vector_of(sums[c:c + lanes]), at[c], -1)
                b.store_vector(value, out, at[c])
            scalar += range(first + whole, first + columns)
        sums, at = [sums[i] for i in scalar], [at[i] for i in scalar]
    if epilogue is not None:
        sums = [epilogue(b, value, where) for value, where in zip(sums, at, strict=True)]
    for value, where in zip(sums, at, strict=True):
        b.store(value, out, where)


def _multiply_add(acc: list[ir.Value], xs: list[ir.Value], ys: list[ir.Value]) -> list[ir.Value]:
    """acc[r * len(ys) + t] + xs[r] * ys[t] for each row r and column t, each a multiply-add
    LLVM may fuse (`contract`: an FMA where the CPU has one)."""
    contract = ir.Attribute.parse("#arith.fastmath<contract>")
    return [arith.addf(acc[r * len(ys) + t], arith.mulf(x, y, fastmath=contract),
                       fastmath=contract)
            for r, x in enumerate(xs) for t, y in enumerate(ys)]


def _panels(b: KernelBuilder, op: GraphOp, epilogue: Epilogue | None) -> None:
    """The cpu loops of `op` on a packed rhs (see the module docstring), in `b.building()`:
    in parallel over sets of panels (the level's panels side by side, `PANEL_TILES`: two at
    v4; or, for a matrix of a half or less of the tile's rows, as many as keep the tile's
    rows of accumulators: 8 at v4 for a matrix-vector product), each
    split into groups of consecutive row blocks (`schedule.panel_groups`), serially over a
    group's blocks of `PANEL_TILES` rows (of a static row count, the last block only the
    rows left over; of a symbolic one, a block that overhangs the matrix computes and
    stores its last row again), the block's products summed over k in registers (one
    multiply-add each, in k order) and stored through the epilogue (the k loop `UNROLL`
    steps an iteration, the remainder after it). Each iteration of that loop also
    prefetches one row of the panel after its own into L2 (`KernelBuilder.prefetch`; the last
    panel its own): row k0 + the block's index mod UNROLL, so that consecutive blocks share
    the rows out and a block adds one prefetch to its UNROLL steps. The next panel's weights
    -- cold in cache within a model, whose weights outgrow L3 -- are then there before its
    first block needs them. The example MLP, two threads, medians of 300 calls, fresh
    processes interleaved, five rounds: 4138 -> 3941 us at v3, 6865 -> 6838 at v2 (a
    prefetch every k step: 3971, and 7003 at v2, whose 2-row tile has 32 blocks a panel).
    The last set holds the panels left over and, when N is not a multiple of the width, the
    last panel with only the columns it has. Slicing k so that a slice of the panel stays in
    L1 across the row blocks (16 or 8 KiB) was measured too and gained nothing (64 x 2048 x
    512: 1271 against 1263 us; 64 x 512 x 2048: 1550 against 1257)."""
    a, _, _, _, _, _, _, rows, cols, depth = _matrices(op)
    lhs, rhs = b.args[:2]
    width = ir.MemRefType(rhs.type).shape[2]
    tile_rows, _, tile_panels = PANEL_TILES[b.host_level]
    height = max(1, symbolic.at_most(rows, tile_rows))
    whole, partial = cols // width, cols % width  # full panels, columns of the last
    wide = max(1, min(whole, max(tile_panels, tile_rows // height)))  # panels a set
    sets, left = divmod(whole, wide)
    extra = bool(left or partial)  # a last set of the panels left over
    row_blocks = dims.ceildiv(rows, height)
    # row blocks a group: where the count is symbolic, the same rule computed per call (a
    # `per` planned for one size either starves the threads or rereads each panel for every
    # row block: BERT at 1 x 128 took 1.79x the static module's time with one a group)
    if isinstance(row_blocks, int):
        per: Dim = max(1, -(-row_blocks // panel_groups(sets + extra, row_blocks)))
    else:
        per = dims.maximum(1, dims.ceildiv(row_blocks, panel_groups(sets + extra, INT64_MAX)))
    groups = dims.maximum(1, dims.ceildiv(row_blocks, per))
    # the rows past the last whole block of a static count: a block of their own (a block
    # of `height` would compute its last row again, one row in 65 of a 64-row matrix at v3)
    tail = rows % height if isinstance(rows, int) and rows > height else 0

    def rows_of(panels: list[tuple[ir.Value, list[ir.Value]]], first: ir.Value,
                tall: int, phase: ir.Value) -> None:
        """The columns `js` of each (panel, js) for the `tall` rows from `first`, summed in
        registers; each iteration of the k loop prefetches row k + `phase` (below UNROLL)
        of the panels after them."""
        mine = _block_rows(b, first, tall, rows)
        final = b.index(whole + bool(partial) - 1)  # the last panel
        following = [arith.minui(arith.addi(panel, b.index(len(panels))), final)
                     for panel, _ in panels]
        lhs_at = [b.delinearize(r, a[:-1]) if a[:-1] else [] for r in mine]
        at = [[*(b.delinearize(r, op.output[:-1]) if a[:-1] else []), j]
              for r in mine for _, js in panels for j in js]
        n = sum(len(js) for _, js in panels)

        def step(k: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            ys = [b.load(rhs, [panel, k, b.index(t)]) for panel, js in panels
                  for t in range(len(js))]
            xs = [b.load(lhs, [*row, k]) for row in lhs_at]
            return _multiply_add(acc, xs, ys)

        def unrolled(k: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
            k0 = b.mul(k[0], UNROLL)
            for after in following:
                b.prefetch(rhs, [after, arith.addi(k0, phase), b.index(0)])
            for u in range(UNROLL):
                acc = step(arith.addi(k0, b.index(u)) if u else k0, acc)
            return acc

        sums = b.fold([depth // UNROLL], [b.float(0.0)] * (n * tall), unrolled)
        for k in range(depth - depth % UNROLL, depth):
            sums = step(b.index(k), sums)
        _store(b, sums, at, epilogue, n)

    def block(panels: list[tuple[ir.Value, int]], group: ir.Value) -> None:
        """The first n columns of each (panel, n) for the row blocks of `group`."""
        columns = []
        for panel, n in panels:
            j0 = b.mul(panel, width)
            columns.append((panel, [j0, *(arith.addi(j0, b.index(t)) for t in range(1, n))]))
        few = None  # a symbolic row count below a block's: rows one at a time
        if not isinstance(rows, int) and height > 1:
            # (a decoding step's one row would be a block computing it `height` times)
            few = b.less_than(b.index(rows), height)
            with b.guard(few), b.loop(rows, "serial") as r:  # one group then (one block)
                rows_of(columns, r, 1, arith.remui(r, b.index(UNROLL)))
        with b.guard(None if few is None else b.less_than(b.index(height - 1), rows)), \
                b.loop(per, "serial") as i:
            row_block = arith.addi(b.mul(group, per), i)
            first = b.mul(row_block, height)
            phase = arith.remui(row_block, b.index(UNROLL))
            if tail:  # the last block is the rows left over, each computed once
                with b.guard(b.less_than(row_block, row_blocks - 1)):
                    rows_of(columns, first, height, phase)
                last = arith.cmpi(arith.CmpIPredicate.eq, row_block, b.index(row_blocks - 1))
                with b.guard(last):
                    rows_of(columns, first, tail, phase)
            else:
                overhang = groups * per != row_blocks  # the last group has fewer (or none)
                # (a symbolic count is taken to overhang: the guard is then always there)
                with b.guard(b.less_than(row_block, row_blocks) if overhang else None):
                    rows_of(columns, first, height, phase)

    with b.loop((sets + extra) * groups, "parallel") as it:
        chosen, group = it, b.index(0)
        if groups != 1:
            chosen = arith.divui(it, b.index(groups))
            group = arith.subi(it, b.mul(chosen, groups))
        if sets:
            first = b.mul(chosen, wide)
            with b.guard(b.less_than(chosen, sets) if extra else None):
                block([(arith.addi(first, b.index(i)) if i else first, width)
                       for i in range(wide)], group)
        if extra:
            with b.guard(arith.cmpi(arith.CmpIPredicate.eq, chosen, b.index(sets))):
                block([*((b.index(sets * wide + i), width) for i in range(left)),
                       *([(b.index(whole), partial)] if partial else [])], group)


def _per_element(b: KernelBuilder, op: GraphOp, epilogue: Epilogue | None) -> None:
    """A cuda matmul of symbolic sizes: a thread per output element (`parallel`: a grid of
    static geometry striding over the space) summing its row and column over k. The GEMM
    tiles' grid is the matrix's shape, which the launch would have to compute per call."""
    _a, _w, _rows, a_batch, w_batch, batch, tall, _m, _n, depth = _matrices(op)
    lhs, rhs = b.args[:2]
    with parallel(b, op.output) as at:
        lead, j = at[:-1], at[-1]
        if tall:
            lhs_at, rhs_at = lead, []
        else:
            coords = lead[:len(batch)]
            lhs_at = [*broadcast_indices(b, coords, a_batch, batch), *lead[len(batch):]]
            rhs_at = broadcast_indices(b, coords, w_batch, batch)

        def step(k: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
            return _multiply_add(acc, [b.load(lhs, [*lhs_at, *k])],
                                 [b.load(rhs, [*rhs_at, *k, j])])

        (total,) = b.fold([depth], [b.float(0.0)], step)
        _store(b, [total], [at], epilogue)


def _tiled(b: KernelBuilder, op: GraphOp, epilogue: Epilogue | None) -> None:
    """The cuda GEMM of `op` (see the module docstring), inside `b.building()`."""
    a, _w, has_rows, a_batch, w_batch, batch, tall, rows, cols, depth = _matrices(op)
    lhs, rhs, *_, out = b.args
    tiles = gemm_tiles(rows, cols)
    threads = tiles.ty * tiles.tx
    count = 1 if tall else pymath.prod(batch)
    with gemm_blocks(b, count, rows, cols, tiles) as blk:
        if rows == 0 or cols == 0:
            return
        with blk.shared_at:
            a_tile = b.shared([tiles.bk, tiles.bm], b.elements[lhs])
            w_tile = b.shared([tiles.bk, tiles.bn], b.elements[rhs])
        coords = [] if tall else b.delinearize(blk.batch, batch)

        def lhs_at(r: ir.Value, k: ir.Value) -> list[ir.Value]:
            if tall:
                return [*b.delinearize(r, a[:-1]), k]
            return [*broadcast_indices(b, coords, a_batch, batch), *([r] * has_rows), k]

        def rhs_at(k: ir.Value, c: ir.Value) -> list[ir.Value]:
            return [*broadcast_indices(b, coords, w_batch, batch), k, c]

        def out_at(r: ir.Value, c: ir.Value) -> list[ir.Value]:
            if tall:
                return [*b.delinearize(r, op.output[:-1]), c]
            return [*coords, *([r] * has_rows), c]

        def stage(k0: ir.Value) -> None:
            """All threads copy the k-slice [k0, k0 + bk) of both operands into the tiles."""
            _stage(b, blk.thread, threads, a_tile, (tiles.bm, tiles.bk), False,
                   lambda r, k: b.load(lhs, lhs_at(r, k)), (blk.row, k0), (rows, depth))
            _stage(b, blk.thread, threads, w_tile, (tiles.bk, tiles.bn), True,
                   lambda k, c: b.load(rhs, rhs_at(k, c)), (k0, blk.col), (depth, cols))

        mine_rows = [arith.addi(blk.ty, b.index(i * tiles.ty)) for i in range(tiles.tm)]
        mine_cols = [arith.addi(blk.tx, b.index(j * tiles.tx)) for j in range(tiles.tn)]

        def multiply(kk: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
            xs = [b.load(a_tile, [kk[0], r]) for r in mine_rows]
            ys = [b.load(w_tile, [kk[0], c]) for c in mine_cols]
            return [math.fma(x, y, acc[i * tiles.tn + j])
                    for i, x in enumerate(xs) for j, y in enumerate(ys)]

        def k_step(step: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            stage(b.mul(step, tiles.bk))
            b.barrier()
            acc = b.fold([tiles.bk], acc, multiply)
            b.barrier()  # the tiles are rewritten next step: everyone must be done reading
            return acc

        zero = b.float(0.0)
        steps = -(-depth // tiles.bk)
        acc = b.strided(b.index(0), steps, 1, [zero] * (tiles.tm * tiles.tn), k_step)
        for i, r in enumerate(mine_rows):
            for j, c in enumerate(mine_cols):
                row, col = arith.addi(blk.row, r), arith.addi(blk.col, c)
                checks = [b.less_than(v, n) for v, n, tile in
                          ((row, rows, tiles.bm), (col, cols, tiles.bn)) if n % tile]
                with b.guard(b.all_of(checks)):
                    at = out_at(row, col)
                    value = acc[i * tiles.tn + j]
                    b.store(value if epilogue is None else epilogue(b, value, at), out, at)


def _stage(b: KernelBuilder, thread: ir.Value, threads: int, tile: ir.Value,
           extent: tuple[int, int], rows_are_k: bool, load, origin: Sequence[ir.Value],
           bounds: tuple[int, int]) -> None:
    """Copy the `extent` block at `origin` of a matrix (`load(i, j)`, `bounds` its size) into
    `tile`, k-major: [k, m] for the lhs (its columns are k), [k, n] for the rhs (its rows
    are). The threads take consecutive elements along the matrix's rows (coalesced), a
    16-byte piece each when the rows divide into pieces: every piece is then aligned (the
    buffer is, and a row starts on a piece), its loads adjacent, one 128-bit load. What lies
    outside the matrix is 0: a piece is wholly in or out, its loads clamped to a valid piece,
    then a select."""
    height, width = extent
    lanes = vector_lanes(b, [width]) if bounds[1] % vector_lanes(b, [width]) == 0 else 1
    no_wrap = ir.Attribute.parse("#arith.overflow<nsw, nuw>")

    def copy(e: ir.Value, _: list[ir.Value]) -> list[ir.Value]:
        start = b.mul(e, lanes)
        i = arith.divui(start, b.index(width))
        j = arith.subi(start, arith.muli(i, b.index(width)))
        gi, gj = arith.addi(origin[0], i), arith.addi(origin[1], j)
        inside = arith.andi(b.less_than(gi, bounds[0]), b.less_than(gj, bounds[1]))
        ci = arith.minui(gi, b.index(bounds[0] - 1))
        cj = arith.minui(gj, b.index(bounds[1] - lanes))
        values = [load(ci, cj if lane == 0 else
                       arith.addi(cj, b.index(lane), overflow_flags=no_wrap))
                  for lane in range(lanes)]
        for lane, value in enumerate(values):
            jj = j if lane == 0 else arith.addi(j, b.index(lane), overflow_flags=no_wrap)
            b.store(arith.select(inside, value, b.float(0.0)), tile,
                    [i, jj] if rows_are_k else [jj, i])
        return []

    b.strided(thread, height * width // lanes, threads, [], copy)
