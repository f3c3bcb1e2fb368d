"""``scarce apply`` with a relations model, through Prefect: the round trip, new pairs, a
folder of files, and the bad inputs.

A small training run (the first 300 SemEval training pairs, every type kept) makes the model.
Independent truth for new pairs: the model's files read with pandas and each pair's context
weighted, projected and compared with every centroid by hand, here.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scarce.algorithms.metrics.clustering import clustering_scores
from scarce.algorithms.relations.contexts import context_words
from scarce.flows.apply import model_document
from scarce.flows.cli import main
from scarce.tasks.readers.semeval import read_semeval
from scarce.tasks.store.atomic import file_sha256
from tests.flows.helpers import made_runs, manifest, run_in, runs

pytestmark = pytest.mark.usefixtures("prefect_server", "in_project")

SEMEVAL = Path(__file__).resolve().parents[2] / "data" / "relations" / "semeval2010_task8"
CONFIG = {
    "seed": 1, "dataset": "semeval-300", "data": ["train.txt"], "include_other": True,
    "min_df": 1, "k_low": 3, "k_high": 5, "n_prefixes": 4, "min_prefix": 20, "theta": 0.5,
    "n_init": 2, "n_subsamples": 2, "baselines": False,
}
MODEL_PARTS = ("vocabulary", "features", "centroids", "clusters")
APPLY_STEPS = {"relations-read-model", "relations-parse", "relations-assign",
               "relations-apply-metrics"}
TRAINING_STEPS = {"relations-combine", "relations-features", "relations-rank",
                  "relations-candidate", "relations-subsets", "relations-reference",
                  "relations-stability", "relations-choose", "relations-label",
                  "relations-model", "relations-evaluate", "relations-hasegawa"}


def _semeval_pairs(path: Path, first: int, last: int) -> str:
    """Pairs ``first`` to ``last`` (0-based, end exclusive) of a SemEval file: 4 lines each."""
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    return "\n".join(lines[4 * first: 4 * last]) + "\n"


@pytest.fixture(scope="module")
def project(make_project):
    root = make_project("apply-relations", {
        "relations.yaml": CONFIG, "apply-relations.yaml": "model_run: latest\ninput: test.txt\n"})
    (root / "train.txt").write_text(_semeval_pairs(SEMEVAL / "TRAIN_FILE.TXT", 0, 300))
    (root / "test.txt").write_text(_semeval_pairs(SEMEVAL / "TEST_FILE_FULL.TXT", 0, 40))
    (root / "more.txt").write_text(_semeval_pairs(SEMEVAL / "TEST_FILE_FULL.TXT", 40, 50))
    unlabelled = read_semeval(root / "more.txt")
    (root / "new.jsonl").write_text("".join(
        json.dumps({"id": f"n{i}", "tokens": list(r.tokens), "head": [r.e1_start, r.e1_end],
                    "tail": [r.e2_start, r.e2_end]}) + "\n"
        for i, r in enumerate(unlabelled.itertuples())))
    return root


@pytest.fixture(scope="module")
def trained(project, prefect_server):
    """The training run's id."""
    run_in(project, "run", "relations")
    (run_id,) = runs(project)
    return run_id


def cli(project, capsys, *args):
    """Exit code, manifest of the run it made (None if none) and stderr of ``scarce args``."""
    with made_runs(project) as new:
        code = main([str(a) for a in args])
        err = capsys.readouterr().err
    assert len(new) <= 1
    return code, (manifest(project, new[0]) if new else None), err


def outputs_of(project, m) -> Path:
    return project / "data" / "runs" / m["run_id"] / "outputs"


def test_applying_the_training_file_gives_the_runs_assignments_and_learns_nothing(
        project, trained, capsys):
    code, m, err = cli(project, capsys, "apply", trained, "--input", project / "train.txt")
    assert code == 0, err
    assert m["flow"] == "apply-relations" and m["config"]["model_run"] == trained
    model = project / "data" / "runs" / trained / "outputs"
    applied = pd.read_parquet(outputs_of(project, m) / "assignments.parquet")
    pd.testing.assert_frame_equal(applied, pd.read_parquet(model / "assignments.parquet"))
    steps = {o["step"] for o in m["outputs"]}
    assert steps == APPLY_STEPS and not steps & TRAINING_STEPS
    # the parse is the training run's own step: the same file and options, a cache hit
    assert "relations-parse" in m["cache_hits"]
    # the model it used is named by content among the run's inputs
    inputs = {Path(i["path"]).name: i["sha256"] for i in m["inputs"]}
    for part in MODEL_PARTS:
        assert inputs[f"{part}.parquet"] == file_sha256(model / "model" / f"{part}.parquet")
    metrics = pd.read_parquet(project / "data" / "runs" / m["run_id"] / "metrics.parquet")
    value = metrics.set_index("metric")["value"]
    assert value["n_pairs"] == 300 and value["n_files"] == 1
    scores = clustering_scores(applied["gold"].to_numpy(), applied["cluster"].to_numpy())
    assert value["accuracy"] == pytest.approx(scores["accuracy"], abs=1e-12)


def _by_hand(model: Path, frame: pd.DataFrame) -> pd.DataFrame:
    """Cluster, distance and selected words of each pair, from the model's files alone."""
    vocab = pd.read_parquet(model / "vocabulary.parquet")
    feats = pd.read_parquet(model / "features.parquet")["feature"].to_numpy()
    cells = pd.read_parquet(model / "centroids.parquet")
    centers = cells.pivot(index="cluster", columns="rank", values="value").to_numpy()
    column = {w: j for j, w in enumerate(vocab["word"])}
    rows = []
    for r in frame.itertuples():
        words = context_words(list(r.tokens), (r.e1_start, r.e1_end), (r.e2_start, r.e2_end),
                              "0-10-0", lowercase=True, position_tags=True,
                              drop_punctuation=True)
        v = np.zeros(len(vocab))
        for w, n in Counter(words).items():
            if w in column:
                v[column[w]] = n * vocab["idf"].iloc[column[w]]
        v = v / np.linalg.norm(v) if v.any() else v
        z = v[feats]
        z = z / np.linalg.norm(z) if z.any() else z
        d = np.sqrt(((centers - z) ** 2).sum(axis=1))
        rows.append((int(d.argmin()), float(d.min()), int((z != 0).sum())))
    return pd.DataFrame(rows, columns=["cluster", "distance", "n_words"])


def test_unseen_pairs_get_their_nearest_centroid_as_computed_by_hand(project, trained, capsys,
                                                                     tmp_path):
    code, m, err = cli(project, capsys, "apply", trained, "--input", project / "test.txt",
                       "--output", tmp_path / "a.csv")
    assert code == 0, err
    applied = pd.read_parquet(outputs_of(project, m) / "assignments.parquet")
    frame = read_semeval(project / "test.txt")
    hand = _by_hand(project / "data" / "runs" / trained / "outputs" / "model", frame)
    np.testing.assert_array_equal(applied["cluster"], hand["cluster"])
    np.testing.assert_allclose(applied["distance"], hand["distance"], rtol=1e-9)
    np.testing.assert_array_equal(applied["n_words"], hand["n_words"])
    assert applied["id"].tolist() == frame["id"].astype(str).tolist()
    assert applied["gold"].tolist() == frame["relation"].tolist()
    clusters = pd.read_parquet(project / "data" / "runs" / trained / "outputs" / "clusters.parquet")
    assert applied["label"].tolist() == clusters["label"].to_numpy()[hand["cluster"]].tolist()
    csv = pd.read_csv(tmp_path / "a.csv", dtype={"id": str}, keep_default_na=False)
    pd.testing.assert_frame_equal(csv, applied, check_dtype=False)

    code, m2, err = cli(project, capsys, "apply", trained, "--input", project / "test.txt",
                        "--output", tmp_path / "a.parquet")
    assert code == 0, err
    assert (tmp_path / "a.parquet").read_bytes() == (
        outputs_of(project, m2) / "assignments.parquet").read_bytes()
    assert all(o["cached"] for o in m2["outputs"])  # applied once already: all from the store


def test_a_folder_is_applied_file_by_file_and_files_already_applied_come_from_the_store(
        project, trained, capsys, tmp_path):
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    shutil.copy(project / "test.txt", inbox / "a.txt")
    shutil.copy(project / "new.jsonl", inbox / "b.jsonl")
    (inbox / "notes.md").write_text("not an input")
    code, m, err = cli(project, capsys, "run", "apply-relations", "--set", f"input={inbox}",
                       "--set", f"output={out}")
    assert code == 0, err
    assert m["config"]["model_run"] == "latest"  # the bundled config names the newest run
    named = {o["name"]: o for o in m["named_outputs"]}
    assert set(named) == {"assignments/a.parquet", "assignments/b.parquet"}
    a = pd.read_parquet(outputs_of(project, m) / "assignments" / "a.parquet")
    single = pd.read_parquet(outputs_of(project, cli_single(project, capsys, trained))
                             / "assignments.parquet")
    assert (a["source"] == "a.txt").all()
    pd.testing.assert_frame_equal(a.drop(columns="source"), single.drop(columns="source"))
    b = pd.read_parquet(outputs_of(project, m) / "assignments" / "b.parquet")
    hand = _by_hand(project / "data" / "runs" / trained / "outputs" / "model",
                    read_semeval(project / "more.txt"))
    np.testing.assert_array_equal(b["cluster"], hand["cluster"])
    assert b["gold"].isna().all() and b["id"].tolist() == [f"n{i}" for i in range(10)]
    for name in named:
        assert (out / Path(name).name).read_bytes() == (outputs_of(project, m) / name).read_bytes()
    metrics = pd.read_parquet(project / "data" / "runs" / m["run_id"] / "metrics.parquet")
    assert "accuracy" not in set(metrics["metric"])  # b has no gold labels

    shutil.copy(project / "more.txt", inbox / "c.txt")
    code, m, err = cli(project, capsys, "run", "apply-relations", "--set", f"input={inbox}")
    assert code == 0, err
    cached = {o["ref"]: o["cached"] for o in m["outputs"]}
    refs = {o["name"]: o["ref"] for o in m["named_outputs"]}
    assert set(refs) == {"assignments/a.parquet", "assignments/b.parquet",
                         "assignments/c.parquet"}
    assert cached[refs["assignments/a.parquet"]] and cached[refs["assignments/b.parquet"]]
    assert not cached[refs["assignments/c.parquet"]]
    parses = [o for o in m["outputs"] if o["step"] == "relations-parse"]
    assert sorted(o["cached"] for o in parses) == [False, True, True]


def cli_single(project, capsys, trained):
    """The manifest of an apply run of ``test.txt`` alone."""
    code, m, err = cli(project, capsys, "apply", trained, "--input", project / "test.txt")
    assert code == 0, err
    return m


def _fake_run(project, trained, run_id, edit=None, flow=None, model=True):
    """A run folder beside the real ones: a copy of the training run (finished long ago, so
    never the latest), its flow or model changed."""
    runs_dir = project / "data" / "runs"
    d = runs_dir / run_id
    shutil.copytree(runs_dir / trained, d)  # copies, not links: the store stays untouched
    m = json.loads((d / "manifest.json").read_text())
    m.update(finished="2000-01-01T00:00:00+00:00", flow=flow or m["flow"])
    (d / "manifest.json").write_text(json.dumps(m))
    if not model:
        shutil.rmtree(d / "outputs")
    if edit:
        edit(d / "outputs" / "model")
    return run_id


def _old_version(folder):
    meta = json.loads((folder / "model.json").read_text())
    (folder / "model.json").write_text(model_document("relations", 0, **{
        k: v for k, v in meta.items() if k not in ("format", "version")}))


def _leml_model(folder):
    (folder / "model.json").write_text(model_document("leml", 1, rank=3))


def _wrong_table(folder):
    shutil.copy(folder / "vocabulary.parquet", folder / "centroids.parquet")


BAD = {
    "another flow": (dict(flow="leml", edit=_leml_model), ["--flow", "relations"],
                     "is a leml run, not a relations run"),
    "no model": (dict(model=False), [], "has no model (outputs/model/model.json is missing"),
    "older format": (dict(edit=_old_version), [],
                     "model format version 0; this code reads version 1"),
    "not a model table": (dict(edit=_wrong_table), [],
                          "not the centroids table of a relations model (no column 'cluster')"),
}


@pytest.mark.parametrize("case", [*BAD, "wrong input format", "model run by config"])
def test_bad_input_exits_2_with_one_line_and_writes_no_run(project, trained, capsys, case):
    source = project / "test.txt"
    if case in BAD:
        fake, extra, words = BAD[case]
        run_id = _fake_run(project, trained, f"fake-{case.replace(' ', '-')}", **fake)
        args = ["apply", run_id, "--input", source, *extra]
    elif case == "wrong input format":  # a CoNLL-U document (the StRip flow's input)
        source = project / "doc.conllu"
        source.write_text("# newdoc id = d1\n1\tHello\thello\tINTJ\t_\t_\t0\troot\t_\t_\n\n")
        args, words = ["apply", trained, "--input", source], f"{source}:1:"
    else:  # `scarce run apply-relations` checks its model run in the same way
        run_id = _fake_run(project, trained, "fake-leml-by-config", flow="leml",
                           edit=_leml_model)
        args = ["run", "apply-relations", "--set", f"model_run={run_id}"]
        words = "is a leml run, not a relations run"
    runs_dir = project / "data" / "runs"
    before = sorted(p.relative_to(runs_dir) for p in runs_dir.rglob("*"))
    code, m, err = cli(project, capsys, *args)
    assert code == 2 and m is None, err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert words in line, line
    assert sorted(p.relative_to(runs_dir) for p in runs_dir.rglob("*")) == before
