// hexir-lower-to-tir: each compute op becomes a hextir kernel plus a call_tir that keeps the
// op's device. The schedule is written in the loops: cuda kernels bind blockIdx/threadIdx
// (with a guard where the extents do not divide) and stage data in shared memory where the
// schedule says so, cpu kernels get parallel loops, and short reduction axes are serial on
// both devices.
// RUN: %hexir-opt --pass=hexir-lower-to-tir %s | FileCheck %s

func.func @main(%x: tensor<2x40x3xf32>, %w: tensor<3x50xf32>, %b: tensor<50xf32>, %g: tensor<50xf32>) -> tensor<2x50x40xf32> {
  %0 = "hexir.linear"(%x, %w) {device = "cuda"} : (tensor<2x40x3xf32>, tensor<3x50xf32>) -> tensor<2x40x50xf32>
  %1 = "hexir.add"(%0, %b) {device = "cuda"} : (tensor<2x40x50xf32>, tensor<50xf32>) -> tensor<2x40x50xf32>
  %2 = "hexir.relu"(%1) {device = "cpu"} : (tensor<2x40x50xf32>) -> tensor<2x40x50xf32>
  %3 = "hexir.softmax"(%2) {device = "cuda", axis = -1 : i64} : (tensor<2x40x50xf32>) -> tensor<2x40x50xf32>
  %4 = "hexir.reduce_mean"(%3) {device = "cpu", axes = array<i64: -1, 0>, keepdims = true} : (tensor<2x40x50xf32>) -> tensor<1x40x1xf32>
  %5 = "hexir.layer_norm"(%3, %g, %b) {device = "cuda", epsilon = 1.0e-05 : f64} : (tensor<2x40x50xf32>, tensor<50xf32>, tensor<50xf32>) -> tensor<2x40x50xf32>
  %6 = "hexir.gelu"(%5) {device = "cpu", approximate = "tanh"} : (tensor<2x40x50xf32>) -> tensor<2x40x50xf32>
  %7 = "hexir.transpose"(%6) {device = "cuda", permutation = array<i64: 0, 2, 1>} : (tensor<2x40x50xf32>) -> tensor<2x50x40xf32>
  "hexir.print"(%4) : (tensor<1x40x1xf32>) -> ()
  return %7 : tensor<2x50x40xf32>
}

// One counter for the module; linear keeps its own name, the kernel kind says matmul.
// CHECK-LABEL: func.func @main
// CHECK: %[[L:.*]] = "hexir.call_tir"(%arg0, %arg1) {callee = @linear_0, device = "cuda", operandSegmentSizes = {{.*}}}
// CHECK: %[[A:.*]] = "hexir.call_tir"(%[[L]], %arg2) {callee = @add_1, device = "cuda", operandSegmentSizes = {{.*}}}
// CHECK: %[[R:.*]] = "hexir.call_tir"(%[[A]]) {callee = @relu_2, device = "cpu", operandSegmentSizes = {{.*}}}
// CHECK: %[[S:.*]] = "hexir.call_tir"(%[[R]]) {callee = @softmax_3, device = "cuda", operandSegmentSizes = {{.*}}}
// CHECK: %[[M:.*]] = "hexir.call_tir"(%[[S]]) {callee = @reduce_mean_4, device = "cpu", operandSegmentSizes = {{.*}}}
// CHECK: %[[N:.*]] = "hexir.call_tir"(%[[S]], %arg3, %arg2) {callee = @layer_norm_5, device = "cuda", operandSegmentSizes = {{.*}}}
// CHECK: %[[G:.*]] = "hexir.call_tir"(%[[N]]) {callee = @gelu_6, device = "cpu", operandSegmentSizes = {{.*}}}
// CHECK: %[[T:.*]] = "hexir.call_tir"(%[[G]]) {callee = @transpose_7, device = "cuda", operandSegmentSizes = {{.*}}}
// CHECK: "hexir.print"(%[[M]])
// CHECK: return %[[T]]

// linear on cuda: a tiled GEMM. The weight has no batch, so the 2 x 40 rows are one 80-row
// matrix: blocks of 16 x 16 threads, each thread 4 rows x 2 columns of the output (8
// accumulators carried), 2 x 2 tiles of 64 x 32 over 80 x 50. Each k step (one: k = 3)
// stages both operands' slices in shared memory (zeros past the edges), then multiplies out
// of it with fma; barriers before and after. Stores guarded where the tiles overhang.
// CHECK: ^bb0(%arg0: memref<2x40x3xf32>, %arg1: memref<3x50xf32>, %arg2: memref<2x40x50xf32>):
// CHECK: "hextir.for"(%c0, %c2, %c1) ({
// CHECK: "hextir.for"(%c0, %c2, %c1) ({
// CHECK: %[[A:.*]] = "hextir.alloc_buffer"() : () -> memref<16x64xf32, #gpu.address_space<workgroup>>
// CHECK: %[[B:.*]] = "hextir.alloc_buffer"() : () -> memref<16x32xf32, #gpu.address_space<workgroup>>
// CHECK: "hextir.for"(%c0, %c16, %c1) ({
// CHECK: "hextir.for"(%c0, %c16, %c1) ({
// CHECK: "hextir.for"(%c0, %c1, %c1, %cst, %cst, %cst, %cst, %cst, %cst, %cst, %cst) ({
// CHECK: arith.cmpi ult, %{{.*}}, %c80 : index
// CHECK: arith.select
// CHECK: "hextir.buffer_store"(%{{.*}}, %[[A]],
// CHECK: "hextir.buffer_store"(%{{.*}}, %[[B]],
// CHECK: "hextir.barrier"() : () -> ()
// CHECK: "hextir.buffer_load"(%[[A]],
// CHECK: math.fma
// CHECK: }) {kind = "serial"}
// CHECK-NEXT: "hextir.barrier"() : () -> ()
// CHECK: arith.cmpi ult, %{{.*}}, %c80 : index
// CHECK: arith.cmpi ult, %{{.*}}, %c50 : index
// CHECK: "hextir.if"
// CHECK: "hextir.buffer_store"(%{{.*}}, %arg2
// CHECK: }) {bind = "threadIdx.x", kind = "thread_binding"}
// CHECK: }) {bind = "threadIdx.y", kind = "thread_binding"}
// CHECK: }) {bind = "blockIdx.x", kind = "thread_binding"}
// CHECK: }) {bind = "blockIdx.y", kind = "thread_binding"}
// CHECK: {device = "cuda", {{.*}}hexir.kernel = "matmul", hexir.params = array<f64>, sym_name = "linear_0"}

// add on cuda: 4000 elements as 16 blocks of 256 threads, guarded (4096 threads), the bias
// broadcast along the last axis.
// CHECK: ^bb0(%arg0: memref<2x40x50xf32>, %arg1: memref<50xf32>, %arg2: memref<2x40x50xf32>):
// CHECK: "hextir.for"(%c0, %c16, %c1) ({
// CHECK: "hextir.for"(%c0, %c256, %c1) ({
// CHECK: arith.cmpi ult, %{{.*}}, %c4000 : index
// CHECK: "hextir.if"
// CHECK: }) {bind = "threadIdx.x", kind = "thread_binding"}
// CHECK: }) {bind = "blockIdx.x", kind = "thread_binding"}
// CHECK: hexir.kernel = "add"{{.*}}sym_name = "add_1"

// relu on cpu: one parallel loop per axis, no thread binding.
// CHECK-NOT: thread_binding
// CHECK: }) {kind = "parallel"}
// CHECK: }) {kind = "parallel"}
// CHECK: }) {kind = "parallel"}
// CHECK: {device = "cpu", {{.*}}hexir.kernel = "relu", hexir.params = array<f64>, sym_name = "relu_2"}

// softmax on cuda: one thread per row (80 rows: one block of 96 threads, guarded); max,
// sum of exp(x - max) and the normalized write are serial loops in the thread.
// CHECK: "hextir.for"(%c0, %c1, %c1) ({
// CHECK: "hextir.for"(%c0, %c96, %c1) ({
// CHECK: arith.cmpi ult, %{{.*}}, %c80 : index
// CHECK: %[[MAX:.*]] = "hextir.for"(%c0, %c50, %c1, %cst) ({
// CHECK: arith.maximumf
// CHECK: }) {kind = "serial"}
// CHECK: arith.subf %{{.*}}, %[[MAX]]
// CHECK: math.exp
// CHECK: }) {kind = "serial"}
// CHECK: arith.divf
// CHECK: }) {kind = "serial"}
// CHECK: }) {bind = "threadIdx.x", kind = "thread_binding"}
// CHECK: }) {bind = "blockIdx.x", kind = "thread_binding"}
// CHECK: hexir.kernel = "softmax", hexir.params = array<f64: 2.000000e+00>, sym_name = "softmax_3"

// reduce_mean on cpu: the kept axis parallel, the reduced axes serial; params are
// keepdims then the normalized axes, sorted.
// CHECK: "hextir.for"(%c0, %c40, %c1) ({
// CHECK: "hextir.for"(%c0, %c2, %c1, %cst) ({
// CHECK: "hextir.for"(%c0, %c50, %c1, %{{.*}}) ({
// CHECK: }) {kind = "serial"}
// CHECK: }) {kind = "serial"}
// CHECK: }) {kind = "parallel"}
// CHECK: hexir.kernel = "reduce_mean", hexir.params = array<f64: 1.000000e+00, 0.000000e+00, 2.000000e+00>, sym_name = "reduce_mean_4"

// CHECK: hexir.kernel = "layer_norm", hexir.params = array<f64: 1.000000e-05>, sym_name = "layer_norm_5"
// CHECK: math.tanh
// CHECK: hexir.kernel = "gelu", hexir.params = array<f64: 1.000000e+00>, sym_name = "gelu_6"
// transpose on cuda, moving the innermost axis: through a 32 x 33 shared tile, written after
// one barrier.
// CHECK: "hextir.alloc_buffer"() : () -> memref<32x33xf32, #gpu.address_space<workgroup>>
// CHECK: "hextir.barrier"() : () -> ()
// CHECK: hexir.kernel = "transpose", hexir.params = array<f64: 0.000000e+00, 2.000000e+00, 1.000000e+00>, sym_name = "transpose_7"
