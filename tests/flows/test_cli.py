"""The command line end to end on a small real flow, through a Prefect server."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits
from sklearn.metrics import adjusted_rand_score

import tests.flows.sample_flow  # noqa: F401  (registers the 'digits' flow)
from scarce.flows.cli import main
from scarce.tasks.store import Store
from scarce.tasks.store.atomic import file_sha256
from tests.flows.helpers import made_run, made_runs, manifest, runs

pytestmark = pytest.mark.usefixtures("prefect_server", "in_project")


def digits_project(root):
    """A project folder for the ``digits`` flow: every scikit-learn digit in ``digits.csv``
    and ``configs/digits.yaml`` (300 samples, k=10); returns ``root``."""
    (root / "configs").mkdir(parents=True)
    digits = load_digits()
    frame = pd.DataFrame(digits.data, columns=[f"p{i}" for i in range(64)])
    frame["label"] = digits.target
    frame.to_csv(root / "digits.csv", index=False)
    (root / "configs" / "digits.yaml").write_text("data: digits.csv\nn_samples: 300\nk: 10\n")
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return digits_project(tmp_path_factory.mktemp("project"))


def make_run(project, *args: str) -> str:
    """``scarce run digits ARGS`` on the module's project; the id of the run it made."""
    return made_run(project, "run", "digits", *args)


@pytest.fixture(scope="module")
def first(project, prefect_server):
    """The module's first run of its config on the local runner, made by the first test that
    reads it (whichever runs first, or alone)."""
    return make_run(project)


@pytest.fixture(scope="module")
def dask_run(project, prefect_server):
    """A run of the module's config on the dask runner, every step recomputed (--refresh)."""
    return make_run(project, "--runner", "dask", "--refresh")


def run_cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_run_writes_manifest_metrics_and_store_entries(tmp_path, monkeypatch, capsys):
    # A project of its own: this run is its first, every step computed and written.
    project = digits_project(tmp_path / "own")
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    monkeypatch.chdir(project)
    code, out, _ = run_cli(capsys, "run", "digits")
    assert code == 0
    (run_id,) = runs(project)
    assert run_id in out
    m = manifest(project, run_id)
    assert m["config"]["k"] == 10 and m["seed"] == 0
    assert m["environment"]["packages"]["numpy"] == np.__version__
    assert len(m["code"]["source_sha256"]) == 64
    assert m["inputs"] == [{"path": "digits.csv", "sha256": file_sha256(project / "digits.csv")}]
    store = Store(project / "data" / "cache")
    assert {o["step"] for o in m["outputs"]} == {"digits-load", "digits-cluster", "digits-evaluate"}
    for o in m["outputs"]:
        assert store.sha256(o["ref"]) == o["sha256"]
    metrics = pd.read_parquet(project / "data" / "runs" / run_id / "metrics.parquet")
    assert list(metrics.columns) == ["dataset", "method", "metric", "value"]

    # Independent truth: the same sample clustered by scikit-learn directly.
    frame = pd.read_csv(project / "digits.csv")
    rows = np.sort(np.random.default_rng(0).choice(len(frame), 300, replace=False))
    x = frame.drop(columns="label").to_numpy(float)[rows]
    y = frame["label"].to_numpy()[rows]
    labels = KMeans(n_clusters=10, n_init=2, random_state=0).fit(x).labels_
    ari = metrics.set_index("metric").loc["ari", "value"]
    assert ari == pytest.approx(adjusted_rand_score(y, labels), abs=1e-12)
    assert 0.3 < ari < 1.0


def test_rerun_with_same_config_hits_cache(project, first, capsys):
    with made_runs(project) as made:
        code, out, _ = run_cli(capsys, "run", "digits")
        assert code == 0
    (second,) = made
    m1, m2 = manifest(project, first), manifest(project, second)
    assert m2["cache_hits"] == ["digits-cluster", "digits-evaluate", "digits-load"]
    assert all(o["cached"] for o in m2["outputs"])
    assert [o["sha256"] for o in m1["outputs"]] == [o["sha256"] for o in m2["outputs"]]
    assert "cache hits" in out


def test_changed_parameter_reruns_only_what_depends_on_it(project, capsys):
    with made_runs(project) as made:
        code, _, _ = run_cli(capsys, "run", "digits", "--set", "k=5")
        assert code == 0
    (new,) = made
    m = manifest(project, new)
    assert m["config"]["k"] == 5
    assert m["cache_hits"] == ["digits-load"]


def test_corrupted_entry_is_detected_and_recomputed(project, first, capsys, caplog):
    cluster = next(o for o in manifest(project, first)["outputs"] if o["step"] == "digits-cluster")
    store = Store(project / "data" / "cache")
    path = store.path(cluster["ref"])
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with made_runs(project) as made:
        with caplog.at_level(logging.WARNING, logger="scarce.store"):
            code, _, _ = run_cli(capsys, "run", "digits")
        assert code == 0
        assert any("damaged" in r.getMessage() for r in caplog.records)
    (new,) = made
    m = manifest(project, new)
    assert "digits-cluster" not in m["cache_hits"]
    assert "digits-load" in m["cache_hits"]
    assert store.sha256(cluster["ref"]) == cluster["sha256"]


def test_rerun_reports_identical(project, first, capsys):
    code, out, _ = run_cli(capsys, "rerun", first)
    assert code == 0
    assert "identical" in out.splitlines()


def test_rerun_reports_what_differs(project, first, capsys):
    path = project / "data" / "runs" / first / "manifest.json"
    m = json.loads(path.read_text())
    m["outputs"][0]["sha256"] = "0" * 64
    forged = project / "data" / "runs" / "forged"
    forged.mkdir()
    (forged / "manifest.json").write_text(json.dumps(m))
    code, out, _ = run_cli(capsys, "rerun", "forged")
    assert code == 1
    # nothing recorded differs: said first; the store entry counted, listed with --verbose
    assert "why: the two runs record the same inputs, code, packages and config" in out
    assert "store: 1 entries differ, 0 only in the second run, 0 only in the first" in out
    code, out, _ = run_cli(capsys, "rerun", "forged", "--verbose")
    assert code == 1 and f"differs: {m['outputs'][0]['ref']}" in out


def test_rerun_after_an_input_changed_says_so_first(project, first, capsys):
    """The first value of every row of the data file changed: the rerun's first line names the
    file and both sha256, before the metrics that changed and the files that differ.  (A
    change to a row the run does not sample changes no output: the rerun is identical.)"""
    from scarce.tasks.store.atomic import file_sha256

    data = project / "digits.csv"
    text = data.read_text()
    lines = text.splitlines()
    lines[1:] = ["16" + line[line.index(","):] for line in lines[1:]]  # every first pixel
    before = file_sha256(data)
    try:
        data.write_text("\n".join(lines) + "\n")
        after = file_sha256(data)
        code, out, _ = run_cli(capsys, "rerun", first)
    finally:
        data.write_text(text)
    assert code == 1
    # after "rerun NEW of FIRST" and what it found of the run's own files (another test here
    # damages one, which the changed input cannot reproduce)
    report = [line for line in out.splitlines()[1:]
              if not line.startswith(("repaired:", "damaged:", "metadata differs:"))]
    assert report[0] == f"why: input digits.csv changed (sha256 {before[:12]} -> {after[:12]})"
    assert all(not line.startswith("why:") for line in report[1:])
    assert not any(line.startswith(("differs: digits-", "new in rerun", "missing in rerun"))
                   for line in report)  # the store's entries: counted, not listed
    assert report[-1].startswith("store: ")


def test_runs_lists_one_line_per_run_and_shows_one_in_detail(project, first, capsys):
    code, out, _ = run_cli(capsys, "runs")
    assert code == 0
    lines = out.splitlines()
    header = lines[0].split()
    assert header[:7] == ["run_id", "flow", "dataset", "inputs", "status", "started",
                          "seconds"]
    assert header[-3:] == ["method", "ari", "v_measure"]  # the method's own metrics
    ids = runs(project)
    assert len(lines) == 1 + len(ids)
    line = next(line for line in lines if line.startswith(first))
    ari = manifest(project, first)["headline"]["digits/kmeans/ari"]
    assert " digits " in line and " kmeans " in line and f" {ari:.4f} " in line
    code, out, _ = run_cli(capsys, "runs", "--flow", "leml")
    assert code == 0 and out.strip() == "no leml runs yet"
    code, out, _ = run_cli(capsys, "runs", first)
    assert code == 0 and f"run        {first}" in out and "ari" in out


def test_runs_leaves_out_a_malformed_headline_with_a_warning(project, first, capsys):
    run_id = first
    path = project / "data" / "runs" / run_id / "manifest.json"
    good = path.read_text()
    m = json.loads(good)
    path.write_text(json.dumps({**m, "headline": ["not", "a", "mapping"]}))
    try:
        code, out, err = run_cli(capsys, "runs")
    finally:
        path.write_text(good)
    assert code == 0 and run_id in out
    assert f"warning: run {run_id}: malformed headline metrics" in err


@pytest.mark.parametrize(
    "args, words",
    [
        (["run", "digits", "--set", "k=1"], "key 'k'"),
        (["run", "digits", "--set", "kk=3"], "key 'kk'"),
        (["run", "digits", "--config", "configs/missing.yaml"], "config file not found"),
        (["run", "digits", "--set", "data=absent.csv"], "absent.csv"),
        (["rerun", "no-such-run"], "no such run"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(project, capsys, args, words):
    store = Store(project / "data" / "cache")
    refs_before, runs_before = store.refs(), runs(project)
    code, _, err = run_cli(capsys, *args)
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and words in lines[0]
    assert "Traceback" not in err
    assert store.refs() == refs_before
    assert runs(project) == runs_before


def test_cache_ls_and_gc_keep_what_runs_refer_to(project, first, capsys):
    store = Store(project / "data" / "cache")
    orphan = "orphan/" + "0123456789abcdef" * 2  # a key's 32 hex digits
    store.write(orphan, np.zeros(3))
    code, out, _ = run_cli(capsys, "cache", "ls")
    assert code == 0 and orphan in out
    code, out, _ = run_cli(capsys, "cache", "gc")
    assert code == 0 and "removed 1 entries" in out
    assert orphan not in store.refs()
    referenced = {o["ref"] for r in runs(project) for o in manifest(project, r)["outputs"]}
    assert {o["ref"] for o in manifest(project, first)["outputs"]} <= referenced
    assert referenced <= set(store.refs())


def test_dask_runner_gives_the_same_outputs_as_the_local_runner(project, first, dask_run):
    local = manifest(project, first)
    dask = manifest(project, dask_run)
    assert dask["options"]["runner"] == "dask"
    assert not dask["cache_hits"]
    assert {o["ref"]: o["sha256"] for o in dask["outputs"]} == {
        o["ref"]: o["sha256"] for o in local["outputs"]
    }


def test_rerun_of_a_dask_run_uses_dask_and_is_tagged_as_a_rerun(project, dask_run, capsys):
    from prefect.client.orchestration import get_client

    assert manifest(project, dask_run)["task_runner"] == "DaskTaskRunner"
    code, out, err = run_cli(capsys, "rerun", dask_run)
    assert code == 0 and "identical" in out.splitlines()
    assert f"rerun of {dask_run} on the dask runner" in err
    new = manifest(project, out.split()[1])  # "rerun <new id> of <old id>"
    assert new["task_runner"] == "DaskTaskRunner" and new["options"]["rerun_of"] == dask_run
    with get_client(sync_client=True) as client:
        tags = client.read_flow_run(new["prefect_flow_run_id"]).tags
    assert {"flow:digits", "runner:dask", f"rerun-of:{dask_run}"} <= set(tags)


def test_bad_input_inside_a_flow_prints_no_traceback_in_a_real_process(project):
    """The command as a user runs it: Prefect's console log must not show the traceback."""
    code = (
        "import sys, tests.flows.sample_flow; from scarce.flows.cli import main; "
        "sys.exit(main(['run', 'digits', '--set', 'data=absent.csv']))"
    )
    env = {**os.environ, "SCARCE_ROOT": str(project)}
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "absent.csv" in errors[0]


def test_each_cache_hit_is_printed_once_in_a_real_process(project):
    """Prefect's console handler, the root logger and ours each printed it: three times."""
    import prefect.settings

    code = ("import sys, tests.flows.sample_flow; from scarce.flows.cli import main; "
            "sys.exit(main(['run', 'digits']))")
    env = {**os.environ, "SCARCE_ROOT": str(project),
           "PREFECT_API_URL": str(prefect.settings.PREFECT_API_URL.value())}
    root = Path(__file__).resolve().parents[2]
    for _ in range(2):  # the second run takes every step from the store
        proc = subprocess.run([sys.executable, "-c", code], cwd=root, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    lines = (proc.stdout + proc.stderr).splitlines()
    for step in ("digits-load", "digits-cluster", "digits-evaluate"):
        assert sum(f"cache hit: {step} ->" in line for line in lines) == 1, step


def test_rerun_of_a_manifest_without_its_config_is_an_input_error(project, first, capsys):
    m = manifest(project, first)
    del m["config"]
    forged = project / "data" / "runs" / "no-config"
    forged.mkdir()
    (forged / "manifest.json").write_text(json.dumps(m))
    try:
        code, _, err = run_cli(capsys, "rerun", "no-config")
    finally:
        (forged / "manifest.json").unlink()
        forged.rmdir()
    assert code == 2 and "key 'config': the manifest has no config to rerun" in err
