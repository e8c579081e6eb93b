func.func @main(%x: tensor<3x300xf32>, %w: tensor<300x5xf32>) -> tensor<3x5xf32> {
  %y = "hexir.relu"(%x) : (tensor<3x300xf32>) -> tensor<3x300xf32>
  %z = "hexir.linear"(%y, %w) : (tensor<3x300xf32>, tensor<300x5xf32>) -> tensor<3x5xf32>
  func.return %z : tensor<3x5xf32>
}
