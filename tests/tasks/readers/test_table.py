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
from scarce.tasks.readers.table import feature_rows, label_names, read_table, table_kind

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
    ("3:x", "row 2, column 'f': '3':'x' is not an integer index and a number"),
    ("3", "row 2, column 'f': '3' is not index:value"),
    ("-1:2", "row 2, column 'f': feature index -1 is negative"),
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
    ("t.jsonl", b'{"text": "a"}\n{broken\n', "cannot read the jsonl table"),
    ("t.csv", b'text\n"unclosed\n', "cannot read the csv table"),
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
