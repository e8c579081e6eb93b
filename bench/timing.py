"""What the in-process benchmarks (models.py, conv.py, pool.py) do between one engine's timed
block and the next: let the other engine's pool stop spinning, then warm the next one up.

Each engine's thread pool spins for a while after its last call: ONNX Runtime's intra-op
pool keeps a core busy for about 40 ms (bench/README.md, coexist.py), PyTorch's OpenMP
threads spin too, Hexir's for a few hundred microseconds. A block timed inside another
engine's spin measures two engines sharing the cores (on 2 cores, Hexir's two threads ran a
conv no faster than one), which coexist.py measures on purpose and these must not.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def settle(slice_s: float = 0.005, most_s: float = 1.0) -> None:
    """Wait until this process's threads are idle: two slices in a row (its CPU time moves in
    scheduler ticks) in which the process used under a tenth of the wall time."""
    deadline, idle = time.perf_counter() + most_s, 0
    while idle < 2 and time.perf_counter() < deadline:
        wall, cpu = time.perf_counter(), time.process_time()
        time.sleep(slice_s)
        busy = time.process_time() - cpu >= 0.1 * (time.perf_counter() - wall)
        idle = 0 if busy else idle + 1


def warm(call: Callable[[], object], least_s: float = 0.02) -> None:
    """Untimed calls, at least two and at least `least_s`: after `settle` the pool's threads
    sleep, and the first calls after an idle spell run up to 2x slower on this virtual
    machine (the weights out of cache, the cores clocked down: bench/README.md)."""
    start, calls = time.perf_counter(), 0
    while calls < 2 or time.perf_counter() - start < least_s:
        call()
        calls += 1


def interleaved(engines: dict[str, Callable[[], object]], rounds: int, block: int,
                clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Each engine's median time per call: `rounds` times, each engine in turn settles,
    warms up and times a block of `block` calls (conv.py's and pool.py's one-op timings)."""
    times: dict[str, list[float]] = {engine: [] for engine in engines}
    for _ in range(rounds):
        for engine, call in engines.items():
            settle()  # the other engine's pool stops spinning
            warm(call)
            start = clock()
            for _ in range(block):
                call()
            times[engine].append((clock() - start) / block)
    return {engine: statistics.median(spent) for engine, spent in times.items()}
