"""One syntax of a number in every reader (:mod:`tasks.readers.numbers`): every reader of an
index or a value takes exactly the tokens the shared parser takes, with the same number, and
refuses the others in one line naming the file; the vectorised paths agree with the exact
ones; an index beyond int64, or of thousands of digits, is one such line too."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from scarce.tasks.errors import InputError
from scarce.tasks.readers import numbers
from scarce.tasks.readers.arff import read_arff
from scarce.tasks.readers.conllu import read_conllu
from scarce.tasks.readers.semeval import read_semeval
from scarce.tasks.readers.table import _pair_strings, _pairs, feature_rows
from scarce.tasks.readers.xmc import _parse_block, _parse_line, read_xmc

# Tokens meant as the index 1 (or 10): the first three are an index, the others are what one
# parser or another took (int: +1, 1_0, Unicode digits; pandas: 1.0, 1e0, 1.; NumPy all).
INDEX_TOKENS = ["1", "01", "001", "1e0", "1.0", "1.", "+1", "-1", "1_0", "١", "¹", "0x1",
                "1e-0", "1E0", "1e1", "1L", "1j", "nan", "one", "1⁰"]


def _xmc_feature(tmp_path, token):
    (tmp_path / "f.txt").write_text(f"1 20 20\n0 {token}:1\n")
    return int(read_xmc(tmp_path / "f.txt")[0].indices[0])


def _xmc_label(tmp_path, token):
    (tmp_path / "f.txt").write_text(f"1 20 20\n{token} 0:1\n")
    return int(read_xmc(tmp_path / "f.txt")[1].indices[0])


def _xmc_exact(tmp_path, token):  # the line-by-line path alone
    try:
        return _parse_line(f"0 {token}:1", 20, 20)[1][0]
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _table(cells):
    def read(tmp_path, token):
        X = feature_rows([c.format(token) for c in cells], tmp_path / "t.csv", "f")
        return int(X[0].indices[0])
    return read


def _arff_sparse(tmp_path, token):
    (tmp_path / "a.arff").write_text("@relation r\n@attribute a numeric\n@attribute b numeric\n"
                                     f"@attribute l {{0,1}}\n@data\n{{{token} 5,2 1}}\n")
    return int(read_arff(tmp_path / "a.arff", n_labels=1)[0].indices[0])


CONLLU = textwrap.dedent("""\
    # newdoc id = d
    # global.Entity = {fields}
    1\tAnna\tAnna\tPROPN\tNNP\t_\t2\tnsubj\t_\tEntity=({first}
    2\tsleeps\tsleep\tVERB\tVBZ\t_\t0\troot\t_\t_
    3\tnow\tnow\tADV\tRB\t_\t{head}\tadvmod\t_\tEntity=({third}

    """)
ALL_FIELDS = "GRP-etype-infstat-salience-centering-minspan-link-identity"
ENTITY = "1-person-new-_-_-1-_-Anna)"


def _conllu(fields, first, third, head):
    """The token read is the HEAD of token 3 (``head``: where the token goes), else the head
    of the one-token mention on token 3 (1-based in the mention)."""
    def read(tmp_path, token):
        if "-" in token and "{}" not in head:
            pytest.skip("'-' separates the fields of an Entity value")
        text = CONLLU.format(fields=fields, first=first, third=third.format(token),
                             head=head.format(token))
        (tmp_path / "d.conllu").write_text(text)
        tokens, mentions = read_conllu(tmp_path / "d.conllu")
        if "{}" in head:
            return int(tokens["head"].iloc[2])  # token 3's HEAD
        return int(mentions["head"].iloc[-1]) - 2  # the mention on token 3
    return read


def _semeval(tmp_path, token):
    (tmp_path / "s.txt").write_text(f'{token}\t"The <e1>smoke</e1> and <e2>fire</e2>."\nOther\n'
                                    "Comment:\n\n")
    return int(read_semeval(tmp_path / "s.txt")["id"].iloc[0])


#: Every reader of an index, as (name, read(tmp_path, token) -> the index read).
INDEX_READERS = [
    ("xmc-feature", _xmc_feature),
    ("xmc-label", _xmc_label),
    ("xmc-exact", _xmc_exact),
    ("table-text", _table(["{}:1"])),                  # the vectorised column
    ("table-text-exact", _table(["{}:1", "[[0, 1]]"])),  # cell by cell
    ("table-mapping", _table(['{{"{}": 1}}'])),
    ("arff-sparse", _arff_sparse),
    ("conllu-head", _conllu(ALL_FIELDS, ENTITY, ENTITY, "{}")),
    ("conllu-minspan", _conllu(ALL_FIELDS, ENTITY, "1-person-giv-_-_-{}-_-Anna)", "2")),
    ("conllu-head-field", _conllu("eid-etype-head", "e1-person-1)", "e1-person-{})", "2")),
    ("semeval-id", _semeval),
]


@pytest.mark.parametrize("token", INDEX_TOKENS)
@pytest.mark.parametrize(("reader", "read"), INDEX_READERS, ids=[n for n, _ in INDEX_READERS])
def test_every_reader_takes_an_index_as_the_shared_parser_does(tmp_path, reader, read, token):
    if numbers.is_index(token):
        assert read(tmp_path, token) == numbers.parse_index(token) == 1
    else:
        with pytest.raises(InputError) as err:
            read(tmp_path, token)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("token", [str(2**63), "9" * 5000])
@pytest.mark.parametrize(("reader", "read"), INDEX_READERS, ids=[n for n, _ in INDEX_READERS])
def test_a_huge_index_is_one_line(tmp_path, reader, read, token):
    with pytest.raises(InputError) as err:
        read(tmp_path, token)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


# Values: a decimal number with sign, fraction and exponent; not 1_0 nor Unicode digits.
VALUE_TOKENS = ["0.5", ".5", "5.", "-2", "+2", "1e1", "2E-1", "1_0", "١", "٠.٥", "0x1", "1d1",
                "½", "1e", "e1", "--1", "0.5f"]


def _xmc_value(tmp_path, token):
    (tmp_path / "f.txt").write_text(f"1 4 2\n0 1:{token}\n")
    return float(read_xmc(tmp_path / "f.txt", dtype=np.float64)[0].data[0])


def _table_value(cells):
    def read(tmp_path, token):
        return float(feature_rows([c.format(token) for c in cells], tmp_path / "t.csv",
                                  "f")[0].data[0])
    return read


def _arff_value(tmp_path, token):
    (tmp_path / "a.arff").write_text("@relation r\n@attribute a numeric\n@attribute l {0,1}\n"
                                     f"@data\n{token},1\n")
    return float(read_arff(tmp_path / "a.arff", n_labels=1)[0].data[0])


VALUE_READERS = [
    ("xmc", _xmc_value),
    ("table-text", _table_value(["1:{}"])),
    ("table-text-exact", _table_value(["1:{}", "[[0, 1]]"])),
    ("table-mapping", _table_value(['{{"1": "{}"}}'])),
    ("arff", _arff_value),
]


@pytest.mark.parametrize("token", VALUE_TOKENS)
@pytest.mark.parametrize(("reader", "read"), VALUE_READERS, ids=[n for n, _ in VALUE_READERS])
def test_every_reader_takes_a_value_as_the_shared_parser_does(tmp_path, reader, read, token):
    try:
        want = numbers.parse_value(token)
    except ValueError:
        with pytest.raises(InputError) as err:
            read(tmp_path, token)
        assert "\n" not in str(err.value)
    else:
        assert read(tmp_path, token) == want


# The vectorised paths against the exact ones, on tokens made of the characters that matter.
_CHARS = st.sampled_from(list("0123456789.eE+-_:x ") + ["١", "nan", "inf", "1e1"])
_TOKEN = st.lists(_CHARS, min_size=1, max_size=6).map("".join)


@settings(max_examples=300, deadline=None)
@given(labels=st.lists(_TOKEN, max_size=3), feats=st.lists(_TOKEN, max_size=4))
def test_the_xmc_fast_path_agrees_with_the_exact_one(labels, feats, tmp_path_factory):
    line = ",".join(labels) + " " + " ".join(feats)
    assume(line.strip())  # (a blank last line is no point: the file reader drops it)
    try:
        exact = _parse_line(line, 50, 50)
    except ValueError:
        exact = None
    try:
        X, Y = _parse_block([line], 50, 50, np.float32)
    except Exception:
        fast = None
    else:
        fast = (sorted(Y.indices.tolist()),
                dict(zip(X.indices.tolist(), X.data.tolist(), strict=True)))
    if fast is not None:  # what the fast path takes, the exact one takes alike
        assert exact is not None
        assert sorted(exact[0]) == fast[0]
        assert {i: float(np.float32(v)) for i, v in zip(exact[1], exact[2], strict=True)} \
            == fast[1]
    elif exact is not None:  # the fast path gave up: the file is read line by line
        path = tmp_path_factory.mktemp("x") / "f.txt"
        path.write_text(f"1 50 50\n{line}\n")
        X, Y = read_xmc(path)
        assert sorted(exact[0]) == Y.indices.tolist()


@settings(max_examples=300, deadline=None)
@given(feats=st.lists(_TOKEN, max_size=4))
@example(feats=["1:0:0", "0"])  # as many colons as tokens, two in one token
def test_the_table_fast_path_agrees_with_the_exact_one(feats, tmp_path_factory):
    cell = " ".join(feats)
    fast = _pair_strings([cell])
    try:
        exact = _pairs(cell, tmp_path_factory.mktemp("t") / "t.csv", "f", 0)
    except InputError:
        exact = None
    if fast is not None:
        assert exact is not None
        order = np.argsort(exact[0])
        assert fast[1].tolist() == np.asarray(exact[0])[order].tolist()
        assert fast[2].tolist() == np.asarray(exact[1], dtype=float)[order].tolist()
