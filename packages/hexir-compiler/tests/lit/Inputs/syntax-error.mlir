// Line 3 uses a value nobody defined.
func.func @main() {
  %r = "hexir.relu"(%x) : (tensor<2xf64>) -> tensor<2xf64>
  return
}
