"""The process's resource limits: refused at the start, or named in the one line of a failure.

``ulimit -v`` / ``ulimit -d`` below what a command's threads reserve used to end a run part way,
in glibc (a thread's local storage not allocated: exit 127, no Python code runs) or as pages of
tracebacks from whichever thread failed first; every command that runs flows now refuses such
a limit before it starts anything.  A file size limit (``ulimit -f``) that the command's own
server cannot live with is in ``test_server_lifetime.py``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from scarce.flows.commands.running import MIN_ADDRESS_SPACE
from tests.flows import procs
from tests.flows.test_interrupt import CASES, case_project

LIMITED = textwrap.dedent("""
    import resource, sys
    limit = getattr(resource, sys.argv[1])
    _, hard = resource.getrlimit(limit)
    resource.setrlimit(limit, (int(sys.argv[2]), hard))
    from scarce.flows.cli import entrypoint
    entrypoint(sys.argv[3:])
""")

LIMITS = {"RLIMIT_AS": "ulimit -v", "RLIMIT_DATA": "ulimit -d"}


def _files(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.is_dir() else []


@pytest.mark.slow  # apply and rerun need a finished run (made once, on the session's server)
@pytest.mark.usefixtures("prefect_server")
@pytest.mark.parametrize("limit", sorted(LIMITS))
@pytest.mark.parametrize("case", CASES, ids=[c.replace(" ", "-") for c in CASES])
def test_a_small_address_space_is_refused_before_anything_runs(case, limit, tmp_path,
                                                                tmp_path_factory):
    project, args = case_project(case, tmp_path / "project", tmp_path_factory)
    data = project / "data"
    before = _files(data)
    size = MIN_ADDRESS_SPACE * 3 // 4
    done = subprocess.run([sys.executable, "-c", LIMITED, limit, str(size), *args],
                          cwd=project, env=procs.child_env(project), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: key '{LIMITS[limit]}': the process's {LIMITS[limit]} "
                           f"limit is {size / 2**30:.1f} GiB; "), line
    assert _files(data) == before  # nothing written: no store entry, no run, no lease


def test_a_failed_allocation_names_the_limit_in_its_line():
    """Past the start, an allocation that fails under a limit is one line naming the limit."""
    code = textwrap.dedent("""
        import resource
        from scarce.flows.cli import _memory_limits
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, hard))
        try:
            bytearray(4 * 2**30)
        except MemoryError as exc:
            print(_memory_limits(exc))
        print(_memory_limits(ValueError("no allocation")) == "")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        " (out of memory under the process's limits: ulimit -v is 3.00 GiB)", "True"]

