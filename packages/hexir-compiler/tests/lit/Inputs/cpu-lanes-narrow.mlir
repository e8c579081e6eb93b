func.func @main(%a: tensor<3x56xf32>, %b: tensor<3x28xf32>, %c: tensor<3x7xf32>) -> (tensor<3x56xf32>, tensor<3x28xf32>, tensor<3x7xf32>) {
  %x = "hexir.exp"(%a) : (tensor<3x56xf32>) -> tensor<3x56xf32>
  %y = "hexir.exp"(%b) : (tensor<3x28xf32>) -> tensor<3x28xf32>
  %z = "hexir.exp"(%c) : (tensor<3x7xf32>) -> tensor<3x7xf32>
  return %x, %y, %z : tensor<3x56xf32>, tensor<3x28xf32>, tensor<3x7xf32>
}
