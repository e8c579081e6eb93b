"""A coverage-guided fuzz target (atheris, libFuzzer) for the reader, the validator and a run.

Any bytes go to `hexir_runtime.load` and, when they load, every entry point runs on the cpu
with inputs of its signature. The one outcome allowed besides a run is a `HexirError`:
anything else, a hang, or a signal is a finding. Kernel code is trusted (a host image is
machine code), so a module whose host images are not byte for byte ones of the seed corpus is
validated and its kernels loaded, but not run.

    python packages/hexir-runtime/tests/fuzz_module.py -atheris_runs=200000 CORPUS_DIR
    python packages/hexir-runtime/tests/fuzz_module.py -max_total_time=3600 CORPUS_DIR

`CORPUS_DIR` starts as a copy of the seeds (`--seeds DIR` writes them: the fixtures' small
modules); libFuzzer adds what it finds. The test suite runs a short campaign
(`test_fuzz.py::test_the_fuzz_target_runs_clean`); the long one is for a person to run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris
import numpy as np

with atheris.instrument_imports(include=["hexir_format", "hexir_runtime"]):
    import hexir_format as hf
    import hexir_runtime as hr

REPO = Path(__file__).resolve().parents[3]
SEEDS = [REPO / "fixtures" / name for name in ("builtin.hxb", "builtin-cpu.hxb",
                                              "linear-relu.hxb", "linear-relu-split.hxb",
                                              "strnorm.hxb")]
SEEDS += sorted((REPO / "packages" / "hexir-runtime" / "tests" / "fixtures").glob("v4-*.hxb"))
TRUSTED = {bytes(e.image) for seed in SEEDS for e in hf.parse(seed.read_bytes()).executables
           if e.image is not None}


def test_one_input(data: bytes) -> None:
    try:
        with hr.load(data, max_alloc_bytes=1 << 24) as m:
            trusted = all(e.image is None or bytes(e.image) in TRUSTED
                          for e in m._mapped.module.executables)
            for name, entry in m.entry_points.items():
                if not trusted:
                    m.prepare(name)
                    continue
                m.execute(name, [np.ones(t.shape, t.dtype.numpy)
                                 for t in entry.signature.inputs])
    except hf.HexirError as e:
        if "\n" in str(e):
            raise AssertionError(f"a refusal of more than one line: {e!r}") from None


def main(argv: list[str]) -> None:
    if argv[1:2] == ["--seeds"]:
        out = Path(argv[2])
        out.mkdir(parents=True, exist_ok=True)
        for seed in SEEDS:
            (out / seed.name).write_bytes(seed.read_bytes())
        return
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
