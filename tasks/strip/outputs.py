"""What a StRip run writes besides its tables: the rules as text and each test file's CoNLL-U with
the predicted chains (the ``write_predicted`` step)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

import scarce.tasks.readers.conllu as conllu
from scarce.tasks.steps import step
from scarce.tasks.strip.documents import conllu_name

__all__ = ["MODEL_VERSION", "rules_text", "output_name", "number_chains", "chain_etypes",
           "write_predicted"]

MODEL_VERSION = 1  # format of a strip run's outputs/model/ (model.json); see docs/strip.md


def rules_text(coverage: pd.DataFrame, methods: Sequence[str], header: str) -> str:
    """The learned rules of every method as text, each with what it covers on the test pairs.

    Parameters
    ----------
    coverage : DataFrame
        ``evaluate``'s coverage table (``method`` and
        :data:`scarce.algorithms.strip.rule_table.RULE_COVERAGE_COLUMNS`).
    methods : sequence of str
        The methods, in the order to list them.
    header : str
        The first line(s).

    Returns
    -------
    str
        Per method, ``R<id>: IF a AND b THEN coreferent`` and under it the rule's coverage of
        the labelled test pairs, alone and after the closure; then ``DEFAULT: not coreferent``.
    """
    lines = [header.rstrip(), ""]
    for method in methods:
        rows = coverage[coverage["method"] == method].sort_values("rule_id")
        lines.append(f"## {method}: {len(rows)} rule{'' if len(rows) == 1 else 's'}")
        for r in rows.itertuples(index=False):
            lines += [
                f"R{r.rule_id}: IF {r.rule} THEN coreferent",
                f"    fires on {r.fires} test pairs ({r.fires_pos} labelled coreferent, "
                f"{r.fires_neg} labelled not); after the closure it adds {r.new_pos} coreferent "
                f"and {r.new_neg} non-coreferent labelled pairs to the chains",
            ]
        lines += ["DEFAULT: not coreferent", ""]
    return "\n".join(lines)



def output_name(path: Path) -> str:
    """The name of the predicted CoNLL-U of input ``path``: the input's name without ``.gz``
    (``.conllu`` added when it has no such suffix), every character but letters, digits, ``.``,
    ``_`` and ``-`` replaced by ``_`` (a plain file name in a run's outputs)."""
    name = Path(path).name.removesuffix(".gz")
    name = name if name.endswith(".conllu") else f"{name}.conllu"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return name if name[0].isalnum() else f"x{name}"


def number_chains(docs: np.ndarray, clusters: np.ndarray) -> np.ndarray:
    """Chain numbers 1, 2, ... in the order of each chain's first mention.

    ``docs`` and ``clusters`` hold one entry per mention, the mentions in file order; the numbers
    depend only on the partition of each document, not on the labels a clustering gave it, so
    the same chains are written with the same ``eid`` however they were computed.
    """
    return pd.factorize(pd.MultiIndex.from_arrays([np.asarray(docs), np.asarray(clusters)]))[0] + 1


def chain_etypes(chain: np.ndarray, etypes: pd.Series) -> np.ndarray:
    """Per mention, the entity type of its chain: the type all the chain's mentions carry in the
    input, or ``""`` when they differ or one has none (a chain's type is not predicted).

    ``chain`` holds the chain of every mention, ``etypes`` the mentions' types in the input."""
    frame = pd.DataFrame({"chain": np.asarray(chain),
                          "etype": etypes.fillna("").astype(str).to_numpy()})
    agreed = frame.groupby("chain")["etype"].agg(
        lambda s: s.iloc[0] if s.iloc[0] and (s == s.iloc[0]).all() else "")
    return agreed.reindex(frame["chain"]).to_numpy()


@step("strip-conllu", files={"path": conllu_name}, inputs=("clusters",),
      run_name="write chains {path.name}")
def write_predicted(path: Path, clusters: pd.DataFrame) -> pd.DataFrame:
    """The CoNLL-U file ``path`` with each method's predicted chains as its coreference.

    Parameters
    ----------
    path : Path
        A CoNLL-U file (one or more documents) whose mentions were clustered.
    clusters : DataFrame
        ``doc, mention, method, cluster``
        (:data:`~scarce.tasks.strip.evaluation.CLUSTER_COLUMNS`) for at least the mentions of this
        file
        (``evaluate``'s table for all test documents, or ``apply_rules``'s).

    Returns
    -------
    DataFrame
        ``method, conllu``: per method, the file's text with its ``Entity=`` annotations replaced
        by the chains (:func:`scarce.tasks.readers.conllu.write_chains`, CorefUD 1.x), singletons
        included; chains numbered by :func:`number_chains`, typed by :func:`chain_etypes`.
    """
    _, mentions = conllu.read_conllu(path)
    where = pd.MultiIndex.from_frame(mentions[["doc", "mention"]].astype({"doc": str}))
    out = []
    for method, part in clusters.groupby("method", sort=False):
        label = part.astype({"doc": str}).set_index(["doc", "mention"])["cluster"].reindex(where)
        if label.isna().any():
            doc, mention = where[int(np.flatnonzero(label.isna().to_numpy())[0])]
            raise ValueError(f"method {method}: mention {mention} of {doc} has no chain")
        chain = number_chains(mentions["doc"].to_numpy(), label.to_numpy())
        predicted = mentions[["doc", "sent", "start", "end", "head"]].assign(
            cluster=chain, etype=chain_etypes(chain, mentions["etype"]))
        out.append((method, conllu.write_chains(path, predicted)))
    return pd.DataFrame(out, columns=["method", "conllu"])

