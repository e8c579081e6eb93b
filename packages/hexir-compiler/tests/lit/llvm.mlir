// -emit=llvm: LLVM IR text for the host (target triple of this machine, printf declared and
// called per element); GPU kernels are embedded fatbins loaded by constructors and launched
// through the mgpu runtime calls with the launch geometry of the gpu.launch.
// REQUIRES: cuda-toolkit
// RUN: %hexir -emit=llvm %s | FileCheck %s --check-prefixes=COMMON,ALLCPU
// RUN: %hexir -emit=llvm -placement=hexir.linear=cuda %s | FileCheck %s --check-prefixes=COMMON,SPLIT
// RUN: %hexir -emit=llvm -placement=hexir.linear=cpu,hexir.relu=gpu %s | FileCheck %s --check-prefixes=COMMON,SWAP
// RUN: %hexir -emit=llvm -placement=hexir.linear=cuda,hexir.relu=cuda %s | FileCheck %s --check-prefixes=COMMON,ALLGPU

// COMMON: target triple = "{{.+}}"
// COMMON: @frmt_spec = internal constant [4 x i8] c"%f \00"
// COMMON: @nl = internal constant [2 x i8] c"\0A\00"
// SPLIT: @matmul_1_binary = internal constant [{{[0-9]+}} x i8] c"P\EDU\BA
// SWAP: @generic_0_binary = internal constant
// ALLGPU: @generic_2_binary = internal constant
// COMMON: declare i32 @printf(ptr, ...)
// COMMON: define void @main()

// ALLCPU-NOT: mgpu
// ALLCPU-NOT: @llvm.memcpy
// ALLCPU: call double @llvm.maximum.f64

// Fill then matmul on the device, 1 block of 32 threads each; the product copied back.
// SPLIT: call void @mgpuLaunchKernel(ptr %{{.*}}, i64 1, i64 1, i64 1, i64 32, i64 1, i64 1, i32 0,
// SPLIT: call void @mgpuLaunchKernel(ptr %{{.*}}, i64 1, i64 1, i64 1, i64 32, i64 1, i64 1, i32 0,
// SPLIT: call void @llvm.memcpy.p0.p0.i64(ptr %{{.*}}, ptr %{{.*}}, i64 32, i1 false)
// SPLIT: call double @llvm.maximum.f64

// SWAP-NOT: mgpuLaunchKernel
// SWAP: call void @llvm.memcpy.p0.p0.i64({{.*}}, i64 32, i1 false)
// SWAP: call void @mgpuLaunchKernel(
// SWAP: call void @llvm.memcpy.p0.p0.i64({{.*}}, i64 32, i1 false)

// ALLGPU-COUNT-3: call void @mgpuLaunchKernel(
// ALLGPU: call void @llvm.memcpy.p0.p0.i64

// COMMON: call i32 (ptr, ...) @printf(ptr @frmt_spec, double %{{.*}})
// COMMON: call i32 (ptr, ...) @printf(ptr @nl)
// COMMON: ret void
// SPLIT: define internal void @fill_0_load()
// SPLIT: call ptr @mgpuModuleLoad(ptr @fill_0_binary, i64 {{[0-9]+}})
func.func @main() {
  %a = "hexir.constant"() {value = dense<[[3.0, 1.0], [2.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %w = "hexir.constant"() {value = dense<[[1.0, 5.0], [5.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %m = "hexir.linear"(%a, %w) : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
  %r = "hexir.relu"(%m) : (tensor<2x2xf64>) -> tensor<2x2xf64>
  "hexir.print"(%r) : (tensor<2x2xf64>) -> ()
  return
}
