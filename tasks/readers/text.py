"""Bytes and text of an input file, for every reader: one place for gzip and UTF-8.

A name ending in ``.gz`` is read as gzip (a file that is not gzip-compressed, or whose stream
is truncated or corrupt, is an :class:`~scarce.tasks.errors.InputError` naming the file and the line
at which the readable data stop); text must be UTF-8 (a byte-order mark is dropped, ``\\r\\n``
becomes ``\\n``), and an undecodable byte is named by its line.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path

from scarce.tasks.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
BOM = "\ufeff".encode()
_CHUNK = 1 << 16


def _is_gzip(path: Path) -> bool:
    """True when the name ends in ``.gz`` (and the file starts as gzip does), False for a
    plain file; :class:`InputError` for a missing, unreadable or misnamed file."""
    if not path.is_file():
        raise InputError("file not found", path=path)
    if not path.name.endswith(".gz"):
        return False
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", path=path) from None
    if magic != GZIP_MAGIC:
        raise InputError("the name ends in .gz but the file is not gzip-compressed "
                         "(rename it, or compress it)", path=path)
    return True


def gzip_twin(paths) -> tuple[Path, Path] | None:
    """The first ``(x, x.gz)`` of ``paths`` (a folder's files) that names one file both
    plain and gzipped, or None.  Which of the two holds the data is not for a reader to
    guess (one may be an edited copy of the other), so every folder listing refuses such a
    pair, naming both."""
    names = {Path(p).name: Path(p) for p in paths}
    for name, path in sorted(names.items()):
        plain = name.removesuffix(".gz")
        if plain != name and plain in names:
            return names[plain], path
    return None


def check_no_gzip_twin(paths, key: str | None = None) -> None:
    """:class:`InputError` naming both files of a :func:`gzip_twin` pair (and ``key``,
    the config key that names their folder)."""
    twin = gzip_twin(paths)
    if twin is not None:
        plain, gz = twin
        raise InputError(f"both {plain.name} and {gz.name} are here: one document or data "
                         "set, twice, and which to read is not guessed; remove or rename one",
                         path=plain.parent, key=key)


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, gunzipped when the name ends in ``.gz``."""
    path = Path(path)
    if _is_gzip(path):
        return b"".join(_chunks(path, gz=True))
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", path=path) from None


def _chunks(path: Path, gz: bool) -> Iterator[bytes]:
    """The file's bytes a chunk at a time, gunzipped when ``gz``: a cut or corrupt gzip stream
    is named by the line at which its readable data stop."""
    lines, seen = 0, False
    try:
        with gzip.open(path, "rb") if gz else open(path, "rb") as fh:
            # read1: one decompression step at a time, so the data before a cut are kept
            # (read(n) loops until n bytes and loses them when the stream ends early).
            while chunk := (fh.read1(_CHUNK) if gz else fh.read(_CHUNK)):
                lines += chunk.count(b"\n")
                seen = True
                yield chunk
    except EOFError:
        raise InputError(f"truncated gzip file: the compressed data end after line {lines} "
                         "(was the download or copy interrupted?)",
                         path=path, line=lines + 1) from None
    except (OSError, zlib.error) as exc:
        if not gz:
            raise InputError(f"cannot read ({exc.strerror})", path=path) from None
        raise InputError(f"corrupt gzip file ({exc})", path=path,
                         line=lines + 1 if seen else None) from None


def iter_lines(path: str | Path) -> Iterator[str]:
    """The lines of :func:`read_lines`, read as they are asked for: a caller that stops at a
    file's header (the Extreme Classification ``N D L`` line, an ARFF file's attributes)
    reads no further than that, and gets the errors :func:`read_lines` would give there."""
    path = Path(path)
    pending: list[bytes] = []  # the start of a line longer than a chunk, in pieces
    offset, lineno = 0, 0

    def decode(raw: bytes) -> str:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte "
                             f"{offset + exc.start})", path=path, line=lineno) from None
        if lineno == 1 and text.startswith("\ufeff"):
            text = text[1:]
        return text.rstrip("\r")

    for chunk in _chunks(path, _is_gzip(path)):
        if b"\n" not in chunk:
            pending.append(chunk)
            continue
        *complete, rest = b"".join([*pending, chunk]).split(b"\n")
        pending = [rest]
        for raw in complete:
            lineno += 1
            yield decode(raw)
            offset += len(raw) + 1
    last = b"".join(pending)
    if last and not (lineno == 0 and last == BOM):  # a byte-order mark alone is no line
        lineno += 1
        yield decode(last)


def decode_text(raw: bytes, path: str | Path) -> str:
    """UTF-8 text with ``\\r\\n`` normalised, or :class:`InputError` naming the line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte {exc.start})",
                         path=path, line=raw[:exc.start].count(b"\n") + 1) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n")


def read_text(path: str | Path) -> str:
    """The file as UTF-8 text (see the module docstring)."""
    return decode_text(read_bytes(path), path)


def read_lines(path: str | Path) -> list[str]:
    """The lines of :func:`read_text`, without their line ends (a final newline adds none)."""
    text = read_text(path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]
