func.func @main(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %y = "hexir.exp"(%x) : (tensor<4x32xf32>) -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}
