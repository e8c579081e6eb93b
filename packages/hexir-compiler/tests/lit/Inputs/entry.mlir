// Two entry points with arguments and results, f32, and kernels with params.
func.func @main(%x: tensor<2x3xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>) {
  %w = "hexir.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf32>} : () -> tensor<3x2xf32>
  %y = "hexir.linear"(%x, %w) : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %s = "hexir.softmax"(%y) {axis = -1 : i64} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  "hexir.print"(%s) : (tensor<2x2xf32>) -> ()
  return %s, %y : tensor<2x2xf32>, tensor<2x2xf32>
}

func.func @second(%x: tensor<2x3xf32>) -> tensor<2xf32> {
  %r = "hexir.reduce_sum"(%x) {axes = array<i64: 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<2xf32>
  return %r : tensor<2xf32>
}
