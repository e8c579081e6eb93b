"""Install each package the way its README says, into a fresh virtual environment, and run it.

For every `packages/*/README.md`, the `sh` block under `## Install` (the `pip install
./packages/...` line from a checkout, then one command) runs with bash in a new venv, from a
scratch directory that sees the repository's `packages/`, `fixtures/` and `examples/`, so the
README's relative paths work and nothing is written into the checkout. Prints one line per
package; exits 1 if any block fails. Standard library only: it runs before any environment
of the repository exists.

    python .ci/install-check.py [PACKAGE ...]     # default: every package
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INSTALL = re.compile(r"^## Install\n(?:(?!^## ).)*?^```sh\n(.*?)^```", re.S | re.M)


def install_block(readme: Path) -> str:
    match = INSTALL.search(readme.read_text())
    if match is None or "pip install ./packages/" not in match[1]:
        raise SystemExit(f"{readme.relative_to(REPO)}: no `## Install` sh block with a "
                         "`pip install ./packages/...` line")
    return match[1]


def check(package: str) -> bool:
    block = install_block(REPO / "packages" / package / "README.md")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"install-{package}-") as tmp:
        root = Path(tmp)
        venv.create(root / "venv", with_pip=True)
        for name in ("packages", "fixtures", "examples"):
            (root / name).symlink_to(REPO / name)
        env = dict(os.environ, VIRTUAL_ENV=str(root / "venv"),
                   PATH=f"{root / 'venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")
        env.pop("PYTHONPATH", None)
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=root, env=env,
                              capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        print(f"install-check: {package}: FAILED after {seconds:.0f} s:\n{tail}")
        return False
    print(f"install-check: {package}: the README's install block ran in a fresh venv "
          f"({seconds:.0f} s)")
    return True


def main(argv: list[str]) -> int:
    packages = argv or sorted(p.name for p in (REPO / "packages").iterdir()
                              if (p / "README.md").exists())
    results = [check(p) for p in packages]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
