"""Inputs and results by name, and int32, int64 and bool tensors, through the API and
hexir-run, on version-5 modules built from hexir-format's model (`modules.named_io`: entries
that return their inputs, a COPY of one and a constant, and PRINT them)."""

from __future__ import annotations

import io

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
import modules
from hexir_format import Command, Device, DType, Function, Slot
from hexir_format import TensorType as T
from hexir_runtime.cli import main, print_result, print_rows

TOKENS = np.arange(6, dtype=np.int64).reshape(2, 3) - 2**40
MASK = np.array([True, False, True])
NAMES = "; its inputs are: tokens, mask"


@pytest.fixture
def io_hxb(tmp_path):
    return modules.write(tmp_path, "io.hxb", modules.named_io())


def check(results, tokens=TOKENS, mask=MASK) -> None:
    """main's results, in output order: the mask, the tokens, the offsets."""
    assert [a.dtype.name for a in results] == ["bool", "int64", "int32"]
    np.testing.assert_array_equal(results[0], mask)
    np.testing.assert_array_equal(results[1], tokens)
    np.testing.assert_array_equal(results[2], modules.OFFSETS)


# ---- the API ---------------------------------------------------------------------------

def test_the_signature_names_inputs_and_outputs(io_hxb):
    with hr.load(io_hxb) as m:
        s = m.main.signature
        assert (s.input_names, s.output_names) == (("tokens", "mask"),
                                                   ("mask", "tokens", "offsets"))
        assert repr(m.main) == ("<hexir_runtime.EntryPoint main(tokens: 2x3xi64, mask: 3xi1) "
                                "-> (mask: 3xi1, tokens: 2x3xi64, offsets: 4xi32)>")
        assert str(m.plain) == "plain(3xi32) -> (3xi32)"
        assert m.plain.signature.input_names == ()


def test_inputs_by_position_by_name_by_mapping_and_mixed(io_hxb):
    with hr.load(io_hxb) as m:
        check(m.main(TOKENS, MASK))
        check(m.main(tokens=TOKENS, mask=MASK))
        check(m.main(mask=MASK, tokens=TOKENS))  # keyword order does not matter
        check(m.main({"mask": MASK, "tokens": TOKENS}))
        check(m.main(TOKENS, mask=MASK))
        check(m.main({"tokens": TOKENS}, mask=MASK))
        check(m.execute("main", {"tokens": TOKENS, "mask": MASK}).outputs)
        assert m.main.check_inputs(TOKENS, mask=MASK)[1] is MASK


def test_results_by_name(io_hxb):
    with hr.load(io_hxb) as m:
        results = m.main.results(TOKENS, mask=MASK)
        assert list(results) == ["mask", "tokens", "offsets"]
        check(list(results.values()))
        run = m.execute("main", [TOKENS, MASK])
        assert run.output_names == ("mask", "tokens", "offsets")
        assert list(run.results) == ["mask", "tokens", "offsets"]
        # an entry that names nothing: the names hexir-run --output=@FILE.npz writes
        ints = np.array([1, -2, 3], np.int32)
        assert list(m.plain.results(ints)) == ["output_0"]
        assert m.execute("plain", [ints]).output_names == ()


def test_prints_of_integers_and_booleans_are_typed_arrays(io_hxb):
    with hr.load(io_hxb) as m:
        tokens, mask = m.run("main", {"tokens": TOKENS, "mask": MASK})
    assert tokens.dtype == np.int64 and tokens.tolist() == TOKENS.tolist()
    assert mask.dtype == np.bool_ and mask.tolist() == [[True, False, True]]


def test_out_arrays_of_integer_and_boolean_types(io_hxb):
    out = [np.empty(3, bool), np.empty((2, 3), np.int64), np.empty(4, np.int32)]
    with hr.load(io_hxb) as m:
        got = m.main(TOKENS, mask=MASK, out=out)
        assert all(a is b for a, b in zip(got, out, strict=True))
        check(out)
        assert m.main.results(TOKENS, MASK, out=out)["offsets"] is out[2]
        with pytest.raises(hr.InputError, match=r"out\[2\] of main: expected a writable "
                                                "C-contiguous 4xi32 array, got an int64 array"):
            m.main(TOKENS, MASK, out=[out[0], out[1], np.empty(4, np.int64)])


@pytest.mark.parametrize("args,named,message", [
    ((), {"tokens": TOKENS, "mask": MASK, "extra": 1}, "main has no input named 'extra'" + NAMES),
    ((), {"token": TOKENS, "mask": MASK}, "main has no input named 'token'" + NAMES),
    ((), {"tokens": TOKENS}, "input 'mask' of main is missing" + NAMES),
    ((), {"mask": MASK}, "input 'tokens' of main is missing" + NAMES),
    ((TOKENS,), {"tokens": TOKENS}, "input 'tokens' of main is given twice, by position and "
                                    "by name" + NAMES),
    (({"tokens": TOKENS},), {"tokens": TOKENS, "mask": MASK},
     "input 'tokens' of main is given twice, in the mapping and as a keyword" + NAMES),
    (({"tokens": TOKENS, "mask": MASK, "x\n": 1},), {},
     "main has no input named 'x\\n'" + NAMES),  # escaped: a name cannot split the line
    ((TOKENS, MASK, MASK), {}, "main takes 2 inputs (tokens: 2x3xi64, mask: 3xi1), got 3"),
])
def test_bad_names_are_one_line_errors_listing_the_inputs(io_hxb, args, named, message):
    with hr.load(io_hxb) as m, pytest.raises(hr.InputError) as info:
        m.main(*args, **named)
    assert str(info.value) == message


def test_an_entry_without_names_takes_its_inputs_by_position_only(io_hxb, tmp_path):
    ints = np.array([1, 2, 3], np.int32)
    with hr.load(io_hxb) as m:
        np.testing.assert_array_equal(m.plain(ints), ints)
        with pytest.raises(hr.InputError, match=r"^plain names no inputs, so they are given by "
                                                r"position, not by name \(x\)$"):
            m.plain(x=ints)
        with pytest.raises(hr.InputError, match="plain names no inputs"):
            m.execute("plain", {"input_0": ints})
    mlp = modules.write(tmp_path, "mlp.hxb", modules.mlp())  # version 4
    with hr.load(mlp) as m, pytest.raises(hr.InputError, match="main names no inputs"):
        m.main(x=np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("given,message", [
    (np.zeros((2, 3), np.int32), "expected 2x3xi64, got an int32 array of shape 2x3"),
    (np.zeros((2, 3)), "expected 2x3xi64, got a float64 array of shape 2x3"),
    (np.zeros((3, 2), np.int64), "expected 2x3xi64, got shape 3x2"),
    ([[1, 2, 3], [4, 5, 6.5]], "got a list whose values are not all exactly int64 values"),
    ([[1, 2, 3], [4, 5, 2**63]], "got a list numpy cannot convert (Python int too large"),
    ([[1, 2, 3], [4, 5, float("nan")]], "got a list numpy cannot convert"),
    ([["1", "2", "3"], ["4", "5", "6"]], "got a list whose values are not all exactly int64"),
])
def test_integer_inputs_take_exact_values_only(io_hxb, given, message):
    with hr.load(io_hxb) as m, pytest.raises(hr.InputError) as info:
        m.main(given, MASK)
    assert str(info.value).startswith("input 0 ('tokens') of main: expected 2x3xi64, got ")
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("given,message", [
    (np.array([1, 0, 1], np.uint8), "got a uint8 array of shape 3"),
    (np.array([1.0, 0, 1]), "got a float64 array of shape 3"),
    ([1, 0, 2], "got a list whose values are not all exactly bool values"),
    ([0.5, 0, 1], "got a list whose values are not all exactly bool values"),
    (["true", "", ""], "got a list whose values are not all exactly bool values"),
])
def test_boolean_inputs_take_booleans_or_0_and_1_only(io_hxb, given, message):
    with hr.load(io_hxb) as m, pytest.raises(hr.InputError) as info:
        m.main(TOKENS, given)
    assert str(info.value) == f"input 1 ('mask') of main: expected 3xi1, {message}"


def test_lists_and_scalars_are_converted_to_the_declared_type(io_hxb, tmp_path):
    tokens = [[1, 2, 3], [4, 5, 2**62]]
    with hr.load(io_hxb) as m:
        check(m.main(tokens, [1, 0, 1]), np.array(tokens), MASK)
        check(m.main([[1.0, 2, 3], [4, 5, 6]], [True, False, True]), np.arange(1, 7)
              .reshape(2, 3), MASK)
        with pytest.raises(hr.InputError, match=r"input 0 of plain: expected 3xi32, got a list "
                                                r"numpy cannot convert \(Python integer "
                                                "2147483648 out of bounds for int32\\)"):
            m.plain([1, 2, 2**31])
    scalar = hf.Module(5, (Function("f", (Command.input(0, 0), Command.input(1, 1),
                                          Command.output(1, 0), Command.output(0, 1)),
                                    ("n", "flag"), ("flag", "n")),),
                       b"", (), (Slot(Device.CPU, T(DType.I64, ())),
                                 Slot(Device.CPU, T(DType.BOOL, ()))))
    with hr.load(modules.write(tmp_path, "scalar.hxb", scalar)) as m:
        flag, n = m.f(-7, True)
        assert (flag.dtype, flag.shape, bool(flag)) == (np.bool_, (), True)
        assert (n.dtype, int(n)) == (np.int64, -7)
        assert {k: v.item() for k, v in m.f.results(flag=0, n=2**63 - 1).items()} == {
            "flag": False, "n": 2**63 - 1}


def test_names_need_not_be_identifiers_and_out_is_passed_by_mapping(tmp_path):
    """Names come from the model (an ONNX graph's `input.1`, any script): keywords take any
    string through **, and an input named `out` goes in the mapping (the keyword `out` is
    where the results go)."""
    module = modules.named_io((("input.1", "out"), ("größe", "file", "allow_pickle")))
    with hr.load(modules.write(tmp_path, "odd.hxb", module)) as m:
        assert str(m.main).startswith("main(input.1: 2x3xi64, out: 3xi1) -> (größe: 3xi1")
        check(m.main({"input.1": TOKENS, "out": MASK}))
        check(m.main(TOKENS, MASK, out=None))
        assert list(m.main.results({"input.1": TOKENS, "out": MASK})) == [
            "größe", "file", "allow_pickle"]
        with pytest.raises(hr.InputError, match=r"input 'out' of main is missing; its inputs "
                                               r"are: input.1, out"):
            m.main(**{"input.1": TOKENS})


def test_the_call_path_is_unchanged_for_arrays_by_position(io_hxb):
    """Exact arrays by position pass through untouched, as before names: no copy, no
    conversion."""
    with hr.load(io_hxb) as m:
        checked = m.main.check_inputs(TOKENS, MASK)
        assert checked[0] is TOKENS and checked[1] is MASK
        inputs = (TOKENS, MASK)
        assert hr.api.arrange(m.main._plan, inputs) is inputs


# ---- hexir-run ---------------------------------------------------------------------------

def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(map(str, argv)), out, err)
    return code, out.getvalue(), err.getvalue()


def test_print_rows_writes_integers_and_booleans_as_integers():
    out = io.StringIO()
    print_rows(np.array([[-3, 2**62], [0, 7]], np.int64), out)
    print_rows(np.array([[True, False, True]]), out)
    print_rows(np.array([[-2**31, 5]], np.int32), out)
    assert out.getvalue() == ("-3 4611686018427387904 \n0 7 \n1 0 1 \n-2147483648 5 \n")


def test_results_print_with_their_names_integers_and_booleans_as_1_and_0():
    out = io.StringIO()
    print_result(0, "mask", np.array([True, False]), out)
    print_result(1, None, np.array([[1, -2]], np.int32), out)
    print_result(2, "n", np.array(5, np.int64), out)
    assert out.getvalue() == ("result[0] mask: 2xi1\n[1 0]\nresult[1]: 1x2xi32\n[[ 1 -2]]\n"
                              "result[2] n: i64\n5\n")


def test_text_inputs_by_position_and_by_name(io_hxb, tmp_path):
    want = ("result[0] mask: 3xi1\n[1 0 1]\nresult[1] tokens: 2x3xi64\n[[-1  2 -3]\n [ 4 -5  6]]\n"
            "result[2] offsets: 4xi32\n[         0          3         -7 2147483647]\n")
    printed = "-1 2 -3 \n4 -5 6 \n1 0 1 \n"
    tokens = "2x3xi64=-1,2,-3,4,-5,6"
    for inputs in ([f"--input={tokens}", "--input=3xi1=1,0,1"],
                   [f"--input={tokens}", "--input=mask=3xi1=true,false,TRUE"],
                   ["--input=mask=3xi1=1 0 1", f"--input=tokens={tokens}"],
                   ["--input=mask=3xi1=1,0,1", f"--input={tokens}"]):  # by position: first
        code, out, err = run(io_hxb, "-q", *inputs)
        assert (code, out, err) == (0, printed + want, ""), inputs
    np.save(tmp_path / "t.npy", np.array([[-1, 2, -3], [4, -5, 6]]))
    code, out, err = run(io_hxb, "-q", "--input=mask=3xi1=1,0,1",
                         f"--input=tokens=@{tmp_path}/t.npy")
    assert (code, out, err) == (0, printed + want, "")


def test_one_value_fills_an_integer_or_boolean_tensor(io_hxb):
    code, out, err = run(io_hxb, "-q", "--input=2x3xi64=-9", "--input=3xi1=true")
    assert (code, err) == (0, "") and out.startswith("-9 -9 -9 \n-9 -9 -9 \n1 1 1 \nresult[0]")


def test_npz_outputs_are_keyed_by_name_and_feed_back_by_name(io_hxb, tmp_path):
    y = tmp_path / "y.npz"
    code, _, err = run(io_hxb, "-q", "--input=2x3xi64=7", "--input=mask=3xi1=0,1,0",
                       f"--output=@{y}")
    assert (code, err) == (0, "")
    with np.load(y) as z:
        assert z.files == ["mask", "tokens", "offsets"]
        check([z["mask"], z["tokens"], z["offsets"]], np.full((2, 3), 7), ~MASK)
    # its `tokens` and `mask` are the inputs (by name, whatever their order in the file); the
    # `offsets` beside them are not
    code, out, err = run(io_hxb, "-q", f"--input=@{y}")
    assert (code, err) == (0, "") and out.startswith("7 7 7 \n7 7 7 \n0 1 0 \nresult[0]")
    np.savez(tmp_path / "i.npz", input_1=MASK, input_0=TOKENS)  # no names: by index
    code, out, err = run(io_hxb, "-q", f"--input=@{tmp_path / 'i.npz'}")
    assert (code, err) == (0, "") and "1 0 1 \nresult[0]" in out
    np.savez(tmp_path / "m.npz", mask=MASK)  # by name, with the rest by position
    code, out, err = run(io_hxb, "-q", "--input=2x3xi64=1", f"--input=@{tmp_path / 'm.npz'}")
    assert (code, err) == (0, "") and out.startswith("1 1 1 \n1 1 1 \n1 0 1 \nresult[0]")
    code, _, err = run(io_hxb, "-q", "--input=tokens=2x3xi64=1", f"--input=@{tmp_path / 'm.npz'}",
                       f"--output=@{tmp_path / 'o.npy'}")
    assert code == 1 and "a .npy file holds one array, the entry returned 3" in err


def test_an_entry_without_names_writes_output_0(io_hxb, tmp_path):
    y = tmp_path / "y.npz"
    code, _, err = run(io_hxb, "-q", "--entry=plain", "--input=3xi32=5,-6,2147483647",
                       f"--output=@{y}")
    assert (code, err) == (0, "")
    with np.load(y) as z:
        assert z.files == ["output_0"] and z["output_0"].dtype == np.int32
        assert z["output_0"].tolist() == [5, -6, 2**31 - 1]
    code, out, err = run(io_hxb, "-q", "--entry=plain", "--input=3xi32=1")
    assert (code, out, err) == (0, "result[0]: 3xi32\n[1 1 1]\n", "")


def test_outputs_named_like_numpys_parameters_are_written(tmp_path):
    module = modules.named_io((("tokens", "mask"), ("file", "allow_pickle", "offsets")))
    path = modules.write(tmp_path, "odd.hxb", module)
    y = tmp_path / "y.npz"
    code, _, err = run(path, "-q", "--input=2x3xi64=1", "--input=3xi1=0", f"--output=@{y}")
    assert (code, err) == (0, "")
    with np.load(y) as z:
        assert z.files == ["file", "allow_pickle", "offsets"]
        assert z["file"].tolist() == [False] * 3 and z["allow_pickle"].tolist() == [[1] * 3] * 2


@pytest.mark.parametrize("args,message", [
    (["--input=toks=2x3xi64=1", "--input=mask=3xi1=1"],
     "main has no input named 'toks'; its inputs are: tokens, mask"),
    (["--input=2x3xi64=1", "--input=tokens=2x3xi64=1"],
     "input 'tokens' of main is given twice, by position and by name" + NAMES),
    (["--input=mask=3xi1=1", "--input=mask=3xi1=0"],
     "--input=mask=3xi1=0: input 'mask' is given twice"),
    (["--input=tokens=2x3xi64=1"], "input 'mask' of main is missing" + NAMES),
    (["--entry=plain", "--input=x=3xi32=1"],
     "plain names no inputs, so they are given by position, not by name (x)"),
    (["--input=2x3xi64=1.5", "--input=3xi1=1"],
     "--input=2x3xi64=1.5: values must be integers in the range of int64 separated by commas"),
    (["--entry=plain", "--input=3xi32=2147483648"],
     "--input=3xi32=2147483648: values must be integers in the range of int32"),
    (["--input=2x3xi64=1", "--input=3xi1=2"],
     "--input=3xi1=2: values must be 1, 0, true or false separated by commas"),
    (["--input=2x3xi64=1", "--input=3xi1=yes"], "--input=3xi1=yes: values must be 1, 0, true"),
    (["--input=2x3xi32=1", "--input=3xi1=1"],
     "input 0 ('tokens') of main: expected 2x3xi64, got an int32 array of shape 2x3"),
    (["--input=2x3xi64=1", "--input=3xf32=1"],
     "input 1 ('mask') of main: expected 3xi1, got a float32 array of shape 3"),
    (["--input==2x3xi64=1"], "--input==2x3xi64=1: expected [NAME=]TYPE=VALUES"),
    (["--input=mask=@nowhere.npz"], "--input=mask=@nowhere.npz: cannot read"),
])
def test_bad_named_and_typed_inputs_exit_1_or_2_with_one_line(io_hxb, args, message):
    """A malformed --input is a bad argument (2); one the entry refuses, a failed run (1)."""
    code, out, err = run(io_hxb, "-q", *args)
    malformed = any(w in message for w in ("values must", "expected [NAME=]", "cannot read"))
    assert (code, out) == (2 if malformed else 1, "") and err.count("\n") == 1, err
    assert err.startswith(f"hexir-run: {message}"), err


def test_a_named_npz_is_refused(io_hxb, tmp_path):
    np.savez(tmp_path / "m.npz", mask=MASK)
    code, out, err = run(io_hxb, f"--input=mask=@{tmp_path / 'm.npz'}")
    assert (code, out) == (2, "")
    assert err == (f"hexir-run: --input=mask=@{tmp_path / 'm.npz'}: a .npz holds several "
                   f"arrays, placed by their names; give it as --input=@{tmp_path / 'm.npz'}\n")
