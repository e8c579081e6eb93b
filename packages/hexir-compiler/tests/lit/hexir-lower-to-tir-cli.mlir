// The kernel stage of the `hexir` CLI: placement chooses the schedule. The linear placed on
// cuda gets loops bound to blockIdx/threadIdx, its operands staged in shared memory; the
// relu placed on cpu gets parallel loops;
// the linear placed on cpu, small, is loops summing a register tile of its rows over k (a big
// one would call the runtime's matmul routine, the host BLAS).
// RUN: %hexir -emit=mlir-tir -fusion=off -placement=hexir.linear=cuda,hexir.relu=cpu %s | FileCheck %s
// RUN: %hexir -emit=mlir-tir -fusion=off -placement=hexir.linear=cpu,hexir.relu=cuda %s | FileCheck %s --check-prefix=SWAP

func.func @main(%x: tensor<8x3xf64>) -> tensor<8x5xf64> {
  %w = "hexir.constant"() {value = dense<1.0> : tensor<3x5xf64>} : () -> tensor<3x5xf64>
  %0 = "hexir.linear"(%x, %w) : (tensor<8x3xf64>, tensor<3x5xf64>) -> tensor<8x5xf64>
  %1 = "hexir.relu"(%0) : (tensor<8x5xf64>) -> tensor<8x5xf64>
  return %1 : tensor<8x5xf64>
}

// CHECK: "hexir.call_tir"({{.*}}) {callee = @linear_0, device = "cuda", operandSegmentSizes = {{.*}}}
// CHECK: "hexir.call_tir"({{.*}}) {callee = @relu_1, device = "cpu", operandSegmentSizes = {{.*}}}
// CHECK: "hextir.alloc_buffer"
// CHECK: "hextir.barrier"
// CHECK: math.fma
// CHECK: }) {kind = "serial"}
// CHECK: "hextir.if"
// CHECK: }) {bind = "threadIdx.x", kind = "thread_binding"}
// CHECK: }) {bind = "threadIdx.y", kind = "thread_binding"}
// CHECK: }) {bind = "blockIdx.x", kind = "thread_binding"}
// CHECK: }) {bind = "blockIdx.y", kind = "thread_binding"}
// CHECK: device = "cuda", {{.*}}hexir.kernel = "matmul"{{.*}}sym_name = "linear_0"
// CHECK-NOT: thread_binding
// CHECK: }) {kind = "parallel"}
// CHECK: }) {kind = "parallel"}
// CHECK: device = "cpu", {{.*}}hexir.kernel = "relu"{{.*}}sym_name = "relu_1"

// SWAP: "hexir.call_tir"({{.*}}) {callee = @linear_0, device = "cpu", operandSegmentSizes = {{.*}}}
// SWAP: "hexir.call_tir"({{.*}}) {callee = @relu_1, device = "cuda", operandSegmentSizes = {{.*}}}
// SWAP-NOT: thread_binding
// SWAP-NOT: "hextir.library_call"
// SWAP: "hextir.for"
// SWAP: arith.mulf {{.*}} fastmath<contract> : f64
// SWAP: }) {kind = "serial"}
// SWAP: }) {kind = "parallel"}
// SWAP: device = "cpu", {{.*}}hexir.kernel = "matmul"{{.*}}sym_name = "linear_0"
// SWAP: "hextir.for"(%c0, %c1, %c1) ({
// SWAP: "hextir.for"(%c0, %c64, %c1) ({
// SWAP: arith.cmpi ult, %{{.*}}, %c40 : index
// SWAP: "hextir.if"
// SWAP: }) {bind = "threadIdx.x", kind = "thread_binding"}
// SWAP: }) {bind = "blockIdx.x", kind = "thread_binding"}
// SWAP: device = "cuda", {{.*}}hexir.kernel = "relu"{{.*}}sym_name = "relu_1"
