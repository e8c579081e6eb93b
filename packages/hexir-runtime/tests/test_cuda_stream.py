"""The cuda call path on the fake driver: one stream, pinned staging, graphs, and what a
steady call asks of the driver, counted call by call on the compiler's cuda fixtures.

A steady call is any call after an arena's first: the first allocates the arena and its
pinned buffers and captures its graphs, the later ones only copy in, replay and copy out.
"""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
from conftest import FIXTURES
from fake_driver import CUresult, FakeDriver

# (cuda module, the same network all on the cpu, the tolerance of the fake's numpy kernels
# against the cpu's compiled ones)
FIXTURE_PAIRS = [("mlp-f32-cuda.hxb", "mlp-f32.hxb", 1e-5),
                 ("mlp-f64-cuda.hxb", "mlp-f64.hxb", 1e-12),
                 ("transformer_block-f32-cuda.hxb", "transformer_block-f32.hxb", 1e-5),
                 ("mlp-f32-mixed.hxb", "mlp-f32.hxb", 1e-5),
                 ("linear-relu-split.hxb", "linear-relu.hxb", 0.0),
                 ("builtin-cuda.hxb", "builtin.hxb", 0.0)]
NEVER_PER_CALL = ("cuMemAlloc", "cuMemFree", "cuMemsetD8Async", "cuMemHostAlloc",
                  "cuMemAllocHost", "cuMemFreeHost", "cuStreamBeginCapture",
                  "cuGraphInstantiate", "cuModuleLoadData", "cuCtxSynchronize")


def on_fake(name: str, **options):
    path = FIXTURES / name
    fake = FakeDriver()
    return hr.load(path, device="cuda", driver=fake, **options), fake


def call(m: hr.Module, x: list[np.ndarray], **kw):
    """One call: the entry's results, or what it printed where it takes no inputs."""
    run = m.execute("main", x, **kw)
    return run.outputs if run.outputs else tuple(run.printed)


def inputs_of(cpu: hr.Module, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(t.shape).astype(t.dtype.numpy)
            for t in cpu["main"].signature.inputs]


def per_call(m: hr.Module, fake: FakeDriver, x: list[np.ndarray], calls: int = 3,
             **kw) -> Counter[str]:
    """The driver calls of one steady call (the same in each of `calls` calls)."""
    call(m, x, **kw)  # the arena's first call
    deltas = []
    for _ in range(calls):
        before, pageable = Counter(fake.calls), fake.pageable_copies
        call(m, x, **kw)
        delta = Counter(fake.calls)
        delta.subtract(before)
        delta["pageable copies"] = fake.pageable_copies - pageable
        deltas.append(+delta)
    assert all(d == deltas[0] for d in deltas), deltas
    return deltas[0]


def kernels_launched(m: hr.Module) -> int:
    """The DISPATCHes of main that run a cuda kernel (a reshape made a view runs none)."""
    module, program = m._mapped.module, m._resident.programs["main"]
    return sum(c.op is hf.Op.DISPATCH and module.executables[c.executable].device
               is hf.Device.CUDA and i not in program.views
               for i, c in enumerate(m._plans["main"].commands))


@pytest.mark.parametrize("name", [n for n, _, _ in FIXTURE_PAIRS])
@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "no-graphs"])
def test_a_steady_call_copies_launches_and_waits_once(name, graphs):
    """Per steady call, on every cuda fixture: nothing allocated, zeroed or freed, host or
    device; the input up and the result down once each, asynchronously through pinned
    memory; one graph launch (or one launch per kernel without graphs); one stream
    synchronize, where the host reads; never a context synchronize."""
    cpu_name = {n: c for n, c, _ in FIXTURE_PAIRS}[name]
    m, fake = on_fake(name, cuda_graphs=graphs)
    with m, hr.load(FIXTURES / cpu_name) as cpu:
        delta = per_call(m, fake, inputs_of(cpu, 0))
        kernels = kernels_launched(m)
    assert kernels >= 1
    for never in NEVER_PER_CALL:
        assert delta[never] == 0, never
    assert delta["pageable copies"] == 0
    assert delta["cuMemcpyHtoDAsync"] == len(cpu["main"].signature.inputs)
    assert delta["cuMemcpyDtoHAsync"] == 1 and delta["cuMemcpyDtoDAsync"] == 0
    assert delta["cuStreamSynchronize"] == 1
    if graphs:
        assert (delta["cuGraphLaunch"], delta["cuLaunchKernel"]) == (1, 0)
    else:
        assert (delta["cuGraphLaunch"], delta["cuLaunchKernel"]) == (0, kernels)
    assert len(fake.launches) == kernels * 4  # the graph replays every kernel, every call


@pytest.mark.parametrize(("name", "cpu_name", "tolerance"), FIXTURE_PAIRS)
def test_graphs_on_and_off_agree_exactly_and_match_the_cpu(name, cpu_name, tolerance):
    on, fake_on = on_fake(name)
    off, fake_off = on_fake(name, cuda_graphs=False)
    with on, off, hr.load(FIXTURES / cpu_name) as cpu:
        for seed in range(3):
            x = inputs_of(cpu, seed)
            with_graphs, without, want = call(on, x), call(off, x), call(cpu, x)
            for a, b, c in zip(with_graphs, without, want, strict=True):
                np.testing.assert_array_equal(a, b)
                np.testing.assert_allclose(a, c, rtol=tolerance, atol=tolerance * np.abs(
                    c).max())
    assert fake_on.calls["cuGraphLaunch"] == 3 and fake_off.calls["cuGraphLaunch"] == 0
    # close gave back every graph, event, stream, pinned buffer, allocation and context
    for fake in (fake_on, fake_off):
        assert fake.held == dict.fromkeys(fake.held, 0)


def test_a_mixed_module_waits_where_the_cpu_reads_the_gpus_result():
    """mlp-f32-mixed: the layers on cuda, the softmax on the cpu. The host waits once per
    call, after the logits' copy into pinned memory and before the softmax reads them (and
    the softmax, fed stale bytes, would differ from the cpu module)."""
    m, fake = on_fake("mlp-f32-mixed.hxb")
    order = []
    original = fake.cuStreamSynchronize
    fake.cuStreamSynchronize = lambda s: (order.append("sync"), original(s))[1]
    original_down = fake.cuMemcpyDtoHAsync
    fake.cuMemcpyDtoHAsync = lambda *a: (order.append("down"), original_down(*a))[1]
    with m, hr.load(FIXTURES / "mlp-f32.hxb") as cpu:
        x = inputs_of(cpu, 4)
        np.testing.assert_allclose(m.main(*x), cpu.main(*x), rtol=1e-5, atol=1e-7)
    assert order[:2] == ["down", "sync"]


#: Each launch runs its PTX on the executor (seconds a call): enough calls to overlap.
CALLS_PER_THREAD = 4


def test_every_arena_captures_its_own_graph_and_threads_agree():
    """Calls in flight at once run in arenas of their own; each arena's graph is captured
    on its buffers, once, and replayed."""
    m, fake = on_fake("mlp-f32-cuda.hxb")
    with m, hr.load(FIXTURES / "mlp-f32.hxb") as cpu:
        xs = [inputs_of(cpu, seed) for seed in range(4)]
        want = [m.main(*x) for x in xs]
        got: dict[int, list[np.ndarray]] = {i: [] for i in range(4)}

        def worker(i: int) -> None:
            for _ in range(CALLS_PER_THREAD):
                got[i].append(m.main(*xs[i]))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        arenas = len(m._resident.programs["main"]._arenas)
    for i in range(4):
        assert len(got[i]) == CALLS_PER_THREAD
        for y in got[i]:
            np.testing.assert_array_equal(y, want[i])
    assert fake.calls["cuStreamBeginCapture"] == fake.calls["cuGraphInstantiate"] == arenas
    # each thread made the context current for itself, once
    assert fake.calls["cuCtxSetCurrent"] == 1 + 4


@pytest.mark.parametrize("failing", ["cuStreamBeginCapture", "cuGraphInstantiate",
                                     "cuGraphLaunch"])
def test_a_graph_call_that_fails_names_it_and_the_next_call_captures_again(failing):
    m, fake = on_fake("mlp-f32-cuda.hxb")
    with m, hr.load(FIXTURES / "mlp-f32.hxb") as cpu:
        x = inputs_of(cpu, 1)
        fake.fail[failing] = CUresult.CUDA_ERROR_LAUNCH_FAILED
        with pytest.raises(hr.ExecutionError) as info:
            m.main(*x)
        del fake.fail[failing]
        assert not fake.capturing  # no capture left open
        # a graph that failed to instantiate is destroyed; one that failed to launch is kept
        assert len(fake.graphs) == (failing == "cuGraphLaunch")
        np.testing.assert_allclose(m.main(*x), cpu.main(*x), rtol=1e-5, atol=1e-7)
        dispatches = [i for i, c in enumerate(m._plans["main"].commands)
                      if c.op is hf.Op.DISPATCH]
    message = str(info.value)
    # the run of kernels between the upload and the download, named by its commands
    span = f"commands {dispatches[0]}-{dispatches[-1]} (cuda graph): "
    assert message.startswith(f"main: {span}") and "\n" not in message
    assert failing in message and message.endswith(" failed: CUDA_ERROR_LAUNCH_FAILED")
    assert fake.held == dict.fromkeys(fake.held, 0)


def test_the_fake_refuses_destroyed_and_unknown_handles():
    """What makes the counts above worth something: a runtime that used a stream, event or
    graph after destroying it, or synchronized a stream it is capturing, would fail here."""
    fake = FakeDriver()
    _, stream = fake.cuStreamCreate(1)
    _, event = fake.cuEventCreate(2)
    assert fake.cuStreamBeginCapture(stream, fake.CUstreamCaptureMode(1)) == (CUresult(0),)
    assert fake.cuStreamSynchronize(stream) == (CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
    _, graph = fake.cuStreamEndCapture(stream)
    _, instance = fake.cuGraphInstantiate(graph, 0)
    for destroy, handle in ((fake.cuGraphExecDestroy, instance), (fake.cuGraphDestroy, graph),
                            (fake.cuEventDestroy, event), (fake.cuStreamDestroy, stream)):
        assert destroy(handle) == (CUresult(0),)
        assert destroy(handle) == (CUresult.CUDA_ERROR_INVALID_HANDLE,)
    invalid = (CUresult.CUDA_ERROR_INVALID_HANDLE,)
    assert fake.cuGraphLaunch(instance, 0) == invalid
    assert fake.cuEventRecord(event, 0) == invalid
    assert fake.cuStreamSynchronize(stream) == invalid
    assert fake.cuLaunchKernel(0x2000, 1, 1, 1, 1, 1, 1, 0, stream, 0, 0) == invalid
    _, live = fake.cuStreamCreate(1)
    with pytest.raises(TypeError):
        fake.cuStreamBeginCapture(live, 1)  # cuda-python takes the enum, not an int


def test_hexir_run_launches_every_kernel_with_no_cuda_graphs(monkeypatch, builtin_hxb):
    import io

    from hexir_runtime.cli import main as hexir_run
    from hexir_runtime.hal import cuda as cuda_backend

    path = builtin_hxb.parent / "builtin-cuda.hxb"
    # --benchmark=1: one warm-up call and one timed call, in one arena, of one kernel
    for flags, want in (([], (2, 1)), (["--no-cuda-graphs"], (0, 2))):
        fake = FakeDriver()
        monkeypatch.setattr(cuda_backend, "load_driver", lambda fake=fake: fake)
        out, err = io.StringIO(), io.StringIO()
        assert hexir_run(["--device=cuda", *flags, "--benchmark=1", str(path)], out, err) == 0
        assert err.getvalue() == ""
        assert (fake.calls["cuGraphLaunch"], fake.calls["cuLaunchKernel"]) == want


def test_a_module_closed_on_another_thread_makes_the_context_current_there_first():
    m, fake = on_fake("builtin-cuda.hxb")
    m.run()
    worker = threading.Thread(target=m.close)
    worker.start()
    worker.join()
    assert fake.calls["cuCtxSetCurrent"] == 2  # at load, then once on the closing thread
    assert fake.held == dict.fromkeys(fake.held, 0)
