"""The cpu kernels' thread pool: native worker threads that wait for work without the GIL.

A kernel big enough to split runs as chunks of its cpu grid on every core. Python threads
cannot hand work to each other quickly enough for that: each hand-over goes through the GIL
and a sleeping thread's wake-up (30-70 us on the machines we measure on), and a kernel pays
it at its start and its end -- about 110 us per kernel of the MLP benchmark, 8% of its call
(bench/README.md). So the workers are native: Python threads that each make one foreign
call into the pool's loop and stay there until the pool closes, spinning for a while
(`HEXIR_CPU_SPIN` cycles of the time-stamp counter, default 2**20: a few hundred
microseconds) after each kernel before they sleep on a futex, as MLAS's and OpenMP's do.

The loop is x86-64 machine code the runtime carries, `threads.o`, built from the LLVM IR in
`tools/threads_ir.py` with llvmlite when the runtime is developed (a test checks that it is
current) and linked by `hostcode` like a kernel's host image, with libc's `syscall` (for the
futex) offered to it alone. The calling
thread publishes a job (the kernel's entry, its pointers, the extent and the chunk count,
made once per launch), claims chunks itself like the workers, and returns when every chunk
has run. The job's chunks are cut into one contiguous range per participant (the caller is
participant 0, worker i participant i + 1), each with its own ticket that carries the job's
generation: a thread claims the chunks of its own range in order, then what is left of the
others' (a thread that starts late or runs slower has its range finished by the rest). A
claim is a compare-and-swap of the range's ticket, so a chunk runs once and a worker that
wakes late can take nothing of a finished job; a thread adds the chunks it ran to the done
count once, when it finds nothing left. So, kernel after kernel, the same thread computes
the same part of the grid -- the part of a tensor the next kernel's same part mostly reads
-- and in the common case the threads share two cache lines a kernel, not one per chunk.
That matters where the machine's two cores are far apart: on the 2-core VM we measure on, a
cache line written by the other core costs a round trip of ~60 ns at times and ~380 ns at
others (bench/README.md, "the slow state"), when SqueezeNet 1.1 on two threads took as long
as on one (7.5-7.8 ms, with one ticket claimed in turn by both threads: chunks alternated
between them).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import threading
from collections.abc import Sequence
from importlib import resources

import numpy as np

from hexir_runtime.errors import DeviceError
from hexir_runtime.hal import hostcode

# The shared state's layout (bytes), which tools/threads_ir.py compiles into the loop. The
# fields that threads write are a cache line apart: the generation, the done count, and a
# ticket per participant (the caller is participant 0, worker i participant i + 1), from
# TICKETS on; PARTS (how many participants) is written before any worker starts.
GEN, DONE, SLEEPERS, STOP, SPIN, PARTS, SLOTS, TICKETS = 0, 128, 192, 196, 200, 208, 256, 384
SLOT_BYTES = TICKET_BYTES = 64
# A job, copied into the slot of its generation's parity: six 64-bit fields.
JOB_FIELDS = ("entry", "argc", "args", "chunks", "extent", "end")
WORK, RUN, CLOSE, SEQUENCE, GENERATE = range(5)  # the entry's operations:
# hexir_threads(state, op, arg)
# SEQUENCE's record: `count` jobs (each JOB_FIELDS) at `jobs`.
SEQ_FIELDS = ("count", "jobs")
# GENERATE's record (`hexir_runtime.generate`): the step's sequence; its logits (`vocab`
# values, f64 if `wide`, else f32); its ids, positions and mask inputs' buffers (int64);
# the cached positions `filled`, the last `token`, `eos`, at most `count` tokens into
# `tokens`; `ncopies` copy records at `copies`; `produced` written back.
GEN_FIELDS = ("sequence", "logits", "vocab", "wide", "ids", "positions", "mask", "filled",
              "token", "eos", "count", "tokens", "copies", "ncopies", "produced")
# A cache's new position: `bytes` from each of `outer` blocks of the present (`src`, blocks
# `src_stride` apart) to the past (`dst` + filled * bytes, blocks `dst_stride` apart).
COPY_FIELDS = ("src", "dst", "outer", "src_stride", "dst_stride", "bytes")
MAX_ARGS = 64  # the most buffer pointers a kernel run by the pool may take
CHUNKS_PER_THREAD = 8  # so that a thread that starts late or runs slower takes fewer
#: Cycles a waiting thread spins before each further check also yields its core
#: (`sched_yield`): where other processes' threads are runnable -- ONNX Runtime's or
#: PyTorch's pools spinning after their own calls -- a thread of ours that waits on a chunk
#: would otherwise hold a core the chunk's thread needs (bench/coexist.py). A few
#: microseconds: a wait that short is a chunk about to finish, and with nothing else
#: runnable a yield returns at once.
YIELD_AFTER = 1 << 14
ENTRY = "hexir_threads"
#: The profile's compute peak (`hexir_runtime.profile`): `threads.o` also defines, per x86-64
#: level (1 and 2 share SSE's), an entry `hexir_peak_v<level>(out, lo, hi)` that runs
#: (hi - lo) x PEAK_ITERATIONS iterations of PEAK_CHAINS independent multiply-adds on f32
#: vectors of the level's PEAK_LANES (an FMA from v3 on; at v1/v2 a multiply and an add) and
#: stores their sum at `out` + lo vectors. Twelve chains keep every FMA unit busy on the
#: CPUs we know (two units of latency 4 need 8; one of latency 5 needs 5).
PEAK_LANES = {2: 4, 3: 8, 4: 16}
PEAK_CHAINS, PEAK_ITERATIONS = 12, 1 << 17


class Record:
    """A SEQUENCE or GENERATE record (`op`) and the arrays it points to, kept alive
    together: `run` hands it to the loop (`run_native`)."""

    def __init__(self, op: int, fields: tuple[str, ...], **values: int):
        self.op, self.fields = op, fields
        self.array = np.zeros(len(fields), np.int64)
        self.held: list[object] = []  # what the record points into, kept alive
        self.pooled = 0  # a SEQUENCE's jobs of more than one chunk (`Pool.jobs` counts them)
        # a SEQUENCE's pointers, every job's in turn, and which are buffers' addresses (the
        # rest are size operands): a caller may repoint buffers between runs
        # (`arena.direct_inputs`)
        self.pointers = np.zeros(0, np.uint64)
        self.addresses = np.zeros(0, bool)
        for name, value in values.items():
            self[name] = value
        self.address = self.array.ctypes.data

    def __getitem__(self, name: str) -> int:
        return int(self.array[self.fields.index(name)])

    def __setitem__(self, name: str, value: int) -> None:
        self.array[self.fields.index(name)] = value

    def hold(self, array: np.ndarray) -> int:
        """`array` kept alive with the record; its address."""
        self.held.append(array)
        return array.ctypes.data

    def run(self) -> None:
        run_native(self)


def sequence(jobs: Sequence[hostcode.Job]) -> Record | None:
    """The SEQUENCE record of `jobs`, run in order by one foreign call (`run_native`); None
    when one has more pointers than the loop passes (MAX_ARGS)."""
    if any(len(j.pointers) > MAX_ARGS for j in jobs):
        return None
    jobs = [j for j in jobs if j.end != 0]  # an empty range: nothing to call
    record = Record(SEQUENCE, SEQ_FIELDS, count=len(jobs))
    record.pointers = np.array([p for j in jobs for p in j.pointers] or [0], np.uint64)
    record.addresses = np.array([i < len(j.addresses) for j in jobs
                                 for i in range(len(j.pointers))] or [False])
    at = record.hold(record.pointers)
    table = np.zeros((max(1, len(jobs)), len(JOB_FIELDS)), np.int64)
    for row, j in zip(table, jobs):  # noqa: B905 (table has a row per job, or one)
        row[:] = (j.entry, len(j.pointers), at, j.chunks, j.extent, j.end)
        at += 8 * len(j.pointers)
    record["jobs"] = record.hold(table)
    record.pooled = sum(j.chunks > 1 for j in jobs)
    return record


class Pool:
    """`threads` threads: the caller's and `threads - 1` native workers."""

    def __init__(self, threads: int, spin_cycles: int = 1 << 20):
        code = _load()
        self._code: hostcode.HostKernel | None = code  # None once closed
        self._call = hostcode.call_kernel(code.entry, 1)
        size = TICKETS + threads * TICKET_BYTES
        raw = np.zeros(size + SLOT_BYTES, np.uint8)
        skip = -raw.ctypes.data % SLOT_BYTES
        self._state = raw[skip:skip + size]
        self._state[SPIN:SPIN + 8].view(np.int64)[0] = spin_cycles
        self._state[PARTS:PARTS + 8].view(np.int64)[0] = threads
        self._address = self._state.ctypes.data
        self.threads = threads
        self.jobs = 0  # jobs run on the pool, alone or in a SEQUENCE (the tests count them)
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        try:
            for i in range(threads - 1):
                worker = threading.Thread(target=self._call, args=(self._address, WORK, i + 1),
                                          name=f"hexir-cpu-{i}", daemon=True)
                worker.start()
                self._workers.append(worker)
        except (RuntimeError, MemoryError) as e:  # no memory or no threads left for them
            self.close()
            raise DeviceError(f"cpu: cannot start the thread pool's {threads - 1} workers "
                              f"({THREADS_SETTING}={threads}): {e}; set {THREADS_SETTING} "
                              "lower") from None

    def chunks(self, extent: int, argc: int) -> int:
        """How many chunks a launch over `extent` with `argc` pointers is split into: 1 for
        one the pool does not take (too many pointers for it, or nothing to split)."""
        return 1 if argc > MAX_ARGS or extent <= 1 else min(extent,
                                                             self.threads * CHUNKS_PER_THREAD)

    def launch(self, entry: int, pointers: Sequence[int], extent: int, end: int, serial):
        """A callable that runs kernel `entry` over [0, extent) in chunks on the pool (the
        last chunk to `end`), its job made now. `serial` is the same launch on the calling
        thread alone: what runs when the pool is busy, and in its place for a kernel with too
        many pointers for the pool."""
        if len(pointers) > MAX_ARGS:
            return serial
        args = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
        chunks = self.chunks(extent, len(pointers))
        job = (ctypes.c_int64 * len(JOB_FIELDS))(entry, len(pointers), ctypes.addressof(args),
                                                 chunks, extent, end)
        return functools.partial(self._run, job, args, serial)

    def _run(self, job, args, serial) -> None:
        if not self._lock.acquire(blocking=False):  # another thread's kernel has the pool
            serial()
            return
        try:
            if self._code is None:
                raise DeviceError("the cpu thread pool was closed")
            self._call(self._address, RUN, ctypes.addressof(job))
            self.jobs += 1
        finally:
            self._lock.release()

    def native(self, record: Record) -> None:
        """SEQUENCE or GENERATE on `record`, its pooled jobs on the pool; every job on the
        calling thread alone when another thread's job has the pool."""
        if not self._lock.acquire(blocking=False):
            self._call(0, record.op, record.address)
            return
        try:
            if self._code is None:
                raise DeviceError("the cpu thread pool was closed")
            self._call(self._address, record.op, record.address)
            self.jobs += record.pooled
        finally:
            self._lock.release()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop and join the workers, then unmap the loop; launches made earlier refuse."""
        with self._lock:
            if self._code is None:
                return
            self._call(self._address, CLOSE, 0)
            for worker in self._workers:
                worker.join()
            self._code.close()
            self._code = None


THREADS_SETTING, SPIN_SETTING = "HEXIR_CPU_THREADS", "HEXIR_CPU_SPIN"
#: The settings' ranges: more threads than this only wait for each other (and each costs a
#: stack); a spin past 2**32 cycles (a second or more) is a busy-wait, not a spin.
MAX_THREADS, MAX_SPIN = 1024, 1 << 32


def cpu_threads() -> int:
    """How many threads cpu kernels use: $HEXIR_CPU_THREADS, else one per core (at most
    MAX_THREADS)."""
    return _setting(THREADS_SETTING, min(os.cpu_count() or 1, MAX_THREADS), 1, MAX_THREADS)


def spin_cycles() -> int:
    """How long a worker spins after a kernel: $HEXIR_CPU_SPIN cycles, else 2**20."""
    return _setting(SPIN_SETTING, 1 << 20, 0, MAX_SPIN)


def _setting(name: str, default: int, least: int, most: int) -> int:
    """The integer in environment variable `name` (`default` when unset), in least..most; a
    one-line DeviceError naming the variable, its value and the range otherwise."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if not least <= value <= most:
        raise DeviceError(f"{name}={text!r}: expected an integer from {least} to {most}")
    return value


_lock = threading.Lock()
_shared: Pool | None = None
_made = False


def run_native(record: Record) -> None:
    """SEQUENCE or GENERATE on `record`: on the shared pool where there is one, else every
    job on the calling thread."""
    pool = shared()
    if pool is not None:
        pool.native(record)
    else:
        _alone()(0, record.op, record.address)


@functools.cache
def _alone():
    """The loop's entry, loaded once per process, for SEQUENCE and GENERATE without a pool
    (a null state: nothing is published, no thread is started)."""
    code = _load()
    _kept.append(code)
    return hostcode.call_kernel(code.entry, 1)


_kept: list[hostcode.HostKernel] = []  # `_alone`'s, `peak_loop`'s: mapped until the end


def _load(entry: str = ENTRY, argc: int = 1,
          what: str = "the cpu thread pool") -> hostcode.HostKernel:
    """threads.o linked into this process, libc's `syscall` offered to it alone: its entry
    `entry`, taking `argc` pointers."""
    syscall = ctypes.cast(ctypes.CDLL(None).syscall, ctypes.c_void_p).value
    assert syscall is not None, "a symbol libc exports has an address"
    image = resources.files("hexir_runtime.hal").joinpath("threads.o").read_bytes()
    return hostcode.load(image, entry, argc, what=what, provided={"syscall": syscall})


@functools.cache
def peak_loop(level: int) -> hostcode.HostKernel:
    """The peak loop of x86-64 `level` (see PEAK_LANES), loaded once per process and kept
    mapped until it ends: the caller runs it only at a level this CPU runs."""
    code = _load(f"hexir_peak_v{max(level, 2)}", 1, "the profile's peak loop")
    _kept.append(code)
    return code


def shared() -> Pool | None:
    """The process's pool, made on first use ($HEXIR_CPU_THREADS threads, else one per core;
    None for one thread) and closed at exit."""
    global _shared, _made
    if _made:  # (set once, after _shared: a call's hot path reads it without the lock)
        return _shared
    with _lock:
        if not _made:
            threads = cpu_threads()
            if threads > 1:
                _shared = Pool(threads, spin_cycles())
                atexit.register(_shared.close)
            _made = True
        return _shared
