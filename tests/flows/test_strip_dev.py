"""The StRip flow's choice of loss ratio on dev documents (the paper's protocol), through
Prefect on four small bundled GUM documents: two to train, one dev, one test.

Independent truth: ``StRip.fit`` at every ratio on pairs built directly from the files, scored
on the dev document with ``coref_scores``, the best picked by the rule written out here (dev B³
F1, then pairwise F1, then the ratio nearest 1); the test metrics are those of that model.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scarce.algorithms.metrics.coref import coref_scores
from scarce.algorithms.strip.features import build_pairs, source_mask
from scarce.algorithms.strip.ripper import StRip
from scarce.flows.cli import main
from scarce.flows.strip import StripConfig, claims_line
from scarce.tasks.readers.conllu import read_conllu_files
from tests.flows.helpers import made_runs, manifest, runs

pytestmark = pytest.mark.usefixtures("prefect_server", "in_project")

GUM = Path(__file__).resolve().parents[2] / "data" / "coref" / "gum"
SPLITS = {"train": ["GUM_news_stampede", "GUM_news_worship"], "dev": ["GUM_news_iodine"],
          "test": ["GUM_news_crane"]}
WINDOW, K_OPT, RATIOS = 10, 1, [1.0, 0.25, 4.0]
VARIANTS = {"ripper": (False, True), "strip-labeled": (True, True), "strip-partial": (True, False)}


@pytest.fixture(scope="module")
def project(make_project):
    root = make_project("strip-dev", {"strip.yaml": (
        f"dataset: gum-small\ndata_dir: {GUM}\nsplits_file: splits.tsv\nwindow: {WINDOW}\n"
        f"k_optimize: {K_OPT}\nloss_ratios: {RATIOS}\n")})
    rows = [f"{d}\t{split}" for split, docs in SPLITS.items() for d in docs]
    (root / "splits.tsv").write_text("doc_id\tsplit\n" + "\n".join(rows) + "\n")
    return root


@pytest.fixture
def first(project, in_project):
    """The module's first run (made by the first test that asks for it)."""
    if not runs(project):
        assert main(["run", "strip", "--config", str(project / "configs" / "strip.yaml")]) == 0
    return manifest(project, sorted(runs(project), key=lambda r: manifest(project, r)["started"]
                                    )[0])


def _pairs(docs):
    tokens, mentions = read_conllu_files([GUM / f"{d}.conllu.gz" for d in docs])
    sources = source_mask(mentions)
    pairs, X, y = build_pairs(tokens, mentions, max_mention_distance=WINDOW, sources=sources)
    return mentions, sources, pairs, X, y


def _scores(est, docs):
    mentions, sources, pairs, X, _ = _pairs(docs)
    direct = est.cluster(X, pairs["doc"], pairs["mention_i"], pairs["mention_j"])
    chain = direct.set_index(["doc", "mention"])["cluster"]
    response = chain.reindex(pd.MultiIndex.from_frame(mentions[["doc", "mention"]])).to_numpy(
        dtype=float, copy=True)
    unpaired = np.isnan(response)  # a mention in no pair is its own chain
    response[unpaired] = -1 - np.arange(unpaired.sum())
    return coref_scores(mentions["entity"].to_numpy(), response, sources,
                        mentions["doc"].to_numpy())


def test_each_variant_keeps_the_ratio_best_on_dev_and_is_scored_on_test(project, first):
    assert {"strip-select-loss-ratio"} <= {o["step"] for o in first["outputs"]}
    metrics = pd.read_parquet(project / "data" / "runs" / first["run_id"] / "metrics.parquet")
    assert set(metrics["dataset"]) == {"gum-small-test"}
    _, _, pairs, X, y = _pairs(SPLITS["train"])
    for method, (closure, labeled_only) in VARIANTS.items():
        keep = y >= 0 if labeled_only else np.ones(y.size, dtype=bool)
        fitted, dev = {}, []
        for ratio in RATIOS:
            est = StRip(closure=closure, k_optimize=K_OPT, loss_ratio=ratio, random_state=0).fit(
                X[keep].reset_index(drop=True), y[keep], pairs["doc"].to_numpy()[keep],
                pairs["mention_i"].to_numpy()[keep], pairs["mention_j"].to_numpy()[keep])
            fitted[ratio] = est
            s = _scores(est, SPLITS["dev"])
            dev.append((round(s.loc["b3", "f"], 12), round(s.loc["pairwise", "f"], 12),
                        -abs(math.log(ratio)), ratio))
        best = max(dev)[-1]
        got = metrics[metrics["method"] == method].set_index("metric")["value"]
        assert got["loss_ratio"] == best, (method, dev)
        want = _scores(fitted[best], SPLITS["test"])
        for name in ("muc", "b3", "ceaf_e", "pairwise"):
            assert got[f"{name}_f"] == pytest.approx(want.loc[name, "f"], abs=1e-12)


def test_the_selection_is_an_artifact_and_the_model_records_each_ratio(project, first):
    import json

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
    )

    out = project / "data" / "runs" / first["run_id"] / "outputs"
    model = json.loads((out / "model" / "model.json").read_text())
    metrics = pd.read_parquet(project / "data" / "runs" / first["run_id"] / "metrics.parquet")
    chosen = metrics[metrics["metric"] == "loss_ratio"].set_index("method")["value"]
    assert {v["name"]: v["loss_ratio"] for v in model["variants"]} == chosen.to_dict()
    assert model["learner"]["loss_ratio"] == {"dev_splits": ["dev"], "tried": RATIOS,
                                              "select_by": "b3"}
    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[first["prefect_flow_run_id"]])))
        names = {t.name for t in tasks}
        artifacts = {a.key for a in client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[first["prefect_flow_run_id"]])))}
    assert {"evaluate gum-small-dev", "evaluate gum-small-test", "select loss ratio (b3)",
            "select-loss-ratio"} <= names
    assert len([n for n in names if n.startswith("grow ")]) == len(VARIANTS) * len(RATIOS)
    assert "strip-gum-small-loss-ratio-selection" in artifacts


def test_without_dev_every_variant_uses_loss_ratio(project, first, capsys):
    with made_runs(project) as made:
        assert main(["run", "strip", "--config", str(project / "configs" / "strip.yaml"),
                     "--set", "dev_splits=[]", "--set", "loss_ratio=4"]) == 0
    (run_id,) = made
    m = manifest(project, run_id)
    assert "strip-select-loss-ratio" not in {o["step"] for o in m["outputs"]}
    metrics = pd.read_parquet(project / "data" / "runs" / run_id / "metrics.parquet")
    assert set(metrics.loc[metrics["metric"] == "loss_ratio", "value"]) == {4.0}
    # the models at ratio 4 were trained for the dev choice already: only scoring runs
    assert {"strip-grow", "strip-prune", "strip-optimize"} <= set(m["cache_hits"])


@pytest.mark.parametrize("extra, words", [
    ({"dev_splits": ["test"]}, "must not share a split"),
    ({"loss_ratios": [1.0, 1.0]}, "each ratio at most once"),
    ({"loss_ratios": [0.0]}, "positive finite"),
    ({"loss_ratios": []}, "at least 1 item"),
])
def test_bad_dev_settings_are_refused(extra, words):
    with pytest.raises(ValueError, match=words):
        StripConfig(**extra)


@pytest.mark.parametrize("dev_splits, note", [
    ([], ""), (["dev"], " (loss ratios chosen on dev documents of this corpus)")])
def test_claims_line_states_each_margin_and_judges_none_on_one_run(dev_splits, note):
    """One run has no seed spread: +0.009 on B³ is a margin, not a verdict (the rule of
    ``scarce claims`` says holds only beyond the spread)."""
    scores = pd.DataFrame({"method": ["ripper", "strip-labeled", "strip-partial"],
                           "b3_f": [0.70, 0.709, 0.69], "pairwise_f": [0.40, 0.39, 0.45]})
    line = claims_line(scores, StripConfig(dev_splits=dev_splits))
    assert line == (
        f"The paper's claims in this run, margins over RIPPER{note}: StRip beats RIPPER on the "
        "labelled pairs: B³ +0.009, pairwise -0.010; StRip with partial supervision beats "
        "RIPPER: B³ -0.010, pairwise +0.050. Not judged: one run has no seed spread; "
        "`scarce claims` judges them over seeds on an experiment (`scarce run experiment "
        "strip-loss-ratio`).")
    assert "supported" not in line and "holds" not in line
    assert claims_line(scores[scores["method"] != "ripper"], StripConfig()) is None
