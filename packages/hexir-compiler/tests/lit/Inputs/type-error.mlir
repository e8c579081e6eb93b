// A linear whose inner dimensions differ.
func.func @main(%a: tensor<2x3xf64>, %w: tensor<2x2xf64>) {
  // The op below is on line 4, column 8.
  %r = "hexir.linear"(%a, %w) : (tensor<2x3xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
  return
}
