"""The PTX executor behind the fake driver (ptx_exec): it runs what the compiler emitted,
faults where a GPU would, and catches a kernel that is wrong by one instruction."""

import dataclasses
import itertools

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
import ptx_exec
from conftest import FIXTURES
from fake_driver import FakeDriver, main
from test_examples_cuda import random_inputs, relative_error

HEADER = ".version 7.0\n.target sm_75\n.address_size 64\n"
BASE = 1 << 40


def kernel(body: str, params: str = ".param .u64 p0", regs: str = "") -> ptx_exec.Module:
    decls = (".reg .pred %p<8>;\n.reg .b32 %r<16>;\n.reg .b64 %rd<16>;\n.reg .f32 %f<8>;\n"
             + regs)
    return ptx_exec.Module(f"{HEADER}.visible .entry k({params})\n{{\n{decls}{body}\n}}\n"
                           .encode())


def launch(module: ptx_exec.Module, arrays: list[np.ndarray], block=(32, 1, 1),
           grid=(1, 1, 1)) -> list[np.ndarray]:
    """Runs kernel k with each array in its own allocation; returns the arrays after."""
    regions, addresses = {}, []
    for i, a in enumerate(arrays):
        addresses.append(BASE + i * (1 << 20))
        regions[addresses[-1]] = bytearray(np.ascontiguousarray(a).tobytes())
    module.launch("k", grid, block, np.array(addresses, np.uint64).tobytes(),
                  ptx_exec.Memory(regions))
    return [np.frombuffer(regions[at], a.dtype).reshape(a.shape)
            for at, a in zip(addresses, arrays, strict=True)]


STORE_TID = """
ld.param.u64 %rd1, [p0];
mov.u32 %r1, %tid.x;
mul.wide.u32 %rd2, %r1, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r1;
ret;
"""


def test_a_thread_per_element_runs_with_its_ids():
    (out,) = launch(kernel(STORE_TID), [np.zeros(32, np.uint32)])
    assert out.tolist() == list(range(32))


def test_an_access_past_the_allocation_faults():
    with pytest.raises(ptx_exec.FaultError, match="outside every allocation"):
        launch(kernel(STORE_TID), [np.zeros(31, np.uint32)])


def test_a_misaligned_vector_access_faults():
    body = """
ld.param.u64 %rd1, [p0];
ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1+4];
ret;
"""
    with pytest.raises(ptx_exec.FaultError, match="not aligned to its size"):
        launch(kernel(body), [np.zeros(64, np.uint32)])


def test_an_unknown_instruction_is_refused_by_name():
    with pytest.raises(ptx_exec.UnsupportedError, match=r"line \d+: 'frobnicate.b32 .*"
                                                        r"'frobnicate.b32' is not one"):
        kernel("frobnicate.b32 %r1, %r2;\nret;")


SHARED = """
.shared .align 4 .b8 buf[128];
mov.u32 %r1, %tid.x;
mul.wide.u32 %rd1, %r1, 4;
mov.u64 %rd2, buf;
add.s64 %rd3, %rd2, %rd1;
st.shared.u32 [%rd3], %r1;
{barrier}
add.u32 %r2, %r1, 1;
and.b32 %r2, %r2, 31;
mul.wide.u32 %rd4, %r2, 4;
add.s64 %rd5, %rd2, %rd4;
ld.shared.u32 %r3, [%rd5];
ld.param.u64 %rd6, [p0];
add.s64 %rd7, %rd6, %rd1;
st.global.u32 [%rd7], %r3;
ret;
"""


def test_shared_memory_through_a_barrier_and_a_race_without_one():
    (out,) = launch(kernel(SHARED.format(barrier="bar.sync 0;")), [np.zeros(32, np.uint32)])
    assert out.tolist() == [(i + 1) % 32 for i in range(32)]
    with pytest.raises(ptx_exec.RaceError, match="reads shared bytes another thread"):
        launch(kernel(SHARED.format(barrier="")), [np.zeros(32, np.uint32)])


def test_threads_at_different_barriers_fail():
    body = """
mov.u32 %r1, %tid.x;
setp.lt.u32 %p1, %r1, 16;
@%p1 bra LOW;
bar.sync 0;
bra END;
LOW:
bar.sync 0;
END:
ret;
"""
    with pytest.raises(ptx_exec.BarrierError, match="different barriers"):
        launch(kernel(body), [np.zeros(1, np.uint32)])


def test_divergent_loops_reconverge():
    """Thread i adds 1.5 to its element i times: the loop exits at a different trip per
    thread, and every thread stores."""
    body = """
ld.param.u64 %rd1, [p0];
mov.u32 %r1, %tid.x;
mov.f32 %f1, 0f00000000;
mov.u32 %r2, 0;
LOOP:
setp.ge.u32 %p1, %r2, %r1;
@%p1 bra DONE;
add.rn.f32 %f1, %f1, 0f3FC00000;
add.u32 %r2, %r2, 1;
bra LOOP;
DONE:
mul.wide.u32 %rd2, %r1, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.f32 [%rd3], %f1;
ret;
"""
    (out,) = launch(kernel(body), [np.zeros(64, np.float32)], block=(64, 1, 1))
    assert out.tolist() == [1.5 * i for i in range(64)]


def test_a_butterfly_shuffle_sums_a_warp():
    body = """
ld.param.u64 %rd1, [p0];
mov.u32 %r1, %tid.x;
cvt.rn.f32.u32 %f1, %r1;
mov.b32 %r2, %f1;
shfl.sync.bfly.b32 %r3, %r2, 16, 31, -1;
mov.b32 %f2, %r3;
add.rn.f32 %f1, %f1, %f2;
mov.b32 %r2, %f1;
shfl.sync.bfly.b32 %r3, %r2, 8, 31, -1;
mov.b32 %f2, %r3;
add.rn.f32 %f1, %f1, %f2;
mov.b32 %r2, %f1;
shfl.sync.bfly.b32 %r3, %r2, 4, 31, -1;
mov.b32 %f2, %r3;
add.rn.f32 %f1, %f1, %f2;
mov.b32 %r2, %f1;
shfl.sync.bfly.b32 %r3, %r2, 2, 31, -1;
mov.b32 %f2, %r3;
add.rn.f32 %f1, %f1, %f2;
mov.b32 %r2, %f1;
shfl.sync.bfly.b32 %r3, %r2, 1, 31, -1;
mov.b32 %f2, %r3;
add.rn.f32 %f1, %f1, %f2;
mul.wide.u32 %rd2, %r1, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.f32 [%rd3], %f1;
ret;
"""
    (out,) = launch(kernel(body), [np.zeros(64, np.float32)], block=(64, 1, 1))
    assert out.tolist() == [float(sum(range(32)))] * 32 + [float(sum(range(32, 64)))] * 32


def test_directed_rounding_and_saturation():
    """fma.rm rounds toward -inf (libdevice's exp relies on it); cvt.sat clamps to [0, 1];
    a float written as bits keeps its bits in a b32 move."""
    body = """
ld.param.u64 %rd1, [p0];
mov.f32 %f1, 0f3F800001;
mov.f32 %f2, 0f3F800001;
fma.rm.f32 %f3, %f1, %f2, 0fBF800000;
fma.rp.f32 %f4, %f1, %f2, 0fBF800000;
cvt.sat.f32.f32 %f5, 0f40000000;
mov.b32 %r1, 0f4B400001;
st.global.f32 [%rd1], %f3;
st.global.f32 [%rd1+4], %f4;
st.global.f32 [%rd1+8], %f5;
st.global.u32 [%rd1+12], %r1;
ret;
"""
    (out,) = launch(kernel(body), [np.zeros(4, np.float32)], block=(1, 1, 1))
    # (1 + 2^-23)^2 - 1 = 2^-22 + 2^-46, between two floats: down, then up (nearest: down)
    assert out[0] == np.float32(2 ** -22)
    assert out[1] == np.nextafter(np.float32(2 ** -22), np.float32(1))
    assert out[2] == 1.0
    assert out[3:].view(np.uint32)[0] == 0x4B400001


def test_byte_permutes():
    """prmt picks d's bytes from {b, a}: by selector nibbles (the top bit replicating the
    picked byte's sign; the compiler's i1/i8 loads take a byte out of a word so) and by each
    mode's table."""
    body = """
ld.param.u64 %rd1, [p0];
mov.b32 %r1, 0x44332211;
mov.b32 %r2, 0x88776655;
prmt.b32 %r3, %r1, %r2, 0x7773U;
st.global.u32 [%rd1], %r3;
prmt.b32 %r3, %r1, %r2, 0x0F08;
st.global.u32 [%rd1+4], %r3;
prmt.b32.f4e %r3, %r1, %r2, 1;
st.global.u32 [%rd1+8], %r3;
prmt.b32.b4e %r3, %r1, %r2, 0;
st.global.u32 [%rd1+12], %r3;
prmt.b32.rc16 %r3, %r1, %r2, 1;
st.global.u32 [%rd1+16], %r3;
prmt.b32.ecr %r3, %r1, %r2, 2;
st.global.u32 [%rd1+20], %r3;
ret;
"""
    (out,) = launch(kernel(body), [np.zeros(6, np.uint32)], block=(1, 1, 1))
    assert [hex(v) for v in out] == ["0x88888844", "0x11ff1100", "0x55443322", "0x66778811",
                                     "0x44334433", "0x33332211"]


# ---- module-scope variables and calls ------------------------------------------------------

GLOBALS = HEADER + """
.global .align 4 .b32 table[4] = {10, 20, 30, 40};
.const .align 4 .f32 scale = 0f40000000;
.global .align 8 .b8 unset[8];
.visible .entry k(.param .u64 p0)
{
.reg .b32 %r<8>;
.reg .b64 %rd<16>;
.reg .f32 %f<2>;
mov.u32 %r1, %tid.x;
and.b32 %r2, %r1, 3;
mul.wide.u32 %rd1, %r2, 4;
mov.u64 %rd2, table;
add.s64 %rd3, %rd2, %rd1;
ld.global.nc.u32 %r3, [%rd3];
ld.const.f32 %f1, [scale];
cvt.rzi.u32.f32 %r4, %f1;
add.u32 %r3, %r3, %r4;
ld.global.u32 %r5, [unset+4];
add.u32 %r3, %r3, %r5;
ld.param.u64 %rd4, [p0];
mul.wide.u32 %rd5, %r1, 4;
add.s64 %rd6, %rd4, %rd5;
st.global.u32 [%rd6], %r3;
ret;
}
.visible .entry past()
{
.reg .b32 %r<2>;
.reg .b64 %rd<4>;
cvta.global.u64 %rd1, table;
ld.global.u32 %r1, [%rd1+16];
ret;
}
"""


def test_a_global_table_is_read_through_its_address():
    module = ptx_exec.Module(GLOBALS.encode())
    (out,) = launch(module, [np.zeros(32, np.uint32)])
    assert out.tolist() == [10 * (i % 4 + 1) + 2 for i in range(32)]
    with pytest.raises(ptx_exec.FaultError, match="outside every allocation"):
        module.launch("past", (1, 1, 1), (1, 1, 1), b"", ptx_exec.Memory({}))


def test_each_loaded_module_has_its_variables_apart_from_the_allocations():
    fake = FakeDriver()
    _, buffer = fake.cuMemAlloc(64)
    handles = [fake.cuModuleLoadData(GLOBALS.encode())[1] for _ in range(2)]
    spans = [(a, a + len(r)) for h in handles for a, r in fake.modules[h].globals.items()]
    spans.append((buffer, buffer + 64))
    spans.sort()
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    assert len(spans) == 7


CALLS = HEADER + """
.func (.param .b32 out) mix(.param .b32 x, .param .b32 y)
;
.func (.param .b32 out) mix(.param .b32 x, .param .b32 y)
{
.reg .pred %p<2>;
.reg .b32 %r<4>;
ld.param.b32 %r1, [x];
ld.param.b32 %r2, [y];
setp.eq.s32 %p1, %r1, 0;
@%p1 bra $L_zero;
shl.b32 %r3, %r1, 1;
add.s32 %r3, %r3, %r2;
st.param.b32 [out], %r3;
ret;
$L_zero:
st.param.b32 [out], %r2;
ret;
}
.func store(.param .b64 at, .param .b32 v)
{
.reg .b64 %rd<2>;
.reg .b32 %r<2>;
ld.param.b64 %rd1, [at];
ld.param.b32 %r1, [v];
st.global.u32 [%rd1], %r1;
ret;
}
.visible .entry k(.param .u64 p0)
{
.reg .b32 %r<8>;
.reg .b64 %rd<4>;
mov.u32 %r1, %tid.x;
and.b32 %r2, %r1, 3;
{
.param .b32 param0;
.param .b32 param1;
.param .b32 retval0;
st.param.b32 [param0], %r2;
st.param.b32 [param1], %r1;
call.uni (retval0), mix, (param0, param1);
ld.param.b32 %r3, [retval0];
}
mov.u32 %r5, 100;
{
.param .b32 param0;
.param .b32 param1;
.param .b32 retval0;
st.param.b32 [param0], %r3;
st.param.b32 [param1], %r5;
call (retval0), mix, (param0, param1);
ld.param.b32 %r4, [retval0];
}
ld.param.u64 %rd1, [p0];
mul.wide.u32 %rd2, %r1, 4;
add.s64 %rd3, %rd1, %rd2;
{
.param .b64 param0;
.param .b32 param1;
st.param.b64 [param0], %rd3;
st.param.b32 [param1], %r4;
call.uni store, (param0, param1);
}
ret;
}
"""


def test_a_function_is_called_twice_with_parameters_and_a_result():
    (out,) = launch(ptx_exec.Module(CALLS.encode()), [np.zeros(32, np.uint32)])
    first = [2 * (t % 4) + t if t % 4 else t for t in range(32)]
    assert out.tolist() == [2 * m + 100 if m else 100 for m in first]


def test_a_recursive_call_is_refused_by_name():
    text = HEADER + """
.func (.param .b32 out) down(.param .b32 x)
{
.reg .b32 %r<2>;
ld.param.b32 %r1, [x];
{
.param .b32 param0;
.param .b32 retval0;
st.param.b32 [param0], %r1;
call.uni (retval0), down, (param0);
ld.param.b32 %r1, [retval0];
}
st.param.b32 [out], %r1;
ret;
}
.visible .entry k()
{
.reg .b32 %r<2>;
{
.param .b32 param0;
.param .b32 retval0;
st.param.b32 [param0], %r1;
call.uni (retval0), down, (param0);
}
ret;
}
"""
    with pytest.raises(ptx_exec.UnsupportedError, match=r"recursive call of 'down' "
                                                        r"\(down -> down\)"):
        ptx_exec.Module(text.encode())


def test_carries_funnel_shifts_and_a_fused_f64_fma():
    body = """
ld.param.u64 %rd1, [p0];
mov.u32 %r1, -1;
mov.u32 %r2, 1;
add.cc.u32 %r3, %r1, %r2;
addc.u32 %r4, 0, 0;
st.global.u32 [%rd1], %r3;
st.global.u32 [%rd1+4], %r4;
sub.cc.u32 %r3, 0, 1;
subc.u32 %r4, 5, 0;
st.global.u32 [%rd1+8], %r4;
mov.u32 %r5, 0x80000001;
mov.u32 %r6, 0x00000003;
shf.l.wrap.b32 %r7, %r5, %r6, 33;
st.global.u32 [%rd1+12], %r7;
shf.r.clamp.b32 %r7, %r5, %r6, 1;
st.global.u32 [%rd1+16], %r7;
mov.f64 %fd1, 0d3FF0000000000001;
mov.f64 %fd2, 0d3FEFFFFFFFFFFFFE;
fma.rn.f64 %fd3, %fd1, %fd2, 0dBFF0000000000000;
st.global.f64 [%rd1+24], %fd3;
ret;
"""
    module = kernel(body, regs=".reg .f64 %fd<4>;\n")
    (out,) = launch(module, [np.zeros(8, np.uint32)], block=(1, 1, 1))
    assert out[:5].tolist() == [0, 1, 4, 7, 0xC0000000]
    # (1 + 2**-52) * (1 - 2**-52) - 1 is -2**-104 exactly; unfused, the product rounds to 1
    assert (1 + 2.0**-52) * (1 - 2.0**-52) - 1 == 0
    assert out[6:].view(np.float64)[0] == -2.0**-104


# ---- the compiled kernels ------------------------------------------------------------------

def _mutate(path, kernel_name: str, old: bytes, new: bytes) -> bytes:
    """The module at `path` with the first `old` in one kernel's PTX replaced by `new`."""
    assert len(old) == len(new)
    module = hf.parse(path.read_bytes())
    exes = list(module.executables)
    index = next(i for i, e in enumerate(exes) if e.name == kernel_name)
    image = bytes(exes[index].image)
    assert old in image, f"{old!r} is not in {kernel_name}'s image"
    exes[index] = dataclasses.replace(exes[index], image=image.replace(old, new, 1))
    return hf.build(dataclasses.replace(module, executables=tuple(exes)))


def _run_against_cpu(tmp_path, data: bytes, name: str) -> float:
    path = tmp_path / "m.hxb"
    path.write_bytes(data)
    with hr.load(path, device="cuda", driver=FakeDriver()) as gpu, \
            hr.load(FIXTURES / f"{name}.hxb") as cpu:
        (x,) = random_inputs(cpu, 0)
        return relative_error(gpu.main(x), cpu.main(x))


@pytest.mark.parametrize("kernel_name,old,new", [
    ("linear_add_relu_0", b"fma.rn.f32", b"sub.rn.f32"),  # a multiply-add made a subtract
    ("softmax_3", b"add.rn.f32", b"sub.rn.f32"),
])
def test_one_changed_instruction_of_a_compiled_kernel_is_caught(tmp_path, kernel_name, old, new):
    path = FIXTURES / "mlp-f32-cuda.hxb"
    assert _run_against_cpu(tmp_path, path.read_bytes(), "mlp-f32") <= 1e-5
    assert _run_against_cpu(tmp_path, _mutate(path, kernel_name, old, new), "mlp-f32") > 1e-3


def test_a_bound_off_by_one_is_caught(tmp_path):
    """The softmax's rows: 8 of them, one thread each; `tid > 7` made `tid > 6` leaves the
    last row unwritten."""
    path = FIXTURES / "mlp-f32-cuda.hxb"
    mutant = _mutate(path, "softmax_3", b"%r1, 7;", b"%r1, 6;")
    assert _run_against_cpu(tmp_path, mutant, "mlp-f32") > 1e-3


def test_the_command_runs_a_module_on_the_executor(capsys):
    assert main(["run", str(FIXTURES / "builtin-cuda.hxb"), "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == ["8.000000 17.000000 ",
                                                         "12.000000 14.000000 "]


def test_the_fused_f64_fma_is_the_exact_value_rounded_once():
    """`_fma64`'s vectorised error-free path against fractions: products of every scale,
    cancellation to the last bits, values one rounding step from a tie, huge and tiny operands
    (where it falls back to fractions), infinities and zeros."""
    from fractions import Fraction

    rng = np.random.default_rng(5)
    n = 4000
    a = rng.standard_normal(n) * np.exp2(rng.integers(-60, 60, n))
    b = rng.standard_normal(n) * np.exp2(rng.integers(-60, 60, n))
    c = -(a * b) * (1 + rng.standard_normal(n) * 1e-15)
    c[::3] = rng.standard_normal(n)[::3]
    near_tie = np.arange(7, n, 13)
    a[near_tie], b[near_tie] = 1.0 + 2.0 ** -30, 1.0 + 2.0 ** -23
    a[::97], b[::89], c[::101], a[::103] = 1e300, 1e-300, np.inf, 0.0
    with np.errstate(all="ignore"):
        got = ptx_exec._fma64(a, b, c)
        want = a * b + c
    for i in range(n):
        x, y, z = float(a[i]), float(b[i]), float(c[i])
        if all(map(np.isfinite, (x, y, z))) and not ((x == 0 or y == 0) and z == 0):
            value = Fraction(x) * Fraction(y) + Fraction(z)
            try:
                want[i] = float(value) if value else 0.0
            except OverflowError:  # beyond the largest double: rounds to infinity
                want[i] = np.inf if value > 0 else -np.inf
    np.testing.assert_array_equal(got, want)
