"""A generate entry point, run with the runtime alone: `fixtures/generate.hxb` is the tiny
decoder-with-past step model of fixtures/decoder.py compiled with `hexir -generate` (eos 6,
32 positions). Its tokens are checked against `decoder.greedy`, the numpy reference of the
same model (what `transformers`' greedy generation returns; the compiler's tests check real
GPT-2 and Llama-style exports against transformers itself)."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

import hexir_runtime as hr
from conftest import FIXTURES, gpu_or_skip
from hexir_runtime import generate
from hexir_runtime.errors import EntryNotFound, InputError
from hexir_runtime.hal import threads
from hexir_runtime.interpreter import Program

sys.path.insert(0, str(FIXTURES))
import decoder

MODULE = FIXTURES / "generate.hxb"


@pytest.fixture(scope="module")
def m():
    with hr.load(MODULE) as module:
        yield module


@pytest.mark.parametrize("prompt", [decoder.PROMPT, np.array([[7, 3, 9, 0, 11, 2, 2]]),
                                    np.array([[4]])])
def test_the_tokens_are_the_references(m, prompt):
    new = 32 - prompt.shape[1]  # to the last position the model has
    got = m.generate(prompt, max_new_tokens=new, eos_token_id=-1)
    np.testing.assert_array_equal(got, decoder.greedy(prompt, new))
    assert got.dtype == np.int64 and got.shape == (1, 32)


def test_the_modules_eos_stops_the_loop_after_it(m):
    got = m.generate(decoder.PROMPT, max_new_tokens=24)
    want = decoder.greedy(decoder.PROMPT, 24, eos=decoder.EOS)
    np.testing.assert_array_equal(got, want)
    assert got[0, -1] == decoder.EOS and got.shape[1] < 5 + 24


def test_the_caller_may_name_another_eos(m):
    stream = decoder.greedy(decoder.PROMPT, 24)[0, 5:]
    eos = int(stream[2])
    got = m.generate(decoder.PROMPT, max_new_tokens=24, eos_token_id=eos)
    np.testing.assert_array_equal(got[0, 5:], stream[:3])


def test_tokens_stream_as_they_are_chosen(m):
    seen: list[int] = []
    got = m.generate(decoder.PROMPT, 10, eos_token_id=-1, on_token=seen.append)
    assert seen == got[0, 5:].tolist() and len(seen) == 10


def test_no_new_tokens_is_the_prompt_and_one_is_the_prefills(m):
    np.testing.assert_array_equal(m.generate(decoder.PROMPT, 0), decoder.PROMPT)
    np.testing.assert_array_equal(m.generate(decoder.PROMPT, 1), decoder.greedy(decoder.PROMPT, 1))


def test_every_decode_step_runs_one_planned_program(m):
    """The cache is a window: every decode step has the same sizes, so a call plans at
    most two bindings (prefill, decode) and a repeated call plans none."""
    m.generate(decoder.PROMPT, 20, eos_token_id=-1)
    hits, misses, _ = m.cache_info
    m.generate(decoder.PROMPT, 20, eos_token_id=-1)
    assert m.cache_info[:2] == (hits + 2, misses)


def test_the_decode_loop_is_one_native_call_with_no_python_per_token(m, monkeypatch):
    """Past the prefill, no step is called from Python: the 19 decode steps, their cache
    copies and choices are one GENERATE call into the runtime's native loop."""
    steps, loops = [], []
    reading, run = hr.EntryPoint._reading, threads.Record.run
    monkeypatch.setattr(hr.EntryPoint, "_reading",
                        lambda self, *a: steps.append(1) or reading(self, *a))
    monkeypatch.setattr(threads.Record, "run", lambda self: (
        self.op == threads.GENERATE and loops.append(self.op)) or run(self))
    got = m.generate(decoder.PROMPT, 20, eos_token_id=-1)
    np.testing.assert_array_equal(got, decoder.greedy(decoder.PROMPT, 20))
    assert len(steps) == 1 and loops == [threads.GENERATE]


def test_a_long_generation_is_native_calls_of_a_bounded_count(m, monkeypatch):
    """Python runs between native calls only to see an interrupt: 26 tokens in calls of
    at most 4 (NATIVE_TOKENS) after the prefill's, the same tokens."""
    loops = []
    run = threads.Record.run
    monkeypatch.setattr(threads.Record, "run", lambda self: (
        self.op == threads.GENERATE and loops.append(self["count"])) or run(self))
    monkeypatch.setattr(generate, "NATIVE_TOKENS", 4)
    got = m.generate(decoder.PROMPT, 27, eos_token_id=-1)
    np.testing.assert_array_equal(got, decoder.greedy(decoder.PROMPT, 27))
    assert loops == [4, 4, 4, 4, 4, 4, 2]
    monkeypatch.setattr(generate, "NATIVE_TOKENS", 2)  # the end token inside a call
    np.testing.assert_array_equal(m.generate(decoder.PROMPT, 24),
                                  decoder.greedy(decoder.PROMPT, 24, eos=decoder.EOS))


def test_streaming_runs_the_native_loop_a_token_at_a_time(m, monkeypatch):
    loops = []
    run = threads.Record.run
    monkeypatch.setattr(threads.Record, "run", lambda self: (
        self.op == threads.GENERATE and loops.append(self.op)) or run(self))
    seen: list[int] = []
    got = m.generate(decoder.PROMPT, 9, eos_token_id=-1, on_token=seen.append)
    assert seen == got[0, 5:].tolist() and loops == [threads.GENERATE] * 8


@pytest.mark.parametrize("eos", [-1, decoder.EOS])
def test_the_python_loop_gives_the_native_loops_tokens(m, monkeypatch, eos):
    """A step with kernels the native loop cannot run (another device's, interpreted
    ones) is driven from Python, one step call per token: the same tokens."""
    native = m.generate(decoder.PROMPT, 26, eos_token_id=eos)
    monkeypatch.setattr(Program, "native_steps", lambda self, arena: None)
    np.testing.assert_array_equal(m.generate(decoder.PROMPT, 26, eos_token_id=eos), native)
    np.testing.assert_array_equal(native, decoder.greedy(decoder.PROMPT, 26,
                                                         eos=None if eos < 0 else eos))


def test_concurrent_calls_have_their_own_state(m):
    prompts = [np.array([[i, (3 * i) % 16, 5]]) for i in range(6)]
    want = [decoder.greedy(p, 20) for p in prompts]
    got: dict[int, np.ndarray] = {}

    def run(i):
        got[i] = m.generate(prompts[i], 20, eos_token_id=-1)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, w in enumerate(want):
        np.testing.assert_array_equal(got[i], w)


@pytest.mark.parametrize(("ids", "new", "message"), [
    (decoder.PROMPT, 28, "a prompt of 5 tokens and max_new_tokens=28 need 33 positions; the "
                         "module allows at most 32"),
    (np.array([[1, 2, 16]]), 4, r"token id 16 in input_ids is outside the vocabulary 0\.\.15"),
    (np.array([[1, -1]]), 4, "token id -1 in input_ids is outside the vocabulary"),
    (np.array([[1, 2], [3, 4]]), 4, r"input_ids must be \[1, P\] token ids with P >= 1; got 2x2"),
    (np.zeros((1, 0), np.int64), 4, "with P >= 1; got 1x0"),
    (np.array([[1.0, 2.0]]), 4, "input_ids must be integer token ids; got float64"),
    (decoder.PROMPT, -1, "max_new_tokens must be >= 0; got -1"),
    (decoder.PROMPT, np.array([1, 2]), "max_new_tokens must be one integer; got int64 of "
                                       "shape 2"),
    (decoder.PROMPT, 2.5, "max_new_tokens must be one integer; got float64"),
])
def test_bad_inputs_are_refused_in_one_line(m, ids, new, message):
    with pytest.raises(InputError, match=message) as caught:
        m.generate(ids, new)
    assert "\n" not in str(caught.value) and str(caught.value).startswith("generate: ")


def test_an_eos_outside_the_vocabulary_is_refused(m):
    with pytest.raises(InputError, match=r"eos_token_id 16 is outside the vocabulary 0\.\.15"):
        m.generate(decoder.PROMPT, 4, eos_token_id=16)


def test_a_module_without_a_generate_entry_says_so():
    with hr.load(FIXTURES / "linear-relu.hxb") as plain, \
            pytest.raises(EntryNotFound, match=r"no generate entry point 'generate'.*hexir "
                                               r"-generate"):
        plain.generate(decoder.PROMPT, 4)
    assert plain.generations == ()


def test_the_window_is_four_sizes_a_doubling_within_the_bound():
    sizes = sorted({generate.window(p, 4096) for p in range(1, 130)})
    assert sizes == [16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160]
    assert all(generate.window(p, 4096) >= p for p in range(1, 3000))
    assert generate.window(17, 20) == 19  # capped at max_length - 1


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hexir_runtime", str(MODULE), *args],
                          capture_output=True, text=True)


def test_hexir_run_generates_into_an_npz(tmp_path):
    np.save(tmp_path / "prompt.npy", decoder.PROMPT)
    out = tmp_path / "out.npz"
    done = run_cli("--entry=generate", f"--input=input_ids=@{tmp_path / 'prompt.npy'}",
                   "--input=max_new_tokens=1xi64=12", f"--output=@{out}")
    assert done.returncode == 0, done.stderr
    assert "generate" in done.stderr  # the banner: the step's devices and the loop
    with np.load(out) as result:
        assert list(result) == ["sequences"]
        np.testing.assert_array_equal(result["sequences"],
                                      decoder.greedy(decoder.PROMPT, 12, eos=decoder.EOS))


def test_hexir_run_prints_the_sequences_and_refuses_a_missing_input(tmp_path):
    done = run_cli("--entry=generate", "--quiet", "--input=1x3xi64=1,2,3",
                   "--input=1xi64=4")
    assert done.returncode == 0, done.stderr
    assert "sequences: 1x7xi64" in done.stdout
    printed = done.stdout.replace("[", " ").replace("]", " ").split()[-7:]
    assert printed == [str(t) for t in decoder.greedy(np.array([[1, 2, 3]]), 4,
                                                      eos=decoder.EOS)[0]]
    missing = run_cli("--entry=generate", "--input=input_ids=1x3xi64=1,2,3")
    assert missing.returncode != 0
    assert missing.stderr.startswith("hexir-run: ") and missing.stderr.count("\n") == 1
    assert "max_new_tokens" in missing.stderr
    profiled = run_cli("--entry=generate", "--profile", "--input=1x3xi64=1,2,3",
                       "--input=1xi64=4")
    assert profiled.returncode != 0 and "--entry=main" in profiled.stderr


def test_on_cuda_the_cache_stays_on_the_device(monkeypatch):
    """`generate-cuda.hxb` (every op on cuda) on the fake driver, which runs each kernel's
    PTX thread by thread (the loop's logic and the kernels' indexing, not a GPU's numerics;
    the `gpu` tests run it on a device): the reference tokens, and after the prefill's one
    upload of the windows no cache byte crosses: per token the host sends the token, its
    position and the mask, and reads the logits."""
    from fake_driver import FakeDriver

    fake = FakeDriver()
    crossed = {"up": 0, "down": 0}

    def counted(copy, way):
        def count(dst, src, size, stream):
            crossed[way] += int(size)
            return copy(dst, src, size, stream)
        return count
    for name, way in (("cuMemcpyHtoDAsync", "up"), ("cuMemcpyDtoHAsync", "down")):
        monkeypatch.setattr(fake, name, counted(getattr(fake, name), way))
    seen: list[int] = []

    def token(t: int) -> None:
        if not seen:  # the prefill is over: count the decode steps' crossings from here
            crossed.update(up=0, down=0)
        seen.append(t)

    new = 4
    with hr.load(FIXTURES / "generate-cuda.hxb", device="cuda", driver=fake) as m:
        got = m.generate(decoder.PROMPT, new, eos_token_id=-1, on_token=token)
        window = generate.window(decoder.PROMPT.shape[1] + new - 1, 32)
    np.testing.assert_array_equal(got, decoder.greedy(decoder.PROMPT, new))
    steps = new - 1
    assert crossed["up"] <= steps * 8 * (window + 3)  # ids, position, mask: int64s
    assert crossed["down"] <= steps * 4 * decoder.VOCAB  # the logits


@pytest.mark.gpu
def test_on_a_gpu_the_tokens_are_the_references():
    """The same loop on a real device (skipped without one): 27 greedy tokens, and the end
    token stopping it."""
    gpu_or_skip()
    with hr.load(FIXTURES / "generate-cuda.hxb", device="cuda") as m:
        np.testing.assert_array_equal(m.generate(decoder.PROMPT, 27, eos_token_id=-1),
                                      decoder.greedy(decoder.PROMPT, 27))
        np.testing.assert_array_equal(m.generate(decoder.PROMPT, 24),
                                      decoder.greedy(decoder.PROMPT, 24, eos=decoder.EOS))
