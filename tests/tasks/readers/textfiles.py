"""Writing small input files for the reader tests."""

from __future__ import annotations

import gzip
from pathlib import Path


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` as UTF-8, gzip-compressed when the name ends in ``.gz``."""
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path
