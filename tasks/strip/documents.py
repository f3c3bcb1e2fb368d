"""Which documents a StRip run reads: the splits file, the documents of each role, their table.

A run reads GUM-style CoNLL-U files, ``<doc_id>.conllu[.gz]`` in one folder, and a tab-separated
``doc_id <TAB> split`` file naming the split of each; a role (``train``, ``test``, ``dev``) takes
the documents of the splits it lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from scarce.tasks.errors import InputError
from scarce.tasks.readers import names as name_rules
from scarce.tasks.readers.table import read_delimited
from scarce.tasks.readers.text import check_no_gzip_twin
from scarce.tasks.steps import content_only, step

__all__ = ["DOCUMENT_COLUMNS", "DOC_SUFFIXES", "select_documents", "conllu_name",
           "record_documents"]

DOCUMENT_COLUMNS = ["role", "split", "doc_id", "file"]
DOC_SUFFIXES = (".conllu.gz", ".conllu")


def _read_splits(splits_file: Path) -> pd.DataFrame:
    """The ``doc_id`` and ``split`` columns of a tab-separated splits file, read as the table
    reader reads a TSV (:func:`scarce.tasks.readers.table.read_delimited`: UTF-8 and gzip errors
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


def conllu_name(path: Path, call: dict) -> dict:
    """What :func:`scarce.tasks.readers.conllu.read_conllu` takes from the file's name (the key's
    :data:`scarce.tasks.steps.NameRule` of the steps that read a CoNLL-U file)."""
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

