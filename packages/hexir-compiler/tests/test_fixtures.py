"""The checked-in fixtures are what the compiler produces now (regenerate with
`python fixtures/generate.py` when a compiler change moves them)."""

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
_spec = importlib.util.spec_from_file_location("fixtures_generate", FIXTURES / "generate.py")
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)
HAS_TOOLKIT = shutil.which("ptxas") is not None or Path("/usr/local/cuda/bin/ptxas").exists()


def _needs_device_code(name: str) -> bool:
    return "cuda" in fixtures.FIXTURES[name][1].placement.values()


@pytest.mark.parametrize("name", sorted(fixtures.FIXTURES))
def test_fixture_matches_the_compiler(name):
    if _needs_device_code(name) and not HAS_TOOLKIT:
        pytest.skip("a cuda fixture's image needs ptxas")
    assert fixtures.build(name) == (FIXTURES / name).read_bytes(), (
        f"fixtures/{name} is stale: run python fixtures/generate.py"
    )


def test_builtin_compiles_to_version_6_and_the_seeds_v3_file_is_kept():
    import hexir_format as hf

    module = hf.parse(fixtures.build("builtin-cpu.hxb"))
    assert module.version == 6 and module.executables[0].image is not None
    assert [f.cpu_level for f in module.functions] == [2, 3, 4]
    assert "builtin.hxb" not in fixtures.FIXTURES  # the seed's file, not the compiler's
    seed = (FIXTURES / "builtin.hxb").read_bytes()
    assert len(seed) == 488 and hf.parse(seed).version == 3


def test_regeneration_writes_every_fixture(tmp_path):
    if not HAS_TOOLKIT:
        pytest.skip("the cuda fixtures' images need ptxas")
    assert fixtures.main([str(tmp_path / "out")]) == 0
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == sorted([*fixtures.FIXTURES, fixtures.DATA])
    made, kept = np.load(tmp_path / "out" / fixtures.DATA), np.load(FIXTURES / fixtures.DATA)
    assert sorted(made.files) == sorted(kept.files)
    for name in made.files:
        np.testing.assert_array_equal(made[name], kept[name])
