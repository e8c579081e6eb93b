// -emit=mlir-llvm: the host in the LLVM dialect (print as printf loops, transfers as
// memcpy), each gpu.launch outlined, lowered to NVVM and compiled into a gpu.binary that the
// host launches with gpu.launch_func. No linalg, scf or hexir op is left anywhere.
// REQUIRES: cuda-toolkit
// RUN: %hexir -emit=mlir-llvm %s > %t.allcpu
// RUN: FileCheck %s --check-prefixes=COMMON,ALLCPU < %t.allcpu
// RUN: %hexir -emit=mlir-llvm -placement=hexir.linear=cuda -target=cuda:sm_90 %s > %t.split
// RUN: FileCheck %s --check-prefixes=COMMON,SPLIT < %t.split
// RUN: %hexir -emit=mlir-llvm -placement=hexir.linear=cpu,hexir.relu=gpu %s > %t.swap
// RUN: FileCheck %s --check-prefixes=COMMON,SWAP < %t.swap
// RUN: %hexir -emit=mlir-llvm -placement=hexir.linear=cuda,hexir.relu=cuda %s > %t.allgpu
// RUN: FileCheck %s --check-prefixes=COMMON,ALLGPU < %t.allgpu
// RUN: not grep -E 'linalg\.|scf\.|"hexir\.' %t.allcpu %t.split %t.swap %t.allgpu

// COMMON: llvm.func @printf(!llvm.ptr, ...) -> i32
// COMMON: llvm.mlir.global internal constant @frmt_spec("%f \00")
// COMMON: llvm.func @main()

// All on the cpu: nothing for the GPU at all (and no CUDA toolkit needed).
// ALLCPU-NOT: gpu.
// ALLCPU: llvm.intr.maximum
// ALLCPU: llvm.call @printf
// ALLCPU-NOT: gpu.

// The fill and the matmul run as two kernels of 32 threads, each named after its linalg op;
// the product is copied back.
// SPLIT-DAG: %[[ONE:.*]] = llvm.mlir.constant(1 : index) : i64
// SPLIT-DAG: %[[WARP:.*]] = llvm.mlir.constant(32 : index) : i64
// SPLIT: gpu.launch_func  @fill_0::@fill_0 blocks in (%[[ONE]], %[[ONE]], %[[ONE]]) threads in (%[[WARP]], %[[ONE]], %[[ONE]])
// SPLIT-SAME: {device = "cuda"}
// SPLIT: gpu.launch_func  @matmul_1::@matmul_1 blocks in
// SPLIT-SAME: {device = "cuda"}
// SPLIT: "llvm.intr.memcpy"
// SPLIT: llvm.intr.maximum
// SPLIT: gpu.binary @fill_0  {device = "cuda"} [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", link = ["{{.*}}libdevice.10.bc"]>
// SPLIT: gpu.binary @matmul_1  {device = "cuda"} [#gpu.object<#nvvm.target<O = 3, chip = "sm_90"

// SWAP: "llvm.intr.memcpy"
// SWAP: gpu.launch_func  @generic_0::@generic_0
// SWAP: "llvm.intr.memcpy"
// SWAP-NOT: llvm.intr.maximum
// SWAP: gpu.binary @generic_0

// ALLGPU: gpu.launch_func  @fill_0::@fill_0
// ALLGPU: gpu.launch_func  @matmul_1::@matmul_1
// ALLGPU: gpu.launch_func  @generic_2::@generic_2
// ALLGPU: "llvm.intr.memcpy"
// ALLGPU: gpu.binary @fill_0
// ALLGPU: gpu.binary @matmul_1
// ALLGPU: gpu.binary @generic_2
func.func @main() {
  %a = "hexir.constant"() {value = dense<[[3.0, 1.0], [2.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %w = "hexir.constant"() {value = dense<[[1.0, 5.0], [5.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %m = "hexir.linear"(%a, %w) : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
  %r = "hexir.relu"(%m) : (tensor<2x2xf64>) -> tensor<2x2xf64>
  "hexir.print"(%r) : (tensor<2x2xf64>) -> ()
  return
}
