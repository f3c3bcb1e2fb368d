"""Helpers shared by the end-to-end flow tests.

A project is a folder made by :func:`new_project` (the ``make_project`` fixture of
``tests/flows/conftest.py`` makes one under pytest's temporary folders); the runs a command made
there are :func:`made_runs`' (or, for one ``scarce`` command that must succeed,
:func:`made_run`'s).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path


def project_flows(kind: str) -> list[str]:
    """The names of the project's own flows of ``kind`` (``train``, ``apply``), sorted: a test
    module may register a sample flow of its own (``digits``), which the registry then holds
    for every module imported after it."""
    from scarce.flows.registry import FLOWS

    return sorted(name for name, spec in FLOWS.items()
                  if spec.kind == kind and spec.target.startswith("scarce.flows."))


def command_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
                    ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """``(command words, parser)`` of ``parser`` and of every subcommand's parser below it
    (``()``, ``("runs",)``, ``("cache", "gc")``, ...)."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from command_parsers(sub, (*path, name))


def runs(project):
    """Run ids under the project's data/runs, sorted by name (creation time)."""
    d = project / "data" / "runs"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def new_project(root: Path, configs: Mapping[str, str | dict] | None = None,
                files: Mapping[str, str | bytes] | None = None) -> Path:
    """A project folder at ``root`` (made if missing) with ``configs/``: each of ``configs``
    (file name -> YAML text, or a mapping written as YAML) in it and each of ``files``
    (path relative to ``root`` -> text or bytes); returns ``root``."""
    import yaml

    (root / "configs").mkdir(parents=True, exist_ok=True)
    for name, config in (configs or {}).items():
        text = config if isinstance(config, str) else yaml.safe_dump(config)
        (root / "configs" / name).write_text(text)
    for name, data in (files or {}).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
    return root


@contextlib.contextmanager
def made_runs(project: Path) -> Iterator[list[str]]:
    """The ids of the runs made in ``project`` inside the ``with`` block, oldest first (the
    list is filled when the block ends)::

        with made_runs(project) as made:
            main(["run", "digits"])
        (run_id,) = made
    """
    before = set(runs(project))
    made: list[str] = []
    try:
        yield made
    finally:
        made.extend(r for r in runs(project) if r not in before)


def made_run(project: Path, *args: str) -> str:
    """``scarce ARGS`` in the project folder (see :func:`run_in`), which must succeed and make
    one run: its id."""
    with made_runs(project) as made:
        run_in(project, *args)
    (run_id,) = made
    return run_id


def manifest(project, run_id):
    return json.loads((project / "data" / "runs" / run_id / "manifest.json").read_text())


def digits_project(root, n_samples=200, k=10):
    """A project folder for the test ``digits`` flow: ``digits.csv`` (the first
    ``n_samples`` scikit-learn digits) and ``configs/digits.yaml``; returns ``root``."""
    import pandas as pd
    from sklearn.datasets import load_digits

    digits = load_digits()
    frame = pd.DataFrame(digits.data[:n_samples], columns=[f"p{i}" for i in range(64)])
    frame["label"] = digits.target[:n_samples]
    return new_project(root, {"digits.yaml": f"data: digits.csv\nn_samples: {n_samples}\nk: {k}\n"},
                       {"digits.csv": frame.to_csv(index=False)})


def package_sources() -> list[Path]:
    """The Python files of the package's folders (``algorithms``, ``tasks``, ``flows``,
    ``bench``), each folder's sorted: what a scan of the code for a defect class reads."""
    root = Path(__file__).resolve().parents[2]
    files = [p for pkg in ("algorithms", "tasks", "flows", "bench")
             for p in sorted((root / pkg).rglob("*.py"))]
    assert len(files) > 30, root  # the folders are there
    return files


def scan_finds(scan, text: str, folder: Path) -> list[str]:
    """What the code scan ``scan`` (a path to its findings, ``"file:line: what"``) finds in a
    module of the source ``text``, written in ``folder``: the ``what`` of each finding."""
    probe = folder / "probe.py"
    probe.write_text(text)
    return [found.split(": ", 1)[1] for found in scan(probe)]


def usage_error(argv: list[str], root: Path, monkeypatch, capsys) -> str:
    """The one ``error:`` line of ``scarce ARGV`` refused by its parser (exit 2) in the empty
    project folder ``root``, asserted to be stderr's last line, with no traceback and nothing
    written in ``root``."""
    import pytest

    from scarce.flows.cli import main

    monkeypatch.setenv("SCARCE_ROOT", str(root))
    for var in ("SCARCE_STORE", "SCARCE_RUNS"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    last = err.rstrip().splitlines()[-1]
    assert [x for x in err.splitlines() if "error:" in x] == [last], err
    assert "Traceback" not in err and list(root.iterdir()) == []
    return last


def digits_grid(**axes: str) -> str:
    """An experiment file over the test ``digits`` flow (one k-means start per run), its table
    ari by k; ``axes``: each axis's values in YAML, ``k="[4, 6]"``."""
    return ("flow: digits\nbase: configs/digits.yaml\nset: {n_init: 1}\naxes:\n"
            + "".join(f"  {name}: {values}\n" for name, values in axes.items())
            + "table: {rows: [k], metric: ari}\n")


def rerun(run_id, capsys, runner):
    """``scarce rerun RUN_ID`` (every step recomputed) on ``runner``; returns the exit code and
    what it printed."""
    from scarce.flows.cli import main

    code = main(["rerun", run_id, "--runner", runner])
    return code, capsys.readouterr().out


def run_in(project, *args: str) -> None:
    """``scarce ARGS`` in the project folder (``SCARCE_ROOT`` and the working folder; the
    store and the runs its own), for a module fixture that makes the run its tests use; it
    must succeed."""
    import pytest

    from scarce.flows.cli import main

    with pytest.MonkeyPatch.context() as env:
        env.chdir(project)
        env.setenv("SCARCE_ROOT", str(project))
        env.delenv("SCARCE_STORE", raising=False)
        env.delenv("SCARCE_RUNS", raising=False)
        assert main(list(args)) == 0


def first_run(project, flow: str) -> str:
    """The id of the project's first run of ``flow``."""
    return next(r for r in runs(project) if manifest(project, r)["flow"] == flow)


def strip_project(root, data_dir, train: list[str], test: str):
    """A StRip project over the documents of ``data_dir``: ``splits.tsv`` (``train`` and the
    one ``test`` document) and a small ``configs/strip.yaml`` (window 10, ripper and
    strip-partial, no dev split); returns ``root``."""
    splits = "doc_id\tsplit\n" + "".join([f"{d}\ttrain\n" for d in train] + [f"{test}\ttest\n"])
    return new_project(root, {"strip.yaml": (
        f"data_dir: {data_dir}\nsplits_file: splits.tsv\nwindow: 10\nk_optimize: 1\n"
        "variants: [ripper, strip-partial]\ndev_splits: []\n")}, {"splits.tsv": splits})


def run_with_store(project, store, args: list[str], capsys=None):
    """``scarce ARGS`` in the project folder with ``SCARCE_STORE=store``: its exit code, the
    run folder it made (None when it made none) and, given ``capsys``, its error output."""
    import pytest

    from scarce.flows.cli import main

    with pytest.MonkeyPatch.context() as env, made_runs(project) as made:
        env.chdir(project)
        env.setenv("SCARCE_ROOT", str(project))
        env.setenv("SCARCE_STORE", str(store))
        env.delenv("SCARCE_RUNS", raising=False)
        if capsys is not None:
            capsys.readouterr()
        code = main(list(args))
    err = capsys.readouterr().err if capsys is not None else ""
    return code, (project / "data" / "runs" / made.pop()) if made else None, err


def run_flow_with_store(project, flow: str, store, settings: list[str], capsys=None):
    """``scarce run FLOW --set S ...`` for each of ``settings``, as :func:`run_with_store`."""
    args = ["run", flow, *[a for s in settings for a in ("--set", s)]]
    return run_with_store(project, store, args, capsys)


def every_command_in_one_store(project, flow: str, commands) -> dict:
    """Each of ``commands`` (``(name, --set values, whether it reads)``) run in turn in one
    store, ``project/shared-store``: name -> (exit code, run folder, error output)."""
    return {name: run_flow_with_store(project, flow, project / "shared-store", settings)
            for name, settings, _ in commands}


def again_in_a_fresh_store(project, flow: str, shared: dict, name: str, settings: list[str],
                           reads: bool, store, capsys):
    """Command ``name`` of ``shared`` (:func:`every_command_in_one_store`) run again in the
    empty ``store``: it succeeds exactly when it ``reads``, with the exit code it had beside
    the others, and makes a run folder only then. Returns (its folder in the shared store,
    its folder in the fresh one, the fresh run's error output)."""
    code, folder, _ = shared[name]
    assert (code == 0) == reads, name
    again, fresh, err = run_flow_with_store(project, flow, store, settings, capsys)
    assert again == code, err
    if not reads:
        assert fresh is None
    return folder, fresh, err


def assert_same_outputs(folder, expected) -> None:
    """Run folder ``folder`` holds what run folder ``expected`` holds: the same metrics and
    every named output that is not volatile (a Parquet file as the same frame, any other file
    as the same bytes), made by the same steps under the same keys, each of whose entries that
    is not volatile holds the same bytes (an entry a cache hit gave in one store and a step
    computed in the other, such as the mentions table of a document named after its file,
    need not reach a named output)."""
    import pandas as pd

    got, want = (json.loads((f / "manifest.json").read_text()) for f in (folder, expected))
    names = sorted(o["name"] for o in want["named_outputs"] if not o.get("volatile"))
    assert sorted(o["name"] for o in got["named_outputs"] if not o.get("volatile")) == names
    files = {"metrics.parquet": "metrics.parquet", **{n: f"outputs/{n}" for n in names}}
    for name, relative in files.items():
        a, b = folder / relative, expected / relative
        if name.endswith(".parquet"):
            pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(b),
                                          check_exact=True, obj=name)
        else:
            assert a.read_bytes() == b.read_bytes(), name
    entries = [{o["ref"]: None if o["volatile"] else o["sha256"] for o in m["outputs"]}
               for m in (got, want)]
    assert entries[0] == entries[1]


#: What no check a command makes before it starts Prefect imports: Prefect, the Dask it runs
#: flows on, the methods' scikit-learn and numba, the runs' plots.
FORBIDDEN_BEFORE_START = ("prefect", "prefect_dask", "dask", "distributed", "sklearn", "numba",
                          "matplotlib")
#: Python for a fresh interpreter (``python -c CHECK_WRAPPER ARGS``): the command line's
#: ``main`` on ``ARGS``; at exit, the modules of :data:`FORBIDDEN_BEFORE_START` it had imported
#: are written as a JSON list to the file ``$MODULES_OUT``.
CHECK_WRAPPER = f"""
import atexit, json, os, sys
FORBIDDEN = {FORBIDDEN_BEFORE_START!r}
def _report():
    found = sorted(m for m in sys.modules if m.split(".")[0] in FORBIDDEN)
    with open(os.environ["MODULES_OUT"], "w") as out:
        json.dump(found, out)
atexit.register(_report)
from scarce.flows.cli import main
sys.exit(main(sys.argv[1:]))
"""
