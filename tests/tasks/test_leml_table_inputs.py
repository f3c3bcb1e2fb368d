"""What LEML's table steps refuse or say of a table: a test table without its labels, a
feature space too wide to hold, rows without text or features, labels joined by another
separator; each before anything is stored (the steps raise, so nothing is written)."""

from __future__ import annotations

import pandas as pd
import pytest

from scarce.algorithms.memory import ENV_LIMIT, MemoryBudgetError
from scarce.flows.leml import TableConfig
from scarce.tasks.errors import InputError
from scarce.tasks.leml_table import check_table_columns, load_table, table_space
from scarce.tasks.readers.table import SEPARATOR_KEY, label_names, read_table
from scarce.tasks.store.atomic import atomic_write_parquet
from scarce.tasks.store.encoding import encode

TRAIN = pd.DataFrame({
    "text": ["graph kernels for molecules", "parsing with kernels", "graph parsing",
             "molecules and graphs"],
    "tags": ["graphs,kernels", "nlp,kernels", "graphs,nlp", "graphs"],
})


def _options(**table):
    return TableConfig(labels_column="tags", **table).options()


def _space(tmp_path, frame=TRAIN, **table):
    path = tmp_path / "train.csv"
    frame.to_csv(path, index=False)
    space = table_space(path=path, table=_options(**table))
    maps = {}
    for part in ("features", "labels"):
        maps[part] = tmp_path / f"{part}.parquet"
        atomic_write_parquet(maps[part], encode(space[part]))
    return space, maps


def _load(tmp_path, frame, maps, labelled, **table):
    path = tmp_path / "other.csv"
    frame.to_csv(path, index=False)
    return load_table(path=path, table=_options(**table), dtype="float32", normalize="none",
                      labelled=labelled, **maps)


def test_a_test_table_without_its_label_column_is_refused_and_new_rows_are_not(tmp_path):
    _, maps = _space(tmp_path)
    rows = TRAIN[["text"]]
    with pytest.raises(InputError, match="no column 'tags'"):
        _load(tmp_path, rows, maps, labelled=True)  # the training run's test table
    assert _load(tmp_path, rows, maps, labelled=False)["Y"].nnz == 0  # rows to label


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".parquet", ".csv.gz"])
def test_a_table_without_its_columns_is_refused_from_its_head(tmp_path, suffix):
    """Before anything is read in full: the training and the test table's header or schema
    (a JSON Lines table is checked as it is read)."""
    frame = TRAIN[["text"]]
    path = tmp_path / f"test{suffix}"
    if suffix == ".parquet":
        frame.to_parquet(path)
    else:
        frame.to_csv(path, index=False, sep="\t" if suffix == ".tsv" else ",")
    good = tmp_path / "train.csv"
    TRAIN.to_csv(good, index=False)
    check_table_columns({"dataset.train": [good], "dataset.test": [good]}, _options())
    with pytest.raises(InputError, match=r"no column 'tags' \(the file's columns: \['text'\]\)") \
            as err:
        check_table_columns({"dataset.train": [good], "dataset.test": [path]}, _options())
    assert (err.value.path, err.value.key) == (str(path), "dataset.test")


def test_a_test_table_whose_labels_are_all_unknown_is_refused(tmp_path):
    _, maps = _space(tmp_path)
    other = TRAIN.assign(tags=["a", "b", "c", "d"])
    with pytest.raises(InputError, match="none of the 4 rows has a label of the label list"):
        _load(tmp_path, other, maps, labelled=True)


def test_labels_joined_by_another_separator_are_refused_in_training_and_in_test(tmp_path):
    semicolons = TRAIN.assign(tags=TRAIN["tags"].str.replace(",", ";"))
    with pytest.raises(InputError) as err:
        _space(tmp_path, semicolons)
    assert err.value.key == SEPARATOR_KEY
    _, maps = _space(tmp_path)
    with pytest.raises(InputError) as err:  # against the model's labels
        _load(tmp_path, semicolons, maps, labelled=True)
    assert err.value.key == SEPARATOR_KEY and "no label of the model" in str(err.value)


@pytest.mark.parametrize(("cell", "table", "says"), [
    (f"{2**62}:1", {}, r"the largest feature index, 4,611,686,018,427,387,904 \(row 2, column "
                       r"'features'\), makes 4,611,686,018,427,387,905 features"),
    ("3:1", {"n_features": 10**17}, "the feature space of 100,000,000,000,000,000 features"),
])
def test_a_feature_space_too_wide_to_hold_is_refused_before_it_is_allocated(
        tmp_path, monkeypatch, cell, table, says):
    monkeypatch.setenv(ENV_LIMIT, "4")
    frame = TRAIN.assign(features=["0:1", cell, "1:1", "2:1"])
    with pytest.raises(MemoryBudgetError, match=says):
        _space(tmp_path, frame, features_column="features", **table)


@pytest.mark.parametrize("n_features", [None, 3])
def test_a_table_without_a_feature_is_refused_for_training_and_test(tmp_path, n_features):
    frame = TRAIN.assign(features=["", "", "", ""])
    table = {"features_column": "features", "n_features": n_features}
    with pytest.raises(InputError, match="none of the 4 rows has a feature in column"):
        _space(tmp_path, frame, **table)  # the training table: before its space is stored
    _, maps = _space(tmp_path, TRAIN.assign(features=["0:1", "", "", ""]), **table)
    with pytest.raises(InputError, match="none of the 4 points has a feature"):
        _load(tmp_path, frame, maps, labelled=True, **table)  # a test table
    assert _load(tmp_path, frame, maps, labelled=False, **table)["X"].nnz == 0  # new rows


def test_a_one_row_training_table_is_refused_before_its_space_is_stored(tmp_path):
    with pytest.raises(InputError, match="the training set has 1 row") as err:
        _space(tmp_path, TRAIN.head(1))
    assert err.value.key == "dataset.train"


def test_rows_without_text_or_a_known_word_are_said(tmp_path, caplog):
    _, maps = _space(tmp_path)
    rows = pd.DataFrame({"text": ["graph kernels", "", "unseen words only", "  "],
                         "tags": ["graphs", "nlp", "graphs", "nlp"]})
    with caplog.at_level("WARNING"):
        X = _load(tmp_path, rows, maps, labelled=True)["X"]
    said = [r.getMessage() for r in caplog.records if "have no feature" in r.getMessage()]
    assert said == ["other.csv: 3 of the 4 rows have no feature (2 with an empty 'text' cell, "
                    "1 with no term of the vocabulary; the first at row 2): their feature rows "
                    "are all zero"]
    assert X[1:].nnz == 0 and X[0].nnz > 0


# -- the label cells of a table's head, checked before a run --------------------------------------
def _labels_table(path, cells):
    pd.DataFrame({"text": [f"t{i}" for i in range(len(cells))], "tags": cells}).to_csv(
        path, index=False)
    return path


def test_a_head_joined_by_another_separator_is_refused_as_the_whole_table_is(tmp_path,
                                                                           monkeypatch):
    from scarce.tasks import leml_table

    monkeypatch.setattr(leml_table, "HEAD_ROWS", 5)
    cells = ["graphs;kernels", "kernels;svm", "graphs;svm", "svm;nlp", "nlp;graphs"] * 3
    path = _labels_table(tmp_path / "t.csv", cells)
    with pytest.raises(InputError) as err:
        leml_table.check_table_labels(path, _options())
    with pytest.raises(InputError) as whole:
        label_names(read_table(path, ["tags"])["tags"], ",", path, "tags")
    assert str(err.value) == str(whole.value)  # the run's own verdict, on the whole column
    assert "of the 15 rows with labels" in str(err.value)


def test_a_head_that_suggests_another_separator_the_whole_table_does_not_passes(
        tmp_path, monkeypatch):
    """Only the head's rows hold ';' in names: the whole column is read as written, so the
    check lets it be (a verdict on a sample never refuses what the run accepts)."""
    from scarce.tasks import leml_table

    monkeypatch.setattr(leml_table, "HEAD_ROWS", 4)
    cells = ["graphs;kernels", "kernels;svm", "graphs;svm", "svm;graphs"] + [
        f"tag{i},other{i}" for i in range(12)]
    path = _labels_table(tmp_path / "t.csv", cells)
    with pytest.raises(InputError):  # the head alone would be refused
        label_names(cells[:4], ",", path, "tags")
    leml_table.check_table_labels(path, _options())
    label_names(read_table(path, ["tags"])["tags"], ",", path, "tags")  # as the run reads it


def test_a_table_without_its_label_column_passes_the_label_check(tmp_path):
    from scarce.tasks.leml_table import check_table_labels

    path = tmp_path / "new.csv"
    pd.DataFrame({"text": ["a", "b"]}).to_csv(path, index=False)
    check_table_labels(path, _options())
