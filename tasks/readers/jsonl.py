"""Reader for entity-pair mentions in JSON Lines form.

One JSON object per line::

    {"id": 7, "tokens": ["Smoke", "from", "the", "fire"], "head": [0, 1], "tail": [3, 4],
     "label": "Cause-Effect"}

``tokens`` is a list of strings; ``head`` and ``tail`` are token spans
``[start, end)`` (end exclusive) and must not overlap; ``id`` (int or str) and
``label`` (str) are optional.  Blank lines are skipped.  ``.gz`` files are read
transparently.

The result has the columns of :func:`scarce.tasks.readers.semeval.read_semeval`:
``e1_*`` is the head span, ``e2_*`` the tail span (in the order given, which need
not be the order in the sentence), ``label`` and ``relation`` are the given label
(missing when absent) and ``direction`` is missing.  Errors name the file and line; a string
anywhere in a record (a token, the label, an id, a key) that holds a lone surrogate
(``"\\ud800"``: valid JSON, but not text) is one, and so are a key given twice in an object
(the ``json`` module keeps the last) and an integer of thousands of digits (:func:`load_json`,
which the table reader's JSON Lines share).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from scarce.tasks.errors import InputError, excerpt
from scarce.tasks.readers.semeval import COLUMNS
from scarce.tasks.readers.text import read_lines

_SURROGATE = re.compile("[\ud800-\udfff]")


class JSONRefused(ValueError):
    """JSON that the ``json`` module reads but a reader refuses."""


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object's pairs as a dict; a key given twice is :class:`JSONRefused` (the
    ``json`` module would keep the last value)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise JSONRefused(f"the key {excerpt(twice)} is given twice in one object")
    return out


def _json_int(text: str) -> int:
    """A JSON integer; one beyond what ``int`` reads (thousands of digits) is an error of
    its own, not the ``int`` conversion's."""
    if len(text.lstrip("-")) > MAX_JSON_DIGITS:
        raise JSONRefused(f"an integer of {len(text):,} digits")
    return int(text)


#: The longest JSON integer read (Python's own limit for ``int`` of a string).
MAX_JSON_DIGITS = 4300


def load_json(text: str):
    """``json.loads`` of ``text`` with a key given twice and an integer of thousands of digits
    refused (``ValueError``)."""
    return json.loads(text, object_pairs_hook=_unique_pairs, parse_int=_json_int)


def _span(obj: dict, key: str, n_tokens: int) -> tuple[int, int]:
    span = obj.get(key)
    if (not isinstance(span, list) or len(span) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in span)):
        raise ValueError(f"'{key}' must be a list of two integers [start, end), got {span!r}")
    start, end = span
    if not 0 <= start < end <= n_tokens:
        raise ValueError(f"'{key}' span [{start}, {end}) is outside the {n_tokens} tokens "
                         "or empty; expected 0 <= start < end <= len(tokens)")
    return start, end


def lone_surrogate(obj) -> str | None:
    """Where in the decoded record ``obj`` a string (or a key) holds a lone surrogate, which
    JSON's ``\\u`` escapes allow but UTF-8 cannot encode; None when none does.  Walked
    without recursion: a record may be nested as deeply as the JSON parser allows."""
    todo = [(obj, "the record")]
    while todo:
        value, where = todo.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return where
        elif isinstance(value, dict):
            for key in value:
                if _SURROGATE.search(key):
                    return f"the key {key!r}"
            todo.extend((item, f"{key!r}" if value is obj else f"{where}[{key!r}]")
                        for key, item in reversed(value.items()))
        elif isinstance(value, list):
            todo.extend((value[i], f"{where}[{i}]") for i in reversed(range(len(value))))
    return None


def read_jsonl(path: str | Path) -> pd.DataFrame:
    """Read entity-pair mentions from a JSON Lines file.

    Parameters
    ----------
    path : str or Path
        The file; gzip when the name ends in ``.gz``.

    Returns
    -------
    pandas.DataFrame
        Columns ``id``, ``tokens``, ``e1_start``, ``e1_end``, ``e2_start``, ``e2_end``,
        ``label``, ``relation``, ``direction``.  ``id`` defaults to the 1-based line number.

    Raises
    ------
    tasks.errors.InputError
        On invalid JSON, a record that is not an object, missing or non-string tokens,
        spans outside the tokens, overlapping head and tail, a non-string label, a
        duplicated id, or a string holding a lone surrogate.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", path=path)
    rows: list[tuple] = []
    seen: dict = {}
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            obj = load_json(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON: {exc.msg} at column {exc.colno}",
                             path=path, line=lineno) from None
        except JSONRefused as exc:
            raise InputError(f"invalid JSON: {exc}", path=path, line=lineno) from None
        except RecursionError:
            raise InputError("invalid JSON: nested too deeply", path=path,
                             line=lineno) from None
        if "\\u" in line and (where := lone_surrogate(obj)) is not None:
            raise InputError(f"{where} holds a lone surrogate (a \\ud800-\\udfff escape "
                             "that is not half of a pair), which is not text",
                             path=path, line=lineno)
        try:
            row = _row(obj, lineno)
        except ValueError as exc:
            raise InputError(str(exc), path=path, line=lineno) from None
        rid = row[0]
        if rid in seen:
            raise InputError(f"duplicated id {rid!r} (first on line {seen[rid]})",
                             path=path, line=lineno)
        seen[rid] = lineno
        rows.append(row)
    if not rows:
        raise InputError("no records found", path=path)
    return _frame(rows)


def _row(obj, default_id: int) -> tuple:
    """One record as a row of :data:`COLUMNS`; ``ValueError`` saying what is wrong."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    tokens = obj.get("tokens")
    if (not isinstance(tokens, list) or not tokens
            or not all(isinstance(t, str) for t in tokens)):
        raise ValueError("'tokens' must be a non-empty list of strings")
    head = _span(obj, "head", len(tokens))
    tail = _span(obj, "tail", len(tokens))
    if head[0] < tail[1] and tail[0] < head[1]:
        raise ValueError(f"head {list(head)} and tail {list(tail)} overlap")
    label = obj.get("label")
    if label is not None and not isinstance(label, str):
        raise ValueError(f"'label' must be a string, got {label!r}")
    rid = obj.get("id", default_id)
    if isinstance(rid, bool) or not isinstance(rid, int | str):
        raise ValueError(f"'id' must be an integer or a string, got {rid!r}")
    return (rid, tokens, head[0], head[1], tail[0], tail[1], label, label, None)


def _frame(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("e1_start", "e1_end", "e2_start", "e2_end"):
        df[col] = df[col].astype("int64")
    return df


def read_records(records) -> pd.DataFrame:
    """Entity-pair mentions given as Python dicts in the JSON Lines schema: the table
    :func:`read_jsonl` makes of a file holding them one a line (``id`` defaults to the
    1-based position).

    Raises
    ------
    ValueError
        Naming the record (``pairs[2]``, 0-based) and what is wrong with it, as
        :func:`read_jsonl` would for its line.
    """
    rows: list[tuple] = []
    seen: dict = {}
    for index, obj in enumerate(records):
        try:
            if (where := lone_surrogate(obj)) is not None:
                raise ValueError(f"{where} holds a lone surrogate, which is not text")
            row = _row(obj, index + 1)
        except ValueError as exc:
            raise ValueError(f"pairs[{index}]: {exc}") from None
        if row[0] in seen:
            raise ValueError(f"pairs[{index}]: duplicated id {row[0]!r} (first in "
                             f"pairs[{seen[row[0]]}])")
        seen[row[0]] = index
        rows.append(row)
    if not rows:
        raise ValueError("no pairs given")
    return _frame(rows)
