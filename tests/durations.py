"""Seconds per test file, to start the slowest files first (``tests/durations.json``).

Two test processes take whole files (``--dist loadfile``).  pytest-xdist hands files out in
collection order (``--no-loadscope-reorder``; its own reordering puts files with many tests
first, so a file of one test that runs for minutes came last and one process finished alone).
``tests/conftest.py`` orders the files by the seconds recorded here, slowest first; files not
recorded come first, in their order (a new file handed out last could keep one process working
alone at the end).  To record them again::

    .venv/bin/python -m pytest -n 2 --dist loadfile --junitxml=/tmp/junit.xml
    .venv/bin/python -m tests.durations /tmp/junit.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

FILE = Path(__file__).with_name("durations.json")


def recorded() -> dict[str, float]:
    """File (path relative to the repository) -> seconds; empty when nothing is recorded."""
    try:
        return {str(k): float(v) for k, v in json.loads(FILE.read_text()).items()}
    except FileNotFoundError:
        return {}


def from_junit(path: str | Path) -> dict[str, float]:
    """Seconds per test file in a JUnit XML report of pytest (``--junitxml``)."""
    seconds: Counter[str] = Counter()
    for case in ET.parse(path).iter("testcase"):
        module = case.get("classname", "")
        if module.startswith("tests."):
            # classname is "tests.pkg.test_mod" or "tests.pkg.test_mod.TestClass"
            parts = module.split(".")
            while parts and not parts[-1].startswith("test_"):
                parts.pop()
            seconds["/".join(parts) + ".py"] += float(case.get("time", 0.0))
    return {k: round(v, 1) for k, v in sorted(seconds.items())}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.durations JUNIT_XML", file=sys.stderr)
        return 2
    times = from_junit(argv[0])
    tmp = FILE.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    tmp.replace(FILE)
    print(f"{FILE.name}: {len(times)} files, {sum(times.values()):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
