// Every hexir op parses, verifies and prints in generic form; printing is a fixed point.

// RUN: %hexir -emit=mlir %s -o %t.1.mlir
// RUN: %hexir -emit=mlir %t.1.mlir -o %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: FileCheck %s --input-file %t.1.mlir

// CHECK-LABEL: func.func @graph
// CHECK: "hexir.constant"() {value = dense<5.000000e-01> : tensor<4xf32>}
// CHECK: "hexir.linear"({{.*}}) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
// CHECK: "hexir.matmul"({{.*}}) : (tensor<5x2x3xf32>, tensor<3x4xf32>) -> tensor<5x2x4xf32>
// CHECK: "hexir.add"({{.*}}) : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
// CHECK: "hexir.sub"
// CHECK: "hexir.mul"
// CHECK: "hexir.div"
// CHECK: "hexir.relu"
// CHECK: "hexir.sigmoid"
// CHECK: "hexir.tanh"
// CHECK: "hexir.exp"
// CHECK: "hexir.sqrt"
// CHECK: "hexir.neg"
// CHECK: "hexir.gelu"({{.*}}) {approximate = "tanh"}
// CHECK: "hexir.gelu"({{.*}}) : (tensor<2x4xf32>)
// CHECK: "hexir.softmax"({{.*}}) {axis = -1 : i64}
// CHECK: "hexir.layer_norm"({{.*}}) {epsilon = 1.000000e-05 : f64}
// CHECK: "hexir.transpose"({{.*}}) {permutation = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
// CHECK: "hexir.reshape"({{.*}}) : (tensor<2x4xf32>) -> tensor<8xf32>
// CHECK: "hexir.reduce_sum"({{.*}}) {axes = array<i64: 1>, keepdims = true} : (tensor<2x4xf32>) -> tensor<2x1xf32>
// CHECK: "hexir.reduce_mean"({{.*}}) {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x4xf32>) -> tensor<f32>
// CHECK: "hexir.reduce_max"({{.*}}) {axes = array<i64: -1>, keepdims = false} : (tensor<2x4xf32>) -> tensor<2xf32>
// CHECK: "hexir.transfer"({{.*}}) {dst = "cuda", src = "cpu"}
// CHECK: "hexir.print"
// CHECK: return {{.*}} : tensor<2x4xf32>, tensor<2x1xf32>
// CHECK-LABEL: func.func @f64
// CHECK: "hexir.linear"({{.*}}) : (tensor<1x2xf64>, tensor<2x2xf64>) -> tensor<1x2xf64>

func.func @graph(%x: tensor<2x3xf32>, %w: tensor<3x4xf32>, %bx: tensor<5x2x3xf32>) -> (tensor<2x4xf32>, tensor<2x1xf32>) {
  %b = "hexir.constant"() {value = dense<0.5> : tensor<4xf32>} : () -> tensor<4xf32>
  %l = "hexir.linear"(%x, %w) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %bm = "hexir.matmul"(%bx, %w) : (tensor<5x2x3xf32>, tensor<3x4xf32>) -> tensor<5x2x4xf32>
  %a = "hexir.add"(%l, %b) : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %s = "hexir.sub"(%a, %b) : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %m = "hexir.mul"(%s, %a) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %d = "hexir.div"(%m, %b) : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %r = "hexir.relu"(%d) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %sg = "hexir.sigmoid"(%r) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %th = "hexir.tanh"(%sg) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %e = "hexir.exp"(%th) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %sq = "hexir.sqrt"(%e) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %n = "hexir.neg"(%sq) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %g = "hexir.gelu"(%n) {approximate = "tanh"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %g2 = "hexir.gelu"(%g) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %sm = "hexir.softmax"(%g2) {axis = -1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %ln = "hexir.layer_norm"(%sm, %b, %b) {epsilon = 1.0e-5 : f64} : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %t = "hexir.transpose"(%ln) {permutation = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %rs = "hexir.reshape"(%ln) : (tensor<2x4xf32>) -> tensor<8xf32>
  %rsum = "hexir.reduce_sum"(%ln) {axes = array<i64: 1>, keepdims = true} : (tensor<2x4xf32>) -> tensor<2x1xf32>
  %rmean = "hexir.reduce_mean"(%ln) {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x4xf32>) -> tensor<f32>
  %rmax = "hexir.reduce_max"(%ln) {axes = array<i64: -1>, keepdims = false} : (tensor<2x4xf32>) -> tensor<2xf32>
  %up = "hexir.transfer"(%ln) {src = "cpu", dst = "cuda"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  "hexir.print"(%t) : (tensor<4x2xf32>) -> ()
  return %ln, %rsum : tensor<2x4xf32>, tensor<2x1xf32>
}

func.func @f64(%x: tensor<1x2xf64>) -> tensor<1x2xf64> {
  %w = "hexir.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %y = "hexir.linear"(%x, %w) : (tensor<1x2xf64>, tensor<2x2xf64>) -> tensor<1x2xf64>
  return %y : tensor<1x2xf64>
}

// A string tensor (`!hexir.string`) and the op that computes one.
// CHECK-LABEL: func.func @strings
// CHECK: "hexir.string_normalizer"(%arg0) {case_change_action = "LOWER", is_case_sensitive = false, stopwords = ["Monday", "sunday"]} : (tensor<1x6x!hexir.string>) -> tensor<1x4x!hexir.string>
func.func @strings(%x: tensor<1x6x!hexir.string>) -> tensor<1x4x!hexir.string> {
  %y = "hexir.string_normalizer"(%x) {case_change_action = "LOWER", is_case_sensitive = false, stopwords = ["Monday", "sunday"]} : (tensor<1x6x!hexir.string>) -> tensor<1x4x!hexir.string>
  return %y : tensor<1x4x!hexir.string>
}
