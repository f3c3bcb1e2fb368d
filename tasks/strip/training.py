"""StRip's training steps: ``grow``, ``prune`` and ``optimize``, each a phase of the estimator.

``grow``, ``prune`` and ``optimize`` call the estimator's step methods of the same names, each
writing its rule table to the store; the estimator is built from the variant's name
(:data:`scarce.algorithms.strip.ripper.VARIANTS`: ``ripper``, ``strip-labeled``, ``strip-partial``)
and
the parameters the step uses, so a step's key holds only those.  ``grow`` also stores the state
of its random generator, which ``optimize`` continues from, so the three steps give exactly the
rules of ``StRip.fit`` on the same pairs.  Training times are ``timings`` parts (volatile).

The three steps of one model, and every model of a run, train on the same pairs: they are read
and prepared once in this process and kept between the steps (:func:`release_training_pairs`
drops them); training that would not fit in memory is refused before they are read
(:func:`check_training_memory`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

import scarce.algorithms.strip.ripper as ripper
from scarce.algorithms.memory import HEADROOM, MemoryBudgetError, available_bytes, format_bytes
from scarce.algorithms.strip.rule_table import rule_count
from scarce.tasks.errors import InputError
from scarce.tasks.steps import step
from scarce.tasks.store.encoding import read_parquet_entry
from scarce.tasks.strip.pairs import PAIR_KEYS, features, pair_ends

__all__ = ["grow", "prune", "optimize", "training_memory", "check_training_memory",
           "release_training_pairs"]


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
    available (:func:`scarce.algorithms.memory.available_bytes`: ``SCARCE_MEMORY_LIMIT_GB`` among
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
        "n_rules": [rule_count(rules)],
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

