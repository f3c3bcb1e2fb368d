"""``scarce bench strip`` in quick mode on four small bundled GUM documents."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scarce.algorithms.strip.features import build_pairs, source_mask
from scarce.bench import strip as bench
from scarce.tasks.readers.conllu import read_conllu, write_chains
from tests.scorer import needs_scorer

GUM = Path(__file__).resolve().parents[2] / "data" / "coref" / "gum"
SPLITS = {"GUM_news_worship": "train", "GUM_news_stampede": "train", "GUM_news_crane": "dev",
          "GUM_news_sensitive": "test"}
HAS_PEER = importlib.util.find_spec("wittgenstein") is not None


def _data_root(root: Path) -> Path:
    """A --data folder holding the four documents of SPLITS and their splits.tsv."""
    gum = root / "coref" / "gum"
    gum.mkdir(parents=True)
    for doc in SPLITS:
        (gum / f"{doc}.conllu.gz").symlink_to(GUM / f"{doc}.conllu.gz")
    (gum / "splits.tsv").write_text(
        "doc_id\tsplit\n" + "".join(f"{d}\t{s}\n" for d, s in SPLITS.items()))
    return root


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    root = _data_root(tmp_path_factory.mktemp("bench-strip"))
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return bench.run(parser.parse_args(["--data", str(root), "--quick"]))


def _train_labels(window: int) -> np.ndarray:
    ys = []
    for doc, split in SPLITS.items():
        if split == "train":
            tokens, mentions = read_conllu(GUM / f"{doc}.conllu.gz")
            ys.append(build_pairs(tokens, mentions, max_mention_distance=window,
                                  sources=source_mask(mentions))[2])
    return np.concatenate(ys)


def test_quick_table_has_the_three_methods_and_sane_scores(table):
    methods = list(table["method"])
    assert methods[:3] == ["ripper", "strip-labeled", "strip-partial"]
    for col in ("muc_f", "b3_f", "ceaf_e_f", "pairwise_f", "pairwise_p", "pairwise_r",
                "all_muc_f", "all_b3_f", "train_seconds", "loss_ratio", "n_rules", "time_ratio"):
        assert col in table.columns
    scores = table[["muc_f", "b3_f", "ceaf_e_f", "pairwise_f", "all_b3_f"]].to_numpy()
    assert np.all((scores >= 0) & (scores <= 1))
    # B3 of any clustering of these mentions is far above 0 (singletons alone score > 0.5 recall)
    assert (table["b3_f"] > 0.3).all()
    p, r, f = table["pairwise_p"], table["pairwise_r"], table["pairwise_f"]
    np.testing.assert_allclose(f, np.where(p + r > 0, 2 * p * r / (p + r).where(p + r > 0, 1), 0))
    head = table.iloc[:3]
    assert set(head["loss_ratio"]) <= {0.5, 1.0}
    assert (head["train_seconds"] > 0).all()


def test_quick_pair_counts_equal_an_independent_count(table):
    y = _train_labels(window=10)
    rows = table.set_index("method")
    assert rows.loc["ripper", "train_pairs"] == np.count_nonzero(y >= 0)
    assert rows.loc["strip-labeled", "train_pairs"] == np.count_nonzero(y >= 0)
    assert rows.loc["strip-partial", "train_pairs"] == y.size
    assert rows.loc["strip-partial", "train_labeled"] == np.count_nonzero(y >= 0)


@pytest.mark.skipif(not HAS_PEER, reason="wittgenstein not installed")
def test_quick_time_ratio_is_seconds_over_the_peer_on_the_same_pairs(table):
    peers = table[table["method"].str.startswith("wittgenstein")]
    assert len(peers) == 2
    secs = {m.split(" ")[0]: s for m, s in zip(peers["method"], peers["train_seconds"],
                                               strict=True)}
    n = {m.split(" ")[0]: k for m, k in zip(peers["method"], peers["train_pairs"], strict=True)}
    for row in table.iloc[:3].itertuples():
        assert row.time_ratio == pytest.approx(row.train_seconds / secs[row.peer])
        assert row.train_pairs == n[row.peer]
    assert pd.isna(peers["time_ratio"]).all()


def test_full_supervision_labels_every_pair_and_scores_every_mention(tmp_path, monkeypatch):
    # the official scorer's columns are checked on the quick table (below); here it is left
    # out, as in a clone without it, and its columns are NaN
    monkeypatch.setattr(bench, "SCORER", tmp_path / "no-scorer")
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    full = bench.run(parser.parse_args(["--data", str(_data_root(tmp_path)), "--quick",
                                        "--no-peer", "--supervision", "all", "--select", "conll"]))
    # strip-partial is strip-labeled once nothing is unknown
    assert list(full["method"]) == ["ripper", "strip-labeled"]
    # every pair within the window is labelled: an independent count with all mentions sources
    n = 0
    for doc, split in SPLITS.items():
        if split == "train":
            tokens, mentions = read_conllu(GUM / f"{doc}.conllu.gz")
            y = build_pairs(tokens, mentions, max_mention_distance=10,
                            sources=np.ones(len(mentions), dtype=bool))[2]
            assert (y >= 0).all()
            n += y.size
    assert (full["train_pairs"] == n).all() and (full["train_labeled"] == n).all()
    assert full["scorer_max_diff"].isna().all()
    # the sources are every mention, so the source scores are the all-mention scores
    np.testing.assert_allclose(full["muc_f"], full["all_muc_f"])
    np.testing.assert_allclose(full["b3_f"], full["all_b3_f"])
    np.testing.assert_allclose(full["ceaf_e_f"], full["all_ceaf_e_f"])
    np.testing.assert_allclose(full["conll_f"],
                               full[["muc_f", "b3_f", "ceaf_e_f"]].mean(axis=1))


def test_choose_uses_the_requested_dev_score():
    sweep = [{"loss_ratio": 0.5, "dev_b3_f": 0.70, "dev_conll_f": 0.60, "dev_pairwise_f": 0.2},
             {"loss_ratio": 1.0, "dev_b3_f": 0.65, "dev_conll_f": 0.62, "dev_pairwise_f": 0.1}]
    assert bench._choose(sweep, "b3")["loss_ratio"] == 0.5
    assert bench._choose(sweep, "conll")["loss_ratio"] == 1.0


@needs_scorer
def test_quick_official_scorer_equals_our_scores_of_each_method(table):
    ours = table.iloc[:3]
    assert (ours["scorer_max_diff"] <= 1e-9).all(), ours["scorer_max_diff"]
    # without singletons (the scorer's own setting): MUC is ours (a singleton holds no link),
    # B3 and CEAF-e fall below ours, which count the singletons
    np.testing.assert_allclose(ours["crac_muc_f"], ours["all_muc_f"], rtol=0, atol=1e-9)
    assert ((ours["crac_b3_f"] > 0) & (ours["crac_b3_f"] < ours["all_b3_f"])).all()
    assert ((ours["crac_ceaf_e_f"] > 0) & (ours["crac_ceaf_e_f"] < ours["all_ceaf_e_f"])).all()
    np.testing.assert_allclose(ours["crac_conll_f"],
                               ours[["crac_muc_f", "crac_b3_f", "crac_ceaf_e_f"]].mean(axis=1))


@needs_scorer
def test_official_scores_of_a_key_against_itself_and_against_singletons(tmp_path):
    path = GUM / "GUM_news_crane.conllu.gz"
    _, mentions = read_conllu(path)
    alone = tmp_path / "alone.conllu"  # every mention its own entity
    alone.write_text(write_chains(path, mentions.assign(cluster=np.arange(len(mentions)))))
    same, single = bench.official_scores([{"files": [(path, path)], "singletons": False},
                                          {"files": [(path, alone)], "singletons": True}])
    np.testing.assert_array_equal(same.to_numpy(), 1.0)
    # all singletons: no link (MUC 0), B3 precision 1 and recall sum(1/|K|) / n
    sizes = mentions.groupby("entity").size().to_numpy()
    assert single.loc["muc"].tolist() == [0.0, 0.0, 0.0]
    assert single.loc["b3", "p"] == 1.0
    assert single.loc["b3", "r"] == pytest.approx(len(sizes) / len(mentions), abs=1e-12)


def test_a_missing_scorer_skips_saying_where_and_fails_where_it_is_required(monkeypatch,
                                                                            tmp_path):
    import tests.scorer as scorer

    def calls_the_scorer():
        raise AssertionError("not reached")

    monkeypatch.setattr(bench, "SCORER", tmp_path / "nowhere")
    monkeypatch.delenv(scorer.REQUIRE, raising=False)
    (mark,) = needs_scorer(calls_the_scorer).pytestmark
    assert mark.name == "skip" and str(tmp_path / "nowhere") in mark.kwargs["reason"]
    monkeypatch.setenv(scorer.REQUIRE, "1")
    with pytest.raises(pytest.fail.Exception, match="REQUIRE_CRAC_SCORER=1 requires it"):
        needs_scorer(calls_the_scorer)()
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "corefud-scorer.py").write_text("")
    monkeypatch.setattr(bench, "SCORER", tmp_path / "here")
    assert needs_scorer(calls_the_scorer) is calls_the_scorer


def test_without_the_scorer_the_referee_columns_are_empty(monkeypatch, tmp_path):
    monkeypatch.setattr(bench, "SCORER", tmp_path / "nowhere")
    got = bench.referee_columns([], {"mentions": None}, np.zeros(0))
    assert np.isnan(got["scorer_max_diff"]) and np.isnan(got["crac_conll_f"])


def test_quick_apply_throughput_is_measured_for_each_method(table):
    ours = table.iloc[:3]
    assert (ours["apply_docs_per_s"] > 0).all() and np.isfinite(ours["apply_docs_per_s"]).all()
    assert (ours["apply_speedup"] > 0).all() and np.isfinite(ours["apply_speedup"]).all()
