"""No module of the package's folders is over 700 lines: past that a module has grown more
than one job, and is split by job (a file named for what it does), not by line count."""

from __future__ import annotations

from tests.flows.helpers import package_sources

MAX_LINES = 700


def test_no_module_is_over_700_lines():
    sizes = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in package_sources()}
    assert {str(p): n for p, n in sizes.items() if n > MAX_LINES} == {}
    assert max(sizes.values()) > MAX_LINES // 2  # the lines were counted
