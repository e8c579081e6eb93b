// hextir-to-loops on its own: kernels become func.func loop nests; run twice, nothing changes.
// RUN: %hexir -emit=mlir-tir -placement=hexir.relu=cuda %S/Inputs/linear-relu.mlir > %t.tir
// RUN: %hexir-opt --pass=hextir-to-loops %t.tir > %t.once
// RUN: %hexir-opt --pass=hextir-to-loops %t.once > %t.twice
// RUN: diff %t.once %t.twice
// RUN: FileCheck %s < %t.once

// CHECK: func.func @linear_0({{.*}}, %[[LO:.*]]: index, %[[HI:.*]]: index) attributes {device = "cpu", hexir.grid = array<i64: 1, 1, 1>, hexir.kernel = "matmul"
// CHECK: scf.for {{.*}} iter_args({{.*}}) -> (f64, f64, f64, f64)
// CHECK: func.func @relu_1(%arg0: memref<2x2xf64>, %arg1: memref<2x2xf64>) attributes {device = "cuda", hexir.kernel = "relu"
// CHECK: scf.parallel
// CHECK-NOT: hextir.

// A fused kernel loads an operand of one element (here a clip's two bounds) once, at its top
// (`KernelBuilder.load_once`), and the pass keeps those loads outside the cpu grid's loop: the
// kernel is still a grid of 8 (its channels), each range it is handed starting with the loads.
// RUN: %hexir -emit=mlir-linalg -target=cpu:x86-64-v3 %S/Inputs/clip-bounds.mlir | FileCheck %s --check-prefix=ONCE
// ONCE: func.func @conv_max_min_0({{.*}}, %[[LOW:arg[0-9]+]]: memref<f32>, %[[HIGH:arg[0-9]+]]: memref<f32>, {{.*}}, %[[HI:arg[0-9]+]]: index) attributes {{.*}}hexir.grid = array<i64: 8, 1, 1>
// ONCE: memref.load %[[LOW]][] : memref<f32>
// ONCE: memref.load %[[HIGH]][] : memref<f32>
// ONCE: arith.minui %[[HI]], %c8
// ONCE-NEXT: scf.for
// ONCE-NOT: memref.load %[[LOW]]
// ONCE-NOT: memref.load %[[HIGH]]
