// The README's program: a linear and a relu, each placeable on either device.
func.func @main() {
  %a = "hexir.constant"() {value = dense<[[3.0, 1.0], [2.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %w = "hexir.constant"() {value = dense<[[1.0, 5.0], [5.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %m = "hexir.linear"(%a, %w) : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
  %r = "hexir.relu"(%m) : (tensor<2x2xf64>) -> tensor<2x2xf64>
  "hexir.print"(%r) : (tensor<2x2xf64>) -> ()
  return
}
