"""StRip's memory check: the estimate of training on a set of pair tables, counted from their
Parquet footers, against the same count made by hand from the tables in memory, and the
refusal under ``SCARCE_MEMORY_LIMIT_GB`` at the threshold the other flows use."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from scarce.algorithms.memory import HEADROOM, MemoryBudgetError
from scarce.tasks import strip
from scarce.tasks.store.atomic import atomic_write_parquet
from scarce.tasks.store.encoding import encode

GUM = Path(__file__).resolve().parents[2] / "data" / "coref" / "gum"
DOCS = ["GUM_news_stampede", "GUM_news_worship"]


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> tuple[list[Path], list[pd.DataFrame]]:
    """Two documents' pair tables written as the store writes entries."""
    root = tmp_path_factory.mktemp("strip-memory")
    paths, frames = [], []
    for doc in DOCS:
        pairs = strip.preprocess.fn(path=GUM / f"{doc}.conllu.gz", window=10,
                                    max_sentence_distance=None, source_kind="etype",
                                    etypes=["person", "organization"], fraction=None,
                                    seed=None)["pairs"]
        path = root / f"{doc}.parquet"
        atomic_write_parquet(path, encode(pairs))
        paths.append(path)
        frames.append(pairs)
    return paths, frames


def _by_hand(frames: list[pd.DataFrame]) -> int:
    """The formula of docs/design/memory.md from the tables' pandas dtypes: the table twice
    (8 bytes a number, 1 a bool, 16 a string), 16 bytes a feature, 176 a pair."""
    table = frames[0]
    per_column = [1 if pd.api.types.is_bool_dtype(t) else
                  8 if pd.api.types.is_numeric_dtype(t) else 16 for t in table.dtypes]
    features = len(table.columns) - len(strip.PAIR_KEYS)
    n = sum(len(f) for f in frames)
    return n * (2 * sum(per_column) + 16 * features + 176)


def test_the_estimate_counts_the_tables_pairs_and_features(tables):
    paths, frames = tables
    n_pairs, n_features, need = strip.training_memory(paths)
    assert n_pairs == sum(len(f) for f in frames) >= 1000
    assert n_features == len(strip.features(frames[0]).columns) > 20
    assert need == _by_hand(frames)


def test_training_over_the_limit_is_refused_in_one_line(tables, monkeypatch):
    paths, _ = tables
    need = strip.training_memory(paths)[2]
    monkeypatch.setenv("SCARCE_MEMORY_LIMIT_GB", str(need / HEADROOM / 2**30 * 1.01))
    assert strip.check_training_memory(paths) == need  # fits
    monkeypatch.setenv("SCARCE_MEMORY_LIMIT_GB", str(need / HEADROOM / 2**30 * 0.99))
    with pytest.raises(MemoryBudgetError) as exc:
        strip.check_training_memory(paths)
    text = str(exc.value)
    assert text.startswith(f"StRip's training pairs: {strip.training_memory(paths)[0]:,} pairs")
    assert "SCARCE_MEMORY_LIMIT_GB" in text and "train_splits" in text and "\n" not in text
