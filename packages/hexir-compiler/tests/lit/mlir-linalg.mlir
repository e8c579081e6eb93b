// -emit=mlir-linalg (hextir-to-loops): every kernel a func.func of loops on its buffers, the
// graph calling it by name. A cpu kernel takes its range [lo, hi) of the outermost parallel
// loop (its grid, recorded as hexir.grid) and clamps it; a cuda kernel's thread_binding
// loops are scf.parallel mapped to the GPU processors, its shared buffers memref.allocs in
// the workgroup address space, its barriers gpu.barrier.
// RUN: %hexir -emit=mlir-linalg -placement=hexir.linear=cuda %S/Inputs/linear-relu.mlir | FileCheck %s

// CHECK:      "hexir.call_tir"({{.*}}) {callee = @linear_0, device = "cuda", operandSegmentSizes = {{.*}}}
// CHECK:      "hexir.call_tir"({{.*}}) {callee = @relu_1, device = "cpu", operandSegmentSizes = {{.*}}}
// CHECK:      func.func @linear_0(%arg0: memref<2x2xf64>, %arg1: memref<2x2xf64>, %arg2: memref<2x2xf64>) attributes {device = "cuda", hexir.kernel = "matmul"
// CHECK:      scf.parallel
// CHECK:      memref.alloc() : memref<16x2xf64, #gpu.address_space<workgroup>>
// CHECK:      scf.for {{.*}} iter_args
// CHECK:      gpu.barrier
// CHECK:      math.fma
// CHECK:      gpu.barrier
// CHECK:      } {mapping = [#gpu.loop_dim_map<processor = thread_x,
// CHECK:      } {mapping = [#gpu.loop_dim_map<processor = thread_y,
// CHECK:      } {mapping = [#gpu.loop_dim_map<processor = block_x,
// CHECK:      } {mapping = [#gpu.loop_dim_map<processor = block_y,
// CHECK:      func.func @relu_1(%arg0: memref<2x2xf64>, %arg1: memref<2x2xf64>, %[[LO:.*]]: index, %[[HI:.*]]: index) attributes {device = "cpu", hexir.grid = array<i64: 2, 1, 1>, hexir.kernel = "relu"
// CHECK:      %[[START:.*]] = arith.addi %c0, %[[LO]] : index
// CHECK-NEXT: %[[END:.*]] = arith.minui %[[HI]], %c2 : index
// CHECK-NEXT: scf.for %[[I:.*]] = %[[START]] to %[[END]] step %c1 {
// CHECK:      memref.load %arg0[%[[I]],
// CHECK:      arith.maximumf
// CHECK:      } {hexir.loop = "parallel"{{.*}}}
// CHECK-NOT:  hextir.
