"""Bytes and text of an input file, for every reader: one place for gzip and UTF-8.

A name ending in ``.gz`` is read as gzip (a file that is not gzip-compressed, or whose stream
is truncated or corrupt, is an :class:`~tasks.errors.InputError` naming the file and the line
at which the readable data stop); text must be UTF-8 (a byte-order mark is dropped, ``\\r\\n``
becomes ``\\n``), and an undecodable byte is named by its line.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from tasks.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, gunzipped when the name ends in ``.gz``."""
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", path=path)
    try:
        if not path.name.endswith(".gz"):
            return path.read_bytes()
        with open(path, "rb") as fh:
            magic = fh.read(2)
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", path=path) from None
    if magic != GZIP_MAGIC:
        raise InputError("the name ends in .gz but the file is not gzip-compressed "
                         "(rename it, or compress it)", path=path)
    chunks: list[bytes] = []
    try:
        with gzip.open(path, "rb") as fh:
            # read1: one decompression step at a time, so the data before a cut are kept
            # (read(n) loops until n bytes and loses them when the stream ends early).
            while chunk := fh.read1(1 << 16):
                chunks.append(chunk)
    except EOFError:
        lines = b"".join(chunks).count(b"\n")
        raise InputError(f"truncated gzip file: the compressed data end after line {lines} "
                         "(was the download or copy interrupted?)",
                         path=path, line=lines + 1) from None
    except (OSError, zlib.error) as exc:
        done = b"".join(chunks)
        raise InputError(f"corrupt gzip file ({exc})", path=path,
                         line=done.count(b"\n") + 1 if done else None) from None
    return b"".join(chunks)


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
