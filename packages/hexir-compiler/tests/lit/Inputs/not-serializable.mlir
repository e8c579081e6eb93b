// A host program holds graph ops only: an arith.constant in main cannot be serialized.
func.func @main() {
  %c = arith.constant dense<1.0> : tensor<2x2xf64>
  "hexir.print"(%c) : (tensor<2x2xf64>) -> ()
  return
}
