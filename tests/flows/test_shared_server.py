"""The local Prefect server the commands share (:mod:`flows.shared_server`).

Without ``PREFECT_API_URL`` (and with ``SCARCE_SERVER=shared``, the default outside the test
suite) a command uses the one server of its Prefect home: started in the background by the
first command, reused by the next, stopped when idle.  The commands here are child processes
that take the command's Prefect API (:func:`flows.runners.prefect_api`) and hold it until the
test lets them go, so each case sets up exactly the overlap it checks; one case runs
``scarce run`` itself twice.  Nothing waits on the wall clock for a result: each case waits
for a state (a line printed, a record written or removed, a process gone) with a generous
cap.  Every case stops what it started (the fixture ``home``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scarce.flows import shared_server
from scarce.flows.shared_server import Place
from tests.flows.helpers import digits_project

pytestmark = pytest.mark.slow  # starts Prefect servers

REPO = Path(__file__).resolve().parents[2]
#: How long a state may take to arrive on a loaded machine (a server start included).
CAP = 300.0
#: The idle time of a server that should stop soon after its last command (3 s).
SHORT_IDLE = "0.05"

# A command's use of the API: take it, print it, hold it while the file `hold` exists.
HOLDER = (
    "import pathlib, sys, time\n"
    "from prefect.settings import PREFECT_API_URL\n"
    "from scarce.flows.runners import prefect_api\n"
    "hold = pathlib.Path(sys.argv[1])\n"
    "with prefect_api() as url:\n"
    "    print('api', url, PREFECT_API_URL.value(), flush=True)\n"
    "    while hold.exists():\n"
    "        time.sleep(0.05)\n"
    "print('released', flush=True)\n"
)


def _env(home: Path, idle: str = "30", **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "SCARCE_"))}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PYTHONPATH=str(REPO), SCARCE_SERVER="shared", SCARCE_SERVER_IDLE_MINUTES=idle)
    env.update(extra)
    return env


def _wait(predicate, what: str, cap: float = CAP) -> None:
    deadline = time.monotonic() + cap
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {cap} s")
        time.sleep(0.1)


class Holder:
    """A child process holding the command's Prefect API (see :data:`HOLDER`)."""

    def __init__(self, tmp: Path, name: str, env: dict[str, str]) -> None:
        self.hold = tmp / f"{name}.hold"
        self.hold.touch()
        self.log = tmp / f"{name}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(self.hold)],
                                         cwd=tmp, env=env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def url(self) -> str:
        """The API the command took (its PREFECT_API_URL inside the block too)."""
        def taken() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(f"the command exited {self.proc.returncode}:\n{self.output()}")
            return "api " in self.output()

        _wait(taken, "the command to take its API")
        line = next(x for x in self.output().splitlines() if x.startswith("api "))
        _, url, setting = line.split()
        assert url == setting
        return url

    def release(self) -> None:
        self.hold.unlink(missing_ok=True)
        assert self.proc.wait(CAP) == 0, self.output()
        assert "released" in self.output()

    def kill(self) -> None:
        """SIGKILL, as the kernel or a user ends a command (no handler, no finally)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(60)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill()


def supervisors(home: Path) -> list[int]:
    """The pids of the shared-server supervisors of ``home`` running now."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"scarce.flows.shared_server" in argv and str(home).encode() in argv:
            if shared_server.process_start(int(entry.name)) is not None:  # not a zombie
                found.append(int(entry.name))
    return found


def _listening(url: str) -> bool:
    return shared_server.health(url, timeout=2)


@pytest.fixture
def home(tmp_path, seeded_prefect_home):
    """A Prefect home of the case's own (its database migrated already: the server's start is
    not what is tested here); whatever server it left is stopped, and none may be left
    running."""
    path = seeded_prefect_home(tmp_path / "prefect-home")
    holders: list[Holder] = []
    yield path, holders
    for h in holders:
        h.stop()
    shared_server.stop(path, force=True)
    left = supervisors(path)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"supervisors left running: {left}"


def test_a_second_command_reuses_the_server_the_first_started(home, tmp_path):
    """``scarce run`` twice: the first starts the shared server in the background and leaves
    it running; the second uses it (the same URL and owner in the record), starting none."""
    path, _ = home
    project = digits_project(tmp_path / "project", n_samples=100, k=4)
    env = _env(path, SCARCE_ROOT=str(project))
    code = ("import sys, tests.flows.sample_flow\n"
            "from scarce.flows.cli import main\n"
            "sys.exit(main(['run', 'digits', '--refresh']))\n")
    records, outputs = [], []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stderr)
        records.append(Place(path).read())
    first, second = records
    assert first is not None and first.kind == "background"
    assert second == first
    assert "Starting the shared Prefect server" in outputs[0]
    assert "Starting the shared Prefect server" not in outputs[1]
    assert f"Using the shared Prefect server at {first.url}" in outputs[1]
    assert supervisors(path) == [first.pid]
    assert _listening(first.url)
    # `scarce server status` says where it is, and that no command uses it
    status = subprocess.run([sys.executable, "-m", "scarce.flows.cli", "server", "status"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert status.returncode == 0, status.stderr
    assert f"shared server: {first.url} (background, pid {first.pid}" in status.stdout
    assert "not in use" in status.stdout


def test_the_server_stops_by_itself_once_idle(home, tmp_path):
    path, holders = home
    holders.append(h := Holder(tmp_path, "a", _env(path, idle=SHORT_IDLE)))
    url = h.url()
    record = Place(path).read()
    assert record is not None and record.url == url and record.idle_minutes == 0.05
    h.release()
    _wait(lambda: Place(path).read() is None and not supervisors(path),
          "the idle server to stop")
    assert not _listening(url)


def test_commands_starting_at_once_start_one_server(home, tmp_path):
    path, holders = home
    env = _env(path)
    holders.extend(Holder(tmp_path, name, env) for name in "abc")
    urls = {h.url() for h in holders}
    assert len(urls) == 1, urls
    record = Place(path).read()
    assert record is not None and {record.url} == urls
    assert supervisors(path) == [record.pid]
    _, answers, users = shared_server.status(path)
    assert answers and sorted(users) == sorted(h.proc.pid for h in holders)
    for h in holders:
        h.release()
    assert shared_server.status(path)[2] == []


def test_a_killed_command_releases_its_hold_and_the_server_serves_on(home, tmp_path):
    """SIGKILL of a command using the server: its lease goes with it (the kernel drops its
    lock), the server keeps serving the other command, and stops once that one is done and
    the idle time has passed."""
    path, holders = home
    env = _env(path, idle=SHORT_IDLE)
    holders.append(a := Holder(tmp_path, "a", env))
    url = a.url()
    holders.append(b := Holder(tmp_path, "b", env))
    assert b.url() == url
    assert sorted(shared_server.status(path)[2]) == sorted([a.proc.pid, b.proc.pid])
    a.kill()
    record, answers, users = shared_server.status(path)
    assert record is not None and record.url == url and answers
    assert users == [b.proc.pid]
    assert not list((path / shared_server.FOLDER / "leases").glob(f"*.{a.proc.pid}.*"))
    # `scarce server stop` refuses while a command uses it
    env_cli = {**env, "SCARCE_SERVER_IDLE_MINUTES": SHORT_IDLE}
    stop = subprocess.run([sys.executable, "-m", "scarce.flows.cli", "server", "stop"],
                          cwd=tmp_path, env=env_cli, capture_output=True, text=True,
                          timeout=300)
    assert stop.returncode == 2, stop.stderr
    assert stop.stderr.startswith(f"error: key '--force': the shared server {url} is in use "
                                  f"by 1 command (pid {b.proc.pid})"), stop.stderr
    assert _listening(url)
    b.release()
    _wait(lambda: Place(path).read() is None and not supervisors(path),
          "the idle server to stop")
    assert not _listening(url)


def test_a_command_killed_while_starting_the_server_leaves_it_to_the_next(home, tmp_path):
    """The first command is killed while the server it started is still starting: the next
    command waits for that server and uses it, starting no second one."""
    path, holders = home
    env = _env(path)
    holders.append(a := Holder(tmp_path, "a", env))
    _wait(lambda: Place(path).read() is not None, "the server's record")
    a.kill()
    holders.append(b := Holder(tmp_path, "b", env))
    url = b.url()
    record = Place(path).read()
    assert record is not None and record.url == url
    assert supervisors(path) == [record.pid]
    b.release()


def test_scarce_server_stop_stops_it(home, tmp_path):
    path, holders = home
    env = _env(path)
    holders.append(a := Holder(tmp_path, "a", env))
    url = a.url()
    a.release()
    record = Place(path).read()
    stop = subprocess.run([sys.executable, "-m", "scarce.flows.cli", "server", "stop"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.strip() == f"stopped the shared server {url} (background, pid " \
                                  f"{record.pid})"
    assert Place(path).read() is None and not supervisors(path)
    assert not _listening(url)


def test_prefect_api_url_wins_over_the_shared_server(home, tmp_path):
    """With ``PREFECT_API_URL`` set a command uses it: no shared server is started (nor
    looked for), whatever SCARCE_SERVER says."""
    path, holders = home
    url = "http://127.0.0.1:9/api"  # nothing listens: the command must not care here
    holders.append(a := Holder(tmp_path, "a", _env(path, PREFECT_API_URL=url)))
    assert a.url() == url
    a.release()
    assert not (path / shared_server.FOLDER).exists()
    assert not supervisors(path)
    status = subprocess.run([sys.executable, "-m", "scarce.flows.cli", "server", "status"],
                            cwd=tmp_path, env=_env(path, PREFECT_API_URL=url),
                            capture_output=True, text=True, timeout=300)
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith(f"PREFECT_API_URL is set: commands use {url}")


def test_temporary_gives_each_command_its_own_server(home, tmp_path):
    path, holders = home
    env = _env(path, SCARCE_SERVER="temporary")
    holders.extend(Holder(tmp_path, name, env) for name in "ab")
    urls = [h.url() for h in holders]
    assert urls[0] != urls[1]
    assert Place(path).read() is None and not supervisors(path)
    for h in holders:
        h.release()
    for url in urls:
        _wait(lambda u=url: not _listening(u), "a temporary server to stop")


def test_commands_use_the_server_of_scarce_ui_while_it_runs(home, tmp_path):
    from tests.flows.test_server_lifetime import _free_port

    path, holders = home
    env = _env(path)
    port = _free_port()
    with open(tmp_path / "ui.log", "wb") as out:
        ui = subprocess.Popen([sys.executable, "-m", "scarce.flows.cli", "ui", "--port",
                               str(port)], cwd=tmp_path, env=env, stdout=out,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait(lambda: (r := Place(path).read()) is not None and r.kind == "ui",
              "scarce ui to record its server")
        holders.append(a := Holder(tmp_path, "a", env))
        assert a.url() == f"http://127.0.0.1:{port}/api"
        assert not supervisors(path)  # no background server was started
        a.release()
        os.killpg(ui.pid, signal.SIGINT)
        assert ui.wait(120) == 130, (tmp_path / "ui.log").read_text()[-2000:]
        assert Place(path).read() is None
    finally:
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait(30)


def test_a_stale_record_is_replaced(home, tmp_path):
    """A record whose owner is gone (a supervisor killed with SIGKILL, its pid free or
    reused) is no server: the next command starts one and records it."""
    path, holders = home
    folder = path / shared_server.FOLDER
    folder.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (folder / "state.json").write_text(json.dumps(
        {"pid": dead.pid, "start": "1", "url": "http://127.0.0.1:9/api", "kind": "background",
         "started": 0.0, "idle_minutes": 30.0}))
    holders.append(a := Holder(tmp_path, "a", _env(path)))
    url = a.url()
    assert url != "http://127.0.0.1:9/api"
    record = Place(path).read()
    assert record is not None and record.url == url and record.pid != dead.pid
    a.release()


def _deploy_project(root: Path) -> Path:
    """A project with 50 training and test rows of Bibtex and one LEML deployment."""
    import gzip

    from tests.flows.test_deployments import TINY

    (root / "configs").mkdir(parents=True)
    with gzip.open(REPO / "data" / "xmc" / "bibtex" / "bibtex_xmlrepo_train.txt.gz", "rt") as fh:
        lines = fh.read().splitlines()
    _, d, labels = lines[0].split()
    for name in ("train", "test"):
        (root / f"{name}.txt").write_text("\n".join([f"50 {d} {labels}", *lines[1:51]]) + "\n")
    (root / "configs" / "leml.yaml").write_text(TINY)
    (root / "configs" / "deployments.yaml").write_text(
        "deployments:\n  tiny:\n    flow: leml\n    config: configs/leml.yaml\n"
        "    schedule: {cron: '15 6 1 * *', timezone: UTC}\n")
    return root


def test_deploy_and_serve_without_an_api_url_share_a_server_no_idle_stop_ends(home, tmp_path):
    """Without PREFECT_API_URL, ``scarce deploy`` uses the shared server as any command does;
    ``scarce serve`` needs the scheduler, which a background server does not run, so it runs
    a server of its own, recorded as the shared one while it serves: the commands use it, the
    background server it replaced stops once its command is done and idle, and serve's server
    stays up however long it is idle, until Ctrl-C stops serve and it."""
    path, holders = home
    project = _deploy_project(tmp_path / "project")
    env = _env(path, idle=SHORT_IDLE, SCARCE_ROOT=str(project))
    holders.append(a := Holder(tmp_path, "a", env))
    background = a.url()
    cli = [sys.executable, "-m", "scarce.flows.cli"]
    deploy = subprocess.run([*cli, "deploy"], cwd=project, env=env, capture_output=True,
                            text=True, timeout=600)
    assert deploy.returncode == 0, deploy.stderr[-3000:]
    assert f"registered 1 deployment(s) with {background}" in deploy.stdout
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        serve = subprocess.Popen([*cli, "serve"], cwd=project, env=env, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait(lambda: (r := Place(path).read()) is not None and r.kind == "serve"
              or serve.poll() is not None, "scarce serve to record its server")
        record = Place(path).read()
        assert serve.poll() is None, log.read_text()[-3000:]
        assert record.pid == serve.pid and record.url != background
        _wait(lambda: f"against {record.url};" in log.read_text() or serve.poll() is not None,
              "scarce serve to serve")
        assert serve.poll() is None, log.read_text()[-3000:]
        holders.append(b := Holder(tmp_path, "b", env))
        assert b.url() == record.url  # the commands use serve's server while it runs
        b.release()
        a.release()  # the replaced background server: stopped once idle
        _wait(lambda: not supervisors(path), "the replaced background server to stop")
        assert not _listening(background)
        assert serve.poll() is None and Place(path).read() == record and _listening(record.url)
        status = subprocess.run([*cli, "server", "status"], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=300)
        assert f"(scarce serve, pid {serve.pid}" in status.stdout, status.stdout
        assert "runs until scarce serve stops" in status.stdout
        os.killpg(serve.pid, signal.SIGINT)
        assert serve.wait(300) == 0, log.read_text()[-3000:]
        assert Place(path).read() is None
        assert not _listening(record.url)
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait(30)
