func.func @main(%x: tensor<1x8x16x16xf32>, %w: tensor<8x1x3x3xf32>) -> tensor<1x8x16x16xf32> {
  %lo = "hexir.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %hi = "hexir.constant"() {value = dense<6.0> : tensor<f32>} : () -> tensor<f32>
  %c = "hexir.conv"(%x, %w) {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 8 : i64} : (tensor<1x8x16x16xf32>, tensor<8x1x3x3xf32>) -> tensor<1x8x16x16xf32>
  %m = "hexir.max"(%c, %lo) : (tensor<1x8x16x16xf32>, tensor<f32>) -> tensor<1x8x16x16xf32>
  %y = "hexir.min"(%m, %hi) : (tensor<1x8x16x16xf32>, tensor<f32>) -> tensor<1x8x16x16xf32>
  return %y : tensor<1x8x16x16xf32>
}
