// hexir-fuse: which ops become one kernel, as `hexir.group` on each member. An element-wise
// chain is one group; a matmul heads the group of its element-wise epilogue; a reduction
// ends the group of its element-wise prologue (tanh, sub -> softmax); placement draws the
// boundaries (the relu on the cpu stays out of the cuda group), and so does a value with a
// user outside the group (%3 feeds the tanh and the sub, and is returned: its producers fuse
// up to it, no further). A value whose every user is in the group joins it: SiLU's
// x * sigmoid(x) after a bias add is one group.
// RUN: %hexir-opt --pass=hexir-fuse %s | FileCheck %s
// RUN: %hexir-opt --pass=hexir-fuse,hexir-fuse %s | FileCheck %s

func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) {
  %0 = "hexir.linear"(%x, %w) {device = "cuda"} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = "hexir.add"(%0, %b) {device = "cuda"} : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %2 = "hexir.relu"(%1) {device = "cpu"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %3 = "hexir.exp"(%2) {device = "cpu"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %4 = "hexir.tanh"(%3) {device = "cpu"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %5 = "hexir.sub"(%4, %3) {device = "cpu"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %6 = "hexir.softmax"(%5) {device = "cpu", axis = 1 : i64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %1, %6, %3 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
}
// CHECK:      "hexir.linear"(%arg0, %arg1) {device = "cuda", hexir.group = 0 : i64}
// CHECK-NEXT: "hexir.add"(%0, %arg2) {device = "cuda", hexir.group = 0 : i64}
// CHECK-NEXT: "hexir.relu"(%1) {device = "cpu", hexir.group = 1 : i64}
// CHECK-NEXT: "hexir.exp"(%2) {device = "cpu", hexir.group = 1 : i64}
// CHECK-NEXT: "hexir.tanh"(%3) {device = "cpu", hexir.group = 2 : i64}
// CHECK-NEXT: "hexir.sub"(%4, %3) {device = "cpu", hexir.group = 2 : i64}
// CHECK-NEXT: "hexir.softmax"(%5) {axis = 1 : i64, device = "cpu", hexir.group = 2 : i64}

func.func @silu(%x: tensor<4x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %0 = "hexir.add"(%x, %b) {device = "cpu"} : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %1 = "hexir.sigmoid"(%0) {device = "cpu"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %2 = "hexir.mul"(%0, %1) {device = "cpu"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %2 : tensor<4x16xf32>
}
// CHECK-LABEL: func.func @silu
// CHECK:      "hexir.add"(%arg0, %arg1) {device = "cpu", hexir.group = 0 : i64}
// CHECK-NEXT: "hexir.sigmoid"(%0) {device = "cpu", hexir.group = 0 : i64}
// CHECK-NEXT: "hexir.mul"(%0, %1) {device = "cpu", hexir.group = 0 : i64}

// A contraction heads its group: the values it reads come from outside it, even where the
// group's epilogue uses them too (a GRU cell: the gate's sigmoid feeds the linear and the
// add after it). Were the sigmoid let in, the kernel would read it before computing it.
func.func @gate(%x: tensor<3x6xf32>, %w: tensor<6x6xf32>) -> tensor<3x6xf32> {
  %0 = "hexir.sigmoid"(%x) {device = "cpu"} : (tensor<3x6xf32>) -> tensor<3x6xf32>
  %1 = "hexir.linear"(%0, %w) {device = "cpu"} : (tensor<3x6xf32>, tensor<6x6xf32>) -> tensor<3x6xf32>
  %2 = "hexir.add"(%1, %0) {device = "cpu"} : (tensor<3x6xf32>, tensor<3x6xf32>) -> tensor<3x6xf32>
  return %2 : tensor<3x6xf32>
}
// CHECK-LABEL: func.func @gate
// CHECK:      %0 = "hexir.sigmoid"(%arg0) {device = "cpu"} : (tensor<3x6xf32>) -> tensor<3x6xf32>
// CHECK-NEXT: "hexir.linear"(%0, %arg1) {device = "cpu", hexir.group = 0 : i64}
// CHECK-NEXT: "hexir.add"(%1, %0) {device = "cpu", hexir.group = 0 : i64}

// Concats of one axis are one group (one kernel copies each part once); a concat never joins
// an element-wise group, nor one along another axis.
func.func @concats(%a: tensor<2x3xf32>, %b: tensor<2x1xf32>) -> (tensor<2x8xf32>, tensor<4x4xf32>) {
  %0 = "hexir.concat"(%a, %b) {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x4xf32>
  %1 = "hexir.relu"(%0) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %2 = "hexir.concat"(%0, %1) {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %3 = "hexir.concat"(%a, %b) {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x4xf32>
  %4 = "hexir.concat"(%3, %3) {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
  %5 = "hexir.concat"(%a, %b) {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x4xf32>
  %6 = "hexir.concat"(%b, %5) {axis = -1 : i64} : (tensor<2x1xf32>, tensor<2x4xf32>) -> tensor<2x5xf32>
  %7 = "hexir.concat"(%6, %b) {axis = 1 : i64} : (tensor<2x5xf32>, tensor<2x1xf32>) -> tensor<2x6xf32>
  %8 = "hexir.concat"(%7, %b) {axis = 1 : i64} : (tensor<2x6xf32>, tensor<2x1xf32>) -> tensor<2x7xf32>
  %9 = "hexir.concat"(%8, %b) {axis = 1 : i64} : (tensor<2x7xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %10 = "hexir.add"(%9, %2) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %10, %4 : tensor<2x8xf32>, tensor<4x4xf32>
}
// CHECK-LABEL: func.func @concats
// CHECK:      %0 = "hexir.concat"(%arg0, %arg1) {axis = 1 : i64} :
// CHECK-NEXT: %1 = "hexir.relu"(%0) :
// CHECK-NEXT: %2 = "hexir.concat"(%0, %1) {axis = 1 : i64} :
// CHECK-NEXT: %3 = "hexir.concat"(%arg0, %arg1) {axis = 1 : i64} :
// CHECK-NEXT: %4 = "hexir.concat"(%3, %3) {axis = 0 : i64} :
// CHECK-NEXT: "hexir.concat"(%arg0, %arg1) {axis = 1 : i64, hexir.group = [[G:[0-9]+]] : i64}
// CHECK-NEXT: "hexir.concat"(%arg1, %5) {axis = -1 : i64, hexir.group = [[G]] : i64}
// CHECK-NEXT: "hexir.concat"(%6, %arg1) {axis = 1 : i64, hexir.group = [[G]] : i64}
// CHECK-NEXT: "hexir.concat"(%7, %arg1) {axis = 1 : i64, hexir.group = [[G]] : i64}
// CHECK-NEXT: "hexir.concat"(%8, %arg1) {axis = 1 : i64, hexir.group = [[G]] : i64}
// CHECK-NEXT: %10 = "hexir.add"(%9, %2) :
