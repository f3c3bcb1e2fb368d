"""StRip's Prefect steps: splits -> preprocess -> grow -> prune -> optimize -> evaluate.

Stoyanov and Cardie, "Partially Supervised Coreference Resolution for Opinion Summarization
through Structured Rule Learning", EMNLP 2006.  Thin wrappers: the rule learner is
:mod:`algorithms.strip.ripper` (over :mod:`algorithms.strip.closure`), the pair features
:mod:`algorithms.strip.features`, the scores :mod:`algorithms.metrics.coref` and the reader
:mod:`tasks.readers.conllu`.

Three training variants share one code path (:data:`VARIANTS`):

``ripper``
    plain RIPPER (no closure) on the labelled pairs only, the paper's baseline;
``strip-labeled``
    StRip (closure coverage) on the labelled pairs only (pairs of two source NPs);
``strip-partial``
    StRip on all pairs with partial supervision: pairs with an unknown label (at least one NP is
    not a source) are never counted but take part in the closure.

``grow``, ``prune`` and ``optimize`` are RIPPER's three phases as separate steps, each writing its
rule table to the store.  ``grow`` also stores the state of its random generator, which
``optimize`` continues from, so the three steps give exactly the rules of
``StRip(random_state=seed).fit`` on the same pairs.  Training times are ``timings`` parts
(volatile); the metrics table never holds a time.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

import algorithms.metrics.coref as coref_metrics
import algorithms.strip.features as strip_features
import algorithms.strip.ripper as ripper
import tasks.readers.conllu as conllu
from algorithms.strip.closure import PairGraph
from tasks.errors import InputError
from tasks.steps import step

# variant -> (closure coverage, train on: "labeled" pairs only or "all" pairs)
VARIANTS = {
    "ripper": (False, "labeled"),
    "strip-labeled": (True, "labeled"),
    "strip-partial": (True, "all"),
}
PAIR_KEYS = ["doc", "mention_i", "mention_j", "label"]
MENTION_KEYS = ["doc", "mention", "entity", "source", "sent", "position_start", "position_end",
                "position_head"]
DOC_SUFFIXES = (".conllu.gz", ".conllu")
SCORE_NAMES = ("muc", "b3", "ceaf_e", "pairwise")


# ----------------------------------------------------------------------------- documents
@step("strip-splits", files=("splits_file",))
def select_documents(splits_file: Path, splits: list[str]) -> pd.DataFrame:
    """The documents of the requested splits, from a ``doc_id <TAB> split`` file (GUM's).

    Returns
    -------
    DataFrame
        ``doc_id``, ``split``, sorted by split (in the order requested) and document id.
    """
    try:
        table = pd.read_csv(splits_file, sep="\t", dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(f"not a tab-separated splits file ({exc})", path=splits_file) from None
    missing = {"doc_id", "split"} - set(table.columns)
    if missing:
        raise InputError(f"splits file lacks columns {sorted(missing)}; expected a header "
                         "'doc_id<TAB>split'", path=splits_file, line=1)
    dup = table["doc_id"].duplicated()
    if dup.any():
        line = int(np.flatnonzero(dup.to_numpy())[0]) + 2
        raise InputError(f"document {table['doc_id'][dup].iloc[0]!r} listed twice",
                         path=splits_file, line=line)
    order = {s: k for k, s in enumerate(splits)}
    table = table[table["split"].isin(order)].copy()
    table["_order"] = table["split"].map(order)
    table = table.sort_values(["_order", "doc_id"], kind="stable").drop(columns="_order")
    return table.reset_index(drop=True)[["doc_id", "split"]]


def document_files(documents: pd.DataFrame, data_dir: Path,
                   splits: dict[str, Sequence[str]], splits_file: Path | None = None
                   ) -> dict[str, list[Path]]:
    """The CoNLL-U file of every listed document present in ``data_dir``, per role.

    ``splits`` maps a role (``train``, ``test``) to the split names it takes.  Documents listed
    in the splits file but absent from the folder are skipped (the bundled data is a part of
    GUM); a role left without documents is an error.
    """
    if not Path(data_dir).is_dir():
        raise InputError("data folder not found", path=data_dir, key="data_dir")
    out: dict[str, list[Path]] = {}
    for role, names in splits.items():
        files = []
        for doc in documents.loc[documents["split"].isin(list(names)), "doc_id"]:
            for suffix in DOC_SUFFIXES:
                p = Path(data_dir) / f"{doc}{suffix}"
                if p.is_file():
                    files.append(p)
                    break
        if not files:
            raise InputError(f"no document of split(s) {list(names)} found in {data_dir} "
                             f"(names: <doc_id>.conllu[.gz])", path=splits_file,
                             key=f"{role}_splits")
        out[role] = files
    return out


# ----------------------------------------------------------------------------- preprocess
def _source_seed(seed: int, doc: str) -> np.random.RandomState:
    """A generator for one document's source draw: independent of the other documents."""
    ss = np.random.SeedSequence([int(seed), zlib.crc32(str(doc).encode())])
    return np.random.RandomState(ss.generate_state(1)[0])


@step(
    "strip-preprocess",
    files=("path",),
    outputs=("mentions", "pairs"),
    run_name="preprocess {path.name}",
)
def preprocess(
    path: Path,
    window: int,
    max_sentence_distance: int | None,
    source_kind: str,
    etypes: list[str],
    fraction: float | None,
    seed: int | None,
) -> dict:
    """Mentions, candidate pairs, their Ng and Cardie (2002) features and labels, for one file.

    Parameters
    ----------
    path : Path
        A CoNLL-U file with CorefUD ``Entity=`` annotations (one or more documents).
    window : int
        Pairs of mentions at most this many mentions apart.
    max_sentence_distance : int or None
        And at most this many sentences apart (None: no limit).
    source_kind : {"etype", "fraction"}
        Labelled ("source") mentions: those of entities whose type is in ``etypes``, or a seeded
        ``fraction`` of the entities of each document.
    seed : int or None
        Seeds the ``fraction`` draw (per document: seed and document id).

    Returns
    -------
    dict
        ``mentions``: ``doc, mention, entity, source, sent, position_start, position_end,
        position_head``.  ``pairs``: ``doc, mention_i, mention_j, label`` (1 / 0 for two sources,
        -1 unknown) then the features of :func:`algorithms.strip.features.pair_features`.
    """
    tokens, mentions = conllu.read_conllu(path)
    if source_kind == "etype":
        sources = strip_features.source_mask(mentions, etypes=tuple(etypes))
    elif source_kind == "fraction":
        sources = np.zeros(len(mentions), dtype=bool)
        for doc, rows in mentions.groupby("doc", sort=False).indices.items():
            sources[rows] = strip_features.source_mask(
                mentions.iloc[rows], fraction=fraction, random_state=_source_seed(seed, doc))
    else:
        raise InputError(f"unknown source kind {source_kind!r} (etype, fraction)",
                         key="sources.kind")
    try:
        pairs, X, y = strip_features.build_pairs(
            tokens, mentions, max_mention_distance=window,
            max_sentence_distance=max_sentence_distance, sources=sources)
    except ValueError as exc:
        raise InputError(f"cannot build mention pairs: {exc}", path=path) from None
    pairs = pairs.reset_index(drop=True)
    pairs["label"] = y
    table = pd.concat([pairs, X.reset_index(drop=True)], axis=1)
    men = mentions.assign(source=sources)[MENTION_KEYS].reset_index(drop=True)
    men["entity"] = men["entity"].astype(str)
    return {"mentions": men, "pairs": table}


# ----------------------------------------------------------------------------- training
def _variant(variant: str) -> tuple[bool, str]:
    if variant not in VARIANTS:
        raise InputError(f"unknown variant {variant!r} (known: {', '.join(VARIANTS)})",
                         key="variants")
    return VARIANTS[variant]


def training_pairs(train: list[pd.DataFrame], variant: str) -> pd.DataFrame:
    """The pairs a variant learns from: the labelled ones, or all (partial supervision)."""
    table = pd.concat(train, ignore_index=True)
    if _variant(variant)[1] == "labeled":
        table = table[table["label"].to_numpy() >= 0].reset_index(drop=True)
    return table


def features(pairs: pd.DataFrame) -> pd.DataFrame:
    """The feature columns of a pair table."""
    return pairs.drop(columns=PAIR_KEYS)


def _problem(train: list[pd.DataFrame], variant: str, loss_ratio: float,
             max_thresholds: int) -> ripper.RuleProblem:
    table = training_pairs(train, variant)
    if not (table["label"] == 1).any():
        raise InputError(f"variant {variant}: no coreferent labelled pair among the "
                         f"{len(table)} training pairs (more documents or sources needed)",
                         key="train_splits")
    return ripper.make_problem(
        features(table), table["label"].to_numpy(), table["doc"].to_numpy(),
        table["mention_i"].to_numpy(), table["mention_j"].to_numpy(),
        closure=_variant(variant)[0], loss_ratio=loss_ratio, max_thresholds=max_thresholds)


def _timing(variant: str, phase: str, setup: float, seconds: float,
            problem: ripper.RuleProblem, rules: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "method": [variant], "phase": [phase], "setup_seconds": [setup], "seconds": [seconds],
        "n_pairs": [problem.n_pairs], "n_labeled": [int(np.count_nonzero(problem.y >= 0))],
        "n_rules": [int(rules.loc[~rules["pruned"], "rule_id"].nunique())],
    })


def _rng_state(rng: np.random.RandomState) -> np.ndarray:
    """A RandomState's full state as float64 (every part is exact in float64)."""
    _, keys, pos, has_gauss, cached = rng.get_state(legacy=True)
    return np.concatenate([[pos, has_gauss, cached], keys.astype(np.float64)])


def _rng_from_state(state: np.ndarray) -> np.random.RandomState:
    rng = np.random.RandomState()
    rng.set_state(("MT19937", state[3:].astype(np.uint32), int(state[0]), int(state[1]),
                   float(state[2])))
    return rng


@step(
    "strip-grow",
    inputs=("train",),
    outputs=("rules", "rng", "timings"),
    volatile=("timings",),
    run_name="grow {variant}",
)
def grow(train: list, variant: str, loss_ratio: float, max_thresholds: int, dl_surplus: float,
         seed: int) -> dict:
    """RIPPER's building stage (IREP*) with the variant's coverage (Cohen 1995, section 3).

    Returns the grown rule table (antecedents removed by pruning marked ``pruned``), the state
    of the random generator after growing (``optimize`` continues from it) and the timing.
    """
    t0 = time.perf_counter()
    problem = _problem(train, variant, loss_ratio, max_thresholds)
    t1 = time.perf_counter()
    rng = np.random.RandomState(seed)
    rules = ripper.grow(problem, dl_surplus=dl_surplus, random_state=rng)
    t2 = time.perf_counter()
    return {"rules": rules, "rng": _rng_state(rng),
            "timings": _timing(variant, "grow", t1 - t0, t2 - t1, problem, rules)}


@step(
    "strip-prune",
    inputs=("train", "rules"),
    outputs=("rules", "timings"),
    volatile=("timings",),
    run_name="prune {variant}",
)
def prune(train: list, rules: pd.DataFrame, variant: str, loss_ratio: float,
          max_thresholds: int) -> dict:
    """Drop pruned antecedents, then rules whose deletion lowers the description length."""
    t0 = time.perf_counter()
    problem = _problem(train, variant, loss_ratio, max_thresholds)
    t1 = time.perf_counter()
    out = ripper.prune(problem, rules)
    t2 = time.perf_counter()
    return {"rules": out, "timings": _timing(variant, "prune", t1 - t0, t2 - t1, problem, out)}


@step(
    "strip-optimize",
    inputs=("train", "rules", "rng"),
    outputs=("rules", "timings"),
    volatile=("timings",),
    run_name="optimize {variant}",
)
def optimize(train: list, rules: pd.DataFrame, rng: np.ndarray, variant: str,
             loss_ratio: float, max_thresholds: int, dl_surplus: float, k_optimize: int) -> dict:
    """RIPPER's optimisation phase, ``k_optimize`` rounds (RIPPERk), continuing grow's RNG."""
    t0 = time.perf_counter()
    problem = _problem(train, variant, loss_ratio, max_thresholds)
    t1 = time.perf_counter()
    out = ripper.optimize(problem, rules, k=k_optimize, dl_surplus=dl_surplus,
                          random_state=_rng_from_state(rng))
    t2 = time.perf_counter()
    return {"rules": out,
            "timings": _timing(variant, "optimize", t1 - t0, t2 - t1, problem, out)}


# ----------------------------------------------------------------------------- evaluation
def cluster_mentions(rules: pd.DataFrame, pairs: pd.DataFrame,
                     mentions: pd.DataFrame) -> np.ndarray:
    """Chain label of every mention: single-link clustering of the pairs the rules mark positive.

    Mentions in no positive pair are singletons.  Labels are integers unique over all documents.
    """
    return chains(ripper.rules_fire(rules, features(pairs)), pairs, mentions)


def chains(positive: np.ndarray, pairs: pd.DataFrame, mentions: pd.DataFrame) -> np.ndarray:
    """Chain label of every mention: single-link clustering of the ``positive`` pairs.

    ``positive`` is a boolean mask over the rows of ``pairs`` (any classifier's decisions).
    Mentions in no positive pair are singletons.  Labels are integers unique over all documents.
    """
    positive = np.asarray(positive, dtype=bool)
    graph = PairGraph(pairs["doc"].to_numpy(), pairs["mention_i"].to_numpy(),
                      pairs["mention_j"].to_numpy(), closure=True)
    lab = graph.labels(positive)
    ends = pd.DataFrame({
        "doc": np.concatenate([pairs["doc"].to_numpy(), pairs["doc"].to_numpy()]),
        "mention": np.concatenate([pairs["mention_i"].to_numpy(),
                                   pairs["mention_j"].to_numpy()]),
        "label": lab[np.concatenate([graph.u, graph.v])],
    }).drop_duplicates(["doc", "mention"])
    idx = pd.MultiIndex.from_frame(ends[["doc", "mention"]])
    rows = idx.get_indexer(pd.MultiIndex.from_frame(mentions[["doc", "mention"]]))
    out = np.where(rows >= 0, ends["label"].to_numpy()[np.maximum(rows, 0)], -1)
    alone = out < 0
    out[alone] = graph.n_nodes + np.arange(int(alone.sum()))
    return out.astype(np.int64)


def _long_scores(scores: pd.DataFrame, prefix: str) -> dict[str, float]:
    return {f"{prefix}{name}_{c}": float(scores.loc[name, c])
            for name in SCORE_NAMES for c in ("p", "r", "f")}


@step(
    "strip-evaluate",
    inputs=("test_pairs", "test_mentions", "rules", "timings"),
    outputs=("metrics", "scores", "clusters", "coverage", "timings"),
    volatile=("timings",),
)
def evaluate(test_pairs: list, test_mentions: list, rules: dict, timings: dict,
             dataset: str) -> dict:
    """Apply each variant's rules to the test pairs, cluster (single link) and score.

    Scores are MUC, B³, CEAF-e and pairwise P / R / F1 over the source mentions (the non-source
    NPs are clustered, then removed before scoring, as Stoyanov and Cardie 2006), and the same
    over all mentions with the prefix ``all_``.

    Returns
    -------
    dict
        ``metrics`` (long: dataset, method, metric, value), ``scores`` (one row per method, the
        F1 columns over sources), ``clusters`` (doc, mention, method, cluster), ``coverage``
        (per method and rule, what the rule covers among the labelled test pairs, alone and after
        the closure: :func:`algorithms.strip.ripper.rule_coverage`) and ``timings`` (seconds per
        method and phase, volatile).
    """
    pairs = pd.concat(test_pairs, ignore_index=True)
    mentions = pd.concat(test_mentions, ignore_index=True)
    key = mentions["entity"].to_numpy()
    groups = mentions["doc"].to_numpy()
    source = mentions["source"].to_numpy(dtype=bool)
    rows, clusters, wide, coverage = [], [], [], []
    for method, table in rules.items():
        cov = ripper.rule_coverage(table, features(pairs), pairs["label"].to_numpy(),
                                   pairs["doc"].to_numpy(), pairs["mention_i"].to_numpy(),
                                   pairs["mention_j"].to_numpy())
        coverage.append(cov.assign(method=method))
        response = cluster_mentions(table, pairs, mentions)
        values = {
            **_long_scores(coref_metrics.coref_scores(key, response, source, groups), ""),
            **_long_scores(coref_metrics.coref_scores(key, response, None, groups), "all_"),
            "n_rules": float(table.loc[~table["pruned"].astype(bool), "rule_id"].nunique()),
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
            ["method", *ripper.RULE_COVERAGE_COLUMNS]],
        "timings": times,
    }


def headline(metrics: pd.DataFrame) -> dict[str, float]:
    """B³ F1 and pairwise F1 over the sources of every method (the paper's two measures)."""
    keep = metrics[metrics["metric"].isin(["b3_f", "pairwise_f"])]
    return {f"{r.dataset}/{r.method}/{r.metric}": float(r.value) for r in keep.itertuples()}


def rules_markdown(rule_tables: dict[str, pd.DataFrame], header: str = "") -> str:
    """The learned rule sets as markdown, one fenced block per method."""
    lines = [header, ""] if header else []
    for method, table in rule_tables.items():
        lines += [f"## {method}", "", "```", ripper.rules_to_text(table), "```", ""]
    return "\n".join(lines)
