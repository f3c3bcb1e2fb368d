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
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PYTHONPATH=str(REPO),
               SCARCE_SERVER="temporary")
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


# -- `scarce ui`: its server stops with it, however it ends ------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ui_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "SCARCE_"))}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PYTHONPATH=str(REPO))
    return env


def _answers(port: int) -> bool:
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_ui_stops_its_server_and_frees_the_port(tmp_path, how, seeded_prefect_home):
    """Ctrl-C (SIGINT to the process group) exits 130 and SIGTERM 143, each after stopping the
    server; SIGKILL of the command leaves no server holding the port either (its home's
    database migrated already: the server's stop is what is tested)."""
    from tests.flows.test_interrupt import alive, descendants

    port = _free_port()
    log = tmp_path / "ui.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "scarce.flows.cli", "ui", "--port",
                                 str(port)], cwd=REPO,
                                env=_ui_env(seeded_prefect_home(tmp_path / "home")),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait(lambda: _answers(port), 300, "the UI's server")
        started = descendants(proc.pid)
        at_signal = time.monotonic()
        if how == "SIGINT":
            os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C
        else:
            proc.send_signal(getattr(signal, how))
        code = proc.wait(120)
        seconds = time.monotonic() - at_signal
        output = log.read_text()
        assert code == {"SIGINT": 130, "SIGTERM": 143, "SIGKILL": -9}[how], output[-2000:]
        if how != "SIGKILL":
            assert output.splitlines()[-1] == ("interrupted" if how == "SIGINT"
                                               else "terminated"), output[-2000:]
        _wait(lambda: not _listening(port), 60, f"the server on port {port} to stop")
        _wait(lambda: not alive(started), 60, f"the processes {sorted(started)} to end")
        print(f"\nscarce ui: exit {code} {seconds:.1f} s after {how}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def test_ui_on_a_port_in_use_is_one_error_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "scarce.flows.cli", "ui", "--port",
                               str(port)], cwd=REPO, env=_ui_env(tmp_path / "home"),
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: key '--port': cannot listen on 127.0.0.1:{port}: "), line


@pytest.mark.parametrize("mode", ["temporary", "shared"])
def test_a_server_that_cannot_write_its_database_fails_at_once_in_one_line(tmp_path, mode):
    """Under ``ulimit -f`` too small for the server's database, the command's server (its
    temporary one, or the shared one it starts) exits while starting: the command says so in
    one line (exit 2) as soon as it has, instead of relaunching it for the whole start-up
    timeout, and no shared server is recorded."""
    from scarce.flows.shared_server import Place

    project = digits_project(tmp_path / "project", n_samples=100, k=4)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "SCARCE_"))}
    env.update(SCARCE_ROOT=str(project), PREFECT_HOME=str(tmp_path / "home"),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PYTHONPATH=str(REPO),
               SCARCE_SERVER=mode)
    # 200 KiB: a new server's database needs more (the limit is inherited by the server)
    code = ("import resource, sys, tests.flows.sample_flow\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (200 * 1024, 200 * 1024))\n"
            "from scarce.flows.cli import main\n"
            "sys.exit(main(['run', 'digits']))\n")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - start
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(errors) == 1, done.stderr[-3000:]
    assert f"the {mode} Prefect server exited while starting" in errors[0]
    assert "ulimit -f, is 200 KiB" in errors[0]
    assert "Traceback" not in done.stderr
    assert Place(tmp_path / "home").read() is None
    print(f"\nrefused in {seconds:.1f} s: {errors[0]}")
