"""The bundled FewRel 1.0 validation split: what PROVENANCE.md says of it, and how it was made
(``data/relations/fewrel/convert.py`` on a hand-made two-relation file)."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
from pathlib import Path

from scarce.tasks.readers.jsonl import read_jsonl

FEWREL = Path(__file__).resolve().parents[3] / "data" / "relations" / "fewrel"


def _convert():
    spec = importlib.util.spec_from_file_location("fewrel_convert", FEWREL / "convert.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.convert


def test_the_bundled_file_holds_16_relations_of_700_pairs():
    path = FEWREL / "val_wiki.jsonl.gz"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == (
        "227c6c52cf48374151b7b5459e799e17369f60857e5b5e2bd5e0dac1b2687c76")  # PROVENANCE.md
    frame = read_jsonl(path)
    assert len(frame) == 11_200 and frame["id"].is_unique
    assert frame["label"].value_counts().tolist() == [700] * 16
    assert {"crosses", "spouse", "mother", "child", "main subject"} <= set(frame["label"])
    first = frame.iloc[0]  # P177-0: "... Cape Girardeau Bridge" crosses "Mississippi River"
    assert first["tokens"][first["e1_start"]:first["e1_end"]] == ["Cape", "Girardeau", "Bridge"]
    assert first["tokens"][first["e2_start"]:first["e2_end"]] == ["Mississippi", "River"]


def test_convert_takes_the_first_mention_and_the_property_name(tmp_path):
    source = tmp_path / "fewrel"
    source.mkdir()
    (source / "val_wiki.json").write_text(json.dumps({
        "P26": [{"tokens": ["Ann", "married", "Bob", ";", "Bob", "smiled"],
                 "h": ["ann", "Q1", [[0]]], "t": ["bob", "Q2", [[2], [4]]]}],
        "P177": [{"tokens": ["The", "Old", "Bridge", "crosses", "the", "Ouse"],
                  "h": ["old bridge", "Q3", [[1, 2]]], "t": ["ouse", "Q4", [[5]]]}],
    }))
    (source / "pid2name.json").write_text(json.dumps(
        {"P26": ["spouse", "husband or wife"], "P177": ["crosses", "obstacle crossed"]}))
    target = tmp_path / "out.jsonl.gz"
    assert _convert()(source, target) == 2
    lines = [json.loads(line) for line in gzip.decompress(target.read_bytes()).splitlines()]
    assert lines == [
        {"id": "P26-0", "tokens": ["Ann", "married", "Bob", ";", "Bob", "smiled"],
         "head": [0, 1], "tail": [2, 3], "label": "spouse"},
        {"id": "P177-0", "tokens": ["The", "Old", "Bridge", "crosses", "the", "Ouse"],
         "head": [1, 3], "tail": [5, 6], "label": "crosses"},
    ]
    again = tmp_path / "again.jsonl.gz"
    _convert()(source, again)
    assert again.read_bytes() == target.read_bytes()  # the same bytes from the same input
