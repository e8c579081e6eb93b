"""Shared helpers: the repository's fixtures and an in-process run of the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from hxb_dump.cli import main

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
BUILTIN = FIXTURES / "builtin.hxb"


@dataclass
class Result:
    rc: int
    out: str
    err: str


@pytest.fixture
def dump(capsys):
    """`dump(*argv)` runs hxb-dump in this process and returns its exit code and output."""

    def run(*argv: object) -> Result:
        rc = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return Result(rc, captured.out, captured.err)

    return run


@pytest.fixture
def builtin_bytes() -> bytes:
    return BUILTIN.read_bytes()
