"""A relations run's model from Python (``scarce.load_model``) and ``scarce apply`` on pairs
without labels.

A tiny training run (the first 60 SemEval training pairs, every type kept) makes the model.
The loaded model must give ``scarce apply``'s assignments bit for bit on the same input; a
pipeline of ``ContextFeatures`` and ``RelationDiscovery`` fitted with the run's parameters
(no Prefect, no store) must give the same clusters and label words.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from sklearn.pipeline import make_pipeline

import scarce
from scarce.algorithms.metrics.clustering import clustering_scores
from scarce.algorithms.relations.context_features import ContextFeatures
from scarce.algorithms.relations.model import RelationDiscovery
from scarce.flows.cli import main
from scarce.flows.model_relations import RelationsModel
from scarce.tasks.errors import InputError
from scarce.tasks.readers.semeval import read_semeval
from tests.flows.helpers import made_runs, manifest, run_in, runs

pytestmark = pytest.mark.usefixtures("prefect_server", "in_project")

SEMEVAL = Path(__file__).resolve().parents[2] / "data" / "relations" / "semeval2010_task8"
METHOD = {"k_low": 2, "k_high": 3, "n_prefixes": 2, "min_prefix": 10, "theta": 0.5,
          "n_init": 1, "n_subsamples": 2}
CONFIG = {"seed": 1, "dataset": "semeval-60", "data": ["train.txt"], "include_other": True,
          "min_df": 1, "baselines": False, **METHOD}


def _pairs(frame: pd.DataFrame, labels: bool) -> list[dict]:
    """The reader's table as dicts of the JSON Lines schema (with the directed label)."""
    out = []
    for i, r in enumerate(frame.itertuples()):
        pair = {"id": f"p{i}", "tokens": list(r.tokens), "head": [int(r.e1_start), int(r.e1_end)],
                "tail": [int(r.e2_start), int(r.e2_end)]}
        if labels:
            pair["label"] = r.relation
        out.append(pair)
    return out


def _jsonl(path: Path, pairs: list[dict]) -> None:
    path.write_text("".join(json.dumps(p) + "\n" for p in pairs))


@pytest.fixture(scope="module")
def project(make_project):
    root = make_project("model-relations", {"relations.yaml": yaml.safe_dump(CONFIG)})
    train = (SEMEVAL / "TRAIN_FILE.TXT").read_text(encoding="utf-8-sig").splitlines()
    (root / "train.txt").write_text("\n".join(train[: 4 * 60]) + "\n")
    test = (SEMEVAL / "TEST_FILE_FULL.TXT").read_text(encoding="utf-8-sig").splitlines()
    (root / "test.txt").write_text("\n".join(test[: 4 * 12]) + "\n")
    # the same 12 pairs as SemEval's unlabelled test file has them: one sentence line each
    (root / "nolabels.txt").write_text("\n".join(test[: 4 * 12: 4]) + "\n")
    frame = read_semeval(root / "test.txt")
    _jsonl(root / "new.jsonl", _pairs(frame, labels=False))
    _jsonl(root / "labelled.jsonl", _pairs(frame, labels=True))
    return root


@pytest.fixture(scope="module")
def trained(project, prefect_server):
    """The training run's id."""
    run_in(project, "run", "relations")
    (run_id,) = runs(project)
    return run_id


def apply(project, capsys, trained, source) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``scarce apply`` of ``source``: its assignments and its metrics (indexed by metric)."""
    with made_runs(project) as made:
        code = main(["apply", trained, "--input", str(source)])
        err = capsys.readouterr().err
        assert code == 0, err
    (run_id,) = made
    assert manifest(project, run_id)["flow"] == "apply-relations"
    folder = project / "data" / "runs" / run_id
    metrics = pd.read_parquet(folder / "metrics.parquet").set_index("metric")["value"]
    return pd.read_parquet(folder / "outputs" / "assignments.parquet"), metrics


# -- scarce apply on pairs without labels ---------------------------------------------------
@pytest.mark.parametrize("name", ["new.jsonl", "nolabels.txt"])
def test_pairs_without_labels_are_applied_and_no_gold_metric_is_recorded(
        project, trained, capsys, name):
    applied, metrics = apply(project, capsys, trained, project / name)
    labelled, labelled_metrics = apply(project, capsys, trained, project / "test.txt")
    assert applied["gold"].isna().all() and len(applied) == 12
    # the same pairs with labels: the same clusters; the scores only there
    for column in ("cluster", "label", "distance", "n_words", "head", "tail", "sentence"):
        assert applied[column].tolist() == labelled[column].tolist(), column
    assert set(metrics.index) == {"n_files", "n_pairs", "n_clusters", "no_words"}
    assert metrics["n_pairs"] == 12
    scores = clustering_scores(labelled["gold"].to_numpy(), labelled["cluster"].to_numpy())
    for m in ("accuracy", "ari", "v_measure"):
        assert labelled_metrics[m] == pytest.approx(scores[m], abs=1e-12)


def test_a_file_where_only_some_pairs_have_labels_records_no_gold_metric(
        project, trained, capsys):
    pairs = [p if i % 2 else {k: v for k, v in p.items() if k != "label"}
             for i, p in enumerate(json.loads(line) for line in
                                   (project / "labelled.jsonl").read_text().splitlines())]
    _jsonl(project / "some.jsonl", pairs)
    applied, metrics = apply(project, capsys, trained, project / "some.jsonl")
    assert applied["gold"].isna().tolist() == [i % 2 == 0 for i in range(12)]
    assert "accuracy" not in metrics.index and metrics["n_pairs"] == 12


def test_the_semeval_reader_reads_a_file_without_label_lines(project):
    bare = read_semeval(project / "nolabels.txt")
    full = read_semeval(project / "test.txt")
    pd.testing.assert_frame_equal(bare.drop(columns=["label", "relation", "direction"]),
                                  full.drop(columns=["label", "relation", "direction"]))
    assert bare[["label", "relation", "direction"]].isna().all().all()


@pytest.mark.parametrize("text, line, words", [
    ('1\t"The <e1>a</e1> b <e2>c</e2>."\n2\t"A <e1>d</e1> e <e2>f</e2>."\nOther\nComment:\n',
     3, "'Other' (the sentence on line 1 has no label line, so no sentence has)"),
    ('1\t"The <e1>a</e1> b <e2>c</e2>."\nOther\nComment:\n\n2\t"A <e1>d</e1> e <e2>f</e2>."\n'
     '3\t"A <e1>d</e1> e <e2>f</e2>."\n', 6, "sentence 2: missing label line"),
])
def test_a_file_mixing_the_two_semeval_forms_is_one_line_naming_the_line(tmp_path, text,
                                                                          line, words):
    path = tmp_path / "mixed.txt"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        read_semeval(path)
    assert info.value.line == line and words in str(info.value)
    assert "\n" not in str(info.value)


# -- the model from Python -------------------------------------------------------------------
@pytest.mark.parametrize("name", ["test.txt", "new.jsonl", "nolabels.txt", "labelled.jsonl"])
def test_assign_equals_scarce_apply_bit_for_bit(project, trained, capsys, name):
    want, _ = apply(project, capsys, trained, project / name)
    model = scarce.load_model(trained)
    assert isinstance(model, RelationsModel) and model.run_id == trained
    got = model.assign(project / name)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    np.testing.assert_array_equal(model.predict(str(project / name)), want["cluster"])


def test_assign_of_pair_dicts_equals_scarce_apply_of_their_file(project, trained, capsys):
    want, _ = apply(project, capsys, trained, project / "labelled.jsonl")
    pairs = [json.loads(line) for line in (project / "labelled.jsonl").read_text().splitlines()]
    got = scarce.load_model(trained).assign(pairs, source="labelled.jsonl")
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    # no label, no id: gold missing, ids the 1-based positions
    bare = [{k: p[k] for k in ("tokens", "head", "tail")} for p in pairs]
    got = scarce.load_model(trained).assign(bare)
    assert got["gold"].isna().all() and got["id"].tolist() == [str(i) for i in range(1, 13)]
    assert (got["source"] == "pairs").all()
    pd.testing.assert_frame_equal(got.drop(columns=["source", "id", "gold"]),
                                  want.drop(columns=["source", "id", "gold"]), check_exact=True)


def test_a_pipeline_fitted_with_the_runs_parameters_gives_the_models_clusters(project, trained):
    """Independent of Prefect and the store: ContextFeatures and RelationDiscovery fitted on
    the training pairs with the run's parameters, then new pairs predicted."""
    train = _pairs(read_semeval(project / "train.txt"), labels=False)
    new = _pairs(read_semeval(project / "test.txt"), labels=False)
    pipe = make_pipeline(ContextFeatures(), RelationDiscovery(random_state=1, **METHOD))
    pipe.fit(train)
    model = scarce.load_model(trained)
    got = model.assign(new)
    np.testing.assert_array_equal(got["cluster"], pipe.predict(new))
    training = pd.read_parquet(project / "data" / "runs" / trained / "outputs"
                               / "assignments.parquet")
    assert model.n_clusters == pipe[-1].n_clusters_
    np.testing.assert_array_equal(training["cluster"], pipe.predict(train))
    words = {c: [str(pipe[0].vocabulary_[int(w)]) for w in ws]
             for c, ws in pipe[-1].cluster_labels_.items()}
    assert model.clusters_["words"].map(list).tolist() == [words[c] for c in range(len(words))]
    assert got["label"].tolist() == [", ".join(words[c]) for c in got["cluster"]]


def test_load_model_finds_the_latest_relations_run(project, trained):
    assert scarce.load_model("latest", flow="relations").run_id == trained
    assert scarce.load_model(project / "data" / "runs" / trained).run_id == trained
    assert "clusters=" in repr(scarce.load_model(trained))


def test_a_model_of_an_unknown_format_version_is_refused_in_one_line(project, trained):
    model_json = project / "data" / "runs" / trained / "outputs" / "model" / "model.json"
    original = model_json.read_text()
    try:
        model_json.write_text(json.dumps({**json.loads(original), "version": 99}))
        with pytest.raises(InputError, match="model format version 99") as info:
            scarce.load_model(trained)
        assert "\n" not in str(info.value) and str(model_json) in str(info.value)
    finally:
        model_json.write_text(original)


@pytest.mark.parametrize("pairs, error, words", [
    ([{"tokens": ["a", "b", "c"], "head": [0, 1], "tail": [2, 3]},
      {"tokens": ["a", "b"], "head": [0, 1], "tail": [1, 5]}], ValueError,
     "pairs[1]: 'tail' span [1, 5) is outside the 2 tokens"),
    ([{"tokens": ["a", "b"], "head": [0, 1], "tail": [1, 2], "label": 3}], ValueError,
     "pairs[0]: 'label' must be a string"),
    ([{"id": 1, "tokens": ["a", "b"], "head": [0, 1], "tail": [1, 2]}] * 2, ValueError,
     "pairs[1]: duplicated id 1 (first in pairs[0])"),
    ([], InputError, "pairs is empty: no pair to assign"),
    ({"tokens": ["a"]}, InputError, "pairs is a dict; expected a path or a list of dicts"),
])
def test_bad_pairs_are_refused_naming_the_pair(project, trained, pairs, error, words):
    with pytest.raises(error) as info:
        scarce.load_model(trained).assign(pairs)
    assert words in str(info.value)


def test_a_missing_file_is_an_input_error_naming_it(project, trained):
    with pytest.raises(InputError, match="nope.jsonl") as info:
        scarce.load_model(trained).assign(project / "nope.jsonl")
    assert "file not found" in str(info.value)
