"""``scarce run`` stops with one clear line when a dense array would not fit in memory: LEML's
factors and row blocks, and every training flow under one tiny ``SCARCE_MEMORY_LIMIT_GB``."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import yaml

from scarce.flows.cli import main
from scarce.flows.registry import FLOWS
from tests.flows.helpers import strip_project
from tests.flows.test_bad_inputs import Case, make_project
from tests.flows.test_leml_flow import BIBTEX, _head
from tests.flows.test_leml_flow import CONFIG as LEML_CONFIG
from tests.flows.test_model_relations import CONFIG as RELATIONS
from tests.flows.test_model_relations import SEMEVAL

pytestmark = pytest.mark.usefixtures("prefect_server")


def _run(tmp_path, monkeypatch, limit_gb: float, *sets: str) -> tuple[int, str]:
    args = make_project(tmp_path, Case("", "leml", ""))
    monkeypatch.setenv("SCARCE_ROOT", str(tmp_path))
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    monkeypatch.setenv("SCARCE_MEMORY_LIMIT_GB", str(limit_gb))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([*args, *(x for s in sets for x in ("--set", s))])
    return code, err.getvalue()


def test_leml_factors_over_the_memory_limit_exit_2_naming_the_option(tmp_path, monkeypatch):
    # The case: rank 100,000 under a 2 GiB cap passed 6 GB resident in the initial
    # factors (or aborted with std::bad_alloc under `ulimit -v`, exit 134, no error line).
    code, text = _run(tmp_path, monkeypatch, 2, "model.rank=100000")
    lines = [line for line in text.splitlines() if line.startswith("error:")]
    assert code == 2, text[-2000:]
    assert len(lines) == 1, text[-2000:]
    assert "LEML factors at rank 100,000" in lines[0] and "lower the rank" in lines[0]
    assert "Traceback" not in text
    # the run did not finish: no manifest
    assert not list((tmp_path / "data" / "runs").glob("*/manifest.json"))


def test_dask_workers_too_small_for_the_row_blocks_exit_2_naming_the_option(tmp_path,
                                                                           monkeypatch):
    """Workers whose memory limit their process already exceeds (so they would never start
    a task): one error line naming the options, before any data step or row block is sent,
    and no run folder.  (The limit checked against the blocks' bytes is tested in
    tests/tasks/test_leml_dask.py.)"""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None, memory_limit=64) as cluster:
        code, text = _run(tmp_path, monkeypatch, 64, "compute.backend=dask",
                          f"compute.address={cluster.scheduler_address}")
        sent = dict(cluster.scheduler.task_prefixes)
    lines = [line for line in text.splitlines() if line.startswith("error:")]
    assert code == 2, text[-2000:]
    assert len(lines) == 1, text[-2000:]
    assert "LEML on Dask" in lines[0] and "compute.workers" in lines[0], lines[0]
    assert "--memory-limit" in lines[0] and "Traceback" not in text
    assert not sent  # no task reached the cluster: no data step, no row block
    assert not list((tmp_path / "data" / "runs").glob("*/manifest.json"))


# -- every training flow, under one tiny limit ------------------------------------------------
GUM = Path(__file__).resolve().parents[2] / "data" / "coref" / "gum"
TRAINING_FLOWS = sorted(n for n, s in FLOWS.items()
                        if s.kind == "train" and s.target.startswith("scarce.flows."))


def _small_project(root: Path, flow: str) -> None:
    """A small real project of ``flow`` (the data of its end-to-end tests)."""
    if flow == "strip":
        strip_project(root, GUM, ["GUM_news_stampede", "GUM_news_worship"], "GUM_news_crane")
        return
    (root / "configs").mkdir(parents=True)
    if flow == "leml":
        _head(BIBTEX / "bibtex_xmlrepo_train.txt.gz", root / "train.txt", 200)
        _head(BIBTEX / "bibtex_xmlrepo_test.txt.gz", root / "test.txt", 50)
        (root / "configs" / "leml.yaml").write_text(LEML_CONFIG)
    elif flow == "relations":
        train = (SEMEVAL / "TRAIN_FILE.TXT").read_text(encoding="utf-8-sig").splitlines()
        (root / "train.txt").write_text("\n".join(train[: 4 * 60]) + "\n")
        (root / "configs" / "relations.yaml").write_text(yaml.safe_dump(RELATIONS))
    else:
        raise AssertionError(f"no small project of {flow}")


@pytest.mark.parametrize("flow", TRAINING_FLOWS)
def test_every_training_flow_refuses_work_beyond_the_memory_limit(tmp_path, monkeypatch, flow):
    """Under a limit of 10 KiB every training flow stops before its large arrays with exit 2
    and one error line saying what is needed and what is available, and writes no run (StRip
    before any training step: its pairs are counted from their files first)."""
    _small_project(tmp_path, flow)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCARCE_ROOT", str(tmp_path))
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    monkeypatch.setenv("SCARCE_MEMORY_LIMIT_GB", str(10 / 2**20))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["run", flow])
    text = err.getvalue()
    lines = [line for line in text.splitlines() if line.startswith("error:")]
    assert code == 2, text[-2000:]
    assert len(lines) == 1 and "Traceback" not in text, text[-2000:]
    assert "is available" in lines[0] and "10.0 KiB" in lines[0], lines[0]
    assert not list((tmp_path / "data" / "runs").glob("*/manifest.json"))
    if flow == "strip":
        assert "StRip's training pairs" in lines[0] and "SCARCE_MEMORY_LIMIT_GB" in lines[0]
        assert not list((tmp_path / "data" / "cache").glob("strip-grow/*"))
