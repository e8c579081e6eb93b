// -emit=mlir-hetero: the graph with every op placed (`device`) and a hexir.transfer wherever
// a value is consumed on another device than the one that made it; constants that only feed
// cuda ops live on cuda. Nothing is lowered yet.
// RUN: %hexir -emit=mlir-hetero %S/Inputs/linear-relu.mlir | FileCheck %s --check-prefixes=COMMON,ALLCPU
// RUN: %hexir -emit=mlir-hetero -placement=hexir.linear=cuda %S/Inputs/linear-relu.mlir | FileCheck %s --check-prefixes=COMMON,SPLIT
// RUN: %hexir -emit=mlir-hetero -placement=hexir.linear=cpu,hexir.relu=gpu %S/Inputs/linear-relu.mlir | FileCheck %s --check-prefixes=COMMON,SWAP

// COMMON: module attributes {hexir.targets = ["cpu", "cuda"]}
// ALLCPU:      %[[A:.*]] = "hexir.constant"() {device = "cpu"
// ALLCPU:      %[[M:.*]] = "hexir.linear"(%[[A]], %{{.*}}) {device = "cpu"}
// ALLCPU-NEXT: %[[R:.*]] = "hexir.relu"(%[[M]]) {device = "cpu"}
// ALLCPU-NEXT: "hexir.print"(%[[R]]) {device = "cpu"}
// ALLCPU-NOT:  hexir.transfer

// SPLIT:      "hexir.constant"() {device = "cuda"
// SPLIT:      %[[M:.*]] = "hexir.linear"({{.*}}) {device = "cuda"}
// SPLIT-NEXT: %[[T:.*]] = "hexir.transfer"(%[[M]]) {dst = "cpu", src = "cuda"}
// SPLIT-NEXT: "hexir.relu"(%[[T]]) {device = "cpu"}

// SWAP:      %[[M:.*]] = "hexir.linear"({{.*}}) {device = "cpu"}
// SWAP-NEXT: %[[U:.*]] = "hexir.transfer"(%[[M]]) {dst = "cuda", src = "cpu"}
// SWAP-NEXT: %[[R:.*]] = "hexir.relu"(%[[U]]) {device = "cuda"}
// SWAP-NEXT: %[[D:.*]] = "hexir.transfer"(%[[R]]) {dst = "cpu", src = "cuda"}
// SWAP-NEXT: "hexir.print"(%[[D]]) {device = "cpu"}
// COMMON-NOT: call_tir
