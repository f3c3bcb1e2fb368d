"""Reader for multi-label data kept as a plain table: one row per example.

The file is a CSV (``.csv``), a tab-separated file (``.tsv``), either gzipped (``.gz``), a
Parquet file as pandas or pyarrow writes it (``.parquet``) or JSON Lines (``.jsonl``, one
object per line).  Its columns are named by the caller:

- a **label column**: the example's labels by name, as a list (Parquet, JSON Lines), as the
  text of a list (``['a', 'b']``, which is what pandas writes to a CSV for a list, or JSON's
  ``["a", "b"]``), or as one string of names joined by a separator (``a,b``); an empty or
  missing cell is an example without labels;
- a **text column**, a string per row; or
- a **feature column** of sparse features: ``"index:value"`` pairs separated by spaces or
  commas (the LIBSVM / Extreme Classification form, ``"3:0.5 17:1"``), a mapping ``{index:
  value}`` (JSON Lines, a Parquet map), a list of ``[index, value]`` pairs, or a list of
  numbers (a dense row, every row the same length).

Parquet is read by pandas (pyarrow); a CSV or TSV by the ``csv`` module and JSON Lines by the
``json`` module, after :mod:`scarce.tasks.readers.text` has read the bytes, because pandas' readers
take silently what is refused here (see :func:`read_table`).  What is added is reading the
cells of the label and feature columns in the forms researchers write them (indices and
values in the syntax of :mod:`scarce.tasks.readers.numbers`), refusing a label column joined by
another separator than the configured one (:func:`check_separator`), and errors that name
the file and the line, or the column and the row.  Rows are numbered from 1 after a CSV's
header (a CSV row is not a line when a quoted text spans lines).
"""

from __future__ import annotations

import ast
import contextlib
import csv
import io
import json
import re
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from scarce.algorithms import pyast
from scarce.tasks.errors import InputError, excerpt
from scarce.tasks.readers.jsonl import JSONRefused, load_json, lone_surrogate
from scarce.tasks.readers.numbers import MAX_INDEX, index_parts_plain, parse_index, parse_value
from scarce.tasks.readers.text import iter_lines, read_text

#: The file endings (lower case) read as a table.
TABLE_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".tsv.gz", ".parquet", ".jsonl", ".jsonl.gz")

_PAIR_SPLIT = re.compile(r"[\s,]+")


def table_kind(path: str | Path) -> str:
    """``csv``, ``tsv``, ``parquet`` or ``jsonl`` from the file's name; an
    :class:`InputError` for another ending."""
    name = Path(path).name.lower()
    for suffix in TABLE_SUFFIXES:
        if name.endswith(suffix):
            return suffix.removesuffix(".gz").lstrip(".")
    raise InputError(f"not a table file: a table is read from a name ending in "
                     f"{', '.join(TABLE_SUFFIXES)}", path=path)


def read_table(path: str | Path, required: Sequence[str],
               optional: Sequence[str] = (), limit: int | None = None) -> pd.DataFrame:
    """The columns ``required`` and those of ``optional`` the file has, one row per example
    (with ``limit``, the first ``limit`` rows only, read as the whole file would be up to
    there: a check of the file's head before a run reads it all).

    CSV and TSV cells are read as text, with an empty cell kept as an empty string (not a
    missing value): a label cell ``""`` is an example without labels.  A CSV or TSV is read
    by the ``csv`` module, JSON Lines by the ``json`` module, a line at a time, after
    :mod:`scarce.tasks.readers.text` has read the bytes (gzip, UTF-8, a byte-order mark): pandas'
    readers cut a row longer than the header (``usecols``) or pad a shorter one without a
    word, rename a column named twice (``tags.1``), keep the last of a key given twice, drop
    a lone surrogate from a JSON string, refuse a byte-order mark in JSON Lines and let a
    truncated gzip stream escape as ``EOFError``; here each is refused naming its line.

    Raises
    ------
    InputError
        Naming the file: unreadable, not parsed (with the line), a column or key named
        twice, a row whose fields do not match the header, no row, or without a
        ``required`` column (the columns it has are listed).
    """
    path = Path(path)
    kind = table_kind(path)
    wanted = list(dict.fromkeys([*required, *optional]))
    if kind == "parquet":
        frame, have = _read_parquet(path, wanted, limit)
    elif kind == "jsonl":
        frame, have = _read_jsonl(path, wanted, limit)
    else:
        frame, have = read_delimited(path, "\t" if kind == "tsv" else ",", wanted, limit)
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise InputError(f"no column {missing[0]!r} (the file's columns: "
                         f"{excerpt(have, 120)})", path=path)
    if len(frame) == 0:
        raise InputError(f"the {kind} table has no row (a header or schema only)", path=path)
    return frame[[c for c in wanted if c in frame.columns]].reset_index(drop=True)


def table_columns(path: str | Path) -> list[str] | None:
    """The column names of a table from its head alone: a CSV's or TSV's header line, a
    Parquet file's schema; None for JSON Lines (whose columns are the keys of every line).
    Errors are :func:`read_table`'s for that head."""
    path = Path(path)
    kind = table_kind(path)
    if kind == "jsonl":
        return None
    if kind == "parquet":
        import pyarrow.parquet as pq

        try:
            return list(pq.read_schema(path).names)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read the parquet table: {exc}", path=path) from None
    lines = iter_lines(path)
    try:
        header = next((line for line in lines if line.strip()), None)
    finally:
        lines.close()
    if header is None:
        return []
    try:  # (a header whose quoted name spans lines is left to read_table)
        return next(csv.reader([header], delimiter="\t" if kind == "tsv" else ",",
                               strict=True))
    except csv.Error:
        return None


def _read_parquet(path: Path, wanted: list[str],
                  limit: int | None = None) -> tuple[pd.DataFrame, list[str]]:
    import pyarrow.parquet as pq

    try:
        have = pq.read_schema(path).names
        twice = _named_twice(have)
        if twice is not None:
            raise InputError(f"the column {twice!r} is named twice", path=path)
        columns = [c for c in wanted if c in have]
        if limit is None:
            frame = pd.read_parquet(path, columns=columns)
        else:  # the first row group's batch: the rows up to ``limit``, no more read
            with pq.ParquetFile(path) as file:
                batch = next(file.iter_batches(batch_size=limit, columns=columns), None)
                frame = (file.schema_arrow.empty_table().select(columns) if batch is None
                         else batch).to_pandas()
    except FileNotFoundError:
        raise InputError("input file not found", path=path) from None
    except (OSError, ValueError, ImportError) as exc:
        if isinstance(exc, InputError):
            raise
        # pyarrow's errors are OSError or ArrowInvalid (a ValueError).
        raise InputError(f"cannot read the parquet table: {exc}", path=path) from None
    return frame, have


def _named_twice(names: Sequence[str]) -> str | None:
    """The first name given twice (empty names aside: unnamed columns are not read)."""
    seen: set[str] = set()
    for name in names:
        if name in seen and name != "":
            return name
        seen.add(name)
    return None


# The csv module refuses a field longer than its limit (128 KiB by default); a text cell may
# be longer.  The limit is the process's: it is only ever raised.
_FIELD_LIMIT = 2**31 - 1


def read_delimited(path: Path, sep: str, wanted: list[str],
                   limit: int | None = None) -> tuple[pd.DataFrame, list[str]]:
    """The columns ``wanted`` (those the file has, as text) of a CSV (``sep`` ``,``) or TSV
    (``\\t``), and the header's names: every record as many fields as the header, no column
    named twice, a quoted field closed (``strict``), errors naming the line.  With ``limit``
    the first ``limit`` records only, the lines read as far as they go."""
    if limit is None:
        return _read_delimited_lines(io.StringIO(read_text(path), newline=""), path, sep,
                                    wanted)
    # read as far as the records go (iter_lines drops the line ends, which a quoted field
    # spanning lines holds)
    with contextlib.closing(iter_lines(path)) as head:
        return _read_delimited_lines((line + "\n" for line in head), path, sep, wanted, limit)


def _read_delimited_lines(lines: Iterable[str], path: Path, sep: str, wanted: list[str],
                         limit: int | None = None) -> tuple[pd.DataFrame, list[str]]:
    """:func:`read_delimited` of the text ``lines`` (each with its line end)."""
    if csv.field_size_limit() < _FIELD_LIMIT:
        csv.field_size_limit(_FIELD_LIMIT)
    reader = csv.reader(lines, delimiter=sep, strict=True)
    header: list[str] | None = None
    take: list[int] = []
    rows: list[list[str]] = []
    line = 1  # where the record being read starts
    try:
        for record in reader:
            if not record:  # a blank line
                line = reader.line_num + 1
                continue
            if header is None:
                header = record
                twice = _named_twice(header)
                if twice is not None:
                    raise InputError(f"the column {twice!r} is named twice in the header",
                                     path=path, line=line)
                take = [header.index(c) for c in wanted if c in header]
            elif len(record) != len(header):
                raise InputError(
                    f"{len(record)} field{'s' * (len(record) != 1)} where the header has "
                    f"{len(header)} (a row is "
                    "neither cut nor padded to the header: quote a field that holds "
                    f"{'a tab' if sep == chr(9) else 'a comma'})", path=path, line=line)
            else:
                rows.append([record[i] for i in take])
                if limit is not None and len(rows) >= limit:
                    break
            line = reader.line_num + 1
    except csv.Error as exc:
        raise InputError(f"cannot read the {'tsv' if sep == chr(9) else 'csv'} table: {exc} "
                         "(a quote opened in the record starting here and never closed, or a "
                         "stray quote inside a field)", path=path, line=line) from None
    if header is None:
        raise InputError(f"the {'tsv' if sep == chr(9) else 'csv'} table has no row, nor a "
                         "header line (an empty file)", path=path)
    columns = [header[i] for i in take]
    return pd.DataFrame(rows, columns=columns, dtype=object), header


def _read_jsonl(path: Path, wanted: list[str],
                limit: int | None = None) -> tuple[pd.DataFrame, list[str]]:
    """JSON Lines: an object a line (blank lines skipped), no key twice in an object, no
    string of a wanted column holding a lone surrogate; with ``limit`` the first ``limit``
    objects only."""
    if limit is None:
        return _read_jsonl_lines(read_text(path).split("\n"), path, wanted)
    with contextlib.closing(iter_lines(path)) as head:
        return _read_jsonl_lines(head, path, wanted, limit)


def _read_jsonl_lines(lines: Iterable[str], path: Path, wanted: list[str],
                      limit: int | None = None) -> tuple[pd.DataFrame, list[str]]:
    rows: list[list] = []
    have: dict[str, None] = {}
    for lineno, line in enumerate(lines, start=1):
        if limit is not None and len(rows) >= limit:
            break
        if not line.strip():
            continue
        try:
            obj = load_json(line)
        except ValueError as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise InputError(f"invalid JSON: {msg}", path=path, line=lineno) from None
        except RecursionError:
            raise InputError("invalid JSON: nested too deeply", path=path,
                             line=lineno) from None
        if not isinstance(obj, dict):
            raise InputError(f"expected a JSON object, got {type(obj).__name__}", path=path,
                             line=lineno)
        have.update(dict.fromkeys(obj))
        row = {c: obj[c] for c in wanted if c in obj}
        if "\\u" in line and (where := lone_surrogate(row)) is not None:
            raise InputError(f"{where} holds a lone surrogate (a \\ud800-\\udfff escape "
                             "that is not half of a pair), which is not text", path=path,
                             line=lineno)
        rows.append([row.get(c) for c in wanted])
    if not rows:
        raise InputError("the jsonl table has no row (no JSON object)", path=path)
    present = [c for c in wanted if c in have]
    frame = pd.DataFrame([[r[wanted.index(c)] for c in present] for r in rows],
                         columns=present, dtype=object)
    return frame, list(have)


def _row_error(path: Path, column: str, row: int, message: str) -> InputError:
    return InputError(f"row {row + 1}, column {column!r}: {message}", path=path)


def _missing(cell) -> bool:
    if cell is None:
        return True
    try:
        return bool(np.ndim(cell) == 0 and pd.isna(cell))
    except (TypeError, ValueError):
        return False


def _literal_list(text: str):
    """The list (or mapping) written as JSON or as a Python literal (pandas' ``str`` of a
    list), or None when ``text`` is neither; ``ValueError`` for a mapping that gives a key
    twice (either parser would keep the last value)."""
    try:
        return load_json(text)
    except json.JSONDecodeError:
        pass
    except JSONRefused:
        raise
    except (ValueError, RecursionError):
        return None
    try:
        node = pyast.parse(text, mode="eval").body
        if isinstance(node, ast.Dict):
            keys = [ast.literal_eval(k) for k in node.keys if k is not None]
            if len(set(map(repr, keys))) != len(keys):
                raise JSONRefused("a key is given twice in one mapping")
        return ast.literal_eval(node)
    except JSONRefused:
        raise
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


#: The separators a label cell's names are commonly joined by: a cell whose one name holds
#: another of them was most likely joined by that one (:func:`check_separator`).
SEPARATORS = (",", ";", "|", "\t")
#: The key that sets the separator, named when it looks wrong.
SEPARATOR_KEY = "dataset.table.label_separator"
_SURROGATE = re.compile("[\ud800-\udfff]")


def label_names(cells: Iterable, separator: str, path: Path, column: str,
                known: Collection[str] | None = None) -> list[list[str]]:
    """Every row's label names, in the order written, each once (whitespace around a name
    stripped): from a list, the text of a list, or a string joined by ``separator``.

    The names of the cells joined by ``separator`` are checked by :func:`check_separator`
    (``known``: the label names of the model or the label list, when there are some); a
    name that holds a lone surrogate (a JSON or Python ``\\ud800`` escape, not text) is an
    error naming the row."""
    rows: list[list[str]] = []
    joined: list[int] = []  # the rows written as names joined by the separator
    for i, cell in enumerate(cells):
        if isinstance(cell, np.ndarray | list | tuple):
            names = list(cell)
        elif _missing(cell):
            names = []
        elif isinstance(cell, str):
            text = cell.strip()
            if text.startswith("[") and text.endswith("]"):
                try:
                    names = _literal_list(text)
                except JSONRefused as exc:
                    raise _row_error(path, column, i, str(exc)) from None
                if not isinstance(names, list):
                    raise _row_error(path, column, i, f"{excerpt(text)} looks like a list "
                                     "but is not one (JSON or Python)")
            else:  # the common form: names joined by the separator, all strings
                rows.append([n for n in dict.fromkeys(
                    name.strip() for name in text.split(separator)) if n] if text else [])
                joined.append(i)
                continue
        elif isinstance(cell, int | np.integer) and not isinstance(cell, bool):
            names = [cell]
        else:
            raise _row_error(path, column, i, f"labels must be names (a list or a string), "
                             f"got {type(cell).__name__}")
        out = []
        for name in names:
            if isinstance(name, bool) or not isinstance(name, str | int | np.integer):
                raise _row_error(path, column, i, f"a label name must be a string, got "
                                 f"{excerpt(name)}")
            name = str(name).strip()
            if _SURROGATE.search(name):
                raise _row_error(path, column, i, f"the label name {excerpt(name)} holds a "
                                 "lone surrogate (a \\ud800-\\udfff escape that is not half "
                                 "of a pair), which is not text")
            if name and name not in out:
                out.append(name)
        rows.append(out)
    check_separator([rows[i] for i in joined], separator, path, column, known)
    return rows


def check_separator(rows: Sequence[list[str]], separator: str, path: Path, column: str,
                    known: Collection[str] | None = None) -> None:
    """Refuse label cells that were joined by another separator than ``separator``.

    ``rows``: the names of the cells written as one string, split by ``separator``.  Another
    separator ``c`` of :data:`SEPARATORS` is taken to be the one the cells were joined by
    when at least half of the rows that name a label hold it inside a name and

    - ``known`` is None (the names are the training table's own): those rows name one label
      each, and the names split by ``c`` make fewer distinct labels than whole (the parts
      recur: ``a;b``, ``b;c`` and ``a;c`` are three labels, not three tag sets);
    - ``known`` is given (the model's labels, or the label list): each such name is not a
      known label but every part of it split by ``c`` is.

    Refused rather than warned: a tag set taken for a label trains a model of its tag sets
    (every label a rare one) and scores it, silently, against names that never match.  A
    name that really holds ``c`` is read as written when it is in the label list
    (``label_list``), which is the way to say so.

    Raises
    ------
    InputError
        Naming the file, the column, the counts, an example and the key
        :data:`SEPARATOR_KEY`.
    """
    named = [names for names in rows if names]
    if not named:
        return
    known_set = None if known is None else set(known)
    for c in SEPARATORS:
        if c in separator or separator in c:
            continue
        if known_set is None:
            holding = [names[0] for names in named if len(names) == 1 and c in names[0]]
            if 2 * len(holding) < len(named):
                continue
            wholes = {name for names in named for name in names}
            parts = {p.strip() for name in wholes for p in name.split(c) if p.strip()}
            if len(parts) >= len(wholes):
                continue
            said = (f"split by {c!r} they would name {len(parts):,} labels, not "
                    f"{len(wholes):,} tag sets")
            count, example = len(holding), holding[0]
        else:
            holding = [next((n for n in names if _parts_known(n, c, known_set)), None)
                       for names in named]
            holding = [name for name in holding if name is not None]
            if 2 * len(holding) < len(named):
                continue
            said = f"each is no label of the model, but its parts split by {c!r} are"
            count, example = len(holding), holding[0]
        raise InputError(
            f"column {column!r}: {count:,} of the {len(named):,} rows with labels hold a name "
            f"with {c!r} in it (e.g. {excerpt(example, 40)}); {said}: the names are joined "
            f"by {c!r}, not {separator!r} (or list names holding {c!r} in label_list)",
            path=path, key=SEPARATOR_KEY)


def _parts_known(name: str, c: str, known: set[str]) -> bool:
    """Whether ``name`` is no known label but each of its parts split by ``c`` is one."""
    return (c in name and name not in known
            and all(p.strip() in known for p in name.split(c) if p.strip()))


def _pairs(cell, path: Path, column: str, row: int) -> tuple[list[int], list[float]] | None:
    """A sparse cell's indices and values; None for a dense row (a list of numbers)."""
    if isinstance(cell, str):
        text = cell.strip()
        if text.startswith("{") or text.startswith("["):
            try:
                parsed = _literal_list(text)
            except JSONRefused as exc:
                raise _row_error(path, column, row, str(exc)) from None
            if parsed is None:
                raise _row_error(path, column, row, f"{excerpt(text)} is neither JSON nor a "
                                 "Python literal")
            return _pairs(parsed, path, column, row)
        items = [t for t in _PAIR_SPLIT.split(text) if t]
        pairs = []
        for item in items:
            index, sep, value = item.partition(":")
            if not sep:
                raise _row_error(path, column, row, f"{excerpt(item)} is not index:value")
            pairs.append((index, value))
    elif isinstance(cell, dict):
        pairs = list(cell.items())
    elif isinstance(cell, np.ndarray | list | tuple):
        seq = list(cell)
        if all(isinstance(v, int | float | np.number) and not isinstance(v, bool)
               for v in seq):
            return None
        pairs = []
        for item in seq:
            if isinstance(item, dict) and len(item) == 2:  # a struct {"key", "value"}
                item = tuple(item.values())
            if not isinstance(item, list | tuple | np.ndarray) or len(item) != 2:
                raise _row_error(path, column, row, f"{excerpt(item)} is not an [index, "
                                 "value] pair")
            pairs.append(tuple(item))
    elif _missing(cell):
        pairs = []
    else:
        raise _row_error(path, column, row, f"features must be index:value pairs, a mapping "
                         f"or a list, got {type(cell).__name__}")
    indices, values = [], []
    for index, value in pairs:
        try:
            i, v = _index_of(index), _value_of(value)
        except ValueError as exc:
            raise _row_error(path, column, row, f"{excerpt(index, 30)}:{excerpt(value, 30)}: "
                             f"{exc}") from None
        if not np.isfinite(v):
            raise _row_error(path, column, row, f"feature {i} has the value {v}, not finite")
        indices.append(i)
        values.append(v)
    if len(set(indices)) != len(indices):
        raise _row_error(path, column, row, "a feature index is given twice")
    return indices, values


def _index_of(index) -> int:
    """A feature index written as text (:func:`~scarce.tasks.readers.numbers.parse_index`: digits
    only) or as an integer (JSON, a Parquet map); ``ValueError`` otherwise."""
    if isinstance(index, str):
        return parse_index(index)
    if isinstance(index, int | np.integer) and not isinstance(index, bool | np.bool_):
        if not 0 <= int(index) <= MAX_INDEX:
            raise ValueError(f"the index {int(index)} is negative or beyond {MAX_INDEX}")
        return int(index)
    raise ValueError(f"the index must be a whole number, got {type(index).__name__}")


def _value_of(value) -> float:
    """A feature value written as text (:func:`~scarce.tasks.readers.numbers.parse_value`) or as a
    number; ``ValueError`` otherwise."""
    if isinstance(value, str):
        return parse_value(value.strip())
    if isinstance(value, int | float | np.number) and not isinstance(value, bool | np.bool_):
        return float(value)
    raise ValueError(f"the value must be a number, got {type(value).__name__}")


#: A token holding two colons: not an ``index:value`` pair.
_TWO_COLONS = re.compile(r":[^\s:]*:")


def _pair_strings(cells: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The CSR arrays of a column whose every cell is ``index:value`` text, parsed by NumPy
    over the whole column at once (a cell by cell parse in Python costs a microsecond a
    pair); None when any cell is not of that plain form, which :func:`_pairs` then reads
    (and names the row at fault)."""
    if not all(isinstance(c, str) for c in cells):
        return None
    texts = [c.replace(",", " ") for c in cells]
    joined = " ".join(texts)
    # NumPy's float parse reads 1e1 or +3 as an index, and 1_0 or Unicode digits as numbers,
    # which :func:`_pairs` refuses (tasks.readers.numbers): such a column is read there.
    if not joined.isascii() or "_" in joined or not index_parts_plain(joined):
        return None
    counts = np.fromiter((len(t.split()) for t in texts), dtype=np.int64, count=len(texts))
    colons = np.fromiter((t.count(":") for t in texts), dtype=np.int64, count=len(texts))
    # one colon per token: as many colons as tokens, and no token with two ("1:0:0 0")
    if not np.array_equal(counts, colons) or _TWO_COLONS.search(joined):
        return None
    try:
        numbers = np.array(joined.replace(":", " ").split(), dtype=np.float64)
    except ValueError:
        return None
    if numbers.size != 2 * counts.sum():  # a pair without its index or value (":", "3:")
        return None
    index, values = numbers[0::2], numbers[1::2]
    # (an index beyond 2^53 is not exact in float64: read by _pairs)
    if (index.size and index.max() >= 2 ** 53) or not np.isfinite(values).all():
        return None
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = index.astype(np.int64)
    within = np.ones(max(indices.size - 1, 0), dtype=bool)  # consecutive pairs in one row
    within[indptr[1:-1][(indptr[1:-1] > 0) & (indptr[1:-1] < indices.size)] - 1] = False
    if (np.diff(indices)[within] > 0).all():  # every row already sorted and unique
        return indptr, indices, np.ascontiguousarray(values)
    for r in range(len(texts)):  # sorted and unique within each row
        row = indices[indptr[r]:indptr[r + 1]]
        if row.size > 1 and not (np.diff(row) > 0).all():
            order = np.argsort(row, kind="stable")
            if (np.diff(row[order]) == 0).any():
                return None
            indices[indptr[r]:indptr[r + 1]] = row[order]
            values[indptr[r]:indptr[r + 1]] = values[indptr[r]:indptr[r + 1]][order]
    return indptr, indices, np.ascontiguousarray(values)


def feature_rows(cells: Sequence, path: Path, column: str,
                 n_features: int | None = None) -> sp.csr_matrix:
    """The feature column as a float64 CSR matrix (values parsed as floats, then kept in
    float64 so a reader in any dtype rounds them once).  ``n_features``: the width (a row
    with an index beyond it is an error); None: the largest index + 1, or a dense row's
    length."""
    cells = list(cells)
    fast = _pair_strings(cells)
    if fast is not None:
        return _with_width(*fast, path, column, n_features, None)
    indptr, indices, data = [0], [], []
    dense = None
    for i, cell in enumerate(cells):
        parsed = _pairs(cell, path, column, i)
        if parsed is None:
            row = np.asarray(list(cell), dtype=np.float64)
            if dense is None:
                dense = len(row)
            elif len(row) != dense:
                raise _row_error(path, column, i, f"a dense row of {len(row)} values; the "
                                 f"first has {dense}")
            if not np.isfinite(row).all():
                raise _row_error(path, column, i, "a value that is not finite")
            nz = np.flatnonzero(row)
            parsed = (nz.tolist(), row[nz].tolist())
        elif dense is not None and parsed[0]:
            raise _row_error(path, column, i, "index:value pairs after dense rows")
        order = np.argsort(parsed[0], kind="stable")
        indices.extend(np.asarray(parsed[0], dtype=np.int64)[order].tolist())
        data.extend(np.asarray(parsed[1], dtype=np.float64)[order].tolist())
        indptr.append(len(indices))
    return _with_width(np.asarray(indptr), np.asarray(indices, dtype=np.int64),
                       np.asarray(data, dtype=np.float64), path, column, n_features, dense)


def _with_width(indptr: np.ndarray, idx: np.ndarray, data: np.ndarray, path: Path, column: str,
                n_features: int | None, dense: int | None) -> sp.csr_matrix:
    """The CSR matrix of the arrays, ``n_features`` wide (an index beyond it is an error
    naming its row), else as wide as a dense row or the largest index + 1."""
    width = dense if dense is not None else (int(idx.max()) + 1 if idx.size else 0)
    if n_features is not None:
        if idx.size and int(idx.max()) >= n_features:
            at = int(np.flatnonzero(idx >= n_features)[0])
            row = int(np.searchsorted(indptr, at, side="right")) - 1
            raise _row_error(path, column, row, f"feature index {int(idx[at])} is beyond "
                             f"n_features {n_features} (indices 0..{n_features - 1})")
        width = n_features
    return sp.csr_matrix((data, idx, indptr), shape=(len(indptr) - 1, width))
