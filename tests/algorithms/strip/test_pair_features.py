"""PairFeatures and StRipClassifier: StRip as a scikit-learn pipeline.

The transform is checked by hand on a three-mention document and against the flow's own
``preprocess`` step on GUM documents; the pipeline's rules against ``StRip.fit`` called with
the five arrays, and its decisions against the rules fired on the test pairs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.pipeline import make_pipeline

from scarce.algorithms.strip.features import PAIR_KEYS, build_pairs, source_mask
from scarce.algorithms.strip.pipeline import PairFeatures, StRipClassifier
from scarce.algorithms.strip.ripper import StRip, rules_fire
from scarce.tasks import strip as tasks_strip
from scarce.tasks.readers.conllu import read_conllu

GUM = Path(__file__).resolve().parents[3] / "data" / "coref" / "gum"
TRAIN = ["GUM_news_stampede", "GUM_news_worship"]
TEST = "GUM_news_crane"

HEADER = ("# newdoc id = t\n"
          "# global.Entity = GRP-etype-infstat-salience-centering-minspan-link-identity\n")


def tok(i, form, upos, head, deprel, misc="_"):
    return f"{i}\t{form}\t{form.lower()}\t{upos}\tNN\t_\t{head}\t{deprel}\t_\t{misc}\n"


# John saw Mary . / He left .
DOC = ("# newpar\n"
       + tok(1, "John", "PROPN", 2, "nsubj", "Entity=(1-person-new-s-cf1-1-coref)")
       + tok(2, "saw", "VERB", 0, "root")
       + tok(3, "Mary", "PROPN", 2, "obj", "Entity=(2-person-new-s-cf1-1-coref)")
       + tok(4, ".", "PUNCT", 2, "punct")
       + "\n"
       + tok(1, "He", "PRON", 2, "nsubj", "Entity=(1-person-giv-s-cf1-1-coref)")
       + tok(2, "left", "VERB", 0, "root")
       + tok(3, "Paris", "PROPN", 2, "obj", "Entity=(3-place-new-s-cf1-1-coref)")
       + "\n")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("pf") / "t.conllu"
    path.write_text(HEADER + DOC, encoding="utf-8")
    return read_conllu(path)


def test_a_hand_worked_document_gives_its_pairs_labels_and_features(small):
    table = PairFeatures().fit_transform([small])
    assert table.columns[:4].tolist() == PAIR_KEYS
    # mentions John 0, Mary 1, He 2, Paris 3; antecedent first, ordered by anaphor
    got = list(zip(table["mention_i"], table["mention_j"], strict=True))
    assert got == [(0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3)]
    # sources: the person mentions; John and He are one entity; Paris is no source
    assert table["label"].tolist() == [0, 1, 0, -1, -1, -1]
    assert table["pronoun_2"].tolist() == [False, True, True, False, False, False]
    assert table["sent_distance"].tolist() == [0, 1, 1, 1, 1, 0]
    assert table["mention_distance"].tolist() == [1, 2, 1, 3, 2, 1]
    # window 1: adjacent mentions only; every mention a source with etypes including place
    near = PairFeatures(window=1, etypes=("person", "place")).fit_transform(small)
    assert list(zip(near["mention_i"], near["mention_j"], near["label"], strict=True)) == [
        (0, 1, 0), (1, 2, 0), (2, 3, 0)]


@pytest.mark.parametrize("sources", [
    dict(source_kind="etype", etypes=["person"]),
    dict(source_kind="fraction", etypes=["person", "organization"], fraction=0.4, seed=3),
])
def test_the_table_is_the_flows_preprocess_output(sources):
    path = GUM / f"{TEST}.conllu.gz"
    prep = tasks_strip.preprocess(path=path, window=7, max_sentence_distance=3,
                                  **{"fraction": None, "seed": None, **sources})
    est = PairFeatures(window=7, max_sentence_distance=3, source_kind=sources["source_kind"],
                       etypes=tuple(sources["etypes"]), fraction=sources.get("fraction", 0.5),
                       random_state=sources.get("seed"))
    got = est.fit_transform([read_conllu(path)])
    pd.testing.assert_frame_equal(got, prep["pairs"], check_exact=True)


def test_several_files_are_stacked_in_order():
    docs = [read_conllu(GUM / f"{d}.conllu.gz") for d in TRAIN]
    both = PairFeatures(window=5).fit_transform(docs)
    one = [PairFeatures(window=5).fit_transform([d]) for d in docs]
    pd.testing.assert_frame_equal(both, pd.concat(one, ignore_index=True))
    assert both["doc"].unique().tolist() == TRAIN


def test_the_pipeline_learns_the_rules_of_strip_fit_and_predicts_their_decisions():
    train = [read_conllu(GUM / f"{d}.conllu.gz") for d in TRAIN]
    test = [read_conllu(GUM / f"{TEST}.conllu.gz")]
    pipe = make_pipeline(PairFeatures(window=10),
                         StRipClassifier.from_variant("strip-partial", k_optimize=1,
                                                      random_state=0))
    assert pipe.fit(train) is pipe
    # independent: the reader's frames, build_pairs and StRip.fit with five arrays
    tokens = pd.concat([t for t, _ in train], ignore_index=True)
    mentions = pd.concat([m for _, m in train], ignore_index=True)
    pairs, X, y = build_pairs(tokens, mentions, max_mention_distance=10,
                              sources=source_mask(mentions))
    direct = StRip.from_variant("strip-partial", k_optimize=1, random_state=0).fit(
        X, y, pairs["doc"], pairs["mention_i"], pairs["mention_j"])
    learnt = pipe[-1]
    pd.testing.assert_frame_equal(learnt.rules_, direct.rules_)
    assert learnt.n_pairs_ == direct.n_pairs_ and len(learnt.rules_) > 0
    # predict: the rules fired on the test document's pairs
    t_tokens, t_mentions = test[0]
    t_pairs, t_X, _ = build_pairs(t_tokens, t_mentions, max_mention_distance=10)
    decisions = pipe.predict(test)
    np.testing.assert_array_equal(decisions, rules_fire(direct.rules_, t_X).astype(np.int64))
    assert 0 < decisions.sum() < len(decisions)
    chains = learnt.cluster(pipe[0].transform(test))
    want = direct.cluster(t_X, t_pairs["doc"], t_pairs["mention_i"], t_pairs["mention_j"])
    pd.testing.assert_frame_equal(chains, want)


def test_parameters_clone_and_the_flows_defaults():
    from scarce.flows.strip import StripConfig

    est = PairFeatures(window=3, etypes=("person",))
    assert clone(est).get_params() == est.get_params()
    assert StRipClassifier().get_params() == StRip().get_params()
    config = StripConfig()
    defaults = PairFeatures().get_params()
    assert defaults == {"window": config.window,
                        "max_sentence_distance": config.max_sentence_distance,
                        "source_kind": config.sources.kind, "etypes": tuple(config.sources.etypes),
                        "fraction": config.sources.fraction, "random_state": None}


@pytest.mark.parametrize("bad, message", [
    (dict(source_kind="all"), "source_kind must be one of"),
    (dict(window=0), "window must be >= 1"),
    (dict(source_kind="fraction", fraction=0), "fraction must be in"),
])
def test_bad_parameters_are_refused_in_fit(small, bad, message):
    est = PairFeatures(**bad)  # stored unchanged
    with pytest.raises(ValueError, match=message):
        est.fit([small])


def test_what_is_not_a_document_or_a_pair_table_is_refused(small):
    with pytest.raises(ValueError, match="expected a \\(tokens, mentions\\) pair"):
        PairFeatures().fit_transform([small[0]])
    with pytest.raises(ValueError, match="pair table"):
        StRipClassifier().fit(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="lacks columns"):
        StRipClassifier().fit(pd.DataFrame({"a": [1]}), [1])
