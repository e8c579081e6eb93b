// hexir-to-llvm: the host to the LLVM dialect. A print becomes a loop nest of
// printf("%f ", element) with printf("\n") after each row (rows x columns, as hexir-run
// prints); f32 elements are widened to double for the varargs call.
// RUN: %hexir-opt --pass=hexir-to-llvm %s | FileCheck %s

// CHECK: llvm.func @printf(!llvm.ptr, ...) -> i32
// CHECK: llvm.mlir.global internal constant @frmt_spec("%f \00")
// CHECK: llvm.mlir.global internal constant @nl("\0A\00")
// CHECK-NOT: hexir.print
// CHECK-NOT: scf.

// Two nested loops (as branches), one %f per element, one newline when a row ends.
// CHECK-LABEL: llvm.func @print_matrix
// CHECK-DAG: %[[NL:.*]] = llvm.mlir.addressof @nl : !llvm.ptr
// CHECK-DAG: %[[F:.*]] = llvm.mlir.addressof @frmt_spec : !llvm.ptr
// CHECK-DAG: %[[THREE:.*]] = llvm.mlir.constant(3 : index) : i64
// CHECK-DAG: %[[TWO:.*]] = llvm.mlir.constant(2 : index) : i64
// CHECK: ^bb1(%[[I:.*]]: i64):
// CHECK-NEXT: llvm.icmp "slt" %[[I]], %[[TWO]]
// CHECK: ^bb3(%[[J:.*]]: i64):
// CHECK-NEXT: llvm.icmp "slt" %[[J]], %[[THREE]]
// CHECK: %[[V:.*]] = llvm.load {{.*}} : !llvm.ptr -> f32
// CHECK-NEXT: %[[D:.*]] = llvm.fpext %[[V]] : f32 to f64
// CHECK-NEXT: llvm.call @printf(%[[F]], %[[D]]) vararg(!llvm.func<i32 (ptr, ...)>) : (!llvm.ptr, f64) -> i32
// CHECK: llvm.br ^bb3
// CHECK-NEXT: ^bb5:
// CHECK-NEXT: llvm.call @printf(%[[NL]]) vararg(!llvm.func<i32 (ptr, ...)>) : (!llvm.ptr) -> i32
// CHECK-NEXT: llvm.add %[[I]]
// CHECK: llvm.return
func.func @print_matrix(%m: memref<2x3xf32>) {
  "hexir.print"(%m) {device = "cpu"} : (memref<2x3xf32>) -> ()
  return
}

// f64 needs no widening; a vector prints one line, a scalar one value and a newline.
// CHECK-LABEL: llvm.func @print_vector_and_scalar
// CHECK-DAG: %[[NL:.*]] = llvm.mlir.addressof @nl : !llvm.ptr
// CHECK-DAG: %[[F:.*]] = llvm.mlir.addressof @frmt_spec : !llvm.ptr
// CHECK: %[[V:.*]] = llvm.load {{.*}} : !llvm.ptr -> f64
// CHECK-NEXT: llvm.call @printf(%[[F]], %[[V]])
// CHECK: ^bb3:
// CHECK-NEXT: llvm.call @printf(%[[NL]])
// CHECK: %[[S:.*]] = llvm.load {{.*}} : !llvm.ptr -> f64
// CHECK-NEXT: llvm.call @printf(%[[F]], %[[S]])
// CHECK-NEXT: llvm.call @printf(%[[NL]])
// CHECK-NEXT: llvm.return
func.func @print_vector_and_scalar(%v: memref<4xf64>, %s: memref<f64>) {
  "hexir.print"(%v) : (memref<4xf64>) -> ()
  "hexir.print"(%s) : (memref<f64>) -> ()
  return
}

// Host math: an intrinsic where LLVM has one, libm for erf; memref.copy (a transfer on the
// host view) is a memcpy.
// CHECK-LABEL: llvm.func @host_math
// CHECK: %[[E:.*]] = llvm.intr.exp(%{{.*}}) : (f64) -> f64
// CHECK: llvm.call @erf(%[[E]]) : (f64) -> f64
// CHECK: "llvm.intr.memcpy"
func.func @host_math(%a: memref<4xf64>, %b: memref<4xf64>) {
  %c0 = arith.constant 0 : index
  %x = memref.load %a[%c0] : memref<4xf64>
  %e = math.exp %x : f64
  %f = math.erf %e : f64
  memref.store %f, %a[%c0] : memref<4xf64>
  memref.copy %a, %b {src = "cpu", dst = "cuda"} : memref<4xf64> to memref<4xf64>
  return
}
