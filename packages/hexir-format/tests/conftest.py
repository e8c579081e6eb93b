import pathlib

import pytest

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures"


@pytest.fixture
def builtin() -> bytes:
    """The built-in program's module: the 488-byte version-3 file of the earlier runtime."""
    return (FIXTURES / "builtin.hxb").read_bytes()
