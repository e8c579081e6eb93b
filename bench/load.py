"""Loading cost against module size: a 1 KiB module and a large one should load alike.

    python bench/load.py [--mib=1024] [--repeat=20] [--live=30000]

Builds two v3 modules that differ only in rodata size (one CONST of its first element, a
PRINT of it), writes them to a temporary directory, then times `hexir_runtime.load` +
`close` and one `run` of each, and reports how much the process's resident memory grew while
a module is loaded and run (the weights are mapped, never copied, so it stays flat).
The page cache is warm after writing; the point is what the runtime itself touches.
Then it times the memory plan's check (`hexir_format.plan.problem`, run at every load of a
planned module) on an entry with `--live` buffers live at once: it should grow as n log n.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

import hexir_format as hf
import hexir_runtime
from hexir_format import Command, Function


def module_with_rodata(nbytes: int) -> bytes:
    main = Function("main", (Command.const(0, 0, 8), Command.print(0, 1, 1)))
    return hf.build(hf.Module(3, (main,), bytes(nbytes), ()))


def plan_check_seconds(live: int) -> float:
    """The plan check of an entry whose `live` intermediates are all outputs (live at once)."""
    t = hf.TensorType(hf.DType.F32, (16,))
    commands = [Command.input(0, 0)]
    for s in range(1, live + 1):
        commands += [Command.alloc(s, t.nbytes), Command.dispatch(0, (0, s))]
    commands += [Command.output(s, s - 1) for s in range(1, live + 1)]
    types = dict.fromkeys(range(live + 1), t)
    devices = dict.fromkeys(range(live + 1), hf.Device.CPU)
    offsets = {s: 64 * (s - 1) for s in range(1, live + 1)}
    start = time.perf_counter()
    assert hf.plan.problem(commands, offsets, types, devices, [hf.KernelKind.MATMUL]) is None
    return time.perf_counter() - start


def rss_mib() -> float:
    """Current resident set size (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / (1 << 20)


def timed(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="size of the large rodata")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--live", type=int, default=30000, help="buffers live at once")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for label, size in (("1 KiB", 1024), (f"{args.mib} MiB", args.mib << 20)):
            paths[label] = Path(tmp) / f"{size}.hxb"
            paths[label].write_bytes(module_with_rodata(size))
        print(f"{'module':>10}  {'load+close':>12}  {'load+run+close':>15}")
        for label, path in paths.items():
            def load_close(path=path):
                hexir_runtime.load(path).close()

            def load_run_close(path=path):
                with hexir_runtime.load(path) as m:
                    m.run()

            t_load = timed(load_close, args.repeat)
            t_run = timed(load_run_close, args.repeat)
            before = rss_mib()
            with hexir_runtime.load(path) as m:
                m.run()
                grew = rss_mib() - before
            print(f"{label:>10}  {t_load * 1e3:>9.3f} ms  {t_run * 1e3:>12.3f} ms"
                  f"   (RSS while loaded and run: +{grew:.2f} MiB)")
    for live in (args.live // 10, args.live):
        print(f"plan check, {live} buffers live at once: {plan_check_seconds(live):.3f} s")


if __name__ == "__main__":
    main()
