// hextir-to-gpu refuses this kernel (see ../hextir-to-gpu.mlir).
"hextir.prim_func"() ({
^bb0(%x: memref<4x4xf32>, %out: memref<4x4xf32>):
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  %r = "hextir.for"(%c0, %c4, %c1, %zero) ({
  ^bb0(%i: index, %a: f32):
    "hextir.yield"(%a) : (f32) -> ()
  }) {kind = "thread_binding", bind = "blockIdx.x"} : (index, index, index, f32) -> f32
  "hextir.return"() : () -> ()
}) {sym_name = "k_0", function_type = (memref<4x4xf32>, memref<4x4xf32>) -> (), device = "cuda",
    hexir.kernel = "relu", hexir.params = array<f64>} : () -> ()
