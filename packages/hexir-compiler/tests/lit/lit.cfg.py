"""lit configuration for the compiler's text-observable tests (passes, stages, CLI messages)."""

import os
import shutil
import sys
from pathlib import Path

import lit.formats

config.name = "hexir-compiler"
config.test_format = lit.formats.ShTest()
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)

here = Path(__file__).resolve().parent
repo = here.parents[3]
python = sys.executable
bindir = Path(python).parent


def tool(name: str, module: str) -> str:
    """The installed console script, or the module run by this Python."""
    found = shutil.which(name, path=str(bindir)) or shutil.which(name)
    return found if found else f"{python} -m {module}"


config.environment["PATH"] = os.pathsep.join([str(bindir), os.environ.get("PATH", "")])
for var in ("CUDA_ROOT", "CUDA_HOME", "CUDA_PATH", "HOME", "PYTHONPATH"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

# Longer names first: lit substitutes in order.
config.substitutions.append(("%hexir-opt", f"{python} -m hexir_compiler.transforms"))
config.substitutions.append(("%hexir-run", tool("hexir-run", "hexir_runtime")))
config.substitutions.append(("%hxb-dump", tool("hxb-dump", "hxb_dump")))
config.substitutions.append(("%hexir", tool("hexir", "hexir_compiler")))
config.substitutions.append(("%python", python))
config.substitutions.append(("%fixtures", str(repo / "fixtures")))
filecheck = shutil.which("filecheck", path=str(bindir)) or "filecheck"
config.substitutions.append(("FileCheck", filecheck))

if shutil.which("ptxas") or Path("/usr/local/cuda/bin/ptxas").exists():
    config.available_features.add("cuda-toolkit")


def _gpu_works() -> bool:
    """A CUDA driver and at least one device, probed in a child so a broken driver can't
    take lit down."""
    probe = (
        "from cuda.bindings import driver as d\n"
        "import sys\n"
        "try:\n"
        "    ok = d.cuInit(0)[0] == d.CUresult.CUDA_SUCCESS\n"
        "    ok = ok and d.cuDeviceGetCount()[1] > 0\n"
        "except Exception:\n"
        "    ok = False\n"
        "sys.exit(0 if ok else 1)\n"
    )
    import subprocess

    try:
        probed = subprocess.run([python, "-c", probe], capture_output=True, timeout=60)
        return probed.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


if _gpu_works():
    config.available_features.add("gpu")
