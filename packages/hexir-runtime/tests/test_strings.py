"""String tensors (version 6) on the cpu: ONNX's StringNormalizer as a library kernel, string
inputs of every accepted kind, string results, a string table per call, and hexir-run.

The modules are `modules.strnorm` (built from hexir-format's model) and the checked-in
`fixtures/strnorm.hxb` (`fixtures/strnorm.py`); the six cases are ONNX's backend tests
`test_strnorm_model_*`, with their inputs and expected outputs.
"""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
import modules
from conftest import FIXTURES
from hexir_format import Command, Device, DType, Function, Slot
from hexir_format import TensorType as T
from hexir_runtime import library
from hexir_runtime.cli import main, print_result
from modules import LOWER, NONE, UPPER

WEEK = ["monday", "tuesday", "wednesday", "thursday"]

# (name, x, stopwords, case_change_action, is_case_sensitive, expected y)
ONNX_CASES = [
    ("monday_casesensintive_lower", WEEK, ("monday",), LOWER, True,
     ["tuesday", "wednesday", "thursday"]),
    ("monday_casesensintive_nochangecase", WEEK, ("monday",), NONE, True,
     ["tuesday", "wednesday", "thursday"]),
    ("monday_casesensintive_upper", WEEK, ("monday",), UPPER, True,
     ["TUESDAY", "WEDNESDAY", "THURSDAY"]),
    ("monday_empty_output", ["monday", "monday"], ("monday",), UPPER, True, [""]),
    ("monday_insensintive_upper_twodim",
     [["Monday", "tuesday", "wednesday", "Monday", "tuesday", "wednesday"]], ("monday",), UPPER,
     False, [["TUESDAY", "WEDNESDAY", "TUESDAY", "WEDNESDAY"]]),
    ("nostopwords_nochangecase", ["monday", "tuesday"], (), NONE, True,
     ["monday", "tuesday"]),
]


def load(**options) -> hr.Module:
    return hr.load(hf.build(modules.strnorm(**options)))


def for_case(x, stopwords, action, sensitive, y) -> hr.Module:
    x, y = np.array(x), np.array(y)
    return load(x=x.shape, out=y.shape, stopwords=stopwords, action=action, sensitive=sensitive)


# ---- ONNX's cases ----------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "x", "stopwords", "action", "sensitive", "y"), ONNX_CASES,
                         ids=[c[0] for c in ONNX_CASES])
def test_the_onnx_strnorm_models(name, x, stopwords, action, sensitive, y):
    with for_case(x, stopwords, action, sensitive, y) as m:
        got = m.main(np.array(x))
        assert got.dtype.kind == "U" and got.shape == np.array(y).shape
        assert got.tolist() == y
        assert m.main.results(x=np.array(x))["y"].tolist() == y


def test_case_insensitive_stopwords_and_case_sensitive_ones():
    x = np.array(["Monday", "MONDAY", "monday", "Tuesday"])
    with load(out=(1,), action=NONE, sensitive=False) as m:
        assert m.main(x).tolist() == ["Tuesday"]
    with load(out=(3,), action=LOWER, sensitive=True) as m:
        assert m.main(x).tolist() == ["monday", "monday", "tuesday"]


def test_an_empty_output_is_one_empty_string_in_two_dimensions_too():
    with load(x=(1, 2), out=(1, 1)) as m:
        got = m.main(np.array([["monday", "monday"]]))
        assert (got.tolist(), got.dtype.str) == ([[""]], "<U1")


def test_unicode_and_empty_strings_pass_through():
    x = np.array(["día", "", "straße", "monday"])
    with load(out=(3,), action=UPPER) as m:
        assert m.main(x).tolist() == ["DÍA", "", "STRASSE"]


def test_a_count_other_than_the_compiled_one_is_refused_in_one_line():
    with load(out=(3,)) as m:
        with pytest.raises(hr.ExecutionError) as info:
            m.main(np.array(["monday", "tuesday", "monday", "thursday"]))
        assert str(info.value) == (
            "kernel 'string_normalizer' (dispatch 0 of 'main') kept 2 of 4 strings; the module "
            "was compiled for 3 (the model's declared output shape)")
        # the next call is unharmed
        assert m.main(np.array(WEEK)).tolist() == ["TUESDAY", "WEDNESDAY", "THURSDAY"]


# ---- inputs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("x", [
    np.array(WEEK), np.array([w.encode() for w in WEEK]), np.array(WEEK, dtype=object), WEEK,
    tuple(WEEK), np.array(WEEK)[::-1][::-1], np.array(WEEK, dtype=">U9"),
], ids=["str", "bytes", "object", "list", "tuple", "strided", "big-endian"])
def test_string_inputs_of_every_kind(x):
    with load() as m:
        assert m.main(x).tolist() == ["TUESDAY", "WEDNESDAY", "THURSDAY"]


@pytest.mark.parametrize(("x", "message"), [
    (np.array([b"\xff\xfe", b"a", b"b", b"c"]),
     "element 0 \\(b'\\\\xff\\\\xfe'\\) is not UTF-8 \\(byte 0: invalid start byte\\)"),
    (np.array(["a", 1, "b", "c"], dtype=object), "element 1 is int '1', not a str"),
    (np.array([b"a", "b", "c", "d"], dtype=object), "element 0 is bytes \"b'a'\", not a str"),
    (np.zeros(4), "got a float64 array of shape 4; strings are given as str"),
    (np.array(WEEK[:3]), "got shape 3"),
    (np.ma.masked_array(np.array(WEEK)), "got a masked array"),
])
def test_bad_string_inputs_are_refused_naming_the_input(x, message):
    with load() as m:
        with pytest.raises(hr.InputError, match=message) as info:
            m.main(x)
        assert str(info.value).startswith("input 0 ('x') of main: expected 4xstr, ")
        assert "\n" not in str(info.value)


def test_a_device_array_is_no_string_input():
    class OnDevice:
        @property
        def __cuda_array_interface__(self) -> dict:
            return {"shape": (4,), "typestr": "<i8", "data": (0, False), "version": 3}

    with load() as m:
        with pytest.raises(hr.InputError) as info:
            m.main(OnDevice())
        assert str(info.value) == ("input 0 ('x') of main: expected 4xstr, got a cuda array; "
                                   "strings are given as a numpy array of str, bytes or "
                                   "objects holding str")


def test_empty_stopwords_as_a_zero_byte_allocation():
    """The compiler may bind an empty stopword list with ALLOC 0 instead of CONST."""
    module = modules.strnorm(stopwords=(), action=NONE, out=(4,))
    f = module.functions[0]
    commands = (f.commands[0], Command.alloc(1, 0), *f.commands[2:])
    with hr.load(hf.build(hf.Module(6, (Function("main", commands, f.inputs, f.outputs),),
                                    b"", module.executables, module.slots))) as m:
        assert m.main(np.array(WEEK)).tolist() == WEEK


def test_a_string_result_has_no_out_array():
    with load() as m:
        with pytest.raises(hr.InputError, match="out\\[0\\] of main: a 3xstr result comes back "
                                                "as a new numpy array of str"):
            m.main(np.array(WEEK), out=np.empty(3, dtype="<U9"))


def test_a_handle_that_names_no_string_is_refused():
    """A string result never written (an ALLOC's zeros, handle 0) in a module without
    strings: no call can make one, but the runtime checks every handle it reads."""
    t = T(DType.STRING, (2,))
    main = Function("main", (Command.alloc(0, 16), Command.output(0, 0)), (), ("y",))
    with hr.load(hf.build(hf.Module(6, (main,), b"", (), (Slot(Device.CPU, t),)))) as m:
        with pytest.raises(hr.ExecutionError, match=r"^main: output 0 \('y'\): the result's "
                                                    "element 0 is handle 0, which names no "
                                                    r"string \(the call has 0\)$"):
            m.main()
    strings = library.Strings(["a"])
    with pytest.raises(hr.ExecutionError, match="element 1 is handle -3"):
        strings.read(np.array([0, -3]), "kernel 'k'", "x")


def test_every_library_function_has_a_body():
    assert set(library.FUNCTIONS) == set(hf.library.FUNCTIONS)


# ---- calls -----------------------------------------------------------------------------------

def test_calls_on_several_threads_each_have_their_own_strings():
    words = [[f"w{t}_{k}" for k in range(3)] + ["monday"] for t in range(6)]
    failures: list[str] = []
    start = threading.Barrier(len(words))
    with load(action=NONE) as m:
        def call(t: int) -> None:
            start.wait()
            for k in range(200):
                x = np.array(words[t][k % 4:] + words[t][:k % 4])
                got = m.main(x).tolist()
                if got != [w for w in x.tolist() if w != "monday"]:
                    failures.append(f"thread {t} call {k}: {got}")
        threads = [threading.Thread(target=call, args=(t,)) for t in range(len(words))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []


def test_a_dynamic_module_binds_the_count_of_its_string_input():
    with load(out=(2,), dynamic=True) as m:
        assert m.main(np.array(["monday", "a", "b"])).tolist() == ["A", "B"]
        assert m.main(np.array(["a", "monday", "monday", "b"])).tolist() == ["A", "B"]
        assert m.main(np.array(["c", "monday", "d"])).tolist() == ["C", "D"]
        assert m.cache_info == (1, 2, 2)


def test_the_profile_times_the_library_kernel():
    with load() as m:
        profile = m.profile("main", np.array(WEEK), calls=3)
        assert [k.name for k in profile.kernels] == ["string_normalizer"]
        assert "string_normalizer" in str(profile)


def test_a_cuda_load_runs_a_string_module_on_the_cpu():
    """Strings never go to cuda (the validator refuses a string slot there), so a module of
    strings needs no GPU even when cuda is asked for."""
    with hr.load(FIXTURES / "strnorm.hxb", device="cuda") as m:
        assert [d.name for d in m.devices_used()] == ["cpu"]


# ---- the fixture and hexir-run ---------------------------------------------------------------

def test_the_fixture_round_trips_and_runs():
    data = (FIXTURES / "strnorm.hxb").read_bytes()
    assert hf.build(hf.parse(data)) == data
    expected = np.load(FIXTURES / "strnorm.npz")
    with hr.load(FIXTURES / "strnorm.hxb") as m:
        assert str(m.main) == "main(x: 1x6xstr) -> (y: 1x4xstr)"
        np.testing.assert_array_equal(m.main(expected["x"]), expected["y"])


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(map(str, argv)), out, err)
    return code, out.getvalue(), err.getvalue()


def test_hexir_run_reads_an_npy_of_strings_and_writes_an_npz(tmp_path):
    np.save(tmp_path / "x.npy", np.array([["Monday", "tuesday", "a", "b", "c", "monday"]]))
    code, out, err = run("-q", FIXTURES / "strnorm.hxb", f"--input=x=@{tmp_path / 'x.npy'}",
                         f"--output=@{tmp_path / 'y.npz'}")
    assert (code, out, err) == (0, "", "")
    with np.load(tmp_path / "y.npz") as y:
        assert (y.files, y["y"].tolist()) == (["y"], [["TUESDAY", "A", "B", "C"]])


def test_hexir_run_prints_string_results_and_takes_string_literals():
    code, out, _ = run("-q", FIXTURES / "strnorm.hxb",
                       "--input=1x6xstr=Monday,tuesday,wednesday,Monday,tuesday,wednesday")
    assert (code, out) == (0, "result[0] y: 1x4xstr\n"
                              "[['TUESDAY' 'WEDNESDAY' 'TUESDAY' 'WEDNESDAY']]\n")


def test_hexir_run_refuses_bad_strings_in_one_line(tmp_path):
    np.save(tmp_path / "x.npy", np.array([[b"\xff", b"a", b"b", b"c", b"d", b"e"]]))
    code, out, err = run("-q", FIXTURES / "strnorm.hxb", f"--input=@{tmp_path / 'x.npy'}")
    assert (code, out) == (1, "")
    assert err == ("hexir-run: input 0 ('x') of main: expected 1x6xstr, element 0 (b'\\xff') is "
                   "not UTF-8 (byte 0: invalid start byte)\n")
    code, _, err = run("-q", FIXTURES / "strnorm.hxb", "--input=1x6xstr=a,b,c,d,e,f")
    assert code == 1 and err == (
        "hexir-run: kernel 'string_normalizer' (dispatch 0 of 'main') kept 6 of 6 strings; the "
        "module was compiled for 4 (the model's declared output shape)\n")


def test_a_printed_string_result_stays_on_its_line():
    out = io.StringIO()
    print_result(0, "y", np.array(["a\nb", "c"]), out)
    assert out.getvalue() == "result[0] y: 2xstr\n['a\\nb' 'c']\n"
