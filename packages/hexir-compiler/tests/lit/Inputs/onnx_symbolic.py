"""Write the ONNX model of onnx-symbolic.test: x [batch, seq, 8] split into 2 heads of 4 by a
Reshape whose target an exporter computes from the input's shape, then transposed."""

import sys

from onnx import TensorProto, helper, save

nodes = [
    helper.make_node("Shape", ["x"], ["s"]),
    helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
    helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
    helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
    helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
    helper.make_node("Concat", ["b1", "n1", "heads"], ["target"], axis=0),
    helper.make_node("Reshape", ["x", "target"], ["r"], name="split_heads"),
    helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1, 3]),
]
consts = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
          helper.make_tensor("one", TensorProto.INT64, [], [1]),
          helper.make_tensor("axes", TensorProto.INT64, [1], [0]),
          helper.make_tensor("heads", TensorProto.INT64, [2], [2, 4])]
graph = helper.make_graph(nodes, "heads",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         ["batch", "seq", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], consts)
save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
