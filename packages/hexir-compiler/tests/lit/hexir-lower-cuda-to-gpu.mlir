// hexir-lower-cuda-to-gpu: each cuda-placed linalg op on buffers becomes one gpu.launch with
// many threads: flat id = blockIdx.x * block + threadIdx.x, guarded by id < total; reduction
// loops stay serial in the thread. Kernels are named after the op and a module-wide counter.
// cpu ops stay; transfers become memref.copy.
// RUN: %hexir-opt --pass=hexir-lower-cuda-to-gpu %s | FileCheck %s

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
#red = affine_map<(d0, d1) -> (d0)>

// The 2x2 program, linear on cuda: a zero-fill launch and a matmul launch (4 outputs: one
// block of a warp), K as an scf.for carrying the accumulator, relu left on the cpu.
// CHECK-LABEL: func.func @mlp_split
// CHECK: %[[C:.*]] = memref.alloc()
// CHECK: %[[G1:.*]] = arith.constant 1 : index
// CHECK: %[[B1:.*]] = arith.constant 32 : index
// CHECK: gpu.launch blocks(%[[BX:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %[[G1]], %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) threads(%[[TX:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %[[B1]],
// CHECK-SAME: module(@fill_0) function(@fill_0)
// CHECK: %[[BASE:.*]] = arith.muli %[[BX]], %{{.*}} : index
// CHECK: %[[ID:.*]] = arith.addi %[[BASE]], %[[TX]] : index
// CHECK: %[[IN:.*]] = arith.cmpi ult, %[[ID]], %{{.*}} : index
// CHECK: scf.if %[[IN]]
// CHECK: memref.store %{{.*}}, %[[C]]
// CHECK: gpu.terminator
// CHECK-NEXT: } {device = "cuda"}
// CHECK: gpu.launch blocks
// CHECK-SAME: module(@matmul_1) function(@matmul_1)
// CHECK: scf.if
// CHECK: %[[J:.*]] = arith.remui %[[FLAT:.*]], %[[TWO:.*]] : index
// CHECK: %[[I:.*]] = arith.divui %[[FLAT]], %[[TWO]] : index
// CHECK: %[[ACC0:.*]] = memref.load %[[C]][%[[I]], %[[J]]]
// CHECK: %[[SUM:.*]] = scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %[[ACC0]]) -> (f64)
// CHECK: %[[X:.*]] = memref.load %arg0[%[[I]], %[[K]]]
// CHECK: %[[Y:.*]] = memref.load %arg1[%[[K]], %[[J]]]
// CHECK: %[[P:.*]] = arith.mulf %[[X]], %[[Y]] : f64
// CHECK: %[[N:.*]] = arith.addf %[[ACC]], %[[P]] : f64
// CHECK: scf.yield %[[N]] : f64
// CHECK: memref.store %[[SUM]], %[[C]][%[[I]], %[[J]]]
// CHECK: } {device = "cuda"}
// CHECK: linalg.generic
// CHECK-SAME: attrs = {device = "cpu"}
// CHECK: arith.maximumf
func.func @mlp_split(%a: memref<2x2xf64>, %w: memref<2x2xf64>, %out: memref<2x2xf64>) {
  %zero = arith.constant 0.0 : f64
  %c = memref.alloc() : memref<2x2xf64>
  linalg.fill {device = "cuda"} ins(%zero : f64) outs(%c : memref<2x2xf64>)
  linalg.matmul {device = "cuda"} ins(%a, %w : memref<2x2xf64>, memref<2x2xf64>) outs(%c : memref<2x2xf64>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%c : memref<2x2xf64>) outs(%out : memref<2x2xf64>) attrs = {device = "cpu"} {
  ^bb0(%x: f64, %o: f64):
    %r = arith.maximumf %x, %zero : f64
    linalg.yield %r : f64
  }
  return
}

// 1000x300 = 300000 elements: 1172 blocks of 256 threads, the last block partly idle.
// The bias reads only the column index; the body is cloned as written.
// CHECK-LABEL: func.func @large_broadcast
// CHECK-DAG: %[[GRID:.*]] = arith.constant 1172 : index
// CHECK-DAG: %[[BLOCK:.*]] = arith.constant 256 : index
// CHECK: gpu.launch blocks(%[[BX:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %[[GRID]], %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) threads(%[[TX:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %[[BLOCK]],
// CHECK-DAG: %[[TOTAL:.*]] = arith.constant 300000 : index
// CHECK-DAG: %[[B256:.*]] = arith.constant 256 : index
// CHECK: %[[BASE:.*]] = arith.muli %[[BX]], %[[B256]] : index
// CHECK: %[[ID:.*]] = arith.addi %[[BASE]], %[[TX]] : index
// CHECK: arith.cmpi ult, %[[ID]], %[[TOTAL]] : index
// CHECK: %[[COL:.*]] = arith.remui %[[ID]], %{{.*}} : index
// CHECK: %[[ROW:.*]] = arith.divui %[[ID]], %{{.*}} : index
// CHECK: %[[X:.*]] = memref.load %arg0[%[[ROW]], %[[COL]]] : memref<1000x300xf32>
// CHECK: %[[B:.*]] = memref.load %arg1[%[[COL]]] : memref<300xf32>
// CHECK: %[[S:.*]] = arith.addf %[[X]], %[[B]] : f32
// CHECK: %[[T:.*]] = math.tanh %[[S]] : f32
// CHECK: memref.store %[[T]], %arg2[%[[ROW]], %[[COL]]] : memref<1000x300xf32>
// CHECK: } {device = "cuda"}
func.func @large_broadcast(%x: memref<1000x300xf32>, %b: memref<300xf32>, %y: memref<1000x300xf32>) {
  linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %b : memref<1000x300xf32>, memref<300xf32>) outs(%y : memref<1000x300xf32>) attrs = {device = "cuda"} {
  ^bb0(%v: f32, %w: f32, %o: f32):
    %s = arith.addf %v, %w : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  }
  return
}

// A row reduction: one thread per row (40 rows: one block of 64 threads), the row serial.
// CHECK-LABEL: func.func @row_max
// CHECK-DAG: %[[BLOCK:.*]] = arith.constant 64 : index
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}}) threads({{.*}}) in (%{{.*}} = %[[BLOCK]],
// CHECK-DAG: %[[TOTAL:.*]] = arith.constant 40 : index
// CHECK: arith.cmpi ult, %{{.*}}, %[[TOTAL]] : index
// CHECK: %[[INIT:.*]] = memref.load %arg1[%[[ROW:.*]]] : memref<40xf32>
// CHECK: scf.for %[[J:.*]] = {{.*}} iter_args(%[[ACC:.*]] = %[[INIT]])
// CHECK: %[[V:.*]] = memref.load %arg0[%[[ROW]], %[[J]]] : memref<40x7xf32>
// CHECK: arith.maximumf %[[V]], %[[ACC]] : f32
// CHECK: } {device = "cuda"}
func.func @row_max(%x: memref<40x7xf32>, %m: memref<40xf32>) {
  linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]} ins(%x : memref<40x7xf32>) outs(%m : memref<40xf32>) attrs = {device = "cuda"} {
  ^bb0(%v: f32, %acc: f32):
    %r = arith.maximumf %v, %acc : f32
    linalg.yield %r : f32
  }
  return
}

// A transfer is data movement, never a kernel: a memref.copy that keeps src and dst.
// CHECK-LABEL: func.func @transfer
// CHECK-NOT: gpu.launch
// CHECK: memref.copy %arg0, %arg1 {dst = "cuda", src = "cpu"} : memref<4xf32> to memref<4xf32>
func.func @transfer(%a: memref<4xf32>, %b: memref<4xf32>) {
  linalg.copy {src = "cpu", dst = "cuda", device = "cuda"} ins(%a : memref<4xf32>) outs(%b : memref<4xf32>)
  return
}
