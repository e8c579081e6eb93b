// hexir-partition writes `device` on every placeable op (the -placement choice, else an
// existing device, else cpu), on constants, prints and calls (cpu), and hexir.targets on
// the module.

// RUN: %hexir-opt --pass=hexir-partition %s | FileCheck %s --check-prefix=CPU
// RUN: %hexir-opt --pass=hexir-partition --placement=hexir.linear=cuda %s | FileCheck %s --check-prefix=SPLIT
// RUN: %hexir-opt --pass=hexir-partition --placement=hexir.linear=cpu,hexir.relu=cuda %s | FileCheck %s --check-prefix=SWAPPED
// RUN: %hexir-opt --pass=hexir-partition --placement=hexir.linear=gpu --placement=hexir.relu=gpu,hexir.add=gpu %s | FileCheck %s --check-prefix=GPU
// RUN: %hexir-opt --pass=hexir-partition,hexir-partition --placement=hexir.linear=cuda %s | FileCheck %s --check-prefix=SPLIT

// CPU: module attributes {hexir.targets = ["cpu", "cuda"]}
// CPU: "hexir.constant"() {device = "cpu"
// CPU: "hexir.linear"(%{{.*}}) {device = "cpu"}
// CPU: "hexir.relu"(%{{.*}}) {device = "cpu"}
// CPU: "hexir.add"(%{{.*}}) {device = "cuda"}
// CPU: "hexir.print"(%{{.*}}) {device = "cpu"}

// SPLIT: "hexir.linear"(%{{.*}}) {device = "cuda"}
// SPLIT: "hexir.relu"(%{{.*}}) {device = "cpu"}
// SPLIT: "hexir.print"(%{{.*}}) {device = "cpu"}

// SWAPPED: "hexir.linear"(%{{.*}}) {device = "cpu"}
// SWAPPED: "hexir.relu"(%{{.*}}) {device = "cuda"}

// GPU-NOT: "cpu"}
// GPU: "hexir.linear"(%{{.*}}) {device = "cuda"}
// GPU: "hexir.relu"(%{{.*}}) {device = "cuda"}
// GPU: "hexir.add"(%{{.*}}) {device = "cuda"}
// GPU: "hexir.print"(%{{.*}}) {device = "cpu"}

func.func @main(%x: tensor<2x3xf64>) -> tensor<2x2xf64> {
  %w = "hexir.constant"() {value = dense<1.0> : tensor<3x2xf64>} : () -> tensor<3x2xf64>
  %m = "hexir.linear"(%x, %w) : (tensor<2x3xf64>, tensor<3x2xf64>) -> tensor<2x2xf64>
  %r = "hexir.relu"(%m) : (tensor<2x2xf64>) -> tensor<2x2xf64>
  // An existing device is kept unless -placement names the op.
  %s = "hexir.add"(%r, %r) {device = "cuda"} : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
  "hexir.print"(%s) : (tensor<2x2xf64>) -> ()
  return %s : tensor<2x2xf64>
}
