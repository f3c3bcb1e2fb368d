"""The one syntax of a number in every reader: an index and a value.

An **index** (a feature or label index, an ARFF sparse index, a CoNLL-U HEAD, a SemEval id) is
ASCII decimal digits and nothing else: ``17``, ``007``.  Not ``1e1``, ``3.0``, ``+3``, ``1_0``
or ``٣``: Python's ``int`` takes the last three, pandas' integer parser the first four, NumPy's
float parser all five, so a reader that leaned on any of them took a syntax another reader
refused, or read ``1e-1000`` as index 0.  An index has at most :data:`MAX_INDEX_DIGITS`
digits and is at most :data:`MAX_INDEX` (an int64), checked before ``int`` is called (which
refuses a 5,000-digit string with an error of its own).

A **value** is a decimal number with an optional sign, fraction and exponent (``-0.5``,
``.5``, ``1e-3``, ``2.``), or ``nan`` / ``inf`` / ``infinity`` (any case, refused by the
readers as not finite, with that message): what pandas' C parser reads as a float, so the
vectorised paths and the line-by-line ones agree.  Not ``1_0`` nor ``١.٥`` (which Python's
``float`` reads).
"""

from __future__ import annotations

import re

#: The largest index (int64).
MAX_INDEX = 2**63 - 1
#: Digits of the largest index.
MAX_INDEX_DIGITS = len(str(MAX_INDEX))

_INDEX = re.compile(r"[0-9]+")
_VALUE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                    r"|[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
# In text of ``index:value`` pairs separated by white space: an index part (from a pair's
# start to its colon) holding anything but digits.  Values hold no colon, so a match cannot
# start inside a value and reach a colon.
_BAD_INDEX_PART = re.compile(r"[^0-9\s:][^\s:]*:")
_INDEX_LIST = re.compile(r"[0-9,]*")


def cut(token: str, limit: int = 30) -> str:
    """``token`` cut to ``limit`` characters (a 5,000-digit id in a message)."""
    return token if len(token) <= limit else token[:limit] + "…"


def shown(token: str, limit: int = 30) -> str:
    """``repr`` of ``token`` cut to ``limit`` characters."""
    return repr(token) if len(token) <= limit else repr(token[:limit]) + "…"


def parse_index(token: str) -> int:
    """The index ``token`` writes (see the module docstring); ``ValueError`` saying why not."""
    if not _INDEX.fullmatch(token):
        raise ValueError(f"{shown(token)} is not an integer (digits 0-9 only)")
    digits = token.lstrip("0") or "0"
    if len(digits) > MAX_INDEX_DIGITS or int(digits) > MAX_INDEX:
        raise ValueError(f"{shown(token)} is beyond the largest index {MAX_INDEX} (int64)")
    return int(digits)


def is_index(token: str) -> bool:
    """Whether :func:`parse_index` takes ``token``."""
    try:
        parse_index(token)
    except ValueError:
        return False
    return True


def parse_value(token: str) -> float:
    """The number ``token`` writes (see the module docstring); ``ValueError`` saying why not."""
    if not _VALUE.fullmatch(token):
        raise ValueError(f"{shown(token)} is not a number")
    return float(token)


def index_parts_plain(pairs_text: str) -> bool:
    """Whether every ``index:value`` pair of ``pairs_text`` (pairs separated by white space)
    has an index part of digits only: the check a vectorised parser makes before trusting
    pandas' or NumPy's integer parse (which read ``1e1``, ``+3`` or ``3.0``)."""
    return _BAD_INDEX_PART.search(pairs_text) is None


def index_list_plain(text: str) -> bool:
    """Whether ``text`` holds digits and commas only (comma-separated indices)."""
    return _INDEX_LIST.fullmatch(text) is not None
