"""The relation discovery flow end to end through Prefect on 300 SemEval pairs.

Independent truth: the same sample read, filtered and featurised without the flow, then
``RelationDiscovery.fit`` (the single-process loop over the steps the flow runs as tasks)
and the baseline functions called directly with the same seeds; the metrics recomputed from
the stored clusters.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scarce.algorithms.metrics.clustering import clustering_scores
from scarce.algorithms.relations.baselines import hasegawa_clustering, kmeans_baseline
from scarce.algorithms.relations.contexts import build_contexts_frame
from scarce.algorithms.relations.dcm import top_words
from scarce.algorithms.relations.model import RelationDiscovery
from scarce.flows.cli import main
from scarce.tasks.readers.semeval import read_semeval
from scarce.tasks.store import Store
from scarce.tasks.store.atomic import file_sha256
from tests.flows.helpers import made_run, made_runs, manifest, rerun, runs

pytestmark = pytest.mark.usefixtures("prefect_server", "in_project")

TRAIN = Path(__file__).resolve().parents[2] / "data" / "relations" / "semeval2010_task8" / (
    "TRAIN_FILE.TXT")
CONFIG = {
    "seed": 1, "dataset": "semeval-sample", "data": [str(TRAIN)], "max_pairs": 300,
    "min_df": 1, "k_low": 3, "k_high": 5, "n_prefixes": 4, "min_prefix": 20, "theta": 0.5,
    "n_init": 2, "n_subsamples": 2, "baselines": True,
}
SEARCH_STEPS = ["relations-candidate", "relations-combine", "relations-features",
                "relations-hasegawa", "relations-parse", "relations-rank", "relations-reference",
                "relations-subsets"]
ESTIMATOR = dict(k_low=3, k_high=5, n_prefixes=4, min_prefix=20, theta=0.5, n_init=2,
                 n_subsamples=2, random_state=1)


@pytest.fixture(scope="module")
def project(make_project):
    return make_project("relations", {"relations.yaml": CONFIG})


@pytest.fixture(scope="module")
def first(project, prefect_server):
    """The id of the module's first run of its config, made by the first test that reads it
    (whichever runs first, or alone)."""
    return made_run(project, "run", "relations")


@pytest.fixture(scope="module")
def second(project, first):
    """The id of a second run of the module's config, after ``first`` (its steps from the
    store)."""
    return made_run(project, "run", "relations")


def run(project, capsys, *args):
    with made_runs(project) as new:
        code = main(["run", "relations", *args])
        err = capsys.readouterr().err
    m = json.loads((project / "data" / "runs" / new[0] / "manifest.json").read_text()) if new \
        else None
    return code, m, err


def outputs(m, step, part=None):
    return [o for o in m["outputs"] if o["step"] == step
            and (part is None or o["ref"].endswith(f"-{part}"))]


@pytest.fixture(scope="module")
def sample():
    """The flow's sample, rebuilt by hand: documented seed stream SeedSequence([seed, 4])."""
    frame = read_semeval(TRAIN)
    frame = frame[frame["relation"] != "Other"].reset_index(drop=True)
    rng = np.random.default_rng(np.random.SeedSequence([CONFIG["seed"], 4]))
    rows = np.sort(rng.choice(len(frame), size=CONFIG["max_pairs"], replace=False))
    return frame.iloc[rows].reset_index(drop=True)


def test_flow_equals_the_estimator_and_metrics_equal_recomputed_scores(project, first, sample):
    m = manifest(project, first)
    store = Store(project / "data" / "cache")
    metrics = pd.read_parquet(project / "data" / "runs" / m["run_id"] / "metrics.parquet")
    value = metrics.set_index(["method", "metric"])["value"]

    X, vocab = build_contexts_frame(sample, "0-10-0", weighting="tfidf", min_df=1)
    stored_X = store.read(outputs(m, "relations-features", "X")[0]["ref"])
    assert (stored_X != X).nnz == 0 and stored_X.shape == X.shape
    model = RelationDiscovery(**ESTIMATOR).fit(X, feature_names=vocab)

    (clusters_ref,) = outputs(m, "relations-label", "clusters")
    clusters = store.read(clusters_ref["ref"])
    assert value[("entropy", "k_chosen")] == model.n_clusters_
    np.testing.assert_array_equal(clusters["cluster"].to_numpy(), model.labels_)
    np.testing.assert_array_equal(clusters["gold"].to_numpy(), sample["relation"].to_numpy())
    curve = store.read(method_choice(store, m, "curve"))
    np.testing.assert_allclose(curve["m_norm"].to_numpy(float), model.stability_["m_norm"],
                               rtol=0, atol=1e-12)
    assert store.read(method_choice(store, m, "choice"))["k"].item() == model.n_clusters_
    (search_ref,) = outputs(m, "relations-subsets", "search")
    search = store.read(search_ref["ref"])
    np.testing.assert_allclose(search["criterion"].to_numpy(float, na_value=np.nan),
                               model.search_["criterion"].to_numpy(float), rtol=1e-12)
    (words_ref,) = outputs(m, "relations-label", "words")
    words = store.read(words_ref["ref"])
    assert {c: list(g.sort_values("rank")["word"]) for c, g in words.groupby("cluster")} == \
        {c: ws for c, ws in model.cluster_labels_.items() if ws}

    y = sample["relation"].to_numpy()
    scores = clustering_scores(y, clusters["cluster"].to_numpy())
    for metric in ("accuracy", "ari", "v_measure"):
        assert value[("entropy", metric)] == pytest.approx(scores[metric], abs=1e-12)
    assert value[("entropy", "k_true")] == len(set(y))
    km = kmeans_baseline(X, len(set(y)), seed=1, n_init=2, row_norm=True)
    assert value[("kmeans-true-k", "accuracy")] == pytest.approx(
        clustering_scores(y, km)["accuracy"], abs=1e-12)
    between, _ = build_contexts_frame(sample, "0-5-0", position_tags=False)
    assert value[("hasegawa-true-k", "ari")] == pytest.approx(
        clustering_scores(y, hasegawa_clustering(between, len(set(y))))["ari"], abs=1e-12)
    assert 3 <= value[("rl-baseline", "k_used")] <= 5
    assert 0.2 < value[("entropy", "accuracy")] < 1.0
    for o in m["outputs"]:
        assert store.sha256(o["ref"]) == o["sha256"]


@pytest.fixture(scope="module")
def fitted(sample):
    """The sample's contexts and the estimator fitted on them, the independent truth."""
    X, vocab = build_contexts_frame(sample, "0-10-0", weighting="tfidf", min_df=1)
    return X, vocab, RelationDiscovery(**ESTIMATOR).fit(X, feature_names=vocab)


NAMED = {"assignments.parquet": ("relations-assign", None),
         "clusters.parquet": ("relations-examples", None),
         "features.parquet": ("relations-model", "features"),
         "model/vocabulary.parquet": ("relations-features", "vocabulary"),
         "model/features.parquet": ("relations-model", "features"),
         "model/centroids.parquet": ("relations-model", "centroids"),
         "model/clusters.parquet": ("relations-model", "clusters")}


def test_named_outputs_are_the_runs_entries_and_agree_with_the_estimator(project, first, sample,
                                                                        fitted):
    """outputs/ of the first run: each file opened with pandas is its store entry, and equals
    what the sample, ``RelationDiscovery.fit`` and the DCM function give without the flow."""
    X, vocab, model = fitted
    m = manifest(project, first)
    out = project / "data" / "runs" / m["run_id"] / "outputs"
    store = Store(project / "data" / "cache")
    named = {o["name"]: o for o in m["named_outputs"]}
    assert set(named) == {*NAMED, "model/model.json"}
    tables = {}
    for name, (step, part) in NAMED.items():
        (entry,) = outputs(m, step, part)
        assert named[name]["ref"] == entry["ref"] and file_sha256(out / name) == entry["sha256"]
        tables[name] = pd.read_parquet(out / name)
        pd.testing.assert_frame_equal(tables[name], store.read(entry["ref"]))
    k, n = model.n_clusters_, len(sample)

    assigned = tables["assignments.parquet"]
    assert list(assigned.columns) == ["source", "id", "sentence", "head", "tail", "cluster",
                                      "label", "distance", "n_words", "gold"]
    assert assigned["id"].tolist() == sample["id"].astype(str).tolist()
    assert (assigned["source"] == TRAIN.name).all()
    tokens = [list(t) for t in sample["tokens"]]
    assert assigned["sentence"].tolist() == [" ".join(t) for t in tokens]
    for column, entity in (("head", "e1"), ("tail", "e2")):
        spans = zip(tokens, sample[f"{entity}_start"], sample[f"{entity}_end"], strict=True)
        assert assigned[column].tolist() == [" ".join(t[a:b]) for t, a, b in spans]
    assert assigned["gold"].tolist() == sample["relation"].tolist()
    # each pair's cluster is its nearest centroid, written out here on the fitted contexts;
    # k-means stopped at a fixed point, so that is the clustering the metrics score
    Z = X.toarray()[:, model.selected_features_]
    Z /= np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1e-300)
    d2 = ((Z[:, None, :] - model.cluster_centers_[None]) ** 2).sum(axis=2)
    np.testing.assert_array_equal(assigned["cluster"].to_numpy(), d2.argmin(axis=1))
    np.testing.assert_allclose(assigned["distance"], np.sqrt(d2.min(axis=1)), atol=1e-12)
    same = int((assigned["cluster"].to_numpy() == model.labels_).sum())
    assert same == n, f"nearest centroid and k-means agree on {same} of {n} pairs"
    np.testing.assert_array_equal(assigned["n_words"], (Z != 0).sum(axis=1))

    clusters = tables["clusters.parquet"]
    assert clusters["cluster"].tolist() == list(range(k)) and clusters["size"].sum() == n
    np.testing.assert_array_equal(clusters["size"], np.bincount(model.labels_, minlength=k))
    dcm = top_words(X, model.labels_, vocab, 2)
    for row in clusters.itertuples():
        assert list(row.words) == [w for w, _ in dcm[row.cluster]]
        np.testing.assert_allclose(row.weights, [wt for _, wt in dcm[row.cluster]], rtol=1e-12)
        assert row.label == ", ".join(row.words)
    assert assigned["label"].tolist() == clusters["label"].to_numpy()[assigned["cluster"]].tolist()
    # the model's clusters, with the three pairs nearest each centroid, found here by a loop
    model_clusters = tables["model/clusters.parquet"]
    pd.testing.assert_frame_equal(clusters.drop(columns="examples"), model_clusters)
    for c in range(k):
        mine = sorted((r.distance, r.source, r.id, f"{r.head} … {r.tail}: {r.sentence}")
                      for r in assigned.itertuples() if r.cluster == c)
        assert list(clusters.loc[c, "examples"]) == [text for *_, text in mine[:3]]

    features = tables["features.parquet"]
    (ranking,) = outputs(m, "relations-rank")
    # the first |F| ranked words, in column order: the order k-means clustered them in
    first = store.read(ranking["ref"]).head(len(features))
    pd.testing.assert_frame_equal(
        features, first.sort_values("feature").reset_index(drop=True))
    assert features["feature"].tolist() == model.selected_features_.tolist()
    assert sorted(features["rank"]) == list(range(len(features)))

    vocabulary = tables["model/vocabulary.parquet"]
    assert vocabulary["word"].tolist() == list(vocab)
    df = np.asarray((X != 0).sum(axis=0)).ravel()
    np.testing.assert_array_equal(vocabulary["df"], df)
    np.testing.assert_allclose(vocabulary["idf"], np.log((1 + n) / (1 + df)) + 1, rtol=1e-15)
    centroids = tables["model/centroids.parquet"].pivot(index="cluster", columns="feature",
                                                        values="value")
    np.testing.assert_allclose(centroids[model.selected_features_].to_numpy(),
                               model.cluster_centers_, rtol=1e-12, atol=1e-15)
    meta = json.loads((out / "model" / "model.json").read_text())
    assert meta["format"] == "scarce-relations-model" and meta["version"] == 1
    assert (meta["k"], meta["n_features"], meta["n_pairs"], meta["vocabulary_size"]) == (
        k, len(features), n, len(vocab))
    assert meta["contexts"] == {"window": "0-10-0", "weighting": "tfidf", "position_tags": True,
                                "lowercase": True, "drop_punctuation": True, "min_df": 1}
    assert meta["assign"] == {"row_norm": True} and meta["directed"] is False


def method_choice(store, m, part):
    """The ref of ``part`` of the method's choice of k (not RLBaseline's)."""
    (ref,) = [o["ref"] for o in outputs(m, "relations-choose", "choice")
              if not store.read(o["ref"])["all_features"].item()]
    return ref.removesuffix("-choice") + f"-{part}"


def test_stability_search_is_one_task_run_holding_its_units_and_names_are_unique(project,
                                                                                 first):
    """The Prefect UI shows the design's DAG: the (k, prefix) candidates, F_k, references,
    subsample units and choice of k run inside the ``stability-search`` task run (RLBaseline's
    inside ``rl-baseline-search``), and no two different tasks share a run name."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    first = manifest(project, first)
    with get_client(sync_client=True) as client:
        task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[first["prefect_flow_run_id"]])))
    names = [t.name for t in task_runs]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    by_id = {t.id: t.name for t in task_runs}

    def parent(t):
        ids = [p.id for p in t.task_inputs.get("__parents__", [])]
        return by_id.get(ids[0]) if ids else None

    inside = {}
    for t in task_runs:
        inside.setdefault(parent(t), set()).add(t.name.split(" ")[0])
    assert inside["stability-search"] == {"candidate", "choose", "reference", "stability"}
    assert inside["rl-baseline-search"] == {"choose", "reference", "stability"}
    assert "choose k (F_k)" in names and "choose k (all words)" in names
    assert {"parse", "combine", "contexts", "rank", "stability-search", "label",
            "rl-baseline-search", "hasegawa", "evaluate"} <= inside[None]


def test_second_run_is_all_cache_hits(project, second):
    m = manifest(project, second)
    assert m["outputs"] and all(o["cached"] for o in m["outputs"])
    assert set(SEARCH_STEPS) <= set(m["cache_hits"])


def test_stability_curve_and_labels_are_prefect_artifacts(project, second):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterKey,
    )

    stability, labels = "relations-semeval-sample-stability", "relations-semeval-sample-labels"
    keys = [stability, labels]  # the flow, the data set, the artifact
    last = manifest(project, second)
    # this run's artifacts only: other test modules run relations flows on the same server
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=keys),
            flow_run_id=ArtifactFilterFlowRunId(any_=[last["prefect_flow_run_id"]])))
    by_key = {a.key: a for a in arts}
    assert set(by_key) == set(keys)
    table = by_key[labels].data
    rows = json.loads(table) if isinstance(table, str) else table
    k = int(by_key[stability].description.split("k=")[1].split(",")[0])
    assert 3 <= k <= 5 and len(rows) == k and all(r["words"] for r in rows)
    assert "| k |" in by_key[stability].data and "**chosen**" in by_key[stability].data


def test_more_subsamples_rerun_only_the_stability_part(project, first, capsys):
    code, m, err = run(project, capsys, "--set", "n_subsamples=3")
    assert code == 0, err
    for step in SEARCH_STEPS:
        assert all(o["cached"] for o in outputs(m, step)), step
    stab = outputs(m, "relations-stability")
    # 3 values of k, for the method and for RLBaseline: samples 0-1 cached, sample 2 new
    assert sum(o["cached"] for o in stab) == 12 and len(stab) == 18
    assert len(m["outputs"]) == len({o["ref"] for o in m["outputs"]})
    assert not any(o["cached"] for o in outputs(m, "relations-choose"))


def test_missing_closing_tag_exits_2_with_file_and_line(project, capsys, tmp_path):
    lines = TRAIN.read_text(encoding="utf-8-sig").splitlines()[:40]
    assert "</e2>" in lines[16]
    lines[16] = lines[16].replace("</e2>", "", 1)
    bad = tmp_path / "bad.txt"
    bad.write_text("\n".join(lines) + "\n")
    before = runs(project)
    code, m, err = run(project, capsys, "--set", f"data=[{bad}]", "--set", "max_pairs=null")
    assert code == 2 and m is None
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert f"{bad}:17:" in line and "<e2>" in line
    assert runs(project) == before


@pytest.mark.parametrize("runner", ["local", "dask"])
def test_rerun_reproduces_every_output_byte_for_byte(project, first, capsys, runner):
    """``scarce rerun`` of the first run, recomputing every step (no cache), on each runner."""
    code, out = rerun(first, capsys, runner)
    assert code == 0 and out.strip().endswith("identical"), out
    first = manifest(project, first)
    reruns = [m for m in (manifest(project, r) for r in runs(project))
              if m["options"].get("rerun_of") == first["run_id"]]
    latest = max(reruns, key=lambda m: m["finished"])  # compared with its named outputs
    assert [o["name"] for o in latest["named_outputs"]] == [o["name"] for o in
                                                           first["named_outputs"]]


def test_model_order_options_reach_the_computation(project, capsys, sample):
    """``n_init_reference``, ``n_init_subsample`` and ``n_references`` from the config give the
    estimator's numbers with the same options (the baselines, which run the same steps on all
    words, are left out to keep the test short)."""
    opts = dict(n_init_reference=5, n_init_subsample=1, n_references=2)
    code, m, err = run(project, capsys, "--set", "baselines=false",
                       *[a for key, v in opts.items() for a in ("--set", f"{key}={v}")])
    assert code == 0, err
    store = Store(project / "data" / "cache")
    X, vocab = build_contexts_frame(sample, "0-10-0", weighting="tfidf", min_df=1)
    model = RelationDiscovery(**ESTIMATOR, **opts).fit(X, feature_names=vocab)
    default = RelationDiscovery(**ESTIMATOR).fit(X)
    assert not np.allclose(model.stability_["m_norm"], default.stability_["m_norm"])
    refs = outputs(m, "relations-reference")  # R = 2 references for each k in 3..5
    assert len(refs) == 2 * 3
    curve = store.read(method_choice(store, m, "curve"))
    np.testing.assert_allclose(curve["m_norm"].to_numpy(float), model.stability_["m_norm"],
                               rtol=0, atol=1e-12)
    (clusters_ref,) = outputs(m, "relations-label", "clusters")
    np.testing.assert_array_equal(store.read(clusters_ref["ref"])["cluster"].to_numpy(),
                                  model.labels_)
    metrics = pd.read_parquet(project / "data" / "runs" / m["run_id"] / "metrics.parquet")
    value = metrics.set_index(["method", "metric"])["value"]
    assert value[("entropy", "k_chosen")] == model.n_clusters_
    assert ("kmeans-true-k", "accuracy") not in value.index


def test_config_defaults_are_the_estimators_and_build_it():
    from scarce.flows.relations import RelationsConfig

    cfg = RelationsConfig(seed=4, reg=0.1, k_low=3)
    params = cfg.estimator().get_params()
    assert params == {**RelationDiscovery().get_params(), "random_state": 4, "reg": 0.1,
                      "k_low": 3}
