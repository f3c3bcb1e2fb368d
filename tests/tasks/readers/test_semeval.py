"""SemEval-2010 Task 8 reader: the bundled files and malformed input."""

from pathlib import Path

import pytest

from scarce.tasks.errors import InputError
from scarce.tasks.readers.semeval import parse_marked_sentence, read_semeval, tokenize
from tests.tasks.readers.textfiles import write_text

DATA = Path(__file__).resolve().parents[3] / "data" / "relations" / "semeval2010_task8"

# PROVENANCE.md, undirected counts in the train file
TRAIN_COUNTS = {"Other": 1410, "Cause-Effect": 1003, "Component-Whole": 941,
                "Entity-Destination": 845, "Product-Producer": 717, "Entity-Origin": 716,
                "Member-Collection": 690, "Message-Topic": 634, "Content-Container": 540,
                "Instrument-Agency": 504}


def test_train_file_counts_match_provenance_table():
    df = read_semeval(DATA / "TRAIN_FILE.TXT")
    assert len(df) == 8000
    assert list(df["id"]) == list(range(1, 8001))
    assert df["relation"].value_counts().to_dict() == TRAIN_COUNTS
    assert df["label"].nunique() == 19
    assert (df["e1_end"] <= df["e2_start"]).all()
    first = df.iloc[0]
    assert first["tokens"][first["e1_start"]:first["e1_end"]] == ["configuration"]
    assert first["tokens"][first["e2_start"]:first["e2_end"]] == ["elements"]
    assert first["label"] == "Component-Whole(e2,e1)" and first["direction"] == "e2,e1"


def test_test_file_gives_2717_sentences_and_other_has_no_direction():
    df = read_semeval(DATA / "TEST_FILE_FULL.TXT")
    assert len(df) == 2717 and df["id"].min() == 8001
    assert (df["relation"] != "Other").sum() == 2717 - 454
    assert df.loc[df["relation"] == "Other", "direction"].isna().all()


def test_tokenizer_keeps_inner_hyphens_and_splits_punctuation():
    assert tokenize("A well-known (U.S.) man's car, 3.5 m.") == [
        "A", "well-known", "(", "U.S", ".", ")", "man's", "car", ",", "3.5", "m", "."]
    tokens, e1, e2 = parse_marked_sentence("The <e1>child</e1> was in the <e2>big cradle</e2>.")
    assert tokens[e1[0]:e1[1]] == ["child"] and tokens[e2[0]:e2[1]] == ["big", "cradle"]


def _write(tmp_path, text, name="f.txt"):
    return write_text(tmp_path / name, text)


GOOD = '1\t"The <e1>child</e1> was in the <e2>cradle</e2>."\nOther\nComment:\n\n'


def test_gzip_and_crlf_are_read(tmp_path):
    df = read_semeval(_write(tmp_path, GOOD.replace("\n", "\r\n") + GOOD.replace("1\t", "2\t"),
                             "f.txt.gz"))
    assert list(df["id"]) == [1, 2] and df["tokens"][0][-1] == "."


@pytest.mark.parametrize("sentence, message", [
    ("The child was in the <e2>cradle</e2>.", "missing <e1>"),
    ("The <e1>child <e2>was</e2></e1> in the cradle.", "nested"),
    ("The <e2>child</e2> was in the <e1>cradle</e1>.", "before <e1>"),
    ("The </e1>child<e1> was in the <e2>cradle</e2>.", "closing tag </e1> before"),
    ("The <e1>child</e1> <e1>was</e1> in the <e2>cradle</e2>.", "duplicated tag <e1>"),
    ("The <e1>child was in the <e2>cradle</e2>.", "nested"),
    ("The <e1>child</e1> was in the <e2>cradle.", "never closed"),
    ("The <e1></e1> was in the <e2>cradle</e2>.", "contains no token"),
])
def test_bad_markup_names_file_and_line(tmp_path, sentence, message):
    path = _write(tmp_path, GOOD + f'2\t"{sentence}"\nOther\nComment:\n\n')
    with pytest.raises(InputError, match=message) as info:
        read_semeval(path)
    assert info.value.line == 5 and info.value.path == str(path)


@pytest.mark.parametrize("record, message, line", [
    ('2\t"The <e1>a</e1> of <e2>b</e2>."\n\nComment:\n', "missing label line", 2),
    ('2\t"The <e1>a</e1> of <e2>b</e2>."\nCause-Effect\nComment:\n', "unknown label", 2),
    ('2\t"The <e1>a</e1> of <e2>b</e2>."\nCause-Effect(e1,e1)\nComment:\n', "unknown label", 2),
    ('2\t"The <e1>a</e1> of <e2>b</e2>."\nFriend-Of(e1,e2)\nComment:\n', "unknown label", 2),
    ('2\t"The <e1>a</e1> of <e2>b</e2>."\nOther\n', "Comment:", 3),
    ('1\t"The <e1>a</e1> of <e2>b</e2>."\nOther\nComment:\n', "duplicated id 1", 1),
    ('The <e1>a</e1> of <e2>b</e2>.\nOther\nComment:\n', "expected '<id><TAB>", 1),
])
def test_bad_records_name_file_and_line(tmp_path, record, message, line):
    path = _write(tmp_path, GOOD + record)
    with pytest.raises(InputError, match=message) as info:
        read_semeval(path)
    assert info.value.line == 4 + line


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_semeval(tmp_path / "nope.txt")
    with pytest.raises(InputError, match="no sentences"):
        read_semeval(_write(tmp_path, "\n\n"))
