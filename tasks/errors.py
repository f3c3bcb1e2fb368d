"""Errors that the command line turns into one clear line and exit code 2.

Readers and config loaders raise :class:`InputError` naming the file and the
line (or the config key) at fault.  ``algorithms/`` never raises it: pure
functions raise ``ValueError`` as scikit-learn does, and the task that called
them adds the file it was working on.
"""

from __future__ import annotations

import reprlib
from pathlib import Path

# An error is one short line: a message that echoes input (a 25-million-field header, a YAML
# alias bomb) is cut to this many characters.
MAX_MESSAGE = 300


_SHORT = reprlib.Repr()  # (keyword arguments only from Python 3.12)
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 2, 60, 60, 40
_SHORT.maxtuple = _SHORT.maxlist = _SHORT.maxdict = _SHORT.maxset = 4


def excerpt(value: object, limit: int = 60) -> str:
    """A ``repr`` of ``value`` cut to ``limit`` characters, for echoing input in a message;
    nested values are abbreviated as they are walked (a YAML alias bomb is never expanded)."""
    shown = _SHORT.repr(value)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def one_line(message: str, limit: int = MAX_MESSAGE) -> str:
    """The message on one line (newlines folded) and at most ``limit`` characters long."""
    text = " ".join(str(message).split())
    return text if len(text) <= limit else f"{text[: limit - 30]}… ({len(text):,} characters)"


class InputError(ValueError):
    """Bad input: a malformed file, a missing file or an invalid config value.

    Parameters
    ----------
    message : str
        What was wrong and what was expected.
    path : str or Path, optional
        The file at fault.
    line : int, optional
        1-based line number in ``path``.
    key : str, optional
        Dotted config key at fault (``leml.rank``).
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        key: str | None = None,
    ) -> None:
        self.message = one_line(message)
        self.path = None if path is None else str(path)
        self.line = line
        self.key = key
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path or ""
        if self.line is not None:
            where = f"{where}:{self.line}" if where else f"line {self.line}"
        if self.key is not None:
            where = f"{where}: key '{self.key}'" if where else f"key '{self.key}'"
        return f"{where}: {self.message}" if where else self.message

    def __reduce__(self):  # keep the keyword arguments across processes (Dask)
        return (_rebuild, (self.message, self.path, self.line, self.key))


def _rebuild(message, path, line, key):
    return InputError(message, path=path, line=line, key=key)
