"""The ONNX project's model tests through `hexir -emit=hxb` and `hexir-run`.

The four model suites of the onnx 1.22.0 wheel (`onnx_node_tests.suite`): `simple` and the two
`pytorch-*` suites are directories of `model.onnx` and `test_data_set_*/{input,output}_*.pb`;
`light` is the ONNX Model Zoo's classic CNNs at opset 9 (weights made by ConstantOfShape),
`light_<name>.onnx` beside `light_<name>_output_0.pb`, fed the input ONNX's own runner makes
for them (`arange(n) / n` in the input's shape). Each model is compiled by `hexir`'s `main`
and each data set run by `hexir-run`'s `main` (`--input=@.npz --output=@.npz`), in process,
and compared as ONNX's runner does: rtol 1e-3, atol 1e-7 (densenet121: rtol 2e-3). Graph
inputs that feed shape operands are fixed with `-fix-input` from the data set, as in the node
tests; a symbolic dimension is bound with `-input-shape` from it. A model listed in
`EXCEPTIONS` must fail exactly the way it says.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper

import onnx_node_tests as node
from conftest import HOST_TARGET
from hexir_compiler import cli
from hexir_runtime import cli as run_cli

#: `light` (the Model Zoo's full-size CNNs: VGG-19 alone takes minutes and a 575 MB module)
#: runs only in the full mode, HEXIR_FULL_TESTS=1.
SUITES = ("simple", "pytorch-converted", "pytorch-operator") + (
    ("light",) if os.environ.get("HEXIR_FULL_TESTS") == "1" else ())
#: ONNX's runner: 1e-3 / 1e-7 for every model test, densenet121 2e-3.
RTOL, ATOL = 1e-3, 1e-7
LOOSER = {"light_densenet121": 2e-3}


#: suite/model (a regex) -> (why, what the failure must show: a regex of the refusal).
EXCEPTIONS: dict[str, tuple[str, str]] = {}


@dataclass(frozen=True)
class Model:
    suite: str
    name: str
    path: Path

    @property
    def id(self) -> str:
        return f"{self.suite}/{self.name}"


def models() -> list[Model]:
    found = []
    for suite in SUITES:
        root = node.suite(suite)
        if suite == "light":
            found += [Model(suite, p.stem, p) for p in sorted(root.glob("light_*.onnx"))]
        else:
            found += [Model(suite, d.name, d / "model.onnx") for d in sorted(root.iterdir())
                      if (d / "model.onnx").exists()]
    return found


def _tensor(path: Path) -> np.ndarray:
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(t)


def data_sets(model: Model, graph) -> list[tuple[dict[str, np.ndarray], list[np.ndarray]]]:
    """(inputs by name, expected outputs in order) of each of the model's data sets."""
    initializers = {t.name for t in graph.initializer}
    names = [i.name for i in graph.input if i.name not in initializers]
    if model.suite == "light":  # what onnx.backend.test.runner feeds these models
        inputs = {}
        for vi in graph.input:
            if vi.name not in initializers:
                shape = [d.dim_value if d.HasField("dim_value") else 1
                         for d in vi.type.tensor_type.shape.dim]
                n = int(np.prod(shape))
                inputs[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
        outputs = [_tensor(model.path.with_name(f"{model.name}_output_{k}.pb"))
                   for k in range(len(graph.output))]
        return [(inputs, outputs)]
    sets = []
    for data in sorted(model.path.parent.glob("test_data_set_*")):
        ins = [_tensor(data / f"input_{k}.pb") for k in range(len(list(data.glob("input_*"))))]
        outs = [_tensor(data / f"output_{k}.pb") for k in range(len(list(data.glob("output_*"))))]
        sets.append((dict(zip(names, ins, strict=True)), outs))
    return sets


class Refused(Exception):
    """`hexir` refused the model (its one line)."""


def run(model: Model, tmp: Path) -> None:
    """Compile with `hexir`, run every data set with `hexir-run`, compare; Refused or
    AssertionError naming what differs."""
    graph = onnx.load(str(model.path), load_external_data=False).graph
    sets = data_sets(model, graph)
    inputs = sets[0][0]
    fixed = {n: inputs[n] for n in node.static_inputs(onnx.load(str(model.path)))
             if n in inputs}
    flags = [f"-input-shape={vi.name}={'x'.join(map(str, inputs[vi.name].shape)) or '1'}"
             for vi in graph.input if vi.name in inputs and vi.name not in fixed
             and any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)]
    for name, array in fixed.items():
        np.save(tmp / f"fixed_{name}.npy", array)
        flags.append(f"-fix-input={name}=@{tmp / f'fixed_{name}.npy'}")
    hxb = tmp / "model.hxb"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = cli.main(["-emit=hxb", "-o", str(hxb), f"-target={HOST_TARGET}", *flags,
                           str(model.path)])
    if status != 0:
        raise Refused(err.getvalue().strip())
    rtol = LOOSER.get(model.name, RTOL)
    for k, (given, expected) in enumerate(sets):
        # (ONNX's string tensors are object arrays; a user saves strings as str arrays,
        # which an .npz holds without pickling)
        np.savez(tmp / "in.npz", **{n: v.astype(str) if v.dtype == object else v
                                    for n, v in given.items() if n not in fixed})
        out, err = io.StringIO(), io.StringIO()
        status = run_cli.main([str(hxb), "--input=@" + str(tmp / "in.npz"),
                               "--output=@" + str(tmp / "out.npz"), "-q"], out, err)
        assert status == 0, f"data set {k}: hexir-run: {err.getvalue().strip()}"
        with np.load(tmp / "out.npz") as got:
            for vi, want in zip(graph.output, expected, strict=True):
                result = got[vi.name]
                if want.dtype == object:  # strings: hexir-run writes them as str arrays
                    assert result.dtype.kind == "U" and result.shape == want.shape, (
                        f"data set {k}, output '{vi.name}': {result.dtype} {result.shape}, "
                        f"expected strings {want.shape}")
                    np.testing.assert_array_equal(result, want.astype(str),
                                                  err_msg=f"data set {k}, output '{vi.name}'")
                    continue
                assert result.dtype == want.dtype and result.shape == want.shape, (
                    f"data set {k}, output '{vi.name}': {result.dtype} {result.shape}, "
                    f"expected {want.dtype} {want.shape}")
                np.testing.assert_allclose(result, want, rtol=rtol, atol=ATOL,
                                           err_msg=f"data set {k}, output '{vi.name}'")


MODELS = models()


def _exception(model: Model) -> tuple[str, str] | None:
    return next((v for k, v in EXCEPTIONS.items() if re.fullmatch(k, model.id)), None)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.id)
def test_model(model, tmp_path):
    listed = _exception(model)
    if listed is None:
        run(model, tmp_path)
        return
    why, shows = listed
    with pytest.raises(Refused, match=shows):
        run(model, tmp_path)
    pytest.xfail(f"listed: {why}")


#: The share of each suite that must pass (issue 26's: 95% of each).
TARGETS = dict.fromkeys(("simple", "pytorch-converted", "pytorch-operator", "light"), 0.95)


@pytest.mark.parametrize("suite", SUITES)
def test_each_suite_meets_its_target(suite):
    """The listed exceptions leave the suite's target share to pass (test_model checks that
    the rest do, and that the listed ones fail as listed)."""
    ours = [m for m in MODELS if m.suite == suite]
    listed = [m for m in ours if _exception(m) is not None]
    assert ours and len(ours) - len(listed) >= TARGETS[suite] * len(ours), (
        f"{suite}: {len(ours) - len(listed)} of {len(ours)} pass; listed: "
        f"{', '.join(m.name for m in listed)}")
