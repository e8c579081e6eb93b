// -emit=mlir-hetero: placement as device attributes on the linalg ops, and the transfers
// between devices, for the 2x2 program under the four placements of linear and relu.
// RUN: %hexir -emit=mlir-hetero %s | FileCheck %s --check-prefixes=COMMON,ALLCPU
// RUN: %hexir -emit=mlir-hetero -placement=hexir.linear=cuda %s | FileCheck %s --check-prefixes=COMMON,SPLIT
// RUN: %hexir -emit=mlir-hetero -placement=hexir.linear=cpu,hexir.relu=gpu %s | FileCheck %s --check-prefixes=COMMON,SWAP
// RUN: %hexir -emit=mlir-hetero -placement=hexir.linear=cuda,hexir.relu=cuda %s | FileCheck %s --check-prefixes=COMMON,ALLGPU

// COMMON: module attributes {hexir.targets = ["cpu", "cuda"]}
// COMMON-LABEL: func.func @main()
// COMMON-NOT: hexir.linear
// COMMON-NOT: hexir.relu

// ALLCPU: %[[A:.*]] = arith.constant {device = "cpu"} dense<{{\[}}[3.000000e+00
// ALLCPU: linalg.fill {device = "cpu"}
// ALLCPU: %[[M:.*]] = linalg.matmul {device = "cpu"} ins(%[[A]],
// ALLCPU-NOT: hexir.transfer
// ALLCPU: %[[R:.*]] = linalg.generic {{.*}} ins(%[[M]] : tensor<2x2xf64>) {{.*}} attrs = {device = "cpu"}
// ALLCPU: arith.maximumf
// ALLCPU-NOT: hexir.transfer
// ALLCPU: "hexir.print"(%[[R]]) {device = "cpu"}

// Weights that only feed the GPU live there; the product comes back for the cpu relu.
// SPLIT: arith.constant {device = "cuda"} dense<{{\[}}[3.000000e+00
// SPLIT: arith.constant {device = "cuda"} dense<{{\[}}[1.000000e+00
// SPLIT: linalg.fill {device = "cuda"}
// SPLIT: %[[M:.*]] = linalg.matmul {device = "cuda"}
// SPLIT-NEXT: %[[T:.*]] = "hexir.transfer"(%[[M]]) {dst = "cpu", src = "cuda"}
// SPLIT: %[[R:.*]] = linalg.generic {{.*}} ins(%[[T]] : tensor<2x2xf64>) {{.*}} attrs = {device = "cpu"}
// SPLIT: "hexir.print"(%[[R]]) {device = "cpu"}

// SWAP: linalg.fill {device = "cpu"}
// SWAP: %[[M:.*]] = linalg.matmul {device = "cpu"}
// SWAP-NEXT: %[[T:.*]] = "hexir.transfer"(%[[M]]) {dst = "cuda", src = "cpu"}
// SWAP: tensor.empty() {device = "cuda"}
// SWAP: %[[R:.*]] = linalg.generic {{.*}} ins(%[[T]] : tensor<2x2xf64>) {{.*}} attrs = {device = "cuda"}
// SWAP: %[[B:.*]] = "hexir.transfer"(%[[R]]) {dst = "cpu", src = "cuda"}
// SWAP-NEXT: "hexir.print"(%[[B]]) {device = "cpu"}

// ALLGPU: linalg.fill {device = "cuda"}
// ALLGPU: %[[M:.*]] = linalg.matmul {device = "cuda"}
// ALLGPU-NOT: hexir.transfer
// ALLGPU: %[[R:.*]] = linalg.generic {{.*}} ins(%[[M]] : tensor<2x2xf64>) {{.*}} attrs = {device = "cuda"}
// ALLGPU: %[[B:.*]] = "hexir.transfer"(%[[R]]) {dst = "cpu", src = "cuda"}
// ALLGPU-NEXT: "hexir.print"(%[[B]]) {device = "cpu"}
func.func @main() {
  %a = "hexir.constant"() {value = dense<[[3.0, 1.0], [2.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %w = "hexir.constant"() {value = dense<[[1.0, 5.0], [5.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %m = "hexir.linear"(%a, %w) : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
  %r = "hexir.relu"(%m) : (tensor<2x2xf64>) -> tensor<2x2xf64>
  "hexir.print"(%r) : (tensor<2x2xf64>) -> ()
  return
}
