"""compile_kernels: every cuda kernel gets a real device image naming it, with its geometry.

The images are checked without a GPU: the fatbin container is read by
`hexir_format.images` (and by `cuobjdump` too where the toolkit ships it), the PTX must
declare `.entry <kernel>`, each CUBIN must define the kernel as a FUNC symbol.
"""

import os
import shutil
import stat
import subprocess

import pytest

from hexir_compiler.dialects import context
from hexir_compiler.errors import CompileError
from hexir_compiler.mlir import ir
from hexir_compiler.pipeline import Options, lower
from hexir_compiler.target import cuda_toolkit
from hexir_compiler.target.cuda import DeviceImage, architectures, compile_kernels
from hexir_format.images import parts

try:
    TOOLKIT = cuda_toolkit.find_toolkit()
except CompileError:
    TOOLKIT = None
needs_toolkit = pytest.mark.skipif(TOOLKIT is None, reason="no CUDA toolkit (ptxas, libdevice)")
CUOBJDUMP = shutil.which("cuobjdump") or next(
    (p for p in ("/usr/local/cuda/bin/cuobjdump",) if os.access(p, os.X_OK)), None
)

T2X2 = "tensor<2x2xf64>"
BUILTIN_2X2 = f"""
func.func @main() {{
  %a = "hexir.constant"() {{value = dense<[[1.0, 2.0], [3.0, 4.0]]> : {T2X2}}} : () -> {T2X2}
  %b = "hexir.constant"() {{value = dense<[[5.0, 6.0], [7.0, 8.0]]> : {T2X2}}} : () -> {T2X2}
  %c = "hexir.linear"(%a, %b) {{device = "cuda"}} : ({T2X2}, {T2X2}) -> {T2X2}
  "hexir.print"(%c) : ({T2X2}) -> ()
  func.return
}}
"""


def elementwise(op: str, elem: str, shape: str = "3x300", device: str = "cuda") -> str:
    t = f"tensor<{shape}x{elem}>"
    return f"""
func.func @main(%x: {t}) -> {t} {{
  %y = "hexir.{op}"(%x) {{device = "{device}"}} : ({t}) -> {t}
  func.return %y : {t}
}}
"""


def to_llvm(module: ir.Module, target: str | None = None) -> ir.Module:
    """The program at mlir-llvm, where compile_kernels finds the NVVM kernels."""
    return lower(module, Options("hxb", chip=target), "mlir-llvm")


def kernels(program: str, target: str | None = None) -> dict[str, DeviceImage]:
    with context(), ir.Location.unknown():
        module = to_llvm(ir.Module.parse(program), target)
        return compile_kernels(module, target)


def assert_names_kernel(image: DeviceImage, name: str, archs: tuple[int, ...]) -> None:
    assert image.image[:4] == bytes([0x50, 0xED, 0x55, 0xBA])
    assert sorted((p.kind, p.arch) for p in parts(image.image)) == sorted(
        [*(("ptx", arch) for arch in archs), *(("elf", arch) for arch in archs)]
    )
    assert all(p.kernels == (name,) for p in parts(image.image))


@needs_toolkit
def test_matmul_2x2_is_a_fatbin_with_ptx_for_sm75_naming_the_kernel():
    images = kernels(BUILTIN_2X2)
    assert list(images) == ["linear_0"]
    image = images["linear_0"]
    assert_names_kernel(image, "linear_0", (75,))
    ptx = next(p for p in parts(image.image) if p.kind == "ptx")
    assert (ptx.kind, ptx.arch, ptx.kernels) == ("ptx", 75, ("linear_0",))
    # 2x2 output: one block; threads cover the tile (x columns, y rows)
    assert image.grid == (1, 1, 1)
    bx, by, bz = image.block
    assert bx * by >= 4 and by >= 2 and bz == 1


@needs_toolkit
def test_elementwise_kernel_for_sm90_adds_sm90_ptx_and_its_cubin():
    images = kernels(elementwise("relu", "f32"), target="sm_90")
    image = images["relu_0"]
    assert_names_kernel(image, "relu_0", (75, 90))
    texts = {p.arch: p.payload for p in parts(image.image) if p.kind == "ptx"}
    assert b".target sm_90" in texts[90] and b".target sm_75" in texts[75]
    # 900 elements, 4 per thread (300 divides by 4), over blocks of threads on x only
    gx, gy, gz = image.grid
    bx, by, bz = image.block
    assert gx * bx >= 225 and (gx - 1) * bx < 225
    assert (gy, gz, by, bz) == (1, 1, 1, 1)
    assert b"ld.global.v4" in texts[90] and b"st.global.v4" in texts[90]  # 128-bit accesses


@needs_toolkit
@pytest.mark.parametrize(("elem", "width", "fma"), [("f32", b"v4.b32", b"fma.rn.f32"),
                                                    ("f64", b"v2.b64", b"fma.rn.f64")])
def test_the_gemm_stages_through_shared_memory_with_128_bit_loads(elem, width, fma):
    t = f"tensor<64x64x{elem}>"
    program = f"""
func.func @main(%a: {t}, %b: {t}) -> {t} {{
  %c = "hexir.matmul"(%a, %b) {{device = "cuda"}} : ({t}, {t}) -> {t}
  func.return %c : {t}
}}
"""
    image = kernels(program, target="sm_90")["matmul_0"].image
    ptx = next(p.payload for p in parts(image) if p.kind == "ptx" and p.arch == 90)
    assert b"ld.global." + width in ptx and b"st.shared" in ptx and b"bar.sync" in ptx
    assert fma in ptx and b"ld.shared" in ptx


@needs_toolkit
def test_every_image_part_uses_the_bare_pointer_convention():
    image = kernels(elementwise("exp", "f64", "4x8"))["exp_0"].image
    ptx = image[image.index(b".entry exp_0(") :]
    params = ptx[: ptx.index(b")")].count(b".param")
    assert params == 2  # one device pointer per buffer, not MLIR's memref descriptors


@needs_toolkit
@pytest.mark.skipif(CUOBJDUMP is None, reason="cuobjdump is not installed")
def test_cuobjdump_lists_the_cubins_and_the_ptx(tmp_path):
    path = tmp_path / "relu.fatbin"
    path.write_bytes(kernels(elementwise("relu", "f64"), target="sm_90")["relu_0"].image)
    elf = subprocess.run(
        [CUOBJDUMP, "--list-elf", str(path)], capture_output=True, text=True, check=True
    )
    ptx = subprocess.run(
        [CUOBJDUMP, "--list-ptx", str(path)], capture_output=True, text=True, check=True
    )
    assert "sm_75" in elf.stdout and "sm_90" in elf.stdout
    assert "sm_75" in ptx.stdout


@needs_toolkit
@pytest.mark.parametrize("op", ["tanh", "exp", "sigmoid", "gelu"])
def test_f64_math_links_libdevice(op):
    image = kernels(elementwise(op, "f64", "4x8"))[f"{op}_0"].image
    assert b".extern .func __nv_" not in image  # resolved from libdevice, not left to the driver


@needs_toolkit
def test_the_input_module_is_left_untouched():
    with context(), ir.Location.unknown():
        module = to_llvm(ir.Module.parse(elementwise("neg", "f32")))
        before = str(module)
        compile_kernels(module)
        assert str(module) == before


def test_cpu_kernels_need_no_toolkit(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_ROOT", str(tmp_path))
    assert kernels(elementwise("relu", "f64", device="cpu")) == {}


def test_a_missing_toolkit_is_one_line_naming_what_was_looked_for(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_ROOT", str(tmp_path))
    with pytest.raises(CompileError) as err:
        kernels(elementwise("relu", "f64"))
    assert str(err.value) == (
        f"CUDA toolkit: ptxas not found (searched CUDA_ROOT={tmp_path}: {tmp_path}/bin/ptxas); "
        "point CUDA_ROOT at a CUDA toolkit"
    )


@needs_toolkit
def test_a_failing_ptxas_is_one_line_naming_the_kernel(monkeypatch, tmp_path):
    (tmp_path / "bin").mkdir()
    ptxas = tmp_path / "bin" / "ptxas"
    ptxas.write_text(
        "#!/bin/sh\necho 'ptxas fatal   : out of registers' >&2\necho more >&2\nexit 1\n"
    )
    ptxas.chmod(ptxas.stat().st_mode | stat.S_IXUSR)
    os.symlink(TOOLKIT.fatbinary, tmp_path / "bin" / "fatbinary")
    (tmp_path / "nvvm" / "libdevice").mkdir(parents=True)
    os.symlink(TOOLKIT.libdevice, tmp_path / "nvvm" / "libdevice" / "libdevice.10.bc")
    monkeypatch.setenv("CUDA_ROOT", str(tmp_path))
    with pytest.raises(
        CompileError,
        match=r"^ptxas failed on cuda kernel 'relu_0': ptxas fatal   : out of registers$",
    ):
        kernels(elementwise("relu", "f32"))


def every_kind(elem: str) -> str:
    """One cuda op of each of the 19 kernel kinds (linear and matmul are both matmul)."""

    def t(shape: str) -> str:
        return f"tensor<{shape}x{elem}>"

    x, v, w, b3 = t("4x8"), t("8"), t("8x6"), t("2x4x8")
    ops = [  # (op, operands, extra attributes, signature)
        ("linear", "%x, %w", "", f"({x}, {w}) -> {t('4x6')}"),
        ("matmul", "%b3, %w", "", f"({b3}, {w}) -> {t('2x4x6')}"),
        *((op, "%x, %v", "", f"({x}, {v}) -> {x}") for op in ("add", "sub", "mul", "div")),
        *(
            (op, "%x", "", f"({x}) -> {x}")
            for op in ("relu", "sigmoid", "tanh", "exp", "sqrt", "neg", "gelu")
        ),
        ("gelu", "%x", ', approximate = "tanh"', f"({x}) -> {x}"),
        ("softmax", "%x", ", axis = -1 : i64", f"({x}) -> {x}"),
        ("layer_norm", "%x, %v, %v", ", epsilon = 1.0e-5 : f64", f"({x}, {v}, {v}) -> {x}"),
        ("transpose", "%b3", ", permutation = array<i64: 2, 0, 1>", f"({b3}) -> {t('8x2x4')}"),
        ("reshape", "%b3", "", f"({b3}) -> {t('8x8')}"),
        ("reduce_sum", "%b3", ", axes = array<i64: 1>, keepdims = false", f"({b3}) -> {t('2x8')}"),
        (
            "reduce_mean",
            "%b3",
            ", axes = array<i64: 0, 2>, keepdims = true",
            f"({b3}) -> {t('1x4x1')}",
        ),
        ("reduce_max", "%b3", ", axes = array<i64: 2>, keepdims = false", f"({b3}) -> {t('2x4')}"),
    ]
    body = "\n".join(
        f'  %{i} = "hexir.{op}"({operands}) {{device = "cuda"{attrs}}} : {sig}'
        for i, (op, operands, attrs, sig) in enumerate(ops)
    )
    return f"""
func.func @main(%x: {x}, %w: {w}, %v: {v}, %b3: {b3}) -> {x} {{
{body}
  func.return %x : {x}
}}
"""


@needs_toolkit
@pytest.mark.parametrize("elem", ["f32", "f64"])
def test_every_kernel_kind_on_cuda_compiles_to_device_code(elem):
    with context(), ir.Location.unknown():
        module = to_llvm(ir.Module.parse(every_kind(elem)), "sm_90")
        kinds = {
            ir.StringAttr(op.attributes["sym_name"]).value: ir.StringAttr(
                op.attributes["hexir.kernel"]
            ).value
            for op in (view.operation for view in module.body.operations)
            if op.name == "gpu.module"
        }
        images = compile_kernels(module, "sm_90")
    assert len(set(kinds.values())) == 19
    assert images.keys() == kinds.keys()
    for name, image in images.items():
        assert_names_kernel(image, name, (75, 90))
        assert image.block[0] * image.block[1] * image.block[2] > 1  # real parallelism


@pytest.mark.parametrize("target", ["sm_50", "sm_72", "compute_90", "90", "sm90", ""])
def test_targets_older_than_sm75_or_malformed_are_refused(target):
    with pytest.raises(
        CompileError,
        match=f"expected a CUDA architecture sm_75 or newer, like sm_90; got '{target}'",
    ):
        architectures(target)


def test_targets_add_a_cubin_to_the_sm75_default():
    assert architectures(None) == (75,)
    assert architectures("sm_75") == (75,)
    assert architectures("sm_90") == (75, 90)
    assert architectures("sm_120") == (75, 120)
