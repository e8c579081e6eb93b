// -emit=mlir-gpu: buffers, cuda-placed ops as gpu.launch (a warp of threads guarded to the
// 4 outputs), cpu ops as linalg on memrefs, transfers as memref.copy between buffers; each
// allocation says which device's memory it is (the device of the op that fills it).
// RUN: %hexir -emit=mlir-gpu %s | FileCheck %s --check-prefixes=COMMON,ALLCPU
// RUN: %hexir -emit=mlir-gpu -placement=hexir.linear=cuda %s | FileCheck %s --check-prefixes=COMMON,SPLIT
// RUN: %hexir -emit=mlir-gpu -placement=hexir.linear=cpu,hexir.relu=gpu %s | FileCheck %s --check-prefixes=COMMON,SWAP
// RUN: %hexir -emit=mlir-gpu -placement=hexir.linear=cuda,hexir.relu=cuda %s | FileCheck %s --check-prefixes=COMMON,ALLGPU

// COMMON: module attributes {hexir.targets = ["cpu", "cuda"]}
// COMMON-LABEL: func.func @main()
// COMMON-NOT: tensor<

// ALLCPU-NOT: gpu.launch
// ALLCPU: linalg.fill {device = "cpu"} ins(%{{.*}} : f64) outs(%[[C:.*]] : memref<2x2xf64>)
// ALLCPU: linalg.matmul {device = "cpu"} ins({{.*}} : memref<2x2xf64>, memref<2x2xf64>) outs(%[[C]] : memref<2x2xf64>)
// ALLCPU: linalg.generic {{.*}} ins(%[[C]] : memref<2x2xf64>) outs(%[[R:.*]] : memref<2x2xf64>) attrs = {device = "cpu"}
// ALLCPU: "hexir.print"(%[[R]]) {device = "cpu"} : (memref<2x2xf64>) -> ()

// SPLIT: %[[C:.*]] = memref.alloc()
// SPLIT: gpu.launch blocks({{.*}}) in ({{.*}}) threads(%[[TX:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %[[W:c32]],
// SPLIT: arith.cmpi ult, %[[TX]], %c4 : index
// SPLIT: memref.store %{{.*}}, %[[C]]
// SPLIT: } {device = "cuda"}
// SPLIT: gpu.launch blocks
// SPLIT: scf.for
// SPLIT: arith.mulf
// SPLIT: arith.addf
// SPLIT: memref.store %{{.*}}, %[[C]]
// SPLIT: gpu.terminator
// SPLIT-NEXT: } {device = "cuda"}
// SPLIT: %[[H:.*]] = memref.alloc()
// SPLIT-NEXT: memref.copy %[[C]], %[[H]] {dst = "cpu", src = "cuda"}
// SPLIT: linalg.generic {{.*}} ins(%[[H]] : memref<2x2xf64>) outs(%[[R:.*]] : memref<2x2xf64>) attrs = {device = "cpu"}
// SPLIT: "hexir.print"(%[[R]]) {device = "cpu"}

// SWAP: linalg.matmul {device = "cpu"} ins({{.*}}) outs(%[[C:.*]] : memref<2x2xf64>)
// SWAP: %[[D:.*]] = memref.alloc() {alignment = 64 : i64, device = "cuda"}
// SWAP-NEXT: memref.copy %[[C]], %[[D]] {dst = "cuda", src = "cpu"}
// SWAP: %[[R:.*]] = memref.alloc() {alignment = 64 : i64, device = "cuda"}
// SWAP-NEXT: gpu.launch
// SWAP: memref.load %[[D]]
// SWAP: arith.maximumf
// SWAP: memref.store %{{.*}}, %[[R]]
// SWAP: } {device = "cuda"}
// SWAP: %[[H:.*]] = memref.alloc() {alignment = 64 : i64, device = "cpu"}
// SWAP-NEXT: memref.copy %[[R]], %[[H]] {dst = "cpu", src = "cuda"}
// SWAP-NEXT: "hexir.print"(%[[H]]) {device = "cpu"}

// ALLGPU-NOT: linalg.
// ALLGPU: gpu.launch
// ALLGPU: } {device = "cuda"}
// ALLGPU: gpu.launch
// ALLGPU: arith.mulf
// ALLGPU: } {device = "cuda"}
// ALLGPU: gpu.launch
// ALLGPU: arith.maximumf
// ALLGPU: memref.store %{{.*}}, %[[R:.*]][
// ALLGPU: } {device = "cuda"}
// ALLGPU: memref.copy %[[R]], %[[H:.*]] {dst = "cpu", src = "cuda"}
// ALLGPU-NEXT: "hexir.print"(%[[H]]) {device = "cpu"}
func.func @main() {
  %a = "hexir.constant"() {value = dense<[[3.0, 1.0], [2.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %w = "hexir.constant"() {value = dense<[[1.0, 5.0], [5.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %m = "hexir.linear"(%a, %w) : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
  %r = "hexir.relu"(%m) : (tensor<2x2xf64>) -> tensor<2x2xf64>
  "hexir.print"(%r) : (tensor<2x2xf64>) -> ()
  return
}
