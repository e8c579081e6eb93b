"""Modules for the tests, built from hexir-format's typed model (never by the compiler).

Cuda executables carry hand-written PTX (bare-pointer convention, one thread per output
element): `ptx_matmul`, `ptx_add_rows` (a bias added to each row) and `ptx_relu`. The fake
driver runs that PTX (`ptx_exec`), a real GPU runs it too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import hexir_format as hf
from hexir_format import Command, Device, DType, Executable, Function, KernelKind, Slot, dims
from hexir_format import TensorType as T
from hexir_format.model import Symbol

CPU, CUDA = Device.CPU, Device.CUDA
F32, F64 = DType.F32, DType.F64
I32, I64, BOOL = DType.I32, DType.I64, DType.BOOL
A = np.array([[3.0, 1.0], [2.0, 2.0]])
W = np.array([[1.0, 5.0], [5.0, 2.0]])

PTX_MATMUL = """\
//
// {name}: c[{m}x{n}] = a[{m}x{k}] . b[{k}x{n}], {t}, one thread per element of c
//
.version 7.0
.target sm_52
.address_size 64

.visible .entry {name}(.param .u64 a, .param .u64 b, .param .u64 c)
{{
    .reg .pred %p<3>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<10>;
    .reg .{t} %fd<4>;

    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [b];
    ld.param.u64 %rd3, [c];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.u32 %r4, %r1, %r2, %r3;
    setp.ge.u32 %p1, %r4, {mn};
    @%p1 bra DONE;
    div.u32 %r5, %r4, {n};
    rem.u32 %r6, %r4, {n};
    mov.{t} %fd1, {zero};
    mov.u32 %r7, 0;
LOOP:
    setp.ge.u32 %p2, %r7, {k};
    @%p2 bra STORE;
    mad.lo.u32 %r8, %r5, {k}, %r7;
    mul.wide.u32 %rd4, %r8, {size};
    add.s64 %rd5, %rd1, %rd4;
    ld.global.{t} %fd2, [%rd5];
    mad.lo.u32 %r9, %r7, {n}, %r6;
    mul.wide.u32 %rd6, %r9, {size};
    add.s64 %rd7, %rd2, %rd6;
    ld.global.{t} %fd3, [%rd7];
    fma.rn.{t} %fd1, %fd2, %fd3, %fd1;
    add.u32 %r7, %r7, 1;
    bra LOOP;
STORE:
    mul.wide.u32 %rd8, %r4, {size};
    add.s64 %rd9, %rd3, %rd8;
    st.global.{t} [%rd9], %fd1;
DONE:
    ret;
}}
"""
#: One thread per element i < {count} of the output: {body} computes %f3 from %f1 (x[i]) and,
#: for a binary kernel, %f2 (y[i % {n}]).
PTX_MAP = """\
.version 7.0
.target sm_52
.address_size 64

.visible .entry {name}({params})
{{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<10>;
    .reg .{t} %f<4>;

    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.u32 %r4, %r1, %r2, %r3;
    setp.ge.u32 %p1, %r4, {count};
    @%p1 bra DONE;
    ld.param.u64 %rd1, [x];
    mul.wide.u32 %rd2, %r4, {size};
    add.s64 %rd3, %rd1, %rd2;
    ld.global.{t} %f1, [%rd3];
{load_y}    {body}
    ld.param.u64 %rd7, [out];
    add.s64 %rd8, %rd7, %rd2;
    st.global.{t} [%rd8], %f3;
DONE:
    ret;
}}
"""
BLOCK = 128
_PTX_TYPES = {DType.F32: ("f32", 4, "0f00000000"), DType.F64: ("f64", 8, "0d0000000000000000")}


def ptx_matmul(name: str, m: int, n: int, k: int, dtype: DType = DType.F64) -> bytes:
    t, size, zero = _PTX_TYPES[dtype]
    return PTX_MATMUL.format(name=name, m=m, n=n, k=k, mn=m * n, t=t, size=size,
                             zero=zero).encode()


def ptx_add_rows(name: str, count: int, n: int, dtype: DType) -> bytes:
    """out[i] = x[i] + y[i % n]: a bias of n added to each row."""
    t, size, _ = _PTX_TYPES[dtype]
    load_y = (f"    rem.u32 %r5, %r4, {n};\n    ld.param.u64 %rd4, [y];\n"
              f"    mul.wide.u32 %rd5, %r5, {size};\n    add.s64 %rd6, %rd4, %rd5;\n"
              f"    ld.global.{t} %f2, [%rd6];\n")
    return PTX_MAP.format(name=name, params=".param .u64 x, .param .u64 y, .param .u64 out",
                          count=count, t=t, size=size, load_y=load_y,
                          body=f"add.rn.{t} %f3, %f1, %f2;").encode()


def ptx_relu(name: str, count: int, dtype: DType) -> bytes:
    """out[i] = max(x[i], 0), NaN kept (an ordered compare is false for it)."""
    t, size, zero = _PTX_TYPES[dtype]
    body = f"setp.lt.{t} %p2, %f1, {zero};\n    selp.{t} %f3, {zero}, %f1, %p2;"
    return PTX_MAP.format(name=name, params=".param .u64 x, .param .u64 out", count=count,
                          t=t, size=size, load_y="", body=body).encode()


def matmul_exe(name: str, m: int, n: int, k: int, device: Device = CPU,
               dtype: DType = F64) -> Executable:
    args = (T(dtype, (m, k)), T(dtype, (k, n)), T(dtype, (m, n)))
    if device is CPU:
        return Executable(name, KernelKind.MATMUL, CPU, args)
    return cuda_exe(name, KernelKind.MATMUL, args, ptx_matmul(name, m, n, k, dtype), m * n)


def cuda_exe(name: str, kind: KernelKind, args: tuple[T, ...], image: bytes,
             threads: int) -> Executable:
    """A cuda executable running `image` with one thread per output element."""
    return Executable(name, kind, CUDA, args, (), image, (-(-threads // BLOCK), 1, 1),
                      (BLOCK, 1, 1))


def builtin(device: Device = CPU) -> hf.Module:
    """The built-in program: CONST A, CONST W, ALLOC, DISPATCH linear_0, PRINT (v3)."""
    rodata = A.tobytes() + W.tobytes()
    main = Function("main", (Command.const(0, 0, 32), Command.const(1, 32, 32),
                             Command.alloc(2, 32), Command.dispatch(0, (0, 1, 2)),
                             Command.print(2, 2, 2)))
    return hf.Module(3, (main,), rodata, (matmul_exe("linear_0", 2, 2, 2, device),))


def mlp(device: Device = CPU, dtype: DType = F32) -> hf.Module:
    """v4: y = relu(x . W + b) with x an input [2x3] and y an output [2x4], all on `device`."""
    w = np.arange(12, dtype=dtype.numpy).reshape(3, 4) / 4 - 1
    b = np.array([0.5, -1.0, 0.25, 2.0], dtype=dtype.numpy)
    x, wt, bt, h, y = T(dtype, (2, 3)), T(dtype, (3, 4)), T(dtype, (4,)), T(dtype, (2, 4)), \
        T(dtype, (2, 4))
    kinds = [("linear_0", KernelKind.MATMUL, (x, wt, h)), ("add_1", KernelKind.ADD, (h, bt, h)),
             ("relu_2", KernelKind.RELU, (h, y))]
    if device is CPU:
        exes = tuple(Executable(n, k, CPU, a) for n, k, a in kinds)
    else:
        exes = (matmul_exe("linear_0", 2, 4, 3, CUDA, dtype),
                cuda_exe("add_1", KernelKind.ADD, kinds[1][2], ptx_add_rows("add_1", 8, 4, dtype),
                         8),
                cuda_exe("relu_2", KernelKind.RELU, kinds[2][2], ptx_relu("relu_2", 8, dtype), 8))
    slots = tuple(Slot(device, t) for t in (x, wt, h, bt, h, y))
    wbytes = w.tobytes()
    main = Function("main", (
        Command.input(0, 0), Command.const(1, 0, len(wbytes)), Command.alloc(2, h.nbytes),
        Command.dispatch(0, (0, 1, 2)), Command.const(3, len(wbytes), b.nbytes),
        Command.alloc(4, h.nbytes), Command.dispatch(1, (2, 3, 4)), Command.alloc(5, y.nbytes),
        Command.dispatch(2, (4, 5)), Command.output(5, 0), Command.print(5, 2, 4)))
    return hf.Module(4, (main,), wbytes + b.tobytes(), exes, slots)


def mlp_reference(x: np.ndarray, module: hf.Module) -> np.ndarray:
    dtype = module.slots[1].type.dtype.numpy
    w = np.frombuffer(bytes(module.rodata), dtype=dtype, count=12).reshape(3, 4)
    b = np.frombuffer(bytes(module.rodata), dtype=dtype, count=4, offset=w.nbytes)
    return np.maximum(x @ w + b, 0)


def hetero() -> hf.Module:
    """v4 across devices: x (cpu) -COPY-> cuda, matmul on cuda, -COPY-> cpu, relu on cpu, and
    the result twice (out 0 on cpu, out 1 the cuda product)."""
    x, w, h = T(F64, (2, 2)), T(F64, (2, 2)), T(F64, (2, 2))
    exes = (matmul_exe("linear_0", 2, 2, 2, CUDA),
            Executable("relu_1", KernelKind.RELU, CPU, (h, h)))
    slots = (Slot(CPU, x), Slot(CUDA, x), Slot(CUDA, w), Slot(CUDA, h), Slot(CPU, h),
             Slot(CPU, h))
    main = Function("main", (
        Command.input(0, 0), Command.copy(1, 0), Command.const(2, 0, 32), Command.alloc(3, 32),
        Command.dispatch(0, (1, 2, 3)), Command.copy(4, 3), Command.alloc(5, 32),
        Command.dispatch(1, (4, 5)), Command.output(5, 0), Command.output(3, 1)))
    return hf.Module(4, (main,), W.tobytes(), exes, slots)


OFFSETS = np.array([0, 3, -7, 2**31 - 1], dtype=np.int32)


def named_io(names: tuple[tuple[str, ...], tuple[str, ...]] = (
        ("tokens", "mask"), ("mask", "tokens", "offsets"))) -> hf.Module:
    """v5 without kernels: `main(tokens: 2x3xi64, mask: 3xi1) -> (mask: 3xi1, tokens: 2x3xi64,
    offsets: 4xi32)` returns its inputs (the tokens through a COPY) and a constant, OFFSETS,
    and PRINTs the tokens and the mask; `plain(3xi32) -> (3xi32)` returns its input and names
    nothing. `names` renames main's inputs and outputs (empty: none)."""
    tokens, mask, offsets, ints = T(I64, (2, 3)), T(BOOL, (3,)), T(I32, (4,)), T(I32, (3,))
    slots = tuple(Slot(CPU, t) for t in (tokens, mask, tokens, offsets, ints))
    main = Function("main", (
        Command.input(0, 0), Command.input(1, 1), Command.copy(2, 0),
        Command.const(3, 0, offsets.nbytes), Command.print(0, 2, 3), Command.print(1, 1, 3),
        Command.output(1, 0), Command.output(2, 1), Command.output(3, 2)), *names)
    plain = Function("plain", (Command.input(4, 0), Command.output(4, 0)))
    return hf.Module(5, (main, plain), OFFSETS.tobytes(), (), slots)


HOST = Path(__file__).resolve().parent / "fixtures" / "host"
W43 = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5) / 4
BATCH = dims.Expr.symbol("batch")


def dynamic_linear(hi: int = 2**40) -> hf.Module:
    """v6, dynamic: `main(x: batchx4xf32) -> (y: batchx3xf32)`, y = relu(x . W43), batch in
    1..`hi`: two compiled cpu kernels (fixtures/host/rows_matmul.o, rows_relu.o) over the
    rows, each told `batch` as an int64 after its buffers, its grid `batch` rows."""
    x, w, h = T(F32, (BATCH, 4)), T(F32, (4, 3)), T(F32, (BATCH, 3))
    exes = tuple(Executable(name, kind, CPU, args, image=(HOST / f"{name}.o").read_bytes(),
                            grid=(BATCH, 1, 1), block=(1, 1, 1), cpu_level=3, operands=(0,))
                 for name, kind, args in (("rows_matmul", KernelKind.MATMUL, (x, w, h)),
                                          ("rows_relu", KernelKind.RELU, (h, h))))
    main = Function("main", (
        Command.input(0, 0), Command.const(1, 0, W43.nbytes), Command.alloc(2, h.nbytes),
        Command.dispatch(0, (0, 1, 2)), Command.alloc(3, h.nbytes), Command.dispatch(1, (2, 3)),
        Command.output(3, 0)), ("x",), ("y",))
    return hf.Module(6, (main,), W43.tobytes(), exes, tuple(Slot(CPU, t) for t in (x, w, h, h)),
                     symbols=(Symbol("batch", 1, hi),))


def dynamic_cache() -> hf.Module:
    """v6, dynamic, no kernels: `main(ids: batchxseqxi64, mask: batchx(past + seq)xi1) ->
    (mask, ids)`, `past` solved from the mask once `seq` is known from the ids."""
    batch, past, seq = (dims.Expr.symbol(n) for n in ("batch", "past", "seq"))
    ids, mask = T(I64, (batch, seq)), T(BOOL, (batch, past + seq))
    main = Function("main", (Command.input(0, 0), Command.input(1, 1), Command.copy(2, 1),
                             Command.output(2, 0), Command.output(0, 1)),
                    ("ids", "mask"), ("mask", "ids"))
    return hf.Module(6, (main,), b"", (), tuple(Slot(CPU, t) for t in (ids, mask, mask)),
                     symbols=(Symbol("batch", 1, 64), Symbol("past", 0, 4096),
                              Symbol("seq", 1, 512)))


def ptx_relu_rows(name: str, width: int, dtype: DType) -> bytes:
    """out[i] = max(x[i], 0) for i < batch * `width`, `batch` the kernel's last parameter
    (a dynamic module's size operand)."""
    ptx = ptx_relu(name, 0, dtype).decode()
    ptx = ptx.replace(".param .u64 out)", ".param .u64 out, .param .u64 batch)")
    count = (f"    ld.param.u64 %rd9, [batch];\n    cvt.u32.u64 %r6, %rd9;\n"
             f"    mul.lo.u32 %r7, %r6, {width};\n    setp.ge.u32 %p1, %r4, %r7;")
    return ptx.replace("    setp.ge.u32 %p1, %r4, 0;", count).encode()


def dynamic_relu_cuda() -> hf.Module:
    """v6, dynamic, on cuda: `main(x: batchx3xf32) -> (y: batchx3xf32)`, y = relu(x), one
    thread per element, `ceildiv(3 * batch, 128)` blocks, the kernel told `batch`."""
    t = T(F32, (BATCH, 3))
    exe = Executable("relu_rows", KernelKind.RELU, CUDA, (t, t), (),
                     ptx_relu_rows("relu_rows", 3, F32), (dims.ceildiv(3 * BATCH, BLOCK), 1, 1),
                     (BLOCK, 1, 1), operands=(0,))
    main = Function("main", (Command.input(0, 0), Command.alloc(1, t.nbytes),
                             Command.dispatch(0, (0, 1)), Command.output(1, 0)), ("x",), ("y",))
    return hf.Module(6, (main,), b"", (exe,), (Slot(CUDA, t), Slot(CUDA, t)),
                     symbols=(Symbol("batch", 1, 4096),))


STR = DType.STRING
#: ONNX StringNormalizer's case_change_action as a param.
NONE, LOWER, UPPER = 0.0, 1.0, 2.0


def strnorm(x: tuple[int, ...] = (4,), out: tuple[int, ...] = (3,),
            stopwords: tuple[str, ...] = ("monday",), action: float = UPPER,
            sensitive: bool = True, strings: tuple[str, ...] | None = None,
            dynamic: bool = False) -> hf.Module:
    """`main(x: str) -> (y: str)`, one `string_normalizer` as an ONNX StringNormalizer
    compiles: its stopwords a constant of handles into the module's strings (no stopwords:
    a 0-byte constant). `dynamic`: x's count a size symbol `n` in 1..1000 (y's stays fixed:
    it depends on the data)."""
    table = stopwords if strings is None else strings
    handles = np.array([table.index(w) for w in stopwords], dtype=np.int64)
    tx, ts, ty = T(STR, (dims.Expr.symbol("n"),) if dynamic else x), \
        T(STR, (len(stopwords),)), T(STR, out)
    exe = Executable("string_normalizer", KernelKind.LIBRARY, CPU, (tx, ts, ty),
                     (action, float(sensitive)))
    main = Function("main", (Command.input(0, 0), Command.const(1, 0, handles.nbytes),
                             Command.alloc(2, ty.nbytes), Command.dispatch(0, (0, 1, 2)),
                             Command.output(2, 0)), ("x",), ("y",))
    symbols = (Symbol("n", 1, 1000),) if dynamic else ()
    return hf.Module(6, (main,), handles.tobytes(), (exe,), (Slot(CPU, tx), Slot(CPU, ts),
                                                              Slot(CPU, ty)),
                     symbols=symbols, strings=table)


def write(directory: Path, name: str, module: hf.Module) -> Path:
    path = Path(directory) / name
    path.write_bytes(hf.build(module))
    return path
