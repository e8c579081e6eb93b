// The README's custom syntax: IRDL dialects have none, so this must be refused with a hint.
func.func @main(%a: tensor<2x2xf64>, %w: tensor<2x2xf64>) {
  %m = hexir.linear %a, %w : tensor<2x2xf64>
  return
}
