"""``scarce apply`` on a LEML model: the round trip, new files, folders and bad input.

A tiny model is trained once (the small Bibtex sample of ``test_leml_flow.py``), then applied
through the command line and Prefect; the line of a data row and the feature-space rule are
checked without Prefect against the readers.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from scarce.flows.cli import main
from scarce.tasks.errors import InputError
from scarce.tasks.leml import load
from scarce.tasks.leml_files import data_line, in_feature_space
from scarce.tasks.readers.arff import read_arff
from scarce.tasks.readers.xmc import read_xmc
from tests.flows.helpers import CHECK_WRAPPER, made_run, made_runs
from tests.flows.test_leml_flow import BIBTEX, CONFIG, _head, _task_run_names, check_top_k

through_prefect = pytest.mark.usefixtures("prefect_server", "in_project")

# The steps that learn: none may run when a model is applied.
TRAINING_STEPS = {"leml-init", "leml-alternate-W", "leml-alternate-H", "leml-baseline",
                  "leml-mask", "leml-split", "leml-evaluate", "leml-predict"}


@pytest.fixture(scope="module")
def project(make_project):
    root = make_project("apply-leml", {"leml.yaml": CONFIG,
                                       "apply-leml.yaml": "model_run: latest\ninput: test.txt\n"})
    _head(BIBTEX / "bibtex_xmlrepo_train.txt.gz", root / "train.txt", 400)
    _head(BIBTEX / "bibtex_xmlrepo_test.txt.gz", root / "test.txt", 200)
    return root


def _made_by(project, *args: str) -> Path:
    """The folder of the one run ``scarce ARGS`` makes in the project."""
    run_id = made_run(project, *args)
    return project / "data" / "runs" / run_id


@pytest.fixture(scope="module")
def made(project, prefect_server) -> tuple[Path, Path]:
    """The module's training run, and its first apply run made right after it, before any test
    applies the model: the model on its own test file (``scarce apply RUN --input test.txt``),
    whose rows the training run loaded; their folders."""
    trained = _made_by(project, "run", "leml")
    return trained, _made_by(project, "apply", trained.name, "--input", "test.txt")


@pytest.fixture(scope="module")
def trained(made) -> Path:
    return made[0]


@pytest.fixture(scope="module")
def applied(made) -> Path:
    return made[1]


def _runs(project) -> list[Path]:
    return sorted((project / "data" / "runs").iterdir(), key=lambda p: p.stat().st_mtime)


def _last(project) -> tuple[Path, dict]:
    run = _runs(project)[-1]
    return run, json.loads((run / "manifest.json").read_text())


def _metrics(run: Path) -> dict[str, float]:
    frame = pd.read_parquet(run / "metrics.parquet")
    return {f"{r.dataset}/{r.method}/{r.metric}": r.value for r in frame.itertuples()}


def _xmc_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def _write_xmc(path: Path, header_features: int, n_labels: int, rows: list[str]) -> None:
    text = "\n".join([f"{len(rows)} {header_features} {n_labels}", *rows]) + "\n"
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)


def _model(run: Path) -> tuple[np.ndarray, np.ndarray]:
    model = run / "outputs" / "model"
    return (pd.read_parquet(model / "W.parquet").to_numpy(),
            pd.read_parquet(model / "H.parquet").to_numpy())


@through_prefect
def test_round_trip_gives_the_training_predictions_and_learns_nothing(project, trained, applied):
    run = applied
    m = json.loads((run / "manifest.json").read_text())
    assert m["flow"] == "apply-leml" and m["config"]["model_run"] == trained.name
    applied = pd.read_parquet(run / "outputs" / "predictions.parquet")
    pd.testing.assert_frame_equal(
        applied, pd.read_parquet(trained / "outputs" / "predictions.parquet"))

    # no training step: not in the manifest, and no task run of one in Prefect
    steps = {o["step"] for o in m["outputs"]}
    assert steps == {"leml-load", "leml-score", "leml-collect"}
    assert not steps & TRAINING_STEPS
    assert _task_run_names(m) == ["collect metrics", "score test.txt"]  # load: a store hit

    # the precision of the applied labels is the training run's test precision
    trained_metrics, applied_metrics = _metrics(trained), _metrics(run)
    assert applied_metrics["test.txt/leml-squared-k8/rows"] == 200
    # and so are its nDCG and its PSP, by the model's propensities (the training labels')
    for k in (1, 3, 5):
        for metric in ("precision", "ndcg", "psp"):
            assert applied_metrics[f"test.txt/leml-squared-k8/{metric}@{k}"] == pytest.approx(
                trained_metrics[f"bibtex-tiny/leml-squared-k8/{metric}@{k}"], abs=1e-12)


@through_prefect
def test_applying_a_feature_row_model_imports_no_scikit_learn(project, trained, applied,
                                                              tmp_path):
    """The apply flow of a model of feature rows (this module's, of XC files), run whole in a
    fresh process on a store of its own (so its load and score steps compute), imports none of
    scikit-learn: it scores by the factors alone.  (A table's text model imports it to
    vectorise the text: ``tests/flows/test_apply_needs.py`` lists what each apply flow
    needs.)"""
    from prefect.settings import PREFECT_API_URL

    out = tmp_path / "modules.json"
    env = {**os.environ, "MODULES_OUT": str(out), "SCARCE_ROOT": str(project),
           "SCARCE_STORE": str(tmp_path / "store"), "PREFECT_API_URL": PREFECT_API_URL.value(),
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("SCARCE_RUNS", None)
    with made_runs(project) as made:
        done = subprocess.run([sys.executable, "-c", CHECK_WRAPPER, "apply", trained.name,
                               "--input", "test.txt"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_id,) = made
    run = project / "data" / "runs" / run_id
    m = json.loads((run / "manifest.json").read_text())
    assert {o["step"] for o in m["outputs"]} == {"leml-load", "leml-score", "leml-collect"}
    pd.testing.assert_frame_equal(pd.read_parquet(run / "outputs" / "predictions.parquet"),
                                  pd.read_parquet(applied / "outputs" / "predictions.parquet"))
    assert [n for n in json.loads(out.read_text()) if n.split(".")[0] == "sklearn"] == []


@through_prefect
def test_rerun_of_an_apply_run_is_identical(applied, capsys):
    capsys.readouterr()
    assert main(["rerun", applied.name]) == 0
    assert capsys.readouterr().out.strip().endswith("identical")


@through_prefect
def test_a_new_file_with_fewer_features_to_csv(project, trained):
    """Rows the model never saw as a file, in a narrower feature space (the missing features
    are zero), three labels each, written as CSV."""
    d, n_labels = (int(v) for v in _xmc_lines(project / "train.txt")[0].split()[1:])
    narrow = 1000
    rows = []
    for line in _xmc_lines(project / "train.txt")[51:121]:
        labels, _, feats = line.partition(" ")
        kept = [f for f in feats.split() if int(f.split(":")[0]) < narrow]
        rows.append(f"{labels} {' '.join(kept)}")
    _write_xmc(project / "new.txt", narrow, n_labels, rows)
    assert main(["apply", trained.name, "--input", "new.txt", "--output", "new.csv",
                 "--top-k", "3"]) == 0
    run, m = _last(project)
    predictions = pd.read_parquet(run / "outputs" / "predictions.parquet")
    X, _ = read_xmc(project / "new.txt")
    X = sp.hstack([X, sp.csr_matrix((X.shape[0], d - narrow))]).tocsr()
    check_top_k(predictions, X, *_model(trained), 3)
    assert (project / "new.csv").read_text() == predictions.to_csv(index=False)


@through_prefect
def test_a_folder_scores_each_file_once(project, trained):
    inbox = project / "inbox"
    inbox.mkdir()
    header, *rows = _xmc_lines(project / "test.txt")
    _, d, n_labels = (int(v) for v in header.split())
    _write_xmc(inbox / "a.txt", d, n_labels, rows[:30])
    _write_xmc(inbox / "b.txt.gz", d, n_labels, rows[30:50])
    (inbox / "notes.md").write_text("not an input\n")
    assert main(["apply", trained.name, "--input", "inbox", "--output", "scored"]) == 0
    run, m = _last(project)
    named = {o["name"] for o in m["named_outputs"]}
    assert named == {"predictions/a.parquet", "predictions/b.parquet"}
    for name in ("a", "b"):
        out = run / "outputs" / "predictions" / f"{name}.parquet"
        assert (project / "scored" / f"{name}.parquet").read_bytes() == out.read_bytes()
    # the same rows as in the round trip, renumbered per file
    whole = pd.read_parquet(trained / "outputs" / "predictions.parquet")
    b = pd.read_parquet(run / "outputs" / "predictions" / "b.parquet")
    expected = whole[whole["row"].between(30, 49)].assign(row=lambda f: f["row"] - 30)
    pd.testing.assert_frame_equal(b, expected.reset_index(drop=True))

    # a new file in the folder: only it is loaded and scored
    _write_xmc(inbox / "c.txt", d, n_labels, rows[50:60])
    assert main(["apply", trained.name, "--input", "inbox"]) == 0
    _, m = _last(project)
    fresh = {(o["step"], o["cached"]) for o in m["outputs"]
             if o["step"] in ("leml-load", "leml-score")}
    assert ("leml-score", False) in fresh
    scored_fresh = [o for o in m["outputs"] if o["step"] == "leml-score" and not o["cached"]]
    assert len(scored_fresh) == 2  # c's predictions and metrics
    assert _task_run_names(m) == ["collect metrics", "load c.txt", "score c.txt"]


@through_prefect
def test_scarce_run_apply_leml_applies_the_latest_model(project, trained):
    assert main(["run", "apply-leml"]) == 0
    run, m = _last(project)
    assert m["config"]["model_run"] == "latest"
    model_files = {i["path"] for i in m["inputs"] if i["path"].endswith("W.parquet")}
    assert model_files == {f"data/runs/{trained.name}/outputs/model/W.parquet"}
    pd.testing.assert_frame_equal(pd.read_parquet(run / "outputs" / "predictions.parquet"),
                                  pd.read_parquet(trained / "outputs" / "predictions.parquet"))


@pytest.fixture(scope="module")
def fakes(project, trained):
    """Run folders that are not an applicable LEML model (finished long ago, so never
    ``latest``) and input files that are not applicable to the model."""
    runs = project / "data" / "runs"
    manifest = json.loads((trained / "manifest.json").read_text())
    manifest["finished"] = "2000-01-01T00:00:00+00:00"
    for run_id, flow in (("strip-fake", "strip"), ("leml-nomodel", "leml")):
        (runs / run_id).mkdir()
        (runs / run_id / "manifest.json").write_text(json.dumps({**manifest, "flow": flow}))
    shutil.copytree(trained, runs / "leml-old")
    (runs / "leml-old" / "manifest.json").write_text(json.dumps(manifest))
    model_json = runs / "leml-old" / "outputs" / "model" / "model.json"
    model_json.write_text(json.dumps({**json.loads(model_json.read_text()), "version": 0}))

    header, *rows = _xmc_lines(project / "test.txt")
    _, d, n_labels = (int(v) for v in header.split())
    rows = rows[:3]
    rows[1] += f" {d + 2}:0.5"  # line 3 of the file
    _write_xmc(project / "beyond.txt", d + 5, n_labels, rows)
    (project / "test.arff").write_text("@relation r\n@attribute a numeric\n@data\n1\n")
    yield
    for run_id in ("strip-fake", "leml-nomodel", "leml-old"):
        shutil.rmtree(runs / run_id)


@through_prefect
@pytest.mark.usefixtures("fakes")
@pytest.mark.parametrize("args, expect", [
    (["apply", "strip-fake", "--flow", "leml", "--input", "test.txt"],
     "key 'model_run': run 'strip-fake' is a strip run, not a leml run"),
    (["run", "apply-leml", "--set", "model_run=strip-fake"],
     "key 'model_run': run 'strip-fake' is a strip run, not a leml run"),
    (["apply", "leml-nomodel", "--input", "test.txt"], "run leml-nomodel has no model"),
    (["apply", "leml-old", "--input", "test.txt"],
     "model.json: model format version 0; this code reads version 1"),
    (["apply", "{trained}", "--input", "beyond.txt"],
     "beyond.txt:3: feature index {beyond} is beyond the model's feature space"),
    (["apply", "{trained}", "--input", "test.arff"], "test.arff:1: bad header '@relation r'"),
    (["apply", "{trained}", "--input", "test.txt", "--output", "test.txt/p.parquet"],
     "p.parquet: key '--output': "),
], ids=["other-flow", "other-flow-in-config", "no-model", "old-version", "feature-beyond",
        "wrong-format", "output-under-a-file"])
def test_bad_input_exits_2_with_one_line_and_writes_no_run(project, trained, capsys, args,
                                                           expect):
    d = int(_xmc_lines(project / "test.txt")[0].split()[1])
    args = [a.format(trained=trained.name) for a in args]
    before = sorted(p.name for p in (project / "data" / "runs").iterdir())
    capsys.readouterr()
    assert main(args) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expect.format(beyond=d + 2) in errors[0], errors
    assert sorted(p.name for p in (project / "data" / "runs").iterdir()) == before


# -- without Prefect: the line of a data row, the model's feature space -------------------
ARFF = """% a Mulan data set
@relation r
@attribute f0 numeric
@attribute f1 numeric
@attribute l0 {0,1}

@data
% first row
1,2,0

{0 3,2 1}
% a comment between rows
0,0,1
"""


@pytest.mark.parametrize("row", [0, 1, 2])
def test_data_line_is_the_line_the_arff_reader_names(tmp_path, row):
    """Make row ``row`` malformed: the reader's error names the line data_line gives."""
    lines = ARFF.splitlines()
    data = [i for i, text in enumerate(lines)
            if text.strip() and not text.startswith(("%", "@"))]
    path = tmp_path / "r.arff"
    path.write_text(ARFF)
    X, _, names, _ = read_arff(path, n_labels=1)
    assert X.shape == (3, 2) and names == ["f0", "f1"]
    assert data_line(path, "arff", row) == data[row] + 1
    lines[data[row]] = "1,x,0"
    bad = tmp_path / "bad.arff"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as err:
        read_arff(bad, n_labels=1)
    assert err.value.line == data_line(path, "arff", row)


def test_data_line_is_the_line_the_xmc_reader_names(tmp_path):
    rows = ["1 0:1.0", "0 1:2.0", " 2:1.0"]
    bad = tmp_path / "bad.txt"
    _write_xmc(bad, 3, 2, [*rows[:2], "0 1:x"])
    with pytest.raises(InputError) as err:
        read_xmc(bad)
    assert err.value.line == data_line(bad, "xmc", 2) == 4
    assert data_line(bad, "parquet", 2) is None


def test_in_feature_space_pads_missing_features_and_names_a_feature_beyond(tmp_path):
    X = sp.csr_matrix(np.array([[1.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 0, 3.0]]))
    padded = in_feature_space(X[:, :2], 4, tmp_path / "x.txt", "xmc")
    np.testing.assert_array_equal(padded.toarray(), np.hstack([X[:, :2].toarray(),
                                                               np.zeros((3, 2))]))
    np.testing.assert_array_equal(in_feature_space(X[:2], 2, tmp_path / "x.txt", "xmc")
                                  .toarray(), X[:2, :2].toarray())
    with pytest.raises(InputError, match="feature index 3 is beyond") as err:
        in_feature_space(X, 3, tmp_path / "x.txt", "xmc")
    assert (err.value.path, err.value.line) == (str(tmp_path / "x.txt"), 4)
    with pytest.raises(InputError, match=r"row 2 \(0-based\): feature index 3") as err:
        in_feature_space(X, 2, tmp_path / "x.X.parquet", "parquet")
    assert err.value.line is None


def test_load_names_the_columns_an_arff_header_names(tmp_path):
    path = tmp_path / "r.arff"
    path.write_text(ARFF)
    loaded = load(path=path, format="arff", dtype="float32", n_labels=1, normalize="none")
    assert loaded["features"].to_dict("list") == {"feature": [0, 1], "name": ["f0", "f1"]}
    assert loaded["labels"].to_dict("list") == {"label": [0], "name": ["l0"]}
    np.testing.assert_array_equal(loaded["X"].toarray(), [[1, 2], [3, 0], [0, 0]])
    with pytest.raises(InputError, match="needs n_labels") as err:
        load(path=path, format="arff", dtype="float32", n_labels=None, normalize="none")
    assert err.value.key == "dataset.n_labels"
