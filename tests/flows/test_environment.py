"""The environment variables scarce reads: each is checked when a command starts, whatever the
command, before anything is read, written or started, and a bad value is one ``error:`` line
naming the variable (exit 2).

The variables are found in the code (every ``SCARCE_...`` name in it), the commands in the
parser: a new variable or command without a check, or a case here, fails.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import pytest

from scarce.flows.cli import build_parser, main
from scarce.flows.environment import (
    CHECKS,
    MEMORY_LIMIT,
    PRELOAD,
    ROOT,
    RUNS,
    SERVER,
    SERVER_IDLE,
    STORE,
    VARIABLES,
)
from scarce.tasks.errors import InputError

REPO = Path(__file__).resolve().parents[2]
LONG = "a" * 5000  # a name longer than any file system takes

#: Per variable: (its value, with {project} for the project folder; words of the error).
PATH_CASES = [
    ("", "set but empty: unset it for the default"),
    ("  ", "set but empty"),
    ("{project}/afile", "project/afile is not a folder"),
    ("{project}/afile/sub", "project/afile is not a folder"),
    ("/tmp/caf\udce9", "'/tmp/caf\\udce9' is not valid UTF-8"),
    ("{project}/" + LONG, "cannot use the path: File name too long"),
]
BAD = {
    ROOT: [*PATH_CASES, ("{project}/missing", "folder not found")],
    STORE: [*PATH_CASES, ("memory://bucket/cache", "is not a local filesystem")],
    RUNS: PATH_CASES,
    MEMORY_LIMIT: [("", "set but empty"), ("lots", "must be a number of GiB, got 'lots'"),
                   ("-5", "positive, finite number of GiB"), ("nan", "positive, finite"),
                   ("caf\udce9", "not valid UTF-8")],
    SERVER: [("", "set but empty"), ("persistent", "'persistent' is not one of shared, "
             "temporary"), ("SHARED", "'SHARED' is not one of shared, temporary"),
             ("caf\udce9", "not valid UTF-8")],
    SERVER_IDLE: [("", "set but empty"), ("soon", "'soon' is not a positive number of "
                  "minutes"), ("-5", "'-5' is not a positive number of minutes"),
                  ("0", "'0' is not a positive number of minutes"),
                  ("inf", "'inf' is not a positive number of minutes")],
    PRELOAD: [("", "set but empty"), ("yes", "'yes' is not one of on, off"),
              ("0", "'0' is not one of on, off"), ("caf\udce9", "not valid UTF-8")],
}


def test_every_variable_the_code_reads_is_checked():
    named = set()
    for folder in ("algorithms", "tasks", "flows", "bench", "scarce"):
        for path in (REPO / folder).rglob("*.py"):
            named |= set(re.findall(r"\bSCARCE_[A-Z_]*[A-Z]\b", path.read_text()))
    assert named == set(VARIABLES) == set(CHECKS) == set(BAD)


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """The command words of every command the parser runs (its leaves)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs or path == ("bench",):  # a benchmark's own options are its parser's
        yield path
        return
    for name, sub in subs[0].choices.items():
        yield from _commands(sub, (*path, name))


#: A command line for each command, valid but for the environment.
ARGV = {
    ("run",): ["run", "leml"], ("rerun",): ["rerun", "a-run"], ("diff",): ["diff", "a", "b"],
    ("apply",): ["apply", "a-run", "--input", "in.csv"], ("runs",): ["runs"],
    ("init",): ["init", "new"], ("claims",): ["claims", "a-run"],
    ("bench",): ["bench", "store", "--rows", "10"], ("cache", "ls"): ["cache", "ls"],
    ("cache", "gc"): ["cache", "gc"], ("deploy",): ["deploy"], ("serve",): ["serve"],
    ("ui",): ["ui", "--port", "1"], ("server", "status"): ["server", "status"],
    ("server", "stop"): ["server", "stop"],
}


def test_a_command_line_for_every_command():
    assert sorted(_commands(build_parser())) == sorted(ARGV)


@pytest.fixture
def project(tmp_path, monkeypatch):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "afile").write_text("not a folder\n")
    monkeypatch.chdir(folder)
    for var in VARIABLES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(ROOT, str(folder))
    return folder


def _refused(argv: list[str], project: Path, capsys) -> str:
    """The one error line of ``scarce ARGV``, checked: exit 2, nothing written."""
    before = sorted(project.rglob("*"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and err.rstrip().splitlines()[-1] == lines[0], err[-2000:]
    assert "Traceback" not in err and len(lines[0]) < 500, lines[0][:600]
    assert sorted(project.rglob("*")) == before
    return lines[0]


CASES = [(var, value, words) for var, cases in BAD.items() for value, words in cases]


@pytest.mark.parametrize("var, value, words", CASES,
                         ids=[f"{v}-{i}" for v, cases in BAD.items() for i in range(len(cases))])
def test_a_bad_value_is_refused_in_one_line_naming_the_variable(var, value, words, project,
                                                                monkeypatch, capsys):
    os.environ[var] = value.format(project=project)  # (monkeypatch cannot set a surrogate)
    try:
        line = _refused(["run", "leml"], project, capsys)
    finally:
        os.environ.pop(var, None)
    assert f"key '{var}': " in line and words in line, line


@pytest.mark.parametrize("command", sorted(ARGV), ids=" ".join)
@pytest.mark.parametrize("var", sorted(VARIABLES))
@pytest.mark.parametrize("case", [0, 2], ids=["empty", "a-file-or-negative"])
def test_every_command_checks_every_variable_before_it_starts(command, var, case, project,
                                                              monkeypatch, capsys):
    value, words = BAD[var][case]
    monkeypatch.setenv(var, value.format(project=project))
    line = _refused(ARGV[command], project, capsys)
    assert f"key '{var}': " in line and words in line, line


@pytest.mark.parametrize("var", [ROOT, STORE, RUNS])
def test_a_relative_path_is_read_from_the_current_folder_and_passed_on_absolute(var, project,
                                                                               monkeypatch,
                                                                               capsys):
    from scarce.flows.config import project_root
    from scarce.flows.runtime import default_runs_root, default_store_root

    (project / "rel").mkdir()
    monkeypatch.setenv(var, "rel")
    read = {ROOT: project_root, STORE: default_store_root, RUNS: default_runs_root}[var]
    assert Path(read()) == project / "rel"
    assert main(["runs"]) == 0
    assert os.environ[var] == str(project / "rel")  # what the command's children see


def test_the_python_functions_refuse_a_bad_value_as_the_command_line_does(project,
                                                                        monkeypatch):
    import scarce

    monkeypatch.setenv(RUNS, str(project / "afile"))
    with pytest.raises(InputError, match="afile is not a folder") as err:
        scarce.runs()
    assert err.value.key == RUNS
