"""Closing a module while other threads call it: the close waits for the calls in flight,
later calls are refused with one `ClosedError`, and nothing crashes. The trials run in a
subprocess, so that a crash (a close unmapping code a call is still running) fails the test
instead of killing pytest."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import hexir_runtime as hr
from conftest import FIXTURES

TRIALS = textwrap.dedent("""
    import sys, threading, time
    import numpy as np
    import hexir_runtime as hr
    from hexir_format import HexirError

    path = sys.argv[1]
    x = np.load(path[:-len(".hxb")] + ".npz")["input_0"]
    with hr.load(path) as m:
        want = m.main(x)
    for trial in range(10):
        m = hr.load(path)
        m.main(x)  # the first arena exists before the race
        go, other = threading.Event(), []
        counts = {"ok": 0, "closed": 0}

        def worker(i):
            go.wait()
            while True:
                try:
                    y = m.main(x) if i % 2 else m.execute("main", [x]).outputs[0]
                except hr.ClosedError as e:
                    assert str(e).count(chr(10)) == 0, repr(e)
                    counts["closed"] += 1
                    return
                except BaseException as e:  # anything else is a finding
                    other.append(repr(e))
                    return
                if not np.array_equal(y, want):
                    other.append("a different answer")
                    return
                counts["ok"] += 1

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for th in threads:
            th.start()
        go.set()
        time.sleep(0.002 * (trial + 1))
        m.close()
        assert m.closed
        for th in threads:
            th.join()
        assert not other, other
        assert counts["closed"] == 8, counts
    print("ok")
""")


def test_closing_while_eight_threads_call_waits_for_them_and_refuses_later_calls():
    done = subprocess.run([sys.executable, "-c", TRIALS, str(FIXTURES / "mlp-f32.hxb")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout == "ok\n", \
        f"exit {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"


def test_a_call_on_a_closed_module_is_one_closed_error_line():
    m = hr.load(FIXTURES / "mlp-f32.hxb")
    x = np.load(FIXTURES / "mlp-f32.npz")["input_0"]
    m.close()
    m.close()  # twice is harmless
    for call in (lambda: m.main(x), lambda: m.execute("main", [x]), lambda: m.prepare("main"),
                 lambda: m.main.results(x)):
        with pytest.raises(hr.ClosedError, match=r"^module '.*mlp-f32.hxb' is closed$"):
            call()


def test_a_close_from_inside_a_call_is_done_when_the_call_returns():
    """A PRINT callback that closes its own module cannot wait for the call it is in: the
    call finishes, and the resources go when it returns."""
    m = hr.load(FIXTURES / "builtin.hxb")
    mapping, seen = m._mapped._map, []

    def on_print(array):
        m.close()
        seen.append(not mapping.closed)  # still mapped: the call is running in it

    m.execute("main", on_print=on_print)
    assert seen == [True] and m.closed and mapping.closed
    with pytest.raises(hr.ClosedError):
        m.run("main")


def test_a_close_on_another_thread_returns_only_after_the_call_in_flight():
    m = hr.load(FIXTURES / "builtin.hxb")
    entered, release, order = threading.Event(), threading.Event(), []

    def on_print(array):
        entered.set()
        release.wait(10)
        order.append("call")

    caller = threading.Thread(target=lambda: m.execute("main", on_print=on_print))
    caller.start()
    entered.wait(10)
    closer = threading.Thread(target=lambda: (m.close(), order.append("close")))
    closer.start()
    closer.join(0.2)
    assert closer.is_alive() and m.closed  # refusing new calls, waiting for this one
    release.set()
    caller.join(10)
    closer.join(10)
    assert order[-1] == "close" and order.count("call") >= 1
