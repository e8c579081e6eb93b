// hexir-kernels-to-llvm on its own (all-cpu: no toolkit needed; unfused, one kernel per op):
// cpu kernels become llvm.funcs, the graph stays; run twice, nothing changes.
// RUN: %hexir -emit=mlir-gpu -fusion=off %S/Inputs/linear-relu.mlir > %t.gpu
// RUN: %hexir-opt --pass=hexir-kernels-to-llvm %t.gpu > %t.once
// RUN: %hexir-opt --pass=hexir-kernels-to-llvm %t.once > %t.twice
// RUN: diff %t.once %t.twice
// RUN: FileCheck %s < %t.once

// CHECK: func.func @main()
// CHECK: "hexir.call_tir"
// CHECK: llvm.func @linear_0(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: !llvm.ptr, %arg3: i64, %arg4: i64)
// CHECK: llvm.func @relu_1(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: i64, %arg3: i64)
