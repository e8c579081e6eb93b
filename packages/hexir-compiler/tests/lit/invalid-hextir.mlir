// Verifier errors of hexir.call_tir and the hextir kernel dialect: one located line each.

// RUN: %python %S/Inputs/split_compile.py %s | FileCheck %s

func.func @main(%a: tensor<2x2xf64>, %b: tensor<2x2xf64>) {
  // CHECK: invalid-hextir.mlir:7:8: error: 'hexir.call_tir' op expected @matmul to take 3 buffers (2 inputs + 1 destination), but it takes 2
  %r = "hexir.call_tir"(%a, %b) {callee = @matmul, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
  return
}
"hextir.prim_func"() ({
^bb0(%x: memref<2x2xf64>, %y: memref<2x2xf64>):
  "hextir.return"() : () -> ()
}) {sym_name = "matmul", function_type = (memref<2x2xf64>, memref<2x2xf64>) -> ()} : () -> ()

// -----

func.func @main(%a: tensor<2x2xf64>) {
  // CHECK: :19:8: error: 'hexir.call_tir' op 'main' does not reference a kernel (a hextir.prim_func or its lowering)
  %r = "hexir.call_tir"(%a) {callee = @main, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x2xf64>) -> tensor<2x2xf64>
  return
}

// -----

func.func @main(%a: tensor<2x2xf64>) {
  // CHECK: :27:8: error: 'hexir.call_tir' op tensor<2x2xf64> does not match buffer #0 of @k, memref<2x3xf64>
  %r = "hexir.call_tir"(%a) {callee = @k, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x2xf64>) -> tensor<2x2xf64>
  return
}
"hextir.prim_func"() ({
^bb0(%x: memref<2x3xf64>, %y: memref<2x2xf64>):
  "hextir.return"() : () -> ()
}) {sym_name = "k", function_type = (memref<2x3xf64>, memref<2x2xf64>) -> ()} : () -> ()

// -----

// CHECK: :38:1: error: 'hextir.prim_func' op a kernel returns nothing; it writes its last buffer
"hextir.prim_func"() ({
^bb0(%x: memref<2xf64>):
  "hextir.return"() : () -> ()
}) {sym_name = "k", function_type = (memref<2xf64>) -> (f64)} : () -> ()

// -----

// CHECK: :46:1: error: 'hextir.prim_func' op hexir.kernel 'conv' is not a kernel kind; expected one of matmul, add
"hextir.prim_func"() ({
^bb0(%x: memref<2xf64>):
  "hextir.return"() : () -> ()
}) {sym_name = "k", function_type = (memref<2xf64>) -> (), hexir.kernel = "conv"} : () -> ()

// -----

"hextir.prim_func"() ({
^bb0(%x: memref<4xf32>):
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  // CHECK: :59:3: error: 'hextir.for' op kind 'pipelined' is not a loop kind; expected one of serial, parallel, thread_binding
  "hextir.for"(%c0, %c4, %c1) ({
  ^bb0(%i: index):
    "hextir.yield"() : () -> ()
  }) {kind = "pipelined"} : (index, index, index) -> ()
  "hextir.return"() : () -> ()
}) {sym_name = "k", function_type = (memref<4xf32>) -> ()} : () -> ()

// -----

"hextir.prim_func"() ({
^bb0(%x: memref<4xf32>):
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  // CHECK: :74:3: error: 'hextir.for' op a thread_binding loop needs 'bind' (blockIdx.x ... threadIdx.z)
  "hextir.for"(%c0, %c4, %c1) ({
  ^bb0(%i: index):
    "hextir.yield"() : () -> ()
  }) {kind = "thread_binding"} : (index, index, index) -> ()
  "hextir.return"() : () -> ()
}) {sym_name = "k", function_type = (memref<4xf32>) -> ()} : () -> ()

// -----

"hextir.prim_func"() ({
^bb0(%x: memref<4xf32>):
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  // CHECK: :89:3: error: 'hextir.for' op bind 'warp.x' is not a GPU axis; expected one of blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z
  "hextir.for"(%c0, %c4, %c1) ({
  ^bb0(%i: index):
    "hextir.yield"() : () -> ()
  }) {kind = "thread_binding", bind = "warp.x"} : (index, index, index) -> ()
  "hextir.return"() : () -> ()
}) {sym_name = "k", function_type = (memref<4xf32>) -> ()} : () -> ()

// -----

"hextir.prim_func"() ({
^bb0(%x: memref<4xf32>):
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  // CHECK: :104:3: error: 'hextir.for' op only a thread_binding loop takes 'bind'; this one is parallel
  "hextir.for"(%c0, %c4, %c1) ({
  ^bb0(%i: index):
    "hextir.yield"() : () -> ()
  }) {kind = "parallel", bind = "threadIdx.x"} : (index, index, index) -> ()
  "hextir.return"() : () -> ()
}) {sym_name = "k", function_type = (memref<4xf32>) -> ()} : () -> ()

// -----

"hextir.prim_func"() ({
^bb0(%x: memref<4xf32>):
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  // CHECK: :120:8: error: 'hextir.for' op hextir.yield gives () but the loop carries (f32)
  %s = "hextir.for"(%c0, %c4, %c1, %z) ({
  ^bb0(%i: index, %acc: f32):
    "hextir.yield"() : () -> ()
  }) {kind = "serial"} : (index, index, index, f32) -> f32
  "hextir.return"() : () -> ()
}) {sym_name = "k", function_type = (memref<4xf32>) -> ()} : () -> ()

// -----

"hextir.prim_func"() ({
^bb0(%x: memref<4x4xf32>):
  %c0 = arith.constant 0 : index
  // CHECK: :133:8: error: 'hextir.buffer_load' op a rank-2 buffer needs 2 indices, got 1
  %v = "hextir.buffer_load"(%x, %c0) : (memref<4x4xf32>, index) -> f32
  "hextir.return"() : () -> ()
}) {sym_name = "k", function_type = (memref<4x4xf32>) -> ()} : () -> ()

// -----

"hextir.prim_func"() ({
^bb0(%x: memref<4xf32>):
  %c0 = arith.constant 0 : index
  %v = arith.constant 1.0 : f64
  // CHECK: :144:3: error: 'hextir.buffer_store' op stored value type f64 is not the element type f32
  "hextir.buffer_store"(%v, %x, %c0) : (f64, memref<4xf32>, index) -> ()
  "hextir.return"() : () -> ()
}) {sym_name = "k", function_type = (memref<4xf32>) -> ()} : () -> ()

// -----

"hextir.prim_func"() ({
^bb0(%x: memref<4xf32>):
  %c = arith.constant 1 : i32
  // CHECK: :154:3: error: 'hextir.if' op condition must be i1, got i32
  "hextir.if"(%c) ({
    "hextir.yield"() : () -> ()
  }) : (i32) -> ()
  "hextir.return"() : () -> ()
}) {sym_name = "k", function_type = (memref<4xf32>) -> ()} : () -> ()

// -----

"hextir.prim_func"() ({
^bb0(%x: memref<4xf32>):
  %c0 = arith.constant 0 : index
  // CHECK: :166:3: error: 'hextir.for' op expects at least 3 operands, got 2
  "hextir.for"(%c0, %c0) ({
  ^bb0(%i: index):
    "hextir.yield"() : () -> ()
  }) {kind = "serial"} : (index, index) -> ()
  "hextir.return"() : () -> ()
}) {sym_name = "k", function_type = (memref<4xf32>) -> ()} : () -> ()

// -----

// CHECK: :176:1: error: 'hextir.prim_func' op requires attribute 'function_type'
"hextir.prim_func"() ({
^bb0(%x: memref<4xf32>):
  "hextir.return"() : () -> ()
}) {sym_name = "k"} : () -> ()

// -----

"hextir.prim_func"() ({
^bb0(%x: memref<4xf32>):
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  // CHECK: :189:3: error: 'hextir.for' op 'lanes' is an integer >= 2 on a parallel loop; found 4 : i64 on a serial loop
  "hextir.for"(%c0, %c4, %c1) ({
  ^bb0(%i: index):
    "hextir.yield"() : () -> ()
  }) {kind = "serial", lanes = 4 : i64} : (index, index, index) -> ()
  "hextir.return"() : () -> ()
}) {sym_name = "k", function_type = (memref<4xf32>) -> ()} : () -> ()
