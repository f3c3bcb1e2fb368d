"""The official CRAC coreference scorer, an outside referee kept beside the project (never in
it): the tests that call it, and what they do when it is not there.

Where it is missing (a clone without the sibling folder) such a test skips and says why, and
the session's header says where the scorer was looked for.  Under CI (``.ci/run`` sets
``REQUIRE_CRAC_SCORER=1``, its clone has the folder beside it) a missing scorer fails the test
instead: the referee cannot drop out of the suite without a word.
"""

from __future__ import annotations

import os

import pytest

from scarce.bench import strip as bench_strip

#: The variable under which a missing scorer fails its tests rather than skipping them.
REQUIRE = "REQUIRE_CRAC_SCORER"


def scorer_found() -> bool:
    return (bench_strip.SCORER / "corefud-scorer.py").is_file()


def why_missing() -> str:
    return (f"the CRAC scorer (corefud-scorer.py, which needs udapi) is not at "
            f"{bench_strip.SCORER}: the folder ../shared/tools/corefud-scorer beside the project")


def needs_scorer(test):
    """Mark ``test`` as calling the official scorer: skipped, saying why, where it is
    missing; failed in its place when ``REQUIRE_CRAC_SCORER=1``."""
    if scorer_found():
        return test
    if os.environ.get(REQUIRE) == "1":
        def missing(*args, **kwargs):
            pytest.fail(f"{why_missing()}, and {REQUIRE}=1 requires it")
        missing.__name__, missing.__doc__ = test.__name__, test.__doc__
        return missing
    return pytest.mark.skip(reason=why_missing())(test)
