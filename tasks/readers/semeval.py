"""Reader for SemEval-2010 Task 8 relation files (Hendrickx et al., 2010).

Each record is four lines::

    15<TAB>"They saw that the <e1>equipment</e1> was put inside rollout <e2>drawers</e2>."
    Content-Container(e1,e2)
    Comment: the drawer contains the equipment
    <blank>

The reader returns one row per sentence with the sentence tokenised, the two
entity spans as token offsets ``[start, end)``, and the label in three forms:
``label`` (directed, as written, e.g. ``Cause-Effect(e2,e1)``), ``relation``
(the undirected type, ``Cause-Effect`` or ``Other``) and ``direction``
(``"e1,e2"``, ``"e2,e1"`` or ``None`` for ``Other``).

Tokenisation
------------
A deterministic regular expression, applied separately to the text outside and
inside the entity tags so that entity boundaries always fall between tokens::

    \\w+(?:[-'.]\\w+)*  |  [^\\w\\s]

i.e. runs of letters/digits/underscore that may contain inner hyphens,
apostrophes or dots (``well-known``, ``don't``, ``U.S``, ``3.5``), otherwise
every other non-space character is its own token (punctuation).  Tokens keep
their case; lowercasing is a context-building option.

Errors
------
:class:`scarce.tasks.errors.InputError` with the file and the 1-based line on: a bad
id/sentence line, missing / duplicated / nested / unclosed tags, a closing tag
before its opening one, ``<e2>`` before ``<e1>`` (the data set numbers the
mentions in order of appearance), an empty entity, a missing or unknown label
line, a missing ``Comment:`` line and duplicated ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from scarce.tasks.errors import InputError
from scarce.tasks.readers.numbers import MAX_INDEX, cut, parse_index
from scarce.tasks.readers.text import read_lines

MAX_ID = MAX_INDEX  # ids are stored as int64

RELATION_TYPES = (
    "Cause-Effect",
    "Instrument-Agency",
    "Product-Producer",
    "Content-Container",
    "Entity-Origin",
    "Entity-Destination",
    "Component-Whole",
    "Member-Collection",
    "Message-Topic",
)
"""The nine SemEval-2010 Task 8 relation types (``Other`` is the tenth label)."""

COLUMNS = ["id", "tokens", "e1_start", "e1_end", "e2_start", "e2_end", "label", "relation",
           "direction"]

TOKEN_RE = re.compile(r"\w+(?:[-'.]\w+)*|[^\w\s]")
_TAG_RE = re.compile(r"(</?e[12]>)")
# (an id is ASCII digits, tasks.readers.numbers: \d would take any script's digits)
_HEAD_RE = re.compile(r"^\s*([0-9]+)\t\s*\"(.*)\"\s*$")
_LABEL_RE = re.compile(r"^([A-Za-z]+-[A-Za-z]+)\((e[12]),(e[12])\)$")


def tokenize(text: str) -> list[str]:
    """Split ``text`` into tokens with the module's regular expression."""
    return TOKEN_RE.findall(text)


def parse_marked_sentence(sentence: str) -> tuple[list[str], tuple[int, int], tuple[int, int]]:
    """Tokenise a sentence with ``<e1>..</e1>`` and ``<e2>..</e2>`` markup.

    Parameters
    ----------
    sentence : str
        The sentence text without the surrounding quotes.

    Returns
    -------
    tokens : list of str
    e1, e2 : tuple of int
        Token spans ``[start, end)`` of the two entity mentions.

    Raises
    ------
    ValueError
        On missing, duplicated, nested, unclosed or reversed markup, or an empty entity.
    """
    for name in ("e1", "e2"):
        if f"<{name}>" not in sentence and f"</{name}>" not in sentence:
            raise ValueError(f"missing <{name}>..</{name}> markup")
    tokens: list[str] = []
    spans: dict[str, list[int]] = {}
    seen_open: set[str] = set()
    open_tag: str | None = None
    for piece in _TAG_RE.split(sentence):
        if not piece:
            continue
        m = _TAG_RE.fullmatch(piece)
        if m is None:
            tokens.extend(tokenize(piece))
            continue
        name = piece.strip("</>")
        if piece.startswith("</"):
            if name not in seen_open:
                raise ValueError(f"closing tag {piece} before <{name}>")
            if open_tag is None:
                raise ValueError(f"duplicated tag {piece}")
            if open_tag != name:
                raise ValueError(f"closing tag {piece} inside <{open_tag}> (nested markup)")
            spans[name].append(len(tokens))
            open_tag = None
            continue
        if name in seen_open:
            raise ValueError(f"duplicated tag <{name}>")
        if open_tag is not None:
            raise ValueError(f"tag <{name}> nested inside <{open_tag}>")
        if name == "e2" and "e1" not in seen_open:
            raise ValueError("<e2> appears before <e1>; expected the mentions in order e1, e2")
        seen_open.add(name)
        open_tag = name
        spans[name] = [len(tokens)]
    if open_tag is not None:
        raise ValueError(f"tag <{open_tag}> is never closed")
    for name in ("e1", "e2"):
        if name not in spans:
            raise ValueError(f"missing <{name}>..</{name}> markup")
        start, end = spans[name]
        if end <= start:
            raise ValueError(f"entity <{name}> contains no token")
    return tokens, (spans["e1"][0], spans["e1"][1]), (spans["e2"][0], spans["e2"][1])


def parse_label(label: str) -> tuple[str, str | None]:
    """Split a directed label into (relation type, direction).

    ``"Cause-Effect(e2,e1)"`` gives ``("Cause-Effect", "e2,e1")``; ``"Other"`` gives
    ``("Other", None)``.  Raises ``ValueError`` on anything else.
    """
    if label == "Other":
        return "Other", None
    m = _LABEL_RE.match(label)
    if m is None or m.group(1) not in RELATION_TYPES or {m.group(2), m.group(3)} != {"e1", "e2"}:
        raise ValueError(f"unknown label {label!r}; expected 'Other' or one of "
                         f"{', '.join(RELATION_TYPES)} followed by (e1,e2) or (e2,e1)")
    return m.group(1), f"{m.group(2)},{m.group(3)}"


def _numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    yield from enumerate(read_lines(path), start=1)


def read_semeval(path: str | Path) -> pd.DataFrame:
    """Read a SemEval-2010 Task 8 file: with labels (``TRAIN_FILE.TXT``, ``TEST_FILE_FULL.TXT``:
    four lines a record) or without (``TEST_FILE.TXT``: one sentence line a record).

    The first sentence decides: when the line right after it is another sentence line, or there
    is none, the file has no label lines and its pairs no labels; a label line later in such a
    file (or a label missing in a labelled one) is an error.

    Parameters
    ----------
    path : str or Path
        The file; read as gzip when the name ends in ``.gz``.

    Returns
    -------
    pandas.DataFrame
        Columns ``id`` (int), ``tokens`` (list of str), ``e1_start``, ``e1_end``,
        ``e2_start``, ``e2_end`` (int token offsets, end exclusive), ``label``
        (directed), ``relation`` (undirected type), ``direction`` (``"e1,e2"``,
        ``"e2,e1"``, missing for ``Other``), in file order; the three label columns are
        missing in a file without labels.

    Raises
    ------
    tasks.errors.InputError
        On malformed input, naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", path=path)
    rows: list[tuple] = []
    seen: dict[int, int] = {}
    lines = _numbered_lines(path)
    labelled: bool | None = None  # decided by the line after the first sentence
    pending: list[tuple[int, str]] = []  # a line read ahead, to be read again
    while (item := pending.pop() if pending else next(lines, None)) is not None:
        lineno, line = item
        if not line.strip():
            continue
        m = _HEAD_RE.match(line)
        if m is None:
            hint = "" if labelled is not False else (
                f" (the sentence on line {rows[0][-1]} has no label line, so no sentence has)")
            raise InputError(f"expected '<id><TAB>\"sentence\"', got {line[:60]!r}{hint}",
                             path=path, line=lineno)
        try:  # (a 5,000-digit id is refused before int() reads it)
            sid = parse_index(m.group(1))
        except ValueError:
            raise InputError(f"id {cut(m.group(1))} is out of range (at most "
                             f"{MAX_ID})", path=path, line=lineno) from None
        if sid in seen:
            raise InputError(f"duplicated id {sid} (first on line {seen[sid]})",
                             path=path, line=lineno)
        seen[sid] = lineno
        try:
            tokens, e1, e2 = parse_marked_sentence(m.group(2))
        except ValueError as exc:
            raise InputError(f"sentence {sid}: {exc}", path=path, line=lineno) from None
        label_no, label = next(lines, (lineno + 1, None))
        if labelled is None:
            labelled = label is not None and _HEAD_RE.match(label) is None
        if not labelled:
            if label is not None:
                pending.append((label_no, label))
            rows.append((sid, tokens, e1[0], e1[1], e2[0], e2[1], None, None, None, lineno))
            continue
        if label is None or not label.strip() or _HEAD_RE.match(label):
            raise InputError(f"sentence {sid}: missing label line", path=path, line=label_no)
        label = label.strip()
        try:
            relation, direction = parse_label(label)
        except ValueError as exc:
            raise InputError(f"sentence {sid}: {exc}", path=path, line=label_no) from None
        comment_no, comment = next(lines, (label_no + 1, None))
        if comment is None or not comment.startswith("Comment:"):
            raise InputError(f"sentence {sid}: expected a 'Comment:' line after the label",
                             path=path, line=comment_no)
        rows.append((sid, tokens, e1[0], e1[1], e2[0], e2[1], label, relation, direction,
                     lineno))
    if not rows:
        raise InputError("no sentences found", path=path)
    df = pd.DataFrame([r[:-1] for r in rows], columns=COLUMNS)
    for col in ("id", "e1_start", "e1_end", "e2_start", "e2_end"):
        df[col] = df[col].astype("int64")
    return df
