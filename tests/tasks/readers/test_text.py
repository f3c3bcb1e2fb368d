"""The shared text helpers: lines read as asked for give what the whole-file reader gives."""

from __future__ import annotations

import gzip

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarce.tasks.errors import InputError
from scarce.tasks.readers import text
from scarce.tasks.readers.text import iter_lines, read_lines


def _write(path, raw: bytes, gz: bool):
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


@settings(max_examples=60, deadline=None)
@given(raw=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\r\n", b"\r", b"\xc3\xa9", b" ",
                                     b"\xef\xbb\xbf"]), max_size=40).map(b"".join),
       gz=st.booleans(), chunk=st.sampled_from([1, 2, 3, 7, 1 << 16]))
def test_iter_lines_gives_the_lines_of_read_lines(tmp_path_factory, raw, gz, chunk):
    path = _write(tmp_path_factory.mktemp("t") / ("f.txt.gz" if gz else "f.txt"), raw, gz)
    original, text._CHUNK = text._CHUNK, chunk  # lines across chunk boundaries
    try:
        assert list(iter_lines(path)) == read_lines(path)
    finally:
        text._CHUNK = original


@pytest.mark.parametrize("gz", [False, True])
def test_an_undecodable_byte_is_named_as_read_lines_names_it(tmp_path, gz):
    raw = "é line one\nline two\n".encode() + b"caf\xe9\n" + b"more\n" * 3
    path = _write(tmp_path / ("f.txt.gz" if gz else "f.txt"), raw, gz)
    with pytest.raises(InputError) as whole:
        read_lines(path)
    lines = iter_lines(path)
    assert [next(lines), next(lines)] == ["é line one", "line two"]
    with pytest.raises(InputError) as lazy:
        next(lines)
    assert str(lazy.value) == str(whole.value)
    assert lazy.value.line == 3 and "byte 0xe9 at byte 24" in str(lazy.value)


def test_a_cut_gzip_stream_gives_its_first_lines_then_names_where_it_stops(tmp_path):
    body = "".join(f"{i} {i * 7919 % 1000}\n" for i in range(20000)).encode()
    whole = gzip.compress(body)
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(whole[: len(whole) // 2])
    assert next(iter_lines(path)) == "0 0"
    with pytest.raises(InputError, match="truncated gzip file") as err:
        list(iter_lines(path))
    with pytest.raises(InputError, match="truncated gzip file") as whole_err:
        read_lines(path)
    assert err.value.line == whole_err.value.line > 1


def test_missing_and_misnamed_files(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        next(iter_lines(tmp_path / "absent.txt"))
    (tmp_path / "plain.txt.gz").write_text("not compressed\n")
    with pytest.raises(InputError, match="not gzip-compressed"):
        next(iter_lines(tmp_path / "plain.txt.gz"))
