"""lit configuration of hexir-runtime's CLI tests: `lit -v packages/hexir-runtime/tests/lit`.

Substitutions: %hexir-run (the console script beside the running python, else
`python -m hexir_runtime`), %python, %fixtures (the repository's fixtures/), %rt-fixtures
(this package's own v4 test modules), %exit-status CMD (prints CMD's stderr and stdout, then
`exit N`), FileCheck -> filecheck. Feature `cuda-device` when
`hexir-run --selftest --device=cuda` passes (a GPU with a driver and cuda-python).
"""

import os
import shutil
import subprocess
import sys

import lit.formats

config.name = "hexir-runtime"
config.test_format = lit.formats.ShTest()
config.suffixes = [".test"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, "Output")

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.abspath(os.path.join(here, "..", "..", "..", ".."))
bindir = os.path.dirname(sys.executable)
script = os.path.join(bindir, "hexir-run")
hexir_run = script if os.path.exists(script) else f"{sys.executable} -m hexir_runtime"

config.environment["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])
if "PYTHONPATH" in os.environ:  # a checkout's sources on it: test those, not the installed
    config.environment["PYTHONPATH"] = os.environ["PYTHONPATH"]
if not shutil.which("filecheck", path=config.environment["PATH"]):
    lit_config.fatal("filecheck not found: pip install filecheck")

config.substitutions.append(("%hexir-run", hexir_run))
exit_status = os.path.join(here, "Inputs", "exit-status.py")
config.substitutions.append(("%exit-status", f"{sys.executable} {exit_status}"))
config.substitutions.append(("%python", sys.executable))
config.substitutions.append(("%rt-fixtures", os.path.join(here, "..", "fixtures")))
config.substitutions.append(("%fixtures", os.path.join(repo, "fixtures")))
config.substitutions.append(("FileCheck", "filecheck"))

probe = subprocess.run([*hexir_run.split(), "--selftest", "--device=cuda"],
                       capture_output=True, text=True, env={**os.environ, **config.environment})
if probe.returncode == 0:
    config.available_features.add("cuda-device")
