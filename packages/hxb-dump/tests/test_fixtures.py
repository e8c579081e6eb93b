"""Every checked-in module lists cleanly; every hostile one fails with one error line.

The fixtures are what the compiler writes, so this is where hxb-dump (a second reader) and
the compiler would be seen to disagree.
"""

from __future__ import annotations

import json

import pytest

from dump_samples import FIXTURES

MODULES = sorted(p for p in FIXTURES.glob("*.hxb"))
HOSTILE = sorted(p for p in (FIXTURES / "hostile").glob("*.hxb"))


def test_the_builtin_fixture_is_there():
    assert FIXTURES / "builtin.hxb" in MODULES


# Checked-in modules that today's validator refuses, with the line it must print: a module of
# the time when a big cpu matmul called back into the runtime (fixtures/README.md).
REFUSED = {
    "matmul-callback.hxb": "calls 'hexir_rt_matmul', the runtime routine that modules "
                           "compiled before hexir-compiler 0.2.0 used",
}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_fixture_lists(dump, path):
    r = dump(path)
    if path.name in REFUSED:
        assert r.rc == 1 and r.err.count("\n") == 1 and REFUSED[path.name] in r.err, r.err
        return
    assert (r.rc, r.err) == (0, "")
    facts = json.loads(dump(path, "--json").out)
    assert facts["size"] == path.stat().st_size
    images = r.out.count("    device image   ") + r.out.count("    host image     ") + \
        r.out.count("    library        ")  # (a library kernel: the runtime's, no image)
    assert len(facts["executables"]) == images


# Hostile modules that are sound, refused by the runtime only for what it will not run here:
# a kernel placed on cuda (no cuda device), a version-4 descriptor of a kind it has no body
# for. Whether a file is sound is one rule
# (hexir_format.validate) for both readers; these are the runtime's policy. A dump lists them.
RUNTIME_POLICY = {
    "placed-on-cuda.hxb",
    "v4-softmax-descriptor.hxb",
}


@pytest.mark.parametrize("path", HOSTILE or [None], ids=lambda p: p.name if p else "none")
def test_hostile_fixture(dump, path):
    """A broken file or reference fails in one line; a runtime-policy case is listed."""
    if path is None:
        pytest.skip("fixtures/hostile holds no modules yet")
    r = dump(path)
    if path.name in RUNTIME_POLICY:
        assert (r.rc, r.err) == (0, "")
        return
    assert r.rc == 1
    lines = r.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hxb-dump: error: ")
