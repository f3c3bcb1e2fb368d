"""Read CoNLL-U documents with CorefUD ``Entity=`` coreference annotations (GUM format).

One file may hold one or more documents (``# newdoc id = ...``).  Coreference is read from the
``Entity=`` attribute of the MISC column, in the CorefUD bracket notation used by GUM::

    # global.Entity = GRP-etype-infstat-salience-centering-minspan-link-identity
    2  visa   ...  Entity=(1-event-new-snsnn-cf2-2-sgl(2-abstract-new-snsnn-cf5-1-coref)
    3  snags  ...  Entity=1)

``(ID-attrs`` opens a mention of entity ``ID`` on this token, ``ID)`` closes the most recent open
mention of that entity, and ``(ID-attrs)`` is a single-token mention.  The attributes are split by
the ``global.Entity`` header (the last field, ``identity``, may itself contain hyphens).

In GUM the ``minspan`` field lists 1-based token offsets *within the mention* (``5`` for
"all-girl Afghan team" = "team"), comma separated when the minimal span has several tokens.
The mention head is the token of the minimal span (or of the whole mention when there is no
minspan) whose dependency head lies outside that token set; ties go to the leftmost.  A file
whose ``global.Entity`` declares a ``head`` field (CorefUD's ``eid-etype-head``, as
:func:`write_chains` writes) gives each mention's head there, and it is taken as written.

Mentions must open and close in one sentence (true for every GUM document); discontinuous
mentions (``[1/2]``) are rejected, and so is a MISC column with two ``Entity=`` items (every
bracket of a token belongs in its one ``Entity=`` value).  Multiword-token lines (``1-2``) and
empty nodes (``1.1``) are skipped.  A token's HEAD must not be the token itself nor lead back to
it (a dependency tree has no cycle).  A file without a token line (empty, or comments only),
and a document (``# newdoc``) without a sentence, are errors: there is nothing to read.

Never use ``etype``, ``infstat``, ``link`` or ``identity`` as classifier features: they are
assigned per entity and leak the coreference answer.

Not udapi: it took several times as long on GUM, its errors name no line, and it reads a
token line of nine columns, token ids that skip a number, two ``Entity=`` items and a mention
never closed (dropped) without a word.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from scarce.tasks.errors import InputError
from scarce.tasks.readers.numbers import is_index, parse_index
from scarce.tasks.readers.text import read_lines

__all__ = ["read_conllu", "read_conllu_files", "write_chains", "TOKEN_COLUMNS",
           "MENTION_COLUMNS"]

TOKEN_COLUMNS = [
    "doc", "sent", "token", "position", "form", "lemma", "upos", "xpos", "feats",
    "head", "deprel", "misc", "paragraph", "speaker",
]
MENTION_COLUMNS = [
    "doc", "mention", "entity", "etype", "infstat", "minspan", "link", "identity",
    "sent", "start", "end", "head", "position_start", "position_end", "position_head",
]

_DEFAULT_ENTITY_FIELDS = ["GRP", "etype", "infstat", "salience", "centering", "minspan", "link",
                          "identity"]
_BRACKET = re.compile(r"\(([^()]+)(\))?|([^()]+)\)")


def _doc_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".conllu"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


class _Doc:
    """Accumulates one document while parsing."""

    def __init__(self, doc_id: str, fields: list[str]):
        self.id = doc_id
        self.fields = fields
        self.n_sent = 0
        self.paragraph = -1
        self.position = 0
        self.mentions: list[tuple] = []


def _parse_entity_attrs(text, doc: _Doc, path, lineno):
    if "[" in text:
        raise InputError(f"discontinuous mention '{text}' is not supported", path=path,
                         line=lineno)
    parts = text.split("-", len(doc.fields) - 1)
    eid = parts[0]
    if not eid:
        raise InputError(f"empty entity id in '{text}'", path=path, line=lineno)
    attrs = dict(zip(doc.fields[1:], parts[1:], strict=False))
    return eid, attrs


def _mention_head(span_heads: np.ndarray, start: int, minspan: str, path, lineno) -> int:
    """Head token id (1-based, in the sentence) of the mention whose tokens start at ``start``.

    ``span_heads`` are the dependency heads of the mention's tokens.
    """
    length = len(span_heads)
    if minspan and minspan != "_":
        try:
            offsets = [parse_index(x) for x in minspan.split(",")]
        except ValueError:
            raise InputError(f"minspan '{minspan}' is not a comma-separated list of integers",
                             path=path, line=lineno) from None
        if min(offsets) < 1 or max(offsets) > length:
            raise InputError(f"minspan '{minspan}' outside a mention of {length} tokens",
                             path=path, line=lineno)
        ids = [start + o - 1 for o in offsets]
    else:
        ids = list(range(start, start + length))
    idset = set(ids)
    for t in ids:
        if int(span_heads[t - start]) not in idset:
            return t
    return ids[0]


def _token_head(text: str, k: int, n: int, path: Path, lineno: int) -> int:
    """The HEAD column of token ``k`` of a sentence of ``n`` tokens: 0 (the root) to ``n``, not
    ``k`` itself; -1 for ``_``."""
    if text == "_":
        return -1
    try:
        head = parse_index(text)
    except ValueError as exc:
        raise InputError(f"HEAD {exc}", path=path, line=lineno) from None
    if not 0 <= head <= n:
        raise InputError(f"HEAD {text} outside the sentence of {n} tokens", path=path,
                         line=lineno)
    if head == k:
        raise InputError(f"HEAD {text} is the token itself (a token's head is another "
                         "token, or 0 for the root)", path=path, line=lineno)
    return head


def _entity_value(misc: str, path: Path, lineno: int) -> str | None:
    """The value of the MISC column's ``Entity=`` item, None when it has none; two such items
    are refused (every bracket of a token belongs in its one value)."""
    if "Entity=" not in misc:
        return None
    values = [item[len("Entity="):] for item in misc.split("|") if item.startswith("Entity=")]
    if not values:
        return None
    if len(values) > 1:
        raise InputError(f"{len(values)} Entity= items in the MISC column; the brackets "
                         "of a token belong in one Entity= value", path=path, line=lineno)
    return values[0]


def _brackets(value: str, path: Path, lineno: int) -> Iterator[re.Match]:
    """The brackets of an ``Entity=`` value in order (:data:`_BRACKET`), each checked to
    follow the one before it; text that is no bracket is refused where it stands."""
    pos = 0
    for m in _BRACKET.finditer(value):
        if m.start() != pos:
            raise InputError(f"malformed Entity value '{value}' at character {pos}",
                             path=path, line=lineno)
        pos = m.end()
        yield m
    if pos != len(value):
        raise InputError(f"malformed Entity value '{value}' at character {pos}", path=path,
                         line=lineno)


class _Sentence:
    """One sentence's mentions while its tokens are read: the HEADs so far and the mentions
    open, by entity (a closing bracket closes the most recent open mention of its entity)."""

    def __init__(self, doc: _Doc, n_tokens: int, path: Path):
        self.doc = doc
        self.index = doc.n_sent
        self.base = doc.position  # position of the sentence's first token in the document
        self.path = path
        self.heads = np.empty(n_tokens + 1, dtype=np.int64)
        self.heads[0] = -1
        self.open: dict[str, list] = {}
        self.n_opened = 0

    def read_entities(self, k: int, misc: str, lineno: int) -> None:
        """Open and close the mentions that the MISC column of token ``k`` marks."""
        value = _entity_value(misc, self.path, lineno)
        if value is None:
            return
        for m in _brackets(value, self.path, lineno):
            if m.group(1) is not None:
                self._open(m.group(1), bool(m.group(2)), k, lineno)
            else:
                self._close_entity(m.group(3), k, lineno)

    def _open(self, text: str, single: bool, k: int, lineno: int) -> None:
        eid, attrs = _parse_entity_attrs(text, self.doc, self.path, lineno)
        rec = [eid, attrs, k, lineno, self.n_opened]
        self.n_opened += 1
        if single:  # a single-token mention
            self._add(rec, k)
        else:
            self.open.setdefault(eid, []).append(rec)

    def _close_entity(self, eid: str, k: int, lineno: int) -> None:
        if "[" in eid:
            raise InputError(f"discontinuous mention '{eid})' is not supported",
                             path=self.path, line=lineno)
        stack = self.open.get(eid)
        if not stack:
            raise InputError(f"closing bracket '{eid})' without an open mention of "
                             f"entity {eid} in this sentence", path=self.path, line=lineno)
        self._add(stack.pop(), k)

    def _add(self, rec: list, end: int) -> None:
        """The mention ``rec`` (opened at its token and line), ending at token ``end``, added
        to the document with its head."""
        eid, attrs, start, open_line, order = rec
        minspan = attrs.get("minspan", "")
        given = attrs.get("head", "")
        if given and given != "_":  # CorefUD's own head field (1-based in the mention), as written
            if not is_index(given) or not 1 <= parse_index(given) <= end - start + 1:
                raise InputError(f"head '{given}' outside a mention of {end - start + 1} tokens",
                                 path=self.path, line=open_line)
            head = start + parse_index(given) - 1
        else:
            head = _mention_head(self.heads[start:end + 1], start, minspan, self.path,
                                 open_line)
        base = self.base
        self.doc.mentions.append((
            eid, attrs.get("etype", ""), attrs.get("infstat", ""), minspan, attrs.get("link", ""),
            attrs.get("identity", ""), self.index, start, end, head, base + start - 1,
            base + end - 1, base + head - 1, order,
        ))

    def check_closed(self) -> None:
        """Every mention opened in the sentence was closed in it."""
        for eid, stack in self.open.items():
            if stack:
                raise InputError(f"mention of entity {eid} opened at line {stack[0][3]} is not "
                                 "closed in its sentence (unbalanced brackets)", path=self.path,
                                 line=stack[0][3])


class _Parser:
    """Reads a CoNLL-U file line by line into token and mention rows (:func:`_parse`)."""

    def __init__(self, path: Path):
        self.path = path
        self.tok_rows: list[tuple] = []
        self.men_rows: list[tuple] = []
        self.doc: _Doc | None = None
        self.fields = list(_DEFAULT_ENTITY_FIELDS)  # of the last # global.Entity
        self.sent_tokens: list[tuple] = []  # (lineno, cols) of the sentence being read
        self.speaker = None
        self.doc_lines: dict[str, int] = {}  # the line of each document's # newdoc

    def line(self, lineno: int, line: str) -> None:
        """Take one line: a blank line ends a sentence, ``#`` starts a comment, the rest are
        token lines."""
        if not line.strip():
            self.end_sentence()
        elif line.startswith("#"):
            self.comment(lineno, line)
        else:
            self.token_line(lineno, line)

    def comment(self, lineno: int, line: str) -> None:
        """A comment line: a new document or paragraph, the entity fields, the speaker."""
        if self.sent_tokens:
            raise InputError("comment line inside a sentence", path=self.path, line=lineno)
        key, eq, val = line[1:].partition("=")
        key = key.strip()
        val = val.strip()
        if key == "newdoc id" or key == "newdoc":
            self.start_doc(val if eq and val else f"{_doc_name(self.path)}#{len(self.men_rows)}",
                           lineno)
        elif key == "global.Entity" and eq:
            self.fields = val.split("-")
            if self.doc is not None:
                self.doc.fields = list(self.fields)
        elif key == "newpar" or key.startswith("newpar id"):
            self.current_doc().paragraph += 1
        elif key == "speaker" and eq:
            self.speaker = val

    def token_line(self, lineno: int, line: str) -> None:
        """A token line, kept for its sentence; multiword tokens and empty nodes are skipped."""
        cols = line.split("\t")
        if len(cols) != 10:
            raise InputError(f"{len(cols)} tab-separated columns where CoNLL-U has 10",
                             path=self.path, line=lineno)
        tid = cols[0]
        if "-" in tid or "." in tid:
            a, _, b = tid.replace(".", "-").partition("-")
            if not (is_index(a) and is_index(b)):
                raise InputError(f"bad token id '{tid}'", path=self.path, line=lineno)
            return  # multiword token or empty node
        if not is_index(tid):
            raise InputError(f"bad token id '{tid}' (expected a positive integer)",
                             path=self.path, line=lineno)
        self.sent_tokens.append((lineno, cols))

    def start_doc(self, doc_id: str, lineno: int | None = None) -> None:
        """End the document being read and start ``doc_id`` (``lineno``: its # newdoc line)."""
        self.end_doc()
        if doc_id in self.doc_lines:
            raise InputError(f"document {doc_id[:60]!r} appears twice in the file (first at "
                             f"line {self.doc_lines[doc_id]})", path=self.path, line=lineno)
        self.doc_lines[doc_id] = lineno or 0
        self.doc = _Doc(doc_id, list(self.fields))

    def current_doc(self) -> _Doc:
        """The document being read; one named after the file when none was started."""
        if self.doc is None:
            self.start_doc(_doc_name(self.path))
        return self.doc

    def end_doc(self) -> None:
        """The document's mentions, in order of position, added to the mention rows."""
        doc = self.doc
        if doc is None:
            return
        if doc.n_sent == 0:
            raise InputError(f"document {doc.id[:60]!r} has no sentence (no token line before "
                             "the next document or the end of the file)", path=self.path,
                             line=self.doc_lines[doc.id] or None)
        mentions = sorted(doc.mentions, key=lambda m: (m[6], m[7], -m[8], m[-1]))
        for k, m in enumerate(mentions):
            self.men_rows.append((doc.id, k) + m[:-1])
        self.doc = None

    def end_sentence(self) -> None:
        """The sentence's tokens checked and added, its mentions read."""
        tokens = self.sent_tokens
        if not tokens:
            return
        doc = self.current_doc()
        if doc.paragraph < 0:
            doc.paragraph = 0
        n = len(tokens)
        sentence = _Sentence(doc, n, self.path)
        for k, (lineno, cols) in enumerate(tokens, start=1):
            if cols[0] != str(k):
                raise InputError(f"token id '{cols[0]}' where {k} was expected (ids must be "
                                 "consecutive from 1 in each sentence)", path=self.path,
                                 line=lineno)
            head = sentence.heads[k] = _token_head(cols[6], k, n, self.path, lineno)
            self.tok_rows.append((doc.id, sentence.index, k, doc.position + k - 1, cols[1],
                                  cols[2], cols[3], cols[4], cols[5], head, cols[7], cols[9],
                                  doc.paragraph, self.speaker))
            sentence.read_entities(k, cols[9], lineno)
        sentence.check_closed()
        _check_acyclic(sentence.heads, tokens, self.path)
        doc.position += n
        doc.n_sent += 1
        self.sent_tokens = []
        self.speaker = None

    def end(self) -> tuple[list[tuple], list[tuple]]:
        """The token and mention rows, once every line was taken."""
        self.end_sentence()
        self.end_doc()
        if not self.tok_rows:
            raise InputError("no token line in the file (empty, or comments only): a CoNLL-U "
                             "document has at least one sentence", path=self.path)
        return self.tok_rows, self.men_rows


def _parse(lines: Iterable[str], path: Path):
    """Token rows and mention rows of the lines of a CoNLL-U file (:func:`read_conllu`)."""
    parser = _Parser(path)
    for lineno, raw in enumerate(lines, start=1):
        parser.line(lineno, raw.rstrip("\n").rstrip("\r"))
    return parser.end()


def _check_acyclic(heads: np.ndarray, sent_tokens: list[tuple], path: Path) -> None:
    """Every token's chain of HEADs reaches the root (0) or an unknown head (``_``): a cycle
    (``1 -> 2 -> 1``) is named at the line of its first token."""
    n = len(sent_tokens)
    state = np.zeros(n + 1, dtype=np.int8)  # 0 unvisited, 1 on the current chain, 2 done
    for k in range(1, n + 1):
        chain = []
        t = k
        while 1 <= t <= n and state[t] == 0:
            state[t] = 1
            chain.append(t)
            t = int(heads[t])
        if 1 <= t <= n and state[t] == 1:  # the chain came back to itself
            cycle = chain[chain.index(t):]
            shown = " -> ".join(str(c) for c in cycle[:6]) + (" -> ..." if len(cycle) > 6
                                                              else f" -> {cycle[0]}")
            raise InputError(f"the HEADs of tokens {shown} form a cycle (a dependency tree "
                             "reaches the root 0 from every token)", path=path,
                             line=sent_tokens[min(cycle) - 1][0])
        state[chain] = 2


def _frames(tok_rows, men_rows):
    tokens = pd.DataFrame(tok_rows, columns=TOKEN_COLUMNS)
    mentions = pd.DataFrame(men_rows, columns=MENTION_COLUMNS)
    for col in ("sent", "token", "position", "head", "paragraph"):
        tokens[col] = tokens[col].astype(np.int64)
    for col in ("mention", "sent", "start", "end", "head", "position_start", "position_end",
                "position_head"):
        mentions[col] = mentions[col].astype(np.int64)
    return tokens, mentions


def read_conllu(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read one CoNLL-U file (``.gz`` read transparently) with CorefUD entity annotations.

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    tokens : DataFrame
        One row per syntactic word: ``doc``, ``sent`` (0-based in the document), ``token``
        (CoNLL-U ID, 1-based in the sentence), ``position`` (0-based in the document), ``form``,
        ``lemma``, ``upos``, ``xpos``, ``feats``, ``head`` (CoNLL-U HEAD, 0 = root, -1 = ``_``),
        ``deprel``, ``misc``, ``paragraph`` (0-based, counted from ``# newpar``) and ``speaker``
        (``# speaker`` of the sentence or None).
    mentions : DataFrame
        One row per mention, ordered by position: ``doc``, ``mention`` (0-based in the
        document), ``entity`` (the id), ``etype``, ``infstat``, ``minspan``, ``link``,
        ``identity`` (annotation only, never features), ``sent``, ``start``, ``end``, ``head``
        (token ids in the sentence, inclusive) and ``position_start``, ``position_end``,
        ``position_head`` (0-based in the document).

    Raises
    ------
    InputError
        With the file and line on a wrong column count, a bad token id or HEAD, unbalanced
        entity brackets, a discontinuous mention or a bad minspan.
    """
    path = Path(path)
    tok_rows, men_rows = _parse(read_lines(path), path)
    return _frames(tok_rows, men_rows)


def read_conllu_files(paths: Iterable[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read several CoNLL-U files with :func:`read_conllu` and concatenate their frames.

    Raises
    ------
    InputError
        As :func:`read_conllu`, or when two files hold a document of the same id.
    """
    toks, mens = [], []
    seen: dict[str, Path] = {}
    for p in paths:
        t, m = read_conllu(p)
        for d in t["doc"].unique():
            if d in seen:
                raise InputError(f"document '{d}' also in {seen[d]}", path=p)
            seen[d] = Path(p)
        toks.append(t)
        mens.append(m)
    if not toks:
        return _frames([], [])
    return (pd.concat(toks, ignore_index=True), pd.concat(mens, ignore_index=True))


# -- writing predicted chains --------------------------------------------------------------
PREDICTED_ENTITY_FIELDS = "eid-etype-head"
_COREF_MISC = ("Entity=", "Bridge=", "SplitAnte=")


def _entity_misc(opening: list[tuple], closing: list[tuple], single: list[tuple]) -> str:
    """The ``Entity=`` value of one token in CorefUD 1.x order: closing brackets of the
    mentions ending here (the innermost first), then openings (the outermost first), with the
    single-token mentions after the openings, or before the closings when nothing opens here
    (the order udapi writes)."""
    def text(m):
        return "-".join(p for p in (f"e{m[0]}", m[1], str(m[2])))

    closes = "".join(f"e{m[0]})" for m in closing)
    opens = "".join(f"({text(m)}" for m in opening)
    singles = "".join(f"({text(m)})" for m in single)
    return closes + opens + singles if opening else singles + closes


def write_chains(path: str | Path, mentions: pd.DataFrame) -> str:
    """The CoNLL-U file ``path`` with its coreference replaced by predicted chains.

    Every line is kept as it is (comments, sentence ids, multiword tokens, the other MISC
    items), so the output aligns token by token with the input, as the CRAC scorer requires;
    the input's own ``Entity=``, ``Bridge=`` and ``SplitAnte=`` annotations are dropped and
    each document's ``# global.Entity`` becomes ``eid-etype-head``.

    Parameters
    ----------
    path : the input file (``.gz`` read transparently), as read by :func:`read_conllu`.
    mentions : one row per predicted mention: ``doc``, ``sent``, ``start``, ``end``, ``head``
        (sentence and token ids as :func:`read_conllu` gives them) and ``cluster`` (an integer;
        mentions of one cluster form one entity ``e<cluster>``); ``etype`` optional (written
        where known, empty otherwise).  Singletons are written as single mentions.

    Returns
    -------
    str
        The CoNLL-U text (UTF-8, ``\n`` line ends).
    """
    path = Path(path)
    by_token: dict[tuple, dict[str, list]] = {}
    etypes = mentions["etype"] if "etype" in mentions.columns else [""] * len(mentions)
    for doc, sent, start, end, head, cluster, etype in zip(
            mentions["doc"], mentions["sent"], mentions["start"], mentions["end"],
            mentions["head"], mentions["cluster"], etypes, strict=True):
        m = (int(cluster), "" if etype is None or pd.isna(etype) else str(etype),
             int(head) - int(start) + 1, int(start), int(end))
        if start == end:
            by_token.setdefault((doc, int(sent), int(start)), {}).setdefault("single", []).append(m)
        else:
            by_token.setdefault((doc, int(sent), int(start)), {}).setdefault("open", []).append(m)
            by_token.setdefault((doc, int(sent), int(end)), {}).setdefault("close", []).append(m)
    # The reader's own (doc, sent, token) of every token line, in file order: the writer
    # walks the same lines, so the two can never disagree on document or sentence numbers.
    tokens, _ = read_conllu(path)
    where = iter(zip(tokens["doc"], tokens["sent"], tokens["token"], strict=True))
    lines = read_lines(path)
    header = f"# global.Entity = {PREDICTED_ENTITY_FIELDS}"
    out: list[str] = []
    for line in lines:
        if line.startswith("#"):
            key = line[1:].partition("=")[0].strip()
            if key == "global.Entity":
                continue  # replaced by ours, after each # newdoc
            out.append(line)
            if key in ("newdoc id", "newdoc"):
                out.append(header)
            continue
        cols = line.split("\t")
        if len(cols) == 10 and cols[0].isdigit():
            doc, sent, tok = next(where)
            items = [i for i in cols[9].split("|") if i != "_" and not i.startswith(_COREF_MISC)]
            here = by_token.get((doc, int(sent), int(tok)))
            if here:
                opening = sorted(here.get("open", []), key=lambda m: (-m[4], m[0]))
                closing = sorted(here.get("close", []), key=lambda m: (-m[3], m[0]))
                single = sorted(here.get("single", []), key=lambda m: m[0])
                items.append("Entity=" + _entity_misc(opening, closing, single))
            cols[9] = "|".join(items) or "_"
            line = "\t".join(cols)
        out.append(line)
    if header not in out:  # no # newdoc line: the header opens the file
        out.insert(0, header)
    return "".join(f"{line}\n" for line in out)
