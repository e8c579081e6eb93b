"""The runtime's boundaries: no compiler, MLIR or llvmlite ever (not even to run compiled cpu
kernels), no CUDA bindings unless asked for."""

import json
import subprocess
import sys

PROBE = """
import json, sys
import hexir_runtime
after_import = sorted(m for m in sys.modules if m == "cuda" or m.startswith("cuda."))
for path in sys.argv[1:]:
    with hexir_runtime.load(path) as m:
        m.run("main")
from hexir_runtime.cli import main
main(["--quiet", sys.argv[1]])
forbidden = sorted(m for m in sys.modules if m.split(".")[0] in (
    "mlir", "numba_cuda_mlir", "hexir_compiler", "llvmlite", "onnx", "torch"))
cuda = sorted(m for m in sys.modules if m == "cuda" or m.startswith("cuda."))
print(json.dumps(dict(after_import=after_import, forbidden=forbidden, cuda=cuda)))
"""


def test_running_a_module_imports_no_compiler_and_no_cuda(builtin_hxb):
    compiled = builtin_hxb.with_name("builtin-cpu.hxb")  # version 5: an x86-64 host image
    out = subprocess.run([sys.executable, "-c", PROBE, str(builtin_hxb), str(compiled)],
                         check=True, capture_output=True, text=True).stdout
    report = json.loads(out.splitlines()[-1])
    assert report == dict(after_import=[], forbidden=[], cuda=[])
