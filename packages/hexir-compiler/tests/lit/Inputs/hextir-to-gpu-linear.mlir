func.func @main() {
  %a = "hexir.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %b = "hexir.constant"() {value = dense<[[5.0, 6.0], [7.0, 8.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %c = "hexir.linear"(%a, %b) {device = "cuda"} : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
  "hexir.print"(%c) : (tensor<2x2xf64>) -> ()
  func.return
}
