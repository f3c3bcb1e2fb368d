"""The LEML flow end to end on a small sample of the bundled Bibtex data, through Prefect."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.metrics import ndcg_score

from scarce.algorithms.leml import LEML, row_block_bounds
from scarce.algorithms.metrics.multilabel import (
    average_instance_auc,
    multilabel_scores,
    precision_at_k,
)
from scarce.flows.cli import main
from scarce.tasks.leml import observe
from scarce.tasks.leml_dask import PartitionedData
from scarce.tasks.readers.xmc import read_xmc
from scarce.tasks.store import Store
from scarce.tasks.store.encoding import read_checked_value
from tests.flows.helpers import made_run, manifest

pytestmark = pytest.mark.usefixtures("prefect_server", "in_project")

BIBTEX = Path(__file__).resolve().parents[2] / "data" / "xmc" / "bibtex"


def _head(src: Path, dst: Path, rows: int) -> None:
    with gzip.open(src, "rt") as fh:
        lines = fh.read().splitlines()
    _, d, labels = lines[0].split()
    dst.write_text("\n".join([f"{rows} {d} {labels}", *lines[1 : rows + 1]]) + "\n")


CONFIG = """
seed: 3
name: tiny
dataset:
  name: bibtex-tiny
  train: train.txt
  test: test.txt
model:
  rank: 8
  lam: 4.0
  outer_iterations: 3
  cg_max_iter: 10
  fit_intercept: true
baselines: [br-ridge]
baseline_alpha: 10.0
"""


@pytest.fixture(scope="module")
def project(make_project):
    root = make_project("leml", {"leml.yaml": CONFIG})
    _head(BIBTEX / "bibtex_xmlrepo_train.txt.gz", root / "train.txt", 400)
    _head(BIBTEX / "bibtex_xmlrepo_test.txt.gz", root / "test.txt", 200)
    return root


@pytest.fixture(scope="module")
def first(project, prefect_server):
    """The id of the module's first run of ``scarce run leml``, every step computed: the run
    the tests read, rerun and resume from, made here whichever of them runs first or alone."""
    return made_run(project, "run", "leml")


@pytest.fixture(scope="module", autouse=True)
def _close_w_step_clusters():
    """Close the W-step's process-wide Dask cluster while pytest's streams are still open
    (at interpreter exit its scheduler logs into a closed stream)."""
    yield
    from scarce.tasks.leml_dask import CLIENTS

    CLIENTS.close()


@contextmanager
def _store_reads(monkeypatch):
    """The refs ``Store.read`` is called with in this process inside the block."""
    reads: list[str] = []
    real = Store.read

    def recording(self, ref):
        reads.append(ref)
        return real(self, ref)

    with monkeypatch.context() as patch:
        patch.setattr(Store, "read", recording)
        yield reads


def _runs(project):
    d = project / "data" / "runs"
    return sorted(d.iterdir(), key=lambda p: p.stat().st_mtime) if d.is_dir() else []


def _last(project):
    return json.loads((_runs(project)[-1] / "manifest.json").read_text())


def _final(project, manifest, iterations):
    """The stored W and H of the last iteration (found through the convergence order)."""
    store = Store(project / "data" / "cache")
    by_step = {}
    for o in manifest["outputs"]:
        by_step.setdefault(o["step"], []).append(o["ref"])
    # The W of iteration t is the only W-step output whose timings say iteration t.
    w = next(
        r[: -len("-W")]
        for r in by_step["leml-alternate-W"]
        if r.endswith("-W")
        and store.read(r[: -len("-W")] + "-timings")["iteration"][0] == iterations
    )
    h = next(
        r[: -len("-H")]
        for r in by_step["leml-alternate-H"]
        if r.endswith("-H") and store.read(r[: -len("-H")] + "-trace")["iteration"][0] == iterations
    )
    return store.read(w + "-W"), store.read(h + "-H"), store


def _assert_same_outputs(project, a, b, iterations: int = 3) -> None:
    """Runs ``a`` and ``b`` (manifests) end with the same W and H, metrics table and
    predictions, bit for bit."""
    W_a, H_a, _ = _final(project, a, iterations)
    W_b, H_b, _ = _final(project, b, iterations)
    np.testing.assert_array_equal(W_a, W_b)
    np.testing.assert_array_equal(H_a, H_b)
    runs = project / "data" / "runs"
    for name in ("metrics.parquet", "outputs/predictions.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(runs / a["run_id"] / name),
                                      pd.read_parquet(runs / b["run_id"] / name))


def check_top_k(predictions: pd.DataFrame, X, W: np.ndarray, H: np.ndarray, k: int) -> None:
    """``predictions`` (row, rank, label, label_name, score) are the ``k`` best labels of every
    row of ``X`` under the factors, against scores computed here in float64 with numpy: each
    reported score is its label's score, and the scores by rank are the ``k`` largest of the
    row (so the labels are a top ``k``, whichever way a tie went)."""
    d = W.shape[0] - 1  # the intercept is W's last row
    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    full = (X @ W[:d].astype(np.float64) + W[d]) @ H.astype(np.float64).T
    n = X.shape[0]
    assert list(predictions.columns) == ["row", "rank", "label", "label_name", "score"]
    assert predictions["label_name"].isna().all()  # the XC format names no label
    assert predictions["row"].tolist() == np.repeat(np.arange(n), k).tolist()
    assert predictions["rank"].tolist() == np.tile(np.arange(1, k + 1), n).tolist()
    labels = predictions["label"].to_numpy().reshape(n, k)
    scores = predictions["score"].to_numpy().reshape(n, k)
    np.testing.assert_allclose(scores, np.take_along_axis(full, labels, axis=1),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(scores, -np.sort(-full, axis=1)[:, :k], rtol=1e-5, atol=1e-5)
    assert all(len(set(row)) == k for row in labels)


def _task_run_names(manifest) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[manifest["prefect_flow_run_id"]])))
    return sorted(r.name for r in task_runs)


def test_flow_equals_the_estimator_and_scores_like_an_independent_metric(project, first):
    m = manifest(project, first)
    W, H, store = _final(project, m, 3)
    X, Y = read_xmc(project / "train.txt")
    Xt, Yt = read_xmc(project / "test.txt")
    est = LEML(rank=8, lam=4.0, outer_iterations=3, cg_max_iter=10, random_state=3).fit(X, Y)
    np.testing.assert_allclose(W, est.W_, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(H, est.H_, rtol=1e-5, atol=1e-6)
    assert W.dtype == np.float32

    metrics = store.read(next(o["ref"] for o in m["outputs"] if o["step"] == "leml-collect"))
    leml = metrics[metrics["method"] == "leml-squared-k8"].set_index("metric")["value"]
    scores = est.decision_function(Xt)
    top = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    hits = np.asarray(Yt.todense())[np.arange(Yt.shape[0])[:, None], top]
    assert leml["precision@1"] == pytest.approx(hits[:, 0].mean(), abs=1e-9)
    assert leml["precision@5"] == pytest.approx(hits.mean(), abs=1e-9)
    assert leml["precision@3"] == pytest.approx(precision_at_k(Yt, top, ks=(3,))[3], abs=1e-9)
    assert leml["instance_auc"] == pytest.approx(average_instance_auc(Yt, scores), abs=1e-9)
    dense = np.asarray(Yt.todense())
    for k in (1, 3, 5):
        assert leml[f"ndcg@{k}"] == pytest.approx(ndcg_score(dense, scores, k=k), abs=1e-9)
    # PSP@k: pyxclib's inverse propensities of the training labels (A = 0.55, B = 1.5), the
    # weighted hits of the top k over those of the best ranking, by a loop
    counts, N = np.asarray(Y.sum(axis=0)).ravel(), Y.shape[0]
    w = 1 + (np.log(N) - 1) * 2.5 ** 0.55 * (counts + 1.5) ** -0.55
    for k in (1, 3, 5):
        gain = sum(w[j] for i in range(len(top)) for j in top[i, :k] if dense[i, j])
        best = sum(sum(sorted(w[np.flatnonzero(dense[i])], reverse=True)[:k])
                   for i in range(len(top)))
        assert leml[f"psp@{k}"] == pytest.approx(gain / best, rel=1e-9)
    assert set(metrics["method"]) == {"leml-squared-k8", "br-ridge"}
    ridge = metrics[metrics["method"] == "br-ridge"].set_index("metric")["value"]
    assert {"ndcg@5", "psp@5"} <= set(ridge.index)

    conv = store.read(next(o["ref"] for o in m["outputs"] if o["ref"].endswith("-convergence")))
    assert conv["iteration"].tolist() == [1, 2, 3]
    np.testing.assert_allclose(conv["objective"], est.objective_, rtol=1e-5)
    assert (np.diff(conv["objective"]) <= 1e-6 * conv["objective"].abs().max()).all()
    assert (conv["seconds"] > 0).all()

    # every task run is named by its piece of work (no generated suffixes)
    assert _task_run_names(m) == sorted([
        "load train.txt", "load test.txt", "initial factors",
        *(f"alternate-{half} iter={t}" for t in (1, 2, 3) for half in "WH"),
        "label propensities A=0.55 B=1.5", "evaluate", "baseline br-ridge",
        "collect metrics", "predict top 5"])


def _resolved(model: LEML) -> dict:
    return model.set_params(**model.resolved_params()).get_params()


def test_named_outputs_are_the_model_and_the_test_predictions(project, first):
    """Each output opens with pandas and is the store entry it names; the predictions are the
    top 5 of X W H^T computed here from the saved W and H."""
    run = project / "data" / "runs" / first
    m = json.loads((run / "manifest.json").read_text())
    out, store = run / "outputs", Store(project / "data" / "cache")
    named = {o["name"]: o for o in m["named_outputs"]}
    assert set(named) == {"predictions.parquet", "model/W.parquet", "model/H.parquet",
                          "model/features.parquet", "model/labels.parquet",
                          "model/propensity.parquet", "model/config.json", "model/model.json"}
    for name, o in named.items():
        if o["ref"] is not None:
            # the entry's bytes (a hard link until a rerun writes the entry anew)
            assert (out / name).read_bytes() == store.path(o["ref"]).read_bytes()
            stored = store.read(o["ref"])
            frame = pd.read_parquet(out / name)
            if isinstance(stored, np.ndarray):
                np.testing.assert_array_equal(frame.to_numpy().reshape(stored.shape), stored)
            else:
                pd.testing.assert_frame_equal(frame, stored)
    steps = {o["ref"]: o["step"] for o in m["outputs"]}
    assert steps[named["predictions.parquet"]["ref"]] == "leml-predict"
    # W and H are the last iteration's, as the first test found them
    W, H, _ = _final(project, m, 3)
    np.testing.assert_array_equal(pd.read_parquet(out / "model/W.parquet").to_numpy(), W)
    np.testing.assert_array_equal(pd.read_parquet(out / "model/H.parquet").to_numpy(), H)

    Xt, Yt = read_xmc(project / "test.txt")
    predictions = pd.read_parquet(out / "predictions.parquet")
    check_top_k(predictions, Xt, W, H, 5)
    features = pd.read_parquet(out / "model/features.parquet")
    labels = pd.read_parquet(out / "model/labels.parquet")
    assert features["feature"].tolist() == list(range(Xt.shape[1]))
    assert labels["label"].tolist() == list(range(Yt.shape[1]))
    assert features["name"].isna().all() and labels["name"].isna().all()  # XC names none
    # the labels' inverse propensities (A = 0.55, B = 1.5) from the training labels' counts
    _, Y = read_xmc(project / "train.txt")
    counts, N = np.asarray(Y.sum(axis=0)).ravel(), Y.shape[0]
    np.testing.assert_allclose(
        pd.read_parquet(out / "model/propensity.parquet").to_numpy().ravel(),
        1 + (np.log(N) - 1) * 2.5 ** 0.55 * (counts + 1.5) ** -0.55, rtol=1e-12)

    meta = json.loads((out / "model/model.json").read_text())
    assert meta == {
        "format": "scarce-leml-model", "version": 1, "rank": 8, "loss": "squared",
        "dtype": "float32", "n_features": Xt.shape[1], "n_labels": Yt.shape[1],
        "fit_intercept": True, "normalize": "none", "input_format": "xmc",
        "shapes": {"W": [Xt.shape[1] + 1, 8], "H": [Yt.shape[1], 8]},
        "files": {"W": "W.parquet", "H": "H.parquet", "features": "features.parquet",
                  "labels": "labels.parquet", "propensity": "propensity.parquet",
                  "config": "config.json"},
        # every parameter the run trained with, "auto" as it resolved (a loaded model's
        # estimator reports them, and a clone trains what the run trained)
        "params": {k: v for k, v in _resolved(LEML(rank=8, lam=4.0, outer_iterations=3,
                                                  cg_max_iter=10, random_state=3)).items()
                   if k != "callback"}}
    assert json.loads((out / "model/config.json").read_text()) == m["config"]


def test_a_new_rank_refits_leml_but_reuses_the_br_ridge_baseline(project, first):
    """A step's key holds only what it uses: BR ridge takes no rank."""
    assert main(["run", "leml", "--set", "model.rank=9"]) == 0
    m = _last(project)
    cached = {o["step"]: o["cached"] for o in m["outputs"]}
    assert cached["leml-baseline"] and cached["leml-load"]
    assert not cached["leml-init"] and not cached["leml-alternate-W"]
    metrics = Store(project / "data" / "cache").read(
        next(o["ref"] for o in m["outputs"] if o["step"] == "leml-collect"))
    assert set(metrics["method"]) == {"leml-squared-k9", "br-ridge"}


def test_second_run_is_all_cache_hits_and_more_iterations_resume(project, first):
    assert main(["run", "leml"]) == 0
    assert all(o["cached"] for o in _last(project)["outputs"])
    assert main(["run", "leml", "--set", "model.outer_iterations=4"]) == 0
    m = _last(project)
    fresh = sorted({o["step"] for o in m["outputs"] if not o["cached"]})
    assert fresh == ["leml-alternate-H", "leml-alternate-W", "leml-collect", "leml-evaluate",
                     "leml-predict"]
    new_w = [o for o in m["outputs"] if o["step"] == "leml-alternate-W" and not o["cached"]]
    assert len(new_w) == 2  # W and timings of iteration 4 only


@pytest.mark.parametrize("runner", ["local", "dask"])
def test_rerun_is_identical(project, first, capsys, runner):
    """Named outputs included: the model and the predictions are compared too."""
    assert len(manifest(project, first)["named_outputs"]) == 8
    assert main(["rerun", first, "--runner", runner]) == 0
    assert capsys.readouterr().out.strip().endswith("identical")


def test_w_step_on_dask_matches_the_local_one_under_either_task_runner(project, first):
    # the local W-step's keys stay those of the first run: no recomputation
    assert main(["run", "leml", "--set", "baselines=[]"]) == 0
    local = _last(project)
    assert all(o["cached"] for o in local["outputs"] if o["step"] == "leml-alternate-W")
    W_local, H_local, _store = _final(project, local, 3)

    # the W-step on a LocalCluster of 2 workers (the flow's tasks in this process) ...
    dask = ["--set", "baselines=[]", "--set", "compute.backend=dask",
            "--set", "compute.row_blocks=3"]
    assert main(["run", "leml", *dask, "--refresh"]) == 0  # whichever test ran these blocks
    m = _last(project)
    assert m["config"]["compute"] == {"backend": "dask", "row_blocks": 3, "workers": 2,
                                      "address": None, "solvers": "flow"}
    assert not any(o["cached"] for o in m["outputs"] if o["step"] == "leml-alternate-W")
    W_dask, H_dask, _ = _final(project, m, 3)
    # only the summation order of the products differs: W and H agree to float32 rounding,
    # amplified by three alternations of 10 early-stopped CG iterations (measured: 2e-3 of
    # max|W|; tests/tasks/test_leml_dask.py checks 1e-4 at a tight CG tolerance)
    assert float(np.abs(W_dask - W_local).max()) <= 1e-2 * float(np.abs(W_local).max())
    # the H-steps (squared loss) took their sums over the same row blocks on the cluster:
    # the last one equals the whole-data H-step at the same W to float32 rounding
    X, Y = read_xmc(project / "train.txt")
    estimator = LEML(rank=8, lam=4.0, random_state=3)
    H_whole, _ = estimator.h_step(estimator.prepare(X, Y), W_dask, H_dask)
    assert float(np.abs(H_dask - H_whole).max()) <= 1e-5 * float(np.abs(H_whole).max())
    partition = [o for o in m["outputs"] if o["step"] == "leml-partition"]
    # the training and the test set, 3 row blocks each
    assert sorted(o["ref"].rsplit("-", 1)[1] for o in partition) == ["X"] * 6 + ["Y"] * 6
    # the test set scored block by block on the workers: P@k and the Hamming loss those of
    # the same factors scored here in one pass, to the last bit (integer counts)
    X_test, Y_test = read_xmc(project / "test.txt")
    fitted = LEML(rank=8, lam=4.0).set_factors(W_dask, H_dask)
    here = multilabel_scores(Y_test, lambda s, e: fitted.decision_function(X_test[s:e]),
                             threshold=fitted.threshold_)
    there = pd.read_parquet(project / "data" / "runs" / m["run_id"] / "metrics.parquet")
    there = there.set_index("metric")["value"]
    for name in ("precision@1", "precision@3", "precision@5", "hamming_loss"):
        assert there[name] == here[name], name
    assert there["instance_auc"] == pytest.approx(here["instance_auc"], rel=1e-9)
    # ... and predicted block by block on the workers: the whole test set's top labels
    from scarce.tasks.leml import predictions_table

    predicted = pd.read_parquet(project / "data" / "runs" / m["run_id"] / "outputs"
                                / "predictions.parquet")
    expected = predictions_table(fitted, X_test, top_k=5, batch_size=2048)
    pd.testing.assert_frame_equal(predicted[["row", "rank", "label"]],
                                  expected[["row", "rank", "label"]])
    np.testing.assert_allclose(predicted["score"], expected["score"], rtol=1e-5, atol=1e-6)
    objective = [_store.read(next(o["ref"] for o in run["outputs"]
                                  if o["ref"].endswith("-convergence")))["objective"].to_numpy()
                 for run in (local, m)]
    np.testing.assert_allclose(objective[1], objective[0], rtol=1e-3)  # measured 2.4e-4

    # ... and on the Dask task runner's own cluster (through its client): the same blocks in
    # the same order, so the same W bit for bit
    assert main(["run", "leml", *dask, "--runner", "dask", "--refresh"]) == 0
    m2 = _last(project)
    assert m2["task_runner"] == "DaskTaskRunner"
    W_runner, H_runner, _ = _final(project, m2, 3)
    np.testing.assert_array_equal(W_runner, W_dask)
    np.testing.assert_array_equal(H_runner, H_dask)


def test_the_solvers_on_a_worker_give_the_same_outputs_and_none_runs_here(project,
                                                                        monkeypatch):
    """``compute.solvers: worker``: the start, the half-steps, the evaluation and the
    predictions run whole on a worker, every step recomputed; this process calls none of the
    estimator's steps and reads none of the factors, and W, H, the metrics and the
    predictions are those of the solvers run here, bit for bit."""
    dask = ["--set", "baselines=[]", "--set", "compute.backend=dask",
            "--set", "compute.row_blocks=3"]
    assert main(["run", "leml", *dask]) == 0  # the solvers here (a store hit of the test above)
    here = _last(project)
    called: list[str] = []

    def recording(name):
        real = getattr(LEML, name)

        def method(self, *args, **kwargs):
            called.append(name)
            return real(self, *args, **kwargs)
        return method

    with _store_reads(monkeypatch) as reads, monkeypatch.context() as patch:
        for name in ("start", "w_step", "h_step", "objective", "predict_top_k"):
            patch.setattr(LEML, name, recording(name))
        assert main(["run", "leml", *dask, "--set", "compute.solvers=worker", "--refresh"]) == 0
    there = _last(project)
    assert there["config"]["compute"]["solvers"] == "worker"
    assert called == []
    factors = {o["ref"] for o in there["outputs"]
               if o["step"] in ("leml-init", "leml-alternate-W", "leml-alternate-H")
               and o["ref"].endswith(("-W", "-H"))}
    assert len(factors) == 2 + 3 + 3 and not factors & set(reads)
    _assert_same_outputs(project, there, here)
    assert main(["run", "leml", "--set", "compute.solvers=worker"]) == 2  # needs backend dask


def test_missing_labels_flow_uses_the_stored_mask(project):
    assert main(["run", "leml", "--set", "observed_fraction=0.5", "--set", "baselines=[]"]) == 0
    m = _last(project)
    # the outer iterations' progress artifact advanced with every iteration, to 100%
    from tests.flows.test_plots import _artifacts

    progress = _artifacts(m["prefect_flow_run_id"])["leml-bibtex-tiny-iterations"]
    assert progress.type == "progress" and float(progress.data) == 100.0
    store = Store(project / "data" / "cache")
    mask = store.read(next(o["ref"] for o in m["outputs"] if o["step"] == "leml-mask"))
    assert sp.issparse(mask) and mask.dtype == bool
    X, Y = read_xmc(project / "train.txt")
    assert mask.shape == Y.shape
    assert 0.45 < mask.nnz / np.prod(Y.shape) < 0.55
    W, H, _ = _final(project, m, 3)
    est = LEML(rank=8, lam=4.0, outer_iterations=3, cg_max_iter=10, random_state=3).fit(
        X, Y, mask
    )
    np.testing.assert_allclose(W, est.W_, rtol=1e-4, atol=1e-5)


def test_missing_labels_on_dask_read_the_partitioned_mask_and_match_the_estimator(
        project, monkeypatch):
    """``compute.backend: dask`` with missing labels: the mask is partitioned with X and Y, the
    W-steps and the H-steps (their per-label sums over the observed entries) run over the
    row blocks, and the factors agree with the single-process estimator to the rounding
    that early-stopped CG amplifies (float32).  The flow's process reads none of the data:
    the loading, the mask and the partition run on the workers, and the start, the W- and
    H-steps and the evaluation take the blocks' files, which the workers read."""
    over = ["--set", "observed_fraction=0.5", "--set", "baselines=[]",
            "--set", "compute.backend=dask", "--set", "compute.row_blocks=3"]
    with _store_reads(monkeypatch) as reads:  # every step computed (--refresh)
        assert main(["run", "leml", *over, "--refresh"]) == 0
    m = _last(project)
    assert not any(o["cached"] for o in m["outputs"])
    store = Store(project / "data" / "cache")
    train_x, test_x = sorted(  # the training set has 400 rows, the test set 200
        (o["ref"] for o in m["outputs"] if o["step"] == "leml-load" and o["ref"].endswith("-X")),
        key=lambda ref: -json.loads(store.meta(ref)["shape"])[0])
    mask_ref = next(o["ref"] for o in m["outputs"] if o["step"] == "leml-mask")
    # The training X, the mask and the test X: read by the partition tasks on the workers,
    # never in this process (3 reads each when the partition ran here)
    assert reads.count(train_x) == reads.count(mask_ref) == reads.count(test_x) == 0
    store = Store(project / "data" / "cache")
    parts = {o["ref"]: store.read(o["ref"]) for o in m["outputs"]
             if o["step"] == "leml-partition-masked"}
    assert len(parts) == 9  # X, Y and the mask of 3 blocks
    mask = store.read(next(o["ref"] for o in m["outputs"] if o["step"] == "leml-mask"))
    masks = [v for ref, v in sorted(parts.items()) if ref.endswith("-mask")]
    assert sorted(b.shape[0] for b in masks) == [133, 133, 134]
    assert sum(b.nnz for b in masks) == mask.nnz
    W, H, _ = _final(project, m, 3)
    X, Y = read_xmc(project / "train.txt")
    est = LEML(rank=8, lam=4.0, outer_iterations=3, cg_max_iter=10, random_state=3).fit(
        X, Y, mask)
    assert float(np.abs(W - est.W_).max()) <= 1e-2 * float(np.abs(est.W_).max())
    # The last H-step, from block sums on the workers, against the whole-data H-step at the
    # same W: float32 rounding only.  (Against the estimator's H the difference is that of
    # the W-steps, amplified by early-stopped CG: 6% of max|H| was seen.)
    H_whole, _ = est.h_step(est.prepare(X, Y, mask), W, H)
    assert float(np.abs(H - H_whole).max()) <= 1e-5 * float(np.abs(H_whole).max())


def test_malformed_input_exits_2_naming_file_and_line(project, capsys):
    bad = project / "bad.txt"
    lines = (project / "train.txt").read_text().splitlines()
    lines[5] = lines[5].replace(":1", ":x", 1)
    bad.write_text("\n".join(lines) + "\n")
    assert main(["run", "leml", "--set", "dataset.train=bad.txt"]) == 2
    err = capsys.readouterr().err
    assert "bad.txt:6" in err


def test_invalid_config_values_exit_2(project, capsys):
    for override, key in [
        ("model.rank=0", "model.rank"),
        ("observed_fraction=1.5", "observed_fraction"),
        ("model.loss=hinge", "model.loss"),
    ]:
        assert main(["run", "leml", "--set", override]) == 2
        assert f"key '{key}'" in capsys.readouterr().err


def test_l2_normalised_rows(project):
    assert main(["run", "leml", "--set", "dataset.normalize=l2", "--set", "baselines=[]"]) == 0
    m = _last(project)
    store = Store(project / "data" / "cache")
    refs = [o["ref"] for o in m["outputs"] if o["step"] == "leml-load" and o["ref"].endswith("-X")]
    for ref in refs:
        X = store.read(ref)
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
        np.testing.assert_allclose(norms[norms > 0], 1.0, rtol=1e-5)
        assert X.dtype == np.float32


def test_bound_solvers_in_the_flow_equal_the_estimator(project):
    solvers = ["--set", "model.loss=logistic", "--set", "model.w_solver=bound",
               "--set", "model.h_solver=bound", "--set", "baselines=[]"]
    assert main(["run", "leml", *solvers]) == 0
    m = _last(project)
    W, H, store = _final(project, m, 3)
    X, Y = read_xmc(project / "train.txt")
    est = LEML(rank=8, lam=4.0, loss="logistic", outer_iterations=3, cg_max_iter=10,
               w_solver="bound", h_solver="bound", random_state=3).fit(X, Y)
    np.testing.assert_allclose(W, est.W_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(H, est.H_, rtol=1e-4, atol=1e-5)
    conv = store.read(next(o["ref"] for o in m["outputs"] if o["ref"].endswith("-convergence")))
    # majorise-minimise steps never raise the objective
    assert (np.diff(conv["objective"]) <= 1e-5 * conv["objective"].abs().max()).all()


def test_tol_stops_the_flow_where_it_stops_the_estimator(project):
    X, Y = read_xmc(project / "train.txt")
    kw = dict(rank=8, lam=4.0, cg_max_iter=10, random_state=3)
    objective = LEML(outer_iterations=12, **kw).fit(X, Y).objective_
    change = -np.diff(objective) / np.abs(np.array(objective[:-1]))
    tol = float(change[3]) * 1.001  # the rule holds first after iteration 5 (or earlier)
    est = LEML(outer_iterations=12, tol=tol, **kw).fit(X, Y)
    assert 2 <= est.n_iter_ < 12
    assert main(["run", "leml", "--set", "model.outer_iterations=12", "--set",
                 f"model.tol={tol!r}", "--set", "baselines=[]"]) == 0
    m = _last(project)
    W, H, store = _final(project, m, est.n_iter_)
    np.testing.assert_allclose(W, est.W_, rtol=1e-5, atol=1e-6)
    conv = store.read(next(o["ref"] for o in m["outputs"] if o["ref"].endswith("-convergence")))
    assert conv["iteration"].tolist() == list(range(1, est.n_iter_ + 1))
    (decision,) = [d for d in m["notes"]["decisions"] if d["what"] == "outer iterations"]
    assert decision["value"] == est.n_iter_ and "model.tol" in decision["why"], decision


@pytest.mark.parametrize(("backend", "observed"), [("local", 1.0), ("local", 0.5),
                                                  ("local-blocks", 1.0)])
def test_early_stopping_in_the_flow_equals_the_estimator(project, backend, observed):
    """The held-out pass on the estimator's own split, the same best count, then every row
    for that many iterations: the estimator's factors, whole data or row blocks, labels all
    observed or half."""
    X, Y = read_xmc(project / "train.txt")
    mask = observe.fn(Y, observed, 3) if observed < 1 else None
    kw = dict(rank=8, lam=0.05, cg_max_iter=2, random_state=3, outer_iterations=20,
              early_stopping=True, validation_fraction=0.25, n_iter_no_change=2)
    est = LEML(**kw).fit(X, Y, mask)
    assert len(est.validation_scores_) < 20  # the held-out pass ended by the rule
    assert main(["run", "leml", "--set", "model.outer_iterations=20",
                 "--set", "model.lam=0.05", "--set", "model.cg_max_iter=2",
                 "--set", "model.early_stopping=true", "--set", "model.validation_fraction=0.25",
                 "--set", f"observed_fraction={observed}", "--set", "baselines=[]",
                 "--set", f"compute.backend={backend}"]) == 0
    m = _last(project)
    (decision,) = [d for d in m["notes"]["decisions"] if d["what"] == "outer iterations"]
    assert decision["value"] == est.best_iteration_, decision
    assert "held-out" in decision["why"] and "model.early_stopping" in decision["why"]
    np.testing.assert_allclose(m["notes"]["early_stopping"]["validation_p_at_1"],
                               est.validation_scores_, rtol=0, atol=1e-9)
    model = project / "data" / "runs" / m["run_id"] / "outputs" / "model"
    W, H = (read_checked_value(model / f"{name}.parquet") for name in ("W", "H"))
    np.testing.assert_allclose(W, est.W_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(H, est.H_, rtol=1e-4, atol=1e-5)


def test_squared_start_in_the_flow_equals_the_estimator(project):
    start = ["--set", "model.loss=sqhinge", "--set", "model.squared_init_iter=2",
             "--set", "baselines=[]"]
    assert main(["run", "leml", *start]) == 0
    W, H, _ = _final(project, _last(project), 3)
    X, Y = read_xmc(project / "train.txt")
    est = LEML(rank=8, lam=4.0, loss="sqhinge", squared_init_iter=2, outer_iterations=3,
               cg_max_iter=10, random_state=3).fit(X, Y)
    np.testing.assert_allclose(W, est.W_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(H, est.H_, rtol=1e-4, atol=1e-5)


@contextmanager
def _estimator_log():
    """The records of LEML's own logger during the block (the console handler of ``scarce``
    does not propagate them to pytest's)."""
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append
    logger = logging.getLogger("scarce.algorithms.leml")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_margin_loss_alone_runs_the_auto_path_and_the_log_says_so(project):
    """``model.loss=logistic`` with the preconditioned CG and nothing else: the flow logs what
    "auto" resolved to and ends with the estimator's factors for the same keys; with
    ``w_solver: tron`` the log warns that the preconditioner does not act there."""
    over = ["--set", "model.loss=logistic", "--set", "model.cg_preconditioner=diagonal",
            "--set", "baselines=[]"]
    with _estimator_log() as said:
        assert main(["run", "leml", *over]) == 0
    lines = [r.getMessage() for r in said]
    assert any("squared_init_iter auto -> 3, w_solver auto -> bound, h_solver auto -> bound"
               in line for line in lines), lines
    assert not [r for r in said if r.levelname == "WARNING"], lines
    W, H, _ = _final(project, _last(project), 3)
    X, Y = read_xmc(project / "train.txt")
    est = LEML(rank=8, lam=4.0, loss="logistic", outer_iterations=3, cg_max_iter=10,
               cg_preconditioner="diagonal", random_state=3).fit(X, Y)
    assert (est.squared_init_iter_, est.w_solver_, est.h_solver_) == (3, "bound", "bound")
    np.testing.assert_allclose(W, est.W_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(H, est.H_, rtol=1e-4, atol=1e-5)
    with _estimator_log() as said:
        assert main(["run", "leml", *over, "--set", "model.w_solver=tron",
                     "--set", "model.outer_iterations=1"]) == 0
    warned = [r.getMessage() for r in said if r.levelname == "WARNING"]
    assert any("does not act on the logistic loss's TRON W-step" in line for line in warned)


def test_the_estimators_rules_reject_a_config_by_name(project, capsys):
    assert main(["run", "leml", "--set", "model.loss=logistic", "--set", "model.w_solver=bound",
                 "--set", "compute.backend=dask"]) == 2
    assert "w_solver 'bound' runs on one process" in capsys.readouterr().err
    assert main(["run", "leml", "--set", "model.loss=logistic", "--set",
                 "model.squared_init_iter=2", "--set", "model.fit_intercept=false"]) == 2
    err = capsys.readouterr().err
    assert "key 'model'" in err and "squared_init_iter > 0 needs fit_intercept=True" in err


def _xc_parts(src: Path, folder: Path, blocks: int) -> None:
    """``src`` (an XC text file) cut into ``blocks`` part files of ``folder``, with the rows
    :func:`~algorithms.leml.data.row_block_bounds` gives each block."""
    from scarce.algorithms.leml import row_block_bounds

    lines = src.read_text().splitlines()
    _, d, labels = lines[0].split()
    rows = lines[1:]
    folder.mkdir(exist_ok=True)
    for i, (start, stop) in enumerate(row_block_bounds(len(rows), blocks)):
        (folder / f"part-{i:03d}.txt").write_text(
            "\n".join([f"{stop - start} {d} {labels}", *rows[start:stop]]) + "\n")


def test_a_folder_of_parts_is_read_part_by_part_and_gives_the_files_factors(
        project, monkeypatch, capsys):
    """Training and test sets given as folders of XC parts.  With the Dask runner each part
    is a row block: cut as ``compute.row_blocks`` cuts the single file, it gives that run's W, H,
    metrics and predictions bit for bit, and this process reads no part's data: the workers
    load the parts and read them.  With the local runner the parts are stacked: the single
    file's run, bit for bit.  Parts that disagree on the label space are refused, naming
    the part."""
    _xc_parts(project / "train.txt", project / "train-parts", 3)
    _xc_parts(project / "test.txt", project / "test-parts", 3)
    parts = ["--set", "dataset.train=train-parts", "--set", "dataset.test=test-parts"]
    import scarce.tasks.leml_files as files

    parsed: list[str] = []  # the XC files parsed in this process

    def parsing(path, *args, **kwargs):
        parsed.append(Path(path).parent.name)
        return read_xmc(path, *args, **kwargs)

    for runner in (["--set", "compute.backend=dask", "--set", "compute.row_blocks=3"], []):
        assert main(["run", "leml", "--set", "baselines=[]", *runner]) == 0
        single = _last(project)
        parsed.clear()
        with _store_reads(monkeypatch) as reads, monkeypatch.context() as patch:
            patch.setattr(files, "read_xmc", parsing)  # where the load step's body reads
            assert main(["run", "leml", "--set", "baselines=[]", *runner, *parts]) == 0
        folder = _last(project)
        loads = [o for o in folder["outputs"] if o["step"] == "leml-load"]
        assert len(loads) == 6 * 4  # 3 parts of each set, X, Y and the two index maps
        _assert_same_outputs(project, folder, single)
        part_data = [o["ref"] for o in loads if o["ref"].endswith(("-X", "-Y"))]
        if runner:  # no partition step: the parts are the blocks, loaded and read on the
            # workers only
            assert not any(o["step"].startswith("leml-partition") for o in folder["outputs"])
            assert not any(o["cached"] for o in loads) and parsed == []
            assert not set(reads) & set(part_data)
        else:  # stacked once per set for X and Y
            assert sum(o["step"] == "leml-stack" for o in folder["outputs"]) == 4
    bad = project / "train-parts" / "part-001.txt"
    lines = bad.read_text().splitlines()
    n, d, labels = lines[0].split()
    bad.write_text("\n".join([f"{n} {d} {int(labels) + 1}", *lines[1:]]) + "\n")
    assert main(["run", "leml", "--set", "baselines=[]", *parts]) == 2
    assert "part-001.txt" in capsys.readouterr().err


def test_bound_h_steps_of_a_margin_loss_run_on_the_dask_blocks(project, monkeypatch):
    """Logistic loss, ``h_solver: bound``, missing labels, ``compute.backend: dask``: the
    H-steps are rounds of block sums on the workers (label blocks of Gram matrices solved
    there), the flow's process reads none of the training data, and the last
    H-step equals the whole-data bound H-step from the same W and H to float32 rounding."""
    over = ["--set", "model.loss=logistic", "--set", "model.h_solver=bound",
            "--set", "observed_fraction=0.5", "--set", "baselines=[]",
            "--set", "compute.backend=dask", "--set", "compute.row_blocks=3"]
    with _store_reads(monkeypatch) as reads:
        assert main(["run", "leml", *over]) == 0
    m = _last(project)
    store = Store(project / "data" / "cache")
    train_x = max((o["ref"] for o in m["outputs"]
                   if o["step"] == "leml-load" and o["ref"].endswith("-X")),
                  key=lambda ref: json.loads(store.meta(ref)["shape"])[0])
    assert reads.count(train_x) == 0  # partitioned on the workers
    W3, H3, _ = _final(project, m, 3)
    _, H2, _ = _final(project, m, 2)
    mask = store.read(next(o["ref"] for o in m["outputs"] if o["step"] == "leml-mask"))
    X, Y = read_xmc(project / "train.txt")
    est = LEML(rank=8, lam=4.0, loss="logistic", h_solver="bound", fit_intercept=True)
    H_whole, _ = est.h_step(est.prepare(X, Y, mask), W3, H2)
    assert float(np.abs(H3 - H_whole).max()) <= 1e-5 * float(np.abs(H_whole).max())


def test_the_local_blocks_backend_is_the_dask_code_path_in_one_process(project, monkeypatch):
    """``compute.backend: local-blocks`` runs the dask backend's block tasks in this process,
    without Dask (``InlineClient``): the W, H, metrics and predictions of the Dask run with the same
    blocks, bit for bit, so the two share their store entries."""
    over = ["--set", "baselines=[]", "--set", "compute.row_blocks=3"]
    assert main(["run", "leml", *over, "--set", "compute.backend=dask"]) == 0
    dask = _last(project)
    W_dask, H_dask, _ = _final(project, dask, 3)
    runs = project / "data" / "runs"
    metrics = pd.read_parquet(runs / dask["run_id"] / "metrics.parquet")
    predictions = pd.read_parquet(runs / dask["run_id"] / "outputs" / "predictions.parquet")
    # recomputed (--refresh) in this process: the same bytes in every entry
    built: list[tuple[str, int]] = []
    real = PartitionedData.block

    def recording(self, b):
        built.append((self.token(), b))
        return real(self, b)

    with monkeypatch.context() as patch:
        patch.setattr(PartitionedData, "block", recording)
        assert main(["run", "leml", *over, "--set", "compute.backend=local-blocks",
                     "--refresh"]) == 0
    # each training block read from its files once for the whole run, kept between the
    # half-steps as Dask workers keep theirs (6 times each when the blocks were not kept)
    assert sorted(Counter(built).values()) == [1, 1, 1]
    blocks = _last(project)
    assert not any(o["cached"] for o in blocks["outputs"] if o["step"] == "leml-alternate-W")
    assert blocks["notes"]["w_step"] == {"scheduler": "inline", "workers": 1}
    W, H, _ = _final(project, blocks, 3)
    np.testing.assert_array_equal(W, W_dask)
    np.testing.assert_array_equal(H, H_dask)
    pd.testing.assert_frame_equal(pd.read_parquet(runs / blocks["run_id"] / "metrics.parquet"),
                                  metrics)
    pd.testing.assert_frame_equal(
        pd.read_parquet(runs / blocks["run_id"] / "outputs" / "predictions.parquet"), predictions)


def test_validation_p_at_1_on_dask_is_scored_on_the_workers(project, monkeypatch):
    """A validation split with ``compute.backend: dask``: the split runs on a worker, the
    validation rows are cut into row blocks, and each iteration's P@1 is scored on the
    workers; it equals P@1 computed here from that iteration's stored W and H and the stored
    validation rows (numpy top-1), and the flow's process reads no validation row."""
    over = ["--set", "dataset.validation_fraction=0.25", "--set", "baselines=[]",
            "--set", "compute.backend=dask", "--set", "compute.row_blocks=3"]
    with _store_reads(monkeypatch) as reads:  # every step computed (--refresh)
        assert main(["run", "leml", *over, "--refresh"]) == 0
    m = _last(project)
    store = Store(project / "data" / "cache")
    x_val = next(o["ref"] for o in m["outputs"] if o["ref"].endswith("-X_val"))
    y_val = next(o["ref"] for o in m["outputs"] if o["ref"].endswith("-Y_val"))
    assert reads.count(x_val) == reads.count(y_val) == 0
    X_val, Y_val = store.read(x_val), store.read(y_val)
    traces = pd.concat([store.read(o["ref"]) for o in m["outputs"]
                        if o["step"] == "leml-alternate-H" and o["ref"].endswith("-trace")])
    for t in (1, 3):
        W, H, _ = _final(project, m, t)
        scores = np.hstack([X_val.toarray(), np.ones((X_val.shape[0], 1))]) @ W @ H.T
        top = scores.argmax(axis=1)
        expected = float(np.mean(Y_val.toarray()[np.arange(len(top)), top] > 0))
        got = traces.loc[traces["iteration"] == t, "validation_p_at_1"].item()
        assert got == pytest.approx(expected, abs=1e-12)


def test_evaluate_on_validation_scores_the_held_out_rows_and_reads_no_test_file(project):
    """``dataset.evaluate_on: validation`` (an experiment's ``select``): the metrics and the
    predictions are those of the validation rows held out of train, computed here from the
    stored final W and H and the stored validation rows; the test file is never loaded."""
    over = ["--set", "dataset.validation_fraction=0.25", "--set", "baselines=[]",
            "--set", "dataset.evaluate_on=validation"]
    assert main(["run", "leml", *over]) == 0
    m = _last(project)
    loads = {o["ref"].rsplit("-", 1)[0] for o in m["outputs"] if o["step"] == "leml-load"}
    assert len(loads) == 1  # the training file's load only (the first run loaded two)
    assert "load test.txt" not in _task_run_names(m)
    store = Store(project / "data" / "cache")
    X_val = store.read(next(o["ref"] for o in m["outputs"] if o["ref"].endswith("-X_val")))
    Y_val = store.read(next(o["ref"] for o in m["outputs"] if o["ref"].endswith("-Y_val")))
    W, H, _ = _final(project, m, 3)
    scores = np.hstack([X_val.toarray(), np.ones((X_val.shape[0], 1))]) @ W @ H.T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    metrics = pd.read_parquet(project / "data" / "runs" / m["run_id"] / "metrics.parquet")
    got = metrics.set_index("metric")["value"]
    for k in (1, 3, 5):
        assert got[f"precision@{k}"] == pytest.approx(
            precision_at_k(Y_val, top, ks=(k,))[k], abs=1e-9)
    predictions = pd.read_parquet(project / "data" / "runs" / m["run_id"] / "outputs"
                                  / "predictions.parquet")
    check_top_k(predictions, X_val, W, H, 5)
    assert main(["run", "leml", "--set", "dataset.evaluate_on=validation"]) == 2


def test_newton_h_steps_and_the_squared_start_run_on_the_blocks(project, monkeypatch):
    """The logistic loss's Newton H-steps (``h_solver: direct``) with the blocks runner run
    on the row blocks: the partition tasks read only their own rows, this process reads no
    training data after them, and the last
    H-step equals the whole-data Newton H-step from the same W and H to float32 rounding.
    So does the squared-loss start (``model.squared_init_iter``): it reads no training data
    here either, and its factors are the estimator's whole-data start to the conjugate
    gradient's tolerance.  Neither run warns."""
    over = ["--set", "model.loss=logistic", "--set", "baselines=[]",
            "--set", "compute.backend=local-blocks", "--set", "compute.row_blocks=3"]
    import logging

    import scarce.tasks.leml as tl
    import scarce.tasks.leml_data as td  # where the partition steps read their rows

    said: list[tuple[int, str]] = []  # the steps' messages (a log handler may hold another
    real_log = tl.log_both             # stderr)

    def saying(level, msg, *args):
        said.append((level, msg % args))
        real_log(level, msg, *args)

    monkeypatch.setattr(tl, "log_both", saying)
    rows_read: list[tuple[str, int, int]] = []
    real_rows = td.read_rows

    def reading_rows(path, start, stop):
        rows_read.append((Path(path).name, start, stop))
        return real_rows(path, start, stop)

    with _store_reads(monkeypatch) as reads, monkeypatch.context() as patch:
        patch.setattr(td, "read_rows", reading_rows)
        assert main(["run", "leml", *over, "--refresh"]) == 0
    assert all(level < logging.WARNING for level, _ in said)
    said.clear()
    m = _last(project)
    store = Store(project / "data" / "cache")
    train_x = max((o["ref"] for o in m["outputs"]
                   if o["step"] == "leml-load" and o["ref"].endswith("-X")),
                  key=lambda ref: json.loads(store.meta(ref)["shape"])[0])
    # the 3 partition tasks (in this process here) read only their own rows of it
    assert reads.count(train_x) == 0
    n = json.loads(store.meta(train_x)["shape"])[0]
    assert sorted(r for r in rows_read if r[0] == store.path(train_x).name) == [
        (store.path(train_x).name, start, stop) for start, stop in row_block_bounds(n, 3)]
    W3, H3, _ = _final(project, m, 3)
    _, H2, _ = _final(project, m, 2)
    X, Y = read_xmc(project / "train.txt")
    est = LEML(rank=8, lam=4.0, loss="logistic", h_solver="direct", fit_intercept=True)
    H_whole, _ = est.h_step(est.prepare(X, Y), W3, H2)
    assert np.abs(H3 - H_whole).max() <= 1e-4 * np.abs(H_whole).max()
    with _store_reads(monkeypatch) as reads:  # the partitions are the first run's
        assert main(["run", "leml", *over, "--set", "model.squared_init_iter=2",
                     "--set", "model.outer_iterations=1"]) == 0
    assert reads.count(train_x) == 0 and all(level < logging.WARNING for level, _ in said)
    assert any(msg.startswith("squared-loss start (2 iterations) on the Dask cluster at inline")
               for _, msg in said)
    m = _last(project)
    init = next(o["ref"] for o in m["outputs"] if o["step"] == "leml-init")
    init = init.rsplit("-", 1)[0]
    W0, H0 = store.read(init + "-W"), store.read(init + "-H")
    est = LEML(rank=8, lam=4.0, loss="logistic", squared_init_iter=2, cg_max_iter=10,
               random_state=3)
    W_whole, H_whole = est.start(est.prepare(X, Y))
    # The start's W-steps are conjugate gradients stopped at a relative residual of cg_tol, so
    # a sum taken by blocks and one taken whole agree to that tolerance, not to float32
    # rounding (one CG iteration more or less on one side moves H by ~1e-4 of its largest).
    assert np.abs(H0 - H_whole).max() <= est.cg_tol * np.abs(H_whole).max()
    assert np.abs(W0 - W_whole).max() <= est.cg_tol * np.abs(W_whole).max()
