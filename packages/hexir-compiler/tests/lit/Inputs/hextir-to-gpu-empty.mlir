// hextir-to-gpu refuses this kernel (see ../hextir-to-gpu.mlir).
"hextir.prim_func"() ({
^bb0(%x: memref<4x4xf32>, %out: memref<4x4xf32>):
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  "hextir.for"(%c4, %c4, %c1) ({
  ^bb0(%i: index):
    "hextir.yield"() : () -> ()
  }) {kind = "thread_binding", bind = "blockIdx.x"} : (index, index, index) -> ()
  "hextir.return"() : () -> ()
}) {sym_name = "k_0", function_type = (memref<4x4xf32>, memref<4x4xf32>) -> (), device = "cuda",
    hexir.kernel = "relu", hexir.params = array<f64>} : () -> ()
