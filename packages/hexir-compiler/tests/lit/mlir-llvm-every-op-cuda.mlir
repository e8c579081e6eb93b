// Every graph op (Inputs/every-op.mlir) placed on cuda, so that each of its 35 linalg ops becomes
// one gpu.launch (each with threads, a bounds guard, its body cloned), then 35 kernels in
// 35 device binaries. The module's inputs arrive on the cpu and move once.
// REQUIRES: cuda-toolkit
// DEFINE: %{ALL} = -placement=hexir.linear=cuda,hexir.matmul=cuda,hexir.add=cuda,hexir.sub=cuda,hexir.mul=cuda,hexir.div=cuda,hexir.relu=cuda,hexir.sigmoid=cuda,hexir.tanh=cuda,hexir.exp=cuda,hexir.sqrt=cuda,hexir.neg=cuda,hexir.gelu=cuda,hexir.softmax=cuda,hexir.layer_norm=cuda,hexir.transpose=cuda,hexir.reshape=cuda,hexir.reduce_sum=cuda,hexir.reduce_mean=cuda,hexir.reduce_max=cuda
// RUN: %hexir -emit=mlir-gpu %{ALL} %S/Inputs/every-op.mlir > %t.gpu
// RUN: FileCheck %s --check-prefix=GPU < %t.gpu
// RUN: FileCheck %s --check-prefix=BODY < %t.gpu
// RUN: not grep -E 'linalg\.' %t.gpu
// RUN: %hexir -emit=mlir-llvm %{ALL} %S/Inputs/every-op.mlir > %t.llvm
// RUN: FileCheck %s --check-prefix=LLVM < %t.llvm
// RUN: not grep -E 'linalg\.|scf\.|"hexir\.' %t.llvm

// The inputs are copied to the device, the results back.
// GPU: memref.copy %arg0, %{{.*}} {dst = "cuda", src = "cpu"} : memref<8x784xf32>
// GPU-COUNT-35: } {device = "cuda"}
// GPU: return

// Kernel bodies as lowered: the linear's K loop, the activations, gelu's erf and tanh,
// softmax and layer_norm's row reductions.
// BODY-DAG: math.erf %{{.*}} : f32
// BODY-DAG: math.sqrt %{{.*}} : f32
// BODY-DAG: arith.negf %{{.*}} : f32
// BODY-DAG: arith.maximumf %{{.*}} : f64
// BODY-DAG: scf.for %{{.*}} iter_args(%{{.*}}) -> (f32)
// BODY-DAG: scf.for %{{.*}} iter_args(%{{.*}}) -> (f64)

// LLVM: llvm.func @main(
// LLVM-COUNT-35: gpu.launch_func
// LLVM: llvm.return
// LLVM-COUNT-35: gpu.binary @{{(fill|matmul|add|sub|generic)_[0-9]+}}  {device = "cuda"} [#gpu.object<#nvvm.target<
