// Valid as a graph, but on cuda a batch of 70000 needs more than 65535 blocks on grid axis z.
func.func @main(%a: tensor<70000x1x1xf32>, %b: tensor<70000x1x1xf32>) -> tensor<70000x1x1xf32> {
  %0 = "hexir.matmul"(%a, %b) : (tensor<70000x1x1xf32>, tensor<70000x1x1xf32>) -> tensor<70000x1x1xf32>
  return %0 : tensor<70000x1x1xf32>
}
