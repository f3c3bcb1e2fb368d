"""Applying what a StRip run learned to new files: its rule tables read back, fired on a file's
pairs and clustered, and the chains counted (and scored where the files carry gold chains).

The ``apply-strip`` flow (``flows/apply_strip.py``) runs ``preprocess`` (the training step
itself), then :func:`apply_rules` per file (:func:`~scarce.tasks.strip.evaluation.chains`, the
function
``evaluate`` scores), ``write_predicted`` (as the training run writes its test documents) and
:func:`count_chains`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from scarce.algorithms.strip.rule_table import rule_count, rules_fire
from scarce.tasks.errors import InputError
from scarce.tasks.steps import content_only, step
from scarce.tasks.store.encoding import read_parquet_entry
from scarce.tasks.strip.evaluation import CLUSTER_COLUMNS, chain_scores, chains, has_gold_chains
from scarce.tasks.strip.pairs import feature_kinds, features

__all__ = ["load_rules", "apply_rules", "count_chains"]


@step("strip-model-rules", files={"path": content_only}, run_name="load rules {path.name}")
def load_rules(path: Path) -> pd.DataFrame:
    """A rule table of a run's ``outputs/model/`` (a store-format Parquet file), checked.

    Raises
    ------
    InputError
        Naming the file when it is damaged or is not a rule table
        (:data:`scarce.algorithms.strip.rule_table.RULE_COLUMNS`).
    """
    table = read_parquet_entry(path)
    try:
        rule_count(table)  # checks the columns and the operators
    except ValueError as exc:
        raise InputError(f"not a StRip rule table ({exc})", path=path) from None
    return table


@step("strip-apply", files={"path": content_only}, inputs=("pairs", "mentions", "rules"),
      run_name="apply rules {path.name}")
def apply_rules(path: Path, pairs: pd.DataFrame, mentions: pd.DataFrame, rules: pd.DataFrame,
                method: str, kinds: dict) -> pd.DataFrame:
    """Chains of one file's mentions: the pairs the rules mark coreferent, single-linked.

    The clustering is :func:`chains`, the function ``evaluate`` scores; nothing is learned.

    Parameters
    ----------
    path : Path
        The CoNLL-U file ``pairs`` and ``mentions`` were built from (named in errors; its hash
        keys the step).
    pairs, mentions : DataFrame
        ``preprocess``'s tables of the file.
    rules : DataFrame
        A rule table (``load_rules``).
    method : str
        The variant the rules belong to (the ``method`` column).
    kinds : dict
        The pair features the model was trained on and their kinds (:func:`feature_kinds`); the
        file's pairs must have exactly these.

    Returns
    -------
    DataFrame
        ``doc, mention, method, cluster`` (:data:`CLUSTER_COLUMNS`), one row per mention.

    Raises
    ------
    InputError
        When the file marks no mention, or when this code's pair features differ from the
        model's (a model trained by another version of the features: repeat the training run).
    """
    if mentions.empty:
        raise InputError("no mention in the file (no Entity= span): apply-strip links the "
                         "mentions the input marks, gold or from another system, in the "
                         "CorefUD format", path=path)
    got = feature_kinds(pairs)
    if got != kinds:
        diff = sorted(set(kinds.items()) ^ set(got.items()))[:3]
        raise InputError(f"the pair features of this code differ from the model's ({diff}); "
                         "repeat the training run (`scarce rerun`) to apply it", key="model_run")
    try:
        positive = rules_fire(rules, features(pairs))
    except ValueError as exc:
        raise InputError(f"the model's rules do not fit the pair features ({exc})",
                         key="model_run") from None
    return pd.DataFrame({"doc": mentions["doc"].to_numpy(),
                         "mention": mentions["mention"].to_numpy(), "method": method,
                         "cluster": chains(positive, pairs, mentions)})[CLUSTER_COLUMNS]


@step("strip-apply-summary", inputs=("clusters", "mentions"), run_name="count chains")
def count_chains(clusters: list, mentions: list, dataset: str) -> pd.DataFrame:
    """The apply run's metrics table: counts over every file and, where gold is present, scores.

    The counts: documents, mentions, chains (two mentions or more), mentions in those chains and
    singletons.  The files whose mentions carry gold chains (:func:`has_gold_chains`) are scored
    together as ``evaluate`` scores the test files of a training run (:func:`chain_scores`, the
    sources as ``preprocess`` marked them), with ``scored_documents`` their documents; without
    such a file the table holds the counts only.

    Parameters
    ----------
    clusters : list of DataFrame
        ``apply_rules``'s table of every file.
    mentions : list of DataFrame
        ``preprocess``'s mentions of the same files, in the same order (their ``entity`` is the
        input's entity id).
    dataset : str
        The ``dataset`` column.
    """
    if len(clusters) != len(mentions):
        raise ValueError(f"{len(clusters)} cluster tables but {len(mentions)} mention tables")
    table = (pd.concat([c.assign(file=k) for k, c in enumerate(clusters)], ignore_index=True)
             if clusters else pd.DataFrame({"file": [], "doc": [], "cluster": [],
                                            "method": []}))
    size = table.groupby(["file", "doc", "cluster"]).size()
    values = {"documents": len(table[["file", "doc"]].drop_duplicates()), "mentions": len(table),
              "chains": int((size >= 2).sum()), "mentions_in_chains": int(size[size >= 2].sum()),
              "singletons": int((size == 1).sum())}
    gold = [k for k, m in enumerate(mentions) if has_gold_chains(m)]
    if gold:
        for k in gold:
            same = (clusters[k]["doc"].astype(str).to_numpy() == mentions[k]["doc"].astype(
                str).to_numpy()) & (clusters[k]["mention"].to_numpy() == mentions[k][
                "mention"].to_numpy())
            if len(clusters[k]) != len(mentions[k]) or not same.all():
                raise ValueError(f"file {k}: the chains and the mentions are not aligned")
        men = pd.concat([mentions[k].assign(file=k) for k in gold], ignore_index=True)
        response = np.concatenate([clusters[k]["cluster"].to_numpy() for k in gold])
        groups = pd.factorize(pd.MultiIndex.from_frame(men[["file", "doc"]]))[0]
        values["scored_documents"] = int(groups.max()) + 1
        values.update(chain_scores(men["entity"].to_numpy(), response,
                                   men["source"].to_numpy(dtype=bool), groups))
    method = table["method"].iloc[0] if len(table) else ""
    return pd.DataFrame([(dataset, method, k, float(v)) for k, v in values.items()],
                        columns=["dataset", "method", "metric", "value"])
