"""The hostile corpus (fixtures/hostile/): every file refused, with its expected one line,
exit 1 from hexir-run and a HexirError from the API, on the cpu and on a (fake) cuda device."""

import io

import pytest

import hexir_format as hf
import hexir_runtime as hr
from conftest import FIXTURES
from fake_driver import FakeDriver
from hexir_runtime.cli import main

HOSTILE = FIXTURES / "hostile"
CASES = [tuple(line.split("\t")) for line in (HOSTILE / "expected.txt").read_text().splitlines()]
RUNS_ON_CUDA = {"placed-on-cuda.hxb"}  # refused only because cuda is missing


def test_the_corpus_is_complete():
    assert len(CASES) >= 40
    assert sorted(p.name for p in HOSTILE.glob("*.hxb")) == sorted(name for name, _ in CASES)


@pytest.mark.parametrize("name,expected", CASES)
def test_hexir_run_refuses_with_one_line_and_exit_1(name, expected):
    out, err = io.StringIO(), io.StringIO()
    code = main([str(HOSTILE / name)], out, err)
    assert code == 1
    assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("hexir-run: ")
    assert expected in err.getvalue()
    assert "8.000000" not in out.getvalue()  # nothing ran


@pytest.mark.parametrize("name,expected", CASES)
def test_api_refuses_with_the_same_message(name, expected):
    with pytest.raises(hf.HexirError) as info:
        with hr.load(HOSTILE / name) as m:
            m.run()
    assert expected in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("name,expected", [c for c in CASES if c[0] not in RUNS_ON_CUDA])
def test_refused_before_touching_a_cuda_device(name, expected):
    fake = FakeDriver()
    with pytest.raises(hf.HexirError, match=r".") as info:
        with hr.load(HOSTILE / name, device="cuda", driver=fake) as m:
            m.run()
    assert expected in str(info.value)
    for call in ("cuMemAlloc", "cuModuleLoadData", "cuLaunchKernel", "cuMemcpyHtoD"):
        assert fake.calls[call] == 0


def test_placed_on_cuda_runs_where_cuda_is():
    with hr.load(HOSTILE / "placed-on-cuda.hxb", device="cuda",
                 driver=FakeDriver()) as m:
        assert m.run()[0].tolist() == [[8.0, 17.0], [12.0, 14.0]]
