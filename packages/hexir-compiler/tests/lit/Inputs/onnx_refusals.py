"""Writes an ONNX model with several problems (argv[1]): ops Hexir does not import, two of
them twice, one of them reading another's output, and a Reshape whose shape does not fit."""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
nodes = [helper.make_node("Det", ["x"], ["d1"], name="det1"),
         helper.make_node("Det", ["x"], ["d2"], name="det2"),
         helper.make_node("Unique", ["d1"], ["u1"], name="unique1"),
         helper.make_node("Unique", ["d2"], ["u2"], name="unique2"),
         helper.make_node("Compress", ["x", "keep"], ["c"], name="compress"),
         helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape")]
initializers = [numpy_helper.from_array(np.array([True, False]), "keep"),
                numpy_helper.from_array(np.array([4, 2], np.int64), "shape")]
outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
           for n in ("u1", "u2", "c", "r")]
graph = helper.make_graph(nodes, "refusals", [x], outputs, initializers)
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
