"""Steps of the relation discovery flow (Chen, Ji, Tan and Niu, IJCNLP 2005).

Thin store-backed wrappers over :mod:`algorithms.relations` and the readers::

    parse -> combine -> extract_features -> rank_features
          -> score_candidate (mapped over (k, prefix)) -> choose_subsets
          -> stability_sample (mapped over (k, subsample mu)) -> choose
          -> label_clusters -> evaluate (with hasegawa and the all-feature units as baselines)

Every unit of the search is its own task keyed by its own parameters, and all its
randomness is derived from ``(seed, k, mu)`` (see :mod:`algorithms.relations.stability`),
so the units can run in any order on any task runner and give the same numbers; adding
subsamples only runs the new units.  The same two unit steps with ``all_features=True``
give the baselines: k-means on all words (at the true k, and at the k that stability on
all words chooses, the paper's "RLBaseline").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

import algorithms.relations.baselines as baselines_mod
import algorithms.relations.stability as stability_mod
from algorithms.metrics.clustering import clustering_scores
from algorithms.relations.baselines import chi2_pseudo_ranking, frequency_ranking
from algorithms.relations.contexts import build_contexts_frame, context_words
from algorithms.relations.dcm import top_words
from algorithms.relations.entropy import entropy_ranking
from algorithms.relations.selection import (
    best_subsets,
    full_kmeans_seed,
    kmeans_labels,
    prefix_sizes,
    prepare_subset,
)
from algorithms.relations.selection import (
    score_candidate as score_unit,
)
from algorithms.relations.stability import (
    choose_k,
    stability_one_sample,
    summarize_stability,
)
from tasks.errors import InputError
from tasks.readers.jsonl import read_jsonl
from tasks.readers.semeval import read_semeval
from tasks.steps import step

MENTION_COLUMNS = ["source", "id", "tokens", "e1_start", "e1_end", "e2_start", "e2_end",
                   "label", "relation", "direction", "gold"]
SAMPLE_STREAM = 4
"""``SeedSequence([seed, 4])`` draws the pair sample (0-3 are used by the search)."""



def detect_format(path: str | Path, fmt: str = "auto") -> str:
    """``"semeval"`` or ``"jsonl"``: ``fmt`` itself, or guessed from the file name."""
    if fmt != "auto":
        return fmt
    name = Path(path).name.lower()
    return "jsonl" if name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz")) else "semeval"


# -- parse -------------------------------------------------------------------------
@step("relations-parse", files=("path",), run_name="parse {fmt}")
def parse(path: str, fmt: str = "auto", relation_types: list[str] | None = None,
          include_other: bool = False, directed: bool = False) -> pd.DataFrame:
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
def combine(parts: list[pd.DataFrame], max_pairs: int | None = None, seed: int = 0) -> dict:
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
def extract_features(mentions: pd.DataFrame, window: str = "0-10-0", weighting: str = "tfidf",
                     position_tags: bool = True, lowercase: bool = True, min_df: int = 1,
                     drop_punctuation: bool = True) -> dict:
    """Pre-mid-post contexts -> sparse X (pairs x words), the vocabulary and the contexts.

    ``vocabulary`` has ``feature`` (column index), ``word`` and ``df`` (pairs containing it);
    ``contexts`` has the pair ``source``, ``id`` and its context words joined by spaces.
    """
    opts = dict(lowercase=lowercase, position_tags=position_tags,
                drop_punctuation=drop_punctuation)
    mentions = token_lists(mentions)
    try:
        X, vocab = build_contexts_frame(mentions, window, weighting=weighting, min_df=min_df,
                                        **opts)
    except ValueError as exc:
        raise InputError(str(exc), key="min_df") from None
    words = [" ".join(context_words(t, (a, b), (c, d), window, **opts))
             for t, a, b, c, d in zip(mentions["tokens"], mentions["e1_start"],
                                      mentions["e1_end"], mentions["e2_start"],
                                      mentions["e2_end"], strict=True)]
    df = np.diff(sp.csc_matrix(X).indptr).astype(np.int64)
    vocabulary = pd.DataFrame({"feature": np.arange(len(vocab), dtype=np.int64),
                               "word": vocab.astype(str), "df": df})
    contexts = pd.DataFrame({"source": mentions["source"], "id": mentions["id"],
                             "context": words})
    return {"X": X, "vocabulary": vocabulary, "contexts": contexts}


@step("relations-rank", inputs=("X", "vocabulary"), run_name="rank {method}")
def rank_features(X: sp.csr_matrix, vocabulary: pd.DataFrame, method: str = "entropy",
                  alpha: str = "exact", binary: bool = True, n_samples: int | None = None,
                  seed: int = 0, chi2_k: int = 9, n_init: int = 3,
                  row_norm: bool = True) -> pd.DataFrame:
    """Rank the words, most important first.

    ``entropy``: :func:`algorithms.relations.entropy.entropy_ranking` (``binary``, ``alpha``,
    ``n_samples`` points drawn with ``seed``); ``frequency``: by document frequency;
    ``chi2``: chi^2 against k-means pseudo-labels at ``chi2_k`` on all words (label-free).

    Returns a table ``rank``, ``feature``, ``word``, ``score`` (E_{-w}, df or chi^2), ``df``.
    """
    if method == "entropy":
        ranking, scores = entropy_ranking(X, binary=bool(binary), alpha=alpha,
                                          n_samples=n_samples, random_state=seed)
    elif method == "frequency":
        ranking = frequency_ranking(X)
        scores = vocabulary["df"].to_numpy(np.float64)
    elif method == "chi2":
        ranking, scores = chi2_pseudo_ranking(X, chi2_k, seed=seed, n_init=n_init,
                                              row_norm=row_norm)
    else:
        raise ValueError(f"method must be 'entropy', 'frequency' or 'chi2', got {method!r}")
    ranking = np.asarray(ranking, dtype=np.int64)
    return pd.DataFrame({
        "rank": np.arange(ranking.size, dtype=np.int64),
        "feature": ranking,
        "word": vocabulary["word"].to_numpy()[ranking],
        "score": np.asarray(scores, dtype=np.float64)[ranking],
        "df": vocabulary["df"].to_numpy()[ranking],
    })


def prefix_lengths(n_words: int, *, step: int | None, n_steps: int, min_size: int) -> list[int]:
    """The prefix lengths of the ranked list the subset search tries (``prefix_sizes``)."""
    return [int(s) for s in prefix_sizes(n_words, step=step, n_steps=n_steps, min_size=min_size)]


def _features(ranking: pd.DataFrame | None, X, n_features: int, all_features: bool):
    if all_features:
        return np.arange(X.shape[1])
    if ranking is None:
        raise ValueError("a ranking is needed unless all_features is set")
    return ranking["feature"].to_numpy(np.intp)[: int(n_features)]


# -- subset search ------------------------------------------------------------------
@step("relations-candidate", inputs=("X", "ranking"), outputs=("score", "labels"),
      run_name="candidate k={k} F={n_features} all={all_features}")
def score_candidate(X: sp.csr_matrix, ranking: pd.DataFrame | None, k: int, n_features: int,
                    all_features: bool = False, seed: int = 0, n_init: int = 3,
                    theta: float = 0.9, reg: float = 1e-3, row_norm: bool = True) -> dict:
    """One (k, F) unit: k-means on the first ``n_features`` ranked words, scored by
    trace(P_W^-1 P_B) when coverage >= theta (:func:`selection.score_candidate`).

    ``all_features`` uses every column in index order and is always clustered (the
    k-means baselines).  ``labels`` is the clustering C (empty when infeasible).
    """
    feats = _features(ranking, X, n_features, all_features)
    out = score_unit(X, feats, k, seed=seed, n_init=n_init, row_norm=row_norm, reg=reg,
                     theta=theta, skip_infeasible=not all_features, return_labels=True)
    labels = out.pop("labels")
    out["all_features"] = bool(all_features)
    labels = np.zeros(0, np.int64) if labels is None else np.asarray(labels, np.int64)
    return {"score": pd.DataFrame([out]), "labels": labels}


@step("relations-subsets", inputs=("scores",), outputs=("search", "subsets"),
      run_name="choose subsets")
def choose_subsets(scores: list[pd.DataFrame]) -> dict:
    """F_k per k: the feasible prefix with the largest criterion (:func:`best_subsets`).

    ``search`` is every (k, F) tried; ``subsets`` has ``k``, ``n_features`` and that
    candidate's ``coverage`` and ``criterion``.
    """
    search = pd.concat(scores, ignore_index=True).sort_values(["k", "n_features"])
    search = search.reset_index(drop=True)
    best = best_subsets(search)
    rows = [search[(search["k"] == k) & (search["n_features"] == s)].iloc[0]
            for k, s in sorted(best.items())]
    subsets = pd.DataFrame(rows)[["k", "n_features", "coverage", "feasible", "criterion"]]
    return {"search": search, "subsets": subsets.reset_index(drop=True)}


# -- stability ------------------------------------------------------------------------
@step("relations-stability", inputs=("X", "ranking", "full_labels"),
      run_name="stability k={k} sample={sample_index}")
def stability_sample(X: sp.csr_matrix, ranking: pd.DataFrame | None,
                     full_labels: np.ndarray | list[np.ndarray],
                     k: int, n_features: int, sample_index: int, all_features: bool = False,
                     seed: int = 0, rho: float = 0.9, n_init: int = 3, row_norm: bool = True,
                     baseline: str = "closed_form", n_baseline_draws: int = 1,
                     pairs: str = "all") -> pd.DataFrame:
    """One (k, mu) unit: Eq. 2 for subsample mu against the full clustering C (one row);
    a list of R reference labelings averages Eq. 2 over them.

    ``pairs``: ``"all"`` (the paper) or ``"distinct"`` (pairs of different vectors only,
    :mod:`algorithms.relations.stability`).
    """
    feats = _features(ranking, X, n_features, all_features)
    row = stability_one_sample(X, feats, k, sample_index, seed=seed, rho=rho, n_init=n_init,
                               row_norm=row_norm, full_labels=full_labels, baseline=baseline,
                               n_baseline_draws=n_baseline_draws, pairs=pairs)
    row["all_features"] = bool(all_features)
    return pd.DataFrame([row])


@step("relations-reference", inputs=("X", "ranking"),
      run_name="reference k={k} F={n_features} all={all_features}")
def reference_clustering(X: sp.csr_matrix, ranking: pd.DataFrame | None, k: int,
                         n_features: int, all_features: bool = False, seed: int = 0,
                         n_init: int = 3, row_norm: bool = True, index: int = 0) -> np.ndarray:
    """Reference clustering ``index`` (C_1 for 0) for one k: k-means of all pairs on (F_k, k)
    with ``n_init`` restarts, seed :func:`stability.reference_seed` ``(seed, k, index)``
    (the search's seed for index 0; :func:`stability.reference_labels`).

    The flow runs it only when ``n_init_reference`` differs from ``n_init`` or
    ``n_references > 1``; otherwise C is the clustering :func:`score_candidate` already
    stored for (k, F_k).
    """
    feats = _features(ranking, X, n_features, all_features)
    labels = stability_mod.reference_labels(X, feats, k, seed=seed, n_init=n_init,
                                            row_norm=row_norm, index=index)
    return np.asarray(labels, np.int64)


@step("relations-choose", inputs=("samples",), outputs=("samples", "curve", "choice"),
      run_name="choose k")
def choose(samples: list[pd.DataFrame], rule: str = "max") -> dict:
    """Eq. 3 per k and the chosen k with its F_k (:func:`stability.choose_k`): the largest
    M_norm (smallest k on ties) or, with ``rule="one_se"``, the smallest k within one
    standard error of it."""
    table = pd.concat(samples, ignore_index=True).sort_values(["k", "sample_index"])
    table = table.reset_index(drop=True)
    curve = summarize_stability(table)
    k = choose_k(curve, rule=rule)
    row = curve[curve["k"] == k].iloc[0]
    choice = pd.DataFrame({"k": [int(k)], "n_features": [int(row["n_features"])],
                           "m_norm": [float(row["m_norm"])]})
    return {"samples": table, "curve": curve, "choice": choice}


# -- final clustering and labels ------------------------------------------------------------
@step("relations-label", inputs=("X", "vocabulary", "ranking", "mentions"),
      outputs=("clusters", "words"), run_name="label k={k} F={n_features}")
def label_clusters(X: sp.csr_matrix, vocabulary: pd.DataFrame, ranking: pd.DataFrame,
                   mentions: pd.DataFrame, k: int, n_features: int, seed: int = 0,
                   n_init: int = 3, row_norm: bool = True, n_label_words: int = 2) -> dict:
    """Final k-means at the chosen (k, F_k) and the DCM words of each cluster.

    ``clusters``: ``source``, ``id``, ``gold``, ``cluster`` per pair.  ``words``: ``cluster``,
    ``size``, ``rank``, ``word``, ``weight`` (the ``n_label_words`` best DCM words over all
    words, Fung et al. 2002; Chen et al. 2005, Table 6).
    """
    feats = _features(ranking, X, n_features, False)
    Z = prepare_subset(X, feats, row_norm=row_norm)
    labels = kmeans_labels(Z, k, random_state=full_kmeans_seed(seed, k), n_init=n_init)
    top = top_words(X, labels, vocabulary["word"].to_numpy(dtype=object), n_label_words)
    sizes = np.bincount(labels, minlength=int(k))
    rows = [(int(c), int(sizes[c]), r, w, wt)
            for c, ws in sorted(top.items()) for r, (w, wt) in enumerate(ws)]
    words = pd.DataFrame(rows, columns=["cluster", "size", "rank", "word", "weight"])
    clusters = pd.DataFrame({"source": mentions["source"], "id": mentions["id"],
                             "gold": mentions["gold"], "cluster": labels})
    return {"clusters": clusters, "words": words}


# -- baselines and evaluation -----------------------------------------------------------------
@step("relations-hasegawa", inputs=("mentions",), run_name="hasegawa k={k}")
def hasegawa(mentions: pd.DataFrame, k: int, window: str = "0-5-0",
             lowercase: bool = True) -> np.ndarray:
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
