// hexir-kernels-to-gpu on its own: cuda kernel funcs become gpu.modules; cpu ones are kept;
// run twice, nothing changes.
// RUN: %hexir -emit=mlir-linalg -placement=hexir.relu=cuda %S/Inputs/linear-relu.mlir > %t.loops
// RUN: %hexir-opt --pass=hexir-kernels-to-gpu %t.loops > %t.once
// RUN: %hexir-opt --pass=hexir-kernels-to-gpu %t.once > %t.twice
// RUN: diff %t.once %t.twice
// RUN: FileCheck %s < %t.once

// CHECK: module attributes {gpu.container_module
// CHECK: func.func @linear_0(
// CHECK: gpu.module @relu_1 attributes {device = "cuda", hexir.block = array<i64: 32, 1, 1>, hexir.grid = array<i64: 1, 1, 1>, hexir.kernel = "relu"
// CHECK-NEXT: gpu.func @relu_1(%arg0: memref<2x2xf64> {llvm.align = 16 : i64}, %arg1: memref<2x2xf64> {llvm.align = 16 : i64}) kernel
// CHECK: gpu.thread_id x
// CHECK: gpu.return
