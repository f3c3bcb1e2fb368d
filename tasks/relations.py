"""Steps of the relation discovery flow (Chen, Ji, Tan and Niu, IJCNLP 2005).

Kept as one module: the relation flow's steps are thin and share the mentions table they
pass along.

Store-backed wrappers over the readers and the steps of
:class:`scarce.algorithms.relations.model.RelationDiscovery`::

    parse -> combine -> extract_features -> rank_features
          -> score_candidate (per (k, prefix)) -> choose_subsets
          -> cluster_reference (per (k, r)) -> score_subsample (per (k, mu)) -> choose_k
          -> label_clusters -> evaluate (beside hasegawa and the k-means baselines)
          -> build_model -> assign_pairs (the run's assignments)

and the apply flow's (``flows/apply_relations.py``), which learns nothing::

    read_model, parse (per file) -> assign_pairs (per file) -> apply_metrics

``assign_pairs`` is the one way a pair gets a cluster, in the training run and when a model
is applied: the pair's context weighted with the model's vocabulary and idf
(:func:`~scarce.algorithms.relations.contexts.transform_contexts`), then the nearest centroid in the
space of the final clustering (:meth:`RelationDiscovery.assign`).

A step of the method takes ``params``, the estimator's parameters that its method reads
(:meth:`RelationDiscovery.step_params`), builds the estimator from them and calls that one
method: every loop, rule and default is the estimator's, and a unit's cache key covers
exactly what it computes with.  All randomness is derived from ``(seed, k, mu)``
(:mod:`scarce.algorithms.relations.stability`), so the units run in any order on any task runner
and give the same numbers; adding subsamples only runs the new units.  With
``all_features`` the reference and subsample units use every word: RLBaseline's search
and the k-means baseline at the true k.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from scarce.algorithms.relations.contexts import (
    build_contexts,
    build_contexts_frame,
    fit_contexts,
    pair_contexts,
    spans,
    transform_contexts,
)
from scarce.algorithms.relations.model import RelationDiscovery, TooFewPairsError
from scarce.algorithms.relations.params import INPUT_FORMATS
from scarce.tasks.errors import InputError
from scarce.tasks.readers import names as name_rules
from scarce.tasks.readers.jsonl import read_jsonl
from scarce.tasks.readers.semeval import read_semeval
from scarce.tasks.relations_format import MODEL_KEYS as MODEL_KEYS  # (re-exported)
from scarce.tasks.relations_format import MODEL_VERSION as MODEL_VERSION
from scarce.tasks.steps import content_only, step
from scarce.tasks.store.encoding import read_parquet_entry

MENTION_COLUMNS = ["source", "id", "tokens", "e1_start", "e1_end", "e2_start", "e2_end",
                   "label", "relation", "direction", "gold"]
SAMPLE_STREAM = 4
"""``SeedSequence([seed, 4])`` draws the pair sample (0-3 are used by the search)."""
DROP_PUNCTUATION = inspect.signature(build_contexts).parameters["drop_punctuation"].default
"""The contexts drop punctuation tokens (:func:`build_contexts`' default; not a config key)."""
ASSIGNMENT_COLUMNS = ["source", "id", "sentence", "head", "tail", "cluster", "label",
                      "distance", "n_words", "gold"]
CLUSTER_COLUMNS = ["cluster", "size", "label", "words", "weights"]


#: The readers of a file of entity-pair mentions, by the name of its format (the config's
#: ``format``, beside ``auto``: :data:`scarce.algorithms.relations.params.INPUT_FORMATS`).
READERS = dict(zip(INPUT_FORMATS, (read_semeval, read_jsonl), strict=True))
#: The endings (any case, ``.gz`` after them or not) that ``format: auto`` reads as JSON Lines;
#: any other name is read as SemEval.
JSONL_SUFFIXES = (".jsonl", ".json")


def detect_format(path: str | Path, fmt: str) -> str:
    """The format of :data:`READERS` a file is read in: ``fmt`` itself, or guessed from the
    file name (``auto``)."""
    if fmt != "auto":
        return fmt
    name = Path(path).name.lower().removesuffix(".gz")
    return "jsonl" if name.endswith(JSONL_SUFFIXES) else "semeval"


# -- parse -------------------------------------------------------------------------
def _parse_name(parameters: dict) -> str:
    return f"parse {Path(parameters['path']).name}"


def _name_read(path: Path, call: dict) -> dict:
    """What :func:`parse` takes from the file's name (its key's
    :data:`scarce.tasks.steps.NameRule`): the format (``fmt: auto`` guesses it from the name),
    gzip, and the ``source`` the pairs are listed under when none is given (the name itself)."""
    return {"format": detect_format(path, call.get("fmt", "auto")),
            "gzip": name_rules.gzip_by_name(path),
            "source": Path(path).name if call.get("source") is None else None}


@step("relations-parse", files={"path": _name_read}, runtime=("enough_for",),
      run_name=_parse_name)
def parse(path: str, fmt: str, relation_types: list[str] | None, include_other: bool,
          directed: bool, source: str | None = None,
          enough_for: dict | None = None) -> pd.DataFrame:
    """One file of entity-pair mentions -> the mentions table.

    Parameters
    ----------
    path : SemEval-2010 Task 8 file, or JSON Lines (``tasks.readers.jsonl``).
    fmt : "auto" or a format of :data:`READERS`
    relation_types : keep only these (undirected) types; None keeps every type.
    include_other : keep the pairs labelled ``Other``.
    directed : gold classes are the directed labels (``Cause-Effect(e2,e1)``, 18 types
        plus Other) instead of the undirected relation types.
    source : the name the pairs are listed under; None: the file's name (then in the key,
        :func:`_name_read`).  The flows pass the file's name.
    enough_for : the parameters of :meth:`RelationDiscovery.check_n_pairs` when this file
        is the whole data: its pairs must suffice for them, checked here so that a file too
        small for the method is refused before its table is stored.  A check, not part of
        what the step computes: left out of its key (a runtime parameter).

    Returns
    -------
    DataFrame with :data:`MENTION_COLUMNS`; ``id`` as a string, ``source`` the file name,
    ``tokens`` the sentence as a list of words, ``gold`` the class used by ``evaluate`` (missing
    when the file has no labels).
    """
    kind = detect_format(path, fmt)
    if kind not in READERS:
        raise InputError(f"unknown format {fmt!r} (auto, {', '.join(READERS)})", key="format")
    frame = READERS[kind](path)
    try:
        frame = mentions_table(frame, Path(path).name if source is None else source,
                               relation_types=relation_types, include_other=include_other,
                               directed=directed)
    except ValueError as exc:
        raise InputError(str(exc), path=path) from None
    if enough_for is not None:
        try:
            RelationDiscovery(**enough_for).check_n_pairs(len(frame))
        except TooFewPairsError as exc:
            raise InputError(str(exc), path=path, key=exc.param) from None
    return frame


def mentions_table(frame: pd.DataFrame, source: str, *, relation_types: list[str] | None,
                   include_other: bool, directed: bool) -> pd.DataFrame:
    """A reader's table (``read_semeval``, ``read_jsonl``, ``read_records``) as the mentions
    table of :func:`parse` (its options, the same meaning); ``ValueError`` when no pair is
    left."""
    frame = frame.copy()
    frame["id"] = frame["id"].astype(str)
    frame.insert(0, "source", source)
    relation = frame["relation"]
    if relation_types is None:
        keep = pd.Series(True, index=frame.index)
    else:
        keep = relation.isin(list(relation_types))
    other = relation == "Other"
    keep = (keep | other) if include_other else (keep & ~other)
    frame = frame[keep.to_numpy()].reset_index(drop=True)
    if frame.empty:
        raise ValueError(f"no pairs left after keeping types {relation_types or 'all'} "
                         f"(include_other={include_other})")
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
    (:func:`scarce.algorithms.relations.contexts.build_contexts`).

    ``vocabulary`` has ``feature`` (column index), ``word``, ``df`` (pairs containing it) and
    ``idf`` (the tf-idf weight of the word; NaN with binary weighting); ``contexts`` has the
    pair ``source``, ``id`` and its context words joined by spaces.
    """
    docs = context_docs(mentions, window=window, lowercase=lowercase,
                        position_tags=position_tags, drop_punctuation=DROP_PUNCTUATION)
    try:
        X, vocab, idf = fit_contexts(docs, weighting=weighting, min_df=min_df)
    except ValueError as exc:
        raise InputError(f"window {window}: {exc}", key="min_df") from None
    df = np.diff(sp.csc_matrix(X).indptr).astype(np.int64)
    vocabulary = pd.DataFrame({"feature": np.arange(len(vocab), dtype=np.int64),
                               "word": vocab.astype(str), "df": df,
                               "idf": np.full(len(vocab), np.nan) if idf is None else idf})
    contexts = pd.DataFrame({"source": mentions["source"], "id": mentions["id"],
                             "context": [" ".join(d) for d in docs]})
    return {"X": X, "vocabulary": vocabulary, "contexts": contexts}


def context_docs(mentions: pd.DataFrame, *, window: str, lowercase: bool, position_tags: bool,
                 drop_punctuation: bool) -> list[list[str]]:
    """The context words of every pair of a mentions table
    (:func:`~scarce.algorithms.relations.contexts.pair_contexts`); the training run and the apply
    flow both make their contexts here."""
    e1, e2 = spans(mentions)
    return pair_contexts([list(t) for t in mentions["tokens"]], e1, e2, window,
                         lowercase=lowercase, position_tags=position_tags,
                         drop_punctuation=drop_punctuation)


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
    """The columns of a unit: the first ``n_features`` ranked words, or every column; in
    column order either way, as the estimator clusters them (a subset is a set: k-means
    follows the floating-point sums over the columns, so the same words in another order
    could end in another partition)."""
    if all_features:
        return np.arange(X.shape[1])
    if ranking is None:
        raise ValueError("a ranking is needed unless all_features is set")
    return np.sort(ranking["feature"].to_numpy(np.intp)[: int(n_features)])


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


# -- the model and the assignments -------------------------------------------------------------
def cluster_table(words: pd.DataFrame, labels: np.ndarray, k: int) -> pd.DataFrame:
    """One row per cluster: ``cluster``, ``size`` (pairs of ``labels``), ``label`` (its DCM
    words joined by ", "), ``words`` and ``weights`` (lists, largest weight first) from the
    long table of :func:`label_clusters`."""
    sizes = np.bincount(np.asarray(labels, np.int64), minlength=int(k))
    by_cluster = {int(c): g.sort_values("rank") for c, g in words.groupby("cluster")}
    rows = []
    for c in range(int(k)):
        g = by_cluster.get(c)
        ws = [] if g is None else [str(w) for w in g["word"]]
        wts = [] if g is None else [float(w) for w in g["weight"]]
        rows.append((c, int(sizes[c]), ", ".join(ws), ws, wts))
    return pd.DataFrame(rows, columns=CLUSTER_COLUMNS)


#: Example pairs per cluster in the run's ``clusters.parquet`` and its labels table.
N_EXAMPLES = 3


def example_text(head: str, tail: str, sentence: str) -> str:
    """A pair as a reader meets it: its two entities, then the sentence."""
    return f"{head} … {tail}: {sentence}"


@step("relations-examples", inputs=("clusters", "assigned"), run_name="examples per cluster")
def cluster_examples(clusters: pd.DataFrame, assigned: pd.DataFrame,
                     n_examples: int) -> pd.DataFrame:
    """``clusters`` (:func:`cluster_table`) with ``examples``: for each cluster, the
    ``n_examples`` pairs of ``assigned`` (:func:`assign_pairs`) nearest its centroid, nearest
    first (ties by file and id), each as :func:`example_text`: what a reader wants beside a
    cluster's label words.  A cluster no pair is nearest to has none."""
    ordered = assigned.sort_values(["cluster", "distance", "source", "id"], kind="stable")
    nearest = ordered.groupby("cluster", sort=False).head(int(n_examples))
    by_cluster = {int(c): [example_text(r.head, r.tail, r.sentence) for r in g.itertuples()]
                  for c, g in nearest.groupby("cluster", sort=False)}
    out = clusters.copy()
    out["examples"] = [by_cluster.get(int(c), []) for c in out["cluster"]]
    return out


@step("relations-model", inputs=("X", "ranking", "labels", "words"),
      outputs=("features", "centroids", "clusters"), run_name="model k={k} F={n_features}")
def build_model(X: sp.csr_matrix, ranking: pd.DataFrame, labels: np.ndarray,
                words: pd.DataFrame, k: int, n_features: int, params: dict) -> dict:
    """What applying the run needs besides its vocabulary: the selected words, the centroids
    of the final clustering and its clusters (:meth:`RelationDiscovery.centroids`).

    ``features``: the first ``n_features`` rows of the ranking (``rank``, ``feature``,
    ``word``, ``score``, ``df``) in column order, the order k-means clustered them in
    (:func:`_features`).
    ``centroids``: one row per (cluster, selected word): ``cluster``, ``rank`` (the word's
    position in ``features``), ``feature``, ``word`` and ``value``, the centroid's coordinate
    (NaN for a cluster k-means left empty).  ``clusters``: :func:`cluster_table`.
    """
    features = ranking.iloc[: int(n_features)].sort_values("feature").reset_index(drop=True)
    feats = features["feature"].to_numpy(np.intp)
    centers = RelationDiscovery(**params).centroids(X, feats, labels, k)
    k, size = centers.shape
    centroids = pd.DataFrame({
        "cluster": np.repeat(np.arange(k, dtype=np.int64), size),
        "rank": np.tile(np.arange(size, dtype=np.int64), k),
        "feature": np.tile(feats.astype(np.int64), k),
        "word": np.tile(features["word"].to_numpy(dtype=object), k),
        "value": centers.ravel(),
    })
    return {"features": features, "centroids": centroids,
            "clusters": cluster_table(words, labels, k)}


def centers_matrix(centroids: pd.DataFrame, n_clusters: int, n_features: int) -> np.ndarray:
    """The centroids table of :func:`build_model` as a (n_clusters, n_features) array."""
    c = centroids["cluster"].to_numpy(np.int64)
    r = centroids["rank"].to_numpy(np.int64)
    out = np.zeros((int(n_clusters), int(n_features)))
    seen = np.zeros(out.shape, dtype=np.int64)
    if c.size and (c.min() < 0 or c.max() >= n_clusters or r.min() < 0
                   or r.max() >= n_features):
        raise ValueError(f"centroid cells outside {n_clusters} clusters x {n_features} words")
    np.add.at(seen, (c, r), 1)
    if not (seen == 1).all():
        raise ValueError(f"the centroids table must hold each of the {n_clusters} x "
                         f"{n_features} (cluster, rank) cells once, got {len(centroids)} rows")
    out[c, r] = centroids["value"].to_numpy(np.float64)
    return out


@step("relations-assign", inputs=("mentions", "vocabulary", "features", "centroids", "clusters"),
      run_name="assign nearest cluster")
def assign_pairs(mentions: pd.DataFrame, vocabulary: pd.DataFrame, features: pd.DataFrame,
                 centroids: pd.DataFrame, clusters: pd.DataFrame, contexts: dict,
                 params: dict) -> pd.DataFrame:
    """Each pair's cluster: the nearest centroid of the model (one function for the training
    run's assignments and for ``apply-relations``).

    The pair's context (``contexts``: ``window``, ``lowercase``, ``position_tags``,
    ``drop_punctuation``, ``weighting``) is weighted with the model's vocabulary and idf
    (:func:`~scarce.algorithms.relations.contexts.transform_contexts`), then assigned by
    :meth:`RelationDiscovery.assign` (``params``: its ``row_norm``).  A pair depends on
    nothing but itself and the model.

    Returns
    -------
    DataFrame with :data:`ASSIGNMENT_COLUMNS`: ``source`` (file name) and ``id`` (the pair),
    ``sentence`` (tokens joined by spaces), ``head`` and ``tail`` (the words of the first
    and second entity: SemEval's e1 and e2), ``cluster``, ``label`` (its DCM words),
    ``distance`` (to its centroid), ``n_words`` (selected words in the pair's context; 0:
    the pair has nothing to go by and gets the centroid nearest the origin) and ``gold``
    (missing when the input has no label).
    """
    docs = context_docs(mentions, window=contexts["window"], lowercase=contexts["lowercase"],
                        position_tags=contexts["position_tags"],
                        drop_punctuation=contexts["drop_punctuation"])
    X = transform_contexts(docs, vocabulary["word"].to_numpy(dtype=object),
                           vocabulary["idf"].to_numpy(np.float64),
                           weighting=contexts["weighting"])
    feats = features["feature"].to_numpy(np.intp)
    centers = centers_matrix(centroids, len(clusters), len(features))
    labels, distances = RelationDiscovery(**params).assign(X, feats, centers)
    tokens = [list(t) for t in mentions["tokens"]]

    def words(start: str, end: str) -> list[str]:
        return [" ".join(t[a:b]) for t, a, b in zip(
            tokens, mentions[start].to_numpy(), mentions[end].to_numpy(), strict=True)]

    return pd.DataFrame({
        "source": mentions["source"].astype(str).to_numpy(),
        "id": mentions["id"].astype(str).to_numpy(),
        "sentence": [" ".join(t) for t in tokens],
        "head": words("e1_start", "e1_end"),
        "tail": words("e2_start", "e2_end"),
        "cluster": labels,
        "label": clusters["label"].to_numpy(dtype=object)[labels],
        "distance": distances,
        "n_words": np.diff(X[:, feats].tocsr().indptr).astype(np.int64),
        "gold": mentions["gold"].to_numpy(dtype=object),
    })


MODEL_PARTS = ("vocabulary", "features", "centroids", "clusters")
"""The Parquet files of a model folder besides ``model.json`` (``<part>.parquet``)."""
_MODEL_COLUMNS = {
    "vocabulary": ["feature", "word", "df", "idf"],
    "features": ["rank", "feature", "word"],
    "centroids": ["cluster", "rank", "feature", "word", "value"],
    "clusters": CLUSTER_COLUMNS,
}


@step("relations-read-model", files=dict.fromkeys(MODEL_PARTS, content_only), outputs=MODEL_PARTS,
      run_name="read model")
def read_model(vocabulary: str, features: str, centroids: str, clusters: str) -> dict:
    """The tables of a model folder (``outputs/model/`` of a relations run), checked.

    Each file must be the store-format Parquet a run wrote (its checksum intact) with its
    columns; the selected words must be words of the vocabulary and the centroids cover
    every (cluster, selected word).  Anything else is an :class:`InputError` naming the file.
    """
    paths = {"vocabulary": vocabulary, "features": features, "centroids": centroids,
             "clusters": clusters}
    out = {}
    for part, path in paths.items():
        table = read_parquet_entry(Path(path))
        missing = [c for c in _MODEL_COLUMNS[part]
                   if not isinstance(table, pd.DataFrame) or c not in table.columns]
        if missing:
            raise InputError(f"not the {part} table of a relations model (no column "
                             f"{missing[0]!r})", path=path)
        out[part] = table
    vocab, feats = out["vocabulary"], out["features"]
    if not np.array_equal(vocab["feature"].to_numpy(), np.arange(len(vocab))):
        raise InputError("vocabulary features must be 0, 1, 2, ...", path=vocabulary)
    index = feats["feature"].to_numpy(np.int64)
    if (len(index) == 0 or index.min() < 0 or index.max() >= len(vocab)
            or not np.array_equal(vocab["word"].to_numpy(dtype=object)[index],
                                  feats["word"].to_numpy(dtype=object))):
        raise InputError("the selected features are not words of the model's vocabulary",
                         path=features)
    if not np.array_equal(out["clusters"]["cluster"].to_numpy(), np.arange(len(out["clusters"]))):
        raise InputError("clusters must be 0, 1, 2, ...", path=clusters)
    try:
        centers_matrix(out["centroids"], len(out["clusters"]), len(feats))
    except ValueError as exc:
        raise InputError(str(exc), path=centroids) from None
    return out


@step("relations-apply-metrics", inputs=("assignments",), run_name="summarise")
def apply_metrics(assignments: list[pd.DataFrame], dataset: str) -> pd.DataFrame:
    """What an apply run did, in the metrics' long form (method ``nearest-centroid``):
    ``n_files``, ``n_pairs``, ``n_clusters`` (clusters that got a pair), ``no_words`` (pairs
    with no selected word) and, when every pair has a gold label, the clustering's
    ``accuracy``, ``ari`` and ``v_measure`` against it (as the training run scores its own)."""
    frame = (pd.concat(assignments, ignore_index=True) if assignments
             else pd.DataFrame({"cluster": [], "n_words": [], "gold": []}))
    rows = [("n_files", len(assignments)), ("n_pairs", len(frame)),
            ("n_clusters", frame["cluster"].nunique()),
            ("no_words", int((frame["n_words"] == 0).sum()))]
    gold = frame["gold"]
    if len(frame) and not gold.isna().any():
        from scarce.algorithms.metrics.clustering import clustering_scores  # (see evaluate)

        s = clustering_scores(gold.astype(str).to_numpy(), frame["cluster"].to_numpy())
        rows += [(m, s[m]) for m in ("accuracy", "ari", "v_measure")]
    return pd.DataFrame({"dataset": dataset, "method": "nearest-centroid",
                         "metric": [m for m, _ in rows],
                         "value": [float(v) for _, v in rows]})


# -- baselines and evaluation -----------------------------------------------------------------
@step("relations-hasegawa", inputs=("mentions",), run_name="hasegawa k={k}")
def hasegawa(mentions: pd.DataFrame, k: int, window: str, lowercase: bool) -> np.ndarray:
    """Hasegawa et al. (2004): tf-idf between-words, cosine, complete linkage cut at k."""
    import scarce.algorithms.relations.baselines as baselines_mod  # (see evaluate)

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
    # The baselines' and the scores' modules (SciPy's hierarchy and optimize, scikit-learn's
    # metrics) are imported by the steps that use them: the module's other users, a loaded
    # model assigning new pairs among them, need none of them.
    from scarce.algorithms.metrics.clustering import clustering_scores

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


def label_rows(words: pd.DataFrame, examples: pd.DataFrame | None = None) -> list[dict]:
    """One row per cluster: size and its DCM words (for the table artifact), and the pairs
    nearest its centroid (``examples``: :func:`cluster_examples`), if given."""
    shown = {} if examples is None else {
        int(r.cluster): "  ·  ".join(r.examples) for r in examples.itertuples()}
    out = []
    for c, g in words.groupby("cluster", sort=True):
        g = g.sort_values("rank")
        row = {"cluster": int(c), "size": int(g["size"].iloc[0]),
               "words": ", ".join(g["word"]),
               "weights": ", ".join(f"{w:.3f}" for w in g["weight"])}
        if examples is not None:
            row["examples"] = shown.get(int(c), "")
        out.append(row)
    return out
