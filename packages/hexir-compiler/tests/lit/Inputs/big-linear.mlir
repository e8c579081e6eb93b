// A linear too big for loops on the cpu (64 x 64 x 64: 262 K multiply-adds, above
// schedule.LOOPS_MAX_MACS at x86-64-v2): a call of the runtime's matmul routine, then a relu.
func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %w = "hexir.constant"() {value = dense<0.5> : tensor<64x64xf32>} : () -> tensor<64x64xf32>
  %m = "hexir.linear"(%x, %w) : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %r = "hexir.relu"(%m) : (tensor<64x64xf32>) -> tensor<64x64xf32>
  return %r : tensor<64x64xf32>
}
