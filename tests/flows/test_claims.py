"""``scarce claims``: Chen et al.'s claims (a) to (d) on a relations experiment, checked against
verdicts worked out by hand on a small table."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from scarce.flows.claims import (
    ONE_RUN,
    claims,
    claims_markdown,
    read_experiment,
    read_experiments,
    verdict,
)
from scarce.flows.cli import main
from scarce.tasks.errors import InputError


def _table() -> pd.DataFrame:
    """Two corpora x five seeds, in the experiment's long form."""
    acc = {  # corpus -> method -> accuracy per seed
        "easy": {"entropy": [0.50, 0.52, 0.48, 0.50, 0.50],   # mean 0.50, sd 0.0141
                 "hasegawa-true-k": [0.20] * 5,
                 "rl-baseline": [0.49, 0.51, 0.47, 0.53, 0.50],  # mean 0.50: level
                 "kmeans-true-k": [0.55] * 5},
        "hard": {"entropy": [0.30, 0.31, 0.29, 0.30, 0.30],   # mean 0.30, sd 0.0071
                 "hasegawa-true-k": [0.31, 0.29, 0.30, 0.31, 0.29],  # mean 0.30: level
                 "rl-baseline": [0.40, 0.41, 0.39, 0.40, 0.40],  # ahead by 0.10: (b) fails
                 "kmeans-true-k": [0.35] * 5},
    }
    k_chosen = {"easy": [9, 9, 9, 9, 13], "hard": [2, 3, 4, 5, 6]}
    k_true = {"easy": 9, "hard": 16}
    rows = []
    for corpus, methods in acc.items():
        for seed in range(5):
            for method, values in methods.items():
                rows.append((corpus, seed, method, "accuracy", values[seed]))
                rows.append((corpus, seed, method, "ari", values[seed] / 2))
            rows.append((corpus, seed, "entropy", "k_chosen", k_chosen[corpus][seed]))
            rows.append((corpus, seed, "entropy", "k_true", k_true[corpus]))
    frame = pd.DataFrame(rows, columns=["corpus", "seed", "method", "metric", "value"])
    frame.insert(2, "error", None)
    return frame


def _words() -> pd.DataFrame:
    return pd.DataFrame({"corpus": ["easy"] * 5 + ["hard"] * 5, "seed": list(range(5)) * 2,
                         "n_features": [40, 100, 100, 60, 100, 300] + [300] * 4,
                         "vocabulary_size": [100] * 5 + [300] * 5})


@pytest.mark.parametrize("diff, spread, n, expected", [
    (0.04, 0.5, 3, "level"),     # ahead, within the seeds' spread
    (1.0, 0.5, 3, "holds"),      # ahead by more than the spread
    (-1.0, 0.5, 3, "fails"),     # behind by more
    (0.5, 0.5, 3, "level"),      # by exactly the spread: not beyond it
    (-0.5, 0.5, 3, "level"),
    (10.0, 0.0, 1, ONE_RUN),     # one repetition: no spread to be beyond
    (-10.0, 0.0, 1, ONE_RUN),
    (0.0, 0.0, 0, ONE_RUN),
    (0.04, 0.0, None, "holds"),  # repetitions not counted: Chen et al.'s rule as it was
])
def test_the_verdict_rule_holds_only_beyond_the_spread_of_two_or_more_seeds(
        diff, spread, n, expected):
    assert verdict(diff, spread, n) == expected


def test_verdicts_equal_the_hand_worked_ones():
    scores, verdicts = claims(_table(), _words(), "corpus")
    got = {(r.corpus, r.claim): r.verdict for r in verdicts.itertuples()}
    assert got == {
        ("easy", "a"): "holds",   # +0.30, spread 0.014
        ("easy", "b"): "level",   # 0.50 vs 0.50
        ("easy", "c"): "holds",   # 13 is 4 from 9: 4 of 5 within 3
        ("easy", "d"): "holds",   # k = 9 on 4 of 5
        ("easy", "every word kept"): "3 of 5",
        ("hard", "a"): "level",   # +0.000 within the spread
        ("hard", "b"): "fails",   # -0.10, spread 0.0071
        ("hard", "c"): "fails",   # 13 <= |k - 16| for 2..6
        ("hard", "d"): "fails",   # five different k
        ("hard", "every word kept"): "5 of 5",
    }
    easy = scores[(scores["corpus"] == "easy") & (scores["method"] == "entropy")]
    acc = easy[easy["metric"] == "accuracy"].iloc[0]
    assert acc["mean"] == pytest.approx(0.50)
    assert acc["std"] == pytest.approx(pd.Series([0.50, 0.52, 0.48, 0.50, 0.50]).std())
    assert acc["n"] == 5
    figure = verdicts[(verdicts["corpus"] == "easy") & (verdicts["claim"] == "c")]["figure"]
    assert figure.iloc[0] == "within 3 of 9 on 4 of 5 (chosen k 9, 9, 9, 9, 13)"


def test_a_failed_point_is_left_out_of_the_means():
    table = _table()
    bad = (table["corpus"] == "easy") & (table["seed"] == 4)
    table.loc[bad, "error"] = "k_high: too large"
    table.loc[bad & (table["metric"] == "accuracy"), "value"] = float("nan")
    scores, verdicts = claims(table, _words()[lambda w: ~((w.corpus == "easy") & (w.seed == 4))],
                              "corpus")
    easy = scores[(scores["corpus"] == "easy") & (scores["metric"] == "accuracy")]
    assert set(easy["n"]) == {4}
    assert verdicts.set_index(["corpus", "claim"]).loc[("easy", "d"), "figure"] == "k = 9 on 4 of 4"


def _experiment_folder(runs, flow: str = "relations", name: str = "experiment-toy-1",
                       ranking: str | None = None, prefix_step: int | None = None):
    """An experiment folder with its children's models; ``ranking``: the table as a
    ``ranking`` axis of that one value (the method's rows named by it); ``prefix_step``: a
    numeric ``prefix_step`` axis of that one value (None in the base config)."""
    table, words = _table(), _words()
    rows = ["corpus"]
    if ranking is not None:
        table["method"] = table["method"].replace("entropy", ranking)
        table.insert(1, "ranking", ranking)
        words["ranking"] = ranking
        rows = ["corpus", "ranking"]
    if prefix_step is not None:
        table.insert(1, "prefix_step", prefix_step)
        words["prefix_step"] = prefix_step
        rows = [*rows, "prefix_step"]
    run = runs / name
    (run / "outputs").mkdir(parents=True)
    config = {"flow": flow, "table": {"rows": rows, "columns": ["method"]},
              "base_config": {"ranking": "entropy", "prefix_step": None}}
    (run / "manifest.json").write_text(json.dumps({"flow": "experiment", "outputs": [],
                                                   "config": config}))
    table.to_parquet(run / "outputs" / "table.parquet")
    children = []
    for i, w in enumerate(words.itertuples()):
        child = f"relations-{name}-{i}"
        (runs / child / "outputs" / "model").mkdir(parents=True)
        (runs / child / "outputs" / "model" / "model.json").write_text(json.dumps(
            {"n_features": w.n_features, "vocabulary_size": w.vocabulary_size}))
        point = {"corpus": w.corpus, "seed": w.seed}
        if ranking is not None:
            point["ranking"] = ranking
        if prefix_step is not None:
            point["prefix_step"] = prefix_step
        children.append({"point": point, "run_id": child, "error": None})
    (run / "outputs" / "children.json").write_text(json.dumps(children))
    return run


def test_words_kept_are_read_from_each_childs_model(tmp_path):
    run = _experiment_folder(tmp_path)
    table, words, config = read_experiment(run, tmp_path)
    assert words.sort_values(["corpus", "seed"]).reset_index(drop=True).equals(
        _words().sort_values(["corpus", "seed"]).reset_index(drop=True))
    text = claims_markdown(*claims(table, words, "corpus"), "corpus")
    assert "| easy | entropy | 0.500 ± 0.014 | 0.250 ± 0.007 |" in text
    assert "the subset search kept every word on: **3 of 5**, words kept 40/100, 100/100" in text


def test_the_command_prints_the_claims_and_refuses_other_flows(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SCARCE_RUNS", str(tmp_path))
    _experiment_folder(tmp_path)
    assert main(["claims", "experiment-toy-1"]) == 0
    out = capsys.readouterr().out
    assert "(b) entropy selection beats RLBaseline: **fails**, 0.300 vs 0.400" in out
    other = tmp_path / "other"
    _experiment_folder(other, flow="digits")
    monkeypatch.setenv("SCARCE_RUNS", str(other))
    assert main(["claims", "experiment-toy-1"]) == 2
    assert "an experiment over relations, leml or strip, or on a LEML run; this run is an " \
           "experiment over 'digits'" in capsys.readouterr().err


def test_two_experiments_join_on_their_row_axes_with_the_base_configs_ranking(
        tmp_path, monkeypatch, capsys):
    """relations-corpora (rows: corpus; entropy from its base config) beside
    relations-rankings (rows: corpus, ranking): one table of corpus x ranking groups, each
    judged with its own method's rows."""
    _experiment_folder(tmp_path, name="experiment-entropy-1")
    _experiment_folder(tmp_path, name="experiment-rankings-1", ranking="frequency")
    table, words, group = read_experiments(
        [tmp_path / "experiment-entropy-1", tmp_path / "experiment-rankings-1"], tmp_path)
    assert group == "corpus, ranking"
    assert sorted(table[group].unique()) == ["easy, entropy", "easy, frequency",
                                             "hard, entropy", "hard, frequency"]
    assert len(words) == 20 and set(words[group]) == set(table[group])
    _, verdicts = claims(table, words, group)
    got = verdicts.set_index([group, "claim"])
    for corpus in ("easy", "hard"):  # the same figures under either name
        assert (got.loc[(f"{corpus}, frequency",), "verdict"].tolist()
                == got.loc[(f"{corpus}, entropy",), "verdict"].tolist())
    assert got.loc[("hard, frequency", "b"), "method"] == "frequency"
    assert len(table) == 2 * len(_table())
    monkeypatch.setenv("SCARCE_RUNS", str(tmp_path))
    assert main(["claims", "experiment-entropy-1", "experiment-rankings-1"]) == 0
    out = capsys.readouterr().out
    assert "(b) frequency selection beats RLBaseline: **fails**, 0.300 vs 0.400" in out
    assert "(b) entropy selection beats RLBaseline: **fails**, 0.300 vs 0.400" in out
    assert "| easy, frequency | frequency | 0.500 ± 0.014 |" in out


def test_an_axis_whose_base_config_value_is_none_joins_as_none(tmp_path):
    """relations-theta (rows: corpus; the base config's ``prefix_step: null``) beside
    relations-prefixes (rows: corpus, prefix_step 200): the geometric grid's groups read
    "none", and none of the groups is dropped as missing."""
    _experiment_folder(tmp_path, name="experiment-theta-1")
    _experiment_folder(tmp_path, name="experiment-prefixes-1", prefix_step=200)
    table, words, group = read_experiments(
        [tmp_path / "experiment-theta-1", tmp_path / "experiment-prefixes-1"], tmp_path)
    assert group == "corpus, prefix_step"
    assert sorted(table[group].unique()) == ["easy, 200", "easy, none",
                                             "hard, 200", "hard, none"]
    scores, verdicts = claims(table, words, group)
    one = claims(_table(), _words(), "corpus")
    assert len(scores) == 2 * len(one[0]) and len(verdicts) == 2 * len(one[1])
    text = claims_markdown(scores, verdicts, group)
    assert "| hard, none | entropy | 0.300 ± 0.007 |" in text


def test_an_experiment_that_cannot_join_the_others_is_named(tmp_path):
    _experiment_folder(tmp_path, name="experiment-a-1", ranking="chi2")
    run = _experiment_folder(tmp_path, name="experiment-b-1")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["base_config"] = {}
    (run / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="no axis 'ranking'") as err:
        read_experiments([tmp_path / "experiment-a-1", run], tmp_path)
    assert "experiment-b-1" in str(err.value)


def test_how_the_subset_search_chose_f_k_is_read_from_the_childrens_store_entries(
        tmp_path, monkeypatch):
    """Two children with hand-made subset searches over prefixes 10 < 40 < 100 (every word),
    coverage theta leaving 10 infeasible: F_k counted by hand.  The entries are read from
    today's store ($SCARCE_STORE), not from the path the manifests recorded."""
    from scarce.tasks.store import Store

    monkeypatch.setenv("SCARCE_STORE", str(tmp_path / "cache"))
    run = _experiment_folder(tmp_path)
    store = Store(tmp_path / "cache")

    def search(criteria):  # k -> criterion on 40 and 100 words
        return pd.DataFrame([
            {"k": k, "n_features": n, "coverage": 0.5 if n == 10 else 0.95,
             "feasible": n != 10, "criterion": float("nan") if n == 10 else c}
            for k, (c40, c100) in criteria.items() for n, c in ((10, 0), (40, c40), (100, c100))])

    cases = {  # seed 0: k=2 every word (ratio 4), k=3 the 40 (ratio 0.6);
        0: search({2: (1.0, 4.0), 3: (5.0, 3.0)}),  # seed 1: both every word (1.5 and 6)
        1: search({2: (2.0, 3.0), 3: (1.0, 6.0)}),
    }
    for seed, frame in cases.items():
        subsets = frame[frame["feasible"]].sort_values("criterion").groupby("k").tail(1)
        refs = {part: store.write(f"relations-subsets/{seed:032d}-{part}", value)
                for part, value in (("search", frame), ("subsets", subsets.sort_values("k")))}
        child = tmp_path / f"relations-experiment-toy-1-{seed}"  # corpus easy, seeds 0 and 1
        (child / "manifest.json").write_text(json.dumps({
            "flow": "relations", "store": str(tmp_path / "elsewhere"),  # recorded: never read
            "outputs": [{"step": "relations-subsets", "ref": r} for r in refs.values()]}))
    _, words, _ = read_experiment(run, tmp_path)
    easy = words[(words["corpus"] == "easy") & (words["seed"].isin([0, 1]))].sort_values("seed")
    assert easy["k_count"].tolist() == [2, 2]
    assert easy["k_every_word"].tolist() == [1, 2]
    assert easy["k_smallest"].tolist() == [1, 0]
    assert easy["k_no_feasible"].tolist() == [0, 0]
    assert easy["growth"].tolist() == [pytest.approx((4.0 + 0.6) / 2), pytest.approx(3.75)]
    assert words[words["corpus"] == "hard"]["k_count"].isna().all()  # no manifests: no figures
    table = _table()
    _, verdicts = claims(table[table["corpus"] == "easy"], easy, "corpus")
    line = verdicts.set_index("claim").loc["F_k"]
    assert line["verdict"] == "every word for 3 of 4"
    assert line["figure"].startswith("no prefix reached coverage theta for 0 (F_k is then the "
                                     "prefix of largest coverage); the smallest feasible prefix "
                                     "for 1; ")
    assert line["figure"].endswith("median over k: 2.3, 3.8")


def test_a_seed_without_a_feasible_prefix_reads_none_feasible():
    from scarce.flows.claims import _growth

    assert [_growth(x) for x in (2.25, float("nan"))] == ["2.2", "none feasible"]
