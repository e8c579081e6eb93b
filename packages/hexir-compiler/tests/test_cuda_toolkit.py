"""Toolkit lookup: CUDA_ROOT, CUDA_HOME, CUDA_PATH, then the usual places and PATH.

Every test builds fake toolkits under tmp_path (empty executables and an empty libdevice),
so the lookup rules are checked the same way on machines with and without CUDA.
"""

import stat
from pathlib import Path

import pytest

from hexir_compiler.errors import CompileError
from hexir_compiler.target import cuda_toolkit
from hexir_compiler.target.cuda_toolkit import CudaToolkit, find_libdevice, find_tool, find_toolkit
from hexir_format import HexirError


def fake_toolkit(
    root: Path, *, libdevice: str | None = "nvvm/libdevice", tools=("ptxas", "fatbinary")
) -> Path:
    (root / "bin").mkdir(parents=True, exist_ok=True)
    for tool in tools:
        path = root / "bin" / tool
        path.write_text("#!/bin/sh\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    if libdevice is not None:
        (root / libdevice).mkdir(parents=True, exist_ok=True)
        (root / libdevice / "libdevice.10.bc").write_bytes(b"BC")
    return root


@pytest.fixture
def nowhere(monkeypatch, tmp_path):
    """No usual location exists; returns a setter for them."""
    monkeypatch.setattr(cuda_toolkit, "USUAL_ROOTS", (str(tmp_path / "none"),))

    def usual(*roots: Path) -> None:
        monkeypatch.setattr(cuda_toolkit, "USUAL_ROOTS", tuple(str(r) for r in roots))

    return usual


def test_cuda_root_then_cuda_home_then_cuda_path(tmp_path, nowhere):
    a, b, c = (fake_toolkit(tmp_path / name) for name in "abc")
    env = {"CUDA_ROOT": str(a), "CUDA_HOME": str(b), "CUDA_PATH": str(c), "PATH": ""}
    assert find_toolkit(env) == CudaToolkit(
        a / "bin/ptxas", a / "bin/fatbinary", a / "nvvm/libdevice/libdevice.10.bc"
    )
    del env["CUDA_ROOT"]
    assert find_toolkit(env).ptxas == b / "bin/ptxas"
    env["CUDA_HOME"] = ""  # set but empty counts as unset
    assert find_toolkit(env).ptxas == c / "bin/ptxas"


def test_a_named_toolkit_is_the_only_place_looked_at(tmp_path, nowhere):
    usual = fake_toolkit(tmp_path / "usual")
    nowhere(usual)
    broken = tmp_path / "broken"
    broken.mkdir()
    env = {"CUDA_HOME": str(broken), "PATH": str(usual / "bin")}
    with pytest.raises(CompileError) as err:
        find_tool("ptxas", env)
    assert str(err.value) == (
        f"CUDA toolkit: ptxas not found (searched CUDA_HOME={broken}: {broken}/bin/ptxas); "
        "point CUDA_ROOT at a CUDA toolkit"
    )


def test_usual_locations_in_order(tmp_path, nowhere):
    first, second = fake_toolkit(tmp_path / "first"), fake_toolkit(tmp_path / "second")
    nowhere(tmp_path / "missing", first, second)
    assert find_toolkit({"PATH": ""}).ptxas == first / "bin/ptxas"


def test_debian_layout_keeps_libdevice_under_the_root(tmp_path, nowhere):
    debian = fake_toolkit(tmp_path / "nvidia-cuda-toolkit", libdevice="libdevice")
    nowhere(debian)
    assert find_libdevice({"PATH": ""}) == debian / "libdevice/libdevice.10.bc"


def test_ptxas_on_path_and_libdevice_next_to_it(tmp_path, nowhere):
    toolkit = fake_toolkit(tmp_path / "cuda-13")
    found = find_toolkit({"PATH": f"{tmp_path / 'empty'}:{toolkit / 'bin'}"})
    assert found == CudaToolkit(
        toolkit / "bin/ptxas", toolkit / "bin/fatbinary", toolkit / "nvvm/libdevice/libdevice.10.bc"
    )


def test_a_missing_ptxas_lists_every_place_and_path(tmp_path, nowhere):
    nowhere(tmp_path / "x", tmp_path / "y")
    with pytest.raises(CompileError) as err:
        find_tool("ptxas", {"PATH": str(tmp_path)})
    assert str(err.value) == (
        f"CUDA toolkit: ptxas not found (searched the usual locations: {tmp_path}/x/bin/ptxas, "
        f"{tmp_path}/y/bin/ptxas, and 'ptxas' on PATH); install the CUDA toolkit or point "
        "CUDA_ROOT at a CUDA toolkit"
    )
    assert isinstance(err.value, HexirError)


def test_a_missing_libdevice_is_one_line_naming_both_layouts(tmp_path, nowhere):
    root = fake_toolkit(tmp_path / "cuda", libdevice=None)
    with pytest.raises(CompileError) as err:
        find_toolkit({"CUDA_ROOT": str(root), "PATH": ""})
    assert str(err.value) == (
        f"CUDA toolkit: libdevice.10.bc not found (searched CUDA_ROOT={root}: "
        f"{root}/nvvm/libdevice/libdevice.10.bc, {root}/libdevice/libdevice.10.bc); "
        "point CUDA_ROOT at a CUDA toolkit"
    )


def test_a_directory_named_like_a_tool_is_not_the_tool(tmp_path, nowhere):
    root = fake_toolkit(tmp_path / "cuda", tools=("fatbinary",))
    (root / "bin" / "ptxas").mkdir()
    with pytest.raises(CompileError, match="ptxas not found"):
        find_tool("ptxas", {"CUDA_ROOT": str(root)})


def test_lookup_is_cached_per_environment(tmp_path, nowhere):
    a, b = fake_toolkit(tmp_path / "a"), fake_toolkit(tmp_path / "b")
    first = find_toolkit({"CUDA_ROOT": str(a)})
    assert find_toolkit({"CUDA_ROOT": str(a)}) is first
    assert find_toolkit({"CUDA_ROOT": str(b)}).ptxas == b / "bin/ptxas"
