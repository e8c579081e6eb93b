"""Writes ONNX models with string tensors into the directory argv[1]: `days.onnx`, a
StringNormalizer with stopwords whose output the model declares ([1, 6] -> [1, 4]), and
models Hexir refuses: `undeclared.onnx` (stopwords, no declared output length),
`reshape.onnx` (a string tensor into Reshape), `locale.onnx` (a Turkish locale) and
`initializer.onnx` (a string initializer)."""

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
S = TensorProto.STRING


def save(name, nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(out / f"{name}.onnx"))


def normalizer(**attrs):
    return helper.make_node("StringNormalizer", ["x"], ["y"], name="norm", **attrs)


x = helper.make_tensor_value_info("x", S, [1, 6])
save("days", [normalizer(case_change_action="UPPER", stopwords=["monday"])], [x],
     [helper.make_tensor_value_info("y", S, [1, 4])])
save("undeclared", [normalizer(stopwords=["monday"])], [x],
     [helper.make_tensor_value_info("y", S, None)])
save("reshape", [helper.make_node("Reshape", ["x", "shape"], ["y"], name="flat")], [x],
     [helper.make_tensor_value_info("y", S, [6])],
     [numpy_helper.from_array(np.array([6], np.int64), "shape")])
save("locale", [normalizer(case_change_action="LOWER", locale="tr_TR")], [x],
     [helper.make_tensor_value_info("y", S, [1, 6])])
words = helper.make_tensor("words", S, [1], [b"monday"])
save("initializer", [helper.make_node("Identity", ["words"], ["y"])], [x],
     [helper.make_tensor_value_info("y", S, [1])], [words])
