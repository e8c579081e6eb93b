// hexir-lower-to-linalg: every graph op as loops on tensors. The 2x2 program first (linear,
// relu, print), unplaced and then placed, then one function per op of the graph dialect.
// RUN: %hexir-opt --pass=hexir-lower-to-linalg %s | FileCheck %s
// RUN: %hexir-opt --pass=hexir-partition,hexir-lower-to-linalg --placement=hexir.linear=cuda %s | FileCheck %s --check-prefix=PLACED

// The indexing maps say broadcasting, reductions and permutations; checked here, used below.
// CHECK-DAG: #[[$LX:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG: #[[$LW:.*]] = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
// CHECK-DAG: #[[$O3:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-DAG: #[[$MB:.*]] = affine_map<(d0, d1, d2, d3) -> (0, d3, d2)>
// CHECK-DAG: #[[$ID2:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[$ROW:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-DAG: #[[$COL:.*]] = affine_map<(d0, d1) -> (d0, 0)>
// CHECK-DAG: #[[$PERM:.*]] = affine_map<(d0, d1, d2) -> (d0, d2, d1)>
// CHECK-DAG: #[[$ID3:.*]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>

// CHECK-LABEL: func.func @main()
// CHECK-NOT: hexir.linear
// CHECK: %[[A:.*]] = arith.constant dense<{{\[}}[3.000000e+00, 1.000000e+00], [2.000000e+00, 2.000000e+00]]> : tensor<2x2xf64>
// CHECK: %[[W:.*]] = arith.constant dense<{{\[}}[1.000000e+00, 5.000000e+00], [5.000000e+00, 2.000000e+00]]> : tensor<2x2xf64>
// CHECK: %[[EMPTY:.*]] = tensor.empty() : tensor<2x2xf64>
// CHECK: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f64
// CHECK: %[[INIT:.*]] = linalg.fill ins(%[[ZERO]] : f64) outs(%[[EMPTY]] : tensor<2x2xf64>)
// CHECK: %[[MM:.*]] = linalg.matmul ins(%[[A]], %[[W]] : tensor<2x2xf64>, tensor<2x2xf64>) outs(%[[INIT]] : tensor<2x2xf64>)
// CHECK: %[[R:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%[[MM]] : tensor<2x2xf64>)
// CHECK: arith.maximumf
// CHECK: linalg.yield
// CHECK-NOT: hexir.relu
// CHECK: "hexir.print"(%[[R]])

// PLACED: module attributes {hexir.targets = ["cpu", "cuda"]}
// PLACED-LABEL: func.func @main()
// PLACED: arith.constant {device = "cpu"} dense
// PLACED: tensor.empty() {device = "cuda"}
// PLACED: linalg.fill {device = "cuda"}
// PLACED: linalg.matmul {device = "cuda"}
// PLACED: tensor.empty() {device = "cpu"}
// PLACED: linalg.generic {{.*}} attrs = {device = "cpu"}
// PLACED: arith.maximumf
// PLACED: "hexir.print"({{.*}}) {device = "cpu"}
func.func @main() {
  %a = "hexir.constant"() {value = dense<[[3.0, 1.0], [2.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %w = "hexir.constant"() {value = dense<[[1.0, 5.0], [5.0, 2.0]]> : tensor<2x2xf64>} : () -> tensor<2x2xf64>
  %m = "hexir.linear"(%a, %w) : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
  %r = "hexir.relu"(%m) : (tensor<2x2xf64>) -> tensor<2x2xf64>
  "hexir.print"(%r) : (tensor<2x2xf64>) -> ()
  return
}

// A batched input to linear: loops over batch, rows, N, then K as the reduction.
// CHECK-LABEL: func.func @linear_batched
// CHECK: linalg.generic {indexing_maps = [#[[$LX]], #[[$LW]], #[[$O3]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
// CHECK-SAME: ins(%arg0, %arg1 : tensor<3x8x784xf32>, tensor<784x10xf32>)
// CHECK: arith.mulf
// CHECK: arith.addf
func.func @linear_batched(%x: tensor<3x8x784xf32>, %w: tensor<784x10xf32>) -> tensor<3x8x10xf32> {
  %y = "hexir.linear"(%x, %w) : (tensor<3x8x784xf32>, tensor<784x10xf32>) -> tensor<3x8x10xf32>
  return %y : tensor<3x8x10xf32>
}

// Batched matmul with a broadcast batch: b's batch of 1 reads index 0.
// CHECK-LABEL: func.func @matmul_broadcast
// CHECK: linalg.generic {indexing_maps = [#[[$LX]], #[[$MB]], #[[$O3]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
func.func @matmul_broadcast(%a: tensor<4x2x3xf64>, %b: tensor<1x3x5xf64>) -> tensor<4x2x5xf64> {
  %y = "hexir.matmul"(%a, %b) : (tensor<4x2x3xf64>, tensor<1x3x5xf64>) -> tensor<4x2x5xf64>
  return %y : tensor<4x2x5xf64>
}

// Same shapes: named ops. Broadcast: a generic whose map drops (or zeroes) the missing axis.
// CHECK-LABEL: func.func @binary
// CHECK: linalg.add ins(%arg0, %arg0 : tensor<8x10xf32>, tensor<8x10xf32>)
// CHECK: linalg.sub ins
// CHECK: linalg.generic {indexing_maps = [#[[$ID2]], #[[$ROW]], #[[$ID2]]]
// CHECK: arith.mulf
// CHECK: linalg.generic {indexing_maps = [#[[$COL]], #[[$ID2]], #[[$ID2]]]
// CHECK: arith.divf
func.func @binary(%x: tensor<8x10xf32>, %b: tensor<10xf32>, %c: tensor<8x1xf32>) -> tensor<8x10xf32> {
  %a = "hexir.add"(%x, %x) : (tensor<8x10xf32>, tensor<8x10xf32>) -> tensor<8x10xf32>
  %s = "hexir.sub"(%a, %x) : (tensor<8x10xf32>, tensor<8x10xf32>) -> tensor<8x10xf32>
  %m = "hexir.mul"(%s, %b) : (tensor<8x10xf32>, tensor<10xf32>) -> tensor<8x10xf32>
  %d = "hexir.div"(%c, %m) : (tensor<8x1xf32>, tensor<8x10xf32>) -> tensor<8x10xf32>
  return %d : tensor<8x10xf32>
}

// CHECK-LABEL: func.func @unary
// CHECK: arith.maximumf
// CHECK: arith.negf
// CHECK-NEXT: math.exp
// CHECK-NEXT: arith.addf
// CHECK-NEXT: arith.divf
// CHECK: math.tanh
// CHECK: math.exp
// CHECK: math.sqrt
// CHECK: arith.negf
// CHECK: math.erf
// CHECK: arith.constant 4.471500e-02 : f32
// CHECK: math.tanh
func.func @unary(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = "hexir.relu"(%x) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = "hexir.sigmoid"(%0) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = "hexir.tanh"(%1) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %3 = "hexir.exp"(%2) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %4 = "hexir.sqrt"(%3) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %5 = "hexir.neg"(%4) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %6 = "hexir.gelu"(%5) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %7 = "hexir.gelu"(%6) {approximate = "tanh"} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return %7 : tensor<4x4xf32>
}

// softmax over axis 0 (-2): the max, exp(x - max), the sum, the division.
// CHECK-LABEL: func.func @softmax
// CHECK: arith.constant 0xFFF0000000000000 : f64
// CHECK: linalg.generic {{.*}} iterator_types = ["reduction", "parallel"]
// CHECK: arith.maximumf
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]
// CHECK: arith.subf
// CHECK-NEXT: math.exp
// CHECK: linalg.generic {{.*}} iterator_types = ["reduction", "parallel"]
// CHECK: arith.addf
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]
// CHECK: arith.divf
func.func @softmax(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %y = "hexir.softmax"(%x) {axis = -2 : i64} : (tensor<3x5xf64>) -> tensor<3x5xf64>
  return %y : tensor<3x5xf64>
}

// CHECK-LABEL: func.func @layer_norm
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%arg0, {{.*}}, {{.*}}, %arg1, %arg2 :
// CHECK: arith.constant 9.99999974E-6 : f32
// CHECK: math.sqrt
func.func @layer_norm(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  %y = "hexir.layer_norm"(%x, %g, %b) {epsilon = 1.0e-5 : f64} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @transpose_reshape
// CHECK: linalg.generic {indexing_maps = [#[[$PERM]], #[[$ID3]]]
// CHECK: tensor.collapse_shape {{.*}} {{\[}}[0, 1, 2]] : tensor<2x4x3xf64> into tensor<24xf64>
// CHECK: tensor.expand_shape {{.*}} {{\[}}[0, 1]] output_shape [6, 4] : tensor<24xf64> into tensor<6x4xf64>
func.func @transpose_reshape(%x: tensor<2x3x4xf64>) -> tensor<6x4xf64> {
  %t = "hexir.transpose"(%x) {permutation = array<i64: 0, 2, 1>} : (tensor<2x3x4xf64>) -> tensor<2x4x3xf64>
  %r = "hexir.reshape"(%t) : (tensor<2x4x3xf64>) -> tensor<6x4xf64>
  return %r : tensor<6x4xf64>
}

// keepdims reshapes the reduced tensor; mean multiplies by 1/count (1/6 here).
// CHECK-LABEL: func.func @reductions
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction", "parallel"]
// CHECK: tensor.expand_shape {{.*}} {{\[}}[0, 1], [2]] output_shape [2, 1, 3] : tensor<2x3xf64> into tensor<2x1x3xf64>
// CHECK: linalg.generic {{.*}} iterator_types = ["reduction", "parallel", "reduction"]
// CHECK: arith.constant 0.16666666666666666 : f64
// CHECK: arith.constant 0xFFF0000000000000 : f64
// CHECK: linalg.generic {{.*}} iterator_types = ["reduction", "reduction", "reduction"]
// CHECK: arith.maximumf
// CHECK: tensor.expand_shape {{.*}} [] output_shape [1, 1, 1] : tensor<f64> into tensor<1x1x1xf64>
func.func @reductions(%x: tensor<2x3x3xf64>) -> (tensor<2x1x3xf64>, tensor<3xf64>, tensor<1x1x1xf64>) {
  %s = "hexir.reduce_sum"(%x) {axes = array<i64: 1>, keepdims = true} : (tensor<2x3x3xf64>) -> tensor<2x1x3xf64>
  %m = "hexir.reduce_mean"(%x) {axes = array<i64: 0, -1>, keepdims = false} : (tensor<2x3x3xf64>) -> tensor<3xf64>
  %x2 = "hexir.reduce_max"(%x) {axes = array<i64: 0, 1, 2>, keepdims = true} : (tensor<2x3x3xf64>) -> tensor<1x1x1xf64>
  return %s, %m, %x2 : tensor<2x1x3xf64>, tensor<3xf64>, tensor<1x1x1xf64>
}

// CHECK-LABEL: func.func @transfer_stays
// CHECK: "hexir.transfer"(%arg0) {dst = "cuda", src = "cpu"}
func.func @transfer_stays(%x: tensor<2xf32>) -> tensor<2xf32> {
  %t = "hexir.transfer"(%x) {src = "cpu", dst = "cuda"} : (tensor<2xf32>) -> tensor<2xf32>
  return %t : tensor<2xf32>
}
