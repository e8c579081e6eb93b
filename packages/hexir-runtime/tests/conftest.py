"""Shared fixtures: the repository's checked-in modules and a fake CUDA driver."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # modules.py, fake_driver.py

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "fixtures"


@pytest.fixture
def builtin_hxb() -> Path:
    return FIXTURES / "builtin.hxb"
