"""The local Prefect server that commands share: found, started in the background, leased by
each command while it uses it, stopped when idle or by ``scarce server stop``.

Starting a Prefect server takes seconds (tens on a loaded machine), and each command used to
start its own.  A command without ``PREFECT_API_URL`` now uses the one server of its Prefect
home (``PREFECT_HOME``, where the server's database is), and starts it only when there is none:

* The server's record, ``<PREFECT_HOME>/scarce-server/state.json`` (its owner's pid and start
  time, the API's URL, what owns it), is read and written under an exclusive ``flock`` of the
  file ``lock`` beside it, so that commands starting at once agree on one server: the first
  starts it, the others wait for the lock and use it.
* The owner is the supervisor (:func:`serve`, this module run as a program): a small process in
  a session of its own, not killed with the command that started it, which runs the server
  (uvicorn with Prefect's app, as Prefect's own temporary server runs it; the server dies with
  the supervisor) and stops it after ``SCARCE_SERVER_IDLE_MINUTES`` without a command using it.
  Or the owner is ``scarce ui`` or ``scarce serve`` (:func:`scheduling`), whose server the
  commands use while it runs.
* A command holds a lease while it uses the server: a file under ``leases/`` that it keeps an
  exclusive ``flock`` on, so that the kernel releases it however the command ends (SIGKILL
  included), and the supervisor never stops the server under a running command.  The idle stop
  removes the record under the lock, so no command takes a server that is stopping.
* A record whose owner is gone (its pid dead, or reused: another start time) is stale and
  replaced; one whose owner lives but whose URL does not answer yet is a server still
  starting (its starter was killed while waiting), waited for.

``SCARCE_SERVER=temporary`` gives each command its own temporary server instead, stopped when
the command ends (:func:`scarce.flows.runners.prefect_api`), for CI and tests that want no process
outliving them.  Nothing here imports Prefect, so that the supervisor stays a small process.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scarce.flows import preload
from scarce.flows.server_process import file_size_limit, last_error, launch_server
from scarce.tasks.errors import InputError

#: The folder of the shared server's files, under ``PREFECT_HOME``.
FOLDER = "scarce-server"
#: The longest pause between two looks of the supervisor at its leases and its server.
POLL_SECONDS = 5.0
#: Seconds a server has to stop after SIGTERM before it is killed.
STOP_GRACE = 10.0


# -- the settings ----------------------------------------------------------------------------
def mode() -> str:
    """``SCARCE_SERVER``: ``shared`` or ``temporary`` (:func:`scarce.flows.environment.server`)."""
    from scarce.flows.environment import server

    return server()


def idle_minutes() -> float:
    """``SCARCE_SERVER_IDLE_MINUTES`` (:func:`scarce.flows.environment.server_idle_minutes`)."""
    from scarce.flows.environment import server_idle_minutes

    return server_idle_minutes()


# -- the record ----------------------------------------------------------------------------
#: The start time of a process (:func:`scarce.flows.preload.process_start`).
process_start = preload.process_start


@dataclass(frozen=True)
class Record:
    """The shared server as ``state.json`` records it.

    Attributes
    ----------
    pid, start : int, str
        The owner (the supervisor, or ``scarce ui``) and its start time (:func:`process_start`),
        which tells it from a later process given the same pid.
    url : str
        The Prefect API, ``http://127.0.0.1:PORT/api``.
    kind : {"background", "ui", "serve"}
        Who owns it: the supervisor, ``scarce ui`` or ``scarce serve``.
    started : float
        When it was started (seconds since the epoch).
    idle_minutes : float or None
        The background server's idle time; None for ``scarce ui``'s and ``scarce serve``'s,
        which run until stopped.
    """

    pid: int
    start: str
    url: str
    kind: str
    started: float
    idle_minutes: float | None = None

    def owner_alive(self) -> bool:
        """Whether the owner still runs (the same process, not a reused pid)."""
        now = process_start(self.pid)
        return now is not None and (now == self.start or not now or not self.start)

    def answers(self, timeout: float = 5.0) -> bool:
        """Whether the API answers its health check."""
        return health(self.url, timeout)


def health(url: str, timeout: float = 5.0) -> bool:
    """Whether the Prefect API at ``url`` answers ``GET /health`` (proxies left out: the
    server is on this machine)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{url}/health", timeout=timeout) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError, ValueError):
        return False


class Place:
    """The files of the shared server of one Prefect home (see the module notes)."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.home = Path(home).expanduser()
        self.folder = self.home / FOLDER
        self.state = self.folder / "state.json"
        self.leases = self.folder / "leases"
        self.last_used = self.folder / "last-used"
        self.log = self.folder / "server.log"

    @contextlib.contextmanager
    def locked(self, wait: bool = True) -> Iterator[bool]:
        """Hold the lock of the record (yields False when ``wait`` is off and another
        process holds it).  Released when the block ends, or by the kernel when the process
        dies."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder / "lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def read(self) -> Record | None:
        """The record, None when there is none (or it cannot be read: it is then replaced)."""
        try:
            data = json.loads(self.state.read_text())
            return Record(**data)
        except (OSError, ValueError, TypeError):
            return None

    def write(self, record: Record) -> None:
        tmp = self.folder / f".state-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.write_text(json.dumps(asdict(record)))
        os.replace(tmp, self.state)

    def remove(self, owner: int | None = None) -> None:
        """Remove the record (only when it names ``owner``, if given)."""
        record = self.read()
        if owner is None or record is not None and record.pid == owner:
            with contextlib.suppress(FileNotFoundError):
                self.state.unlink()

    def lease(self, owner: int) -> Lease:
        """A lease on the server of ``owner``, for this process."""
        return Lease(self, owner)

    def held(self, owner: int) -> list[int]:
        """The pids of the commands holding a lease on the server of ``owner``; the leases of
        commands that are gone (their lock released) are removed."""
        pids = []
        with contextlib.suppress(FileNotFoundError):
            for path in self.leases.iterdir():
                parts = path.name.split(".")
                if path.name.startswith(".new-"):  # a command killed as it took its lease
                    with contextlib.suppress(OSError):
                        if time.time() - path.stat().st_mtime > 60:
                            path.unlink()
                    continue
                if len(parts) != 3 or parts[0] != str(owner):
                    continue
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    pids.append(int(parts[1]))
                else:  # its command ended without releasing it (killed)
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                finally:
                    os.close(fd)
        return pids

    def idle_since(self) -> float:
        """When a command last stopped using the server (seconds since the epoch; 0 when
        none has)."""
        try:
            return self.last_used.stat().st_mtime
        except FileNotFoundError:
            return 0.0


class Lease:
    """A command's hold on the shared server: a file of ``leases/`` named by the owner's pid,
    this process's pid and a random part, with an exclusive ``flock`` this process keeps.

    The file is locked before it gets its name (it is made under a temporary one and renamed),
    so that the supervisor never sees it unlocked while the command lives."""

    def __init__(self, place: Place, owner: int) -> None:
        self.place = place
        place.leases.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(4)
        tmp = place.leases / f".new-{os.getpid()}-{token}"
        self.fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        os.write(self.fd, " ".join(sys.argv).encode(errors="replace"))
        self.path = place.leases / f"{owner}.{os.getpid()}.{token}"
        os.replace(tmp, self.path)

    def release(self) -> None:
        """Say when the server was last used, then let it go."""
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            self.place.last_used.touch()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self.fd)
        self.fd = -1


# -- a command's use of the shared server --------------------------------------------------
class SharedServerError(InputError):
    """The shared server could not be started: one line with the server's last error."""


@contextlib.contextmanager
def shared(home: str | os.PathLike[str], env: Callable[[], dict[str, str]], timeout: float,
           log: Any = None) -> Iterator[str]:
    """The URL of the shared server of ``home``, started in the background when there is none
    (with the environment ``env()``, waiting at most ``timeout`` seconds for it to answer),
    leased for the block.

    Raises
    ------
    SharedServerError
        When a server started here exits or does not answer in time.
    """
    place = Place(home)
    with place.locked():
        record = _usable(place, timeout)
        if record is None:
            record = _start(place, env, timeout, log)
        elif log is not None:
            log(f"Using the shared Prefect server at {record.url}")
        lease = place.lease(record.pid)
    try:
        yield record.url
    finally:
        lease.release()
    # (a command that ends with an error or a signal starts nothing)
    preload.ensure(place.home, record.pid)


def _usable(place: Place, timeout: float) -> Record | None:
    """The recorded server if it answers, waiting for one still starting; None (the stale
    record removed) when there is none to use."""
    record = place.read()
    if record is None:
        return None
    deadline = time.monotonic() + timeout
    while record.owner_alive():
        if record.answers():
            return record
        if time.monotonic() > deadline:  # hung: a background one is ended and replaced
            if record.kind == "background":
                _end(record.pid)
            break
        time.sleep(0.1)
    place.remove()
    return None


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(place: Place, env: Callable[[], dict[str, str]], timeout: float,
           log: Any) -> Record:
    """Start the supervisor and its server, record it and wait for it to answer (the lock
    held: the other commands wait for this one's server)."""
    minutes = idle_minutes()
    environment = env()
    for _ in range(5):  # another process may take the chosen port before the server binds it
        port = free_port()
        url = f"http://127.0.0.1:{port}/api"
        if log is not None:
            log(f"Starting the shared Prefect server on {url} in the background (it stops "
                f"after {minutes:g} min without a command; `scarce server stop` stops it)")
        with open(place.log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "scarce.flows.shared_server", str(place.home),
                 str(port), repr(minutes * 60)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=environment,
                cwd=place.folder,  # not the command's folder, which it would keep in use
                start_new_session=True, close_fds=True)
        record = Record(pid=proc.pid, start=process_start(proc.pid) or "", url=url,
                        kind="background", started=time.time(), idle_minutes=minutes)
        place.write(record)
        deadline = time.monotonic() + timeout
        try:
            while proc.poll() is None and not record.answers(timeout=2):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        except BaseException:  # interrupted while it starts: it serves no one yet
            _stop_child(proc)
            place.remove(proc.pid)
            raise
        code = proc.poll()
        if code is None and record.answers(timeout=2):
            return record
        _stop_child(proc)
        place.remove(proc.pid)
        lines = place.log.read_text(errors="replace").splitlines()
        if code == 3 and any("address already in use" in line.lower() for line in lines):
            continue
        if code is None:
            raise SharedServerError(
                f"the shared Prefect server did not answer within {timeout:g} s: "
                f"{last_error(lines)} (its log: {place.log}; the limit is "
                "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)", path=place.home)
        raise SharedServerError(
            f"the shared Prefect server exited while starting (code {code}): "
            f"{last_error(lines)}{file_size_limit()}; its database is under PREFECT_HOME "
            f"(its log: {place.log}; or set PREFECT_API_URL to use a running server)",
            path=place.home)
    raise SharedServerError("no free port for the shared Prefect server after 5 tries",
                            path=place.home)


def _stop_child(proc: subprocess.Popen) -> None:
    """End a supervisor this process started (its server dies with it)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE + 5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _end(pid: int, grace: float = STOP_GRACE + 5) -> bool:
    """SIGTERM the process ``pid`` (not a child of this one), SIGKILL after ``grace``
    seconds; whether it is gone."""
    start = process_start(pid)
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            now = process_start(pid)
            if now is None or (start and now != start):
                return True
            time.sleep(0.05)
    return process_start(pid) is None


# -- scarce ui: its server is the shared one while it runs ----------------------------------
def register_ui(home: str | os.PathLike[str], url: str) -> None:
    """Record the server of ``scarce ui`` (this process) as the shared server: commands use
    it while it runs.  A background server it replaces stops once its commands are done."""
    place = Place(home)
    with place.locked():
        place.write(Record(pid=os.getpid(), start=process_start(os.getpid()) or "", url=url,
                           kind="ui", started=time.time()))


def unregister_ui(home: str | os.PathLike[str]) -> None:
    """Remove the record of this process's ``scarce ui`` server, if it is still the one."""
    place = Place(home)
    with place.locked():
        place.remove(os.getpid())


# -- scarce serve: a server that runs the schedules -------------------------------------------
#: The kinds of server whose Prefect services run (the scheduler among them): a background
#: server runs as Prefect's temporary server does, without them.
SCHEDULING = ("ui", "serve")


@contextlib.contextmanager
def scheduling(home: str | os.PathLike[str], env: Callable[[], dict[str, str]], timeout: float,
               record: bool = True, log: Any = None) -> Iterator[str]:
    """The URL of a server of ``home`` that runs Prefect's services, for ``scarce serve``.

    A background server runs without them (as Prefect's temporary server does): its
    deployments' schedules would never create a run.  So the recorded server is used (leased
    for the block) only when it is ``scarce ui``'s or another ``scarce serve``'s; else a
    ``prefect server start`` (no UI) is started here, on a free port, with the environment
    ``env()``, and, when ``record``, recorded as the shared server while the block runs (the
    commands use it; a background server it replaces stops once its commands are done).  It
    stops when the block ends, and with this process however it ends.

    Raises
    ------
    SharedServerError
        When the server started here exits or does not answer within ``timeout`` seconds.
    """
    from scarce.flows.server_process import launch_server

    place = Place(home)
    with place.locked():
        found = _usable(place, timeout) if record else None
        if found is not None and found.kind in SCHEDULING:
            if log is not None:
                log(f"Using the Prefect server of {found.kind} (pid {found.pid}) at {found.url}")
            lease = place.lease(found.pid)
        else:
            lease = None
            port = free_port()
            url = f"http://127.0.0.1:{port}/api"
            if log is not None:
                log(f"Starting a Prefect server with its scheduler on {url} while this "
                    "command runs")
            server_log = place.folder / f"serve-{os.getpid()}.log"
            # (the lock a temporary server starts under: two servers that migrate one
            # database at once collide on its schema)
            start_lock = os.open(place.home / "scarce-server-start.lock",
                                 os.O_RDWR | os.O_CREAT, 0o666)
            fcntl.flock(start_lock, fcntl.LOCK_EX)
            with open(server_log, "wb") as out:
                server = launch_server(
                    [sys.executable, "-m", "prefect", "server", "start", "--host",
                     "127.0.0.1", "--port", str(port), "--no-ui", "--analytics-off"],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    env={k: v for k, v in env().items() if k != "PREFECT_API_URL"},
                    cwd=place.folder)
            found = Record(pid=os.getpid(), start=process_start(os.getpid()) or "", url=url,
                           kind="serve", started=time.time())
            try:
                deadline = time.monotonic() + timeout
                while server.poll() is None and not found.answers(timeout=2):
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
                if server.poll() is not None or not found.answers(timeout=2):
                    lines = server_log.read_text(errors="replace").splitlines()
                    raise SharedServerError(
                        f"the Prefect server of scarce serve did not start: {last_error(lines)}"
                        f" (its log: {server_log})", path=place.home)
                if record:
                    place.write(found)
            except BaseException:
                _stop_child(server)
                raise
            finally:
                os.close(start_lock)
    try:
        yield found.url
    finally:
        if lease is not None:
            lease.release()
        else:
            try:
                if record:
                    with place.locked():
                        place.remove(os.getpid())  # before it stops: no command waits for it
            finally:
                _stop_child(server)


# -- scarce server status | stop -------------------------------------------------------------
def status(home: str | os.PathLike[str]) -> tuple[Record | None, bool, list[int]]:
    """The recorded server of ``home`` (None when there is none, or its owner is gone),
    whether it answers, and the pids of the commands using it."""
    place = Place(home)
    record = place.read()
    if record is None or not record.owner_alive():
        return None, False, []
    return record, record.answers(), place.held(record.pid)


def stop(home: str | os.PathLike[str], force: bool = False) -> tuple[Record | None, list[int]]:
    """Stop the shared server of ``home`` (its owner: the supervisor, or ``scarce ui``) and
    remove its record; returns the record (None when none runs) and the pids of the commands
    still using it, when they held it back (``force`` stops it under them)."""
    place = Place(home)
    with place.locked():
        record = place.read()
        if record is None or not record.owner_alive():
            place.remove()
            preload.stop(home)
            return None, []
        users = place.held(record.pid)
        if users and not force:
            return record, users
        _end(record.pid)
        place.remove(record.pid)
        preload.stop(home)
        return record, []


# -- the supervisor ----------------------------------------------------------------------------
class _Stop(BaseException):
    """A signal to the supervisor: stop the server and exit."""


def _stop_signal(signum: int, frame: Any) -> None:
    raise _Stop


def serve(home: str, port: int, idle_seconds: float) -> int:
    """The supervisor: run Prefect's server on ``port`` until it has had no command for
    ``idle_seconds`` (or this process gets SIGTERM, SIGINT or SIGHUP, or the server exits)."""
    import importlib.util

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _stop_signal)
    place = Place(home)
    me = os.getpid()
    spec = importlib.util.find_spec("prefect")
    app_dir = str(Path(spec.origin).parent.parent) if spec and spec.origin else "."
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
           "PREFECT__SERVER_FINAL": "1"}
    env.pop("PREFECT_API_URL", None)
    server = None
    try:
        # launched in a session of its own, and killed by the kernel if this process dies
        server = launch_server([
            sys.executable, "-m", "uvicorn", "--app-dir", app_dir, "--factory",
            "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port",
            str(port), "--log-level", "error", "--lifespan", "on"], env=env)
        used = time.time()
        poll = min(POLL_SECONDS, max(idle_seconds / 10, 0.2))
        while True:
            code = server.poll()
            if code is not None:
                print(f"the Prefect server exited with code {code}", flush=True)
                return code or 1
            time.sleep(poll)
            record = place.read()
            mine = record is not None and record.pid == me
            if place.held(me):
                used = time.time()
                continue
            used = max(used, place.idle_since())
            if mine and time.time() - used < idle_seconds:
                continue
            # idle, or replaced (by `scarce ui`): stop, unless a command takes it meanwhile
            with place.locked(wait=False) as got:
                if not got or place.held(me):
                    continue
                if mine and time.time() - max(used, place.idle_since()) < idle_seconds:
                    continue
                place.remove(me)
                print(f"stopping: {'idle' if mine else 'replaced'}", flush=True)
                break
    except _Stop:
        print("stopping: asked to", flush=True)
    finally:
        if server is not None:
            _stop_child(server)
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
