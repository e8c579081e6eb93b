// hexir-prepare-bufferization: the graph ops that survive to linalg get a buffer form that
// one-shot bufferization understands. A print reads a read-only buffer of its tensor; a
// transfer becomes a copy into a fresh tensor that keeps src, dst and device. After
// bufferization the print takes the memref and the copy is between two buffers.
// RUN: %hexir-opt --pass=hexir-prepare-bufferization %s | FileCheck %s
// RUN: %hexir-opt --pass='hexir-prepare-bufferization,empty-tensor-to-alloc-tensor,one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}' %s | FileCheck %s --check-prefix=BUF

// CHECK-LABEL: func.func @main
// CHECK: %[[E:.*]] = tensor.empty() : tensor<2x2xf32>
// CHECK: %[[C:.*]] = linalg.copy {{.*}}device = "cuda", dst = "cuda", src = "cpu"} ins(%arg0 : tensor<2x2xf32>) outs(%[[E]] : tensor<2x2xf32>)
// CHECK-NOT: hexir.transfer
// CHECK: %[[B:.*]] = bufferization.to_buffer %[[C]] read_only : tensor<2x2xf32> to memref<2x2xf32>
// CHECK: "hexir.print"(%[[B]]) {device = "cpu"} : (memref<2x2xf32>) -> ()

// BUF-LABEL: func.func @main
// BUF-SAME: (%arg0: memref<2x2xf32>)
// BUF: %[[NEW:.*]] = memref.alloc()
// BUF: linalg.copy {{.*}}device = "cuda", dst = "cuda", src = "cpu"} ins(%arg0 : memref<2x2xf32>) outs(%[[NEW]] : memref<2x2xf32>)
// BUF: "hexir.print"(%[[NEW]]) {device = "cpu"} : (memref<2x2xf32>) -> ()
func.func @main(%x: tensor<2x2xf32>) {
  %t = "hexir.transfer"(%x) {src = "cpu", dst = "cuda", device = "cuda"} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  "hexir.print"(%t) {device = "cpu"} : (tensor<2x2xf32>) -> ()
  return
}
