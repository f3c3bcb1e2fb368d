"""StRip's Prefect steps: preprocess -> grow -> prune -> optimize -> evaluate -> write chains.

Kept as one module: StRip's steps are thin and share the pair tables they pass along.

Stoyanov and Cardie, "Partially Supervised Coreference Resolution for Opinion Summarization
through Structured Rule Learning", EMNLP 2006.  Thin wrappers: the rule learner is
:class:`algorithms.strip.ripper.StRip` (over :mod:`algorithms.strip.closure`), the pair features
:mod:`algorithms.strip.features`, the scores :mod:`algorithms.metrics.coref` and the reader
:mod:`tasks.readers.conllu`.

``grow``, ``prune`` and ``optimize`` call the estimator's step methods of the same names, each
writing its rule table to the store; the estimator is built from the variant's name
(:data:`algorithms.strip.ripper.VARIANTS`: ``ripper``, ``strip-labeled``, ``strip-partial``) and
the parameters the step uses, so a step's key holds only those.  ``grow`` also stores the state
of its random generator, which ``optimize`` continues from, so the three steps give exactly the
rules of ``StRip.fit`` on the same pairs.  Training times are ``timings`` parts (volatile); the
metrics table never holds a time.

What a run learned is used again by the ``apply-strip`` flow (``flows/apply_strip.py``):
``load_rules`` reads a variant's rule table from a run's ``outputs/model/``, ``preprocess`` is the
training step itself, ``apply_rules`` fires the rules on one file's pairs and clusters them by
single link (:func:`chains`, as ``evaluate`` does), ``write_predicted`` writes the chains into
the file's CoNLL-U, as the training run does for its test documents, and ``count_chains`` counts
them and, for the files that carry gold chains, scores them as ``evaluate`` does.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

import scarce.algorithms.metrics.coref as coref_metrics
import scarce.algorithms.strip.features as strip_features
import scarce.algorithms.strip.ripper as ripper
import scarce.tasks.readers.conllu as conllu
from scarce.algorithms.memory import HEADROOM, MemoryBudgetError, available_bytes, format_bytes
from scarce.algorithms.strip.closure import PairGraph
from scarce.tasks.errors import InputError
from scarce.tasks.readers import names as name_rules
from scarce.tasks.readers.table import read_delimited
from scarce.tasks.readers.text import check_no_gzip_twin
from scarce.tasks.steps import content_only, step
from scarce.tasks.store.encoding import read_parquet_entry

PAIR_KEYS = strip_features.PAIR_KEYS
MENTION_KEYS = strip_features.MENTION_KEYS
DOCUMENT_COLUMNS = ["role", "split", "doc_id", "file"]
DOC_SUFFIXES = (".conllu.gz", ".conllu")
SCORE_NAMES = ("muc", "b3", "ceaf_e", "pairwise")
CLUSTER_COLUMNS = ["doc", "mention", "method", "cluster"]
MODEL_VERSION = 1  # format of a strip run's outputs/model/ (model.json); see docs/strip.md


# ----------------------------------------------------------------------------- documents
def _read_splits(splits_file: Path) -> pd.DataFrame:
    """The ``doc_id`` and ``split`` columns of a tab-separated splits file, read as the table
    reader reads a TSV (:func:`tasks.readers.table.read_delimited`: UTF-8 and gzip errors
    named by their line, a row whose fields do not match the header's refused)."""
    if not Path(splits_file).is_file():  # gone since the config was checked, or a folder
        what = "a folder" if Path(splits_file).is_dir() else "not found"
        raise InputError(f"cannot read the splits file ({what})", path=splits_file,
                         key="splits_file")
    table, _ = read_delimited(splits_file, "\t", ["doc_id", "split"])
    missing = {"doc_id", "split"} - set(table.columns)
    if missing:
        raise InputError(f"splits file lacks columns {sorted(missing)}; expected a header "
                         "'doc_id<TAB>split'", path=splits_file, line=1)
    dup = table["doc_id"].duplicated()
    if dup.any():
        line = int(np.flatnonzero(dup.to_numpy())[0]) + 2
        raise InputError(f"document {table['doc_id'][dup].iloc[0]!r} listed twice",
                         path=splits_file, line=line)
    return table


def select_documents(splits_file: Path, data_dir: Path,
                     roles: dict[str, Sequence[str]]) -> pd.DataFrame:
    """The documents each role reads, from a ``doc_id <TAB> split`` file (GUM's).

    ``roles`` maps a role (``train``, ``test``) to the split names it takes.  Documents listed
    in the splits file but absent from ``data_dir`` (as ``<doc_id>.conllu[.gz]``) are skipped
    (the bundled data is a part of GUM); a role left without documents is an error, and so
    is a document there both plain and gzipped (which of the two to read is not guessed).  A plain
    function, not a step: the flow stores its table with :func:`record_documents` once every
    document has been read.

    Returns
    -------
    DataFrame
        ``role``, ``split``, ``doc_id`` and ``file`` (the path), per role in the order given,
        then by split (in the order listed) and document id.
    """
    table = _read_splits(splits_file)
    if not Path(data_dir).is_dir():
        raise InputError("data folder not found", path=data_dir, key="data_dir")
    out = []
    for role, names in roles.items():
        order = {s: k for k, s in enumerate(names)}
        part = table.assign(_order=table["split"].map(order)).dropna(subset="_order")
        part = part.sort_values(["_order", "doc_id"], kind="stable")
        for split, doc in zip(part["split"], part["doc_id"], strict=True):
            found = [p for p in (Path(data_dir) / f"{doc}{x}" for x in DOC_SUFFIXES)
                     if p.is_file()]
            check_no_gzip_twin(found, key="data_dir")
            if found:
                out.append((role, split, doc, found[0]))
        if not any(r[0] == role for r in out):
            raise InputError(f"no document of split(s) {list(names)} found in {data_dir} "
                             f"(names: <doc_id>.conllu[.gz])", path=splits_file,
                             key=f"{role}_splits")
    return pd.DataFrame(out, columns=DOCUMENT_COLUMNS)


def _conllu_name(path: Path, call: dict) -> dict:
    """What :func:`tasks.readers.conllu.read_conllu` takes from the file's name (the key's
    :data:`tasks.steps.NameRule` of the steps that read a CoNLL-U file)."""
    return name_rules.conllu(path)


# The splits file is not read here (the flow read it; ``documents`` is its table).
@step("strip-documents", files={"splits_file": content_only}, run_name="record documents")
def record_documents(splits_file: Path, documents: list[dict]) -> pd.DataFrame:
    """The run's document table (:func:`select_documents`, ``file`` as a name) for the store.

    The flow runs this step once every document has been read, so that a malformed CoNLL-U
    file leaves nothing in the store.  The splits file is not read again: it is an argument for
    its content hash, which keys the entry and lists the file among the run's inputs.
    """
    return pd.DataFrame(documents, columns=DOCUMENT_COLUMNS)


# ----------------------------------------------------------------------------- preprocess
@step(
    "strip-preprocess",
    files={"path": _conllu_name},
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
    """Mentions, candidate pairs, their Ng and Cardie (2002) features and labels, for one file:
    :func:`algorithms.strip.features.pair_table` of the file's frames.

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
    if source_kind not in strip_features.SOURCE_KINDS:
        raise InputError(f"unknown source kind {source_kind!r} (etype, fraction)",
                         key="sources.kind")
    try:
        men, table = strip_features.pair_table(
            tokens, mentions, window=window, max_sentence_distance=max_sentence_distance,
            source_kind=source_kind, etypes=etypes, fraction=fraction, seed=seed)
    except ValueError as exc:
        raise InputError(f"cannot build mention pairs: {exc}", path=path) from None
    return {"mentions": men, "pairs": table}


# ----------------------------------------------------------------------------- training
def features(pairs: pd.DataFrame) -> pd.DataFrame:
    """The feature columns of a pair table."""
    return pairs.drop(columns=PAIR_KEYS)


def pair_ends(pairs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Document and the two mention ids of every pair (``groups, mention_i, mention_j``)."""
    return pairs["doc"].to_numpy(), pairs["mention_i"].to_numpy(), pairs["mention_j"].to_numpy()


def _learner(variant: str, **params) -> ripper.StRip:
    try:
        return ripper.StRip.from_variant(variant, **params)
    except ValueError as exc:
        raise InputError(str(exc), key="variants") from None


#: What the training steps keep between them in this process: the training pairs of the files
#: last asked for, concatenated, and the problem last prepared from them.  grow, prune and
#: optimize of one model prepare the same problem from the same files (``StRip.fit`` prepares
#: it once for its three phases too), and every model reads the same files: read and prepared
#: once, not once per step.  Keyed by the files' paths (a store entry's path names its
#: content) and the parameters ``StRip.prepare`` reads.
_KEPT: dict = {}
_KEPT_LOCK = threading.Lock()


#: Bytes per training pair besides the pair table (docs/design/memory.md, "StRip's training
#: pairs"): per feature its encoded column and a working copy (int64 codes or float64 values,
#: 8 + 8), and per pair its label, document and mention codes and the closure's graph (14
#: int64) and the masks of the rules evaluated (one byte each; tens of rules are).
BYTES_PER_FEATURE = 16
BYTES_PER_PAIR = 14 * 8 + 64
#: The pair table's bytes per pair and column, by Arrow type (a string: its offset and a few
#: characters; a bool: one byte); it is held twice while the files are read and joined.
TABLE_BYTES = {"bool": 1, "string": 16, "large_string": 16}
TABLE_BYTES_OTHER = 8
TABLE_COPIES = 2


def training_memory(train: Sequence[str | Path]) -> tuple[int, int, int]:
    """``(pairs, features, bytes)`` of training on the pair tables ``train`` (store files),
    from their Parquet footers, nothing read: the formula of docs/design/memory.md."""
    import pyarrow.parquet as pq

    n_pairs, columns = 0, None
    for path in train:
        meta = pq.read_metadata(path)
        n_pairs += meta.num_rows
        if columns is None:
            schema = meta.schema.to_arrow_schema()
            columns = [(f.name, str(f.type)) for f in schema if f.name != "__index_level_0__"]
    columns = columns or []
    n_features = sum(name not in PAIR_KEYS for name, _ in columns)
    table = sum(TABLE_BYTES.get(kind, TABLE_BYTES_OTHER) for _, kind in columns)
    per_pair = TABLE_COPIES * table + BYTES_PER_FEATURE * n_features + BYTES_PER_PAIR
    return n_pairs, n_features, n_pairs * per_pair


def check_training_memory(train: Sequence[str | Path]) -> int:
    """Refuse, before the training pairs are read, training that would not fit in the memory
    available (:func:`algorithms.memory.available_bytes`: ``SCARCE_MEMORY_LIMIT_GB`` among
    others), as LEML and the relations flow refuse theirs; returns the bytes needed.

    Raises
    ------
    algorithms.memory.MemoryBudgetError
        One line: the pairs and features, the bytes needed and available, what to change.
    """
    n_pairs, n_features, need = training_memory(train)
    room = available_bytes()
    if need > HEADROOM * room:
        raise MemoryBudgetError(
            f"StRip's training pairs: {n_pairs:,} pairs x {n_features} features need about "
            f"{format_bytes(need)}, but only {format_bytes(room)} is available; train on fewer "
            "documents (train_splits), take fewer pairs (a smaller window or "
            "max_sentence_distance) or allow more memory (SCARCE_MEMORY_LIMIT_GB)")
    return need


def _prepare(model: ripper.StRip, train: list[str], variant: str) -> ripper.RuleProblem:
    """The estimator's problem over the training pairs of the store files ``train``, kept for
    the next step that asks for the same (see :data:`_KEPT`); training that would not fit in
    memory is refused before they are read (:func:`check_training_memory`)."""
    files = tuple(str(p) for p in train)
    key = (files, float(model.loss_ratio), int(model.max_thresholds),
           bool(model.use_unlabeled), bool(model.closure))
    with _KEPT_LOCK:
        if _KEPT.get("files") != files:
            _KEPT.clear()
            check_training_memory(files)
            _KEPT.update(files=files, table=pd.concat([read_parquet_entry(p) for p in files],
                                                      ignore_index=True))
        if _KEPT.get("key") != key:
            table = _KEPT["table"]
            problem = model.prepare(features(table), table["label"].to_numpy(),
                                    *pair_ends(table))
            _KEPT.update(key=key, problem=problem)
        problem = _KEPT["problem"]
    if problem.n_positive == 0:
        raise InputError(f"variant {variant}: no coreferent labelled pair among the "
                         f"{problem.n_pairs} training pairs (more documents or sources needed)",
                         key="train_splits")
    return problem


def release_training_pairs() -> None:
    """Drop the training pairs and problem the steps keep between them (:data:`_KEPT`)."""
    with _KEPT_LOCK:
        _KEPT.clear()


def _timing(variant: str, phase: str, seconds: tuple[float, float, float],
            problem: ripper.RuleProblem, rules: pd.DataFrame) -> pd.DataFrame:
    """One row of the (volatile) timings table: set-up and phase seconds, sizes."""
    t0, t1, t2 = seconds
    return pd.DataFrame({
        "method": [variant], "phase": [phase], "setup_seconds": [t1 - t0], "seconds": [t2 - t1],
        "n_pairs": [problem.n_pairs], "n_labeled": [problem.n_labeled],
        "n_rules": [ripper.rule_count(rules)],
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
    paths=("train",),
    outputs=("rules", "rng"),
    volatile=("timings",),
    run_name="grow {variant} L={loss_ratio:g}",
)
def grow(train: list, variant: str, loss_ratio: float, max_thresholds: int, dl_surplus: float,
         seed: int) -> dict:
    """:meth:`StRip.grow <algorithms.strip.ripper.StRip.grow>`: RIPPER's building stage.

    Returns the grown rule table (antecedents removed by pruning marked ``pruned``), the state
    of the random generator after growing (``optimize`` continues from it) and the timing.
    """
    model = _learner(variant, loss_ratio=loss_ratio, max_thresholds=max_thresholds,
                     dl_surplus=dl_surplus, random_state=seed)
    t0 = time.perf_counter()
    problem = _prepare(model, train, variant)
    t1 = time.perf_counter()
    rules, rng = model.grow(problem)
    t2 = time.perf_counter()
    return {"rules": rules, "rng": _rng_state(rng),
            "timings": _timing(variant, "grow", (t0, t1, t2), problem, rules)}


@step(
    "strip-prune",
    inputs=("rules",),
    paths=("train",),
    outputs=("rules",),
    volatile=("timings",),
    run_name="prune {variant} L={loss_ratio:g}",
)
def prune(train: list, rules: pd.DataFrame, variant: str, loss_ratio: float,
          max_thresholds: int) -> dict:
    """:meth:`StRip.prune <algorithms.strip.ripper.StRip.prune>`: drop pruned antecedents, then
    the rules whose deletion lowers the description length."""
    model = _learner(variant, loss_ratio=loss_ratio, max_thresholds=max_thresholds)
    t0 = time.perf_counter()
    problem = _prepare(model, train, variant)
    t1 = time.perf_counter()
    out = model.prune(problem, rules)
    t2 = time.perf_counter()
    return {"rules": out, "timings": _timing(variant, "prune", (t0, t1, t2), problem, out)}


@step(
    "strip-optimize",
    inputs=("rules", "rng"),
    paths=("train",),
    outputs=("rules",),
    volatile=("timings",),
    run_name="optimize {variant} L={loss_ratio:g}",
)
def optimize(train: list, rules: pd.DataFrame, rng: np.ndarray, variant: str,
             loss_ratio: float, max_thresholds: int, dl_surplus: float, k_optimize: int) -> dict:
    """:meth:`StRip.optimize <algorithms.strip.ripper.StRip.optimize>`: ``k_optimize`` rounds
    of RIPPER's optimisation, continuing grow's random generator."""
    model = _learner(variant, loss_ratio=loss_ratio, max_thresholds=max_thresholds,
                     dl_surplus=dl_surplus, k_optimize=k_optimize)
    t0 = time.perf_counter()
    problem = _prepare(model, train, variant)
    t1 = time.perf_counter()
    out = model.optimize(problem, rules, _rng_from_state(rng))
    t2 = time.perf_counter()
    return {"rules": out,
            "timings": _timing(variant, "optimize", (t0, t1, t2), problem, out)}


# ----------------------------------------------------------------------------- evaluation
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
    (:func:`algorithms.metrics.coref.coref_scores`).
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
        the closure: :func:`algorithms.strip.ripper.rule_coverage`) and ``timings`` (seconds per
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
        cov = ripper.rule_coverage(table, X, pairs["label"].to_numpy(), *pair_ends(pairs))
        coverage.append(cov.assign(method=method))
        response = chains(ripper.rules_fire(table, X), pairs, mentions)
        values = {
            **chain_scores(key, response, source, groups),
            "n_rules": float(ripper.rule_count(table)),
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
            ["method", *ripper.RULE_COVERAGE_COLUMNS]],
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


# ----------------------------------------------------------------------------- outputs
def rules_text(coverage: pd.DataFrame, methods: Sequence[str], header: str) -> str:
    """The learned rules of every method as text, each with what it covers on the test pairs.

    Parameters
    ----------
    coverage : DataFrame
        ``evaluate``'s coverage table (``method`` and
        :data:`algorithms.strip.ripper.RULE_COVERAGE_COLUMNS`).
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


def feature_kinds(pairs: pd.DataFrame) -> dict[str, str]:
    """The kind of every feature of a pair table: ``nominal`` (bool, string: the rules test
    ``feature == value``) or ``numeric`` (the rules test thresholds), as
    :class:`~algorithms.strip.ripper.StRip` encodes them."""
    X = features(pairs)
    return {str(c): "nominal" if (pd.api.types.is_bool_dtype(X[c])
                                  or not pd.api.types.is_numeric_dtype(X[c])) else "numeric"
            for c in X.columns}


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


@step("strip-conllu", files={"path": _conllu_name}, inputs=("clusters",),
      run_name="write chains {path.name}")
def write_predicted(path: Path, clusters: pd.DataFrame) -> pd.DataFrame:
    """The CoNLL-U file ``path`` with each method's predicted chains as its coreference.

    Parameters
    ----------
    path : Path
        A CoNLL-U file (one or more documents) whose mentions were clustered.
    clusters : DataFrame
        ``doc, mention, method, cluster`` (:data:`CLUSTER_COLUMNS`) for at least the mentions of
        this file (``evaluate``'s table for all test documents, or ``apply_rules``'s).

    Returns
    -------
    DataFrame
        ``method, conllu``: per method, the file's text with its ``Entity=`` annotations replaced
        by the chains (:func:`tasks.readers.conllu.write_chains`, CorefUD 1.x), singletons
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


# ----------------------------------------------------------------------------- apply
@step("strip-model-rules", files={"path": content_only}, run_name="load rules {path.name}")
def load_rules(path: Path) -> pd.DataFrame:
    """A rule table of a run's ``outputs/model/`` (a store-format Parquet file), checked.

    Raises
    ------
    InputError
        Naming the file when it is damaged or is not a rule table
        (:data:`algorithms.strip.ripper.RULE_COLUMNS`).
    """
    table = read_parquet_entry(path)
    try:
        ripper.rule_count(table)  # checks the columns and the operators
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
        positive = ripper.rules_fire(rules, features(pairs))
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
