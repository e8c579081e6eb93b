"""Shared fixtures: the repository's checked-in modules and a fake CUDA driver."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # modules.py, fake_driver.py

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "fixtures"


def gpu_or_skip() -> None:
    """Skip the calling test where no usable CUDA device is (the `gpu` tests)."""
    import hexir_runtime as hr
    from hexir_runtime import hal

    try:
        hal.create_device("cuda").close()
    except hr.DeviceError as e:
        pytest.skip(f"no usable CUDA device: {e}")


@pytest.fixture
def builtin_hxb() -> Path:
    return FIXTURES / "builtin.hxb"
