"""Mulan ARFF reader: a hand-written file with dense and sparse rows, and bad inputs."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from scarce.tasks.errors import InputError
from scarce.tasks.readers.arff import read_arff, read_arff_header, read_mulan_labels

ARFF = """% a comment
@relation 'toy set'

@attribute f0 numeric
@attribute 'f one' REAL
@attribute colour {red,green}
@attribute tagA {0,1}
@attribute "tag, B" {0,1}

@data
% dense rows
1.5,0,green,1,0
0,-2,red,0,1
{0 3,4 1}
{}
{1 2.5,2 green,3 1,4 1}
"""

XML = """<?xml version="1.0" encoding="utf-8"?>
<labels xmlns="http://mulan.sourceforge.net/labels">
<label name="tag, B"></label>
<label name="tagA"><label name="f0"></label></label>
</labels>
"""


def test_dense_and_sparse_rows(tmp_path):
    path = tmp_path / "toy.arff"
    path.write_text(ARFF)
    X, Y, features, labels = read_arff(path, n_labels=2)
    assert features == ["f0", "f one", "colour"] and labels == ["tagA", "tag, B"]
    # Nominal values that are not numbers become the category's position.
    np.testing.assert_array_equal(X.toarray(), [[1.5, 0, 1], [0, -2, 0], [3, 0, 0],
                                                [0, 0, 0], [0, 2.5, 1]])
    np.testing.assert_array_equal(Y.toarray(), [[1, 0], [0, 1], [0, 1], [0, 0], [1, 1]])
    assert Y.dtype == np.int8


def test_labels_by_name_from_mulan_xml_and_gzip(tmp_path):
    arff = tmp_path / "toy.arff.gz"
    arff.write_bytes(gzip.compress(ARFF.encode()))
    xml = tmp_path / "toy.xml"
    xml.write_text(XML)
    names = read_mulan_labels(xml)
    assert names == ["tag, B", "tagA", "f0"]  # nested labels included, document order
    X, Y, features, labels = read_arff(arff, label_names=["tag, B", "tagA"])
    assert labels == ["tag, B", "tagA"] and features == ["f0", "f one", "colour"]
    np.testing.assert_array_equal(Y.toarray()[:, 1], [1, 0, 0, 0, 1])


def test_exactly_one_label_spec_required(tmp_path):
    path = tmp_path / "toy.arff"
    path.write_text(ARFF)
    with pytest.raises(ValueError, match="exactly one"):
        read_arff(path)


HEADER = "@relation r\n@attribute a numeric\n@attribute b numeric\n@attribute y {0,1}\n"
BAD = [
    (HEADER, 4, "no @data"),
    (HEADER + "@data\n1,2\n", 6, "2 values, expected 3"),
    (HEADER + "@data\n1,2,0\n{5 1}\n", 7, "out of range"),
    (HEADER + "@data\n{0 1,0 2}\n", 6, "repeated"),
    (HEADER + "@data\n1,x,0\n", 6, "not a number"),
    (HEADER + "@data\n1,?,0\n", 6, "missing value"),
    (HEADER + "@data\n1,2,3\n", 6, "not one of its categories"),
    (HEADER + "@data\n{0 1\n", 6, "must end with"),
    (HEADER + "@data\n{0}\n", 6, "index value"),
    ("@relation r\n@attribute a string\n@attribute y {0,1}\n@data\n", 2, "supported"),
    ("@relation r\n@attribute a numeric\n@attribute y {0,1}\nhello\n@data\n", 4,
     "unexpected header line"),
    ("@relation r\n@attribute a numeric\n@attribute y {a,b}\n@data\n", 3, "expected {0,1}"),
]


@pytest.mark.parametrize(("text", "line", "message"), BAD)
def test_malformed_input_names_file_and_line(tmp_path, text, line, message):
    path = tmp_path / "bad.arff"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as info:
        read_arff(path, n_labels=1)
    assert info.value.line == line and info.value.path == str(path)


def test_label_name_not_an_attribute_and_bad_xml(tmp_path):
    path = tmp_path / "ok.arff"
    path.write_text(HEADER + "@data\n1,2,1\n")
    with pytest.raises(InputError, match="'z'"):
        read_arff(path, label_names=["y", "z"])
    xml = tmp_path / "bad.xml"
    xml.write_text("<labels>\n<label name='a'>\n</labels>\n")
    with pytest.raises(InputError, match="not well-formed") as info:
        read_mulan_labels(xml)
    assert info.value.line == 3


@pytest.mark.parametrize("data, line", [
    ("@data\n", 5),
    ("@data\n% only a comment\n\n", 5),
    ("\n@DATA\n\n", 6),
])
def test_a_data_section_without_rows_is_refused_at_its_line(tmp_path, data, line):
    path = tmp_path / "bad.arff"
    path.write_text(HEADER + data)
    with pytest.raises(InputError, match="the @data section has no row") as info:
        read_arff(path, n_labels=1)
    assert (info.value.path, info.value.line) == (str(path), line)


def test_labels_that_leave_no_feature_are_refused(tmp_path):
    path = tmp_path / "labels.arff"
    path.write_text("@relation r\n@attribute y {0,1}\n@attribute z {0,1}\n@data\n1,0\n")
    for kwargs in ({"n_labels": 2}, {"label_names": ["z", "y"]}):
        with pytest.raises(InputError, match="no feature") as info:
            read_arff(path, **kwargs)
        assert info.value.line == 4
    with pytest.raises(InputError, match="n_labels=3 but the file declares 2 attributes"):
        read_arff(path, n_labels=3)


@pytest.mark.parametrize("row, value, attribute", [
    ("1e39,2,1", "1e39", "a"),
    ("1,-4e38,0", "-4e38", "b"),
    ("{1 3.5e38,2 1}", "3.5e38", "b"),
])
def test_a_value_beyond_the_dtype_names_file_line_and_attribute(tmp_path, row, value, attribute):
    path = tmp_path / "big.arff"
    path.write_text(HEADER + "@data\n1,2,0\n" + row + "\n")
    with pytest.raises(InputError, match=f"value '{value}' of attribute '{attribute}' is not "
                                         "finite in float32") as info:
        read_arff(path, n_labels=1, dtype=np.float32)
    assert info.value.line == 7
    X, *_ = read_arff(path, n_labels=1)  # float64 holds it
    assert float(value) in X.data


def test_a_category_beyond_the_dtype_is_refused(tmp_path):
    path = tmp_path / "cat.arff"
    path.write_text("@relation r\n@attribute a {0,1e39}\n@attribute y {0,1}\n@data\n0,1\n1e39,0\n")
    with pytest.raises(InputError, match="value '1e39' of attribute 'a' is not finite") as info:
        read_arff(path, n_labels=1, dtype=np.float32)
    assert info.value.line == 6


@pytest.mark.parametrize("gz", [False, True])
def test_the_header_alone_names_features_and_labels_as_the_reader_does(tmp_path, gz):
    path = tmp_path / ("toy.arff.gz" if gz else "toy.arff")
    broken_data = ARFF + "{9 1}\n\xff\n"  # the header is read, the data are not
    path.write_bytes(gzip.compress(broken_data.encode("latin-1")) if gz
                     else broken_data.encode("latin-1"))
    assert read_arff_header(path, n_labels=2) == (["f0", "f one", "colour"], ["tagA", "tag, B"])
    assert read_arff_header(path, label_names=["tag, B"]) == (
        ["f0", "f one", "colour", "tagA"], ["tag, B"])
    with pytest.raises(InputError):
        read_arff(path, n_labels=2)
    good = tmp_path / "good.arff"
    good.write_text(ARFF)
    _, _, features, labels = read_arff(good, n_labels=2)
    assert read_arff_header(good, n_labels=2) == (features, labels)


@pytest.mark.parametrize("text, line, message", [b for b in BAD if b[1] < 5])
def test_the_header_alone_gives_the_readers_header_errors(tmp_path, text, line, message):
    path = tmp_path / "bad.arff"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as info:
        read_arff_header(path, n_labels=1)
    assert info.value.line == line
