"""CoNLL-U reader with CorefUD entities: bundled GUM documents and malformed inputs."""

import gzip
import re
from pathlib import Path

import pandas as pd
import pytest

from scarce.tasks.errors import InputError
from scarce.tasks.readers.conllu import read_conllu, read_conllu_files, write_chains
from tests.tasks.readers.textfiles import write_text

DATA = Path(__file__).resolve().parents[3] / "data" / "coref"
HEADER = ("# newdoc id = tiny\n"
          "# global.Entity = GRP-etype-infstat-salience-centering-minspan-link-identity\n")


def provenance_counts():
    """doc -> (sentences, tokens, mentions, entities, chains>1) from data/coref/PROVENANCE.md."""
    out = {}
    for line in (DATA / "PROVENANCE.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| gum/(GUM_\S+)\.conllu\.gz \|", line)
        if m:
            c = [x.strip() for x in line.split("|")]
            out[m.group(1)] = tuple(int(x) for x in c[7:12])
    return out


def counts(tokens, mentions, doc):
    t = tokens[tokens["doc"] == doc]
    m = mentions[mentions["doc"] == doc]
    sizes = m.groupby("entity").size()
    return (t["sent"].nunique(), len(t), len(m), m["entity"].nunique(), int((sizes > 1).sum()))


def test_bundled_documents_match_provenance_counts():
    files = sorted((DATA / "gum").glob("GUM_*.conllu.gz"))
    assert len(files) >= 40
    tokens, mentions = read_conllu_files(files)
    expected = provenance_counts()
    for doc in tokens["doc"].unique():
        assert counts(tokens, mentions, doc) == expected[doc], doc


def test_mentions_heads_and_spans_of_a_known_sentence():
    tokens, mentions = read_conllu(DATA / "gum" / "GUM_news_afghan.conllu.gz")
    first = mentions[mentions["sent"] == 0]
    spans = {(r.start, r.end): (r.entity, r.etype, r.head) for r in first.itertuples()}
    # "visa snags" (minspan 2 -> snags), "visa", "all-girl Afghan team" (minspan 5 -> team)
    assert spans[(2, 3)] == ("1", "event", 3)
    assert spans[(2, 2)] == ("2", "abstract", 2)
    assert spans[(5, 9)] == ("3", "organization", 9)
    assert spans[(17, 19)] == ("5", "event", 19)
    assert list(mentions["mention"][:3]) == [0, 1, 2]
    assert tokens["paragraph"].iloc[0] == 0 and tokens["paragraph"].max() > 5
    assert tokens.loc[tokens["sent"] == 1, "paragraph"].iloc[0] == 1


def write(tmp_path, body, name="doc.conllu", gz=False):
    return write_text(tmp_path / (name + (".gz" if gz else "")), HEADER + body)


def tok(i, form, head, misc="_", upos="NOUN", deprel="dep"):
    return f"{i}\t{form}\t{form}\t{upos}\tNN\t_\t{head}\t{deprel}\t_\t{misc}\n"


GOOD = ("# speaker = Ann\n" + tok(1, "The", 2, "Entity=(1-person-new-s-cf1-2-coref", "DET")
        + tok(2, "cat", 0, "Entity=1)", deprel="root") + tok(3, "it", 2,
                                                             "Entity=(1-person-giv-s-cf1-1-ana)")
        + "\n")


def test_gzip_and_plain_read_the_same(tmp_path):
    t1, m1 = read_conllu(write(tmp_path, GOOD))
    t2, m2 = read_conllu(write(tmp_path, GOOD, gz=True))
    assert t1.equals(t2) and m1.equals(m2)
    assert list(zip(m1["start"], m1["end"], m1["head"], strict=True)) == [(1, 2, 2), (3, 3, 3)]
    assert t1["speaker"].tolist() == ["Ann"] * 3


def test_dependency_head_when_no_minspan(tmp_path):
    body = (tok(1, "big", 2, "Entity=(4-object", "ADJ") + tok(2, "dog", 0, "Entity=4)",
                                                              deprel="root") + "\n")
    _, m = read_conllu(write(tmp_path, body))
    assert m["head"].tolist() == [2]


@pytest.mark.parametrize("body, message, line", [
    (tok(1, "a", 0, "Entity=(1-person-new-s-cf1-1-coref") + "\n", "not closed", 3),
    (tok(1, "a", 0, "Entity=2)") + "\n", "without an open mention", 3),
    (tok(1, "a", 0, "Entity=(1-person-new-s-cf1-1-coref)") + tok(2, "b", 1, "Entity=1)")
     + "\n", "without an open mention", 4),
    (tok(1, "a", 0).replace("\t_\n", "\n") + "\n", "9 tab-separated columns", 3),
    (tok(1, "a", 0) + tok(3, "b", 1) + "\n", "token id '3' where 2", 4),
    (tok(1, "a", 0) + tok(2, "b", 7) + "\n", "HEAD 7 outside", 4),
    (tok("x", "a", 0) + "\n", "bad token id 'x'", 3),
    (tok(1, "a", 0, "Entity=(1-person-new-s-cf1-4-coref)") + "\n", "minspan '4' outside", 3),
    (tok(1, "a", 0, "Entity=(1[1/2]-person)") + "\n", "discontinuous", 3),
])
def test_malformed_input_names_file_and_line(tmp_path, body, message, line):
    path = write(tmp_path, body)
    with pytest.raises(InputError, match=re.escape(message)) as err:
        read_conllu(path)
    assert err.value.line == line
    assert err.value.path == str(path)
    assert str(err.value).startswith(f"{path}:{line}: ")


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_conllu(tmp_path / "absent.conllu")


# -- writing predicted chains --------------------------------------------------------------
def _partition(mentions, label) -> set[frozenset]:
    groups: dict = {}
    for row in mentions.itertuples(index=False):
        groups.setdefault((row.doc, getattr(row, label)), set()).add(
            (row.doc, row.sent, row.start, row.end))
    return {frozenset(g) for g in groups.values()}


@pytest.mark.parametrize("name", ["GUM_news_warhol", "GUM_academic_art"])
def test_written_gold_chains_read_back_as_the_gold_chains(tmp_path, name):
    path = DATA / "gum" / f"{name}.conllu.gz"
    tokens, mentions = read_conllu(path)
    gold = mentions.assign(cluster=mentions["entity"].astype("category").cat.codes)
    text = write_chains(path, gold)
    out = tmp_path / f"{name}.conllu"
    out.write_text(text)
    tokens2, mentions2 = read_conllu(out)
    # the same tokens, the same mentions, the same partition into entities
    cols = ["doc", "sent", "token", "form", "lemma", "upos", "head", "deprel"]
    assert tokens2[cols].equals(tokens[cols])
    assert _partition(mentions2, "entity") == _partition(gold, "cluster")
    # the heads written are the heads read back (not recomputed from the dependencies)
    cols = ["doc", "sent", "start", "end", "head"]
    assert sorted(map(tuple, mentions2[cols].to_numpy().tolist())) == sorted(
        map(tuple, gold[cols].to_numpy().tolist()))
    # every line but the coreference annotation is the input's
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        original = fh.read().splitlines()
    assert _same_but_entities(original, text.splitlines())


def _same_but_entities(original: list[str], written: list[str]) -> bool:
    a = [line for line in original if not line.startswith("# global.Entity")]
    b = [line for line in written if not line.startswith("# global.Entity")]
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if "\t" not in x:
            if x != y:
                return False
            continue
        cx, cy = x.split("\t"), y.split("\t")
        if cx[:9] != cy[:9]:
            return False
        keep = [i for i in cx[9].split("|")
                if i != "_" and not i.startswith(("Entity=", "Bridge=", "SplitAnte="))]
        if [i for i in cy[9].split("|") if i != "_" and not i.startswith("Entity=")] != keep:
            return False
    return True


def test_nested_adjacent_and_single_token_mentions_are_read_by_udapi(tmp_path):
    """Brackets in CorefUD 1.x order, checked with udapi (the reader of the official scorer)."""
    from udapi.core.document import Document

    body = "\n".join([
        "# newdoc id = d1",
        "# sent_id = s1",
        "# text = a b c d",
        "1\ta\ta\tX\tX\t_\t0\troot\t_\tSpaceAfter=No",
        "2\tb\tb\tX\tX\t_\t1\tdep\t_\t_",
        "3\tc\tc\tX\tX\t_\t2\tdep\t_\t_",
        "4\td\td\tX\tX\t_\t3\tdep\t_\t_",
        "",
    ]) + "\n"
    src = tmp_path / "in.conllu"
    src.write_text(body)
    # mentions: [1-4] e7, [1-2] e3, [2] e3 single, [3-4] e7, [3] e9 single
    mentions = pd.DataFrame({
        "doc": ["d1"] * 5, "sent": [0] * 5,
        "start": [1, 1, 2, 3, 3], "end": [4, 2, 2, 4, 3], "head": [1, 1, 2, 3, 3],
        "cluster": [7, 3, 3, 7, 9],
    })
    text = write_chains(src, mentions)
    misc = [line.split("\t")[9] for line in text.splitlines() if "\t" in line]
    assert misc == ["SpaceAfter=No|Entity=(e7--1(e3--1", "Entity=(e3--1)e3)",
                    "Entity=(e7--1(e9--1)", "Entity=e7)e7)"]
    out = tmp_path / "out.conllu"
    out.write_text(text)
    doc = Document(str(out))
    got = sorted((e.eid, m.span) for e in doc.coref_entities for m in e.mentions)
    assert got == [("e3", "1-2"), ("e3", "2"), ("e7", "1-4"), ("e7", "3-4"), ("e9", "3")]
    # and our own reader agrees
    _, back = read_conllu(out)
    assert sorted(zip(back["entity"], back["start"], back["end"], strict=True)) == [
        ("e3", 1, 2), ("e3", 2, 2), ("e7", 1, 4), ("e7", 3, 4), ("e9", 3, 3)]


# -- what a reader must refuse rather than half-read ---------------------------------------
@pytest.mark.parametrize("body, message, line", [
    # two Entity= items: the second mention would be dropped
    (tok(1, "a", 0, "Entity=(1-person-new-s-cf1-1-coref)|Entity=(2-object-new-s-cf1-1-coref)")
     + "\n", "2 Entity= items in the MISC column", 3),
    (tok(1, "a", 0) + tok(2, "b", 1, "SpaceAfter=No|Entity=(1-p-new-s-cf1-1-c)|Gloss=x|"
                                     "Entity=1)") + "\n", "2 Entity= items", 4),
    # a HEAD that is the token itself, or a chain of HEADs that comes back
    (tok(1, "a", 1) + "\n", "HEAD 1 is the token itself", 3),
    (tok(1, "a", 0) + tok(2, "b", 2) + "\n", "HEAD 2 is the token itself", 4),
    (tok(1, "a", 2) + tok(2, "b", 1) + "\n", "tokens 1 -> 2 -> 1 form a cycle", 3),
    (tok(1, "a", 0) + tok(2, "b", 4) + tok(3, "c", 2) + tok(4, "d", 3) + "\n",
     "tokens 2 -> 4 -> 3 -> 2 form a cycle", 4),
])
def test_two_entity_items_and_heads_that_are_no_tree_name_file_and_line(tmp_path, body,
                                                                          message, line):
    path = write(tmp_path, body)
    with pytest.raises(InputError, match=re.escape(message)) as err:
        read_conllu(path)
    assert (err.value.path, err.value.line) == (str(path), line)


def test_unknown_heads_and_several_roots_are_still_read(tmp_path):
    tokens, _ = read_conllu(write(tmp_path, tok(1, "a", "_") + tok(2, "b", 0) + tok(3, "c", 0)
                                  + "\n"))
    assert tokens["head"].tolist() == [-1, 0, 0]


@pytest.mark.parametrize("text", ["", "\n\n", "# sent_id = 1\n# text = nothing\n\n",
                                  "# global.Entity = GRP-etype\n"])
def test_a_file_without_a_token_line_is_refused(tmp_path, text):
    path = write_text(tmp_path / "empty.conllu", text)
    with pytest.raises(InputError, match="no token line in the file") as err:
        read_conllu(path)
    assert err.value.path == str(path)
    with pytest.raises(InputError, match="no token line"):
        read_conllu_files([path])


@pytest.mark.parametrize("text, doc, line", [
    ("# newdoc id = a\n# newdoc id = b\n" + tok(1, "x", 0) + "\n", "a", 1),
    ("# newdoc id = a\n" + tok(1, "x", 0) + "\n# newdoc id = b\n# newpar\n", "b", 4),
    ("# newdoc id = a\n" + tok(1, "x", 0) + "\n# newdoc id = b\n", "b", 4),
])
def test_a_document_without_a_sentence_is_refused_at_its_newdoc_line(tmp_path, text, doc, line):
    path = write_text(tmp_path / "docs.conllu", text)
    with pytest.raises(InputError, match=f"document '{doc}' has no sentence") as err:
        read_conllu(path)
    assert err.value.line == line
