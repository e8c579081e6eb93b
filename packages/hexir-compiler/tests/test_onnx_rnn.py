"""RNN, GRU and LSTM (frontend/onnx_rnn.py) against ONNX Runtime, attribute by attribute.

Each case is one node with random weights (initializers) and random runtime inputs; Hexir's
outputs must match ONNX Runtime's within float32 rtol 1e-3 / atol 1e-4. ONNX Runtime has
neither layout 1 nor float64 recurrent kernels: layout 1 is checked against the layout-0 model
with the inputs and outputs transposed, float64 against the float32 run. Then nn.RNN, nn.GRU
and nn.LSTM as PyTorch exports them, and the refusals.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper

import hexir_compiler
import hexir_runtime

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
SEQ, BATCH, WIDTH, HIDDEN = 5, 3, 4, 3


def _model(op, direction="forward", attrs=None, *, bias=True, lens=False, h0=True, c0=True,
           peepholes=True, layout=0, dtype=np.float32, seed=0, lengths=None, seq=SEQ):
    """One `op` node, its weights as initializers; returns (model, runtime inputs by name)."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op]
    x_shape = (BATCH, seq, WIDTH) if layout else (seq, BATCH, WIDTH)
    state = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
    weights = {"W": rng.standard_normal((dirs, gates * HIDDEN, WIDTH)) * 0.7,
               "R": rng.standard_normal((dirs, gates * HIDDEN, HIDDEN)) * 0.7,
               "B": rng.standard_normal((dirs, 2 * gates * HIDDEN)) if bias else None,
               "P": rng.standard_normal((dirs, 3 * HIDDEN)) if op == "LSTM" and peepholes
               else None}
    feeds = {"X": rng.standard_normal(x_shape).astype(dtype)}
    if lens:
        feeds["L"] = np.array(lengths if lengths is not None else
                              rng.integers(0, SEQ + 1, BATCH), np.int32)
    if h0:
        feeds["H0"] = rng.standard_normal(state).astype(dtype)
    if c0 and op == "LSTM":
        feeds["C0"] = rng.standard_normal(state).astype(dtype)
    order = ["X", "W", "R", "B", "L", "H0"] + (["C0", "P"] if op == "LSTM" else [])
    names = [n if n in feeds or weights.get(n) is not None else "" for n in order]
    while names[-1] == "":
        names.pop()
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outputs, hidden_size=HIDDEN, direction=direction,
                            **({"layout": layout} if layout else {}), **(attrs or {}))
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, TensorProto.INT32 if k == "L" else elem, v.shape)
         for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, elem, None) for o in outputs],
        [numpy_helper.from_array(v.astype(dtype), k) for k, v in weights.items()
         if v is not None])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)],
                             ir_version=10), feeds


def _hexir(model, feeds) -> list[np.ndarray]:
    got = hexir_runtime.load(hexir_compiler.compile(model)).main(*feeds.values())
    return [np.asarray(g) for g in (got if isinstance(got, tuple | list) else (got,))]


def _ort(model, feeds) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _same(got, want, rtol=1e-3, atol=1e-4) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


CASES = {
    **{f"{op}-{d}{'-lens' if lens else ''}": (op, d, {}, {"lens": lens})
       for op in GATES for d in ("forward", "reverse", "bidirectional") for lens in (0, 1)},
    "LSTM-bare": ("LSTM", "forward", {}, {"bias": False, "h0": False, "c0": False,
                                          "peepholes": False}),
    "LSTM-zero-and-full-lengths": ("LSTM", "bidirectional", {},
                                   {"lens": True, "lengths": [0, SEQ, 2]}),
    "GRU-linear-before-reset": ("GRU", "bidirectional", {"linear_before_reset": 1},
                                {"lens": True}),
    "GRU-linear-before-reset-no-bias": ("GRU", "forward", {"linear_before_reset": 1},
                                        {"bias": False}),
    **{f"{op}-clip": (op, "forward", {"clip": 0.5}, {}) for op in GATES},
    "LSTM-input-forget": ("LSTM", "forward", {"input_forget": 1}, {}),
    "LSTM-activations": ("LSTM", "forward", {
        "activations": ["Relu", "LeakyRelu", "Affine"], "activation_alpha": [0.2, 0.5],
        "activation_beta": [0.3]}, {}),
    "GRU-activations-bidirectional": ("GRU", "bidirectional", {
        "activations": ["HardSigmoid", "ScaledTanh", "Sigmoid", "Elu"],
        "activation_alpha": [0.3, 1.2, 0.7], "activation_beta": [0.4, 0.9]}, {}),
    **{f"RNN-{fn}{'-alpha-beta' if given else ''}": (
        "RNN", "forward", {"activations": [fn], **({"activation_alpha": [0.35],
                                                    "activation_beta": [0.6]} if given else {})},
        {})
       for fn in ("Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu",
                  "ScaledTanh", "HardSigmoid", "Elu", "Softsign", "Softplus")
       for given in (0, 1)},
}


@pytest.mark.parametrize("op, attrs, per_step", [
    ("RNN", {}, 1), ("GRU", {"linear_before_reset": 1}, 2), ("GRU", {}, 3), ("LSTM", {}, 3)])
def test_every_step_is_the_same_few_kernels(op, attrs, per_step):
    # a step gathers its row of the input projection and slices its gates in the kernels
    # that read them (`hexir-fuse`'s leaves): its h x R product with the gates it feeds, then
    # the rest of the update (GRU's default form multiplies r * h by its R first, a kernel
    # more; PyTorch exports linear_before_reset; LSTM's cell and hidden states are a kernel
    # each, a kernel having one result); the step's index is an input, so every
    # step calls the same executables and a longer sequence adds calls, not code
    kernels = {}
    for seq in (5, 9):
        model, feeds = _model(op, "forward", attrs, seq=seq, seed=seq)
        calls = Counter(re.findall(r"callee = @(\w+)", hexir_compiler.compile(model, "mlir-tir")))
        kernels[seq] = sorted(name for name, count in calls.items() if count == seq)
        assert len(kernels[seq]) == per_step, calls
        assert all(count < 5 for name, count in calls.items() if name not in kernels[seq])
        _same(_hexir(model, feeds), _ort(model, feeds))
    assert kernels[5] == kernels[9]


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnx_runtime(name):
    op, direction, attrs, options = CASES[name]
    model, feeds = _model(op, direction, attrs, seed=len(name), **options)
    _same(_hexir(model, feeds), _ort(model, feeds))


@pytest.mark.parametrize("op", sorted(GATES))
def test_layout_1_is_layout_0_transposed(op):
    """ONNX Runtime refuses layout 1, so the batch-major model is held to the sequence-major
    one's outputs, transposed."""
    batchwise, feeds = _model(op, "bidirectional", {"linear_before_reset": 1} if op == "GRU"
                              else {}, lens=True, layout=1, seed=3)
    model, _ = _model(op, "bidirectional", {"linear_before_reset": 1} if op == "GRU" else {},
                      lens=True, seed=3)
    plain = {k: v if k == "L" else np.ascontiguousarray(
        np.swapaxes(v, 0, 1)) for k, v in feeds.items()}
    want = _ort(model, plain)
    want = [np.transpose(want[0], (2, 0, 1, 3))] + [np.swapaxes(w, 0, 1) for w in want[1:]]
    _same(_hexir(batchwise, feeds), want)


@pytest.mark.parametrize("op", sorted(GATES))
def test_float64_matches_the_float32_run(op):
    model, feeds = _model(op, "bidirectional", lens=True, dtype=np.float64, seed=5)
    narrow, _ = _model(op, "bidirectional", lens=True, seed=5)
    want = _ort(narrow, {k: v.astype(np.float32) if k != "L" else v for k, v in feeds.items()})
    got = _hexir(model, feeds)
    assert all(g.dtype == np.float64 for g in got)
    _same([g.astype(np.float32) for g in got], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bad, message", [
    ({"activations": ["Gelu"]}, r"activation 'Gelu' is not one ONNX defines for RNN"),
    ({"activations": ["Tanh", "Tanh"]}, "activations lists 2 functions; RNN with 1 direction"),
    ({"layout": 2}, r"layout 2 is not 0 or 1"),
    ({"hidden_size": 7}, r"hidden_size is 7 but R has shape \[1, 3, 3\]"),
    ({"direction": "sideways"}, r"direction 'sideways' is not forward, reverse or"),
])
def test_refusals_are_one_line_naming_the_node(bad, message):
    model, _ = _model("RNN")
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name not in bad]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute(k, v) for k, v in bad.items()])
    with pytest.raises(hexir_compiler.CompileError, match=r"node 0 \(RNN\): " + message):
        hexir_compiler.compile(model)


def test_a_weight_of_the_wrong_shape_is_refused():
    model, _ = _model("LSTM")
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(
        np.zeros((1, 12, 5), np.float32), "W"))
    with pytest.raises(hexir_compiler.CompileError,
                       match=r"W has shape \[1, 12, 5\]; expected \[1, 12, 4\]"):
        hexir_compiler.compile(model)


# ---- PyTorch's recurrent modules, as its exporter writes them ----------------------------

torch = pytest.importorskip("torch")


class _Stack(torch.nn.Module):
    """A recurrent module, its output sequence and final states all returned."""

    def __init__(self, kind: str, **config) -> None:
        super().__init__()
        self.rnn = getattr(torch.nn, kind)(**config)

    def forward(self, x):
        y, state = self.rnn(x)
        return (y, *state) if isinstance(state, tuple) else (y, state)


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("config", [
    {"num_layers": 1},
    {"num_layers": 2, "batch_first": True, "bidirectional": True},
], ids=["one-layer", "two-layers-bidirectional-batch-first"])
def test_pytorch_export_matches_onnx_runtime(kind, config, tmp_path):
    torch.manual_seed(11)
    model = _Stack(kind, input_size=6, hidden_size=8, **config).eval()
    x = torch.randn(3, 4, 6)
    path = tmp_path / f"{kind}.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17,
                      input_names=["x"])
    loaded = onnx.load(str(path))
    assert kind in {n.op_type for n in loaded.graph.node}
    feeds = {"x": x.numpy()}
    _same(_hexir(loaded, feeds), _ort(loaded, feeds))
