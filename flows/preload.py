"""Commands run in a fork of a process that has already imported the flows: the preloaded
process that lives beside the shared Prefect server.

A command that runs flows spends seconds importing Prefect, pandas, pyarrow and the flows'
modules before it does any work, more than the work of an ``apply`` of a few thousand rows.
Starting the server once (:mod:`scarce.flows.shared_server`) took its start-up out of each
command; this takes the imports out too, as a fork server does (``multiprocessing``'s
``forkserver`` works this way, but it runs Python functions, not a command line with the
caller's terminal, folder, environment and signals, so it is not used here):

* When a command of :data:`COMMANDS` finishes with the shared server, it starts (if none fits)
  the **preloaded process** (:func:`serve`, run by :mod:`scarce.flows.launch` as a program):
  in a session of its own, with the command's environment, it listens on a Unix socket,
  imports the command line and every flow's module, and then waits.  Its record,
  ``preload.json`` beside the server's, gives its pid, socket and **key**.
* The ``scarce`` command (:func:`scarce.flows.launch.entrypoint`, through
  :func:`run_preloaded`) first reads that record.  When the key is its
  own, it sends the preloaded process its arguments, folder, umask, environment and its
  standard input, output and error (the descriptors themselves, so the command writes to the
  user's terminal or pipe as it would have); the process forks, and the child runs the command
  line (:func:`scarce.flows.cli.main`) as a fresh process would, then reports its exit code.
  Ctrl-C and SIGTERM given to the ``scarce`` process are passed on to the child; if the
  ``scarce`` process dies (SIGKILL), the child is ended with SIGTERM (its ``finally`` blocks
  run: leases released, nothing left running).  Without a record, with another key, or when
  the process does not take the command, the command runs in its own process as before.
* The **key** says when a fork is the same as a fresh process: the interpreter, its path, the
  mtimes and sizes of this package's files and of the folders on the path (an install or an
  edit changes them), the resource limits and user, and every environment variable but
  those read only when used (:data:`PER_COMMAND`).  What a fresh process reads at import
  time (Prefect's settings, the BLAS threads) therefore cannot differ; what it reads from the
  current folder when it starts (Prefect's settings files) is read again in the child.
* It stops with the shared server: when the server's record is gone or names another server
  (an idle stop, ``scarce server stop``), and when a command with another key replaces it.

``SCARCE_PRELOAD=off`` turns it off (each command imports for itself); it is never used with
``SCARCE_SERVER=temporary``.  Only the standard library is imported on the way to the socket:
the point is to import nothing else before the command runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The commands run in the preloaded process: those that use the shared server.
COMMANDS = ("run", "rerun", "apply")
#: The variable that turns the preloaded process off, and its values (the default first).
VARIABLE = "SCARCE_PRELOAD"
VALUES = ("on", "off")
#: The record and log of the preloaded process, in the shared server's folder.
RECORD, LOG = "preload.json", "preload.log"
#: Environment variables left out of the key: the shell's own bookkeeping, and scarce's
#: folders, which are read when used (:mod:`scarce.flows.environment`), never on import.
PER_COMMAND = frozenset({"PWD", "OLDPWD", "SHLVL", "_", "SCARCE_ROOT", "SCARCE_STORE",
                         "SCARCE_RUNS"})
#: The longest pause between two looks of the preloaded process at the server's record.
POLL_SECONDS = 2.0
#: The top-level folders of the package (``scarce`` and the subpackages it maps).
_PACKAGE = Path(__file__).resolve().parent.parent
_FOLDERS = ("scarce", "algorithms", "tasks", "flows", "bench", "configs")


# -- where and who -----------------------------------------------------------------------------
def folder(home: str | os.PathLike[str]) -> Path:
    """The shared server's folder of the Prefect home ``home`` (its record and lock)."""
    return Path(home).expanduser() / "scarce-server"


def _home(env: dict[str, str]) -> Path:
    """The Prefect home as the environment gives it (Prefect's default when unset)."""
    return Path(env.get("PREFECT_HOME") or "~/.prefect").expanduser()


def enabled(env: dict[str, str] | os._Environ) -> bool:
    """Whether commands of this environment may use the preloaded process: ``SCARCE_PRELOAD``
    is ``on`` (or unset) and the server is the shared one.  A value the checks refuse
    (:mod:`scarce.flows.environment`) is left for them: the command runs in its own process."""
    return (env.get(VARIABLE, VALUES[0]).strip() == VALUES[0]
            and env.get("SCARCE_SERVER", "shared").strip() == "shared")


def command_of(argv: list[str]) -> str | None:
    """The command of a ``scarce`` command line (its first word that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


# -- the key -----------------------------------------------------------------------------------
def _files_digest(h: Any) -> None:
    for top in _FOLDERS:
        base = _PACKAGE / top
        stack = [base]
        while stack:
            here = stack.pop()
            try:
                entries = sorted(os.scandir(here), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        stack.append(Path(entry.path))
                elif entry.name.endswith((".py", ".yaml", ".pth")):
                    st = entry.stat()
                    h.update(f"{entry.path}\0{st.st_mtime_ns}\0{st.st_size}\0".encode(
                        errors="surrogateescape"))


def key(env: dict[str, str] | os._Environ, path: list[str]) -> str:
    """What makes a fork of the preloaded process the same as a fresh ``scarce`` process of
    the environment ``env`` and module path ``path`` (see the module notes)."""
    import resource

    h = hashlib.sha256()
    h.update(f"{sys.executable}\0{sys.version}\0{os.getuid()}\0".encode())
    for entry in path:
        try:
            mtime = os.stat(entry or ".").st_mtime_ns
        except OSError:
            mtime = -1
        h.update(f"{entry}\0{mtime}\0".encode(errors="surrogateescape"))
    _files_digest(h)
    for name in ("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_STACK"):
        if hasattr(resource, name):
            h.update(f"{name}={resource.getrlimit(getattr(resource, name))}\0".encode())
    for name in sorted(env):
        if name not in PER_COMMAND:
            h.update(f"{name}={env[name]}\0".encode(errors="surrogateescape"))
    return h.hexdigest()


def command_environment(env: dict[str, str] | os._Environ | None = None) -> dict[str, str]:
    """The environment a command runs with: ``env`` (default: this process's) with the
    settings the command line pins before it imports anything
    (:func:`scarce.flows.runners.pin_threads`, whose defaults are repeated here so that the
    client imports nothing of the project's)."""
    env = dict(os.environ if env is None else env)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, "1")
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    env.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    return env


# -- the record --------------------------------------------------------------------------------
def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux: clock ticks since boot, as ``/proc`` gives
    it), ``""`` where the system does not tell, None when no such process lives (the shared
    server's record uses it too: :mod:`scarce.flows.shared_server` imports this module)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def read(home: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The record of the preloaded process of ``home`` when that process lives, else None."""
    try:
        record = json.loads((folder(home) / RECORD).read_text())
        pid, start = int(record["pid"]), str(record["start"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    now = process_start(pid)
    if now is None or (now and start and now != start):
        return None
    return record


def ready(home: str | os.PathLike[str]) -> bool:
    """Whether the preloaded process of ``home`` lives and has done its imports."""
    return bool((read(home) or {}).get("ready"))


def _write(home: str | os.PathLike[str], record: dict[str, Any]) -> None:
    place = folder(home)
    tmp = place / f".preload-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, place / RECORD)


@contextlib.contextmanager
def _locked(home: str | os.PathLike[str]):
    """The shared server's lock (:meth:`scarce.flows.shared_server.Place.locked`)."""
    place = folder(home)
    place.mkdir(parents=True, exist_ok=True)
    fd = os.open(place / "lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _address(token: str, home: str | os.PathLike[str]) -> str:
    """The socket's address: Linux's abstract namespace (no file to leave behind, no length
    limit from a deep Prefect home), else a file in the server's folder."""
    if sys.platform.startswith("linux"):
        return f"\0scarce-preload-{token}"
    return str(folder(home) / f"preload-{token}.sock")


def _end(record: dict[str, Any]) -> None:
    """Stop a preloaded process (the commands it runs go on: they are its children, not it)."""
    with contextlib.suppress(ProcessLookupError, ValueError, KeyError):
        os.kill(int(record["pid"]), signal.SIGTERM)


# -- the command's side -------------------------------------------------------------------------
#: The environment this command started with (set by :func:`scarce.flows.cli.main` before it
#: changes any variable), which a preloaded process it starts is given.
_STARTED_WITH: dict[str, str] | None = None


def remember_environment() -> None:
    """Keep this command's environment as it started (the key of a preloaded process it
    starts must be that of the next command started the same way)."""
    global _STARTED_WITH
    if _STARTED_WITH is None:
        _STARTED_WITH = command_environment()


def ensure(home: str | os.PathLike[str], server_pid: int) -> None:
    """Start the preloaded process of the shared server ``server_pid`` of ``home``, unless one
    of this command's key runs already (one of another key is replaced).  Called when a
    command of :data:`COMMANDS` lets the shared server go; never raises (the command's own
    work is done, and commands run without the process as well)."""
    if _STARTED_WITH is None or not enabled(_STARTED_WITH):
        return
    try:
        mine = key(_STARTED_WITH, sys.path)
        with _locked(home):
            record = read(home)
            if record is not None:
                if record.get("key") == mine and record.get("server") == server_pid \
                        and _answers(record):
                    return
                _end(record)
            _start(home, server_pid, mine)
    except Exception as exc:  # noqa: BLE001 (see the docstring)
        print(f"note: the preloaded process was not started: {exc}", file=sys.stderr)


def _answers(record: dict[str, Any]) -> bool:
    """Whether the process's socket takes a connection (it may still be importing)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(record["address"])
        except (OSError, KeyError):
            return False
        sock.sendall(_frame({"ping": True}))
        return True


def _start(home: str | os.PathLike[str], server_pid: int, mine: str) -> None:
    import subprocess

    token = secrets.token_hex(8)
    address = _address(token, home)
    place = folder(home)
    with open(place / LOG, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scarce.flows.launch", str(home), str(server_pid), token,
             mine, json.dumps(sys.path)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=_STARTED_WITH, cwd=place, start_new_session=True, close_fds=True)
    _write(home, {"pid": proc.pid, "start": process_start(proc.pid) or "", "key": mine,
                  "address": address, "server": server_pid, "started": time.time()})


def _frame(message: dict[str, Any]) -> bytes:
    data = json.dumps(message).encode("utf-8", errors="surrogateescape")
    return struct.pack("!I", len(data)) + data


def _read_frame(sock: socket.socket) -> dict[str, Any] | None:
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    data = _recv_exact(sock, struct.unpack("!I", head)[0])
    return None if data is None else json.loads(data.decode("utf-8", errors="surrogateescape"))


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def run_preloaded(argv: list[str]) -> int | None:
    """Run the command line ``argv`` in the preloaded process; its exit code, or None when
    it cannot be run there (then nothing of it has run)."""
    if command_of(argv) not in COMMANDS:
        return None
    env = command_environment()
    if not enabled(env):
        return None
    home = _home(env)
    record = read(home)
    if record is None or record.get("key") != key(env, sys.path):
        return None
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:  # a closed standard stream: it cannot be handed over
            return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(record["address"])
        request = {"key": record["key"], "argv": argv, "argv0": sys.argv[0],
                   "cwd": os.getcwd(), "umask": _umask(), "env": env, "path": sys.path}
        socket.send_fds(sock, [_frame(request)], [0, 1, 2])
        reply = _read_frame(sock)
    except (OSError, ValueError):
        sock.close()
        return None
    except KeyboardInterrupt:  # a child forked meanwhile ends when it finds no one here
        sock.close()
        print("interrupted", file=sys.stderr)
        return 130
    if not reply or "started" not in reply:  # refused, or gone before it forked
        sock.close()
        return None
    return _follow(sock)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _follow(sock: socket.socket) -> int:
    """Pass this process's signals on to the command's process until it reports its exit
    code."""
    def forward(signum: int, frame: Any) -> None:
        with contextlib.suppress(OSError):
            sock.sendall(_frame({"signal": signum}))

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    try:
        while True:
            try:
                message = _read_frame(sock)
            except InterruptedError:
                continue
            if message is None:
                print("error: the command's process ended without an exit code (see the "
                      "preloaded process's log, preload.log beside the shared server's)",
                      file=sys.stderr)
                return 1
            if "exit" in message:
                return int(message["exit"])
    finally:
        sock.close()


# -- the preloaded process ---------------------------------------------------------------------
class _Stop(BaseException):
    pass


def _stop_signal(signum: int, frame: Any) -> None:
    raise _Stop


def serve(home: str, server_pid: int, token: str, expected: str, load: Callable[[], None],
          run: Callable[[list[str]], int]) -> int:
    """The preloaded process: listen on the socket of ``token`` (:func:`_address`), import
    (``load()``), then fork a child for each command sent, which runs ``run(argv)`` (the
    command line, and what a fresh process does at exit: its exit code), until the server
    ``server_pid`` of ``home`` is no longer the shared one (or SIGTERM).  The command line
    itself is given by :mod:`scarce.flows.launch`, the layer above this one."""
    address = _address(token, home)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _stop_signal)
    me = os.getpid()
    _ERR_IS_TERMINAL[0] = os.isatty(2)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    children: set[int] = set()
    try:
        listener.bind(address)  # before the imports: commands sent meanwhile wait for them
        listener.listen(64)
        if key(os.environ, sys.path) != expected:
            print("stopping: this process's key is not its record's", flush=True)
            return 0
        load()
        import threading

        if threading.active_count() != 1:
            print(f"stopping: the imports started threads {threading.enumerate()}", flush=True)
            return 0
        with _locked(home):
            record = read(home)
            if record is None or record.get("pid") != me:
                print("stopping: replaced while importing", flush=True)
                return 0
            _write(home, {**record, "ready": True})
        listener.settimeout(POLL_SECONDS)
        print(f"ready: pid {me}", flush=True)
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                conn = None
            _reap(children)
            if not _server_is(home, server_pid) or (read(home) or {}).get("pid") != me:
                print("stopping: the shared server or this record was replaced", flush=True)
                return 0
            if conn is None:
                continue
            pid = _take(conn, listener, expected, run)
            if pid:
                children.add(pid)
    except _Stop:
        print("stopping: asked to", flush=True)
        return 0
    finally:
        if os.getpid() == me:
            listener.close()
            with contextlib.suppress(OSError), _locked(home):
                if (read(home) or {}).get("pid") == me:
                    (folder(home) / RECORD).unlink()


def _server_is(home: str, server_pid: int) -> bool:
    try:
        record = json.loads((folder(home) / "state.json").read_text())
        return int(record["pid"]) == server_pid and process_start(server_pid) is not None
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _reap(children: set[int]) -> None:
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if not done:
                continue
        children.discard(pid)


def _take(conn: socket.socket, listener: socket.socket, expected: str,
          run: Callable[[list[str]], int]) -> int | None:
    """Read a command from ``conn`` and fork its child; the child's pid (None: not taken)."""
    fds: list[int] = []
    try:
        conn.settimeout(30)
        head, fds, _, _ = socket.recv_fds(conn, 4, 3)
        if len(head) < 4:
            return None
        data = _recv_exact(conn, struct.unpack("!I", head)[0])
        request = json.loads(data) if data else None
        if not request or request.get("ping") or request.get("key") != expected or \
                len(fds) != 3:
            if request and not request.get("ping"):
                conn.sendall(_frame({"refused": "another key"}))
            return None
        sys.stdout.flush()
        pid = os.fork()
        if pid:
            print(f"command: pid {pid}: {' '.join(request['argv'])}", flush=True)
        else:
            try:
                listener.close()
                _child(conn, request, fds, run)
            finally:
                os._exit(1)  # (never reached: _child exits)
        return pid
    except (OSError, ValueError, TypeError):
        return None
    finally:
        conn.close()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _child(conn: socket.socket, request: dict[str, Any], fds: list[int],
           run: Callable[[list[str]], int]) -> None:
    """Become the command's process: its streams, folder, umask, environment and arguments,
    then run the command line and report its exit code."""
    import io
    import threading

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    fds.clear()
    conn.settimeout(None)
    finished = threading.Event()

    def report(code: int) -> None:
        finished.set()
        with contextlib.suppress(OSError):
            conn.sendall(_frame({"exit": code}))

    try:
        os.chdir(request["cwd"])
    except OSError as exc:
        os.write(2, f"error: the current folder: {exc}\n".encode())
        report(1)
        os._exit(1)
    os.umask(int(request["umask"]))
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["argv0"], *request["argv"]]
    sys.path[:] = request["path"]
    _fresh_streams(io)
    _fresh_libraries()

    def watch() -> None:  # the client's signals, or its end
        while True:
            try:
                message = _read_frame(conn)
            except OSError:
                message = None
            if message is None:
                if not finished.is_set():
                    os.kill(os.getpid(), signal.SIGTERM)
                return
            if "signal" in message and not finished.is_set():
                os.kill(os.getpid(), int(message["signal"]))

    threading.Thread(target=watch, name="scarce-preload-client", daemon=True).start()
    conn.sendall(_frame({"started": os.getpid()}))
    code = run(request["argv"])
    report(code)
    os._exit(code)


def _fresh_streams(io: Any) -> None:
    """Standard streams for the descriptors received, made as Python makes them at start-up
    (stdout line-buffered on a terminal, stderr always); the old ones are kept, not closed."""
    _KEPT[:] = [sys.stdin, sys.stdout, sys.stderr]
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        old = getattr(sys, name)
        raw = io.FileIO(fd, mode, closefd=False)
        buffered = (io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw))
        line = mode == "w" and (fd == 2 or raw.isatty())
        stream = io.TextIOWrapper(buffered, encoding=old.encoding, errors=old.errors,
                                  line_buffering=line,
                                  write_through=mode == "w" and unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


_KEPT: list[Any] = []
#: Whether this process's standard error was a terminal when Prefect set its logging up.
_ERR_IS_TERMINAL = [False]


def _fresh_libraries() -> None:
    """What the imported libraries read from the process when imported that a fresh process
    would read anew: Prefect's settings (its profiles and the settings files of the current
    folder) and its console logging (bound to the new streams); numpy's global random state
    (each fresh process draws its own)."""
    if "prefect.context" in sys.modules:
        from prefect.context import refresh_global_settings_context
        from prefect.logging.configuration import setup_logging

        refresh_global_settings_context()
        if _ERR_IS_TERMINAL[0] != sys.stderr.isatty():
            # Prefect's console log chose its colours for this process's first stderr (most
            # of a second to set it up again, so only when a terminal came or went); its
            # handlers write to descriptor 2 either way
            setup_logging(incremental=False)
    if "numpy" in sys.modules:
        import numpy as np

        np.random.seed()


def stop(home: str | os.PathLike[str]) -> dict[str, Any] | None:
    """Stop the preloaded process of ``home`` (with the server: ``scarce server stop``, which
    holds the shared server's lock); its record, None when none ran."""
    record = read(home)
    if record is not None:
        _end(record)
    with contextlib.suppress(FileNotFoundError):
        (folder(home) / RECORD).unlink()
    return record
