// What hexir-lower-to-tir refuses, reported at the op, one line, exit 1.
// RUN: not %hexir -emit=mlir-tir -placement=hexir.matmul=cuda %s 2>&1 | FileCheck %s

// A batch of 70000 matrices needs 70000 blocks on grid axis z, over CUDA's 65535.
func.func @main(%a: tensor<70000x1x1xf32>, %b: tensor<70000x1x1xf32>) -> tensor<70000x1x1xf32> {
  %0 = "hexir.matmul"(%a, %b) : (tensor<70000x1x1xf32>, tensor<70000x1x1xf32>) -> tensor<70000x1x1xf32>
  return %0 : tensor<70000x1x1xf32>
}

// CHECK: hexir-lower-to-tir-errors.mlir:6:8: error: hexir.matmul: cuda kernel needs 70000 blocks on grid axis z, more than the 65535 allowed
// CHECK-NOT: Traceback
