"""The runtime's native loop (`hal/threads.o`, built by tools/threads_ir.py) beyond the pool:
SEQUENCE runs a call's kernels in one foreign call, GENERATE the decode loop of a generate
entry point. Driven here with hand-made records and the host fixtures' kernels, so that each
of its rules -- order, chunks, the pool-less path, the choice of a token, the cache copies,
the end token -- is seen alone (test_generate.py runs it on a real module)."""

import numpy as np
import pytest

from hexir_runtime.hal import hostcode, threads
from test_hostcode import X86_64, fixture, load, ptrs, runs_v3

pytestmark = pytest.mark.skipif(not X86_64, reason="the loop is x86-64 code")


def job(k: hostcode.HostKernel, arrays, extent: int, pool=None) -> hostcode.Job:
    made = k.job(ptrs(*arrays), extent, pool)
    assert made is not None
    return made


@runs_v3
@pytest.mark.parametrize("workers", [0, 2, 3])
def test_a_sequence_runs_its_jobs_in_order_each_chunk_once(workers, monkeypatch):
    """0 workers: no pool, every job on the calling thread (a null state)."""
    pool = threads.Pool(workers) if workers else None
    monkeypatch.setattr(threads, "shared", lambda: pool)
    try:
        with load(fixture("chunk"), "chunk", 2) as chunk, load(fixture("iota"), "iota", 1) \
                as iota, load(fixture("zero"), "zero", 1) as zero:
            n = 1000
            first, runs, out = np.full(n, -1, np.int64), np.zeros(n, np.int64), \
                np.zeros(n, np.int64)
            # iota then zero over the first n/2 f32s (the first n/4 int64s): order shows
            record = threads.sequence([job(chunk, (first, runs), n, pool),
                                       job(iota, (out,), n, pool),
                                       job(zero, (out,), n // 2, pool),
                                       job(chunk, (first, runs), n, pool)])
            assert record is not None
            for _ in range(20):
                runs[:] = 0
                record.run()
                assert (runs == 2).all()
                np.testing.assert_array_equal(out[:n // 4], 0)
                np.testing.assert_array_equal(out[n // 4:], np.arange(n // 4, n))
            if pool is not None:
                chunks = len(set(first.tolist()))
                assert chunks == min(n, workers * threads.CHUNKS_PER_THREAD)
                assert pool.jobs == 20 * 4  # its jobs of more than one chunk: all four
            else:
                assert set(first.tolist()) == {0}
    finally:
        if pool is not None:
            pool.close()


@runs_v3
def test_a_busy_pool_runs_the_sequence_alone():
    with threads.Pool(2) as pool, load(fixture("chunk"), "chunk", 2) as chunk:
        first, runs = np.full(500, -1, np.int64), np.zeros(500, np.int64)
        record = threads.sequence([job(chunk, (first, runs), 500, pool)])
        assert record is not None
        with pool._lock:  # another thread's job holds the pool
            pool.native(record)
        assert (runs == 1).all() and set(first.tolist()) == {0}


def test_a_job_with_more_pointers_than_the_loop_passes_has_no_sequence():
    wide = hostcode.Job(0, (0,) * (threads.MAX_ARGS + 1), 1, 1, 1)
    assert threads.sequence([wide]) is None
    assert threads.sequence([]) is not None


def generation(logits: np.ndarray, count: int, eos: int = -1, filled: int = 3,
               copies: np.ndarray | None = None):
    """A GENERATE record over a step with no kernels: the logits stay as given."""
    ids, positions, mask = np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(16, np.int64)
    tokens = np.full(count + 1, -7, np.int64)
    steps = threads.sequence([])
    assert steps is not None
    copies = np.zeros((0, len(threads.COPY_FIELDS)), np.int64) if copies is None else copies
    record = threads.Record(threads.GENERATE, threads.GEN_FIELDS, sequence=steps.address,
                            vocab=logits.size, wide=int(logits.dtype == np.float64),
                            filled=filled, token=5, eos=eos, count=count,
                            ncopies=len(copies))
    record.held.append(steps)
    for name, array in (("logits", logits), ("ids", ids), ("positions", positions),
                        ("mask", mask), ("tokens", tokens), ("copies", copies)):
        record[name] = record.hold(array)
    return record, ids, positions, mask, tokens


@pytest.mark.parametrize("values", [
    [0.5, 2.0, -1.0, 2.0, 1.0],  # a tie: the first
    [-np.inf, -np.inf, -np.inf],
    [1.0, np.nan, 3.0, np.nan],  # the first NaN, as numpy's argmax
    [np.nan, 1.0],
    [-3.0, -2.0, -1.0],
    [7.0],
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_token_chosen_is_numpys_argmax(values, dtype):
    logits = np.array(values, dtype)
    record, *_, tokens = generation(logits, 1)
    record.run()
    assert record["produced"] == 1 and tokens[0] == np.argmax(logits)


def test_each_token_is_fed_at_its_position_unmasked_and_counted():
    logits = np.zeros(9, np.float32)
    logits[4] = 1.0
    record, ids, positions, mask, tokens = generation(logits, 4)
    record.run()
    assert record["produced"] == 4 and tokens[:4].tolist() == [4] * 4 and tokens[4] == -7
    assert ids[0] == 4 and positions[0] == 6  # the last step's token and position
    assert record["filled"] == 7 and record["token"] == 4
    assert mask.tolist() == [0, 0, 0, 1, 1, 1, 1] + [0] * 9


def test_the_end_token_stops_the_loop_after_it():
    logits = np.arange(6, dtype=np.float32)
    record, *_, tokens = generation(logits, 10, eos=5)
    record.run()
    assert record["produced"] == 1 and tokens[0] == 5 and record["filled"] == 4


def test_a_zero_count_runs_nothing():
    record, ids, *_ = generation(np.ones(3, np.float32), 0)
    record.run()
    assert record["produced"] == 0 and record["filled"] == 3 and ids[0] == 0


def test_each_cache_gets_the_new_position_at_filled():
    """A present [2, 3, 4 + 1, 2] (the window of 4, then the new position) and its past
    [2, 3, 4, 2], along axis 2: each of the 6 outer blocks moves its 8 bytes."""
    size, filled = 4, 1
    present = np.arange(2 * 3 * (size + 1) * 2, dtype=np.float32).reshape(2, 3, size + 1, 2)
    past = np.zeros((2, 3, size, 2), np.float32)
    inner = 2 * 4
    copies = np.array([[present.ctypes.data + size * inner, past.ctypes.data, 6,
                        (size + 1) * inner, size * inner, inner]], np.int64)
    record, *_ = generation(np.ones(3, np.float32), 2, filled=filled, copies=copies)
    record.run()
    want = np.zeros_like(past)
    want[:, :, filled:filled + 2] = present[:, :, size:size + 1]
    np.testing.assert_array_equal(past, want)


def test_the_loops_slot_is_the_copy_record():
    """`generate.Slot` is packed field by field into GENERATE's copy records."""
    from hexir_runtime import generate

    assert generate.Slot._fields == threads.COPY_FIELDS


@runs_v3
def test_a_kernel_alone_between_other_steps_is_a_sequence_of_one():
    """`arena.sequences`: a compiled kernel with no other beside it is a one-job SEQUENCE
    step too (so that a call can point it at the caller's array: `arena.direct_inputs`),
    named as its command; the steps that are not kernels stay as they are, in order."""
    from hexir_runtime.arena import Step, sequences

    ran: list[str] = []
    with load(fixture("iota"), "iota", 1) as iota:
        out = np.zeros(128, np.int64)
        made = job(iota, (out,), 128)
        steps = [Step("command 0 (input)", lambda: ran.append("input")),
                 Step("command 1 (dispatch)", lambda: ran.append("alone"), job=made),
                 Step("command 2 (print)", lambda: ran.append("print"))]
        got = sequences(steps)
        assert [s.label for s in got] == ["command 0 (input)", "command 1 (cpu sequence)",
                                          "command 2 (print)"]
        assert got[0] is steps[0] and got[2] is steps[2] and got[1].record is not None
        for step in got:
            step.run()
        assert ran == ["input", "print"]  # the kernel ran natively, not its Python launch
        np.testing.assert_array_equal(out, np.arange(128))



@pytest.mark.parametrize("level", [1, 2, 3, 4])
@pytest.mark.parametrize("workers", [0, 2])
def test_the_peak_loop_runs_each_chunk_to_the_fixed_point(level, workers):
    """The profile's peak loop (`threads.peak_loop`): a call over [lo, hi) runs its twelve
    chains of a = a x 0.5 + 0.25 to 0.5 exactly and stores 12 x 0.5 = 6 in every lane of
    vector lo. On a pool each of the 3 x threads chunks is one call of its own; alone, the
    whole range is one call. Run only at a level this CPU runs."""
    if level > hostcode.host_level():
        pytest.skip(f"this CPU runs no x86-64-v{level} code")
    lanes = threads.PEAK_LANES[max(level, 2)]
    chunks = 3 * (workers + 1)
    out = np.full((chunks + 1, lanes), -1, np.float32)
    if workers:
        with threads.Pool(workers + 1) as pool:
            threads.peak_loop(level).bind(ptrs(out), chunks, pool)()
    else:
        threads.peak_loop(level).bind(ptrs(out), chunks)()
    stored = chunks if workers else 1
    assert (out[:stored] == 6).all() and (out[stored:] == -1).all()
