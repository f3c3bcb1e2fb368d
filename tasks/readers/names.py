"""What each reader decides from a file's name: the part of a step's key beside the file's bytes.

A reader given a path reads its bytes and, from its name, how to read them: gzip or not
(:mod:`scarce.tasks.readers.text` by a name ending in ``.gz``, case-sensitively), a table's kind
(:func:`scarce.tasks.readers.table.table_kind`), a CoNLL-U document's id when the file names none
(the
name without ``.gz`` and ``.conllu``).  Each function here returns that, from the reader's own
functions wherever the reader has one, so that a step declaring ``files={"path": rule}``
(:data:`scarce.tasks.steps.NameRule`) keys a file by what its reader does with the name and no more:
renaming ``train.txt`` to ``train.dat`` keeps the entries, renaming ``train.tsv`` to
``train.csv`` does not.  A rule never raises: a name the reader refuses gives None, and the
read fails as it would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scarce.tasks.errors import InputError


def gzip_by_name(path: str | Path) -> bool:
    """Whether :mod:`scarce.tasks.readers.text` (every line reader: Extreme Classification, ARFF,
    SemEval, JSON Lines, CoNLL-U, label lists) reads the file as gzip: its name ends in
    ``.gz``, case-sensitively, as ``text._is_gzip`` tests it."""
    return Path(path).name.endswith(".gz")


def table(path: str | Path) -> dict[str, Any] | None:
    """What :func:`scarce.tasks.readers.table.read_table` takes from the name: the table's kind
    (:func:`~scarce.tasks.readers.table.table_kind`, lower-cased) and, for the kinds read as text
    (CSV, TSV, JSON Lines, through :mod:`scarce.tasks.readers.text`), gzip as that module decides
    it;
    None for a name that is no table's.  Parquet is read by its bytes alone."""
    from scarce.tasks.readers.table import table_kind

    try:
        kind = table_kind(path)
    except InputError:
        return None
    return {"kind": kind, "gzip": None if kind == "parquet" else gzip_by_name(path)}


def conllu(path: str | Path) -> dict[str, Any]:
    """What :func:`scarce.tasks.readers.conllu.read_conllu` takes from the name: gzip, and the id of
    a document the file does not name (``# newdoc id``), which is the name without its
    ``.gz`` and ``.conllu``."""
    from scarce.tasks.readers.conllu import _doc_name

    return {"gzip": gzip_by_name(path), "doc": _doc_name(Path(path))}
