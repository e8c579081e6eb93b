// -emit=llvm: the LLVM IR of the host kernels (x86-64, one module) and of each device kernel
// (nvptx64) -- what llvmlite compiles to the host objects and what becomes PTX.
// REQUIRES: cuda-toolkit
// RUN: %hexir -emit=llvm -placement=hexir.linear=cuda %S/Inputs/linear-relu.mlir | FileCheck %s
// RUN: %hexir -emit=llvm -placement=hexir.linear=cuda -o %t.ll %S/Inputs/linear-relu.mlir
// RUN: FileCheck %s < %t.ll

// CHECK:      ; hexir: cpu kernels, x86_64-unknown-linux-gnu
// CHECK:      target triple = "x86_64-unknown-linux-gnu"
// CHECK:      define void @relu_1(ptr %0, ptr %1, i64 %2, i64 %3)
// CHECK:      call double @llvm.maximum.f64
// CHECK:      ; hexir: cuda kernel @linear_0, nvptx64-nvidia-cuda
// CHECK:      target triple = "nvptx64-nvidia-cuda"
// CHECK:      define ptx_kernel void @linear_0(ptr align 16 %0, ptr align 16 %1, ptr align 16 %2)
// CHECK:      @llvm.nvvm.read.ptx.sreg.tid.x()
