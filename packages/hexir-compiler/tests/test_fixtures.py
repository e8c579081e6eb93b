"""The checked-in fixtures are what the compiler produces now (regenerate with
`python -m hexir_compiler.fixtures` when a compiler change moves them)."""

import shutil
from pathlib import Path

import pytest

from hexir_compiler import fixtures

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
HAS_TOOLKIT = shutil.which("ptxas") is not None or Path("/usr/local/cuda/bin/ptxas").exists()


def test_builtin_fixture_matches_the_compiler():
    assert fixtures.build("builtin.hxb") == (FIXTURES / "builtin.hxb").read_bytes()


@pytest.mark.skipif(not HAS_TOOLKIT, reason="the cuda fixture's image needs ptxas")
def test_builtin_cuda_fixture_matches_the_compiler():
    assert fixtures.build("builtin-cuda.hxb") == (FIXTURES / "builtin-cuda.hxb").read_bytes(), (
        "fixtures/builtin-cuda.hxb is stale: run python -m hexir_compiler.fixtures"
    )


def test_regeneration_writes_every_fixture(tmp_path):
    if not HAS_TOOLKIT:
        pytest.skip("the cuda fixture's image needs ptxas")
    assert fixtures.main([str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(fixtures.FIXTURES)
