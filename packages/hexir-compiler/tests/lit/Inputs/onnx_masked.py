"""Write the ONNX model of onnx-input-shape.test: x [batch, seq, 8] times its mask m [batch,
seq] (one symbol `seq` shared by two inputs, as a text model's ids and attention mask)."""

import sys

from onnx import TensorProto, helper, save

nodes = [helper.make_node("Unsqueeze", ["m", "axes"], ["m3"]),
         helper.make_node("Mul", ["x", "m3"], ["y"])]
graph = helper.make_graph(
    nodes, "masked",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8]),
     helper.make_tensor_value_info("m", TensorProto.FLOAT, ["batch", "seq"])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    [helper.make_tensor("axes", TensorProto.INT64, [1], [2])])
save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
