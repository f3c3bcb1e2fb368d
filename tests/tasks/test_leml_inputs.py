"""What LEML refuses of its input files before or as it reads them: files that disagree,
absurd dimensions, empty or non-finite Parquet data, and masks or splits that leave nothing."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from scarce.algorithms.leml import LEML
from scarce.algorithms.memory import ENV_LIMIT, MemoryBudgetError
from scarce.tasks.errors import InputError
from scarce.tasks.leml import check_inputs, check_parts, declared_shape, load, observe, split
from scarce.tasks.leml_files import (
    check_training_rows,
    label_file,
    normalize_rows,
    parquet_pair,
    unit_rows,
)
from scarce.tasks.store.atomic import atomic_write_parquet
from scarce.tasks.store.encoding import encode

ROWS = "0 0:1.0 1:0.5\n1 1:1.0\n2 2:1.0 3:0.25\n"
ARFF_HEAD = "@relation r\n@attribute f0 numeric\n@attribute f1 numeric\n@attribute y {0,1}\n"


def _xmc(path, header, rows=ROWS):
    path.write_text(f"{header}\n{rows}")
    return path


def _parquet(folder, name, X, Y):
    x_path, y_path = parquet_pair(folder / f"{name}.X.parquet")
    atomic_write_parquet(x_path, encode(X))
    atomic_write_parquet(y_path, encode(Y))
    return x_path


@pytest.mark.parametrize("test_header, role, counts", [
    ("3 5 3", "test", "5 features and 3 labels"),
    ("3 4 2", "test", "4 features and 2 labels"),
    ("3 3 4", "test", "3 features and 4 labels"),
])
def test_a_test_file_of_another_space_is_refused_naming_both_files(tmp_path, test_header, role,
                                                                   counts):
    train = _xmc(tmp_path / "train.txt", "3 4 3")
    test = _xmc(tmp_path / "test.txt", test_header, "0 0:1\n1 1:1\n1 2:1\n")
    with pytest.raises(InputError, match=f"{counts}, but the training file {train} has 4 and "
                                         "3") as err:
        check_inputs(LEML(rank=2), {"train": [train], "test": [test]}, "xmc", None)
    assert (err.value.path, err.value.line, err.value.key) == (str(test), 1, f"dataset.{role}")


def test_the_parts_of_a_folder_must_agree_too(tmp_path):
    a = _xmc(tmp_path / "a.txt", "3 4 3")
    b = _xmc(tmp_path / "b.txt", "3 6 3")
    with pytest.raises(InputError, match="6 features and 3 labels, but the training file") as err:
        check_inputs(LEML(rank=2), {"train": [a, b], "test": [a]}, "xmc", None)
    assert err.value.key == "dataset.train" and err.value.path == str(b)


def test_arff_and_parquet_files_are_compared_from_their_heads(tmp_path):
    train = tmp_path / "train.arff"
    train.write_text(ARFF_HEAD + "@data\n1,2,1\n")
    test = tmp_path / "test.arff"
    test.write_text(ARFF_HEAD.replace("@attribute y", "@attribute f2 numeric\n@attribute y")
                    + "@data\n1,2,3,0\n")
    assert declared_shape(train, "arff", 1) == (None, 2, 1)
    with pytest.raises(InputError, match="3 features and 1 labels, but the training file"):
        check_inputs(LEML(rank=2), {"train": [train], "test": [test]}, "arff", 1)
    Y = sp.csr_matrix(np.eye(3, 2, dtype=np.float32))
    p_train = _parquet(tmp_path, "train", sp.csr_matrix(np.ones((3, 4), np.float32)), Y)
    p_test = _parquet(tmp_path, "test", sp.csr_matrix(np.ones((3, 5), np.float32)), Y)
    assert declared_shape(p_train, "parquet") == (3, 4, 2)
    with pytest.raises(InputError, match="5 features and 2 labels, but the training file") as err:
        check_inputs(LEML(rank=2), {"train": [p_train], "test": [p_test]}, "parquet", None)
    assert err.value.line is None
    check_inputs(LEML(rank=2), {"train": [p_train], "test": [p_train]}, "parquet", None)


@pytest.mark.parametrize("header, declared", [
    ("3 1000000000000 3", "3 points, 1,000,000,000,000 features and 3 labels"),
    ("3 4 1000000000000", "3 points, 4 features and 1,000,000,000,000 labels"),
    ("1000000000000 4 3", "1,000,000,000,000 points, 4 features and 3 labels"),
])
def test_absurd_header_dimensions_are_refused_before_anything_is_read(tmp_path, monkeypatch,
                                                                      header, declared):
    monkeypatch.setenv(ENV_LIMIT, "4")
    path = _xmc(tmp_path / "huge.txt", header)
    with pytest.raises(MemoryBudgetError, match=f"^{path}:1: the header declares {declared}: "
                                                "LEML factors at rank 2"):
        check_inputs(LEML(rank=2), {"train": [path], "test": [path]}, "xmc", None)


@pytest.mark.parametrize("header", ["3 1000000000000 3", "3 4 1000000000000"])
def test_load_refuses_index_maps_a_header_makes_absurd(tmp_path, monkeypatch, header):
    """The apply flows load a file without the training run's check: the index maps are the
    first thing sized by the declared dimensions."""
    monkeypatch.setenv(ENV_LIMIT, "4")
    path = _xmc(tmp_path / "huge.txt", header)
    with pytest.raises(MemoryBudgetError, match=f"^{path}: the index maps of its"):
        load(path=path, format="xmc", dtype="float32", n_labels=None, normalize="l2")


def test_the_factors_are_sized_from_the_header_as_the_estimator_sizes_them(monkeypatch):
    model = LEML(rank=4, dtype="float64")
    monkeypatch.setenv(ENV_LIMIT, str(1 / 1024))  # 1 MiB
    model.check_memory(100, 1000, 20)  # about 0.2 MiB
    with pytest.raises(MemoryBudgetError, match=r"^x.txt: LEML factors at rank 4 \(W 100,001"):
        model.check_memory(100, 100_000, 20, what="x.txt: ")
    with pytest.raises(MemoryBudgetError, match="H 20,000 x 4, X W 10 x 4, 20001 of 4 x 4"):
        model.check_memory(10, 10, 20_000, fully_observed=False)


@pytest.mark.parametrize("fraction, rows, refused", [(0.99, 6, True), (0.6, 1, True),
                                                     (0.5, 6, False), (0.99, 200, False)])
def test_a_validation_split_that_leaves_no_row_to_fit_is_refused(tmp_path, fraction, rows,
                                                                 refused):
    path = _xmc(tmp_path / "t.txt", f"{rows} 4 3", "0 0:1\n" * rows)
    files = {"train": [path], "test": [path]}
    X = sp.csr_matrix(np.ones((rows, 4)))
    if not refused:
        check_inputs(LEML(rank=2), files, "xmc", None, validation_fraction=fraction)
        split(train={"X": X, "Y": X}, validation_fraction=fraction, seed=0)
        return
    with pytest.raises(InputError, match=f"holds out all {rows} rows") as err:
        check_inputs(LEML(rank=2), files, "xmc", None, validation_fraction=fraction)
    assert err.value.key == "dataset.validation_fraction"
    with pytest.raises(InputError, match=f"holds out all {rows} rows") as err:
        split(train={"X": X, "Y": X}, validation_fraction=fraction, seed=0)
    assert err.value.key == "dataset.validation_fraction"


Y6 = sp.csr_matrix(np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 1, 1], [0, 0, 0]],
                            dtype=np.float32))


@pytest.mark.parametrize("fraction, seed, message", [
    (1e-9, 0, "observes none of the 6 x 3 entries"),
    (0.001, 3, "observes none of the 6 x 3 entries"),
    (0.05, 0, "observes 1 of the 6 x 3 entries of the training labels but none of its 7 "
              "positive labels"),
    (0.15, 0, "but none of its 7 positive labels"),
])
def test_a_mask_that_observes_nothing_to_learn_from_names_observed_fraction(fraction, seed,
                                                                            message):
    with pytest.raises(InputError, match=message) as err:
        observe(Y6, fraction, seed)
    assert err.value.key == "observed_fraction"
    mask = observe(Y6, fraction, seed, part=0)  # one part of a folder may observe nothing
    assert mask.shape == Y6.shape
    assert observe(Y6, 0.5, 0).multiply(Y6).nnz > 0


def test_a_mask_of_labels_without_positives_is_not_refused_for_them():
    assert observe(sp.csr_matrix((40, 5), dtype=np.float32), 0.5, 0).nnz > 0


@pytest.mark.parametrize("X, Y, message", [
    (np.ones((3, 4)), np.eye(4, 2), "X has 3 rows but data.Y.parquet has 4"),
    (np.ones((0, 4)), np.ones((0, 2)), "0 rows; a dataset needs at least one"),
    (np.ones((3, 0)), np.eye(3, 2), "0 features"),
    (np.ones((3, 4)), np.ones((3, 0)), "0 labels"),
    (np.array([[1.0, 2.0], [np.nan, 0]]), np.eye(2, 2), r"row 1 \(0-based\), column 0: a value"),
    (np.array([[1.0, 1e39], [0, 0]]), np.eye(2, 2), r"row 0 \(0-based\), column 1: a value "
                                                     "that is not finite in float32"),
    (sp.csr_matrix(np.array([[0, 0], [0, -1e300]])), np.eye(2, 2), "row 1"),
])
def test_a_parquet_pair_that_is_empty_unequal_or_not_finite_is_refused(tmp_path, X, Y, message):
    x_path = _parquet(tmp_path, "data", X, sp.csr_matrix(Y, dtype=np.float32))
    with pytest.raises(InputError, match=message) as err:
        load(path=x_path, format="parquet", dtype="float32", n_labels=None, normalize="none")
    assert "data." in err.value.path
    if message.startswith(("X has", "0 ")):  # seen in the footers alone
        with pytest.raises(InputError, match=message):
            declared_shape(x_path, "parquet")


def test_a_parquet_x_without_its_y_is_read_alone_for_new_rows(tmp_path):
    X = sp.csr_matrix(np.array([[0.0, 2.0], [1.0, 0.0], [0.0, 0.0]]))
    x_path = _parquet(tmp_path, "new", X, sp.csr_matrix(np.eye(3, 2, dtype=np.float32)))
    parquet_pair(x_path)[1].unlink()  # rows to label: X only
    assert label_file(x_path, "parquet", required=False) is None
    assert label_file(x_path, "parquet") == parquet_pair(x_path)[1]
    got = load(path=x_path, format="parquet", dtype="float32", n_labels=None,
               normalize="none", with_labels=False)
    assert (got["X"] != X).nnz == 0 and got["Y"].shape == (3, 0)
    with pytest.raises(InputError, match="file not found"):  # training needs its labels
        load(path=x_path, format="parquet", dtype="float32", n_labels=None, normalize="none")


def test_float64_keeps_what_float32_cannot_hold(tmp_path):
    x_path = _parquet(tmp_path, "data", np.array([[1.0, 1e39], [0, 0]]),
                      sp.csr_matrix(np.eye(2, 2, dtype=np.float32)))
    got = load(path=x_path, format="parquet", dtype="float64", n_labels=None, normalize="none")
    assert got["X"][0, 1] == 1e39


def test_l2_rows_of_large_float32_values_keep_their_norm():
    X = sp.csr_matrix(np.array([[3e38, 3e38, 0], [1, 2, 0], [0, 0, 0]], dtype=np.float32))
    got = normalize_rows(X)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.toarray(), [[0.5**0.5, 0.5**0.5, 0], [1 / 5**0.5, 2 / 5**0.5, 0],
                                               [0, 0, 0]], rtol=1e-6)
    small = sp.random(20, 30, density=0.2, format="csr", random_state=0, dtype=np.float32)
    from sklearn.preprocessing import normalize

    assert (normalize_rows(small) != normalize(small).astype(np.float32)).nnz == 0  # same bits


@settings(max_examples=60)
@given(st.integers(0, 2**31 - 1), st.integers(1, 40), st.integers(1, 400),
       st.floats(0.0, 1.0), st.floats(-20, 12), st.sampled_from([np.float32, np.float64]))
def test_unit_rows_are_scikit_learns_l2_normalisation_to_the_last_bit(seed, n, d, density,
                                                                     exponent, dtype):
    """Rows of any length and scale (squares that underflow to zero included: such a row is
    left as it is), in float32 and float64: the data, the indices and their types."""
    from sklearn.preprocessing import normalize

    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=seed, dtype=dtype)
    X.data = (X.data * 10.0 ** rng.uniform(exponent - 8, exponent, X.nnz)
              * rng.choice([-1.0, 1.0], X.nnz)).astype(dtype)
    before = X.data.copy()
    got, want = unit_rows(X), normalize(X, norm="l2")
    assert got.dtype == want.dtype and got.indices.dtype == want.indices.dtype
    assert got.data.tobytes() == want.data.tobytes()
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.indptr, want.indptr)
    assert X.data.tobytes() == before.tobytes()  # X itself is left as it was


@pytest.mark.parametrize("fmt, text", [
    ("xmc", "3 4 3\n 0:1\n 1:2\n 2:1\n"),
    ("arff", ARFF_HEAD + "@data\n1,2,0\n{0 3}\n"),
])
def test_a_training_file_without_a_label_is_refused_before_it_is_stored(tmp_path, fmt, text):
    path = tmp_path / f"t.{fmt}"
    path.write_text(text)
    call = dict(path=path, format=fmt, dtype="float32", n_labels=1, normalize="none")
    with pytest.raises(InputError, match="points has a label: a training or test set needs") \
            as err:
        load(**call, labelled=True)
    assert err.value.path == str(path)
    assert load(**call)["Y"].nnz == 0  # a file to apply a model to may have none
    assert load.key({**call, "labelled": True}) == load.key(call)


# -- a store-format pair whose X and Y are swapped ------------------------------------------------
def test_a_pair_whose_x_and_y_are_swapped_is_refused_from_the_footers(tmp_path):
    X = sp.csr_matrix(np.array([[0.5, 0, 2.0, 0], [0, 1.5, 0, 0], [3.0, 0, 0, 0.25]],
                               dtype=np.float32))
    Y = sp.csr_matrix(np.eye(3, 2, dtype=np.float32))
    x_path = _parquet(tmp_path, "swapped", Y, X)  # X.parquet holds Y, Y.parquet holds X
    for read in (lambda: declared_shape(x_path, "parquet"),  # before anything is read
                 lambda: load(path=x_path, format="parquet", dtype="float32", n_labels=None,
                              normalize="none")):
        with pytest.raises(InputError, match=r"holds values from 0\.25 to 3, but a label "
                                             r"matrix holds 0 and 1 only \(are X and Y "
                                             r"swapped\?\)") as err:
            read()
        assert err.value.path == str(parquet_pair(x_path)[1])


def test_a_label_matrix_of_values_between_0_and_1_is_refused_as_it_is_read(tmp_path):
    Y = sp.csr_matrix(np.array([[0.5, 0], [0, 1]], dtype=np.float32))  # within [0, 1]
    x_path = _parquet(tmp_path, "soft", sp.csr_matrix(np.ones((2, 3), np.float32)), Y)
    declared_shape(x_path, "parquet")  # the footer's extent is [0.5, 1]
    with pytest.raises(InputError, match="holds values other than 0 and 1"):
        load(path=x_path, format="parquet", dtype="float32", n_labels=None, normalize="none")


def test_a_parquet_x_alone_without_rows_is_refused(tmp_path):
    x_path = _parquet(tmp_path, "new", sp.csr_matrix((0, 3), dtype=np.float32),
                      sp.csr_matrix((0, 2), dtype=np.float32))
    parquet_pair(x_path)[1].unlink()
    with pytest.raises(InputError, match=r"at least one row and one feature, got shape \[0, 3\]"):
        load(path=x_path, format="parquet", dtype="float32", n_labels=None, normalize="none",
             with_labels=False)


# -- too few training rows, wherever they are counted ---------------------------------------------
@pytest.mark.parametrize("rows, fraction, says, key", [
    (1, 0.0, "the training set has 1 row; a model is fitted on at least 2", "dataset.train"),
    (3, 0.4, "holds out 1 of the 3 rows of the training set, leaving 2", None),  # enough
    (4, 0.6, "holds out 2 of the 4 rows of the training set, leaving 2", None),  # enough
    (3, 0.5, "holds out 2 of the 3 rows of the training set, leaving 1 to fit",
     "dataset.validation_fraction"),
    (2, 0.4, "holds out 1 of the 2 rows of the training set, leaving 1 to fit",
     "dataset.validation_fraction"),
])
def test_a_training_set_left_with_fewer_than_two_rows_is_refused_where_it_is_counted(
        tmp_path, rows, fraction, says, key):
    """From a header before anything is read (XC, Parquet), in the flow once an ARFF file or a
    table is loaded (check_training_rows), and in the split step itself."""
    path = _xmc(tmp_path / "t.txt", f"{rows} 4 3", "0 0:1\n" * rows)
    Yp = sp.csr_matrix(np.ones((rows, 2), np.float32))
    pq_path = _parquet(tmp_path, "t", sp.csr_matrix(np.ones((rows, 4), np.float32)), Yp)
    X = sp.csr_matrix(np.ones((rows, 4)))
    checks = [lambda: check_inputs(LEML(rank=2), {"train": [path], "test": [path]}, "xmc",
                                   None, validation_fraction=fraction),
              lambda: check_inputs(LEML(rank=2), {"train": [pq_path], "test": [pq_path]},
                                   "parquet", None, validation_fraction=fraction),
              lambda: check_training_rows(rows, fraction, path),
              lambda: split(train={"X": X, "Y": X}, validation_fraction=fraction, seed=0)]
    for check in checks:
        if key is None:
            check()
            continue
        with pytest.raises(InputError, match=says) as err:
            check()
        assert err.value.key == key


# -- a set without features, and rows without one --------------------------------------------------
NO_FEATURES = {
    "xmc": ("t.txt", "3 4 3\n0\n1\n2\n"),
    "arff": ("t.arff", ARFF_HEAD + "@data\n0,0,1\n{2 1}\n"),
}


@pytest.mark.parametrize("fmt", NO_FEATURES)
def test_a_training_or_test_set_without_a_feature_is_refused(tmp_path, fmt):
    name, text = NO_FEATURES[fmt]
    path = tmp_path / name
    path.write_text(text)
    call = dict(path=path, format=fmt, dtype="float32", n_labels=1, normalize="none")
    with pytest.raises(InputError, match="points has a feature"):
        load(**call, labelled=True)
    assert load(**call)["X"].nnz == 0  # rows to label may have none


def test_a_parquet_set_without_a_feature_is_refused(tmp_path):
    x_path = _parquet(tmp_path, "d", sp.csr_matrix((3, 4), dtype=np.float32),
                      sp.csr_matrix(np.eye(3, 2, dtype=np.float32)))
    with pytest.raises(InputError, match="none of the 3 points has a feature"):
        load(path=x_path, format="parquet", dtype="float32", n_labels=None, normalize="none",
             labelled=True)


@pytest.mark.parametrize(("fmt", "text", "where"), [
    ("xmc", "3 4 3\n0 0:1\n1\n2 2:1\n", "line 3"),
    ("arff", ARFF_HEAD + "@data\n1,0,1\n% a comment\n0,0,1\n", "line 8"),
])
def test_rows_without_a_feature_are_said_with_their_count_and_place(tmp_path, caplog, fmt,
                                                                    text, where):
    path = tmp_path / f"t.{fmt}"
    path.write_text(text)
    with caplog.at_level("WARNING"):
        load(path=path, format=fmt, dtype="float32", n_labels=1, normalize="none",
             labelled=True)
    said = [r.getMessage() for r in caplog.records if "have no feature" in r.getMessage()]
    rows = 3 if fmt == "xmc" else 2
    assert said == [f"t.{fmt}: 1 of the {rows} rows have no feature (the first at {where}): "
                    "their feature rows are all zero"]


def test_the_parts_of_a_folder_need_a_label_and_a_feature_among_them(tmp_path):
    """As one file does (check_rows); a part alone may have none. Read from the footers."""
    def part(i, x, y):
        x_path = tmp_path / f"X{i}.parquet"
        y_path = tmp_path / f"Y{i}.parquet"
        atomic_write_parquet(x_path, encode(sp.csr_matrix(np.asarray(x, np.float32))))
        atomic_write_parquet(y_path, encode(sp.csr_matrix(np.asarray(y, np.float32))))
        return x_path, y_path

    unlabelled = [part(i, [[1, 0], [0, 2]], [[0, 0], [0, 0]]) for i in range(3)]
    with pytest.raises(InputError, match="none of the 3 parts has a label") as err:
        check_parts(*zip(*unlabelled, strict=True), tmp_path, key="dataset.test")
    assert (err.value.path, err.value.key) == (str(tmp_path), "dataset.test")
    featureless = [part(i, [[0, 0]], [[1, 0]]) for i in range(3, 5)]
    with pytest.raises(InputError, match="none of the 2 parts has a feature"):
        check_parts(*zip(*featureless, strict=True), tmp_path, key="dataset.train")
    check_parts(*zip(*unlabelled[:2], featureless[0], strict=True), tmp_path, key="dataset.test")
