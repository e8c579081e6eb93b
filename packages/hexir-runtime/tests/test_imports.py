"""The runtime's boundaries: no compiler or MLIR ever, no CUDA bindings unless asked for."""

import json
import subprocess
import sys

PROBE = """
import json, sys
import hexir_runtime
after_import = sorted(m for m in sys.modules if m == "cuda" or m.startswith("cuda."))
with hexir_runtime.load(sys.argv[1]) as m:
    m.run("main")
from hexir_runtime.cli import main
main(["--quiet", sys.argv[1]])
forbidden = sorted(m for m in sys.modules
                   if m.split(".")[0] in ("mlir", "numba_cuda_mlir", "hexir_compiler"))
cuda = sorted(m for m in sys.modules if m == "cuda" or m.startswith("cuda."))
print(json.dumps(dict(after_import=after_import, forbidden=forbidden, cuda=cuda)))
"""


def test_running_a_module_imports_no_compiler_and_no_cuda(builtin_hxb):
    out = subprocess.run([sys.executable, "-c", PROBE, str(builtin_hxb)], check=True,
                         capture_output=True, text=True).stdout
    report = json.loads(out.splitlines()[-1])
    assert report == dict(after_import=[], forbidden=[], cuda=[])
