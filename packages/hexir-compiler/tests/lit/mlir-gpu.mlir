// -emit=mlir-gpu (hexir-kernels-to-gpu): a cuda kernel becomes gpu.module @k { gpu.func @k
// kernel } with its launch geometry, its mapped loops block and thread ids, its shared buffers
// workgroup attributions, every buffer 16-byte aligned; a cpu kernel stays a func.func of loops.
// RUN: %hexir -emit=mlir-gpu -placement=hexir.linear=cuda %S/Inputs/linear-relu.mlir | FileCheck %s
// RUN: %hexir -emit=mlir-gpu %S/Inputs/linear-relu.mlir | FileCheck %s --check-prefix=ALLCPU

// CHECK: module attributes {gpu.container_module
// CHECK: gpu.module @linear_0 attributes {device = "cuda", hexir.block = array<i64: 16, 2, 1>, hexir.grid = array<i64: 1, 1, 1>, hexir.kernel = "matmul"
// CHECK-NEXT: gpu.func @linear_0(%arg0: memref<2x2xf64> {llvm.align = 16 : i64}, %arg1: memref<2x2xf64> {llvm.align = 16 : i64}, %arg2: memref<2x2xf64> {llvm.align = 16 : i64}) workgroup(%arg3 : memref<16x2xf64, #gpu.address_space<workgroup>>, %arg4 : memref<16x16xf64, #gpu.address_space<workgroup>>) kernel attributes {known_block_size = array<i32: 16, 2, 1>, known_grid_size = array<i32: 1, 1, 1>}
// CHECK-DAG: gpu.block_id y
// CHECK-DAG: gpu.thread_id x
// CHECK: gpu.barrier
// CHECK: gpu.return
// CHECK: func.func @relu_1({{.*}}: index, {{.*}}: index) attributes {device = "cpu"
// CHECK-NOT: scf.parallel

// ALLCPU-NOT: gpu.
