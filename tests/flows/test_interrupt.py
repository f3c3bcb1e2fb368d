"""Ctrl-C and SIGTERM end every command that runs flows, promptly and cleanly, and the same
command then completes from the store.

Each command of the class (``scarce run`` of every training flow, ``apply``, ``rerun``, ``run
experiment``) runs as a child process in a session of its own, without ``PREFECT_API_URL``, as
from a terminal, once with each signal: once with a temporary Prefect server of its own
(``SCARCE_SERVER=temporary``, as CI runs commands), once with the shared server (a user's
default) that an earlier command started (:data:`MATRIX`). One of its steps is held (it never
ends by itself: the stand-in of a long step, or of an experiment's child run, that no signal
interrupts) once another step has finished; then Ctrl-C (SIGINT to the command's process group,
as a terminal sends it) or SIGTERM (to the command). Expected: exit 130 or 143 with
``interrupted`` / ``terminated`` as the last line, no process the command started left alive
(its temporary server included), the shared server still serving with the command's lease on it
let go, no flow or task run left unfinished in its server's database (the held step's marked
crashed), every store entry whole (its checksum) and no temporary file, no run folder; then the
same command line, run again, completes, taking every step that had finished from the store.
The resumed command reports to this session's server (the interrupted one's server is what is
under test), and the time each interrupted command took to exit is printed (the measurements
are in the journal; no test depends on them).
"""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from scarce.flows import shared_server
from scarce.flows.cli import FLOW_COMMANDS
from scarce.flows.registry import FLOWS
from scarce.flows.shared_server import Place
from scarce.tasks.store import Store
from tests.flows import procs
from tests.flows.helpers import strip_project
from tests.flows.test_kill_resume import committed, logged_hits

# Runs `scarce ARGS` with one step held: the first step to start once SCARCE_TEST_HOLD_AFTER
# steps have finished writes the file SCARCE_TEST_HELD and then never ends.
HOLDING = textwrap.dedent("""
    import os, sys, threading, time
    from scarce.tasks import steps

    after, held = int(os.environ["SCARCE_TEST_HOLD_AFTER"]), os.environ["SCARCE_TEST_HELD"]
    done, lock, execute = [0], threading.Lock(), steps.execute

    def holding(st, store, call, **kwargs):
        with lock:
            hold = done[0] >= after and not os.path.exists(held)
            if hold:
                open(held, "w").close()
        while hold:
            time.sleep(3600)
        out = execute(st, store, call, **kwargs)
        with lock:
            done[0] += 1
        return out

    steps.execute = holding
    from scarce.flows.cli import entrypoint
    entrypoint(sys.argv[1:])
""")

GUM = procs.DATA / "coref" / "gum"
STRIP_TRAIN, STRIP_TEST = ["GUM_news_stampede", "GUM_news_worship"], "GUM_news_crane"

# The training flows' quick projects: a flow registered without one fails the enumeration.
# The project's own flows: a test module may register a sample flow of its own (tests/flows/
# sample_flow.py), which must not join this enumeration by the order tests are collected in.
TRAIN_FLOWS = sorted(name for name, spec in FLOWS.items()
                     if spec.kind == "train" and spec.target.startswith("scarce.flows."))


def quick_project(root: Path, flow: str) -> Path:
    """A project whose ``configs/<flow>.yaml`` runs ``flow`` in seconds."""
    if flow in procs.CONFIGS:
        return procs.make_project(root, flow)
    if flow == "strip":
        return strip_project(root, GUM, STRIP_TRAIN, STRIP_TEST)
    raise AssertionError(f"no quick config for the training flow {flow!r}: add one here")


# -- the commands of the class -------------------------------------------------------------
CASES = [*(f"run {flow}" for flow in TRAIN_FLOWS), "apply", "rerun", "run experiment"]


SIGNALS = ("SIGINT", "SIGTERM")
#: The kinds of server a command may use (``SCARCE_SERVER``).
SERVERS = ("temporary", "shared")
#: (case, signal, server): every command with both signals and both kinds of server, each
#: signal with each kind of server for half of the commands.
MATRIX = [(case, how, SERVERS[(i + j) % 2])
          for i, case in enumerate(CASES) for j, how in enumerate(SIGNALS)]


def test_the_cases_cover_every_flow_command():
    assert {case.split()[0] for case in CASES} == set(FLOW_COMMANDS)
    assert {case.split()[1] for case in CASES if case.startswith("run ")} == {
        *TRAIN_FLOWS, "experiment"}
    for case in CASES:  # both signals, both servers
        assert {(how, server) for c, how, server in MATRIX if c == case} in (
            {("SIGINT", "temporary"), ("SIGTERM", "shared")},
            {("SIGINT", "shared"), ("SIGTERM", "temporary")})
    assert {(how, server) for _, how, server in MATRIX} == {
        (how, server) for how in SIGNALS for server in SERVERS}


def case_project(case: str, root: Path, tmp_path_factory) -> tuple[Path, list[str]]:
    """The project of one case (its own store and runs folder) and the command's arguments."""
    verb, _, what = case.partition(" ")
    if verb == "run" and what != "experiment":
        return quick_project(root, what), ["run", what]
    if verb == "run":
        project = procs.make_project(root, "relations")
        (project / "configs" / "experiments").mkdir()
        (project / "configs" / "experiments" / "seeds.yaml").write_text(yaml.safe_dump({
            "flow": "relations", "base": "configs/relations.yaml",
            "axes": {"seed": [1, 2]}, "table": {"rows": ["seed"], "metric": "accuracy"}}))
        return project, ["run", "experiment", "seeds"]
    source, run_id = _trained(tmp_path_factory)
    shutil.copytree(source, root)
    if verb == "apply":  # rows the training did not load: the apply computes its steps
        with gzip.open(procs.LEML_CONFIG["dataset"]["test"], "rt") as fh:
            lines = fh.read().splitlines()
        _, d, labels = lines[0].split()
        (root / "new.txt").write_text("\n".join([f"100 {d} {labels}", *lines[1:101]]) + "\n")
        return root, ["apply", run_id, "--input", "new.txt"]
    return root, ["rerun", run_id]


_trained_run: list[tuple[Path, str]] = []


def _trained(tmp_path_factory) -> tuple[Path, str]:
    """A project with one finished LEML run (for apply and rerun), made once, and its id."""
    if not _trained_run:
        project = procs.make_project(tmp_path_factory.mktemp("trained"), "leml")
        procs.run(project, ["run", "leml"], project / "train.log")
        (run_id,) = procs.run_ids(project)
        _trained_run.append((project, run_id))
    return _trained_run[0]


# -- processes ---------------------------------------------------------------------------
def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a process, None when it is gone (or a zombie)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else (int(fields[1]), int(fields[19]))


def descendants(pid: int) -> dict[int, int]:
    """Every live process under ``pid`` (its children, theirs, ...), by pid: its start time."""
    parents: dict[int, list[tuple[int, int]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            parents.setdefault(st[0], []).append((int(entry.name), st[1]))
    out, todo = {}, [pid]
    while todo:
        for child, start in parents.get(todo.pop(), []):
            out[child] = start
            todo.append(child)
    return out


def alive(processes: dict[int, int]) -> list[int]:
    """The processes of ``processes`` (pid: start time) still running."""
    return [pid for pid, start in processes.items() if (_stat(pid) or (0, None))[1] == start]


def wait_for(predicate, cap: float, what: str) -> float:
    """Poll ``predicate`` until it holds (``cap`` seconds at most); the seconds it took."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > cap:
            pytest.fail(f"{what}: not within {cap} s")
        time.sleep(0.05)
    return time.monotonic() - start


def unfinished_runs(home: Path) -> list[tuple[str, str, str]]:
    """The flow and task runs of the database in ``home`` that are not in a final state."""
    import sqlite3

    db = sqlite3.connect(f"file:{home / 'prefect.db'}?mode=ro", uri=True)
    try:
        return [row for table in ("flow_run", "task_run") for row in db.execute(
            f"SELECT '{table}', name, state_type FROM {table} WHERE state_type IN "  # noqa: S608
            "('SCHEDULED', 'PENDING', 'RUNNING', 'PAUSED', 'CANCELLING')")]
    finally:
        db.close()


def terminal_env(project: Path, home: Path, server: str, **extra: str) -> dict[str, str]:
    """The environment of a command run from a terminal (no ``PREFECT_API_URL``) whose server
    is ``server`` (``SCARCE_SERVER``) of the Prefect home ``home``."""
    env = procs.child_env(project, **extra)
    env.pop("PREFECT_API_URL")
    env.update(PREFECT_HOME=str(home), SCARCE_SERVER=server)
    return env


@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory, seeded_prefect_home) -> Path:
    """One Prefect home for the module's temporary servers, its database migrated already."""
    return seeded_prefect_home(tmp_path_factory.mktemp("prefect-home"))


@pytest.fixture(scope="module")
def shared_home(tmp_path_factory, seeded_prefect_home):
    """A Prefect home whose shared server is running, started by an earlier command (one
    that only takes the API), as a user's first command starts it; stopped at the end."""
    home = seeded_prefect_home(tmp_path_factory.mktemp("shared-home"))
    env = terminal_env(tmp_path_factory.mktemp("first-command"), home, "shared",
                       SCARCE_SERVER_IDLE_MINUTES="600")
    first = subprocess.run(
        [sys.executable, "-c", "from scarce.flows.runners import prefect_api\n"
         "with prefect_api() as url:\n    print(url)"],
        env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    yield home
    shared_server.stop(home, force=True)


@pytest.mark.usefixtures("prefect_server")  # slow: Prefect servers and whole commands
@pytest.mark.parametrize(("case", "how", "server"), MATRIX,
                         ids=["-".join((c.replace(" ", "-"), h, s)) for c, h, s in MATRIX])
def test_an_interrupted_command_exits_at_once_and_resumes_from_the_store(
        case, how, server, tmp_path_factory, request):
    home = request.getfixturevalue("prefect_home" if server == "temporary" else "shared_home")
    root = tmp_path_factory.mktemp(case.replace(" ", "-") + "-" + how.lower())
    project, args = case_project(case, root / "project", tmp_path_factory)
    store_root = project / "data" / "cache"
    runs_before = procs.run_ids(project)
    before = committed(store_root)
    held = root / "held"
    log = root / "interrupted.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDING, *args], cwd=project, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
            env=terminal_env(project, home, server, SCARCE_TEST_HOLD_AFTER="1",
                             SCARCE_TEST_HELD=str(held)))
    child = procs.Child(proc, log)
    procs._children.append(child)
    # a step held, and one finished with its Prefect record (written after the step returns;
    # a rerun writes again the entries of the run it repeats)
    reached = procs.wait_until(child, lambda: held.exists() and (
        args[0] == "rerun" or bool(committed(store_root) - before)), timeout=600)
    assert reached, f"the command ended before a step was held:\n{child.output()[-3000:]}"
    started = descendants(proc.pid)
    if server == "temporary":
        assert started, "the command started no process (its Prefect server?)"
    at_signal = time.monotonic()
    if how == "SIGINT":
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    else:
        proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(120)
    except subprocess.TimeoutExpired:
        child.kill()
        pytest.fail(f"{case}: still running 120 s after {how}:\n{child.output()[-3000:]}")
    seconds = time.monotonic() - at_signal
    output = child.output()
    assert code == (130 if how == "SIGINT" else 143), output[-3000:]
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines[-1] == ("interrupted" if how == "SIGINT" else "terminated"), output[-3000:]
    gone = wait_for(lambda: not alive(started), 60, f"the processes {sorted(started)} to end")
    print(f"\n{case}: exit {code} {seconds:.1f} s after {how}; its {len(started)} processes "
          f"gone {gone:.1f} s later")

    if server == "shared":  # the server serves on, the command's lease on it let go
        record, answers, users = shared_server.status(home)
        assert record is not None and answers, "the shared server stopped with the command"
        assert not list(Place(home).leases.glob(f"*.{proc.pid}.*")), "its lease is left"
        assert proc.pid not in users

    # the flow and task runs the command started are all final in its server's database (read
    # from the file): an experiment's child and the held step left running marked crashed,
    # the step's too, whose record the server wrote from its events after the first look
    assert unfinished_runs(home) == []

    store = Store(store_root)
    assert all(store.verify(ref) for ref in store.refs())
    assert procs.stray_files(store_root) == []
    assert procs.run_ids(project) == runs_before, "an interrupted run wrote a run folder"
    done = committed(store_root) - before  # the steps this command finished
    resumed = procs.run(project, args, root / "resumed.log", timeout=600)
    if args[0] == "rerun":  # every step computed again, to the recorded bytes
        assert resumed.rstrip().endswith("identical"), resumed[-3000:]
    else:
        assert done <= logged_hits(resumed), sorted(done - logged_hits(resumed))
    assert len(procs.run_ids(project)) > len(runs_before)
