"""numpy versions of the example networks: the oracle compiled modules are checked against.

Independent of the compiler on purpose: the weights are read back from the `.mlir` file's
`hexir.constant` hex literals by name (`%w1 = "hexir.constant"() {value = dense<"0x...">
...}`), but the computation is written here from the network's definition, not from the
graph in the file. A wiring mistake in generate.py (a missing residual, a wrong permutation)
therefore shows up as a mismatch instead of being copied into the oracle.

Everything is computed in float64, whatever the program's element type; the f32 programs'
weights are exactly the f32 values in the file.

    python examples/reference.py examples/mlp.mlir --input=x.npy --output=expected.npy
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import numpy as np

_CONSTANT = re.compile(
    r'^\s*%(?P<name>[\w.$-]+) = "hexir\.constant"\(\) \{value = dense<"0x(?P<hex>[0-9A-Fa-f]*)">'
    r" : tensor<(?P<type>[0-9x]*f(?:32|64))>\}",
    re.MULTILINE,
)
_TITLE = re.compile(r"^// (?P<title>MLP|Transformer block) ")
_SIGNATURE = re.compile(
    r"^func\.func @main\(%x: tensor<(?P<type>[0-9x]*f(?:32|64))>\)", re.MULTILINE
)
_ELEMENT = {"f32": "<f4", "f64": "<f8"}

# How close a compiled module must come, by element type: max|out - ref| <= tol * max|ref|.
# Norm-wise, not element-wise: an f32 output near zero (a residual sum that cancels) has a
# large relative error of its own without anything being wrong.
TOLERANCE = {"f32": 1e-5, "f64": 1e-12}


class ReferenceError(Exception):
    """The file is not one of the example programs this reference knows."""


def load_constants(text: str) -> dict[str, np.ndarray]:
    """The named hex constants of a program, as float64 arrays of their declared shape."""
    weights = {}
    for match in _CONSTANT.finditer(text):
        *dims, elem = match["type"].split("x")
        shape = tuple(int(d) for d in dims)
        data = np.frombuffer(bytes.fromhex(match["hex"]), dtype=_ELEMENT[elem])
        if data.size == 1 and math.prod(shape) != 1:  # MLIR's hex form of a splat
            data = np.full(math.prod(shape), data[0])
        if data.size != math.prod(shape):
            raise ReferenceError(
                f"constant %{match['name']} has {data.size} elements, its type "
                f"tensor<{match['type']}> needs {math.prod(shape)}"
            )
        weights[match["name"]] = data.reshape(shape).astype(np.float64)
    return weights


def input_type(text: str) -> tuple[tuple[int, ...], str]:
    """(shape, element type) of the program's one argument, `%x`."""
    match = _SIGNATURE.search(text)
    if match is None:
        raise ReferenceError("no 'func.func @main(%x: tensor<...>)' in the program")
    *dims, elem = match["type"].split("x")
    return tuple(int(d) for d in dims), elem


def sample_input(program: Path | str, rng: np.random.Generator) -> np.ndarray:
    """A random input of the program's type: pixel-like [0, 1) for the MLP, N(0, 1) for the
    transformer block (the scale of an embedding)."""
    text = Path(program).read_text()
    shape, elem = input_type(text)
    x = rng.random(shape) if _network(program, text) is mlp else rng.standard_normal(shape)
    return x.astype(_ELEMENT[elem])


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """max|out - ref| / max|ref|, in float64: the measure TOLERANCE bounds."""
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.abs(np.asarray(out, dtype=np.float64) - ref).max() / np.abs(ref).max())


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def mlp(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    """784-256-128-10: two ReLU layers, then logits and a softmax over the classes."""
    h = np.maximum(x @ w["w1"] + w["b1"], 0.0)
    h = np.maximum(h @ w["w2"] + w["b2"], 0.0)
    return softmax(h @ w["w3"] + w["b3"], axis=-1)


def transformer_block(x: np.ndarray, w: dict[str, np.ndarray], heads: int = 4,
                      eps: float = 1.0e-05, approximate: str = "none") -> np.ndarray:
    """Pre-LN block: x + MHA(LN1(x)), then h + FFN(LN2(h)) with a GELU feed-forward."""
    batch, seq, d = x.shape
    dh = d // heads

    def split(t: np.ndarray) -> np.ndarray:  # [B, S, D] -> [B, H, S, Dh]
        return t.reshape(batch, seq, heads, dh).swapaxes(1, 2)

    a = layer_norm(x, w["ln1_gamma"], w["ln1_beta"], eps)
    q, k, v = (split(a @ w[f"w{p}"] + w[f"b{p}"]) for p in "qkv")
    attn = softmax(q @ k.swapaxes(-1, -2) / math.sqrt(dh), axis=-1)
    ctx = (attn @ v).swapaxes(1, 2).reshape(batch, seq, d)
    h = x + ctx @ w["wo"] + w["bo"]
    f = gelu(layer_norm(h, w["ln2_gamma"], w["ln2_beta"], eps) @ w["w1"] + w["b1"], approximate)
    return h + f @ w["w2"] + w["b2"]


NETWORKS = {"MLP": mlp, "Transformer block": transformer_block}


def _network(program: Path | str, text: str):
    title = _TITLE.match(text)
    if title is None:
        raise ReferenceError(f"{program}: not an example program (no '// MLP' or "
                             "'// Transformer block' title on line 1)")
    return NETWORKS[title["title"]]


def evaluate(program: Path | str, x: np.ndarray) -> np.ndarray:
    """The network's output for input x (computed in float64), weights from `program`."""
    text = Path(program).read_text()
    network = _network(program, text)
    shape, _ = input_type(text)
    if np.shape(x) != shape:
        raise ReferenceError(f"{program} takes an input of shape {list(shape)}, "
                             f"got {list(np.shape(x))}")
    return network(np.asarray(x, dtype=np.float64), load_constants(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reference.py", description=__doc__.splitlines()[0])
    parser.add_argument("program", type=Path, help="an examples/*.mlir file")
    parser.add_argument("--input", type=Path, required=True, help="the input, a .npy file")
    parser.add_argument("--output", type=Path, required=True, help="where to save the .npy")
    args = parser.parse_args(argv)
    try:
        x = np.load(args.input, allow_pickle=False)
        y = evaluate(args.program, x)
    except (OSError, ValueError, KeyError, ReferenceError) as err:
        print(f"reference.py: error: {err}", file=sys.stderr)
        return 1
    np.save(args.output, y)
    return 0


if __name__ == "__main__":
    sys.exit(main())
