// The linalg path refuses with one located line and exit code 4: a kernel call (the kernel
// branch's op) cannot become loops on tensors, and cuda code without a CUDA toolkit names
// what it looked for. An all-cpu program needs no toolkit.
// RUN: not %hexir -emit=mlir-linalg %s 2>&1 | FileCheck %s --check-prefix=CALL
// RUN: env CUDA_ROOT=%t.nowhere not %hexir -emit=mlir-llvm -placement=hexir.relu=cuda %S/Inputs/linear-relu.mlir 2>&1 | FileCheck %s --check-prefix=TOOLKIT
// RUN: env CUDA_ROOT=%t.nowhere %hexir -emit=llvm %S/Inputs/linear-relu.mlir | FileCheck %s --check-prefix=CPU

// CALL: linalg-path-errors.mlir:[[# @LINE + 6]]:8: error: hexir-lower-to-linalg cannot lower 'hexir.call_tir'; the linalg path takes graph ops only
// CALL-NOT: Traceback
// TOOLKIT: error: CUDA toolkit: libdevice.10.bc not found (searched CUDA_ROOT={{.*}}nowhere
// TOOLKIT-NOT: Traceback
// CPU: define void @main()
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %y = "hexir.call_tir"(%x) {callee = @k} : (tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}
"hextir.prim_func"() ({
^bb0(%a: memref<2xf32>, %b: memref<2xf32>):
  "hextir.return"() : () -> ()
}) {sym_name = "k", device = "cpu", function_type = (memref<2xf32>, memref<2xf32>) -> (), hexir.kernel = "relu", hexir.params = array<f64>} : () -> ()
