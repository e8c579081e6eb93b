#!/usr/bin/env bash
# The one prepared check for a session that is lent a GPU: the runtime against the checked-in
# fixtures (the compiler's MLIR wheel is too large to carry to the device machine, so the
# cuda modules are compiled here and checked in; see fixtures/README.md).
#
#   here, once:   echo /.whl/ >> .git/info/exclude && bash bench/gpu-session.sh --fetch
#   here:         hatch run full:python bench/gpu.py --build     (the benchmarks' modules)
#                 hatch run full:python bench/gpu_conformance.py --build  (the node tests)
#   there:        device run, carry [".whl", "build/gpu-bench", "build/gpu-conformance"],
#                 command "bash bench/gpu-session.sh", timeout 540
#
# The device image has numpy, cuda-bindings, PyTorch (with transformers and onnxruntime),
# pytest and hypothesis; only construct travels. What it prints is what a closing note
# reports: the cuda selftest, the README program on cuda and split across cuda and cpu, every
# gpu-marked test with its measured errors, the ONNX node tests on cuda
# (bench/gpu_conformance.py), then bench/gpu.py: GEMM against cuBLAS, bandwidth against a
# copy, the networks against PyTorch eager, and the dispatch cost with and without CUDA
# graphs. (The carry's 64 MiB include the working tree, about 19 MB.)
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--fetch" ]]; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 -d .whl construct==2.10.70
  exit 0
fi

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$PWD/packages/hexir-format/src:$PWD/packages/hexir-runtime/src"
export PYTHONPATH="$PYTHONPATH:$PWD/packages/hxb-dump/src" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true

run() { echo "\$ $*"; "$@" || echo "(exit $?)"; echo; }
run python3 -m hexir_runtime --selftest --device=cuda
run python3 -m hexir_runtime --device=cuda fixtures/builtin-cuda.hxb
run python3 -m hexir_runtime --device=cuda fixtures/linear-relu-split.hxb
run python3 -m hexir_runtime --quiet fixtures/linear-relu.hxb
run python3 -m pytest -q -s -m gpu -p no:cacheprovider packages/hexir-runtime/tests
echo
if [[ -d build/gpu-conformance ]]; then
  run python3 bench/gpu_conformance.py --run --dir build/gpu-conformance
else
  echo "build/gpu-conformance is missing: run 'python bench/gpu_conformance.py --build' here"
fi
if [[ -d build/gpu-bench ]]; then
  run python3 bench/gpu.py --run --dir build/gpu-bench
else
  echo "build/gpu-bench is missing: run 'python bench/gpu.py --build' here and carry it"
fi
