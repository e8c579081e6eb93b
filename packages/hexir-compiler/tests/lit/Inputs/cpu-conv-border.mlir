func.func @main(%x: tensor<1x6x9x7xf32>, %w: tensor<12x6x3x3xf32>) -> tensor<1x12x14x3xf32> {
  %c = "hexir.conv"(%x, %w) {strides = array<i64: 1, 2>, pads = array<i64: 11, 5, 4, 6>, dilations = array<i64: 5, 6>, group = 1 : i64} : (tensor<1x6x9x7xf32>, tensor<12x6x3x3xf32>) -> tensor<1x12x14x3xf32>
  return %c : tensor<1x12x14x3xf32>
}
