"""The StRip flow end to end through Prefect on three small bundled GUM documents.

Train on two news documents, test on a third.  The numbers are checked against an independent
computation: the reader, the pair features and ``StRip.fit`` called directly with the same seed,
and ``coref_scores`` recomputed from the stored clusters and the gold entities.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scarce.algorithms.metrics.coref import coref_scores
from scarce.algorithms.strip.features import build_pairs, source_mask
from scarce.algorithms.strip.ripper import StRip, rules_to_text
from scarce.bench import strip as bench_strip
from scarce.flows.cli import main
from scarce.flows.strip import StripConfig
from scarce.tasks import strip as tasks_strip
from scarce.tasks.errors import InputError
from scarce.tasks.readers.conllu import read_conllu, read_conllu_files
from scarce.tasks.store import Store
from scarce.tasks.store.atomic import file_sha256
from tests.flows.helpers import made_run, made_runs, manifest, rerun, runs
from tests.scorer import needs_scorer

pytestmark = pytest.mark.usefixtures("prefect_server", "in_project")

GUM = Path(__file__).resolve().parents[2] / "data" / "coref" / "gum"
TRAIN = ["GUM_news_stampede", "GUM_news_worship"]
TEST = ["GUM_news_crane"]
WINDOW, K_OPT = 10, 2
VARIANTS = {"ripper": (False, True), "strip-labeled": (True, True), "strip-partial": (True, False)}

def write_splits(path: Path, train, test) -> None:
    rows = [f"{d}\ttrain" for d in train] + [f"{d}\ttest" for d in test]
    path.write_text("doc_id\tsplit\n" + "\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def project(make_project):
    root = make_project("strip-project", {"strip.yaml": (
        f"dataset: gum-small\ndata_dir: {GUM}\nsplits_file: splits.tsv\n"
        f"window: {WINDOW}\nk_optimize: {K_OPT}\ndev_splits: []\n")})
    write_splits(root / "splits.tsv", TRAIN, TEST)
    return root


@pytest.fixture(scope="module")
def first(project, prefect_server):
    """The id of the module's first run of its config, made by the first test that reads it
    (whichever runs first, or alone)."""
    return made_run(project, "run", "strip", "--config", str(project / "configs" / "strip.yaml"))


def run(project, capsys, *extra, config="configs/strip.yaml"):
    with made_runs(project) as new:
        code = main(["run", "strip", "--config", str(project / config), *extra])
        out = capsys.readouterr()
    return code, out.err, (manifest(project, new[0]) if new else None)


def refs_by_method(store, m, step):
    """{method: {part: ref}} of a training step, the method read from its timings part."""
    keys = {}
    for o in m["outputs"]:
        if o["step"] == step:
            key, _, part = o["ref"].rpartition("-")
            keys.setdefault(key, {})[part] = o["ref"]
    return {store.read(parts["timings"])["method"].iloc[0]: parts for parts in keys.values()}


def pairs_of(docs):
    tokens, mentions = read_conllu_files([GUM / f"{d}.conllu.gz" for d in docs])
    sources = source_mask(mentions)
    pairs, X, y = build_pairs(tokens, mentions, max_mention_distance=WINDOW, sources=sources)
    return mentions, sources, pairs, X, y


def same_rules(stored: pd.DataFrame, expected: pd.DataFrame) -> None:
    cols = ["rule_id", "antecedent_index", "feature", "op", "value", "pruned"]
    a = stored[cols].astype(str).reset_index(drop=True)
    b = expected[cols].astype(str).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)


def test_flow_equals_strip_fit_and_scores_equal_recomputed(project, first):
    m = manifest(project, first)
    store = Store(project / "data" / "cache")
    assert {o["step"] for o in m["outputs"]} == {
        "strip-documents", "strip-preprocess", "strip-grow", "strip-prune", "strip-optimize",
        "strip-evaluate", "strip-conllu"}
    assert {Path(i["path"]).name for i in m["inputs"]} == {
        "splits.tsv", *(f"{d}.conllu.gz" for d in TRAIN + TEST)}
    (docs,) = [o["ref"] for o in m["outputs"] if o["step"] == "strip-documents"]
    assert store.read(docs).to_dict("records") == [
        {"role": role, "split": role, "doc_id": d, "file": f"{d}.conllu.gz"}
        for role, names in (("train", TRAIN), ("test", TEST)) for d in sorted(names)]

    # Independent truth 1: StRip.fit on pairs built directly from the files, same seed.
    _, _, pairs, X, y = pairs_of(TRAIN)
    grown = refs_by_method(store, m, "strip-grow")
    pruned = refs_by_method(store, m, "strip-prune")
    optimized = refs_by_method(store, m, "strip-optimize")
    assert set(optimized) == set(VARIANTS)
    models = {}
    for method, (closure, labeled_only) in VARIANTS.items():
        keep = y >= 0 if labeled_only else np.ones(y.size, dtype=bool)
        est = StRip(closure=closure, k_optimize=K_OPT, random_state=0).fit(
            X[keep].reset_index(drop=True), y[keep], pairs["doc"].to_numpy()[keep],
            pairs["mention_i"].to_numpy()[keep], pairs["mention_j"].to_numpy()[keep])
        same_rules(store.read(grown[method]["rules"]), est.rules_grown_)
        same_rules(store.read(pruned[method]["rules"]), est.rules_pruned_)
        same_rules(store.read(optimized[method]["rules"]), est.rules_)
        assert len(est.rules_) > 0
        models[method] = est
    assert store.read(optimized["strip-partial"]["timings"])["n_pairs"].iloc[0] == y.size
    assert store.read(optimized["ripper"]["timings"])["n_pairs"].iloc[0] == (y >= 0).sum()

    # Independent truth 2: the stored chains equal StRip.cluster on the test pairs, and the
    # metrics equal coref_scores of those chains against the gold entities.
    mentions, sources, tpairs, tX, ty = pairs_of(TEST)
    (ev,) = [o["ref"] for o in m["outputs"] if o["ref"].startswith("strip-evaluate/")
             and o["ref"].endswith("-clusters")]
    clusters = store.read(ev)
    coverage = store.read(ev.replace("-clusters", "-coverage"))
    metrics = pd.read_parquet(project / "data" / "runs" / m["run_id"] / "metrics.parquet")
    assert list(metrics.columns) == ["dataset", "method", "metric", "value"]
    assert set(metrics["dataset"]) == {"gum-small-test"}
    for method, est in models.items():
        c = clusters[clusters["method"] == method].set_index(["doc", "mention"])["cluster"]
        response = c.reindex(pd.MultiIndex.from_frame(mentions[["doc", "mention"]])).to_numpy()
        direct = est.cluster(tX, tpairs["doc"], tpairs["mention_i"], tpairs["mention_j"])
        idx = pd.MultiIndex.from_frame(mentions[["doc", "mention"]]).get_indexer(
            pd.MultiIndex.from_frame(direct[["doc", "mention"]]))
        ours = pd.factorize(response[idx])[0]
        theirs = pd.factorize(direct["cluster"].to_numpy())[0]
        np.testing.assert_array_equal(ours, theirs)  # same partition of the paired mentions
        got = metrics[metrics["method"] == method].set_index("metric")["value"]
        want = coref_scores(mentions["entity"].to_numpy(), response, sources,
                            mentions["doc"].to_numpy())
        want_all = coref_scores(mentions["entity"].to_numpy(), response, None,
                                mentions["doc"].to_numpy())
        for name in ("muc", "b3", "ceaf_e", "pairwise"):
            for col in "prf":
                assert got[f"{name}_{col}"] == pytest.approx(want.loc[name, col], abs=1e-12)
                assert got[f"all_{name}_{col}"] == pytest.approx(want_all.loc[name, col],
                                                                 abs=1e-12)
        assert got["n_rules"] == est.rules_["rule_id"].nunique()
        assert 0 < got["b3_f"] <= 1
        # the rule coverage: one row per rule; after the last rule, the labelled test pairs
        # whose two mentions share a chain of est.cluster
        cov = coverage[coverage["method"] == method]
        assert cov["rule_id"].tolist() == sorted(est.rules_["rule_id"].unique())
        chain = direct.set_index(["doc", "mention"])["cluster"]
        ci = chain.reindex(pd.MultiIndex.from_arrays([tpairs["doc"], tpairs["mention_i"]]))
        cj = chain.reindex(pd.MultiIndex.from_arrays([tpairs["doc"], tpairs["mention_j"]]))
        same = ci.to_numpy() == cj.to_numpy()
        assert cov["covered_pos"].iloc[-1] == np.count_nonzero(same & (ty == 1))
        assert cov["covered_neg"].iloc[-1] == np.count_nonzero(same & (ty == 0))
        assert (cov["new_pos"].sum(), cov["new_neg"].sum()) == (
            cov["covered_pos"].iloc[-1], cov["covered_neg"].iloc[-1])


def test_named_outputs_open_and_equal_the_store_entries_and_chains_they_came_from(project, first):
    first = manifest(project, first)
    store = Store(project / "data" / "cache")
    out = project / "data" / "runs" / first["run_id"] / "outputs"
    named = {o["name"]: o for o in first["named_outputs"]}
    assert set(named) == {
        "rules.parquet", "rules.txt", "model/model.json",
        *(f"model/rules-{v}.parquet" for v in VARIANTS),
        *(f"predicted/{v}/{d}.conllu" for v in VARIANTS for d in TEST)}
    for name, o in named.items():
        assert file_sha256(out / name) == o["sha256"], name
    (ev,) = [o["ref"] for o in first["outputs"] if o["ref"].startswith("strip-evaluate/")
             and o["ref"].endswith("-coverage")]
    # rules.parquet: the coverage entry (a hard link), read by pandas
    assert named["rules.parquet"]["ref"] == ev
    assert os.path.samefile(out / "rules.parquet", store.path(ev))
    coverage = pd.read_parquet(out / "rules.parquet")
    pd.testing.assert_frame_equal(coverage, store.read(ev))
    # the model: each variant's optimized rule table and what preprocess needs
    optimized = refs_by_method(store, first, "strip-optimize")
    meta = json.loads((out / "model" / "model.json").read_text())
    assert (meta["format"], meta["version"]) == ("scarce-strip-model", tasks_strip.MODEL_VERSION)
    assert meta["preprocess"] == {"window": WINDOW, "max_sentence_distance": None,
                                  "source_kind": "etype", "etypes": ["person", "organization"],
                                  "fraction": None, "seed": None}
    _, _, _, X, _ = pairs_of(TRAIN)
    assert list(meta["features"]) == sorted(X.columns)  # model.json sorts its keys
    assert {k for k, kind in meta["features"].items() if kind == "numeric"} == {
        "sent_distance", "mention_distance", "paragraph_distance"}
    text = (out / "rules.txt").read_text()
    for v in meta["variants"]:
        table = pd.read_parquet(out / "model" / v["rules"])
        assert named[f"model/{v['rules']}"]["ref"] == optimized[v["name"]]["rules"]
        same_rules(table, store.read(optimized[v["name"]]["rules"]))
        assert v["n_rules"] == table["rule_id"].nunique()
        # rules.txt: the estimator's own text of every rule, with the rule's coverage
        for line in rules_to_text(table).splitlines():
            assert line in text
        for r in coverage[coverage["method"] == v["name"]].itertuples():
            assert (f"fires on {r.fires} test pairs ({r.fires_pos} labelled coreferent, "
                    f"{r.fires_neg} labelled not)") in text
    # predicted chains: the gold file's spans, partitioned as the evaluate step's clusters
    (cl,) = [o["ref"] for o in first["outputs"] if o["ref"].startswith("strip-evaluate/")
             and o["ref"].endswith("-clusters")]
    clusters = store.read(cl)
    tokens, gold = read_conllu(GUM / f"{TEST[0]}.conllu.gz")
    for v in VARIANTS:
        ptokens, pred = read_conllu(out / "predicted" / v / f"{TEST[0]}.conllu")
        assert ptokens["form"].tolist() == tokens["form"].tolist()
        cols = ["doc", "mention", "sent", "start", "end"]
        pd.testing.assert_frame_equal(pred[cols], gold[cols])
        mine = clusters[clusters["method"] == v].set_index(["doc", "mention"])["cluster"]
        stored = mine.reindex(pd.MultiIndex.from_frame(gold[["doc", "mention"]])).to_numpy()
        np.testing.assert_array_equal(pd.factorize(pred["entity"])[0],
                                      pd.factorize(stored)[0])
        # a chain's type is the gold type its mentions share, else empty
        for _, chain in pred.assign(gold=gold["etype"]).groupby("entity"):
            shared = chain["gold"].iloc[0] if chain["gold"].nunique() == 1 else ""
            assert set(chain["etype"]) == {shared}


@needs_scorer
def test_official_scorer_accepts_the_predicted_conllu_and_agrees_with_the_metrics(project, first):
    """Issue 15 section 3: the CRAC scorer, exact match, singletons kept, equals our MUC, B³ and
    CEAF-e to 1e-9 over all mentions (key: the gold file) and over the source mentions (key and
    response restricted to them, as our scores are); without singletons (the scorer's default)
    MUC is unchanged and B³ and CEAF-e differ, since ours count singletons."""
    first = manifest(project, first)
    run_dir = project / "data" / "runs" / first["run_id"]
    metrics = pd.read_parquet(run_dir / "metrics.parquet")
    mentions, sources, *_ = pairs_of(TEST)
    key = GUM / f"{TEST[0]}.conllu.gz"
    for v in VARIANTS:
        response = run_dir / "outputs" / "predicted" / v / f"{TEST[0]}.conllu"
        chains = read_conllu(response)[1]["entity"].to_numpy()
        theirs = bench_strip.referee([key], mentions.assign(source=sources), chains)
        ours = metrics[metrics["method"] == v].set_index("metric")["value"]
        for setting, prefix in (("sources", ""), ("all", "all_")):
            for name in ("muc", "b3", "ceaf_e"):
                for c in "prf":
                    assert theirs[setting].loc[name, c] == pytest.approx(
                        ours[f"{prefix}{name}_{c}"], abs=1e-9), (v, setting, name, c)
        for c in "prf":
            assert theirs["crac"].loc["muc", c] == pytest.approx(ours[f"all_muc_{c}"], abs=1e-9)
        assert theirs["crac"].loc["b3", "f"] < ours["all_b3_f"]
    # the scorer's own command line accepts the file (its printed F1 has two decimals)
    done = subprocess.run(
        [sys.executable, "corefud-scorer.py", "-x", "-s", "-m", "muc", "bcub", "ceafe", "--",
         str(key), str(response)], cwd=bench_strip.SCORER, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    printed = [float(x) for x in re.findall(r"F1: ([0-9.]+)", done.stdout)]
    assert printed == pytest.approx([100 * ours[f"all_{n}_f"] for n in ("muc", "b3", "ceaf_e")],
                                    abs=0.006)


def test_rules_scores_and_rule_coverage_are_prefect_artifacts(project, first):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    first = manifest(project, first)
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[first["prefect_flow_run_id"]])))
    by_key = {a.key: a for a in arts}
    key = "strip-gum-small-{}".format  # the flow, the data set, the artifact
    assert {key("rules"), key("scores"), key("rule-coverage"), key("rule-coverage-plot"),
            key("comparison"), key("summary")} <= set(by_key)
    table = by_key[key("rule-coverage")].data
    rows = json.loads(table) if isinstance(table, str) else table
    assert {r["method"] for r in rows} == set(VARIANTS)
    assert all(r["new_pos"] + r["new_neg"] <= r["covered_pos"] + r["covered_neg"] for r in rows)
    assert by_key[key("rule-coverage-plot")].type == "markdown"  # the PNG embedded
    png = (project / "data" / "runs" / first["run_id"] / "plots"
           / "strip-gum-small-rule-coverage-plot.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_task_run_is_named_by_its_piece_of_work(project, first):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    first = manifest(project, first)
    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[first["prefect_flow_run_id"]])))
    names = sorted(t.name for t in tasks)
    assert names == sorted([
        "record documents", "evaluate gum-small-test",
        *(f"preprocess {d}.conllu.gz" for d in TRAIN + TEST),
        *(f"write chains {d}.conllu.gz" for d in TEST),
        *(f"{phase} {v} L=1" for phase in ("grow", "prune", "optimize") for v in VARIANTS)])


def test_second_run_is_all_cache_hits(project, first, capsys):
    first = manifest(project, first)
    code, err, m = run(project, capsys)
    assert code == 0, err
    assert m["cache_hits"] == ["strip-conllu", "strip-documents", "strip-evaluate", "strip-grow",
                               "strip-optimize", "strip-preprocess", "strip-prune"]
    assert all(o["cached"] for o in m["outputs"])
    assert m["metrics_sha256"] == first["metrics_sha256"]


def test_changing_loss_ratio_reruns_training_but_not_preprocess(project, first, capsys):
    code, err, m = run(project, capsys, "--set", "loss_ratio=3")
    assert code == 0, err
    assert m["config"]["loss_ratio"] == 3
    assert m["cache_hits"] == ["strip-documents", "strip-preprocess"]
    ran = {o["step"] for o in m["outputs"] if not o["cached"]}
    assert ran == {"strip-grow", "strip-prune", "strip-optimize", "strip-evaluate",
                   "strip-conllu"}


def test_unbalanced_entity_bracket_exits_2_with_file_and_line(project, capsys, tmp_path):
    with gzip.open(GUM / f"{TEST[0]}.conllu.gz", "rt", encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    bad = next(k for k, line in enumerate(lines)
               if line[:1].isdigit() and line.split("\t")[9] == "_")
    cols = lines[bad].split("\t")
    cols[9] = "Entity=999)"
    lines[bad] = "\t".join(cols)
    data = tmp_path / "data"
    data.mkdir()
    (data / "GUM_news_broken.conllu").write_text("\n".join(lines), encoding="utf-8")
    for d in TRAIN:
        (data / f"{d}.conllu.gz").write_bytes((GUM / f"{d}.conllu.gz").read_bytes())
    write_splits(tmp_path / "splits.tsv", TRAIN, ["GUM_news_broken"])
    config = tmp_path / "strip.yaml"
    config.write_text(f"data_dir: {data}\nsplits_file: {tmp_path / 'splits.tsv'}\n"
                      f"window: {WINDOW}\ndev_splits: []\n")
    before = runs(project)
    code, err, m = run(project, capsys, config=config)
    assert code == 2
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert f"GUM_news_broken.conllu:{bad + 1}:" in line and "999" in line
    assert m is None and runs(project) == before


def test_select_documents_reads_the_splits_once_and_skips_absent_documents(tmp_path):
    (tmp_path / "a.conllu").write_text("")
    (tmp_path / "c.conllu.gz").write_bytes(b"")
    (tmp_path / "d.conllu").write_text("")
    (tmp_path / "splits.tsv").write_text(
        "doc_id\tsplit\nd\ttest\nc\tdev\nb\ttrain\na\ttrain\nz\ttest\n")
    got = tasks_strip.select_documents(tmp_path / "splits.tsv", tmp_path,
                                       {"train": ["train", "dev"], "test": ["test"]})
    assert got[["role", "split", "doc_id"]].to_numpy().tolist() == [
        ["train", "train", "a"], ["train", "dev", "c"], ["test", "test", "d"]]
    assert [p.name for p in got["file"]] == ["a.conllu", "c.conllu.gz", "d.conllu"]
    with pytest.raises(InputError, match=r"no document of split\(s\) \['nothing'\]") as err:
        tasks_strip.select_documents(tmp_path / "splits.tsv", tmp_path,
                                     {"train": ["train"], "test": ["nothing"]})
    assert err.value.key == "test_splits"
    (tmp_path / "twice.tsv").write_text("doc_id\tsplit\na\ttrain\na\ttest\n")
    with pytest.raises(InputError, match="listed twice") as err:
        tasks_strip.select_documents(tmp_path / "twice.tsv", tmp_path, {"train": ["train"]})
    assert err.value.line == 3


def test_training_without_a_coreferent_labelled_pair_names_the_config_key(tmp_path):
    _, _, pairs, X, y = pairs_of(TRAIN)
    table = pd.concat([pairs.reset_index(drop=True).assign(label=np.where(y == 1, 0, y)),
                       X.reset_index(drop=True)], axis=1)
    store = Store(tmp_path / "store")
    store.write("t/pairs", table)
    with pytest.raises(InputError, match="variant ripper: no coreferent labelled pair") as err:
        tasks_strip.grow(train=[str(store.path("t/pairs"))], variant="ripper", loss_ratio=1.0,
                         max_thresholds=16, dl_surplus=64.0, seed=0)
    assert err.value.key == "train_splits"


def test_the_training_steps_read_and_prepare_once_per_model_and_learn_the_same_rules(
        tmp_path, monkeypatch):
    """grow, prune and optimize of one model share the files read and the problem prepared
    (as ``StRip.fit`` shares its problem); the rules equal those of steps that each read and
    prepare afresh, and the next model prepares its own problem from the same table."""
    _, _, pairs, X, y = pairs_of(TRAIN)
    table = pd.concat([pairs.reset_index(drop=True).assign(label=y),
                       X.reset_index(drop=True)], axis=1)
    store = Store(tmp_path / "store")
    store.write("t/a", table.iloc[: len(table) // 2])
    store.write("t/b", table.iloc[len(table) // 2:].reset_index(drop=True))
    train = [str(store.path("t/a")), str(store.path("t/b"))]
    reads, prepares = [], []
    real_read, real_prepare = tasks_strip.training.read_parquet_entry, StRip.prepare
    monkeypatch.setattr(tasks_strip.training, "read_parquet_entry", lambda p: reads.append(p) or
                        real_read(p))
    monkeypatch.setattr(StRip, "prepare", lambda self, *a: prepares.append(1) or
                        real_prepare(self, *a))

    def model(variant, ratio, fresh):
        learn = dict(train=train, variant=variant, loss_ratio=ratio, max_thresholds=16)
        grown = tasks_strip.grow.fn(dl_surplus=64.0, seed=0, **learn)
        if fresh:
            tasks_strip.release_training_pairs()
        pruned = tasks_strip.prune.fn(rules=grown["rules"], **learn)
        if fresh:
            tasks_strip.release_training_pairs()
        return tasks_strip.optimize.fn(rules=pruned["rules"], rng=grown["rng"], dl_surplus=64.0,
                                       k_optimize=2, **learn)["rules"]

    tasks_strip.release_training_pairs()
    kept = model("strip-partial", 1.0, fresh=False)
    assert (len(reads), len(prepares)) == (2, 1)  # two files, one problem for three steps
    model("ripper", 2.0, fresh=False)
    assert (len(reads), len(prepares)) == (2, 2)  # the same files; another problem
    tasks_strip.release_training_pairs()
    pd.testing.assert_frame_equal(model("strip-partial", 1.0, fresh=True), kept)
    assert len(prepares) == 5
    tasks_strip.release_training_pairs()


@pytest.mark.parametrize("key", ["loss_ratio", "dl_surplus"])
def test_learner_options_must_be_finite(key):
    with pytest.raises(ValueError, match="finite number"):
        StripConfig(**{key: float("inf")})


@pytest.mark.parametrize("runner", ["local", "dask"])
def test_rerun_reproduces_every_output_byte_for_byte(first, capsys, runner):
    """``scarce rerun`` of the first run, recomputing every step (no cache), on each runner."""
    code, out = rerun(first, capsys, runner)
    assert code == 0 and out.strip().endswith("identical"), out
