"""NP-pair features, pair windows and partial labels on a hand-made document."""

import itertools

import numpy as np
import pandas as pd
import pytest

from scarce.algorithms.strip.features import (
    build_pairs,
    make_pairs,
    pair_features,
    pair_labels,
    source_mask,
)
from scarce.tasks.readers.conllu import read_conllu

HEADER = ("# newdoc id = t\n"
          "# global.Entity = GRP-etype-infstat-salience-centering-minspan-link-identity\n")


def tok(i, form, upos, head, deprel, misc="_", feats="_", xpos="NN"):
    return f"{i}\t{form}\t{form.lower()}\t{upos}\t{xpos}\t{feats}\t{head}\t{deprel}\t_\t{misc}\n"


DOC = (
    "# newpar\n"
    # NASA , the National Aeronautics Space Administration , hired Ann .
    + tok(1, "NASA", "PROPN", 8, "nsubj", "Entity=(1-organization-new-s-cf1-1-coref)",
          "Number=Sing")
    + tok(2, ",", "PUNCT", 7, "punct")
    + tok(3, "the", "DET", 7, "det", "Entity=(1-organization-giv-s-cf1-5-appos")
    + tok(4, "National", "PROPN", 7, "compound")
    + tok(5, "Aeronautics", "PROPN", 7, "compound")
    + tok(6, "Space", "PROPN", 7, "compound")
    + tok(7, "Administration", "PROPN", 1, "appos", "Entity=1)", "Number=Sing")
    + tok(8, "hired", "VERB", 0, "root")
    + tok(9, "Ann", "PROPN", 8, "obj", "Entity=(2-person-new-s-cf1-1-coref)", "Number=Sing")
    + "\n# newpar\n"
    # She is the director .
    + tok(1, "She", "PRON", 4, "nsubj", "Entity=(2-person-giv-s-cf1-1-coref)", "Number=Sing")
    + tok(2, "is", "AUX", 4, "cop")
    + tok(3, "the", "DET", 4, "det", "Entity=(2-person-giv-s-cf1-2-pred")
    + tok(4, "director", "NOUN", 0, "root", "Entity=2)", "Number=Sing")
    + "\n"
    # They said she left .
    + tok(1, "They", "PRON", 2, "nsubj", "Entity=(3-person-new-s-cf1-1-coref)", "Number=Plur")
    + tok(2, "said", "VERB", 0, "root")
    + tok(3, "she", "PRON", 4, "nsubj", "Entity=(2-person-giv-s-cf1-1-coref)", "Number=Sing")
    + tok(4, "left", "VERB", 2, "ccomp")
    + "\n"
)


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    path = tmp_path_factory.mktemp("f") / "t.conllu"
    path.write_text(HEADER + DOC, encoding="utf-8")
    return read_conllu(path)


def feature_of(doc, i, j):
    tokens, mentions = doc
    pairs = pd.DataFrame({"doc": ["t"], "mention_i": [i], "mention_j": [j]})
    return pair_features(tokens, mentions, pairs).iloc[0]


def test_mentions_in_order(doc):
    _, m = doc
    # 0 NASA, 1 the N.A.S.A., 2 Ann, 3 She, 4 the director, 5 They, 6 she
    assert m["entity"].tolist() == ["1", "1", "2", "2", "2", "3", "2"]


def test_alias_appositive_and_proper_names(doc):
    f = feature_of(doc, 0, 1)
    assert f["alias"] and f["appositive"] and f["both_proper_nouns"]
    assert f["definite_2"] and not f["soon_str"]
    assert f["sent_distance"] == 0 and f["mention_distance"] == 1


def test_predicate_nominal_pronouns_and_agreement(doc):
    f = feature_of(doc, 3, 4)
    assert f["prednom"] and f["pronoun_1"] and not f["pronoun_2"] and f["definite_2"]
    assert f["subject_1"] and f["number"] == "C" and f["gender"] == "NA"
    g = feature_of(doc, 3, 6)  # She ... she
    assert g["pro_str"] and g["soon_str"] and g["gender"] == "C" and g["animacy"] == "C"
    h = feature_of(doc, 5, 6)  # They ... she
    assert h["number"] == "I" and not h["pro_str"]
    assert feature_of(doc, 2, 3)["paragraph_distance"] == 1


def test_no_leaking_columns(doc):
    tokens, mentions = doc
    _, X, _ = build_pairs(tokens, mentions)
    assert not {"etype", "entity", "link", "identity", "infstat"} & set(X.columns)
    assert X.shape[1] >= 30


def test_pair_window_equals_brute_force(doc):
    _, mentions = doc
    for md, sd in [(None, None), (2, None), (None, 0), (3, 1)]:
        got = make_pairs(mentions, max_mention_distance=md, max_sentence_distance=sd)
        sent = dict(zip(mentions["mention"], mentions["sent"], strict=True))
        want = {(i, j) for i, j in itertools.combinations(sorted(sent), 2)
                if (md is None or j - i <= md) and (sd is None or sent[j] - sent[i] <= sd)}
        assert set(zip(got["mention_i"], got["mention_j"], strict=True)) == want
        assert len(got) == len(want)


def test_sources_and_partial_labels(doc):
    _, mentions = doc
    src = source_mask(mentions, etypes=("organization",))
    np.testing.assert_array_equal(src, mentions["etype"] == "organization")
    pairs = make_pairs(mentions)
    y = pair_labels(mentions, pairs, src)
    both = src[pairs["mention_i"]] & src[pairs["mention_j"]]
    assert (y[~both] == -1).all() and (y[both] == 1).all()
    y_all = pair_labels(mentions, pairs)
    ent = mentions["entity"].to_numpy()
    np.testing.assert_array_equal(y_all, ent[pairs["mention_i"]] == ent[pairs["mention_j"]])


def test_fraction_of_entities_is_seeded_and_entity_wise(doc):
    _, mentions = doc
    a = source_mask(mentions, fraction=0.5, random_state=1)
    b = source_mask(mentions, fraction=0.5, random_state=1)
    np.testing.assert_array_equal(a, b)
    per_entity = pd.Series(a).groupby(mentions["entity"].to_numpy()).nunique()
    assert (per_entity == 1).all()
    with pytest.raises(ValueError, match="fraction"):
        source_mask(mentions, fraction=1.5)
