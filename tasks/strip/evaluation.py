"""StRip's evaluation: chains from pair decisions, their scores, the ``evaluate`` step and the
choice of each variant's loss ratio on dev.

Scores are MUC, B³, CEAF-e and pairwise P / R / F1 (:mod:`scarce.algorithms.metrics.coref`) over the
source mentions (the non-source NPs are clustered, then removed before scoring, as Stoyanov and
Cardie 2006) and over all mentions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

import scarce.algorithms.metrics.coref as coref_metrics
from scarce.algorithms.strip.closure import PairGraph
from scarce.algorithms.strip.rule_table import (
    RULE_COVERAGE_COLUMNS,
    rule_count,
    rule_coverage,
    rules_fire,
)
from scarce.tasks.steps import step
from scarce.tasks.strip.pairs import features, pair_ends

__all__ = ["SCORE_NAMES", "CLUSTER_COLUMNS", "SELECT_BY", "chains", "chain_scores",
           "has_gold_chains", "evaluate", "choose_loss_ratio", "select_loss_ratio", "headline"]

SCORE_NAMES = ("muc", "b3", "ceaf_e", "pairwise")
CLUSTER_COLUMNS = ["doc", "mention", "method", "cluster"]


def chains(positive: np.ndarray, pairs: pd.DataFrame, mentions: pd.DataFrame) -> np.ndarray:
    """Chain label of every mention: single-link clustering of the ``positive`` pairs.

    ``positive`` is a boolean mask over the rows of ``pairs`` (any classifier's decisions).
    Mentions in no positive pair are singletons.  Labels are integers unique over all documents.
    """
    graph = PairGraph(*pair_ends(pairs), closure=True)
    ends = graph.clusters(np.asarray(positive, dtype=bool))
    idx = pd.MultiIndex.from_frame(ends[["doc", "mention"]])
    rows = idx.get_indexer(pd.MultiIndex.from_frame(mentions[["doc", "mention"]]))
    out = np.where(rows >= 0, ends["cluster"].to_numpy()[np.maximum(rows, 0)], -1)
    alone = out < 0
    out[alone] = graph.n_nodes + np.arange(int(alone.sum()))
    return out.astype(np.int64)


def _long_scores(scores: pd.DataFrame, prefix: str) -> dict[str, float]:
    return {f"{prefix}{name}_{c}": float(scores.loc[name, c])
            for name in SCORE_NAMES for c in ("p", "r", "f")}


def chain_scores(key, response, source, groups) -> dict[str, float]:
    """The scores ``evaluate`` records for chains ``response`` against entities ``key``.

    MUC, B³, CEAF-e and pairwise P / R / F1 over the mentions ``source`` marks (``muc_p``, ...:
    the non-source mentions are clustered, then removed before scoring, as Stoyanov and Cardie
    2006) and over all mentions (``all_muc_p``, ...); ``groups`` is each mention's document
    (:func:`scarce.algorithms.metrics.coref.coref_scores`).
    """
    return {**_long_scores(coref_metrics.coref_scores(key, response, source, groups), ""),
            **_long_scores(coref_metrics.coref_scores(key, response, None, groups), "all_")}


def has_gold_chains(mentions: pd.DataFrame) -> bool:
    """Whether the mentions of a file carry gold coreference: some entity id of a document has
    two mentions or more.

    CorefUD gives every mention an entity id, so a file without gold coreference (the mentions
    of a detector, or a file whose chains were removed) is one where every mention is its own
    entity; such a file, or one of genuine singletons only, has nothing to score.
    """
    return bool(mentions.duplicated(["doc", "entity"]).any())


@step(
    "strip-evaluate",
    inputs=("test_pairs", "test_mentions", "rules", "timings"),
    outputs=("metrics", "scores", "clusters", "coverage"),
    volatile=("timings",),
    run_name="evaluate {dataset}",
)
def evaluate(test_pairs: list, test_mentions: list, rules: dict, timings: dict,
             dataset: str, loss_ratios: dict | None = None) -> dict:
    """Apply each variant's rules to the test pairs, cluster (single link) and score.

    Scores are MUC, B³, CEAF-e and pairwise P / R / F1 over the source mentions (the non-source
    NPs are clustered, then removed before scoring, as Stoyanov and Cardie 2006), and the same
    over all mentions with the prefix ``all_``; ``loss_ratios`` (method -> the ratio its rules
    were trained with) adds a ``loss_ratio`` metric per method.

    Returns
    -------
    dict
        ``metrics`` (long: dataset, method, metric, value), ``scores`` (one row per method, the
        F1 columns over sources), ``clusters`` (doc, mention, method, cluster), ``coverage``
        (per method and rule, what the rule covers among the labelled test pairs, alone and after
        the closure: :func:`scarce.algorithms.strip.rule_table.rule_coverage`) and ``timings``
        (seconds per
        method and phase, volatile).
    """
    pairs = pd.concat(test_pairs, ignore_index=True)
    mentions = pd.concat(test_mentions, ignore_index=True)
    key = mentions["entity"].to_numpy()
    groups = mentions["doc"].to_numpy()
    source = mentions["source"].to_numpy(dtype=bool)
    X = features(pairs)
    rows, clusters, wide, coverage = [], [], [], []
    for method, table in rules.items():
        cov = rule_coverage(table, X, pairs["label"].to_numpy(), *pair_ends(pairs))
        coverage.append(cov.assign(method=method))
        response = chains(rules_fire(table, X), pairs, mentions)
        values = {
            **chain_scores(key, response, source, groups),
            "n_rules": float(rule_count(table)),
            **({"loss_ratio": float(loss_ratios[method])} if loss_ratios else {}),
        }
        rows += [(dataset, method, m, v) for m, v in values.items()]
        wide.append({"method": method, **{f"{s}_f": values[f"{s}_f"] for s in SCORE_NAMES},
                     "n_rules": int(values["n_rules"])})
        clusters.append(pd.DataFrame({"doc": groups, "mention": mentions["mention"].to_numpy(),
                                      "method": method, "cluster": response}))
    metrics = pd.DataFrame(rows, columns=["dataset", "method", "metric", "value"])
    times = pd.concat([t for method in rules for t in timings[method]], ignore_index=True)
    return {
        "metrics": metrics,
        "scores": pd.DataFrame(wide),
        "clusters": pd.concat(clusters, ignore_index=True),
        "coverage": pd.concat(coverage, ignore_index=True)[
            ["method", *RULE_COVERAGE_COLUMNS]],
        "timings": times,
    }


SELECT_BY = ("b3", "conll")


def choose_loss_ratio(rows: Sequence[dict], select_by: str = "b3") -> dict:
    """The row of the best loss ratio on dev: the highest dev B³ F1 (``select_by="conll"``:
    the mean of MUC, B³ and CEAF-e F1), ties broken by the dev pairwise F1, then by the ratio
    nearest 1 (the learner's default) on a log scale.  Each row has ``loss_ratio``, ``b3_f``,
    ``pairwise_f`` and ``conll_f`` or its parts ``muc_f`` and ``ceaf_e_f``; scores are rounded
    to 12 digits so that the order of summation cannot decide a tie.  (``scarce bench strip``
    chooses with this function too.)"""
    if select_by not in SELECT_BY:
        raise ValueError(f"select_by must be one of {SELECT_BY}, got {select_by!r}")

    def score(r: dict) -> float:
        if select_by == "conll":
            return r["conll_f"] if "conll_f" in r else (r["muc_f"] + r["b3_f"] + r["ceaf_e_f"]) / 3
        return r["b3_f"]

    return max(rows, key=lambda r: (round(score(r), 12), round(r["pairwise_f"], 12),
                                    -abs(np.log(r["loss_ratio"]))))


@step("strip-select-loss-ratio", inputs=("scores",), run_name="select loss ratio ({select_by})")
def select_loss_ratio(scores: pd.DataFrame, ratios: dict, select_by: str) -> pd.DataFrame:
    """Each variant's loss ratio, chosen on the dev documents (:func:`choose_loss_ratio`).

    ``scores`` is the dev ``evaluate``'s table, one row per trained model, whose ``method``
    names a key of ``ratios`` (``{method: [variant, loss ratio]}``).  One row per model:
    ``variant``, ``loss_ratio``, its dev F1 columns and ``chosen``.
    """
    table = scores.assign(variant=[ratios[m][0] for m in scores["method"]],
                          loss_ratio=[float(ratios[m][1]) for m in scores["method"]])
    table["chosen"] = False
    for _, part in table.groupby("variant", sort=False):
        best = choose_loss_ratio(part.to_dict("records"), select_by)
        table.loc[part.index[part["method"] == best["method"]], "chosen"] = True
    cols = ["variant", "loss_ratio", *(f"{n}_f" for n in SCORE_NAMES), "chosen"]
    return table[cols].reset_index(drop=True)


def headline(metrics: pd.DataFrame) -> dict[str, float]:
    """B³ F1 and pairwise F1 over the sources of every method (the paper's two measures)."""
    keep = metrics[metrics["metric"].isin(["b3_f", "pairwise_f"])]
    return {f"{r.dataset}/{r.method}/{r.metric}": float(r.value) for r in keep.itertuples()}

