// Verifier errors of the hexir dialect: one located line each, then that the file does not
// verify, exit 255.

// RUN: %python %S/Inputs/split_compile.py %s | FileCheck %s

func.func @inner(%a: tensor<2x3xf32>, %w: tensor<2x2xf32>) {
  // CHECK: invalid-hexir.mlir:8:8: error: 'hexir.linear' op inner dimensions differ: 3 vs 2
  %r = "hexir.linear"(%a, %w) : (tensor<2x3xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return
}
// CHECK-NEXT: error: {{.*}}invalid-hexir.mlir does not verify
// CHECK-NEXT: exit 255

// -----

func.func @linear_result(%a: tensor<2x3xf32>, %w: tensor<3x4xf32>) {
  // CHECK: :18:8: error: 'hexir.linear' op result shape 2x3 does not match the expected 2x4
  %r = "hexir.linear"(%a, %w) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @mixed(%a: tensor<2x2xf32>, %w: tensor<2x2xf64>) {
  // CHECK: :26:8: error: 'hexir.matmul' op element types differ: lhs is f32 but rhs is f64
  %r = "hexir.matmul"(%a, %w) : (tensor<2x2xf32>, tensor<2x2xf64>) -> tensor<2x2xf32>
  return
}

// -----

func.func @batch(%a: tensor<3x2x4xf32>, %b: tensor<2x4x5xf32>) {
  // CHECK: :34:8: error: 'hexir.matmul' op batch dimensions 3 and 2 are not broadcast-compatible
  %r = "hexir.matmul"(%a, %b) : (tensor<3x2x4xf32>, tensor<2x4x5xf32>) -> tensor<3x2x5xf32>
  return
}

// -----

func.func @broadcast(%a: tensor<2x3xf64>, %b: tensor<4x3xf64>) {
  // CHECK: :42:8: error: 'hexir.add' op shapes 2x3 and 4x3 are not broadcast-compatible
  %r = "hexir.add"(%a, %b) : (tensor<2x3xf64>, tensor<4x3xf64>) -> tensor<4x3xf64>
  return
}

// -----

func.func @int(%a: tensor<2xi32>) {
  // CHECK: :50:8: error: 'hexir.relu' op input must have element type f32 or f64, got tensor<2xi32>
  %r = "hexir.relu"(%a) : (tensor<2xi32>) -> tensor<2xi32>
  return
}

// -----

func.func @dynamic(%a: tensor<?x2xf32>) {
  // CHECK: :58:8: error: 'hexir.exp' op input: tensor<?x2xf32> has 1 dynamic dimension; its encoding must list its expression as strings, e.g. ["batch"]
  %r = "hexir.exp"(%a) : (tensor<?x2xf32>) -> tensor<?x2xf32>
  return
}

// -----

func.func @unary_type(%a: tensor<2xf32>) {
  // CHECK: :66:8: error: 'hexir.sigmoid' op result type tensor<3xf32> differs from the input type tensor<2xf32>
  %r = "hexir.sigmoid"(%a) : (tensor<2xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @axis(%a: tensor<2x3xf32>) {
  // CHECK: :74:8: error: 'hexir.softmax' op axis 2 is out of range for rank 2; expected -2..1
  %r = "hexir.softmax"(%a) {axis = 2 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @no_axis(%a: tensor<2x3xf32>) {
  // CHECK: :82:8: error: {{.*}}axis
  %r = "hexir.softmax"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @gelu(%a: tensor<2xf32>) {
  // CHECK: :90:8: error: 'hexir.gelu' op approximate must be "none" or "tanh", got "fast"
  %r = "hexir.gelu"(%a) {approximate = "fast"} : (tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @perm(%a: tensor<2x3x4xf32>) {
  // CHECK: :98:8: error: 'hexir.transpose' op permutation [0, 2, 2] is not a permutation of 0..2
  %r = "hexir.transpose"(%a) {permutation = array<i64: 0, 2, 2>} : (tensor<2x3x4xf32>) -> tensor<2x4x4xf32>
  return
}

// -----

func.func @perm_result(%a: tensor<2x3x4xf32>) {
  // CHECK: :106:8: error: 'hexir.transpose' op result shape 2x3x4 does not match the expected 2x4x3
  %r = "hexir.transpose"(%a) {permutation = array<i64: 0, 2, 1>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @reshape(%a: tensor<2x3xf32>) {
  // CHECK: :114:8: error: 'hexir.reshape' op cannot reshape 2x3 (6 elements) to 4x2 (8 elements)
  %r = "hexir.reshape"(%a) : (tensor<2x3xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @axes(%a: tensor<2x3xf32>) {
  // CHECK: :122:8: error: 'hexir.reduce_sum' op axes [1, -1] name an axis twice
  %r = "hexir.reduce_sum"(%a) {axes = array<i64: 1, -1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @keepdims(%a: tensor<2x3xf32>) {
  // CHECK: :130:8: error: 'hexir.reduce_max' op result shape 2 does not match the expected 2x1
  %r = "hexir.reduce_max"(%a) {axes = array<i64: 1>, keepdims = true} : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @gamma(%x: tensor<2x4xf32>, %g: tensor<3xf32>, %b: tensor<4xf32>) {
  // CHECK: :138:8: error: 'hexir.layer_norm' op gamma has shape 3; expected 4 (the last dimension)
  %r = "hexir.layer_norm"(%x, %g, %b) {epsilon = 1.0e-5 : f64} : (tensor<2x4xf32>, tensor<3xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @constant() {
  // CHECK: :146:8: error: 'hexir.constant' op value has type tensor<2xf32> but the result is tensor<3xf32>
  %c = "hexir.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<3xf32>
  return
}

// -----

func.func @constant_int() {
  // CHECK: :154:8: error: 'hexir.constant' op value has type tensor<2xi32> but the result is tensor<2xf32>
  %c = "hexir.constant"() {value = dense<1> : tensor<2xi32>} : () -> tensor<2xf32>
  return
}

// -----

func.func @device(%a: tensor<2xf32>) {
  // CHECK: :162:8: error: 'hexir.relu' op device 'tpu' is not a device; expected cpu or cuda
  %r = "hexir.relu"(%a) {device = "tpu"} : (tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @transfer(%a: tensor<2xf32>) {
  // CHECK: :170:8: error: 'hexir.transfer' op transfer from cpu to itself
  %r = "hexir.transfer"(%a) {src = "cpu", dst = "cpu"} : (tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @unknown(%a: tensor<2xf32>) {
  // CHECK: :178:8: error: {{.*}}hexir.swish
  %r = "hexir.swish"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @arity(%x: tensor<2x3xf32>) {
  // CHECK: :186:8: error: 'hexir.relu' op expects 1 operand, got 2
  %r = "hexir.relu"(%x, %x) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @axis_kind(%x: tensor<2x3xf32>) {
  // CHECK: :194:8: error: 'hexir.softmax' op attribute 'axis' must be an integer (e.g. 1 : i64), got 1.000000e+00 : f32
  %r = "hexir.softmax"(%x) {axis = 1.0 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @perm_kind(%x: tensor<2x3xf32>) {
  // CHECK: :202:8: error: 'hexir.transpose' op attribute 'permutation' must be array<i64: ...>, got array<i32: 1, 0>
  %r = "hexir.transpose"(%x) {permutation = array<i32: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return
}

// -----

func.func @transfer_dst(%x: tensor<2x3xf32>) {
  // CHECK: :210:8: error: 'hexir.transfer' op requires attribute 'dst'
  %r = "hexir.transfer"(%x) {src = "cpu"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @epsilon(%x: tensor<2x4xf32>, %g: tensor<4xf32>) {
  // CHECK: :218:8: error: 'hexir.layer_norm' op epsilon is -1; expected a finite value >= 0
  %r = "hexir.layer_norm"(%x, %g, %g) {epsilon = -1.0 : f64} : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @sizes_count() {
  // CHECK: :226:8: error: 'hexir.sizes' op values has 1 entries for a result of 2 elements
  %r = "hexir.sizes"() {values = ["seq"]} : () -> tensor<2xi64>
  return
}

// -----

func.func @sizes_text() {
  // CHECK: :234:8: error: 'hexir.sizes' op values: 'seq +' is not a dimension expression
  %r = "hexir.sizes"() {values = ["seq +"]} : () -> tensor<1xi64>
  return
}

// -----

func.func @strings_not_numbers(%x: tensor<4xf32>) {
  // CHECK: :242:8: error: 'hexir.string_normalizer' op input must have element type !hexir.string, got tensor<4xf32>
  %r = "hexir.string_normalizer"(%x) {case_change_action = "NONE", is_case_sensitive = true, stopwords = []} : (tensor<4xf32>) -> tensor<4x!hexir.string>
  return
}

// -----

func.func @strings_case(%x: tensor<4x!hexir.string>) {
  // CHECK: :250:8: error: 'hexir.string_normalizer' op case_change_action 'TITLE' is not one of NONE, LOWER, UPPER
  %r = "hexir.string_normalizer"(%x) {case_change_action = "TITLE", is_case_sensitive = true, stopwords = []} : (tensor<4x!hexir.string>) -> tensor<4x!hexir.string>
  return
}

// -----

func.func @strings_shape(%x: tensor<2x3x!hexir.string>) {
  // CHECK: :258:8: error: 'hexir.string_normalizer' op input must be [C] or [1, C], got 2x3
  %r = "hexir.string_normalizer"(%x) {case_change_action = "NONE", is_case_sensitive = true, stopwords = ["a"]} : (tensor<2x3x!hexir.string>) -> tensor<1x3x!hexir.string>
  return
}

// -----

func.func @strings_no_stopwords(%x: tensor<4x!hexir.string>) {
  // CHECK: :266:8: error: 'hexir.string_normalizer' op with no stopwords the result is the input's shape 4, got 3
  %r = "hexir.string_normalizer"(%x) {case_change_action = "NONE", is_case_sensitive = true, stopwords = []} : (tensor<4x!hexir.string>) -> tensor<3x!hexir.string>
  return
}

// -----

func.func @strings_on_cuda(%x: tensor<4x!hexir.string>) {
  // CHECK: :274:8: error: 'hexir.string_normalizer' op runs on the cpu only (the runtime computes it), not on cuda
  %r = "hexir.string_normalizer"(%x) {case_change_action = "NONE", device = "cuda", is_case_sensitive = true, stopwords = []} : (tensor<4x!hexir.string>) -> tensor<4x!hexir.string>
  return
}
