"""Real architectures exported from PyTorch (torch.onnx.export, the TorchScript exporter),
compiled by Hexir and compared with PyTorch eager within float32 rtol 1e-4.

Three kinds, each with fixed seeds and shapes: an MLP, a LeNet-style CNN (Conv, MaxPool,
Flatten, Gemm) and a transformer encoder block (LayerNorm, multi-head attention, erf-GELU).
Each also runs with every op on cuda (its PTX on the fake driver's executor), and its
-emit=mlir text, compiled again, gives the same module byte for byte.
"""

from __future__ import annotations

import numpy as np
import pytest

import hexir_format as hf

torch = pytest.importorskip("torch")

import hexir_compiler
import hexir_runtime


class LeNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 6, 5, padding=2)
        self.c2 = torch.nn.Conv2d(6, 16, 5)
        self.f1 = torch.nn.Linear(16 * 5 * 5, 120)
        self.f2 = torch.nn.Linear(120, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.c2(x)), 2)
        return self.f2(torch.relu(self.f1(torch.flatten(x, 1))))


class EncoderBlock(torch.nn.Module):
    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.ff = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                                      torch.nn.Linear(4 * d, d))

    def forward(self, x):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.ff(self.ln2(x))


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 10))


MODELS = {
    "mlp": (_mlp, (8, 64)),
    "lenet": (LeNet, (2, 1, 28, 28)),
    "encoder_block": (EncoderBlock, (2, 10, 32)),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def exported(request, tmp_path_factory):
    build, shape = MODELS[request.param]
    torch.manual_seed(7)
    model = build().eval()
    x = torch.randn(*shape)
    path = tmp_path_factory.mktemp(request.param) / f"{request.param}.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    with torch.no_grad():
        expected = model(x).numpy()
    return path, x.numpy(), expected


def test_matches_pytorch_eager_on_cpu(exported):
    path, x, expected = exported
    module = hexir_runtime.load(hexir_compiler.compile(path))
    np.testing.assert_allclose(module.main(x), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(module.main(x=x), expected, rtol=1e-4, atol=1e-5)


def test_keeps_the_graph_names(exported):
    path, _, _ = exported
    entries = hf.parse(hexir_compiler.compile(path)).functions  # a variant per level
    assert [(e.inputs, e.outputs) for e in entries] == [(("x",), ("y",))] * 3


def test_with_every_op_on_cuda_its_ptx_matches_pytorch(exported):
    """Every op on cuda, fused: the PTX runs on the fake driver's executor (the runtime's
    tests/ptx_exec.py), as a GPU would run it."""
    from fake_driver import FakeDriver

    path, x, expected = exported
    module = hexir_compiler.compile(path, placement="cuda")
    parsed = hf.parse(module)
    assert parsed.executables and all(e.device is hf.Device.CUDA for e in parsed.executables)
    with hexir_runtime.load(module, device="cuda", driver=FakeDriver()) as m:
        np.testing.assert_allclose(m.main(x), expected, rtol=1e-4, atol=1e-5)


def test_the_imported_graph_printed_and_compiled_again_gives_the_same_module(exported, tmp_path):
    path, _, _ = exported
    text = tmp_path / "graph.mlir"
    text.write_text(hexir_compiler.compile(path, "mlir"))
    assert hexir_compiler.compile(text) == hexir_compiler.compile(path)
