"""Reader for Mulan multi-label ARFF files (and Mulan's XML label lists).

A Mulan data set is a Weka ARFF file whose label attributes are binary
(``{0,1}``); which attributes are labels is given either by a Mulan XML file
(``<label name="..."/>`` elements, any nesting) or, as for the files distributed
with Mulan, by the count ``L`` of labels, the last ``L`` attributes::

    @relation bibtex
    @attribute word1 {0,1}
    @attribute height numeric
    @attribute TAG_x {0,1}
    @data
    0,1.5,1                       <- dense row: one value per attribute
    {1 1.5,2 1}                   <- sparse row: "index value" pairs, the rest 0

Supported attribute types: ``numeric``/``real``/``integer`` and nominal
``{a,b,...}`` (values that are numbers keep their value, otherwise the
category's position).  Comments (``%``) and blank lines are skipped; names may
be quoted.  ``.gz`` files are read transparently.

Errors are :class:`scarce.tasks.errors.InputError` with the file and 1-based line: a
missing ``@data`` section or one without rows, an unknown or unsupported attribute type
(``string``, ``date``, ``relational``), labels that leave no feature attribute, a row with
the wrong number of values, a sparse index out of range or repeated, a value that is not a
number, not finite in the requested dtype (``1e39`` in float32) or not a declared category,
a missing value ``?``, a label that is not 0 or 1, an attribute declared twice, and label
names that are not attributes or are named twice.  Indices and values have the syntax of
:mod:`scarce.tasks.readers.numbers` (an index is digits only).  :func:`read_arff_header` reads
the header alone (up to ``@data``), so that a caller can compare files before reading them.

Not liac-arff (``import arff``), though its parser is faster and its errors name the line: it
keeps the last value of a sparse index given twice without a word (its result no longer shows
the repeat), reads ``?`` as None, ``nan`` as a number and a ``@data`` section without rows,
and its sparse mode refuses dense rows (its dense mode holds every zero).
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from scarce.tasks.errors import InputError
from scarce.tasks.readers.numbers import parse_index, parse_value, shown
from scarce.tasks.readers.text import decode_text, iter_lines, read_bytes

__all__ = ["read_arff", "read_arff_header", "read_mulan_labels"]

_NUMERIC = {"numeric", "real", "integer"}
_ATTRIBUTE = re.compile(r"""@attribute\s+('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\S+)\s+(.*)$""",
                        re.IGNORECASE)


def _unquote(token: str) -> str:
    token = token.strip()
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"":
        return re.sub(r"\\(.)", r"\1", token[1:-1])
    return token


def _split_values(text: str) -> list[str]:
    """Split a comma-separated list, keeping commas inside quotes."""
    if "'" not in text and '"' not in text:
        return [t.strip() for t in text.split(",")]
    out, cur, quote, i = [], [], None, 0
    while i < len(text):
        ch = text[i]
        if quote:
            cur.append(ch)
            if ch == "\\" and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            cur.append(ch)
        elif ch == ",":
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    if quote:
        raise ValueError(f"unclosed quote in {text!r}")
    out.append("".join(cur).strip())
    return out


class _Attribute:
    __slots__ = ("name", "categories", "codes")

    def __init__(self, name, categories):
        self.name = name
        self.categories = categories  # None for numeric
        self.codes = None
        if categories is not None:
            try:
                values = [parse_value(c) for c in categories]
            except ValueError:
                values = [float(i) for i in range(len(categories))]
            self.codes = dict(zip(categories, values, strict=True))

    def value(self, token: str) -> float:
        token = _unquote(token)
        if token == "?":
            raise ValueError(f"missing value '?' for attribute {self.name!r} is not supported")
        if self.codes is not None:
            try:
                return self.codes[token]
            except KeyError:
                raise ValueError(f"value {token!r} of attribute {self.name!r} is not one of "
                                 f"its categories {{{','.join(self.categories)}}}") from None
        try:
            v = parse_value(token)
        except ValueError:
            raise ValueError(f"value {shown(token)} of numeric attribute {self.name!r} is not "
                             "a number") from None
        if not math.isfinite(v):
            raise ValueError(f"value {token!r} of attribute {self.name!r} is not finite")
        return v


def _finite_in(value: float, dtype) -> bool:
    """Whether ``value`` stays finite once cast to ``dtype``."""
    with np.errstate(over="ignore"):
        return bool(np.isfinite(np.asarray(value, dtype=dtype)))


def _parse_attribute(line: str) -> _Attribute:
    m = _ATTRIBUTE.match(line.strip())
    if not m:
        raise ValueError(f"bad @attribute line {line.strip()!r}: expected "
                         "'@attribute <name> <type>'")
    name, kind = _unquote(m.group(1)), m.group(2).strip()
    if kind.startswith("{"):
        if not kind.endswith("}"):
            raise ValueError(f"nominal type of attribute {name!r} lacks its closing '}}'")
        return _Attribute(name, [_unquote(c) for c in _split_values(kind[1:-1])])
    if kind.lower() in _NUMERIC:
        return _Attribute(name, None)
    raise ValueError(f"attribute {name!r} has type {kind!r}; supported are numeric, real, "
                     "integer and nominal {...}")


def read_mulan_labels(path: str | Path) -> list[str]:
    """Label names, in document order, from a Mulan XML label file.

    Parameters
    ----------
    path : str or Path
        ``<labels xmlns="http://mulan.sourceforge.net/labels"><label name="a"/>...``;
        nested (hierarchical) labels are all returned.

    Returns
    -------
    list of str

    Raises
    ------
    tasks.errors.InputError
        If the file is not well-formed XML or names no label.
    """
    path = Path(path)
    text = decode_text(read_bytes(path), path)
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise InputError(f"not well-formed XML ({exc})", path=path,
                         line=exc.position[0]) from None
    names = [el.get("name") for el in root.iter()
             if el.tag.rsplit("}", 1)[-1] == "label" and el.get("name") is not None]
    if not names:
        raise InputError("no <label name=...> element found", path=path)
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise InputError(f"the label {twice!r} is named twice", path=path)
    return names


def _read_header(numbered, path: Path) -> tuple[list[_Attribute], list[int], int]:
    """The attributes, their lines and the line of ``@data``, from ``(lineno, line)`` pairs
    read up to ``@data`` only."""
    attrs: list[_Attribute] = []
    attr_lines: list[int] = []
    first: dict[str, int] = {}  # an attribute's name -> its line
    lineno = 0
    for lineno, line in numbered:
        s = line.strip()
        if not s or s.startswith("%"):
            continue
        low = s.lower()
        if low.startswith("@data"):
            return attrs, attr_lines, lineno
        if low.startswith("@attribute"):
            try:
                attr = _parse_attribute(s)
            except ValueError as exc:
                raise InputError(str(exc), path=path, line=lineno) from None
            if attr.name in first:
                raise InputError(f"attribute {attr.name!r} is declared twice (first on line "
                                 f"{first[attr.name]}): a value could not be told to one",
                                 path=path, line=lineno)
            first[attr.name] = lineno
            attrs.append(attr)
            attr_lines.append(lineno)
        elif low.startswith("@relation"):
            continue
        else:
            raise InputError(f"unexpected header line {s[:60]!r}: expected @relation, "
                             "@attribute or @data", path=path, line=lineno)
    raise InputError("no @data section: the header ends without '@data'", path=path,
                     line=lineno)


def _label_columns(attrs: list[_Attribute], attr_lines: list[int], data_line: int,
                   n_labels: int | None, label_names: list[str] | None,
                   path: Path) -> list[int]:
    """The columns of the label attributes (the last ``n_labels``, or those named
    ``label_names``), checked: binary, and at least one attribute left as a feature."""
    n_attr = len(attrs)
    if label_names is not None:
        twice = next((n for i, n in enumerate(label_names) if n in label_names[:i]), None)
        if twice is not None:
            raise InputError(f"the label {twice!r} is named twice in the label list: one "
                             "attribute would be two columns of Y", path=path)
        position = {a.name: i for i, a in enumerate(attrs)}
        missing = [name for name in label_names if name not in position]
        if missing:
            raise InputError(f"{len(missing)} label names are not attributes of the ARFF "
                             f"file, e.g. {missing[0]!r}", path=path)
        label_cols = [position[name] for name in label_names]
        if len(set(label_cols)) == n_attr:
            raise InputError(f"the {n_attr} attributes are all labels: no feature attribute "
                             "is left", path=path, line=data_line)
    else:
        if n_labels == n_attr:
            raise InputError(f"n_labels={n_labels} makes all {n_attr} attributes labels: no "
                             "feature attribute is left", path=path, line=data_line)
        if not 1 <= n_labels < n_attr:
            raise InputError(f"n_labels={n_labels} but the file declares {n_attr} "
                             "attributes", path=path, line=data_line)
        label_cols = list(range(n_attr - n_labels, n_attr))
    for c in label_cols:
        cats = attrs[c].categories
        if cats is not None and not set(cats) <= {"0", "1"}:
            raise InputError(f"label attribute {attrs[c].name!r} has categories {cats}; "
                             "expected {0,1}", path=path, line=attr_lines[c])
    return label_cols


def read_arff_header(path: str | Path, *, n_labels: int | None = None,
                     label_names: list[str] | None = None) -> tuple[list[str], list[str]]:
    """The feature and label names of a Mulan ARFF file, from its header alone.

    The file is read no further than its ``@data`` line; the arguments are those of
    :func:`read_arff`, and the header's errors are the ones it gives.

    Returns
    -------
    feature_names, label_names : list of str
    """
    if (n_labels is None) == (label_names is None):
        raise ValueError("give exactly one of n_labels and label_names")
    path = Path(path)
    attrs, attr_lines, data_line = _read_header(enumerate(iter_lines(path), start=1), path)
    label_cols = _label_columns(attrs, attr_lines, data_line, n_labels, label_names, path)
    labels = set(label_cols)
    return ([a.name for i, a in enumerate(attrs) if i not in labels],
            [attrs[c].name for c in label_cols])


def read_arff(path: str | Path, *, n_labels: int | None = None,
              label_names: list[str] | None = None, dtype=np.float64):
    """Read a Mulan multi-label ARFF file (dense or sparse rows).

    Parameters
    ----------
    path : str or Path
        The file; gzip when the name ends in ``.gz``.
    n_labels : int, optional
        The last ``n_labels`` attributes are the labels (Mulan's convention).
    label_names : list of str, optional
        Names of the label attributes (e.g. from :func:`read_mulan_labels`), in the
        order wanted for the columns of ``Y``.  Give exactly one of the two.
    dtype : {np.float64, np.float32}, default=np.float64
        dtype of ``X``.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n, d), ``dtype``
        The non-label attributes, in file order.
    Y : scipy.sparse.csr_matrix of shape (n, L), int8
    feature_names : list of str
    label_names : list of str

    Raises
    ------
    tasks.errors.InputError
        On malformed input, with the file and line.
    ValueError
        If neither or both of ``n_labels`` and ``label_names`` are given.
    """
    if (n_labels is None) == (label_names is None):
        raise ValueError("give exactly one of n_labels and label_names")
    path = Path(path)
    lines = decode_text(read_bytes(path), path).split("\n")
    n_lines = len(lines) - (lines[-1] == "")
    attrs, attr_lines, data_line = _read_header(enumerate(lines[:n_lines], start=1), path)
    n_attr = len(attrs)
    names = [a.name for a in attrs]
    label_cols = _label_columns(attrs, attr_lines, data_line, n_labels, label_names, path)
    # Attribute column -> (is_label, column in X or Y).
    is_label = np.zeros(n_attr, dtype=bool)
    is_label[label_cols] = True
    target = np.empty(n_attr, dtype=np.int64)
    target[label_cols] = np.arange(len(label_cols))
    target[~is_label] = np.arange(n_attr - len(label_cols))

    largest = float(np.finfo(dtype).max)
    x_rows, x_cols, x_vals, y_rows, y_cols = [], [], [], [], []
    n = 0
    for lineno in range(data_line + 1, len(lines) + 1):
        s = lines[lineno - 1].strip()
        if not s or s.startswith("%"):
            continue
        try:
            if s.startswith("{"):
                if not s.endswith("}"):
                    raise ValueError("sparse row must end with '}' (instance weights "
                                     "'{...}, {w}' are not supported)")
                body = s[1:-1].strip()
                pairs = []
                for item in (_split_values(body) if body else []):
                    parts = item.split(None, 1)
                    if len(parts) != 2:
                        raise ValueError(f"sparse entry {item!r} is not 'index value'")
                    try:
                        col = parse_index(parts[0])
                    except ValueError as exc:
                        raise ValueError(f"sparse index {exc}") from None
                    if not 0 <= col < n_attr:
                        raise ValueError(f"sparse index {col} is out of range [0, {n_attr})")
                    pairs.append((col, parts[1]))
                cols = [c for c, _ in pairs]
                if len(set(cols)) != len(cols):
                    raise ValueError("a sparse index is repeated")
            else:
                values = _split_values(s)
                if len(values) != n_attr:
                    raise ValueError(f"dense row has {len(values)} values, expected {n_attr}")
                pairs = list(enumerate(values))
            for col, token in pairs:
                v = attrs[col].value(token)
                if v == 0:
                    continue
                if is_label[col]:
                    if v != 1:
                        raise ValueError(f"label {attrs[col].name!r} has value {token!r}; "
                                         "expected 0 or 1")
                    y_rows.append(n)
                    y_cols.append(target[col])
                else:
                    if abs(v) > largest and not _finite_in(v, dtype):
                        raise ValueError(f"value {token!r} of attribute {attrs[col].name!r} "
                                         f"is not finite in {np.dtype(dtype).name} (largest "
                                         f"{largest:.4g})")
                    x_rows.append(n)
                    x_cols.append(target[col])
                    x_vals.append(v)
        except ValueError as exc:
            raise InputError(str(exc), path=path, line=lineno) from None
        n += 1
    if n == 0:
        raise InputError("the @data section has no row; a dataset needs at least one",
                         path=path, line=data_line)
    d = n_attr - len(label_cols)
    X = sp.csr_matrix((np.asarray(x_vals, dtype=dtype),
                       (np.asarray(x_rows, dtype=np.int64), np.asarray(x_cols, dtype=np.int64))),
                      shape=(n, d))
    Y = sp.csr_matrix((np.ones(len(y_rows), dtype=np.int8),
                       (np.asarray(y_rows, dtype=np.int64), np.asarray(y_cols, dtype=np.int64))),
                      shape=(n, len(label_cols)))
    X.sort_indices()
    Y.sort_indices()
    feature_names = [names[i] for i in range(n_attr) if not is_label[i]]
    return X, Y, feature_names, [names[c] for c in label_cols]
