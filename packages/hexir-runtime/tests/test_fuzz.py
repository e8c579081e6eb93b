"""Random damage to valid modules never escapes as anything but a one-line HexirError.

Deterministic (seeded) byte and field mutations of the built-in module and the v4 test
modules; each mutant is loaded and, if it loads, run on the cpu and on the fake cuda device
with zero inputs of its signature. A cap of 1 MiB keeps accidental huge-but-legal sizes cheap.
"""

import random
import struct
import zlib

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
from conftest import FIXTURES
from fake_driver import FakeDriver

RUNTIME_FIXTURES = FIXTURES.parent / "packages" / "hexir-runtime" / "tests" / "fixtures"
SOURCES = [FIXTURES / "builtin.hxb", RUNTIME_FIXTURES / "v4-mlp.hxb",
           RUNTIME_FIXTURES / "v4-hetero.hxb"]
INTERESTING = [0, 1, 2, 3, 7, 8, 31, 32, 255, 1 << 16, 1 << 31, (1 << 32) - 1, 1 << 40,
               (1 << 63), (1 << 64) - 1]


def mutants(data: bytes, seed: int, count: int):
    rng = random.Random(seed)
    for _ in range(count):
        out = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 3])):
            at = rng.randrange(len(out))
            kind = rng.random()
            if kind < 0.4:
                out[at] = rng.randrange(256)
            elif kind < 0.7 and at + 4 <= len(out):
                struct.pack_into("<I", out, at & ~3, rng.choice(INTERESTING) & 0xFFFFFFFF)
            elif at + 8 <= len(out):
                struct.pack_into("<Q", out, at & ~7, rng.choice(INTERESTING))
        if rng.random() < 0.1:
            out = out[:rng.randrange(len(out))]
        yield bytes(out)


def zeros_for(entry: hr.EntryPoint) -> list[np.ndarray]:
    return [np.zeros(t.shape, t.dtype.numpy) for t in entry.signature.inputs]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_mutants_fail_cleanly_or_run(tmp_path, source):
    data = source.read_bytes()
    path = tmp_path / "mutant.hxb"
    outcomes = {"refused": 0, "ran": 0}
    for i, mutant in enumerate(mutants(data, seed=zlib.crc32(source.name.encode()), count=250)):
        path.write_bytes(mutant)
        for device in ("cpu", "cuda"):
            driver = None
            if device == "cuda":
                try:
                    driver = FakeDriver()
                except hf.HexirError:
                    driver = FakeDriver()
            try:
                with hr.load(path, device=device, driver=driver, max_alloc_bytes=1 << 20) as m:
                    for entry in m.entry_points.values():
                        m.execute(entry.name, zeros_for(entry))
                outcomes["ran"] += 1
            except hf.HexirError as e:
                assert "\n" not in str(e), (i, str(e))
                outcomes["refused"] += 1
    assert outcomes["refused"] > 0 and outcomes["ran"] > 0, outcomes


def test_the_fuzz_target_runs_clean(tmp_path):
    """A short coverage-guided campaign (atheris) from the seed modules: no finding. The
    long one is documented in fuzz_module.py."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("atheris")
    target = Path(__file__).with_name("fuzz_module.py")
    corpus = tmp_path / "corpus"
    subprocess.run([sys.executable, str(target), "--seeds", str(corpus)], check=True)
    done = subprocess.run([sys.executable, str(target), "-atheris_runs=20000", "-timeout=20",
                           f"-artifact_prefix={tmp_path}/", str(corpus)],
                          capture_output=True, text=True, timeout=600)
    # A finding leaves an artifact (crash-, timeout-, oom-, leak-) and ends the campaign
    # before its 20000 runs. The process was also seen killed by SIGALRM *after* printing
    # "Done", with libFuzzer's per-input timer and without it (cause not found): a finished
    # campaign with no artifact, not a finding.
    findings = [p.name for p in tmp_path.iterdir() if p.name.split("-")[0] in
                ("crash", "timeout", "oom", "leak")]
    assert not findings, (findings, done.stderr[-3000:])
    assert "Done 20000 in" in done.stderr, done.stderr[-3000:]
    assert done.returncode in (0, -signal.SIGALRM), done.stderr[-3000:]
