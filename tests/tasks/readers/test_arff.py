"""Mulan ARFF reader: a hand-written file with dense and sparse rows, and bad inputs."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from tasks.errors import InputError
from tasks.readers.arff import read_arff, read_mulan_labels

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
