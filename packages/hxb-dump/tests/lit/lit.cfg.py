
"""lit configuration for hxb-dump's text-output tests.

Substitutions: %hxb-dump (the installed console script next to this interpreter, else
`python -m hxb_dump`), %python, %fixtures (the repository's fixtures/, found relative to this
file), %samples (`python tests/dump_samples.py`, which writes version 4 test modules), and
FileCheck -> filecheck, %ptxas. Features: `cuobjdump` and `ptxas` when the CUDA toolkit has them.
"""

import os
import shutil
import sys
from pathlib import Path

import lit.formats

from hxb_dump.images import find_cuobjdump

config.name = "hxb-dump"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".test"]
config.excludes = ["Inputs"]

here = Path(__file__).resolve().parent
config.test_source_root = str(here)

bindir = Path(sys.executable).parent
script = bindir / "hxb-dump"
hxb_dump = str(script) if script.exists() else f"{sys.executable} -m hxb_dump"
filecheck = shutil.which("filecheck", path=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
if filecheck is None:
    lit_config.fatal("filecheck is not installed (pip install filecheck)")

config.substitutions += [
    ("%hxb-dump", hxb_dump),
    ("%python", sys.executable),
    ("%fixtures", str(here.parents[3] / "fixtures")),
    ("%samples", f"{sys.executable} {here.parent / 'dump_samples.py'}"),
    ("FileCheck", filecheck),
    ("filecheck", filecheck),
]

config.environment["PATH"] = os.pathsep.join([str(bindir), os.environ.get("PATH", "")])
for name in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "HOME", "PYTHONPATH"):
    if name in os.environ:
        config.environment[name] = os.environ[name]

if find_cuobjdump():
    config.available_features.add("cuobjdump")
if shutil.which("objdump"):
    config.available_features.add("objdump")
ptxas = shutil.which("ptxas") or next(
    (str(p) for p in [Path("/usr/local/cuda/bin/ptxas")] if p.is_file()), None)
if ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))
