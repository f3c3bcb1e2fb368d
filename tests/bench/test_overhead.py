"""``scarce bench overhead``: the task runs it counts as each flow's training, when the bare
side can do what the run does, and each bare side in its own process, computing what the
flow's steps compute."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np
import pytest
from prefect.utilities.annotations import unmapped

from scarce.algorithms.strip.ripper import rules_to_text
from scarce.bench import overhead
from scarce.flows import relations as relations_flow
from scarce.flows import strip as strip_flow
from scarce.flows.config import resolve_path
from scarce.flows.leml import LemlConfig
from scarce.flows.relations import RelationsConfig
from scarce.flows.strip import StripConfig
from scarce.tasks import relations as rel
from scarce.tasks import strip
from scarce.tasks.store import Store

ROOT = Path(__file__).resolve().parents[2]
BIBTEX = ROOT / "data" / "xmc" / "bibtex"
SEMEVAL = ROOT / "data" / "relations" / "semeval2010_task8"
GUM = ROOT / "data" / "coref" / "gum"


def test_training_seconds_is_the_union_of_the_start_and_the_half_steps():
    intervals = [(0.0, 2.0), (1.0, 3.0), (3.0, 4.5), (10.0, 11.0), (5.0, 6.0), (6.0, 9.0)]
    names = ["initial factors", "alternate-W iter=1", "alternate-H iter=1", "evaluate",
             "load train.txt", "baseline br-ridge"]
    # [0, 2] and [1, 3] overlap (3 s), then [3, 4.5]: 4.5 s; the rest is not training
    assert overhead.training_seconds(intervals, names, overhead.BARE["leml"].training) == 4.5


def task_name(st, **parameters) -> str:
    """The task run name the flow gives a call of step ``st`` (its own template)."""
    template = st.run_name
    return template(parameters) if callable(template) else template.format(**parameters)


def _relations_names() -> tuple[list[str], list[str]]:
    """Task run names of a relations run: those of RelationDiscovery.fit's work, the rest."""
    ranked = dict(X=None, ranking=None, params={}, all_features=False, n_features=46)
    every = {**ranked, "all_features": True}
    work = [
        task_name(rel.rank_features, X=None, vocabulary=None, params={"ranking": "entropy"}),
        task_name(rel.rank_features, X=None, vocabulary=None, params={"ranking": "chi2"}),
        "stability-search",
        task_name(rel.score_candidate, k=12, n_features=1880),
        task_name(rel.choose_subsets, scores=[], params={}),
        task_name(rel.cluster_reference, k=6, index=2, **ranked),
        task_name(rel.score_subsample, k=20, sample_index=19, **ranked),
        task_name(rel.choose_k, samples=[], all_features=False, params={}),
        task_name(rel.label_clusters, X=None),
        task_name(rel.build_model, k=6, n_features=46),
    ]
    rest = [
        task_name(rel.parse, path=str(SEMEVAL / "TRAIN_FILE.TXT")),
        task_name(rel.combine, max_pairs=400),
        task_name(rel.extract_features, window="0-10-0", weighting="tfidf"),
        task_name(rel.hasegawa, k=9),
        "rl-baseline-search",
        task_name(rel.cluster_reference, k=9, index=0, **every),  # also k-means at the true k
        task_name(rel.score_subsample, k=2, sample_index=0, **every),
        task_name(rel.choose_k, samples=[], all_features=True, params={}),
        task_name(rel.evaluate, dataset="semeval-9"),
        task_name(rel.assign_pairs),
        task_name(rel.cluster_examples),
    ]
    return work, rest


def _leml_names() -> tuple[list[str], list[str]]:
    """Task run names of a LEML run: those of LEML.fit's work (early stopping's hold-out, its
    alternation and the refit's), the rest."""
    from scarce.tasks import leml

    work = [task_name(leml.early_split), task_name(leml.early_split_mask),
            task_name(leml.initialise)]
    work += [task_name(st, iteration=i) for i in (1, 12) for st in (leml.alternate_W,
                                                                    leml.alternate_H)]
    rest = [task_name(leml.load, path=BIBTEX / "bibtex_xmlrepo_train.txt.gz"),
            task_name(leml.split, validation_fraction=0.2),
            task_name(leml.observe, observed_fraction=0.2),
            task_name(leml.propensity, a=0.55, b=1.5), task_name(leml.evaluate),
            task_name(leml.baseline, method="br-ridge"), task_name(leml.collect),
            task_name(leml.predict, top_k=5), task_name(leml.tune)]
    return work, rest


def _strip_names() -> tuple[list[str], list[str]]:
    """Task run names of a StRip run: those of StRipClassifier.fit's work, the rest."""
    work = [task_name(st, variant=v, loss_ratio=r)
            for st in (strip.grow, strip.prune, strip.optimize)
            for v in ("ripper", "strip-labeled", "strip-partial") for r in (0.5, 1.0, 2.0)]
    doc = GUM / "GUM_news_crane.conllu.gz"
    rest = [task_name(strip.preprocess, path=doc), task_name(strip.record_documents),
            "select-loss-ratio", task_name(strip.evaluate, dataset="gum-dev"),
            task_name(strip.select_loss_ratio, select_by="b3"),
            task_name(strip.evaluate, dataset="gum-test"),
            task_name(strip.write_predicted, path=doc)]
    return work, rest


@pytest.mark.parametrize(("flow", "names", "one_of_work", "one_of_rest"), [
    ("leml", _leml_names, "hold out for early stopping", "split validation=0.2"),
    ("relations", _relations_names, "reference k=6 r=2 F=46", "reference k=9 r=0 all words"),
    ("strip", _strip_names, "grow ripper L=0.5", "select loss ratio (b3)"),
])
def test_the_training_task_runs_are_those_of_the_estimators_work(flow, names, one_of_work,
                                                                 one_of_rest):
    work, rest = names()
    assert one_of_work in work and one_of_rest in rest  # the names as a run shows them
    pattern = overhead.BARE[flow].training
    assert [n for n in work + rest if pattern.match(n)] == work


def test_every_task_run_is_read_past_the_apis_page_limit(prefect_server):
    from prefect import flow, task

    @task(task_run_name="unit {i}")
    def unit(i: int) -> int:
        return i

    @flow(name="many-task-runs")
    def many() -> list[int]:
        return [f.result() for f in unit.map(range(205))]

    state = many(return_state=True)
    runs = overhead.task_runs(state.state_details.flow_run_id, page=60)
    assert sorted(r.name for r in runs) == sorted(f"unit {i}" for i in range(205))


def _config(tmp_path, **changes) -> LemlConfig:
    train = tmp_path / "train.txt"
    with gzip.open(BIBTEX / "bibtex_xmlrepo_train.txt.gz", "rt") as fh:
        lines = fh.read().splitlines()
    _, d, labels = lines[0].split()
    train.write_text("\n".join([f"300 {d} {labels}", *lines[1:301]]) + "\n")
    data = {"dataset": {"name": "tiny", "train": str(train), "test": str(train)},
            "model": {"rank": 8, "outer_iterations": 2}, **changes}
    return LemlConfig.model_validate(data)


@pytest.mark.parametrize(("changes", "why"), [
    ({}, None),
    ({"observed_fraction": 0.5}, "labels missing"),
    ({"compute": {"backend": "local-blocks"}}, "the local-blocks backend"),
])
def test_the_bare_fit_only_where_leml_fit_trains_what_the_run_trains(tmp_path, changes, why):
    got = overhead.BARE["leml"].why_not(_config(tmp_path, **changes))
    assert got == why if why is None else why in got


#: A small relations run: 300 pairs, k in 3..5 (as the relations flow's end-to-end test).
RELATIONS = {"seed": 1, "dataset": "semeval-sample", "data": [str(SEMEVAL / "TRAIN_FILE.TXT")],
             "max_pairs": 300, "min_df": 1, "k_low": 3, "k_high": 5, "n_prefixes": 4,
             "min_prefix": 20, "theta": 0.5, "n_init": 2, "n_subsamples": 2}


def _strip_config(tmp_path, **changes) -> StripConfig:
    """Two training documents, one dev and one test (the splits file in ``tmp_path``)."""
    splits = {"GUM_news_worship": "train", "GUM_news_stampede": "train",
              "GUM_news_crane": "dev", "GUM_news_sensitive": "test"}
    (tmp_path / "splits.tsv").write_text(
        "doc_id\tsplit\n" + "".join(f"{d}\t{s}\n" for d, s in splits.items()))
    return StripConfig.model_validate({
        "dataset": "gum-small", "data_dir": str(GUM), "splits_file": str(tmp_path / "splits.tsv"),
        "window": 5, "loss_ratios": [1.0, 2.0], "variants": ["ripper", "strip-partial"],
        **changes})


@pytest.mark.parametrize("config", [
    lambda tmp: RelationsConfig.model_validate({**RELATIONS, "ranking": "chi2"}),
    lambda tmp: RelationsConfig.model_validate(
        {**RELATIONS, "data": RELATIONS["data"] * 2, "baselines": False}),
    lambda tmp: _strip_config(tmp, dev_splits=[]),
    lambda tmp: _strip_config(tmp, sources={"kind": "fraction", "fraction": 0.3}),
])
def test_the_relations_and_strip_work_is_done_bare_whatever_the_config(tmp_path, config):
    config = config(tmp_path)
    flow = "relations" if isinstance(config, RelationsConfig) else "strip"
    assert overhead.BARE[flow].why_not(config) is None


class InProcess:
    """A flow's run context in this process: a step is its function, a ref the value itself."""

    def __init__(self) -> None:
        self.artifacts = self.record = self

    def progress(self, *args):
        return self

    def advance(self, n: int = 1) -> None:
        pass

    def decide(self, *args) -> None:
        pass

    def read(self, value):
        return value

    def run(self, st, **kwargs):
        return st.fn(**kwargs)

    def map(self, st, progress=None, **kwargs):
        (n,) = {len(v) for v in kwargs.values() if isinstance(v, list)}
        return [st.fn(**{k: v.value if isinstance(v, unmapped) else v[i] if isinstance(v, list)
                         else v for k, v in kwargs.items()}) for i in range(n)]


@pytest.mark.slow  # starts a Python process
def test_the_bare_fit_runs_in_its_own_process(tmp_path):
    seconds, result = overhead.bare_seconds("leml", _config(tmp_path))
    assert seconds > 0 and result == {}


@pytest.mark.slow  # starts a Python process
def test_the_bare_relations_fit_chooses_the_k_and_words_of_the_flows_search():
    config = RelationsConfig.model_validate(RELATIONS)
    seconds, result = overhead.bare_seconds("relations", config)
    assert seconds > 0
    # the flow's own rank and stability-search steps on the same pairs, in this process
    (path,) = config.data
    mentions = rel.combine.fn(parts=[rel.parse.fn(
        path=resolve_path(path), fmt="auto", relation_types=None, include_other=False,
        directed=False, source=resolve_path(path).name)], max_pairs=300, seed=1)["mentions"]
    feats = rel.extract_features.fn(mentions=mentions, window=config.window,
                                    weighting=config.weighting, position_tags=True,
                                    lowercase=True, min_df=1)
    model = config.estimator()
    ranking = rel.rank_features.fn(X=feats["X"], vocabulary=feats["vocabulary"],
                                   params=model.step_params("rank"))
    search = relations_flow.stability_search(InProcess(), model, feats["X"], ranking,
                                             len(feats["vocabulary"]))
    labels = np.asarray(search.references[search.k][0], np.int64).tobytes()
    assert result == {"k": search.k, "n_features": search.n_features,
                      "labels_sha256": hashlib.sha256(labels).hexdigest()[:16]}
    assert 3 <= search.k <= 5


@pytest.mark.slow  # starts a Python process
def test_the_bare_strip_fits_learn_the_rules_of_the_flows_training_steps(tmp_path):
    config = _strip_config(tmp_path)
    seconds, result = overhead.bare_seconds("strip", config)
    assert seconds > 0
    store = Store(tmp_path / "store")
    train = []  # the training steps read the pairs from their store files
    for doc in ("GUM_news_stampede", "GUM_news_worship"):  # the splits' order
        store.write(f"pairs/{doc}", strip.preprocess.fn(
            path=GUM / f"{doc}.conllu.gz", **strip_flow.preprocess_options(config))["pairs"])
        train.append(str(store.path(f"pairs/{doc}")))
    trained = strip_flow.train_variants(InProcess(), config, train)
    assert sorted(result) == ["ripper@1", "ripper@2", "strip-partial@1", "strip-partial@2"]
    for (variant, ratio), parts in trained.items():
        text = rules_to_text(parts["rules"])
        assert result[f"{variant}@{ratio:g}"]["sha256"] == hashlib.sha256(
            text.encode()).hexdigest()[:16]
    assert any(r["rules"] > 0 for r in result.values())
