"""The per-op summary of the ONNX conformance suite (one line per op at the end of the run),
and the runtime's test helpers on the path."""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from hexir_format import CPU_LEVELS
from hexir_runtime.hal.hostcode import host_level

# The runtime's test helpers (fake_driver and its PTX executor) run compiled cuda modules
# here; appended, so the compiler's own test modules win any name they share.
sys.path.append(str(Path(__file__).resolve().parents[2] / "hexir-runtime" / "tests"))

#: The `-target` of the suites that compile many or big models and run them here: the one
#: level this host's runtime picks from a default module (which holds x86-64-v2, -v3 and
#: -v4), so they test the code the host runs at a third of the compile time;
#: test_host_levels.py checks that a default module's variant is that program.
HOST_TARGET = f"cpu:{CPU_LEVELS[host_level()]}"

_RESULTS: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))


def pytest_runtest_logreport(report):
    op = dict(report.user_properties).get("onnx_op")
    if op is None or (report.when != "call" and not report.failed):
        return
    if report.when != "call":
        verdict = "failed"
    elif hasattr(report, "wasxfail"):
        verdict = "unsupported"
    else:
        verdict = report.outcome
    _RESULTS[op][verdict] += 1


def pytest_terminal_summary(terminalreporter):
    if not _RESULTS:
        return
    terminalreporter.section("ONNX node tests on cpu, by op")
    for op in sorted(_RESULTS):
        counts = _RESULTS[op]
        terminalreporter.line(f"{op}: {counts['passed']} passed, {counts['failed']} failed, "
                              f"{counts['unsupported']} unsupported")
