"""Extreme Classification text reader: bundled Bibtex, round trips, malformed input."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from scarce.tasks.errors import InputError
from scarce.tasks.readers.xmc import _parse_line, read_xmc, read_xmc_header

BIBTEX = Path(__file__).resolve().parents[3] / "data" / "xmc" / "bibtex"


def write_xmc(path: Path, X: sp.csr_matrix, Y: sp.csr_matrix) -> None:
    lines = [f"{X.shape[0]} {X.shape[1]} {Y.shape[1]}"]
    for i in range(X.shape[0]):
        labels = ",".join(str(j) for j in Y[i].indices)
        row = X[i]
        feats = " ".join(f"{j}:{float(v)!r}"
                          for j, v in zip(row.indices, row.data, strict=True))
        lines.append(f"{labels} {feats}".rstrip() if labels else f" {feats}")
    text = "\n".join(lines) + "\n"
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)


def test_bibtex_train_shape_and_first_row():
    X, Y = read_xmc(BIBTEX / "bibtex_xmlrepo_train.txt.gz")
    assert X.shape == (4880, 1836) and Y.shape == (4880, 159)
    assert Y.nnz == 11681  # label entries stated in data/xmc/PROVENANCE.md
    assert X.dtype == np.float32 and Y.dtype == np.int8
    assert list(Y[0].indices) == [48, 131]
    assert list(X[0].indices[:4]) == [44, 59, 79, 100] and set(X.data) == {1.0}


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 12), gz=st.booleans())
def test_round_trip(tmp_path_factory, seed, n, gz):
    rng = np.random.default_rng(seed)
    X = sp.random(n, 7, density=0.3, format="csr", random_state=seed,
                  data_rvs=lambda m: rng.normal(size=m))
    Y = sp.random(n, 4, density=0.3, format="csr", random_state=seed + 1)
    Y.data[:] = 1
    path = tmp_path_factory.mktemp("xmc") / ("d.txt.gz" if gz else "d.txt")
    write_xmc(path, X, Y)
    X2, Y2 = read_xmc(path, dtype=np.float64)
    assert X2.shape == X.shape and Y2.shape == Y.shape
    np.testing.assert_array_equal(X2.toarray(), X.toarray())
    np.testing.assert_array_equal(Y2.toarray(), Y.toarray())


def test_points_without_labels_or_features_and_trailing_blank_lines(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text("3 4 3\n 0:1.5 3:2\n2\n0,1 1:-1e-3\n\n\n")
    X, Y = read_xmc(path, dtype=np.float64)
    np.testing.assert_array_equal(X.toarray(), [[1.5, 0, 0, 2], [0, 0, 0, 0],
                                                [0, -1e-3, 0, 0]])
    np.testing.assert_array_equal(Y.toarray(), [[0, 0, 0], [0, 0, 1], [1, 1, 0]])


BAD = [
    ("3 4\n", 1, "bad header"),
    ("x 4 2\n", 1, "bad header"),
    ("2 4 2\n0 1:1\n", 1, "only 1 point"),
    ("1 4 2\n0 1:1\n1 2:1\n", 3, "more lines"),
    ("2 4 2\n0 1:1\n0 7:1\n", 3, "out of range"),
    ("2 4 2\n0 1:1\n5 2:1\n", 3, "label 5 is out of range"),
    ("2 4 2\n0 1:1\n0 2:abc\n", 3, "not a number"),
    ("2 4 2\n0 1:1\n0 2:nan\n", 3, "not finite"),
    ("2 4 2\n0 1:inf\n0 2:1\n", 2, "not finite"),
    ("2 4 2\n0 1:1 2\n0 2:1\n", 2, "index:value"),
    ("2 4 2\n0 1:1:1\n0 2:1\n", 2, "index:value"),
    ("2 4 2\n0 1:1\n0 x:1\n", 3, "not an integer"),
    ("2 4 2\n0,,1 1:1\n0 2:1\n", 2, "not an integer"),
    ("2 4 2\n1:1 2:1\n0 2:1\n", 2, "not an integer"),
    ("2 4 2\n0 1:1 1:2\n0 2:1\n", 2, "repeated"),
    ("2 4 2\n0,0 1:1\n0 2:1\n", 2, "repeated"),
]


@pytest.mark.parametrize(("text", "line", "message"), BAD)
def test_malformed_input_names_file_and_line(tmp_path, text, line, message):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as info:
        read_xmc(path)
    assert info.value.line == line
    assert info.value.path == str(path)


def test_error_in_a_later_block_line_is_located(tmp_path):
    good = "".join(f"{i % 3} {i % 5}:1\n" for i in range(40))
    path = tmp_path / "bad.txt.gz"
    path.write_bytes(gzip.compress(f"41 5 3\n{good}0 5:1\n".encode()))
    with pytest.raises(InputError, match="out of range") as info:
        read_xmc(path)
    assert info.value.line == 42


def test_truncated_and_corrupt_gzip(tmp_path):
    body = "".join(f"{i % 3} {i % 5}:1 {5 + i % 7}:2.5\n" for i in range(5000))
    blob = gzip.compress(f"5000 12 3\n{body}".encode())
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(InputError, match="truncated gzip") as info:
        read_xmc(path)
    assert info.value.path == str(path) and info.value.line >= 1
    path.write_bytes(b"not gzip at all")
    with pytest.raises(InputError, match="not gzip-compressed"):
        read_xmc(path)
    path.write_bytes(blob[:10] + b"\xff" * 64)  # a gzip header, then garbage
    with pytest.raises(InputError, match="corrupt gzip"):
        read_xmc(path)
    with pytest.raises(InputError, match="not found"):
        read_xmc(tmp_path / "missing.txt")


def test_the_exact_parser_reads_an_index_in_digits_only():
    # pandas' integer parse (the vectorised path) reads 3.0 and 1e1; neither path takes them
    # (tests/tasks/readers/test_numbers.py holds the class over every reader).
    assert _parse_line("01,2 3:1 10:0.5", 20, 5) == ([1, 2], [3, 10], [1.0, 0.5])
    for line in ("1.0 3:1", "1 3.0:1", "1 1e1:0.5"):
        with pytest.raises(ValueError, match="is not an integer"):
            _parse_line(line, 20, 5)


@pytest.mark.parametrize("header, what", [("0 4 3", "0 points"), ("3 0 3", "0 features"),
                                          ("3 4 0", "0 labels")])
def test_a_header_with_an_empty_dimension_is_refused_at_line_1(tmp_path, header, what):
    path = tmp_path / "d.txt"
    path.write_text(f"{header}\n")
    with pytest.raises(InputError, match=f"declares {what}") as info:
        read_xmc(path)
    assert info.value.line == 1


def test_an_enormous_header_gives_a_short_error_line(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text("1 " * 200_000 + "\n")
    with pytest.raises(InputError, match="bad header") as info:
        read_xmc(path)
    assert len(str(info.value)) < 300 + len(str(path)) + 10


@pytest.mark.parametrize("text, line, value", [
    ("2 4 2\n0 1:1e39\n0 2:1\n", 2, "1e39"),
    ("2 4 2\n0 1:1\n0 2:-3.5e38 3:1\n", 3, "-3.5e38"),
    ("2 4 2\n0 1:1\n0 2:340282356779733661637539395458142568448\n", 3,
     "340282356779733661637539395458142568448"),  # just past the largest float32
])
def test_a_value_beyond_the_dtype_names_file_and_line(tmp_path, text, line, value):
    path = tmp_path / "d.txt"
    path.write_text(text)
    with pytest.raises(InputError, match=f"feature value '{value}' is not finite in float32") \
            as info:
        read_xmc(path)
    assert (info.value.path, info.value.line) == (str(path), line)
    X, _ = read_xmc(path, dtype=np.float64)  # finite in float64: read as written
    assert np.isfinite(X.data).all() and float(value) in X.data


def test_the_largest_float32_is_read():
    assert _parse_line("0 1:3.4028234e38", 2, 1, np.float32) == ([0], [1], [3.4028234e38])


@pytest.mark.parametrize("header, what", [
    ("2 100000000000000000000 3", "100000000000000000000 features"),
    ("99999999999999999999 4 3", "99999999999999999999 points"),
    ("2 4 9223372036854775808", "9223372036854775808 labels"),
])
def test_a_count_beyond_int64_indices_is_refused_at_line_1(tmp_path, header, what):
    path = tmp_path / "d.txt"
    path.write_text(f"{header}\n0 1:1\n1 2:1\n")
    for read in (read_xmc, read_xmc_header):
        with pytest.raises(InputError, match=f"declares {what}; at most 9223372036854775807") \
                as info:
            read(path)
        assert info.value.line == 1


def test_the_widest_header_reads_a_sparse_matrix_and_still_finds_a_repeat(tmp_path):
    """A header's huge D allocates nothing by D in the reader (the index maps and the model's
    factors are guarded where they are made); repeats are found without row * D + index,
    which would overflow int64."""
    d = 2**62
    path = tmp_path / "d.txt"
    path.write_text(f"3 {d} 2\n0 {d - 1}:1\n1 0:2\n0 5:1 {d - 1}:3\n")
    X, Y = read_xmc(path)
    assert X.shape == (3, d) and X.nnz == 4 and X[0, d - 1] == 1
    path.write_text(f"3 {d} 2\n0 {d - 1}:1\n1 0:2\n0 5:1 5:3\n")
    with pytest.raises(InputError, match="repeated") as info:
        read_xmc(path)
    assert info.value.line == 4


@pytest.mark.parametrize("gz", [False, True])
def test_the_header_is_read_alone(tmp_path, gz):
    path = tmp_path / ("d.txt.gz" if gz else "d.txt")
    body = "".join(f"{i % 3} {i % 5}:1\n" for i in range(3000))
    blob = f"3000 5 3\n{body}".encode()
    if gz:  # cut: the end of the body is lost, the header is not
        whole = gzip.compress(blob)
        blob = whole[: len(whole) // 2]
    else:  # a body the reader refuses
        blob += b"\xff\n"
    path.write_bytes(blob)
    assert read_xmc_header(path) == (3000, 5, 3)
    with pytest.raises(InputError):
        read_xmc(path)


@pytest.mark.parametrize("text, message", [("", "empty file"), ("3 4\n0 1:1\n", "bad header"),
                                           ("0 4 2\n", "declares 0 points")])
def test_the_header_alone_gives_the_readers_errors(tmp_path, text, message):
    path = tmp_path / "d.txt"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as info:
        read_xmc_header(path)
    assert info.value.line == 1
    with pytest.raises(InputError, match=message):
        read_xmc(path)
