// -emit=mlir-llvm (hexir-kernels-to-llvm): cpu kernels are llvm.funcs taking bare pointers and
// their range; cuda kernels are NVVM inside their gpu.module, with the NVVM target attached
// and their shared buffers as globals in address space 3.
// The graph is untouched: it is what the serializer turns into commands.
// REQUIRES: cuda-toolkit
// RUN: %hexir -emit=mlir-llvm -placement=hexir.linear=cuda %S/Inputs/linear-relu.mlir > %t
// RUN: FileCheck %s < %t
// RUN: not grep -E 'scf\.|memref\.|hextir\.|gpu\.func' %t

// CHECK: "hexir.call_tir"({{.*}}) {callee = @linear_0, device = "cuda", operandSegmentSizes = {{.*}}}
// CHECK: gpu.module @linear_0 [#nvvm.target<O = 3, {{.*}}link = ["{{.*}}libdevice.10.bc"]>] attributes {device = "cuda", hexir.block = array<i64: 16, 2, 1>, hexir.grid = array<i64: 1, 1, 1>
// CHECK-NEXT: llvm.mlir.global internal @__wg_linear_0_0() {addr_space = 3 : i32} : !llvm.array<32 x f64>
// CHECK-NEXT: llvm.mlir.global internal @__wg_linear_0_1() {addr_space = 3 : i32} : !llvm.array<256 x f64>
// CHECK:      llvm.func @linear_0(%arg0: !llvm.ptr {llvm.align = 16 : i64}, %arg1: !llvm.ptr {llvm.align = 16 : i64}, %arg2: !llvm.ptr {llvm.align = 16 : i64}) attributes {gpu.kernel,
// CHECK: nvvm.read.ptx.sreg.ctaid.y
// CHECK: llvm.func @relu_1(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: i64, %arg3: i64) attributes {device = "cpu", hexir.grid = array<i64: 2, 1, 1>, hexir.kernel = "relu"
// CHECK: llvm.intr.maximum
