// hexir-insert-transfers (after hexir-partition) copies a value once per device that
// consumes it elsewhere; constants used only on cuda move there instead; arguments start on
// the cpu, and printed and returned values end there. A second run changes nothing.

// RUN: %hexir-opt --pass=hexir-partition,hexir-insert-transfers --placement=hexir.linear=cuda,hexir.add=cuda %s | FileCheck %s
// RUN: %hexir-opt --pass=hexir-partition,hexir-insert-transfers,hexir-insert-transfers --placement=hexir.linear=cuda,hexir.add=cuda %s | FileCheck %s
// RUN: %hexir-opt --pass=hexir-partition,hexir-insert-transfers %s | FileCheck %s --check-prefix=CPU

// CHECK-LABEL: func.func @main
// The argument feeds two cuda ops: one upload, first in the body.
// CHECK-NEXT: %[[X:.*]] = "hexir.transfer"(%arg0) {dst = "cuda", src = "cpu"}
// The weight is used only on cuda: it lives there, no transfer.
// CHECK-NEXT: %[[W:.*]] = "hexir.constant"() {device = "cuda"
// The bias is used on both devices: it stays on the cpu and is uploaded once.
// CHECK-NEXT: %[[B:.*]] = "hexir.constant"() {device = "cpu"
// CHECK-NEXT: %[[BG:.*]] = "hexir.transfer"(%[[B]]) {dst = "cuda", src = "cpu"}
// CHECK-NEXT: %[[M:.*]] = "hexir.linear"(%[[X]], %[[W]]) {device = "cuda"}
// The cpu relu reads a download of the product, placed right after it.
// CHECK-NEXT: %[[MC:.*]] = "hexir.transfer"(%[[M]]) {dst = "cpu", src = "cuda"}
// CHECK-NEXT: %[[R:.*]] = "hexir.relu"(%[[MC]]) {device = "cpu"}
// CHECK-NEXT: %[[S:.*]] = "hexir.add"(%[[M]], %[[BG]]) {device = "cuda"}
// The returned value comes back to the host.
// CHECK-NEXT: %[[SC:.*]] = "hexir.transfer"(%[[S]]) {dst = "cpu", src = "cuda"}
// CHECK-NEXT: %[[T:.*]] = "hexir.mul"(%[[R]], %[[B]]) {device = "cpu"}
// CHECK-NEXT: "hexir.print"(%[[T]]) {device = "cpu"}
// CHECK-NEXT: return %[[SC]]
// CHECK-NOT: hexir.transfer

// CPU-NOT: hexir.transfer
// CPU: "hexir.constant"() {device = "cpu"

func.func @main(%x: tensor<2x2xf64>) -> tensor<2x2xf64> {
  %w = "hexir.constant"() {value = dense<1.0> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %b = "hexir.constant"() {value = dense<0.5> : tensor<2xf64>} : () -> tensor<2xf64>
  %m = "hexir.linear"(%x, %w) : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
  %r = "hexir.relu"(%m) : (tensor<2x2xf64>) -> tensor<2x2xf64>
  %s = "hexir.add"(%m, %b) : (tensor<2x2xf64>, tensor<2xf64>) -> tensor<2x2xf64>
  %t = "hexir.mul"(%r, %b) : (tensor<2x2xf64>, tensor<2xf64>) -> tensor<2x2xf64>
  "hexir.print"(%t) : (tensor<2x2xf64>) -> ()
  return %s : tensor<2x2xf64>
}
