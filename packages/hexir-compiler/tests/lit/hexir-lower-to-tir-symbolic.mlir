// A kernel of symbolic sizes: it takes the symbols its shapes read (`hexir.symbols`) as
// index values after its buffers, each buffer of a symbolic shape as a flat memref<?xT>,
// and indexes the view of it those values shape (sizes and strides computed once, at the
// top). The cpu grid of its parallel loop is an expression (`hexir.extent`), which
// hextir-to-loops records as the kernel's grid; its range still clamps the loop.
// RUN: %hexir -emit=mlir-tir %s | FileCheck %s
// RUN: %hexir -emit=mlir-linalg %s | FileCheck %s --check-prefix=LOOPS

func.func @main(%x: tensor<?x4xf32, ["batch"]>) -> tensor<?x3xf32, ["batch"]> {
  %w = "hexir.constant"() {value = dense<1.0> : tensor<4x3xf32>} : () -> tensor<4x3xf32>
  %m = "hexir.linear"(%x, %w) : (tensor<?x4xf32, ["batch"]>, tensor<4x3xf32>) -> tensor<?x3xf32, ["batch"]>
  %r = "hexir.relu"(%m) : (tensor<?x3xf32, ["batch"]>) -> tensor<?x3xf32, ["batch"]>
  return %r : tensor<?x3xf32, ["batch"]>
}

// CHECK:      "hextir.prim_func"() ({
// CHECK-NEXT: ^bb0(%[[X:.*]]: memref<?xf32>, %[[W:.*]]: memref<4x3xf32>, %[[OUT:.*]]: memref<?xf32>, %[[BATCH:.*]]: index):
// CHECK:      %[[XV:.*]] = memref.reinterpret_cast %[[X]] to offset: [0], sizes: [%[[BATCH]], 4], strides: [4, 1] : memref<?xf32> to memref<?x4xf32, strided<[4, 1]>>
// CHECK:      %[[OV:.*]] = memref.reinterpret_cast %[[OUT]] to offset: [0], sizes: [%[[BATCH]], 3], strides: [3, 1] : memref<?xf32> to memref<?x3xf32, strided<[3, 1]>>
// CHECK:      "hextir.buffer_load"(%[[XV]],
// CHECK:      "hextir.buffer_store"({{.*}}, %[[OV]],
// CHECK:      {hexir.extent = "ceildiv(batch, 2)", kind = "parallel"}
// CHECK:      function_type = (memref<?xf32>, memref<4x3xf32>, memref<?xf32>, index) -> ()
// CHECK-SAME: hexir.symbols = ["batch"]

// LOOPS:      func.func @linear_relu_0(%{{.*}}: memref<1xf32>, %{{.*}}: memref<4x3xf32>, %{{.*}}: memref<1xf32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index)
// LOOPS-SAME: hexir.grid = ["ceildiv(batch, 2)", "1", "1"]
// LOOPS-SAME: hexir.symbols = ["batch"]
