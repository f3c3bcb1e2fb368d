"""JSON Lines reader for entity-pair mentions."""

import json
import re

import pandas as pd
import pytest

from scarce.tasks.errors import InputError
from scarce.tasks.readers.jsonl import read_jsonl
from scarce.tasks.readers.semeval import COLUMNS
from tests.tasks.readers.textfiles import write_text

REC = {"tokens": ["Smoke", "from", "the", "fire"], "head": [0, 1], "tail": [3, 4],
       "label": "Cause-Effect"}


def _write(tmp_path, lines, name="m.jsonl"):
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    return write_text(tmp_path / name, text)


def test_reads_records_into_reader_columns(tmp_path):
    rec2 = {"id": "x7", "tokens": ["a", "b", "c"], "head": [2, 3], "tail": [0, 1]}
    df = read_jsonl(_write(tmp_path, [REC, "", rec2], "m.jsonl.gz"))
    assert list(df.columns) == COLUMNS
    assert list(df["id"]) == [1, "x7"]  # id defaults to the line number
    assert df.loc[0, ["e1_start", "e1_end", "e2_start", "e2_end"]].tolist() == [0, 1, 3, 4]
    assert df.loc[0, "relation"] == "Cause-Effect"
    assert pd.isna(df.loc[1, "label"]) and df.loc[1, "e1_start"] == 2


@pytest.mark.parametrize("bad, message", [
    ('{"tokens": ["a"], "head": [0, 1], ', "invalid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({"tokens": [], "head": [0, 1], "tail": [0, 1]}, "non-empty list of strings"),
    ({"tokens": ["a", 3], "head": [0, 1], "tail": [1, 2]}, "non-empty list of strings"),
    ({**REC, "head": [0, 5]}, "outside the 4 tokens"),
    ({**REC, "tail": [-1, 1]}, "outside"),
    ({**REC, "tail": [2, 2]}, "empty"),
    ({**REC, "head": [0]}, "two integers"),
    ({**REC, "head": [0.0, 1.0]}, "two integers"),
    ({**REC, "tail": [0, 2]}, "overlap"),
    ({**REC, "label": 3}, "'label' must be a string"),
])
def test_malformed_lines_name_file_and_line(tmp_path, bad, message):
    path = _write(tmp_path, [REC, bad])
    with pytest.raises(InputError, match=message) as info:
        read_jsonl(path)
    assert info.value.line == 2 and info.value.path == str(path)


def test_duplicated_ids_and_empty_file(tmp_path):
    with pytest.raises(InputError, match="duplicated id 4"):
        read_jsonl(_write(tmp_path, [{**REC, "id": 4}, {**REC, "id": 4}]))
    with pytest.raises(InputError, match="no records"):
        read_jsonl(_write(tmp_path, [""]))


RAW = ('{"id": 1, "tokens": ["Smoke", "from", "the", "fire"], "head": [0, 1], "tail": [3, 4]'
       '%s}')


@pytest.mark.parametrize("line, where", [
    ('{"tokens": ["a", "\\ud800", "c"], "head": [0, 1], "tail": [2, 3]}', "'tokens'[1]"),
    (RAW % ', "label": "Cause\\udfff"', "'label'"),
    ('{"id": "p\\udc00", "tokens": ["a", "b"], "head": [0, 1], "tail": [1, 2]}', "'id'"),
    (RAW % ', "note\\ud83d": 1', "the key 'note\\ud83d'"),
    (RAW % ', "meta": {"from": ["ok", "x \\ud800 y"]}', "'meta'['from'][1]"),
    (RAW % ', "label": "\\ude00\\ud83d"', "'label'"),  # a pair in the wrong order
])
def test_a_lone_surrogate_in_any_string_names_file_line_and_field(tmp_path, line, where):
    path = _write(tmp_path, [REC, line])
    with pytest.raises(InputError, match=re.escape(f"{where} holds a lone surrogate")) as info:
        read_jsonl(path)
    assert info.value.line == 2 and info.value.path == str(path)
    str(info.value).encode("utf-8")  # the message itself is text


def test_a_surrogate_pair_is_text_and_is_read(tmp_path):
    df = read_jsonl(_write(tmp_path, [RAW % ', "label": "smile \\ud83d\\ude00"']))
    assert df.loc[0, "label"] == "smile \U0001f600"
