"""The ONNX project's node tests (shipped in the onnx 1.22.0 wheel), found and run through Hexir.

`node_tests()` fetches the wheel once (`pip download onnx==1.22.0 --no-deps`) into `build/`
and unpacks only `onnx/backend/test/data/node`; `HEXIR_ONNX_NODE_TESTS` names an unpacked
copy instead. `suite(name)` does the same for the wheel's model suites (`simple`,
`pytorch-converted`, `pytorch-operator`, `light`), found beside that copy when it has them.
In scope: every test whose nodes are all ops Hexir imports (`onnx_ops.HANDLERS`) and whose
tensors are all f32, f64, i32, i64 or bool -- the `_expanded` ones included.
`run()` compiles one with its shape and axes operands fixed from the test's own inputs (they
are graph inputs there), runs it with the others and compares with the expected outputs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from conftest import HOST_TARGET

ROOT = Path(__file__).resolve().parents[3]
WHEEL = "onnx==1.22.0"
DATA = "onnx/backend/test/data/"
TYPES = {1, 11, 6, 7, 9}  # FLOAT, DOUBLE, INT32, INT64, BOOL
#: (op, operand index) pairs that are shapes, axes or modes: fixed at compile time from the
#: test data.
STATIC_OPERANDS = {("Reshape", 1), ("Expand", 1), ("Squeeze", 1), ("Unsqueeze", 1),
                   ("ConstantOfShape", 0), *(("Slice", i) for i in range(1, 5)),
                   ("CumSum", 1), ("TopK", 1),
                   ("Dropout", 1), ("Dropout", 2),
                   *((op, 1) for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin")),
                   *((op, 1) for op in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                                        "ReduceSumSquare", "ReduceProd", "Split", "Tile", "Trilu",
                                        "OneHot", "SplitToSequence")),
                   ("Pad", 1), ("Pad", 3), *(("Resize", i) for i in range(1, 4)),
                   *(("Range", i) for i in range(3))}
#: Tolerances by dtype (the issue's): float32, float64; ints and bools are exact.
TOLERANCE = {np.dtype("float32"): (1e-4, 1e-5), np.dtype("float64"): (1e-7, 1e-9)}


def node_tests() -> Path:
    """The directory of unpacked node tests."""
    if "HEXIR_ONNX_NODE_TESTS" in os.environ:
        return Path(os.environ["HEXIR_ONNX_NODE_TESTS"])
    return suite("node")


def suite(name: str) -> Path:
    """The directory of the wheel's `onnx/backend/test/data/<name>`: beside the node tests
    `HEXIR_ONNX_NODE_TESTS` names where it is there, else unpacked into `build/` once."""
    if "HEXIR_ONNX_NODE_TESTS" in os.environ:
        beside = Path(os.environ["HEXIR_ONNX_NODE_TESTS"]).parent / name
        if beside.is_dir():
            return beside
    home = ROOT / "build" / "onnx-node"
    target = home / name
    if target.is_dir():
        return target
    # pytest-xdist's workers collect at once: each downloads and unpacks into its own
    # directory and renames it into place, so none ever reads a half-unpacked suite
    own = home / f".{os.getpid()}"
    own.mkdir(parents=True, exist_ok=True)
    try:
        wheels = sorted(home.glob("onnx-1.22.0-*.whl"))
        if not wheels:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", WHEEL,
                            "-d", str(own)], check=True)
            fetched = next(own.glob("onnx-1.22.0-*.whl"))
            wheels = [fetched.replace(home / fetched.name)]  # whole, or not there at all
        prefix = f"{DATA}{name}/"
        with zipfile.ZipFile(wheels[0]) as wheel:
            for member in wheel.namelist():
                if member.startswith(prefix) and not member.endswith("/"):
                    out = own / name / member[len(prefix):]
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(wheel.read(member))
        try:
            (own / name).rename(target)
        except OSError:  # another worker's copy is in place: the same bytes
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(own, ignore_errors=True)
    return target


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    ops: tuple[str, ...]

    @property
    def op(self) -> str:
        """The op the test is named after (its first node's, for a single-op test)."""
        return self.ops[0] if len(self.ops) == 1 else "+".join(self.ops)


def cases(handled: set[str]) -> list[Case]:
    """Every node test in scope, sorted by name."""
    import onnx

    found = []
    for path in sorted(node_tests().iterdir()):
        if not (path / "model.onnx").exists():
            continue
        model = onnx.load(str(path / "model.onnx"), load_external_data=False)
        ops = tuple(sorted({n.op_type for n in model.graph.node}))
        values = [*model.graph.input, *model.graph.output]
        if ops and set(ops) <= handled and all(
                v.type.tensor_type.elem_type in TYPES for v in values):
            found.append(Case(path.name, path, ops))
    return found


def load(case: Case):
    """(model, inputs by name, expected outputs in order) of the test's first data set."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(case.path / "model.onnx"))
    data = case.path / "test_data_set_0"

    def read(prefix: str) -> list[np.ndarray]:
        out = []
        for i in range(len(list(data.glob(f"{prefix}_*.pb")))):
            t = onnx.TensorProto()
            t.ParseFromString((data / f"{prefix}_{i}.pb").read_bytes())
            out.append(numpy_helper.to_array(t))
        return out

    names = [i.name for i in model.graph.input
             if i.name not in {t.name for t in model.graph.initializer}]
    return model, dict(zip(names, read("input"), strict=True)), read("output")


def static_inputs(model) -> set[str]:
    """The graph inputs that feed a shape or axes operand, directly or through the nodes that
    compute it (an expanded test's pad arithmetic), but not through Shape or Size, which read
    only a shape."""
    producer = {out: node for node in model.graph.node for out in node.output}
    wanted = [name for node in model.graph.node for i, name in enumerate(node.input)
              if (node.op_type, i) in STATIC_OPERANDS]
    found: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in found or not name:
            continue
        found.add(name)
        node = producer.get(name)
        if node is not None and node.op_type not in ("Shape", "Size"):
            wanted.extend(node.input)
    inputs = {i.name for i in model.graph.input}
    return found & inputs


def compile_case(case: Case, placement: str | None = None) -> tuple[bytes, list[str], list]:
    """(.hxb bytes, the runtime inputs' names in order, expected outputs)."""
    import hexir_compiler

    model, inputs, expected = load(case)
    fixed = {name: inputs[name] for name in static_inputs(model) if name in inputs}
    module = hexir_compiler.compile(model, "hxb", placement=placement, fixed_inputs=fixed,
                                    target=HOST_TARGET)
    return module, [n for n in inputs if n not in fixed], (inputs, expected)


def run(case: Case) -> None:
    """Compile and run the test on the cpu; AssertionError naming the output that differs."""
    import hexir_runtime

    module, names, (inputs, expected) = compile_case(case)
    outputs = hexir_runtime.load(module).main(*(inputs[n] for n in names))
    if not isinstance(outputs, tuple | list):
        outputs = (outputs,)
    assert len(outputs) == len(expected), f"{len(outputs)} outputs, expected {len(expected)}"
    for i, (got, want) in enumerate(zip(outputs, expected, strict=True)):
        got = np.asarray(got)
        assert got.dtype == want.dtype and got.shape == want.shape, (
            f"output {i}: {got.dtype} {got.shape}, expected {want.dtype} {want.shape}")
        if want.dtype in TOLERANCE:
            rtol, atol = TOLERANCE[want.dtype]
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"output {i}")
