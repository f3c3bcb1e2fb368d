"""Every example input under data/examples is read by its flow's reader, the formats of one
example agree with each other, and the input formats reference names every example."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from scarce.tasks.readers.conllu import read_conllu
from scarce.tasks.readers.jsonl import read_jsonl
from scarce.tasks.readers.semeval import read_semeval
from scarce.tasks.readers.table import feature_rows, label_names, read_table
from scarce.tasks.readers.xmc import read_xmc

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "data" / "examples"


def test_the_reference_page_names_every_example():
    page = (REPO / "docs" / "reference" / "input-formats.md").read_text()
    files = [p for p in EXAMPLES.rglob("*") if p.is_file() and p.name != "PROVENANCE.md"]
    assert len(files) >= 12
    for path in files:
        assert re.search(rf"\b{re.escape(path.name)}\b", page), path.name


def test_leml_samples_hold_the_same_rows_in_every_format():
    X, Y = read_xmc(EXAMPLES / "leml" / "bibtex.sample.txt")
    names = re.findall(r'<label name="TAG_([^"]*)"',
                       (REPO / "data" / "xmc" / "bibtex" / "bibtex.xml").read_text())
    want_tags = [[names[j] for j in Y[i].indices] for i in range(Y.shape[0])]
    for suffix in ("jsonl", "parquet"):
        path = EXAMPLES / "leml" / f"bibtex.sample.{suffix}"
        frame = read_table(path, ["tags", "features"])
        assert label_names(frame["tags"], ",", path, "tags") == want_tags
        got = feature_rows(frame["features"], path, "features", n_features=X.shape[1])
        assert (got != X).nnz == 0


def test_leml_text_tables():
    for split in ("train", "test"):
        path = EXAMPLES / "leml" / f"bibtex.{split}.csv"
        frame = read_table(path, ["text", "tags"])
        tags = label_names(frame["tags"], ",", path, "tags")
        assert all(tags) and frame["text"].str.len().gt(0).all()
    new = read_table(EXAMPLES / "leml" / "bibtex.new.csv", ["text"], optional=["tags"])
    assert list(new.columns) == ["text"] and len(new) > 0


def test_relation_examples_agree_across_formats():
    semeval = read_semeval(EXAMPLES / "relations" / "semeval.txt")
    jsonl = read_jsonl(EXAMPLES / "relations" / "pairs.jsonl")
    cols = ["id", "tokens", "e1_start", "e1_end", "e2_start", "e2_end", "label"]
    pd.testing.assert_frame_equal(semeval[cols], jsonl[cols], check_dtype=False)
    for name, read in (("semeval-unlabelled.txt", read_semeval),
                       ("pairs-unlabelled.jsonl", read_jsonl)):
        bare = read(EXAMPLES / "relations" / name)
        assert bare["label"].isna().all()
        assert bare["tokens"].tolist() == semeval["tokens"].tolist()


def test_strip_example():
    tokens, mentions = read_conllu(EXAMPLES / "strip" / "GUM_news_worship.conllu")
    assert len(tokens) > 100 and len(mentions) > 10
    splits = pd.read_csv(EXAMPLES / "strip" / "splits.tsv", sep="\t")
    assert list(splits.columns) == ["doc_id", "split"]
    assert splits["doc_id"].tolist() == ["GUM_news_worship"]
