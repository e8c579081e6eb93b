"""Device images: flavour, --image (atomic, default KERNEL.bin), --sass through cuobjdump."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

import dump_samples
import hexir_format as hf
from dump_samples import BUILTIN
from hexir_format import Function, Module
from hxb_dump import images

TINY_PTX = b"""//
.version 8.0
.target sm_90
.address_size 64

.visible .entry linear_0(.param .u64 a, .param .u64 b, .param .u64 c)
{
\tret;
}
"""


@pytest.mark.parametrize("blob, flavour", [
    (dump_samples.PTX, "PTX text"),
    (b".version 8.5\n.target sm_80\n", "PTX text"),
    (dump_samples.ELF, "ELF cubin"),
    (dump_samples.FATBIN, "fatbin"),
    (b"\x00\x01\x02\x03", "unknown"),
])
def test_flavour(blob, flavour):
    assert images.flavour(blob) == flavour


def test_what_an_image_targets(real_cubin):
    assert images.describe(dump_samples.ELF)["target"] == "sm_90"
    assert images.describe(real_cubin)["target"] == "sm_90"
    assert images.describe(dump_samples.FATBIN)["contents"] == [
        {"kind": "PTX", "arch": "sm_90"}, {"kind": "ELF", "arch": "sm_90"}]


@pytest.mark.parametrize("blob", [
    dump_samples.FATBIN[:40],                                 # cut inside an entry
    dump_samples.FATBIN[:16] + bytes(64),                     # entry header size 0
    bytes.fromhex("50ED55BA") + bytes(4) + (2**63).to_bytes(8, "little"),  # size past end
])
def test_a_fatbin_whose_headers_do_not_add_up_is_just_a_fatbin(blob):
    facts = images.describe(blob)
    assert (facts["flavour"], facts["contents"]) == ("fatbin", None)


def test_ptx_target():
    assert images.ptx_target(dump_samples.PTX) == "sm_90"
    assert images.ptx_target(b"// no target here\n") is None


def module_file(tmp_path: Path, module: Module) -> Path:
    path = tmp_path / "m.hxb"
    path.write_bytes(hf.build(module))
    return path


def test_image_defaults_to_kernel_bin_in_the_working_directory(dump, tmp_path, monkeypatch):
    path = module_file(tmp_path, dump_samples.one_kernel(dump_samples.FATBIN))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    r = dump(path, "--image", "linear_0")
    assert (r.rc, r.err) == (0, "")
    assert r.out.splitlines()[-1] == \
        "    wrote linear_0.bin (try: cuobjdump --dump-sass linear_0.bin)"
    assert (work / "linear_0.bin").read_bytes() == dump_samples.FATBIN
    assert sorted(p.name for p in work.iterdir()) == ["linear_0.bin"]  # no temp file left


def test_image_to_a_chosen_path_replaces_it_whole(dump, tmp_path):
    path = module_file(tmp_path, dump_samples.one_kernel(dump_samples.PTX))
    out = tmp_path / "k.ptx"
    out.write_bytes(b"old contents, much longer than nothing" * 100)
    r = dump(path, "--image", "linear_0", "-o", out)
    assert r.rc == 0
    assert out.read_bytes() == dump_samples.PTX
    assert f"    wrote {out} (PTX text; assemble it with: ptxas -arch=sm_90" in r.out
    mode = stat.S_IMODE(out.stat().st_mode)
    assert mode == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_image_into_a_missing_directory(dump, tmp_path):
    path = module_file(tmp_path, dump_samples.one_kernel(dump_samples.FATBIN))
    r = dump(path, "--image", "linear_0", "-o", tmp_path / "no" / "such" / "k.bin")
    assert r.rc == 1
    assert r.err.splitlines() == [
        (f"hxb-dump: error: cannot write the image of 'linear_0' to "
        f"'{tmp_path / 'no' / 'such' / 'k.bin'}': No such file or directory")]


@pytest.mark.parametrize("flag", ["--image", "--sass"])
def test_unknown_kernel_lists_the_kernels(dump, tmp_path, flag):
    r = dump(module_file(tmp_path, dump_samples.mlp()), flag, "linear_9")
    assert r.rc == 1
    assert r.err.splitlines() == [
        (f"hxb-dump: error: no kernel 'linear_9' in {tmp_path / 'm.hxb'}; its kernels are: "
        "linear_0, gelu_1, linear_2, softmax_3")]


def test_unknown_kernel_in_a_module_without_kernels(dump, tmp_path):
    path = module_file(tmp_path, Module(4, (Function("main", ()),)))
    r = dump(path, "--image", "k")
    assert r.err.splitlines() == [f"hxb-dump: error: no kernel 'k' in {path}; it has no kernels"]


def test_descriptor_has_no_image(dump):
    r = dump(BUILTIN, "--image", "linear_0")
    assert r.rc == 1
    assert r.err.splitlines() == [
        ("hxb-dump: error: kernel 'linear_0' is placed on cpu and carries no device image "
        "(the runtime supplies the body)")]


def test_image_of_a_damaged_file_is_not_attempted(dump, tmp_path, monkeypatch):
    path = tmp_path / "cut.hxb"
    path.write_bytes(BUILTIN.read_bytes()[:100])
    monkeypatch.chdir(tmp_path)
    r = dump(path, "--image", "linear_0")
    assert r.rc == 1
    assert not (tmp_path / "linear_0.bin").exists()


def test_sass_of_ptx_says_there_is_none(dump, tmp_path):
    r = dump(module_file(tmp_path, dump_samples.one_kernel(dump_samples.PTX)), "--sass", "linear_0")
    assert r.rc == 1
    assert r.err.splitlines() == [
        ("hxb-dump: error: kernel 'linear_0' carries PTX text only (the driver compiles it when "
        "the module loads), so there is no SASS to show; compile with -target=cuda:sm_90 to "
        "embed a cubin")]


def test_sass_of_a_ptx_only_fatbin_says_there_is_none(dump, tmp_path):
    path = module_file(tmp_path, dump_samples.one_kernel(dump_samples.FATBIN_PTX_ONLY))
    assert "fatbin (PTX sm_80)" in dump(path).out
    r = dump(path, "--sass", "linear_0")
    assert r.err.splitlines() == [
        ("hxb-dump: error: kernel 'linear_0' carries a fatbin of PTX only, so there is no SASS "
        "to show; compile with -target=cuda:sm_80 to embed a cubin")]


def fake_cuda_home(tmp_path: Path, script: str) -> Path:
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    tool = home / "bin" / "cuobjdump"
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(0o755)
    return home


@pytest.fixture
def no_cuobjdump_on_path(tmp_path, monkeypatch):
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_sass_through_cuobjdump_in_cuda_home(dump, tmp_path, monkeypatch, no_cuobjdump_on_path):
    home = fake_cuda_home(tmp_path, 'echo "        code for sm_90"\n'
                                    'echo "                Function : ${2##*/}"\n'
                                    'echo "$1"\n')
    monkeypatch.setenv("CUDA_HOME", str(home))
    r = dump(module_file(tmp_path, dump_samples.one_kernel(dump_samples.ELF)), "--sass", "linear_0")
    assert (r.rc, r.err) == (0, "")
    assert r.out.splitlines()[-3:] == ["        code for sm_90",
                                       "                Function : linear_0.cubin",
                                       "--dump-sass"]


def test_sass_when_cuobjdump_fails(dump, tmp_path, monkeypatch, no_cuobjdump_on_path):
    home = fake_cuda_home(tmp_path, 'echo "cuobjdump fatal   : Could not open input file" >&2\n'
                                    "exit 255\n")
    monkeypatch.setenv("CUDA_HOME", str(home))
    path = module_file(tmp_path, dump_samples.one_kernel(dump_samples.FATBIN))
    r = dump(path, "--sass", "linear_0")
    assert r.rc == 1
    assert r.err.splitlines() == [
        (f"hxb-dump: error: {home}/bin/cuobjdump --dump-sass failed with exit code 255 on kernel "
        "'linear_0': cuobjdump fatal   : Could not open input file")]


def test_sass_without_cuobjdump(dump, tmp_path, monkeypatch, no_cuobjdump_on_path):
    if Path("/usr/local/cuda/bin/cuobjdump").exists():
        pytest.skip("/usr/local/cuda/bin/cuobjdump exists, so it would be found")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    r = dump(module_file(tmp_path, dump_samples.one_kernel(dump_samples.ELF)), "--sass", "linear_0")
    assert r.rc == 1
    assert r.err.startswith("hxb-dump: error: cuobjdump was not found on PATH, in "
                            "$CUDA_HOME/bin or in /usr/local/cuda/bin; write the image with "
                            "--image linear_0")


def cuda_tool(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for p in [Path("/usr/local/cuda/bin") / name] if p.is_file()), None)


@pytest.fixture
def real_cubin(tmp_path) -> bytes:
    ptxas = cuda_tool("ptxas")
    if ptxas is None:
        pytest.skip("ptxas (CUDA toolkit) is not installed")
    ptx = tmp_path / "tiny.ptx"
    ptx.write_bytes(TINY_PTX)
    cubin = tmp_path / "tiny.cubin"
    subprocess.run([ptxas, "-arch=sm_90", "-o", str(cubin), str(ptx)], check=True)
    return cubin.read_bytes()


def test_real_cubin_is_listed_as_elf(dump, tmp_path, real_cubin):
    r = dump(module_file(tmp_path, dump_samples.one_kernel(real_cubin)))
    assert f"    device image   {len(real_cubin)} bytes, ELF cubin (sm_90)   launch grid=(1,1,1) " \
           "block=(4,1,1)" in r.out.splitlines()


def test_real_sass(dump, tmp_path, real_cubin):
    if images.find_cuobjdump() is None:
        pytest.skip("cuobjdump is not installed")
    r = dump(module_file(tmp_path, dump_samples.one_kernel(real_cubin)), "--sass", "linear_0")
    assert (r.rc, r.err) == (0, "")
    assert "Function : linear_0" in r.out
    assert "EXIT" in r.out
