"""Shared helpers: the repository's fixtures and an in-process run of the CLI."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from dump_samples import BUILTIN
from hxb_dump.cli import main


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
