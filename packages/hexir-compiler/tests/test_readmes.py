"""Every `python` and `sh` snippet of every README runs as pasted, from the repository root.

It lives with the compiler's tests because the full environment has every package. A README's
snippets run in order (a later one may use what an earlier one wrote, as a reader pasting them
would), in a fresh directory that sees the repository's `fixtures/`, `examples/` and `packages/` (so
what they write lands there, not in the checkout). `console` blocks are transcripts and are not run;
`sh` blocks that install packages are the CI install check's (`.ci/install-check`, a fresh virtual
environment each), not this test's. A snippet that compiles for cuda is skipped where the CUDA
toolkit is missing, and one that runs on a GPU (`device="cuda"`) where there is none.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
READMES = [REPO / "README.md", *sorted(REPO.glob("packages/*/README.md")),
           *sorted(REPO.glob("*/README.md")), *sorted(REPO.glob("*/*/README.md"))]
BLOCK = re.compile(r"^```(python|sh)\n(.*?)^```", re.S | re.M)
HAS_TOOLKIT = shutil.which("ptxas") is not None or Path("/usr/local/cuda/bin/ptxas").exists()


def _has_gpu() -> bool:
    from hexir_format import HexirError
    from hexir_runtime import hal

    try:
        hal.create_device("cuda").close()
    except HexirError:
        return False
    return True


HAS_GPU = _has_gpu()


def snippets(readme: Path) -> list[tuple[int, str, str]]:
    text = readme.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m[1], m[2]) for m in BLOCK.finditer(text)]


WITH_SNIPPETS = [r for r in dict.fromkeys(READMES) if snippets(r)]  # two globs match some


def test_the_readmes_have_snippets_to_run():
    languages = {lang for r in WITH_SNIPPETS for _, lang, _ in snippets(r)}
    assert languages == {"python", "sh"} and len(WITH_SNIPPETS) >= 5


@pytest.mark.parametrize("readme", WITH_SNIPPETS, ids=lambda r: str(r.relative_to(REPO)))
def test_snippets_run_as_pasted(tmp_path, readme):
    for name in ("fixtures", "examples", "packages"):
        (tmp_path / name).symlink_to(REPO / name)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    ran = 0
    for line, language, code in snippets(readme):
        if language == "sh" and "pip install" in code:
            continue  # an install line: .ci/install-check runs it in a fresh environment
        if "cuda" in code and not HAS_TOOLKIT:
            continue  # compiles for cuda, which needs the CUDA toolkit
        if 'device="cuda"' in code and not HAS_GPU:
            continue  # runs on a GPU
        argv = [sys.executable, "-c", code] if language == "python" else \
            ["bash", "-e", "-o", "pipefail", "-c", code]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        where = f"{readme.relative_to(REPO)}:{line} ({language})"
        assert done.returncode == 0, f"{where} failed:\n{done.stdout}\n{done.stderr}"
        ran += 1
    if not ran:
        pytest.skip("every snippet here installs, or needs the CUDA toolkit")
