// Every graph op (Inputs/every-op.mlir: f32 and f64, tensor arguments and results) through
// every linalg-path stage on the cpu. No CUDA toolkit needed: nothing is placed on the GPU.
// RUN: %hexir -emit=mlir-linalg %S/Inputs/every-op.mlir > %t.linalg
// RUN: not grep -E '"hexir\.(linear|matmul|add|sub|mul|div|relu|sigmoid|tanh|exp|sqrt|neg|gelu|softmax|layer_norm|transpose|reshape|reduce_sum|reduce_mean|reduce_max|constant)"' %t.linalg
// RUN: %hexir -emit=mlir-hetero %S/Inputs/every-op.mlir > %t.hetero
// RUN: FileCheck %s --check-prefix=HETERO < %t.hetero
// RUN: grep -E '= (linalg|tensor)\.' %t.hetero | not grep -v 'device = "cpu"'
// RUN: %hexir -emit=mlir-gpu %S/Inputs/every-op.mlir | FileCheck %s --check-prefix=GPU
// RUN: %hexir -emit=mlir-llvm %S/Inputs/every-op.mlir > %t.llvm
// RUN: FileCheck %s --check-prefix=LLVM < %t.llvm
// RUN: not grep -E 'linalg\.|scf\.|"hexir\.|gpu\.' %t.llvm
// RUN: %hexir -emit=llvm %S/Inputs/every-op.mlir | FileCheck %s --check-prefix=IR

// Every op's loops are placed (the grep above: each linalg and tensor op says cpu).
// HETERO: func.func @main
// HETERO-COUNT-4: "hexir.print"({{.*}}) {device = "cpu"}

// Function boundaries bufferize with identity layouts: memrefs in, memrefs out.
// GPU: func.func @main(%arg0: memref<8x784xf32>, %arg1: memref<2x3x4xf64>) -> (memref<8x10xf32>, memref<2x4x3xf64>)
// GPU-NOT: gpu.launch
// GPU: memref.collapse_shape
// GPU: memref.expand_shape
// GPU: return %{{.*}}, %{{.*}} : memref<8x10xf32>, memref<2x4x3xf64>

// LLVM: llvm.func @printf(!llvm.ptr, ...) -> i32
// LLVM: llvm.func @main(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: i64
// LLVM-SAME: -> !llvm.struct<(struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>, struct<(ptr, ptr, i64, array<3 x i64>, array<3 x i64>)>)>
// LLVM: llvm.intr.maximum
// LLVM: llvm.intr.exp
// LLVM: llvm.intr.tanh
// LLVM: llvm.intr.sqrt
// LLVM: llvm.call @erff
// LLVM: llvm.intr.sqrt
// LLVM: llvm.call @printf
// LLVM: llvm.return

// IR: declare i32 @printf(ptr, ...)
// IR: define { { ptr, ptr, i64, [2 x i64], [2 x i64] }, { ptr, ptr, i64, [3 x i64], [3 x i64] } } @main(
// IR: call float @erff(float
// IR: call i32 (ptr, ...) @printf(ptr @frmt_spec, double
