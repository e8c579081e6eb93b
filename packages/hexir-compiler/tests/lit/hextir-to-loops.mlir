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
