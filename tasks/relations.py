"""Steps of the relation discovery flow (Chen, Ji, Tan and Niu, IJCNLP 2005).

Store-backed wrappers over the readers and the steps of
:class:`algorithms.relations.model.RelationDiscovery`::

    parse -> combine -> extract_features -> rank_features
          -> score_candidate (per (k, prefix)) -> choose_subsets
          -> cluster_reference (per (k, r)) -> score_subsample (per (k, mu)) -> choose_k
          -> label_clusters -> evaluate (beside hasegawa and the k-means baselines)

A step of the method takes ``params``, the estimator's parameters that its method reads
(:meth:`RelationDiscovery.step_params`), builds the estimator from them and calls that one
method: every loop, rule and default is the estimator's, and a unit's cache key covers
exactly what it computes with.  All randomness is derived from ``(seed, k, mu)``
(:mod:`algorithms.relations.stability`), so the units run in any order on any task runner
and give the same numbers; adding subsamples only runs the new units.  With
``all_features`` the reference and subsample units use every word: RLBaseline's search
and the k-means baseline at the true k.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

import algorithms.relations.baselines as baselines_mod
from algorithms.metrics.clustering import clustering_scores
from algorithms.relations.contexts import build_contexts_frame
from algorithms.relations.model import RelationDiscovery
from tasks.errors import InputError
from tasks.readers.jsonl import read_jsonl
from tasks.readers.semeval import read_semeval
from tasks.steps import step

MENTION_COLUMNS = ["source", "id", "tokens", "e1_start", "e1_end", "e2_start", "e2_end",
                   "label", "relation", "direction", "gold"]
SAMPLE_STREAM = 4
"""``SeedSequence([seed, 4])`` draws the pair sample (0-3 are used by the search)."""


def detect_format(path: str | Path, fmt: str) -> str:
    """``"semeval"`` or ``"jsonl"``: ``fmt`` itself, or guessed from the file name."""
    if fmt != "auto":
        return fmt
    name = Path(path).name.lower()
    return "jsonl" if name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz")) else "semeval"


# -- parse -------------------------------------------------------------------------
def _parse_name(parameters: dict) -> str:
    return f"parse {Path(parameters['path']).name}"


@step("relations-parse", files=("path",), run_name=_parse_name)
def parse(path: str, fmt: str, relation_types: list[str] | None, include_other: bool,
          directed: bool) -> pd.DataFrame:
    """One file of entity-pair mentions -> the mentions table.

    Parameters
    ----------
    path : SemEval-2010 Task 8 file, or JSON Lines (``tasks.readers.jsonl``).
    fmt : {"auto", "semeval", "jsonl"}
    relation_types : keep only these (undirected) types; None keeps every type.
    include_other : keep the pairs labelled ``Other``.
    directed : gold classes are the directed labels (``Cause-Effect(e2,e1)``, 18 types
        plus Other) instead of the undirected relation types.

    Returns
    -------
    DataFrame with :data:`MENTION_COLUMNS`; ``id`` as a string, ``source`` the file name,
    ``tokens`` the sentence as a list of words, ``gold`` the class used by ``evaluate`` (missing
    when the file has no labels).
    """
    kind = detect_format(path, fmt)
    frame = read_semeval(path) if kind == "semeval" else read_jsonl(path)
    frame = frame.copy()
    frame["id"] = frame["id"].astype(str)
    frame.insert(0, "source", Path(path).name)
    relation = frame["relation"]
    if relation_types is None:
        keep = pd.Series(True, index=frame.index)
    else:
        keep = relation.isin(list(relation_types))
    other = relation == "Other"
    keep = (keep | other) if include_other else (keep & ~other)
    frame = frame[keep.to_numpy()].reset_index(drop=True)
    if frame.empty:
        raise InputError(f"no pairs left after keeping types {relation_types or 'all'} "
                         f"(include_other={include_other})", path=path)
    frame["gold"] = frame["label"] if directed else frame["relation"]
    frame["tokens"] = [list(t) for t in frame["tokens"]]
    return frame[MENTION_COLUMNS]


def token_lists(mentions: pd.DataFrame) -> pd.DataFrame:
    """A copy of the mentions table with ``tokens`` as Python lists (a stored list column
    reads back as numpy arrays)."""
    out = mentions.copy()
    out["tokens"] = [list(t) for t in mentions["tokens"]]
    return out


@step("relations-combine", inputs=("parts",), outputs=("mentions", "classes"),
      run_name="combine n={max_pairs}")
def combine(parts: list[pd.DataFrame], max_pairs: int | None, seed: int) -> dict:
    """Concatenate the parsed files and draw the seeded sample of ``max_pairs`` pairs.

    The sample is ``numpy.random.default_rng(SeedSequence([seed, 4])).choice(n, max_pairs,
    replace=False)``, sorted (file order kept).  ``classes`` counts the gold classes.
    """
    frame = pd.concat(parts, ignore_index=True)
    if max_pairs is not None and max_pairs < len(frame):
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), SAMPLE_STREAM]))
        rows = np.sort(rng.choice(len(frame), size=int(max_pairs), replace=False))
        frame = frame.iloc[rows].reset_index(drop=True)
    gold = frame["gold"].dropna()
    counts = gold.value_counts().sort_index()
    classes = pd.DataFrame({"gold": counts.index.astype(str),
                            "count": counts.to_numpy(np.int64)})
    return {"mentions": frame, "classes": classes}


# -- features and ranking ----------------------------------------------------------
@step("relations-features", inputs=("mentions",), outputs=("X", "vocabulary", "contexts"),
      run_name="contexts {window} {weighting}")
def extract_features(mentions: pd.DataFrame, window: str, weighting: str, position_tags: bool,
                     lowercase: bool, min_df: int) -> dict:
    """Pre-mid-post contexts -> sparse X (pairs x words), the vocabulary and the contexts
    (:func:`algorithms.relations.contexts.build_contexts`).

    ``vocabulary`` has ``feature`` (column index), ``word`` and ``df`` (pairs containing it);
    ``contexts`` has the pair ``source``, ``id`` and its context words joined by spaces.
    """
    try:
        X, vocab, docs = build_contexts_frame(
            token_lists(mentions), window, weighting=weighting, min_df=min_df,
            lowercase=lowercase, position_tags=position_tags, return_docs=True)
    except ValueError as exc:
        raise InputError(str(exc), key="min_df") from None
    df = np.diff(sp.csc_matrix(X).indptr).astype(np.int64)
    vocabulary = pd.DataFrame({"feature": np.arange(len(vocab), dtype=np.int64),
                               "word": vocab.astype(str), "df": df})
    contexts = pd.DataFrame({"source": mentions["source"], "id": mentions["id"],
                             "context": [" ".join(d) for d in docs]})
    return {"X": X, "vocabulary": vocabulary, "contexts": contexts}


class RunName:
    """A task run name from the call's parameters: ``template`` formatted with them, with
    the estimator's ``params`` and with ``{words}``: ``F=<n>`` for a prefix of the ranking,
    ``all words`` for the units on every word (RLBaseline, k-means at the true k), so that
    two different tasks never share a name."""

    def __init__(self, template: str) -> None:
        self.template = template

    def __call__(self, parameters: dict) -> str:
        fields = {**parameters.get("params", {}), **parameters}
        if "{words}" in self.template:
            fields["words"] = ("all words" if parameters["all_features"]
                               else f"F={parameters['n_features']}")
        return self.template.format(**fields)


@step("relations-rank", inputs=("X", "vocabulary"), run_name=RunName("rank {ranking}"))
def rank_features(X: sp.csr_matrix, vocabulary: pd.DataFrame, params: dict) -> pd.DataFrame:
    """Rank the words, most important first (:meth:`RelationDiscovery.rank`).

    Returns a table ``rank``, ``feature``, ``word``, ``score`` (E_{-w}, df or chi^2), ``df``.
    """
    ranking, scores = RelationDiscovery(**params).rank(X)
    ranking = np.asarray(ranking, dtype=np.int64)
    return pd.DataFrame({
        "rank": np.arange(ranking.size, dtype=np.int64),
        "feature": ranking,
        "word": vocabulary["word"].to_numpy()[ranking],
        "score": np.asarray(scores, dtype=np.float64)[ranking],
        "df": vocabulary["df"].to_numpy()[ranking],
    })


def _features(X, ranking: pd.DataFrame | None, n_features: int, all_features: bool):
    """The columns of a unit: the first ``n_features`` ranked words, or every column."""
    if all_features:
        return np.arange(X.shape[1])
    if ranking is None:
        raise ValueError("a ranking is needed unless all_features is set")
    return ranking["feature"].to_numpy(np.intp)[: int(n_features)]


# -- stability search ------------------------------------------------------------------
@step("relations-candidate", inputs=("X", "ranking"),
      run_name="candidate k={k} F={n_features}")
def score_candidate(X: sp.csr_matrix, ranking: pd.DataFrame, k: int, n_features: int,
                    params: dict) -> pd.DataFrame:
    """One (k, prefix) candidate of the subset search, one row
    (:meth:`RelationDiscovery.score_candidate`)."""
    feats = _features(X, ranking, n_features, False)
    return pd.DataFrame([RelationDiscovery(**params).score_candidate(X, feats, k)])


@step("relations-subsets", inputs=("scores",), outputs=("search", "subsets"),
      run_name="choose F_k")
def choose_subsets(scores: list[pd.DataFrame], params: dict) -> dict:
    """F_k per k (:meth:`RelationDiscovery.choose_subsets`): ``search`` is every candidate,
    ``subsets`` the chosen one's row per k (``k``, ``n_features``, ``coverage``, ...)."""
    search, subsets = RelationDiscovery(**params).choose_subsets(scores)
    return {"search": search, "subsets": subsets}


@step("relations-reference", inputs=("X", "ranking"),
      run_name=RunName("reference k={k} r={index} {words}"))
def cluster_reference(X: sp.csr_matrix, ranking: pd.DataFrame | None, k: int, n_features: int,
                      all_features: bool, index: int, params: dict) -> np.ndarray:
    """Reference clustering C_{index+1} of all pairs for k
    (:meth:`RelationDiscovery.cluster_reference`); C_1 of the chosen k is the final
    clustering, C_1 on all words at the true k the k-means baseline."""
    feats = _features(X, ranking, n_features, all_features)
    return np.asarray(RelationDiscovery(**params).cluster_reference(X, feats, k, index), np.int64)


@step("relations-stability", inputs=("X", "ranking", "references"),
      run_name=RunName("stability k={k} sample={sample_index} {words}"))
def score_subsample(X: sp.csr_matrix, ranking: pd.DataFrame | None,
                    references: list[np.ndarray], k: int, n_features: int, all_features: bool,
                    sample_index: int, params: dict) -> pd.DataFrame:
    """One (k, mu) unit: Eq. 2 of subsample mu against the references of k, one row
    (:meth:`RelationDiscovery.score_subsample`)."""
    feats = _features(X, ranking, n_features, all_features)
    row = RelationDiscovery(**params).score_subsample(X, feats, k, sample_index, references)
    return pd.DataFrame([{**row, "all_features": bool(all_features)}])


def _choice_name(parameters: dict) -> str:
    return "choose k (all words)" if parameters.get("all_features") else "choose k (F_k)"


@step("relations-choose", inputs=("samples",), outputs=("samples", "curve", "choice"),
      run_name=_choice_name)
def choose_k(samples: list[pd.DataFrame], all_features: bool, params: dict) -> dict:
    """Eq. 3 per k and the chosen k with its |F_k| (:meth:`RelationDiscovery.choose_k`);
    ``all_features``: the units were on every word (RLBaseline)."""
    table, curve, k = RelationDiscovery(**params).choose_k(samples)
    row = curve[curve["k"] == k].iloc[0]
    choice = pd.DataFrame({"k": [int(k)], "n_features": [int(row["n_features"])],
                           "m_norm": [float(row["m_norm"])],
                           "all_features": [bool(all_features)]})
    return {"samples": table, "curve": curve, "choice": choice}


# -- labels -----------------------------------------------------------------------------------
@step("relations-label", inputs=("X", "vocabulary", "mentions", "labels"),
      outputs=("clusters", "words"), run_name="label clusters")
def label_clusters(X: sp.csr_matrix, vocabulary: pd.DataFrame, mentions: pd.DataFrame,
                   labels: np.ndarray, params: dict) -> dict:
    """The DCM words of each cluster of the final clustering ``labels``
    (:meth:`RelationDiscovery.label`; Fung et al. 2002; Chen et al. 2005, Table 6).

    ``clusters``: ``source``, ``id``, ``gold``, ``cluster`` per pair.  ``words``: ``cluster``,
    ``size``, ``rank``, ``word``, ``weight``.
    """
    labels = np.asarray(labels, np.int64)
    top = RelationDiscovery(**params).label(X, labels, vocabulary["word"].to_numpy(dtype=object))
    sizes = np.bincount(labels)
    rows = [(int(c), int(sizes[c]), r, w, wt)
            for c, ws in sorted(top.items()) for r, (w, wt) in enumerate(ws)]
    words = pd.DataFrame(rows, columns=["cluster", "size", "rank", "word", "weight"])
    clusters = pd.DataFrame({"source": mentions["source"], "id": mentions["id"],
                             "gold": mentions["gold"], "cluster": labels})
    return {"clusters": clusters, "words": words}


# -- baselines and evaluation -----------------------------------------------------------------
@step("relations-hasegawa", inputs=("mentions",), run_name="hasegawa k={k}")
def hasegawa(mentions: pd.DataFrame, k: int, window: str, lowercase: bool) -> np.ndarray:
    """Hasegawa et al. (2004): tf-idf between-words, cosine, complete linkage cut at k."""
    X, _ = build_contexts_frame(token_lists(mentions), window, position_tags=False,
                                lowercase=lowercase, weighting="tfidf")
    return baselines_mod.hasegawa_clustering(X, k)


@step("relations-evaluate", inputs=("clusters", "baselines"), run_name="evaluate")
def evaluate(clusters: pd.DataFrame, baselines: dict, dataset: str, method: str,
             k_chosen: int, k_baselines: dict | None = None) -> pd.DataFrame:
    """Metrics in long form (``dataset``, ``method``, ``metric``, ``value``).

    For the method and every baseline labeling: mapped accuracy (Chen et al. Sec. 3.3),
    ARI, V-measure and the number of clusters; for the method also the chosen k, the true
    k and |chosen - true|; ``k_baselines`` adds the k each baseline used.  Without gold
    classes only the chosen k and the number of pairs are reported.
    """
    gold = clusters["gold"]
    rows = []
    if gold.isna().any():
        return pd.DataFrame({"dataset": dataset, "method": method,
                             "metric": ["k_chosen", "n_pairs"],
                             "value": [float(k_chosen), float(len(clusters))]})
    y = gold.astype(str).to_numpy()
    k_true = int(np.unique(y).size)
    labelings = {method: clusters["cluster"].to_numpy()}
    labelings.update({name: np.asarray(v) for name, v in sorted(baselines.items())})
    for name, labels in labelings.items():
        s = clustering_scores(y, labels)
        rows += [(name, m, float(s[m])) for m in ("accuracy", "ari", "v_measure")]
        if name == method:
            rows += [(name, "k_chosen", float(k_chosen)), (name, "k_true", float(k_true)),
                     (name, "k_error", float(abs(k_chosen - k_true)))]
        elif k_baselines and name in k_baselines:
            rows.append((name, "k_used", float(k_baselines[name])))
        rows.append((name, "n_clusters", float(s["n_clusters"])))
    frame = pd.DataFrame(rows, columns=["method", "metric", "value"])
    frame.insert(0, "dataset", dataset)
    return frame


# -- artifacts (formatting only) --------------------------------------------------------------
def stability_markdown(curve: pd.DataFrame, k: int, rl_curve: pd.DataFrame | None = None,
                       width: int = 40) -> str:
    """The stability curve over k as a markdown table with a text bar per k."""
    top = max(float(curve["m_norm"].max()), 1e-12)
    rl = {} if rl_curve is None else dict(zip(rl_curve["k"], rl_curve["m_norm"], strict=True))
    head = "| k | F_k | M mean | random | M_norm | std | curve |"
    sep = "|---|---|---|---|---|---|---|"
    if rl:
        head, sep = head[:-1] + " M_norm all words |", sep + "---|"
    lines = ["## Stability over k (Chen et al. 2005, Eq. 3)", "", head, sep]
    for r in curve.itertuples(index=False):
        bar = "█" * max(0, int(round(width * max(float(r.m_norm), 0.0) / top)))
        mark = " **chosen**" if int(r.k) == int(k) else ""
        line = (f"| {int(r.k)}{mark} | {int(r.n_features)} | {r.m_mean:.4f} | "
                f"{r.m_random:.4f} | {r.m_norm:.4f} | {r.m_std:.4f} | `{bar}` |")
        if rl:
            line += f" {rl.get(r.k, float('nan')):.4f} |"
        lines.append(line)
    return "\n".join(lines)


def label_rows(words: pd.DataFrame) -> list[dict]:
    """One row per cluster: size and its DCM words (for the table artifact)."""
    out = []
    for c, g in words.groupby("cluster", sort=True):
        g = g.sort_values("rank")
        out.append({"cluster": int(c), "size": int(g["size"].iloc[0]),
                    "words": ", ".join(g["word"]),
                    "weights": ", ".join(f"{w:.3f}" for w in g["weight"])})
    return out
