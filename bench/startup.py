"""What a user waits for before any kernel runs: the `hexir` command's start and compile of
the built-in program, and `hexir_runtime.load` + `close` of the checked-in modules.

    python bench/startup.py [--baseline=DIR] [--rounds=5] [--loads=15]

In the full environment. Each measurement is a fresh process (an import is paid once per
process, as a user's command pays it). `--baseline=DIR`, another checkout (a `git worktree`
of an earlier commit), is measured the same way in the same run, its packages first on
`PYTHONPATH`, the two alternating round by round so the machine's load falls on both alike;
the table gives medians over the rounds and the ratio now / baseline, and says whether the
two compilers wrote the same bytes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("hexir-format", "hexir-compiler", "hexir-runtime", "hxb-dump")
MODULES = ("fixtures/transformer_block-f32.hxb", "fixtures/generate.hxb",
           "fixtures/mlp-f64.hxb")
#: One process's median of `loads` load + close pairs of one module, in milliseconds.
LOAD = """
import sys, time, hexir_runtime
data = open(sys.argv[1], "rb").read()
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    hexir_runtime.load(data).close()
    times.append(time.perf_counter() - start)
print(sorted(times)[len(times) // 2] * 1e3)
"""


def environment(tree: Path) -> dict[str, str]:
    """This interpreter's environment with `tree`'s packages first on the path."""
    paths = [str(tree / "packages" / p / "src") for p in PACKAGES]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


def measure(tree: Path, out: Path, loads: int) -> dict[str, float]:
    env = environment(tree)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "hexir_compiler", "-emit=hxb", "-o", str(out)],
                   env=env, check=True, capture_output=True)
    row = {"hexir -emit=hxb (built-in), s": time.perf_counter() - start}
    for module in MODULES:
        done = subprocess.run([sys.executable, "-c", LOAD, str(tree / module), str(loads)],
                              env=env, check=True, capture_output=True, text=True)
        row[f"load + close {Path(module).name}, ms"] = float(done.stdout)
    return row


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loads", type=int, default=15)
    args = parser.parse_args(argv)
    trees = {"now": REPO} | ({"baseline": args.baseline} if args.baseline else {})
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for name, tree in trees.items():
                rows[name].append(measure(tree, Path(tmp) / f"{name}.hxb", args.loads))
        same = len({(Path(tmp) / f"{name}.hxb").read_bytes() for name in trees}) == 1
    medians = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
               for name, rs in rows.items()}
    names = list(trees)
    print("| measurement | " + " | ".join(names) +
          (" | now / baseline |" if args.baseline else " |"))
    print("|---" * (len(names) + 1 + bool(args.baseline)) + "|")
    for key in medians["now"]:
        cells = [f"{medians[n][key]:.3g}" for n in names]
        if args.baseline:
            cells.append(f"{medians['now'][key] / medians['baseline'][key]:.2f}")
        print(f"| {key} | " + " | ".join(cells) + " |")
    if args.baseline:
        print(f"\nthe two compilers' .hxb of the built-in program: "
              f"{'the same bytes' if same else 'different bytes'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
