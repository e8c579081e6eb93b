"""A per-kernel profile of an entry point: where a call's time goes, against the machine.

`profile(module, entry, inputs, calls)` (or `Module.profile`, `hexir-run --profile`) makes the
entry's steps once, as a call does, then runs them `calls` times, timing each step alone (a
device step waited for, so its time is its own) and, in between, times whole calls the ordinary
way. Per kernel: the median time, its share of the median call, and what it achieved -- GFLOP/s
for the kernels whose work the profile can count from their arguments (a matmul or linear: 2 M N
K; a convolution, its weight in ONNX's layout or packed by the compiler: 2 x outputs x C/g x
kernel, every window offset counted, those that read only padding too: a conv whose window lies
mostly in the padding, an atrous one, can pass the compute peak), GB/s (the bytes of its
arguments, each read or written once: a lower bound of its traffic) for every kernel -- each as
a fraction of the machine's peak, and which roof bounds it (roofline framing): compute when its
FLOPs per byte reach the ridge point (peak FLOP/s over peak bytes/s), else memory. A kernel
whose data stays in the caches can pass the memory peak, which is DRAM's. The runtime's own
overhead per call is the median call less its kernels' medians (inputs bound and copied in,
results copied out, the step loop).

The peaks are measured now, and the profile says how:
- compute: the peak loop of the kernel's x86-64 level (`threads.peak_loop`: twelve
  independent multiply-adds on vectors of the level's width, FMAs from v3 on) on every
  thread of the pool at once, the best of PEAK_RUNS before the kernels are timed, one run
  after each timed call and PEAK_RUNS at the end: a VM's neighbours take its cores for
  seconds at a time, so a peak measured in one moment, as it was once, after the calls, can
  read half what the kernels had (the example MLP's kernels at 167-184% of it); f64 half
  that. Beside it, the nominal
  peak it replaced: threads x clock x FLOPs a core does per cycle at the level (v4: two
  16-lane f32 FMA pipes, 64 FLOP/cycle; v3 32; v1/v2: an SSE add and multiply of 4 lanes,
  8), the clock the highest the system reports (cpufreq's `cpuinfo_max_freq`, else
  /proc/cpuinfo's `cpu MHz`). The two part where the system reports a base clock (a VM
  boosts past it) or the cores have narrower units than the level's registers (Zen 1 does
  a 256-bit FMA on two 128-bit units): on a 2-core AMD EPYC VM (2.00 GHz reported; CPUID
  family 23 model 1) v3's nominal 128 GFLOP/s on two threads measures 95, and the example
  MLP's matmuls, at 66-70% of the nominal, run at 93-95% of that; on a Zen 5 one (2.60 GHz
  reported; family 26 model 2) v4's nominal 332 measures 444-494 and those matmuls run at
  94-98% of it. (A pool busy with another thread's call runs the loop on the calling thread
  alone: the peak then reads as one thread's);
- memory: a 64 MiB numpy copy timed now (the best of 3; 2 x its bytes moved), one thread:
  more threads may move more.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hexir_format import CPU_LEVELS, Device, DType, Executable
from hexir_runtime.arena import IDLE
from hexir_runtime.hal import threads

#: FLOPs one core does per cycle at each x86-64 level, f32 (f64: half).
FLOPS_PER_CYCLE = {1: 8, 2: 8, 3: 32, 4: 64}
PIPES = {1: "an SSE add and multiply of 4 lanes", 2: "an SSE add and multiply of 4 lanes",
         3: "two 8-lane FMAs", 4: "two 16-lane FMAs"}
COPY_BYTES = 64 << 20
PEAK_RUNS = 5  # runs of the peak loop, the fastest kept (each about 0.5 ms here)


@dataclass
class KernelTime:
    """One DISPATCH (or a captured cuda graph) of the entry: its median seconds per call."""

    name: str
    seconds: float
    flops: int | None
    nbytes: int
    exe: Executable | None
    peak_flops: float | None = None  # the compute peak at its level and element type
    peak_bytes: float | None = None  # the memory peak (cpu kernels)

    @property
    def gflops(self) -> float | None:
        return None if self.flops is None or not self.seconds else self.flops / self.seconds / 1e9

    @property
    def gbytes(self) -> float:
        return self.nbytes / self.seconds / 1e9 if self.seconds else 0.0

    @property
    def bound(self) -> str:
        """Which roof bounds the kernel: compute (its FLOPs per byte reach the ridge point),
        memory, or '-' where the peaks are unknown (cuda)."""
        if self.peak_bytes is None:
            return "-"
        if self.flops is None or not self.peak_flops:
            return "memory"
        ridge = self.peak_flops / self.peak_bytes
        return "compute" if self.flops / max(self.nbytes, 1) >= ridge else "memory"


@dataclass
class Profile:
    """What `profile` measured; `str()` is the table `hexir-run --profile` prints."""

    entry: str
    calls: int
    threads: int
    call_seconds: float  # the median whole call
    kernels: list[KernelTime] = field(default_factory=list)
    peak_flops: dict[tuple[int, str], float] = field(default_factory=dict)  # (level, dtype)
    peak_threads: int = 1  # the threads the compute peak was measured on at once
    peak_bytes: float = 0.0
    clock_hz: float = 0.0
    clock_source: str = ""

    @property
    def kernel_seconds(self) -> float:
        return sum(k.seconds for k in self.kernels)

    @property
    def overhead_seconds(self) -> float:
        """The runtime's own time per call: the median call less its kernels."""
        return max(0.0, self.call_seconds - self.kernel_seconds)

    def __str__(self) -> str:
        us = 1e6
        lines = [
            (f"profile       : {self.entry}, {self.calls} calls, {self.threads} cpu thread"
             f"{'s' * (self.threads != 1)}"),
            (f"per call      : median {self.call_seconds * us:.1f} us; kernels "
             f"{self.kernel_seconds * us:.1f} us, runtime overhead "
             f"{self.overhead_seconds * us:.1f} us"),
        ]
        for (level, dtype), peak in sorted(self.peak_flops.items()):
            per = FLOPS_PER_CYCLE[level] // (2 if dtype == "f64" else 1)
            nominal = self.threads * self.clock_hz * per
            lines.append(f"peak compute  : {peak / 1e9:.1f} GFLOP/s {dtype} at {CPU_LEVELS[level]}"
                         f" (a multiply-add loop on {self.peak_threads} thread"
                         f"{'s' * (self.peak_threads != 1)} at once, measured now; nominal "
                         f"{nominal / 1e9:.1f}: {self.threads} x {self.clock_hz / 1e9:.2f} GHz "
                         f"({self.clock_source}) x {per} FLOP/cycle, {PIPES[level]})")
        lines.append(f"peak memory   : {self.peak_bytes / 1e9:.1f} GB/s (a "
                     f"{COPY_BYTES >> 20} MiB copy, one thread, measured now)")
        lines.append(f"{'kernel':<32} {'us':>10} {'share':>7} {'GFLOP/s':>9} {'peak':>7} "
                     f"{'GB/s':>8} {'peak':>7}  bound")
        for k in self.kernels:
            share = k.seconds / self.call_seconds if self.call_seconds else 0.0
            gflops = "-" if k.gflops is None else f"{k.gflops:.2f}"
            of_flops = "-" if k.gflops is None or not k.peak_flops else \
                f"{k.gflops * 1e9 / k.peak_flops:.1%}"
            of_bytes = "-" if not k.peak_bytes else f"{k.gbytes * 1e9 / k.peak_bytes:.1%}"
            lines.append(f"{k.name:<32} {k.seconds * us:>10.1f} {share:>7.1%} {gflops:>9} "
                         f"{of_flops:>7} {k.gbytes:>8.2f} {of_bytes:>7}  {k.bound}")
        return "\n".join(lines)


def work(exe: Executable) -> int | None:
    """The FLOPs of one run of `exe`, where its arguments say: a matmul or linear (named by
    the compiler after the ops it covers) 2 x outputs x K, K the lhs's last axis; a
    convolution 2 x outputs x C/g x kernel, its weight either ONNX's [M, C/g, *kernel] (as
    depthwise kernels read it) or packed at compile time into panels of output channels,
    [panels, *kernel, C/g, lanes] with the M channels filling the last panel partly."""
    out = exe.args[-1].static_shape  # (a dynamic module's: for one call's sizes)
    if re.match(r"(matmul|linear)(_|$)", exe.name) and exe.args[0].shape:
        return 2 * math.prod(out) * exe.args[0].static_shape[-1]
    if exe.name.startswith("conv") and len(exe.args) >= 3 and len(out) >= 3:
        w = exe.args[1].static_shape
        if len(w) == len(out) and w[0] == out[1]:
            return 2 * math.prod(out) * math.prod(w[1:])
        if len(w) == len(out) + 1 and (w[0] - 1) * w[-1] < out[1] <= w[0] * w[-1]:
            return 2 * math.prod(out) * math.prod(w[1:-1])
    return None


def profile(module: Any, entry: str, checked: Sequence[Any], calls: int = 20,
            warmup: int = 3) -> Profile:
    """Profile `calls` calls of `entry` of the loaded `module` (a `Module`) on `checked`
    (its inputs as `api.check_inputs` returns them; see the module docstring)."""
    resident = module._enter()  # counted as a call in flight: close() waits for it
    try:
        program = module._program(resident, module.prepare(entry)._plan, checked)
        for _ in range(warmup):
            module.execute(entry, checked)
        arena = program._take()
        steps = list(arena.steps)
        devices = program.resident.devices
        executables = program.module_plan.module.executables
        exes = [_executable(step.label, program.plan.commands, executables) for step in steps]
        keys = sorted({key for key in map(_peak_key, exes) if key is not None})
        peaks = {level: _compute_peak(level) for level in {level for level, _ in keys}}

        def measure_peaks(runs: int) -> None:
            for level, before in peaks.items():
                peaks[level] = max(before, _compute_peak(level, runs), key=lambda p: p[1])

        per_step: list[list[float]] = [[] for _ in steps]
        whole: list[float] = []
        try:
            arena.call = program.call(checked, None)
            for _ in range(calls):
                for i, step in enumerate(steps):
                    start = time.perf_counter()
                    step.run()
                    if step.device is not None:
                        devices[step.device].wait()
                    per_step[i].append(time.perf_counter() - start)
                measure_peaks(1)
            arena.call = IDLE
        finally:
            arena.call = IDLE
            program._free.append(arena)
        for _ in range(calls):
            start = time.perf_counter()
            module.execute(entry, checked)
            whole.append(time.perf_counter() - start)
        measure_peaks(PEAK_RUNS)
    finally:
        module._leave()
    result = Profile(entry, calls, threads.cpu_threads(), statistics.median(whole))
    result.clock_hz, result.clock_source = _clock()
    result.peak_bytes = _copy_bandwidth()
    for level, dtype in keys:
        result.peak_threads, f32 = peaks[level]
        result.peak_flops[level, dtype] = f32 / (2 if dtype == "f64" else 1)
    for step, exe, times in zip(steps, exes, per_step, strict=True):
        if exe is None and not step.label.endswith("graph)"):
            continue  # an input, a copy, a print: the runtime's own work
        result.kernels.append(_kernel(result, step.label, exe, statistics.median(times)))
    return result


def _executable(label: str, commands, executables) -> Executable | None:
    """The executable a step dispatches (its label names the command), else None."""
    found = re.fullmatch(r"command (\d+) \(dispatch\)", label)
    if found is None:
        return None
    return executables[commands[int(found.group(1))].executable]


def _peak_key(exe: Executable | None) -> tuple[int, str] | None:
    """(level, element type) of the compute peak a cpu kernel whose work is counted is
    measured against, else None."""
    if exe is None or exe.device is not Device.CPU or not exe.cpu_level or work(exe) is None:
        return None
    return exe.cpu_level, "f64" if exe.args[-1].dtype is DType.F64 else "f32"


def _kernel(result: Profile, label: str, exe: Executable | None, seconds: float) -> KernelTime:
    if exe is None:  # a run of cuda kernels captured as one graph
        return KernelTime(label, seconds, None, 0, None)
    flops, nbytes = work(exe), sum(t.static_nbytes for t in exe.args)
    timed = KernelTime(exe.name, seconds, flops, nbytes, exe)
    if exe.device is Device.CPU and exe.cpu_level:
        timed.peak_bytes = result.peak_bytes
        key = _peak_key(exe)
        if key is not None:
            timed.peak_flops = result.peak_flops[key]
    return timed


def _compute_peak(level: int, runs: int = PEAK_RUNS) -> tuple[int, float]:
    """The threads of the process's pool (1 without one) and the f32 FLOP/s they do at once
    running the peak loop of x86-64 `level` (one chunk each), the best of `runs`."""
    pool = threads.shared()
    count = 1 if pool is None else pool.threads
    lanes = threads.PEAK_LANES[max(level, 2)]
    out = np.zeros(count * lanes, np.float32)  # each chunk's sum, one vector apart
    run = threads.peak_loop(level).bind([out.ctypes.data], count, pool)
    run()  # the workers awake, the code's pages mapped
    best = math.inf
    for _ in range(runs):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    flops = count * threads.PEAK_ITERATIONS * threads.PEAK_CHAINS * lanes * 2
    return count, flops / best


@functools.cache
def _clock() -> tuple[float, str]:
    """The cores' highest clock in Hz, and where it was read."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
            return int(f.read()) * 1e3, "cpufreq max"
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            mhz = [float(line.split(":")[1]) for line in info if line.startswith("cpu MHz")]
        return max(mhz) * 1e6, "/proc/cpuinfo"
    except (OSError, ValueError, IndexError):
        return 1e9, "unknown, 1 GHz assumed"


def _copy_bandwidth() -> float:
    """Bytes per second a 64 MiB copy moves (read and write), the best of three."""
    src = np.ones(COPY_BYTES // 8)
    dst = np.empty_like(src)
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * COPY_BYTES / best
