"""One line of totals for the whole test command, from the JUnit XML every suite writes.

`hatch run test` runs many suites (pytest per package, lit, in two environments); each writes
`build/test-results/<env>-<suite>.xml`. This reads them all and prints, last, one line:
tests, passed, skipped, failed (with errors), and how many of the skipped are lit's
unsupported tests, which it names (lit's `-s` summary counts them without names). Before it,
the skipped tests counted by reason (a missing GPU, an optional package, ...), most first, so
that no skip is explained only inside the XML.

    python .ci/totals.py --reset     # before the suites: forget the previous run
    python .ci/totals.py             # after them: the totals; exit 1 if any test failed
"""

from __future__ import annotations

import re
import shutil
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "build" / "test-results"


def reason(skipped: ET.Element) -> str:
    """A skip's reason, one line, without the file:line pytest puts in front of it."""
    text = (skipped.get("message") or skipped.text or "no reason given").strip()
    text = re.sub(r"^\(?[^\s:()]+\.py:\d+\)?:?\s*", "", text.splitlines()[0])
    return re.sub(r"^Skipped:\s*", "", text) or "no reason given"


def main(argv: list[str]) -> int:
    if argv == ["--reset"]:
        shutil.rmtree(RESULTS, ignore_errors=True)
        RESULTS.mkdir(parents=True)
        return 0
    files = sorted(RESULTS.glob("*.xml"))
    if not files:
        print(f"totals: no results in {RESULTS}")
        return 1
    tests = failed = skipped = 0
    unsupported: list[str] = []
    reasons: Counter[str] = Counter()
    for path in files:
        for case in ET.parse(path).getroot().iter("testcase"):
            tests += 1
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif case.find("skipped") is not None:
                skipped += 1
                if path.name.endswith("-lit.xml"):
                    env = path.name.removesuffix("-lit.xml")
                    unsupported.append(f"{case.get('classname')}::{case.get('name')} ({env})")
                else:
                    reasons[reason(case.find("skipped"))] += 1
    for why, count in reasons.most_common():
        print(f"totals: skipped {count:>5}: {why}")
    for name in unsupported:
        print(f"totals: lit unsupported here: {name}")
    print(f"totals: {tests} tests in {len(files)} suites: {tests - skipped - failed} passed, "
          f"{skipped} skipped ({len(unsupported)} of them lit's unsupported), {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
