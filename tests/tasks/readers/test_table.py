"""The table reader: label and feature cells in the forms researchers write them, the same
rows from a CSV, a TSV, Parquet and JSON Lines, and one-line errors naming file, row, column."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from scarce.tasks.errors import InputError
from scarce.tasks.readers.table import (
    SEPARATOR_KEY,
    SEPARATORS,
    TABLE_SUFFIXES,
    feature_rows,
    label_names,
    read_table,
    table_kind,
)
from tests.tasks.readers.textfiles import write_text

ROWS = pd.DataFrame({
    "text": ["graph kernels for molecules", "", "a, quoted \"text\"\nover two lines"],
    "tags": [["graphs", "kernels"], [], ["nlp"]],
    "features": ["0:1 3:0.5", "", "2:2.25"],
})


def _write(frame: pd.DataFrame, path, kind: str) -> None:
    out = frame.copy()
    if kind in ("csv", "tsv"):
        out["tags"] = out["tags"].map(",".join)
        out.to_csv(path, index=False, sep="\t" if kind == "tsv" else ",")
    elif kind == "parquet":
        out.to_parquet(path)
    else:
        out.to_json(path, orient="records", lines=True)


@pytest.mark.parametrize("name", ["t.csv", "t.tsv", "t.parquet", "t.jsonl", "t.csv.gz"])
def test_every_table_kind_gives_the_same_rows(tmp_path, name):
    kind = table_kind(name)
    path = tmp_path / name
    if name.endswith(".gz"):
        _write(ROWS, tmp_path / "plain.csv", "csv")
        path.write_bytes(gzip.compress((tmp_path / "plain.csv").read_bytes()))
    else:
        _write(ROWS, path, kind)
    frame = read_table(path, ["text", "tags"], optional=["features", "absent"])
    assert list(frame.columns) == ["text", "tags", "features"]
    assert frame["text"].tolist() == ROWS["text"].tolist()
    assert label_names(frame["tags"], ",", path, "tags") == [["graphs", "kernels"], [], ["nlp"]]
    X = feature_rows(frame["features"], path, "features")
    want = sp.csr_matrix(np.array([[1, 0, 0, 0.5], [0, 0, 0, 0], [0, 0, 2.25, 0]]))
    assert (X != want).nnz == 0 and X.shape == (3, 4)


@pytest.mark.parametrize(("cell", "names"), [
    ("a,b", ["a", "b"]),
    (" a , b ,a", ["a", "b"]),                   # stripped, each once, in order
    ("['a', 'b c']", ["a", "b c"]),               # what pandas writes to a CSV for a list
    ('["x", "y"]', ["x", "y"]),                   # JSON
    ("", []),
    (None, []),
    (float("nan"), []),
    (["z", "a"], ["z", "a"]),
    (np.array(["p", "q"], dtype=object), ["p", "q"]),
    (7, ["7"]),
])
def test_label_cells(cell, names, tmp_path):
    assert label_names([cell], ",", tmp_path / "t.csv", "tags") == [names]


def test_label_separator(tmp_path):
    assert label_names(["a|b c|d"], "|", tmp_path / "t.csv", "tags") == [["a", "b c", "d"]]


@pytest.mark.parametrize(("cell", "want"), [
    ("3:0.5 1:2", {1: 2.0, 3: 0.5}),
    ("3:0.5,1:2", {1: 2.0, 3: 0.5}),
    ({"3": 0.5, "1": 2}, {1: 2.0, 3: 0.5}),
    ([[3, 0.5], [1, 2]], {1: 2.0, 3: 0.5}),
    ('{"3": 0.5}', {3: 0.5}),
    ([{"key": 2, "value": 1.5}], {2: 1.5}),       # a Parquet map read by pandas as structs
    ([0.0, 4.0, 0.0, 1.0], {1: 4.0, 3: 1.0}),     # a dense row
])
def test_feature_cells(cell, want, tmp_path):
    X = feature_rows([cell], tmp_path / "t.jsonl", "f", n_features=4)
    assert X.shape == (1, 4)
    assert dict(zip(X.indices.tolist(), X.data.tolist(), strict=True)) == want


@pytest.mark.parametrize(("cell", "says"), [
    ("3:x", "row 2, column 'f': '3':'x': 'x' is not a number"),
    ("3", "row 2, column 'f': '3' is not index:value"),
    ("-1:2", "row 2, column 'f': '-1':'2': '-1' is not an integer (digits 0-9 only)"),
    ("1:inf", "not finite"),
    ("1:2 1:3", "a feature index is given twice"),
    ("9:1", "feature index 9 is beyond n_features 4"),
    ("[1, 2", "is neither JSON nor a Python literal"),
])
def test_bad_feature_cells_name_the_row_and_column(cell, says, tmp_path):
    path = tmp_path / "t.csv"
    with pytest.raises(InputError) as err:
        feature_rows(["0:1", cell], path, "f", n_features=4)
    assert str(path) in str(err.value) and says in str(err.value)


def test_dense_rows_of_two_lengths_are_refused(tmp_path):
    with pytest.raises(InputError, match="row 2, column 'f': a dense row of 3 values; the "
                                         "first has 2"):
        feature_rows([[1.0, 2.0], [1.0, 2.0, 3.0]], tmp_path / "t.parquet", "f")


def test_bad_label_cells(tmp_path):
    with pytest.raises(InputError, match="row 1, column 'tags': a label name must be a string"):
        label_names([[["nested"]]], ",", tmp_path / "t.jsonl", "tags")
    with pytest.raises(InputError, match="looks like a list but is not one"):
        label_names(["[a, b]"], ",", tmp_path / "t.csv", "tags")


def test_a_missing_column_is_named_with_the_columns_the_file_has(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame({"body": ["x"], "labels": ["a"]}).to_csv(path, index=False)
    with pytest.raises(InputError) as err:
        read_table(path, ["text", "labels"])
    assert str(path) in str(err.value) and "no column 'text'" in str(err.value)
    assert "'body'" in str(err.value)
    jl = tmp_path / "t.jsonl"
    jl.write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(InputError, match="no column 'text'"):
        read_table(jl, ["text"])


@pytest.mark.parametrize(("name", "data", "says"), [
    ("t.parquet", b"not parquet", "cannot read the parquet table"),
    ("t.jsonl", b'{"text": "a"}\n{broken\n', ":2: invalid JSON"),
    ("t.csv", b'text\n"unclosed\n', ":2: cannot read the csv table"),
    ("t.csv", b"text\n\xff\xfe\n", "not UTF-8"),
    ("t.xlsx", b"", "not a table file"),
])
def test_unreadable_tables_are_one_line_naming_the_file(tmp_path, name, data, says):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(InputError) as err:
        read_table(path, ["text"])
    assert says in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


# -- rows, columns and cells the reader must not take silently ----------------------------------
@pytest.mark.parametrize(("name", "text", "line", "says"), [
    ("t.csv", "text,tags\na,x\nb,y,z\n", 3, "3 fields where the header has 2"),
    ("t.csv", "text,tags\na,x\nb\n", 3, "1 field where the header has 2"),
    ("t.csv", 'text,tags\n"two\nlines",x\nb,y,z\n', 4, "3 fields"),   # a record over 2 lines
    ("t.tsv", "text\ttags\na\tx\tz\n", 2, "3 fields where the header has 2"),
    ("t.tsv", "text\ttags\na\n", 2, "1 field where the header has 2"),
    ("t.csv.gz", "text,tags\na,x\nb,y,z\n", 3, "3 fields"),
])
def test_a_row_whose_fields_do_not_match_the_header_is_refused_naming_its_line(
        tmp_path, name, text, line, says):
    path = write_text(tmp_path / name, text)
    with pytest.raises(InputError, match=says) as err:
        read_table(path, ["text", "tags"])
    assert (err.value.path, err.value.line) == (str(path), line)


def _no_rows(path):
    kind = table_kind(path.name)
    if kind == "parquet":
        pd.DataFrame({"text": pd.Series([], dtype=str)}).to_parquet(path)
    elif kind == "jsonl":
        write_text(path, "\n\n")
    else:
        write_text(path, "text\n")
    return path


@pytest.mark.parametrize("suffix", TABLE_SUFFIXES)
def test_a_table_without_a_row_is_refused_for_every_kind(tmp_path, suffix):
    path = _no_rows(tmp_path / f"t{suffix}")
    with pytest.raises(InputError, match="table has no row") as err:
        read_table(path, ["text"])
    assert err.value.path == str(path)


@pytest.mark.parametrize(("name", "data", "says"), [
    ("t.jsonl", '{"text": "a", "tags": ["\\ud800x"]}\n', "'tags'[0] holds a lone surrogate"),
    ("t.jsonl", '{"text": "\\udc00", "tags": "x"}\n', "'text' holds a lone surrogate"),
    ("t.jsonl", '{"text": "a", "tags": "x\\udfff"}\n', "'tags' holds a lone surrogate"),
    ("t.csv", 'text,tags\na,"[""x\\ud800""]"\n', "holds a lone surrogate"),   # JSON in a cell
    ("t.csv", "text,tags\na,\"['x\\ud800']\"\n", "holds a lone surrogate"),   # Python literal
])
def test_a_label_name_or_text_that_is_not_valid_unicode_is_refused(tmp_path, name, data, says):
    path = tmp_path / name
    path.write_text(data)
    with pytest.raises(InputError, match=says.replace("[", r"\[")) as err:
        frame = read_table(path, ["text", "tags"])
        label_names(frame["tags"], ",", path, "tags")
    assert err.value.path == str(path)


def test_a_jsonl_table_reads_as_pandas_reads_it_where_both_read_it(tmp_path):
    path = tmp_path / "t.jsonl"
    _write(ROWS, path, "jsonl")
    ours = read_table(path, ["text", "tags", "features"])
    theirs = pd.read_json(path, lines=True, dtype=False)
    assert ours["text"].tolist() == theirs["text"].tolist()
    assert [list(t) for t in ours["tags"]] == [list(t) for t in theirs["tags"]]


def test_a_jsonl_line_that_is_not_an_object_is_refused_naming_it(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "a"}\n\n["text", "b"]\n')
    with pytest.raises(InputError, match="expected a JSON object, got list") as err:
        read_table(path, ["text"])
    assert err.value.line == 3


# -- a label column joined by another separator than the configured one --------------------------
TAG_SETS = [["graphs", "kernels"], ["kernels", "svm"], ["graphs", "svm", "nlp"], ["nlp"],
            ["svm", "graphs"]]
PAIRS = [(s, c) for s in SEPARATORS for c in SEPARATORS if c != s]


@pytest.mark.parametrize(("separator", "joined_by"), PAIRS)
def test_names_joined_by_another_separator_are_refused_naming_the_key(tmp_path, separator,
                                                                      joined_by):
    cells = [joined_by.join(tags) for tags in TAG_SETS]
    parts = {t for tags in TAG_SETS for t in tags}
    for known in (None, parts):  # the training table's own names; the model's or the list's
        with pytest.raises(InputError) as err:
            label_names(cells, separator, tmp_path / "t.csv", "tags", known=known)
        assert err.value.key == SEPARATOR_KEY
        assert f"joined by {joined_by!r}, not {separator!r}" in str(err.value)
        assert "of the 5 rows with labels" in str(err.value)


@pytest.mark.parametrize(("cells", "separator", "known"), [
    # one label a row, whose names hold a comma: the parts do not recur as labels
    ([f"{r}(e1,e2)" for r in ("Cause-Effect", "Entity-Origin", "Message-Topic")]
     + ["Other", "Cause-Effect(e2,e1)"], ";", None),
    # the configured separator splits most rows; a name of one holds a ';'
    (["a,b", "b,c", "a;b", "c,a"], ",", None),
    # names that hold ';', listed in the label list: read as written
    (["a;b", "b;c", "a;c"], ",", {"a;b", "b;c", "a;c", "a", "b", "c"}),
    # a tag set of three distinct single names: nothing recurs
    (["x;y", "z;w"], ",", None),
])
def test_names_that_hold_another_separator_are_read_as_written(tmp_path, cells, separator,
                                                               known):
    rows = label_names(cells, separator, tmp_path / "t.csv", "tags", known=known)
    assert rows == [[n.strip() for n in c.split(separator)] for c in cells]


# -- the head of a table: what a command checks before a run reads the whole file -------------
MANY = pd.DataFrame({
    "text": [f"row {i}" if i % 3 else f"row {i}, \"quoted\"\nover two lines" for i in range(9)],
    "tags": [["a", f"t{i}"] for i in range(9)],
})


@pytest.mark.parametrize("suffix", TABLE_SUFFIXES)
@pytest.mark.parametrize("limit", [1, 4, 9, 50])
def test_the_head_of_a_table_is_the_first_rows_of_the_whole(tmp_path, suffix, limit):
    kind = table_kind(suffix)
    path = tmp_path / f"t{suffix}"
    plain = tmp_path / f"plain.{kind}"
    _write(MANY, plain, kind)
    if suffix.endswith(".gz"):
        path.write_bytes(gzip.compress(plain.read_bytes()))
    else:
        path = plain
    whole = read_table(path, ["text", "tags"])
    head = read_table(path, ["text"], optional=["tags", "absent"], limit=limit)
    assert list(head.columns) == ["text", "tags"]
    assert len(whole) == len(MANY)
    pd.testing.assert_frame_equal(head, whole.head(limit))


@pytest.mark.parametrize(("name", "text", "line"), [
    ("t.csv", "text,tags\na,x\nb,y,z\nc,w\n", 3),   # a ragged row in the head
    ("t.jsonl", '{"text": "a"}\n[1]\n{"text": "c"}\n', 2),   # a line that is no object
])
def test_the_head_gives_the_errors_of_its_rows(tmp_path, name, text, line):
    path = write_text(tmp_path / name, text)
    with pytest.raises(InputError) as err:
        read_table(path, ["text"], limit=10)
    assert (err.value.path, err.value.line) == (str(path), line)
    assert read_table(path, ["text"], limit=1)["text"].tolist() == ["a"]  # before it: read
