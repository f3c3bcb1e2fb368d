"""One guard for every command that writes a path the user names (:mod:`flows.outputs`).

The output options are found from the parsers (the command line's and every benchmark's), not
listed here: a test fails on an option that names a path to write without the guard, and every
guarded option is run against every forbidden target (an input of a recorded run under any
name, anything under the store or the runs folder, an existing file without ``--force``, a
wrong suffix, a path that cannot be written).  The command's handler is replaced by one that
records the call, so the test shows the refusal comes before any work (and any server).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import pytest

from scarce.flows import cli
from scarce.flows.commands import apply as apply_cmd
from scarce.flows.commands import bench as bench_cmd
from scarce.flows.commands import init as init_cmd
from scarce.flows.commands import runs as runs_cmd
from scarce.flows.outputs import ATTR, output_actions

#: Words in an option's help or name that say it names a path the command writes.
WRITES = ("write", "written", "output", "replace")


def _parsers() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """The command line's parser and every benchmark's own parser."""
    from scarce.bench import BENCHMARKS

    out = [((), cli.build_parser())]
    for name in BENCHMARKS:
        out.append((("bench", name), bench_cmd.benchmark_parser(name)[1]))
    return out


def _names_a_path(action: argparse.Action) -> bool:
    return (action.nargs != 0 and not action.choices
            and (action.type is Path or str(action.metavar) in ("PATH", "DIR", "FILE", "FOLDER")
                 or action.dest in ("dir", "output", "out", "folder")))


def _says_it_writes(action: argparse.Action) -> bool:
    text = " ".join([*action.option_strings, action.dest, action.help or ""]).lower()
    return any(word in text for word in WRITES) and "input" not in (action.dest or "")


def _guarded() -> list[tuple[tuple[str, ...], argparse.Action]]:
    return [(prefix + path, a) for prefix, parser in _parsers()
            for path, a in output_actions(parser) if getattr(a, ATTR, None) is not None]


def test_every_option_that_names_a_path_to_write_is_guarded():
    unguarded = [(" ".join(prefix + path), a.option_strings or a.dest)
                 for prefix, parser in _parsers() for path, a in output_actions(parser)
                 if _names_a_path(a) and _says_it_writes(a) and getattr(a, ATTR, None) is None]
    assert not unguarded, f"options that write a path without the output guard: {unguarded}"
    found = {(" ".join(p), a.option_strings[0] if a.option_strings else a.dest)
             for p, a in _guarded()}
    # the three known today; a new one joins the enumeration below by itself
    assert {("apply", "--output"), ("runs", "--output"), ("init", "dir")} <= found


# -- every guarded option against every forbidden target ----------------------------------
#: The arguments a command needs besides its output option, and where its output goes in
#: argv.  A guarded option of a command missing here fails the test: add the command.
def _argv(command: tuple[str, ...], flag: str, target: str, force: bool) -> list[str]:
    extra = {
        ("apply",): ["some-run-id", "--input", "data/new.csv"],
        ("runs",): [],
        ("init",): [],
    }[command]
    out = [*command, *extra]
    out += [flag, target] if flag.startswith("-") else [target]
    return out + (["--force"] if force else [])


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project with a recorded run whose input is data/train.csv, its store and runs
    folder, and the user's files; the handlers replaced by recorders."""
    root = tmp_path / "project"
    (root / "data" / "tables").mkdir(parents=True)
    (root / "data" / "train.csv").write_text("text,tags\na b,x\n")
    (root / "data" / "new.csv").write_text("text\nc d\n")
    (root / "data" / "tables" / "user.parquet").write_bytes(b"PAR1 the user's own file")
    (root / "old.csv").write_text("the user's own file\n")
    (root / "notes").mkdir()
    run = root / "data" / "runs" / "leml-x-1"
    (run / "outputs").mkdir(parents=True)
    (run / "outputs" / "predictions.parquet").write_bytes(b"PAR1 a recorded output")
    (run / "manifest.json").write_text(json.dumps({
        "flow": "leml", "inputs": [{"path": "data/train.csv", "sha256": "0" * 64}],
        "outputs": [], "named_outputs": []}))
    entry = root / "data" / "cache" / "leml-load" / ("a" * 32 + "-X.parquet")
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"PAR1 a store entry")
    os.link(root / "data" / "train.csv", root / "hard-train.csv")
    os.symlink(root / "data" / "train.csv", root / "link-train.csv")
    os.symlink(entry, root / "link-entry.parquet")
    monkeypatch.chdir(root)
    monkeypatch.setenv("SCARCE_ROOT", str(root))
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    calls: list[str] = []
    for module, name in ((apply_cmd, "apply"), (runs_cmd, "runs"), (init_cmd, "init")):
        monkeypatch.setattr(module, name, lambda args, n=name: calls.append(n) or 0)
    return root, entry, calls


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def _targets(root: Path, entry: Path, kind: str) -> dict[str, tuple[str, str]]:
    """Forbidden target -> (path as given, words the error holds)."""
    suffix = ".parquet"
    cases = {
        "a-recorded-input": ("data/train.csv", "input of a recorded run"),
        "a-hard-link-of-a-recorded-input": ("hard-train.csv", "input of a recorded run"),
        "a-symlink-to-a-recorded-input": ("link-train.csv", "input of a recorded run"),
        "a-store-entry": (str(entry.relative_to(root)), "inside the result store"),
        "a-symlink-to-a-store-entry": ("link-entry.parquet", "inside the result store"),
        "a-new-file-in-the-store": (f"data/cache/mine{suffix}", "inside the result store"),
        "the-store-itself": ("data/cache", "inside the result store"),
        "a-run-manifest": ("data/runs/leml-x-1/manifest.json", "inside the runs folder"),
        "a-recorded-run-output": ("data/runs/leml-x-1/outputs/predictions.parquet",
                                  "inside the runs folder"),
        "a-new-file-in-the-runs-folder": (f"data/runs/t{suffix}", "inside the runs folder"),
        "the-runs-folder-itself": ("data/runs", "inside the runs folder"),
        "a-path-that-is-not-utf-8": (os.fsdecode(b"out-\xff" + suffix.encode()),
                                     "not valid UTF-8"),
    }
    if kind != "folder":
        cases.update({
            "an-existing-file-without-force": ("old.csv", "exists; give --force"),
            "a-wrong-suffix": ("out.json", "must end in"),
            "a-file-on-the-way": (f"old.csv/out{suffix}", "old.csv is not a folder"),
        })
    if kind == "file":
        cases["a-folder-where-a-file-goes"] = ("notes", "a folder where a file is written")
    if kind == "folder":
        cases["a-file-where-a-folder-goes"] = ("old.csv", "a file where a folder is written")
    return cases


def _cases():
    out = []
    for path, action in _guarded():
        kind = getattr(action, ATTR).kind
        flag = action.option_strings[0] if action.option_strings else action.dest
        for case in _targets(Path("/r"), Path("/r/e"), kind):
            out.append(pytest.param(path, flag, kind, case, id=f"{' '.join(path)}-{case}"))
    return out


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err[-2000:]
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(("command", "flag", "kind", "case"), _cases())
def test_each_output_option_refuses_each_forbidden_target(project, capsys, command, flag, kind,
                                                          case):
    root, entry, calls = project
    target, words = _targets(root, entry, kind)[case]
    if case == "an-existing-file-without-force" and command == ("runs",):
        target = "old.csv"
    before = _tree(root)
    code = cli.main(_argv(command, flag, target, force=False))
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    line = _one_error(err)
    assert words in line, line
    assert calls == []  # refused before the command's work began
    assert _tree(root) == before
    if case in ("an-existing-file-without-force", "a-wrong-suffix", "a-file-on-the-way",
                "a-folder-where-a-file-goes", "a-file-where-a-folder-goes",
                "a-path-that-is-not-utf-8"):
        return
    # --force lifts only the rule against replacing an existing file
    code = cli.main(_argv(command, flag, target, force=True))
    err = capsys.readouterr().err
    assert code == 2 and words in _one_error(err)
    assert calls == [] and _tree(root) == before


@pytest.mark.parametrize(("command", "flag", "kind"),
                         sorted({(p, (a.option_strings or [a.dest])[0], getattr(a, ATTR).kind)
                                 for p, a in _guarded()}))
def test_each_output_option_takes_an_allowed_target(project, capsys, command, flag, kind):
    """The control: a new path (in folders still to be made, too), and an existing file with
    --force, reach the command."""
    root, _, calls = project
    for new in ["fresh", "new/deeper/fresh"]:
        new += "" if kind == "folder" else ".parquet"
        assert cli.main(_argv(command, flag, new, force=False)) == 0, capsys.readouterr().err
    if kind != "folder":
        assert cli.main(_argv(command, flag, "old.csv", force=True)) == 0
    assert calls and set(calls) == {command[0]}


@pytest.mark.parametrize("errno_name", ["EROFS", "EACCES", "ENOSPC"])
def test_a_folder_the_system_refuses_is_refused_before_the_work(project, capsys, monkeypatch,
                                                                errno_name):
    """A read-only file system, a folder not ours, a full disk (as root, permissions do not
    refuse: the system's refusal is simulated where the guard probes the folder)."""
    import errno

    import scarce.tasks.store.atomic as store

    root, _, calls = project
    (root / "locked").mkdir()
    real = store._new_temp

    def refusing(path):
        if Path(path).parent.name == "locked":
            code = getattr(errno, errno_name)
            raise OSError(code, os.strerror(code), str(path.parent))
        return real(path)

    monkeypatch.setattr(store, "_new_temp", refusing)
    assert cli.main(["runs", "--output", "locked/runs.csv"]) == 2
    line = _one_error(capsys.readouterr().err)
    assert "cannot write into" in line and os.strerror(getattr(errno, errno_name)) in line
    assert calls == []


# -- scarce runs: the real command -----------------------------------------------------------
@pytest.fixture
def runs_project(tmp_path, monkeypatch):
    """A runs folder with one real-looking finished run, and the user's files."""
    root = tmp_path / "p"
    run = root / "data" / "runs" / "leml-bibtex-20261206T000000-abcd"
    run.mkdir(parents=True)
    (root / "data" / "train.csv").write_text("text,tags\na,b\n")
    (run / "manifest.json").write_text(json.dumps({
        "schema_version": 1, "run_id": run.name, "flow": "leml", "status": "finished",
        "started": "2026-12-06T00:00:00+00:00", "finished": "2026-12-06T00:00:01+00:00",
        "config": {"name": "bibtex", "dataset": {"name": "bibtex"}},
        "inputs": [{"path": "data/train.csv", "sha256": "0" * 64}],
        "outputs": [], "named_outputs": [], "headline": {}}))
    monkeypatch.chdir(root)
    monkeypatch.setenv("SCARCE_ROOT", str(root))
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    return root, run.name


@pytest.mark.parametrize("fmt", ["csv", "parquet", "md", "table"])
def test_runs_output_format_follows_the_name_and_refuses_a_contradiction(runs_project, capsys,
                                                                         fmt):
    root, _ = runs_project
    suffix = runs_cmd.SUFFIX_OF[fmt]
    assert cli.main(["runs", "--output", f"t{suffix}"]) == 0, capsys.readouterr().err
    data = (root / f"t{suffix}").read_bytes()
    if fmt == "parquet":
        assert data[:4] == b"PAR1"
    elif fmt == "csv":
        assert data.splitlines()[0].startswith(b"run_id,")
    other = next(f for f in runs_cmd.FORMATS if f != fmt)
    assert cli.main(["runs", "--format", other, "--output", f"u{suffix}"]) == 2
    assert "--format" in _one_error(capsys.readouterr().err)
    assert not (root / f"u{suffix}").exists()


@pytest.mark.parametrize("option", [["--output", "x.csv"], ["--format", "csv"],
                                    ["--columns", "flow"]])
def test_runs_of_one_run_refuses_the_table_options(runs_project, capsys, option):
    root, run = runs_project
    assert cli.main(["runs", run, *option]) == 2
    assert option[0] in _one_error(capsys.readouterr().err)
    assert not (root / "x.csv").exists()


def test_runs_output_that_the_disk_refuses_is_one_line(runs_project, capsys, monkeypatch):
    import errno

    import scarce.tasks.store.atomic as store

    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(store, "atomic_write_bytes", full)
    assert cli.main(["runs", "--output", "t.csv"]) == 2
    assert "No space left on device" in _one_error(capsys.readouterr().err)
