"""The preloaded process (:mod:`scarce.flows.preload`): a command of the ``scarce`` script run in
a fork of a process that has imported the flows, as a fresh process would run it.

The key's cases are checked against what they stand for: the variables a fresh process reads
only when used (the key leaves them out) and any other (it does not), the package's files, and
the environment the command line pins (:func:`scarce.flows.runners.pin_threads` itself).  The
slow tests run the installed ``scarce`` script as a user does, in a project of their own with a
Prefect home and a shared server of their own: the preloaded process is started by a first
command and takes the next (its log names each command it forks); the outputs are those of the
command run in its own process; a bad input gives its one line and exit code; Ctrl-C and a
killed ``scarce`` process end the command's process; another environment runs in its own
process and replaces the preloaded one; ``scarce server stop`` stops it.  Every wait is on a
state (a file, a process), with a generous cap.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from scarce.flows import preload, shared_server
from scarce.flows.runners import pin_threads

REPO = Path(__file__).resolve().parents[2]
SAVED = REPO / "tests" / "data" / "models" / "leml-table-v1"
MODEL = "leml-table-v1"
SCRIPT = Path(sys.executable).parent / "scarce"
#: The longest wait for a state (a loaded machine takes long; none of these is a measurement).
CAP = 600.0


# -- the key ----------------------------------------------------------------------------------
def test_the_key_leaves_out_only_the_variables_a_fresh_process_reads_when_used():
    env = preload.command_environment({"HOME": "/home/u", "PREFECT_LOGGING_LEVEL": "INFO"})
    base = preload.key(env, sys.path)
    for name in sorted(preload.PER_COMMAND):
        assert preload.key({**env, name: "/elsewhere"}, sys.path) == base, name
    read_on_import = ["PREFECT_LOGGING_LEVEL", "OPENBLAS_NUM_THREADS", "PREFECT_HOME",
                      "PREFECT_PROFILE", "SCARCE_SERVER", "PYTHONHASHSEED", "HOME", "TZ"]
    for name in read_on_import:
        assert preload.key({**env, name: "other"}, sys.path) != base, name
    assert preload.key(env, [*sys.path, "/another/folder"]) != base


def test_the_key_changes_with_a_file_of_the_package(tmp_path, monkeypatch):
    for top in ("scarce", "flows"):
        (tmp_path / top).mkdir()
        (tmp_path / top / "__init__.py").write_text("")
    monkeypatch.setattr(preload, "_PACKAGE", tmp_path)
    env = preload.command_environment({})
    before = preload.key(env, [])
    module = tmp_path / "flows" / "cli.py"
    module.write_text("x = 1\n")
    added = preload.key(env, [])
    assert added != before
    os.utime(module, ns=(1, 1))
    assert preload.key(env, []) != added
    module.unlink()
    assert preload.key(env, []) == before


def test_the_commands_environment_is_pinned_as_the_command_line_pins_it():
    for start in ({}, {"OPENBLAS_NUM_THREADS": "4", "OTHER": "x"}):
        pinned = dict(start)
        pin_threads(pinned)
        assert preload.command_environment(start) == pinned


@pytest.mark.parametrize("argv, command", [
    (["apply", "RUN", "--input", "x"], "apply"), (["--debug", "run", "leml"], "run"),
    (["rerun", "--debug", "RUN"], "rerun"), (["runs"], "runs"), (["--version"], None)])
def test_the_command_is_the_first_word_that_is_not_an_option(argv, command):
    assert preload.command_of(argv) == command


@pytest.mark.parametrize("env, on", [
    ({}, True), ({"SCARCE_PRELOAD": "off"}, False), ({"SCARCE_PRELOAD": " on "}, True),
    ({"SCARCE_PRELOAD": "yes"}, False), ({"SCARCE_SERVER": "temporary"}, False),
    ({"SCARCE_SERVER": "shared"}, True)])
def test_the_preloaded_process_is_used_only_when_on_and_shared(env, on):
    assert preload.enabled(env) is on


def test_without_a_record_a_command_runs_in_its_own_process(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    monkeypatch.delenv("SCARCE_SERVER", raising=False)
    assert preload.run_preloaded(["apply", "RUN", "--input", "x"]) is None
    (tmp_path / "scarce-server").mkdir()
    (tmp_path / "scarce-server" / preload.RECORD).write_text(json.dumps(
        {"pid": os.getpid(), "start": "", "key": "another", "address": "\0nothing"}))
    assert preload.run_preloaded(["apply", "RUN", "--input", "x"]) is None
    assert preload.run_preloaded(["runs"]) is None


# -- the script as a user runs it ---------------------------------------------------------------
@pytest.fixture(scope="module")
def place(tmp_path_factory, seeded_prefect_home):
    """A project with the committed LEML model, a Prefect home of its own and the environment
    of its commands (the shared server); the server and the preloaded process are stopped
    when the module ends."""
    if not SCRIPT.exists():
        pytest.fail(f"the scarce script is not installed beside {sys.executable}")
    root = tmp_path_factory.mktemp("preload")
    shutil.copytree(SAVED, root / "data" / "runs" / MODEL)
    shutil.copy(REPO / "data" / "examples" / "leml" / "bibtex.new.csv", root / "new.csv")
    home = seeded_prefect_home(root / "prefect-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "SCARCE_"))}
    env.update(SCARCE_ROOT=str(root), PREFECT_HOME=str(home), SCARCE_SERVER="shared",
               PREFECT_SERVER_ANALYTICS_ENABLED="false")
    yield root, home, env
    shared_server.stop(home, force=True)


def _scarce(place, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    root, _, base = place
    return subprocess.run([str(SCRIPT), *args], cwd=root, env=env or base, capture_output=True,
                          text=True, timeout=CAP)


def _taken(home: Path) -> list[str]:
    """The commands the preloaded processes of ``home`` have forked, as their log says."""
    log = home / "scarce-server" / preload.LOG
    text = log.read_text() if log.exists() else ""
    return [line for line in text.splitlines() if line.startswith("command: ")]


def _wait(what, cap: float = CAP):
    deadline = time.monotonic() + cap
    while not (got := what()):
        assert time.monotonic() < deadline, f"still waiting after {cap:g} s"
        time.sleep(0.1)
    return got


def _ready(home: Path) -> dict:
    """The record of a preloaded process that has finished its imports."""
    return _wait(lambda: preload.ready(home) and preload.read(home))


def _preloaded(place) -> dict:
    """The record of the place's preloaded process, ready: an apply starts one if none is."""
    _, home, _ = place
    if preload.read(home) is None:
        done = _scarce(place, "apply", MODEL, "--input", "new.csv")
        assert done.returncode == 0, done.stderr[-3000:]
    return _ready(home)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").exists() and \
        Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"


def _predictions(root: Path, out: str) -> pd.DataFrame:
    return pd.read_parquet(root / out)


@pytest.mark.slow
def test_a_second_command_runs_in_the_preloaded_process_with_the_same_outputs(place):
    root, home, _ = place
    first = _scarce(place, "apply", MODEL, "--input", "new.csv", "--output", "first.parquet")
    assert first.returncode == 0, first.stderr[-3000:]
    assert _taken(home) == []  # (no preloaded process before it: it started one)
    record = _ready(home)
    second = _scarce(place, "apply", MODEL, "--input", "new.csv", "--output", "second.parquet")
    assert second.returncode == 0, second.stderr[-3000:]
    taken = _taken(home)
    assert len(taken) == 1 and taken[0].endswith(
        f"apply {MODEL} --input new.csv --output second.parquet"), taken
    pd.testing.assert_frame_equal(_predictions(root, "second.parquet"),
                                  _predictions(root, "first.parquet"), check_exact=True)
    def said(done):  # (the run ids differ, and the second finds the first's steps cached)
        return [x for x in done.stdout.splitlines()
                if "apply-leml" not in x and not x.startswith("cache hits")]
    assert said(second) == said(first)
    assert preload.read(home)["pid"] == record["pid"]  # the same process, kept


@pytest.mark.slow
def test_bad_input_gives_its_one_line_and_exit_code_from_the_preloaded_process(place):
    root, home, _ = place
    _preloaded(place)
    before = len(_taken(home))
    done = _scarce(place, "apply", MODEL, "--input", "missing.csv")
    assert len(_taken(home)) == before + 1
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "missing.csv" in lines[0], \
        done.stderr[-3000:]


def _long_run(place) -> tuple[subprocess.Popen, int]:
    """A ``scarce run leml`` taken by the preloaded process, once its flow has begun: the
    ``scarce`` process, the pid of the command's process and the file of its stderr."""
    root, home, env = place
    (root / "configs").mkdir(exist_ok=True)
    for split in ("train", "test"):
        shutil.copy(REPO / "data" / "examples" / "leml" / f"bibtex.{split}.csv", root / "data")
    (root / "configs" / "long.yaml").write_text(
        "seed: 0\ndataset: {name: tiny, format: table, train: data/bibtex.train.csv, "
        "test: data/bibtex.test.csv, table: {labels_column: tags, text_column: text}}\n"
        "model: {rank: 4, outer_iterations: 1000, cg_max_iter: 2, early_stopping: false}\n"
        "baselines: []\n")
    _preloaded(place)
    before = len(_taken(home))
    err = root / f"long-{len(_taken(home))}.err"
    with open(err, "w") as out:
        proc = subprocess.Popen([str(SCRIPT), "run", "leml", "--config", "configs/long.yaml"],
                                cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=out)
    line = _wait(lambda: _taken(home)[before:])[0]
    child = int(line.split()[2].rstrip(":"))

    def started():  # (its flow has begun: a step is under way)
        assert proc.poll() is None, err.read_text()[-3000:]
        return "Beginning flow run" in err.read_text()
    _wait(started)
    return proc, child, err


@pytest.mark.slow
def test_ctrl_c_reaches_the_command_in_the_preloaded_process(place):
    proc, child, said = _long_run(place)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=CAP)
    err = said.read_text()
    assert proc.returncode == 130, err[-3000:]
    assert err.rstrip().splitlines()[-1] == "interrupted", err[-3000:]
    _wait(lambda: _gone(child))


@pytest.mark.slow
def test_a_killed_scarce_process_ends_its_command_and_leaves_no_lease(place):
    _, home, _ = place
    proc, child, _ = _long_run(place)
    proc.kill()
    proc.wait(timeout=CAP)
    _wait(lambda: _gone(child))
    server = shared_server.Place(home).read()
    assert shared_server.Place(home).held(server.pid) == []


@pytest.mark.slow
def test_another_environment_runs_in_its_own_process_and_replaces_the_preloaded_one(place):
    _, home, env = place
    old = _preloaded(place)
    before = len(_taken(home))
    other = {**env, "PREFECT_LOGGING_LEVEL": "WARNING"}  # read when Prefect is imported
    done = _scarce(place, "apply", MODEL, "--input", "new.csv", env=other)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(_taken(home)) == before  # run in its own process
    new = _ready(home)
    assert new["pid"] != old["pid"] and new["key"] != old["key"]
    _wait(lambda: _gone(old["pid"]))
    done = _scarce(place, "apply", MODEL, "--input", "new.csv", env=other)
    assert done.returncode == 0 and len(_taken(home)) == before + 1


@pytest.mark.slow
def test_server_stop_stops_the_preloaded_process(place):
    _, home, _ = place
    record = _preloaded(place)
    status = _scarce(place, "server", "status")
    assert f"preloaded process: pid {record['pid']}" in status.stdout, status.stdout
    stopped = _scarce(place, "server", "stop")
    assert stopped.returncode == 0, stopped.stderr
    _wait(lambda: _gone(record["pid"]))
    assert preload.read(home) is None
