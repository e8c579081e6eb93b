// hexir-fuse: which ops become one kernel, as `hexir.group` on each member. An element-wise
// chain is one group; a matmul heads the group of its element-wise epilogue; a reduction
// ends the group of its element-wise prologue (tanh, sub -> softmax); placement draws the
// boundaries (the relu on the cpu stays out of the cuda group), and so does a value with two
// users (%3 feeds both the tanh and the sub: its producers fuse up to it, no further).
// RUN: %hexir-opt --pass=hexir-fuse %s | FileCheck %s
// RUN: %hexir-opt --pass=hexir-fuse,hexir-fuse %s | FileCheck %s

func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %0 = "hexir.linear"(%x, %w) {device = "cuda"} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = "hexir.add"(%0, %b) {device = "cuda"} : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %2 = "hexir.relu"(%1) {device = "cpu"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %3 = "hexir.exp"(%2) {device = "cpu"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %4 = "hexir.tanh"(%3) {device = "cpu"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %5 = "hexir.sub"(%4, %3) {device = "cpu"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %6 = "hexir.softmax"(%5) {device = "cpu", axis = 1 : i64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %1, %6 : tensor<4x16xf32>, tensor<4x16xf32>
}
// CHECK:      "hexir.linear"(%arg0, %arg1) {device = "cuda", hexir.group = 0 : i64}
// CHECK-NEXT: "hexir.add"(%0, %arg2) {device = "cuda", hexir.group = 0 : i64}
// CHECK-NEXT: "hexir.relu"(%1) {device = "cpu", hexir.group = 1 : i64}
// CHECK-NEXT: "hexir.exp"(%2) {device = "cpu", hexir.group = 1 : i64}
// CHECK-NEXT: "hexir.tanh"(%3) {device = "cpu", hexir.group = 2 : i64}
// CHECK-NEXT: "hexir.sub"(%4, %3) {device = "cpu", hexir.group = 2 : i64}
// CHECK-NEXT: "hexir.softmax"(%5) {axis = 1 : i64, device = "cpu", hexir.group = 2 : i64}
