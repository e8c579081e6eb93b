// Every graph op of the hexir dialect in one program, f32 and f64, with an entry point that
// takes and returns tensors (issue 5's `@main(%x: tensor<8x784xf32>) -> tensor<8x10xf32>`).
func.func @main(%x: tensor<8x784xf32>, %y: tensor<2x3x4xf64>) -> (tensor<8x10xf32>, tensor<2x4x3xf64>) {
  %w = "hexir.constant"() {value = dense<0.5> : tensor<784x10xf32>} : () -> tensor<784x10xf32>
  %l = "hexir.linear"(%x, %w) : (tensor<8x784xf32>, tensor<784x10xf32>) -> tensor<8x10xf32>
  %b = "hexir.constant"() {value = dense<0.1> : tensor<10xf32>} : () -> tensor<10xf32>
  %a = "hexir.add"(%l, %b) : (tensor<8x10xf32>, tensor<10xf32>) -> tensor<8x10xf32>
  %s = "hexir.sub"(%a, %l) : (tensor<8x10xf32>, tensor<8x10xf32>) -> tensor<8x10xf32>
  %m = "hexir.mul"(%s, %b) : (tensor<8x10xf32>, tensor<10xf32>) -> tensor<8x10xf32>
  %d = "hexir.div"(%m, %b) : (tensor<8x10xf32>, tensor<10xf32>) -> tensor<8x10xf32>
  %r = "hexir.relu"(%d) : (tensor<8x10xf32>) -> tensor<8x10xf32>
  %sg = "hexir.sigmoid"(%r) : (tensor<8x10xf32>) -> tensor<8x10xf32>
  %th = "hexir.tanh"(%sg) : (tensor<8x10xf32>) -> tensor<8x10xf32>
  %ex = "hexir.exp"(%th) : (tensor<8x10xf32>) -> tensor<8x10xf32>
  %sq = "hexir.sqrt"(%ex) : (tensor<8x10xf32>) -> tensor<8x10xf32>
  %ng = "hexir.neg"(%sq) : (tensor<8x10xf32>) -> tensor<8x10xf32>
  %ab = "hexir.abs"(%ng) : (tensor<8x10xf32>) -> tensor<8x10xf32>
  %g1 = "hexir.gelu"(%ab) : (tensor<8x10xf32>) -> tensor<8x10xf32>
  %g2 = "hexir.gelu"(%g1) {approximate = "tanh"} : (tensor<8x10xf32>) -> tensor<8x10xf32>
  %sm = "hexir.softmax"(%g2) {axis = -1 : i64} : (tensor<8x10xf32>) -> tensor<8x10xf32>
  %ln = "hexir.layer_norm"(%sm, %b, %b) {epsilon = 1.0e-5 : f64} : (tensor<8x10xf32>, tensor<10xf32>, tensor<10xf32>) -> tensor<8x10xf32>
  %t = "hexir.transpose"(%y) {permutation = array<i64: 0, 2, 1>} : (tensor<2x3x4xf64>) -> tensor<2x4x3xf64>
  %rs = "hexir.reshape"(%t) : (tensor<2x4x3xf64>) -> tensor<6x4xf64>
  %mm = "hexir.matmul"(%y, %t) : (tensor<2x3x4xf64>, tensor<2x4x3xf64>) -> tensor<2x3x3xf64>
  %rsum = "hexir.reduce_sum"(%mm) {axes = array<i64: 1>, keepdims = true} : (tensor<2x3x3xf64>) -> tensor<2x1x3xf64>
  %rmean = "hexir.reduce_mean"(%mm) {axes = array<i64: 0, 2>, keepdims = false} : (tensor<2x3x3xf64>) -> tensor<3xf64>
  %rmax = "hexir.reduce_max"(%mm) {axes = array<i64: 0, 1, 2>, keepdims = true} : (tensor<2x3x3xf64>) -> tensor<1x1x1xf64>
  "hexir.print"(%rs) : (tensor<6x4xf64>) -> ()
  "hexir.print"(%rsum) : (tensor<2x1x3xf64>) -> ()
  "hexir.print"(%rmean) : (tensor<3xf64>) -> ()
  "hexir.print"(%rmax) : (tensor<1x1x1xf64>) -> ()
  return %ln, %t : tensor<8x10xf32>, tensor<2x4x3xf64>
}
