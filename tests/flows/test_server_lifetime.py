"""The temporary Prefect server of a command ends with the command, however it ends.

Without ``PREFECT_API_URL`` a ``scarce run`` starts one temporary server; SIGTERM used to leave
it running (a uvicorn process adopted by init, about 220 MB, still listening), and so did an
abort.  Each case holds the run at its last step (the flow's ``finish`` waits) once the server
answers, so the signal lands mid-run however slow the machine, then checks that nothing listens
on the server's port any more.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.flows.helpers import digits_project

pytestmark = pytest.mark.slow  # starts a Prefect server per case

REPO = Path(__file__).resolve().parents[2]
STARTED = re.compile(r"Starting temporary server on http://127\.0\.0\.1:(\d+)")


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def _wait(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {seconds} s")
        time.sleep(0.2)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_the_temporary_server_ends_with_the_command(tmp_path, how):
    project = digits_project(tmp_path / "project", n_samples=300, k=8)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "SCARCE_"))}
    # a PREFECT_HOME whose parent does not exist yet either: the command creates both
    env.update(SCARCE_ROOT=str(project), PREFECT_HOME=str(tmp_path / "new" / "home"),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PYTHONPATH=str(REPO))
    log = tmp_path / "run.log"
    held = tmp_path / "held"
    # the run holds before its end, once it has written `held`: the signal always lands mid-run
    code = ("import sys, time, tests.flows.sample_flow\n"
            "from scarce.flows.cli import main\n"
            "from scarce.flows.runtime import RunContext\n"
            "finish = RunContext.finish\n"
            "def held_finish(self, *args, **kwargs):\n"
            f"    open({str(held)!r}, 'w').close()\n"
            "    time.sleep(600)\n"
            "    return finish(self, *args, **kwargs)\n"
            "RunContext.finish = held_finish\n"
            "sys.exit(main(['run', 'digits']))\n")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        port = None

        def started() -> bool:
            nonlocal port
            m = STARTED.search(log.read_text(errors="replace"))
            port = int(m.group(1)) if m else None
            return port is not None and _listening(port)

        _wait(held.exists, 300, "the run to reach its last step")
        _wait(started, 60, "the temporary server")
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(120) == 143, log.read_text()[-2000:]
            # "terminated" is the command's last line, but for Prefect's own "Stopping
            # temporary server", which may come after it: the wait below checks it stopped.
            lines = [line for line in log.read_text().splitlines()
                     if line.strip() and "Stopping temporary server" not in line]
            assert lines[-1].strip() == "terminated", log.read_text()[-2000:]
        else:
            proc.kill()
            proc.wait(60)
        _wait(lambda: not _listening(port), 60, f"the server on port {port} to stop")
    finally:
        if proc.poll() is None:
            proc.kill()
