"""apply-strip scores the chains of documents that carry gold coreference.

A small training run (two GUM news documents, one test document) is applied to its own test
document: the apply run's metrics must be the training run's ``evaluate`` figures for the
variant applied, and the official CRAC scorer's on the written file.  A copy of a document
whose chains were removed (every mention its own entity) gets the counts only, and a folder of
both is scored on the gold file alone.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scarce.bench import strip as bench_strip
from scarce.flows.cli import main
from scarce.tasks import strip as tasks_strip
from scarce.tasks.readers.conllu import read_conllu
from tests.flows.helpers import made_runs, manifest, run_in, runs, strip_project
from tests.scorer import needs_scorer

ROOT = Path(__file__).resolve().parents[2]
GUM = ROOT / "data" / "coref" / "gum"
TRAIN = ["GUM_news_stampede", "GUM_news_worship"]
TEST = "GUM_news_crane"
UNSEEN = "GUM_news_sensitive"
COUNTS = ["documents", "mentions", "chains", "mentions_in_chains", "singletons"]
SCORES = [f"{prefix}{name}_{c}" for prefix in ("", "all_")
          for name in tasks_strip.SCORE_NAMES for c in "prf"]
flow_test = pytest.mark.usefixtures("prefect_server", "in_project")


@pytest.fixture(scope="module")
def project(tmp_path_factory, prefect_server):
    root = strip_project(tmp_path_factory.mktemp("apply-strip-scores"), GUM, TRAIN, TEST)
    run_in(root, "run", "strip")
    return root


def trained(project) -> str:
    return next(r for r in runs(project) if r.startswith("strip-"))


def apply(project, inputs: Path, *extra: str) -> tuple[pd.Series, Path]:
    """``scarce apply`` of the trained run: its metrics by name, and its run folder."""
    with made_runs(project) as made:
        assert main(["apply", trained(project), "--input", str(inputs), *extra]) == 0
    (run_id,) = made
    assert manifest(project, run_id)["flow"] == "apply-strip"
    run_dir = project / "data" / "runs" / run_id
    return pd.read_parquet(run_dir / "metrics.parquet").set_index("metric")["value"], run_dir


def without_chains(path: Path, target: Path) -> Path:
    """``path`` written with every mention its own entity (spans and types kept)."""
    _, mentions = read_conllu(path)
    clusters = mentions[["doc", "mention"]].assign(method="none", cluster=np.arange(len(mentions)))
    target.write_text(tasks_strip.write_predicted(path=path, clusters=clusters)["conllu"].iloc[0])
    return target


@flow_test
@pytest.mark.parametrize("variant", ["strip-partial", "ripper"])
def test_a_gold_document_gets_the_scores_of_the_training_runs_evaluate(project, variant):
    got, _ = apply(project, GUM / f"{TEST}.conllu.gz", "--set", f"variant={variant}")
    metrics = pd.read_parquet(project / "data" / "runs" / trained(project) / "metrics.parquet")
    want = metrics[metrics["method"] == variant].set_index("metric")["value"]
    assert got["scored_documents"] == 1 and got["documents"] == 1
    for name in SCORES:
        assert got[name] == pytest.approx(want[name], abs=1e-12), name
    assert 0 < got["b3_f"] < 1 and 0 < got["all_muc_f"] < 1
    assert set(got.index) == {*COUNTS, "scored_documents", *SCORES}


@flow_test
@needs_scorer
def test_the_scores_over_all_mentions_are_the_official_scorers(project):
    key = GUM / f"{TEST}.conllu.gz"
    got, run_dir = apply(project, key)
    response = run_dir / "outputs" / "predicted" / f"{TEST}.conllu"
    (theirs,) = bench_strip.official_scores([{"files": [(key, response)], "singletons": True}])
    for name in ("muc", "b3", "ceaf_e"):
        for c in "prf":
            assert theirs.loc[name, c] == pytest.approx(got[f"all_{name}_{c}"], abs=1e-9)


@flow_test
def test_a_document_without_gold_chains_gets_counts_only(project, tmp_path):
    gold = GUM / f"{UNSEEN}.conllu.gz"
    plain = without_chains(gold, tmp_path / f"{UNSEEN}.conllu")
    got, run_dir = apply(project, plain)
    assert list(got.index) == COUNTS
    assert got["documents"] == 1 and got["chains"] > 0
    # the input's entity ids are not used for the chains: those of the gold file
    scored, gold_dir = apply(project, gold)
    assert scored["scored_documents"] == 1
    assert scored[COUNTS].to_dict() == got.to_dict()
    _, a = read_conllu(run_dir / "outputs" / "predicted" / f"{UNSEEN}.conllu")
    _, b = read_conllu(gold_dir / "outputs" / "predicted" / f"{UNSEEN}.conllu")
    np.testing.assert_array_equal(pd.factorize(a["entity"])[0], pd.factorize(b["entity"])[0])


@flow_test
def test_a_folder_of_gold_and_plain_files_is_scored_on_the_gold_ones(project, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(GUM / f"{TEST}.conllu.gz", docs)
    without_chains(GUM / f"{UNSEEN}.conllu.gz", docs / f"{UNSEEN}.conllu")
    mixed, _ = apply(project, docs)
    alone, _ = apply(project, GUM / f"{TEST}.conllu.gz")
    assert mixed["documents"] == 2 and mixed["scored_documents"] == 1
    assert mixed[SCORES].to_dict() == alone[SCORES].to_dict()


# ----------------------------------------------------------------------------- the step alone
def test_gold_is_an_entity_with_two_mentions_in_one_document():
    men = pd.DataFrame({"doc": ["a", "a", "b"], "entity": ["1", "2", "1"]})
    assert not tasks_strip.has_gold_chains(men)  # one entity id in two documents: no chain
    assert tasks_strip.has_gold_chains(men.assign(doc="a"))
    assert not tasks_strip.has_gold_chains(men.iloc[:0])


def test_without_gold_the_summary_holds_the_counts_only():
    mentions = pd.DataFrame({"doc": ["d"] * 3, "mention": [0, 1, 2], "entity": ["1", "2", "3"],
                             "source": [True] * 3})
    clusters = mentions[["doc", "mention"]].assign(method="m", cluster=[5, 5, 7])
    table = tasks_strip.count_chains(clusters=[clusters], mentions=[mentions], dataset="x")
    assert table.set_index("metric")["value"].to_dict() == {
        "documents": 1, "mentions": 3, "chains": 1, "mentions_in_chains": 2, "singletons": 1}
    gold = tasks_strip.count_chains(clusters=[clusters], mentions=[mentions.assign(
        entity=["1", "1", "3"])], dataset="x").set_index("metric")["value"]
    assert gold["scored_documents"] == 1 and gold["b3_f"] == 1.0 and gold["muc_f"] == 1.0
    empty = tasks_strip.count_chains(clusters=[], mentions=[], dataset="x")
    assert empty.set_index("metric")["value"]["documents"] == 0
