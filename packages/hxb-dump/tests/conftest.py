"""Shared helpers: the repository's fixtures, the sample modules, an in-process run of the
CLI and a part of its listing."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import hexir_format as hf
from dump_samples import BUILTIN, MODULES
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


@pytest.fixture
def module_file(tmp_path):
    """`module_file(name)`: the path of sample module `name` (`dump_samples.MODULES`)."""

    def write(name: str):
        path = tmp_path / f"{name}.hxb"
        path.write_bytes(hf.build(MODULES[name]()))
        return path

    return write


def block(out: str, title: str) -> list[str]:
    """The lines of one part of the listing, from its title line to the blank line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start, len(lines)) if not lines[i]), len(lines))
    return lines[start:end]
