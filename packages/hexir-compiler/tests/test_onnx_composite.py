"""The ops `frontend/onnx_ops_composite.py` composes from hexir ops, on the cases the ONNX node
tests miss, each checked against the ONNX reference implementation; and the node tests the
conformance suite cannot run as shipped (Einsum's are opset 12, OneHot's IR version 6, Range's
opset 27), run here at an opset Hexir reads (the ops' versions are the same there)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper
from onnx.reference import ReferenceEvaluator

import hexir_compiler
import hexir_runtime
import onnx_node_tests as node
import tir_graph
from hexir_compiler.pipeline import Options

RNG = np.random.default_rng(7)


def _model(op: str, inputs: dict, opset: int, outputs: int = 1, **attrs):
    names = [n if a is not None else "" for n, a in inputs.items()]  # None: omitted
    made = helper.make_node(op, names, [f"y{i}" for i in range(outputs)], **attrs)
    graph = helper.make_graph(
        [made], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items() if a is not None],
        [helper.make_tensor_value_info(f"y{i}", 0, None) for i in range(outputs)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(op: str, inputs: dict, fixed=(), opset: int = 18, outputs: int = 1,
          device: str = "cpu", oracle: str = "reference", **attrs):
    """Compile the one-node model with the `fixed` inputs known at compile time, run it on
    the rest (on the cpu, or every op on cuda with its kernels interpreted thread by thread),
    and compare each output with the `oracle`'s, the ONNX reference or ONNX Runtime (float32
    rtol 1e-4 / atol 1e-5, float64 1e-7 / 1e-9, others exact)."""
    model = _model(op, inputs, opset, outputs, **attrs)
    given = {n: a for n, a in inputs.items() if a is not None}
    if oracle == "onnxruntime":
        ort = pytest.importorskip("onnxruntime")
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        copy.ir_version = 9  # what this onnxruntime reads; the graph is the same
        for out in copy.graph.output:  # it wants the output types: the data's (as Resize's)
            out.type.tensor_type.elem_type = copy.graph.input[0].type.tensor_type.elem_type
        expected = ort.InferenceSession(copy.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(None, given)
    else:
        expected = ReferenceEvaluator(model).run(None, given)
    fixed = {n: given[n] for n in fixed}
    rest = [a for n, a in given.items() if n not in fixed]
    if device == "cuda":
        got = tir_graph.run(model, rest, Options("mlir-tir", {"*": "cuda"}, fixed_inputs=fixed))
    else:
        got = hexir_runtime.load(hexir_compiler.compile(model, fixed_inputs=fixed)).main(*rest)
    got = got if isinstance(got, tuple | list) else (got,)
    assert len(got) == len(expected)
    for g, want in zip(got, expected, strict=True):
        g = np.asarray(g)
        assert (g.dtype, g.shape) == (want.dtype, want.shape)
        rtol, atol = node.TOLERANCE.get(want.dtype, (0, 0))
        np.testing.assert_allclose(g, want, rtol=rtol, atol=atol)


def run(model, fixed: dict, *inputs):
    return hexir_runtime.load(hexir_compiler.compile(model, fixed_inputs=fixed)).main(*inputs)


def refused(op: str, inputs: dict, fixed=(), opset: int = 18, match: str = "", **attrs):
    model = _model(op, inputs, opset, **attrs)
    with pytest.raises(hexir_compiler.CompileError, match=match) as err:
        hexir_compiler.compile(model, fixed_inputs={n: inputs[n] for n in fixed})
    assert "\n" not in str(err.value)


def floats(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def ints(*values):
    return np.array(values, np.int64)


# ---- node tests at an opset Hexir reads ----------------------------------------------------

RETARGETED = [p.name for p in sorted(node.node_tests().iterdir())
              if p.name.startswith(("test_einsum_", "test_onehot_"))
              or p.name in ("test_range_float_type_positive_delta",
                            "test_range_int32_type_negative_delta")]


@pytest.mark.parametrize("name", RETARGETED)
def test_node_test_at_opset_13(name, tmp_path):
    case = node.Case(name, node.node_tests() / name, ())
    model, inputs, expected = node.load(case)
    model.ir_version = 8
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", 13))
    fixed = {n: inputs[n] for n in node.static_inputs(model) if n in inputs}
    module = hexir_compiler.compile(model, fixed_inputs=fixed)
    got = hexir_runtime.load(module).main(*(a for n, a in inputs.items() if n not in fixed))
    got = np.asarray(got)
    assert (got.dtype, got.shape) == (expected[0].dtype, expected[0].shape)
    np.testing.assert_allclose(got, expected[0], *node.TOLERANCE.get(got.dtype, (0, 0)))


# ---- data movement -------------------------------------------------------------------------

def test_split_num_outputs_uneven_and_the_output_count():
    x = floats(7, 3)
    check("Split", {"x": x}, outputs=3, num_outputs=3)  # 3, 3, 1
    check("Split", {"x": floats(2, 9)}, opset=13, outputs=3, axis=-1)
    check("Split", {"x": x, "s": ints(0, 5, 2)}, fixed=["s"], opset=13, outputs=3)


def test_split_refuses_parts_that_do_not_add_up():
    refused("Split", {"x": floats(7), "s": ints(3, 3)}, fixed=["s"], match="into parts")


def test_tile_every_axis_of_a_rank_4_tensor_and_a_zero_repeat():
    check("Tile", {"x": floats(2, 3, 1, 2), "r": ints(2, 3, 4, 2)}, fixed=["r"])
    check("Tile", {"x": np.arange(6, dtype=np.int32).reshape(2, 3), "r": ints(0, 2)},
          fixed=["r"])


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-2, 0, 3])
def test_trilu_batched_with_an_offset(upper, k):
    check("Trilu", {"x": np.arange(2 * 4 * 5, dtype=np.int32).reshape(2, 4, 5),
                    "k": ints(k)}, fixed=["k"], upper=upper)
    check("Trilu", {"x": RNG.random((3, 2)) > 0.5}, upper=upper)


def test_a_large_fill_is_an_expand_not_a_constant_of_its_size():
    x = floats(2, 64, 64)
    check("Trilu", {"x": x})
    text = hexir_compiler.compile(_model("Trilu", {"x": x}, 18), "mlir")
    constants = [line for line in text.splitlines() if '"hexir.constant"' in line]
    assert '"hexir.expand"' in text and not any("2x64x64" in c for c in constants)


def test_one_hot_axis_0_float_indices_and_values_at_run_time():
    indices = np.array([[0, -1, 2], [5, 1, -4]], np.float32)
    check("OneHot", {"i": indices, "d": np.array(4, np.int64),
                     "v": np.array([-2.0, 3.5], np.float64)}, fixed=["d"], axis=0)


def test_depth_and_space_reshuffles_are_inverses():
    for mode in ("DCR", "CRD"):
        check("DepthToSpace", {"x": floats(2, 8, 3, 2)}, blocksize=2, mode=mode)
    check("SpaceToDepth", {"x": floats(1, 3, 6, 9)}, blocksize=3)
    for mode in ("DCR", "CRD"):  # version 28's mode
        check("SpaceToDepth", {"x": floats(2, 3, 4, 6)}, opset=28, blocksize=2, mode=mode)


@pytest.mark.parametrize("equation, shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    ("ii->i", [(4, 4)]),
    ("bii", [(3, 4, 4)]),
    ("iji->j", [(3, 2, 3)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("ij,ij->", [(3, 4), (3, 4)]),
    ("abc,cd->bd", [(2, 3, 4), (4, 5)]),
    ("ab,b...->a...", [(2, 3), (3, 4, 5)]),
    ("...ij,...jk->ik", [(3, 2, 4), (1, 4, 5)]),
])
def test_einsum(equation, shapes):
    check("Einsum", {f"x{i}": floats(*s) for i, s in enumerate(shapes)}, equation=equation)


def test_einsum_of_integers_multiplies_and_sums():
    a, b = (RNG.integers(-5, 5, s).astype(np.int32) for s in ((3, 4), (4, 2)))
    check("Einsum", {"a": a, "b": b}, equation="ij,jk->ik")


def test_einsum_refuses_a_mismatched_equation():
    refused("Einsum", {"a": floats(2, 3)}, equation="ijk->i", match="does not index")
    refused("Einsum", {"a": floats(2, 3), "b": floats(4, 3)}, equation="ij,jk", match="extents")


# ---- normalization -------------------------------------------------------------------------

def test_instance_normalization_in_f64_over_3_spatial_axes():
    check("InstanceNormalization", {"x": floats(2, 3, 4, 2, 3, dtype=np.float64),
                                    "s": floats(3, dtype=np.float64),
                                    "b": floats(3, dtype=np.float64)}, epsilon=1e-3)


@pytest.mark.parametrize("opset, per", [(18, 2), (21, 6)])
def test_group_normalization_scales_per_group_then_per_channel(opset, per):
    check("GroupNormalization", {"x": floats(2, 6, 3, 5), "s": floats(per), "b": floats(per)},
          opset=opset, num_groups=2, epsilon=1e-4)


def test_group_normalization_refuses_a_scale_of_the_other_version():
    refused("GroupNormalization", {"x": floats(2, 6, 3), "s": floats(2), "b": floats(2)},
            opset=21, num_groups=2, match=r"version 21 expects \[6\]")


# ---- reductions ----------------------------------------------------------------------------

def test_reduce_prod_of_integers_keepdims_and_not():
    x = RNG.integers(-3, 4, (3, 4, 2)).astype(np.int32)
    check("ReduceProd", {"x": x, "a": ints(0, 2)}, fixed=["a"])
    check("ReduceProd", {"x": floats(3, 4, 2), "a": ints(-1)}, fixed=["a"], keepdims=0)
    check("ReduceProd", {"x": floats(3, 0)}, keepdims=0)  # the empty product is 1


def test_reduce_log_sum_exp_is_stable_and_handles_infinities():
    x = np.array([[1000.0, 999.0, 998.0], [-np.inf, -np.inf, -np.inf], [-np.inf, 0.0, 1.0]],
                 np.float32)
    got = run(_model("ReduceLogSumExp", {"x": x, "a": ints(1)}, 18, keepdims=0), {"a": ints(1)},
              x)
    # the reference subtracts an infinite maximum and gives NaN for the all -inf row
    want = np.logaddexp.reduce(x.astype(np.float64), axis=1).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                                "ReduceLogSumExp", "ReduceProd"])
def test_reduction_with_no_axes_and_noop_applies_only_the_element_wise_part(op):
    check(op, {"x": np.abs(floats(2, 3)) + 0.5}, noop_with_empty_axes=1)


def test_reduce_l1_and_l2_of_integers():
    x = RNG.integers(-9, 9, (4, 5)).astype(np.int64)
    check("ReduceL1", {"x": x, "a": ints(1)}, fixed=["a"])
    check("ReduceL2", {"x": x, "a": ints(0)}, fixed=["a"], keepdims=0)


# ---- Pad -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_modes_past_the_extent_and_cropping(mode):
    # the reference's np.pad takes no negative pads: a negative pad crops the input first,
    # then the other end pads
    x = floats(2, 3, 5)
    pads = ints(1, 5, -1, 0, 2, 2)
    got = run(_model("Pad", {"x": x, "p": pads, "v": None, "a": ints(0, 1, 2)}, 19, mode=mode),
              {"p": pads, "a": ints(0, 1, 2)}, x)
    np.testing.assert_array_equal(got, np.pad(x[:, :, 1:], [(1, 0), (5, 2), (0, 2)], mode))
    pads = ints(3, -1)
    got = run(_model("Pad", {"x": x, "p": pads, "v": None, "a": ints(1)}, 19, mode=mode),
              {"p": pads, "a": ints(1)}, x)
    np.testing.assert_array_equal(got, np.pad(x[:, :-1], [(0, 0), (3, 0), (0, 0)], mode))


def test_pad_constant_with_a_run_time_value_negative_pads_and_axes():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    pads, axes, value = ints(2, -1, -1, 3), ints(-1, 0), np.array(7, np.int32)
    model = _model("Pad", {"x": x, "p": pads, "v": value, "a": axes}, 18)
    got = run(model, {"p": pads, "a": axes}, x, value)
    np.testing.assert_array_equal(got, np.pad(x[1:, :, :-1], [(0, 3), (0, 0), (2, 0)],
                                              constant_values=7))
    check("Pad", {"x": floats(3, 2), "p": ints(0, 1, 2, 0)}, fixed=["p"], opset=13)


def test_pad_wrap_before_version_19_is_refused():
    refused("Pad", {"x": floats(3), "p": ints(1, 1)}, fixed=["p"], mode="wrap",
            match="wrap is version 19")


def test_a_pad_of_known_values_folds():
    model = _model("Pad", {"x": floats(3), "p": ints(1, 2)}, 18, mode="reflect")
    text = hexir_compiler.compile(model, "mlir", fixed_inputs={"x": floats(3), "p": ints(1, 2)})
    assert "hexir.gather" not in text and "hexir.constant" in text


# ---- Resize --------------------------------------------------------------------------------

COORDINATES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric"]


@pytest.mark.parametrize("scales", [(1.7, 0.65), (0.5, 3.0), (0.2, 0.15)], ids=str)
@pytest.mark.parametrize("coordinates", COORDINATES)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_by_scales_as_onnx_runtime(mode, coordinates, scales):
    """Against ONNX Runtime, which the reference differs from where the output length is not
    the input's times the scale (align_corners and pytorch_half_pixel use the length, and
    pytorch_half_pixel maps a length-1 output to 0, as the spec says)."""
    x = floats(1, 2, 5, 7)
    check("Resize", {"x": x, "roi": None, "s": np.array([1, 1, *scales], np.float32)},
          fixed=["s"], opset=19, mode=mode, coordinate_transformation_mode=coordinates,
          oracle="onnxruntime")


@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor",
                                     "ceil"])
def test_resize_nearest_modes_by_sizes(nearest):
    x = np.arange(2 * 6 * 5, dtype=np.int64).reshape(2, 6, 5)
    check("Resize", {"x": x, "roi": None, "s": None, "z": ints(2, 9, 3)}, fixed=["z"],
          nearest_mode=nearest, coordinate_transformation_mode="asymmetric")


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_keeps_the_aspect_ratio_on_the_given_axes(policy):
    check("Resize", {"x": floats(1, 4, 6, 3), "roi": None, "s": None, "z": ints(9, 8)},
          fixed=["z"], mode="linear", axes=[2, 1], keep_aspect_ratio_policy=policy)


def test_resize_cubic_excluding_outside_and_crop_and_resize_extrapolating():
    x = floats(1, 1, 6, 6)
    check("Resize", {"x": x, "roi": None, "s": np.array([1, 1, 0.7, 1.9], np.float32)},
          fixed=["s"], mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)
    check("Resize", {"x": x, "roi": np.array([0.2, -0.3, 0.9, 1.4], np.float32), "s": None,
                     "z": ints(5, 7)}, fixed=["roi", "z"], mode="linear", axes=[2, 3],
          coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.0)


def test_resize_refusals_are_one_line():
    x = floats(1, 1, 4, 4)
    scales = {"x": x, "roi": None, "s": np.array([1, 1, 0.5, 0.5], np.float32)}
    refused("Resize", scales, fixed=["s"], mode="linear", antialias=1, match="antialias")
    refused("Resize", scales, match="scales operand must be known")
    refused("Resize", {**scales, "x": np.ones((1, 1, 4, 4), np.int32)}, fixed=["s"],
            mode="linear", match="linear Resize of int32")


def test_range_of_unknown_bounds_is_refused_in_one_line():
    refused("Range", {"a": np.array(0, np.int64), "b": np.array(5, np.int64),
                      "c": np.array(1, np.int64)}, fixed=["a", "c"], match="known at compile")


# ---- every op on cuda, its kernels interpreted thread by thread ----------------------------

@pytest.mark.parametrize("op, inputs, fixed, attrs", [
    ("Resize", {"x": floats(1, 2, 5, 7), "roi": None,
                "s": np.array([1, 1, 1.7, 0.6], np.float32)}, ["s"], {"mode": "cubic"}),
    ("Einsum", {"a": floats(2, 1, 3, 4), "b": floats(5, 4, 2)}, [], {"equation": "...ij,...jk"}),
    ("Einsum", {"a": floats(3, 4, 4)}, [], {"equation": "bii->ib"}),
    ("Pad", {"x": floats(2, 3, 4), "p": ints(1, 5, 0, 2, 7, 0)}, ["p"], {"mode": "reflect"}),
    ("GroupNormalization", {"x": floats(2, 6, 3, 5), "s": floats(2), "b": floats(2)}, [],
     {"num_groups": 2}),
    ("OneHot", {"i": ints(1, -1, 7), "d": np.array(5, np.int64),
                "v": np.array([0, 9], np.int32)}, ["d"], {}),
    ("Tile", {"x": floats(2, 3, 1, 2), "r": ints(2, 3, 4, 2)}, ["r"], {}),
    ("ReduceLogSumExp", {"x": floats(3, 70), "a": ints(1)}, ["a"], {}),
    ("ReduceProd", {"x": floats(3, 4), "a": ints(0)}, ["a"], {"keepdims": 0}),
    ("Trilu", {"x": floats(2, 4, 5)}, [], {"upper": 0}),
], ids=lambda v: v if isinstance(v, str) else None)
def test_on_cuda_interpreted(op, inputs, fixed, attrs):
    check(op, inputs, fixed, device="cuda", **attrs)


def test_split_on_cuda_interpreted():
    check("Split", {"x": floats(7, 3)}, outputs=3, num_outputs=3, device="cuda")


def test_shape_and_type_refusals_are_one_line():
    refused("InstanceNormalization", {"x": floats(2, 3, 4), "s": floats(2), "b": floats(3)},
            match=r"expected \[3\]")
    refused("ReduceLogSum", {"x": np.ones((2, 3), np.int32)}, match="float32 and float64")
    refused("DepthToSpace", {"x": floats(1, 6, 2, 2)}, blocksize=2, match="do not divide")
    refused("Tile", {"x": floats(2, 3), "r": ints(2)}, fixed=["r"], match="per axis")
    refused("OneHot", {"i": ints(1), "d": np.array(3, np.int64), "v": ints(0, 1, 2)},
            fixed=["d"], match=r"expected \[off, on\]")


# ---- as PyTorch exports them ---------------------------------------------------------------

def _exported_module():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    class Composed(torch.nn.Module):
        """The composed ops as torch.onnx.export (TorchScript) writes them, with the Shape,
        ConstantOfShape and Concat arithmetic around Resize's scales and Pad's pads."""

        def __init__(self) -> None:
            super().__init__()
            self.group = torch.nn.GroupNorm(2, 4)
            self.instance = torch.nn.InstanceNorm2d(4, affine=True)
            with torch.no_grad():
                for p in (*self.group.parameters(), *self.instance.parameters()):
                    p.normal_()

        def forward(self, x):
            resized = (F.interpolate(x, scale_factor=2, mode="bilinear").sum()
                       + F.interpolate(x, size=(7, 5), mode="nearest").mean()
                       + F.interpolate(x, scale_factor=1.5, mode="bicubic",
                                       align_corners=True).sum())
            padded = F.pad(x, (1, 2, 2, 1), mode="reflect") + F.pad(x, (1, 2, 2, 1),
                                                                     mode="replicate")
            q, k, v = torch.split(self.group(x), [1, 1, 2], dim=1)
            mixed = torch.einsum("bchw,bdhw->bcd", self.instance(x), v)
            masked = torch.tril(x[0, 0]) + torch.triu(x[0, 1], 1)
            steps = torch.arange(x.shape[-1]).float()
            return (resized, padded, mixed, masked, F.pixel_shuffle(x, 2),
                    x.repeat(1, 2, 1, 1) * steps, torch.logsumexp(x, 1), x.prod(2),
                    x.norm(dim=3), q + k)

    torch.manual_seed(0)
    return torch, Composed().eval()


@pytest.mark.parametrize("opset", [14, 18])
def test_a_pytorch_export_of_the_composed_ops_matches_eager(opset, tmp_path):
    torch, module = _exported_module()
    x = torch.randn(2, 4, 6, 6)
    path = tmp_path / "composed.onnx"
    torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=opset,
                      input_names=["x"])
    with torch.no_grad():
        expected = [t.numpy() for t in module(x)]
    got = hexir_runtime.load(hexir_compiler.compile(path)).main(x.numpy())
    for g, want in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)
