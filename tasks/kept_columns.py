"""Columns of an input table carried into its predictions (``apply-leml``'s ``keep_columns``).

A table's rows are scored by position (the predictions' ``row``); a column the user names
(an id, a title) is copied onto every line of its row, so that the predictions can be joined
back to the table without counting rows.  The table is read by the table reader
(:func:`scarce.tasks.readers.table.read_table`), so a kept value is what the reader gives: text from
a CSV or TSV (an id ``007`` stays ``007``), the file's own type from Parquet or JSON Lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa

from scarce.tasks.errors import InputError
from scarce.tasks.readers import names as name_rules
from scarce.tasks.readers.table import read_table
from scarce.tasks.steps import step

KEY = "keep_columns"


def check_kept_columns(files: Sequence[Path], columns: Sequence[str]) -> None:
    """Refuse, before anything is scored, a column of ``columns`` that a table of ``files``
    lacks (an :class:`InputError` naming the file, the column and :data:`KEY`)."""
    for path in files:
        have = read_table(path, required=(), optional=list(columns)).columns
        missing = [c for c in columns if c not in have]
        if missing:
            raise InputError(f"no column {missing[0]!r} to keep: the table has no such "
                             "column", path=path, key=KEY)


def _table_name(path: Path, call: dict):
    """What :func:`scarce.tasks.readers.table.read_table` takes from the table's name (the key's
    :data:`scarce.tasks.steps.NameRule`)."""
    return name_rules.table(path)


@step("leml-keep-columns", files={"path": _table_name}, inputs=("predictions",),
      run_name="keep columns of {path.name}")
def keep_columns(path: Path, predictions: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``predictions`` of the table ``path`` (one line per row and rank, ``row`` its 0-based
    row) with the table's ``columns`` first, each line holding its row's values."""
    table = read_table(path, required=list(columns))
    rows = predictions["row"].to_numpy()
    if len(rows) and rows.max() >= len(table):
        raise InputError(f"the predictions name row {int(rows.max())} but the table has "
                         f"{len(table)} rows (was it changed while applied?)", path=path)
    kept = table[list(columns)].iloc[rows].reset_index(drop=True)
    for name in columns:  # a column the store (Parquet) cannot hold, named, not a traceback
        try:
            pa.array(kept[name], from_pandas=True)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise InputError(f"column {name!r} cannot be kept: its values are not of one "
                             f"type Parquet holds ({exc})", path=path, key=KEY) from None
    return pd.concat([kept, predictions.reset_index(drop=True)], axis=1)
