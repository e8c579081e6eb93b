// hextir-to-gpu: each cuda prim func becomes gpu.module @<name>_module holding a kernel of the
// same name; thread-bound loops become block/thread ids and give the launch geometry, the other
// loops scf.for, guards scf.if, buffers memref. cpu prim funcs are left alone.
// RUN: %hexir-opt --pass=hextir-to-gpu %s | FileCheck %s
// RUN: %hexir-opt --pass=hextir-to-gpu,hextir-to-gpu %s | FileCheck %s --check-prefix=TWICE
// RUN: %hexir-opt --pass=hexir-lower-to-tir,hextir-to-gpu %S/Inputs/hextir-to-gpu-linear.mlir | FileCheck %s --check-prefix=LINEAR
// Kernels it refuses, each reported at the loop (or kernel) in one line:
// RUN: not %hexir-opt --pass=hextir-to-gpu %S/Inputs/hextir-to-gpu-extent.mlir 2>&1 | FileCheck %s --check-prefix=EXTENT
// RUN: not %hexir-opt --pass=hextir-to-gpu %S/Inputs/hextir-to-gpu-carried.mlir 2>&1 | FileCheck %s --check-prefix=CARRIED
// RUN: not %hexir-opt --pass=hextir-to-gpu %S/Inputs/hextir-to-gpu-twice.mlir 2>&1 | FileCheck %s --check-prefix=BOUND
// RUN: not %hexir-opt --pass=hextir-to-gpu %S/Inputs/hextir-to-gpu-empty.mlir 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: not %hexir-opt --pass=hextir-to-gpu %S/Inputs/hextir-to-gpu-threads.mlir 2>&1 | FileCheck %s --check-prefix=THREADS
// RUN: not %hexir-opt --pass=hextir-to-gpu %S/Inputs/hextir-to-gpu-grid.mlir 2>&1 | FileCheck %s --check-prefix=GRID

// EXTENT: hextir-to-gpu-extent.mlir:8:3: error: thread_binding loop needs a constant extent
// CARRIED: hextir-to-gpu-carried.mlir:8:8: error: a thread_binding loop cannot carry values
// BOUND: hextir-to-gpu-twice.mlir:9:5: error: axis 'threadIdx.x' is bound by two loops of this kernel
// EMPTY: hextir-to-gpu-empty.mlir:7:3: error: thread_binding loop over an empty range [4, 4) step 1
// THREADS: hextir-to-gpu-threads.mlir:2:1: error: a block of 1024x2x1 = 2048 threads exceeds CUDA's limit of 1024
// GRID: hextir-to-gpu-grid.mlir:2:1: error: grid size 65536 on y exceeds CUDA's limit of 65535

// CHECK: module attributes {gpu.container_module}
// The prim funcs stay (call_tir names them); the lowered one is marked.
// CHECK: "hextir.prim_func"()
// CHECK: device = "cuda", {{.*}}hexir.kernel = "relu", hexir.lowered_to_gpu, {{.*}}sym_name = "relu_0"
// CHECK: "hextir.prim_func"()
// CHECK: device = "cuda", {{.*}}hexir.lowered_to_gpu, {{.*}}sym_name = "transpose_1"
// CHECK: "hextir.prim_func"()
// CHECK: device = "cpu"
// CHECK-NOT: hexir.lowered_to_gpu
// CHECK-SAME: sym_name = "neg_2"

// CHECK-LABEL: gpu.module @relu_0_module attributes {hexir.block = array<i64: 256, 1, 1>, hexir.grid = array<i64: 4, 1, 1>}
// CHECK: gpu.func @relu_0(%[[X:.*]]: memref<3x300xf32>, %[[OUT:.*]]: memref<3x300xf32>) kernel attributes {known_block_size = array<i32: 256, 1, 1>, known_grid_size = array<i32: 4, 1, 1>}
// CHECK-NOT: hextir.
// CHECK: %[[BX:.*]] = gpu.block_id x
// CHECK: %[[TX:.*]] = gpu.thread_id x
// CHECK: %[[M:.*]] = arith.muli %[[BX]], %{{.*}} : index
// CHECK: %[[FLAT:.*]] = arith.addi %[[M]], %[[TX]] : index
// CHECK: %[[OK:.*]] = arith.cmpi ult, %[[FLAT]], %{{.*}} : index
// CHECK: scf.if %[[OK]] {
// CHECK: %[[V:.*]] = memref.load %[[X]][%[[I:.*]], %[[J:.*]]] : memref<3x300xf32>
// CHECK: %[[R:.*]] = arith.maximumf %[[V]], %{{.*}} : f32
// CHECK: %[[TMP:.*]] = memref.alloca() : memref<1xf32>
// CHECK: memref.store %[[R]], %[[TMP]][%{{.*}}] : memref<1xf32>
// CHECK: %[[ACC:.*]] = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[A:.*]] = %[[R]]) -> (f32) {
// CHECK: %[[S:.*]] = arith.addf %[[A]], %[[R]] : f32
// CHECK: scf.yield %[[S]] : f32
// CHECK: memref.store %[[ACC]], %[[OUT]][%[[I]], %[[J]]] : memref<3x300xf32>
// CHECK: gpu.return

// A bound loop from 2 to 10 step 2 runs 4 threads: iv = id * 2 + 2.
// CHECK-LABEL: gpu.module @transpose_1_module attributes {hexir.block = array<i64: 1, 4, 1>, hexir.grid = array<i64: 1, 1, 3>}
// CHECK: %[[BZ:.*]] = gpu.block_id z
// CHECK: %[[TY:.*]] = gpu.thread_id y
// CHECK: %[[C2:.*]] = arith.constant 2 : index
// CHECK: %[[SCALED:.*]] = arith.muli %[[TY]], %[[C2]] : index
// CHECK: %[[C2B:.*]] = arith.constant 2 : index
// CHECK: %[[IV:.*]] = arith.addi %[[SCALED]], %[[C2B]] : index
// CHECK: memref.load %{{.*}}[%[[BZ]], %[[IV]]] : memref<3x10xf64>

// The cpu kernel gets no gpu.module.
// CHECK-NOT: gpu.module

// TWICE-COUNT-2: gpu.module
// TWICE-NOT: gpu.module

// LINEAR: "hexir.call_tir"
// LINEAR-SAME: callee = @linear_0
// LINEAR: gpu.module @linear_0_module attributes {hexir.block = array<i64: {{[0-9]+, [0-9]+}}, 1>, hexir.grid = array<i64: 1, 1, 1>}
// LINEAR: gpu.func @linear_0(%{{.*}}: memref<2x2xf64>, %{{.*}}: memref<2x2xf64>, %{{.*}}: memref<2x2xf64>) kernel
// LINEAR-DAG: gpu.block_id y
// LINEAR-DAG: gpu.block_id x
// LINEAR-DAG: gpu.thread_id y
// LINEAR-DAG: gpu.thread_id x
// LINEAR: scf.for {{.*}} iter_args
// LINEAR: arith.mulf
// LINEAR: arith.addf
// LINEAR: memref.store
// LINEAR: gpu.return

module {
  "hextir.prim_func"() ({
  ^bb0(%x: memref<3x300xf32>, %out: memref<3x300xf32>):
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c256 = arith.constant 256 : index
    %c300 = arith.constant 300 : index
    %c900 = arith.constant 900 : index
    "hextir.block"() ({
      "hextir.for"(%c0, %c4, %c1) ({
      ^bb1(%bx: index):
        "hextir.for"(%c0, %c256, %c1) ({
        ^bb2(%tx: index):
          %m = arith.muli %bx, %c256 : index
          %flat = arith.addi %m, %tx : index
          %ok = arith.cmpi ult, %flat, %c900 : index
          "hextir.if"(%ok) ({
            %i = arith.divui %flat, %c300 : index
            %j = arith.remui %flat, %c300 : index
            %v = "hextir.buffer_load"(%x, %i, %j) : (memref<3x300xf32>, index, index) -> f32
            %zero = arith.constant 0.0 : f32
            %r = arith.maximumf %v, %zero : f32
            %tmp = "hextir.alloc_buffer"() : () -> memref<1xf32>
            "hextir.buffer_store"(%r, %tmp, %c0) : (f32, memref<1xf32>, index) -> ()
            %acc = "hextir.for"(%c0, %c4, %c1, %r) ({
            ^bb3(%k: index, %a: f32):
              %s = arith.addf %a, %r : f32
              "hextir.yield"(%s) : (f32) -> ()
            }) {kind = "serial"} : (index, index, index, f32) -> f32
            "hextir.buffer_store"(%acc, %out, %i, %j) : (f32, memref<3x300xf32>, index, index) -> ()
            "hextir.yield"() : () -> ()
          }) : (i1) -> ()
          "hextir.yield"() : () -> ()
        }) {kind = "thread_binding", bind = "threadIdx.x"} : (index, index, index) -> ()
        "hextir.yield"() : () -> ()
      }) {kind = "thread_binding", bind = "blockIdx.x"} : (index, index, index) -> ()
      "hextir.yield"() : () -> ()
    }) {name = "relu"} : () -> ()
    "hextir.return"() : () -> ()
  }) {sym_name = "relu_0", function_type = (memref<3x300xf32>, memref<3x300xf32>) -> (),
      device = "cuda", hexir.kernel = "relu", hexir.params = array<f64>} : () -> ()

  "hextir.prim_func"() ({
  ^bb0(%x: memref<3x10xf64>, %out: memref<10x3xf64>):
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    %c10 = arith.constant 10 : index
    "hextir.for"(%c0, %c3, %c1) ({
    ^bb1(%i: index):
      "hextir.for"(%c2, %c10, %c2) ({
      ^bb2(%j: index):
        %v = "hextir.buffer_load"(%x, %i, %j) : (memref<3x10xf64>, index, index) -> f64
        "hextir.buffer_store"(%v, %out, %j, %i) : (f64, memref<10x3xf64>, index, index) -> ()
        "hextir.yield"() : () -> ()
      }) {kind = "thread_binding", bind = "threadIdx.y"} : (index, index, index) -> ()
      "hextir.yield"() : () -> ()
    }) {kind = "thread_binding", bind = "blockIdx.z"} : (index, index, index) -> ()
    "hextir.return"() : () -> ()
  }) {sym_name = "transpose_1", function_type = (memref<3x10xf64>, memref<10x3xf64>) -> (),
      device = "cuda", hexir.kernel = "transpose", hexir.params = array<f64: 1.0, 0.0>} : () -> ()

  "hextir.prim_func"() ({
  ^bb0(%a: memref<4xf64>, %out: memref<4xf64>):
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    "hextir.for"(%c0, %c4, %c1) ({
    ^bb1(%i: index):
      %v = "hextir.buffer_load"(%a, %i) : (memref<4xf64>, index) -> f64
      "hextir.buffer_store"(%v, %out, %i) : (f64, memref<4xf64>, index) -> ()
      "hextir.yield"() : () -> ()
    }) {kind = "parallel"} : (index, index, index) -> ()
    "hextir.return"() : () -> ()
  }) {sym_name = "neg_2", function_type = (memref<4xf64>, memref<4xf64>) -> (),
      device = "cpu", hexir.kernel = "neg", hexir.params = array<f64>} : () -> ()
}
