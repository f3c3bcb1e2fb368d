"""Helpers shared by the end-to-end flow tests."""

from __future__ import annotations

import json


def runs(project):
    """Run ids under the project's data/runs, sorted by name (creation time)."""
    d = project / "data" / "runs"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def manifest(project, run_id):
    return json.loads((project / "data" / "runs" / run_id / "manifest.json").read_text())


def digits_project(root, n_samples=200, k=10):
    """A project folder for the test ``digits`` flow: ``digits.csv`` (the first
    ``n_samples`` scikit-learn digits) and ``configs/digits.yaml``; returns ``root``."""
    import pandas as pd
    from sklearn.datasets import load_digits

    (root / "configs").mkdir(parents=True)
    digits = load_digits()
    frame = pd.DataFrame(digits.data[:n_samples], columns=[f"p{i}" for i in range(64)])
    frame["label"] = digits.target[:n_samples]
    frame.to_csv(root / "digits.csv", index=False)
    (root / "configs" / "digits.yaml").write_text(
        f"data: digits.csv\nn_samples: {n_samples}\nk: {k}\n")
    return root


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
    (root / "configs").mkdir(parents=True, exist_ok=True)
    (root / "splits.tsv").write_text("doc_id\tsplit\n" + "".join(
        [f"{d}\ttrain\n" for d in train] + [f"{test}\ttest\n"]))
    (root / "configs" / "strip.yaml").write_text(
        f"data_dir: {data_dir}\nsplits_file: splits.tsv\nwindow: 10\nk_optimize: 1\n"
        "variants: [ripper, strip-partial]\ndev_splits: []\n")
    return root
