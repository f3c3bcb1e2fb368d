"""Coreference metrics: hand-worked examples and a naive reference implementation."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarce.algorithms.metrics.coref import b_cubed, ceaf_e, coref_scores, muc, pairwise


def clusters(labels, mask=None, groups=None):
    labels = list(labels)
    mask = [True] * len(labels) if mask is None else list(mask)
    groups = [0] * len(labels) if groups is None else list(groups)
    out = {}
    for m, (lab, keep, g) in enumerate(zip(labels, mask, groups, strict=True)):
        if keep:
            out.setdefault((g, lab), set()).add(m)
    return list(out.values())


def f1(p, r):
    return 2 * p * r / (p + r) if p + r else 0.0


def naive_b3(K, R):
    ments = set().union(*K)
    kof = {m: k for k in K for m in k}
    rof = {m: r for r in R for m in r}
    p = sum(len(kof[m] & rof[m]) / len(rof[m]) for m in ments) / len(ments)
    r = sum(len(kof[m] & rof[m]) / len(kof[m]) for m in ments) / len(ments)
    return p, r, f1(p, r)


def naive_muc(K, R):
    def score(A, B):
        num = sum(len(a) - len([b for b in B if a & b]) for a in A)
        den = sum(len(a) - 1 for a in A)
        return num / den if den else 0.0
    r, p = score(K, R), score(R, K)
    return p, r, f1(p, r)


def naive_ceaf_e(K, R):
    best = 0.0
    small, big, swap = (K, R, False) if len(K) <= len(R) else (R, K, True)
    for perm in itertools.permutations(range(len(big)), len(small)):
        s = sum(2 * len(a & big[j]) / (len(a) + len(big[j])) for a, j in zip(small, perm,
                                                                             strict=True))
        best = max(best, s)
    p, r = best / len(R), best / len(K)
    return p, r, f1(p, r)


def naive_pairwise(K, R):
    def links(C):
        return {frozenset(x) for c in C for x in itertools.combinations(sorted(c), 2)}
    kl, rl = links(K), links(R)
    p = len(kl & rl) / len(rl) if rl else 0.0
    r = len(kl & rl) / len(kl) if kl else 0.0
    return p, r, f1(p, r)


def test_hand_worked_example():
    # key {a,b,c} {d,e}; response {a,b} {c,d,e}
    key = np.array([1, 1, 1, 2, 2])
    resp = np.array([7, 7, 8, 8, 8])
    # B3: P = (1 + 1 + 1/3 + 2/3 + 2/3)/5 = 11/15, R = (2/3 + 2/3 + 1/3 + 1 + 1)/5 = 11/15
    assert b_cubed(key, resp) == pytest.approx((11 / 15, 11 / 15, 11 / 15))
    # MUC: R = ((3-2) + (2-1)) / (2 + 1) = 2/3; P = ((2-1) + (3-2)) / (1 + 2) = 2/3
    assert muc(key, resp) == pytest.approx((2 / 3, 2 / 3, 2 / 3))
    # CEAF-e: phi4({a,b,c},{a,b}) = 4/5, phi4({d,e},{c,d,e}) = 4/5 -> 1.6 / 2 each
    assert ceaf_e(key, resp) == pytest.approx((0.8, 0.8, 0.8))
    # pairwise: key links ab ac bc de (4), response ab cd ce de (4), common ab de (2)
    assert pairwise(key, resp) == pytest.approx((0.5, 0.5, 0.5))


def test_mask_removes_mentions_before_scoring():
    key = np.array([1, 1, 2, 2])
    resp = np.array([5, 6, 6, 5])
    mask = np.array([True, True, False, False])
    # on {0, 1}: key one cluster, response two singletons
    assert pairwise(key, resp, mask) == pytest.approx((0.0, 0.0, 0.0))
    assert b_cubed(key, resp, mask) == pytest.approx((1.0, 0.5, 2 / 3))


def test_equal_labels_in_two_documents_are_two_clusters():
    key = np.array([1, 1, 1, 1])
    resp = np.array([3, 3, 3, 3])
    groups = np.array(["d1", "d1", "d2", "d2"])
    assert pairwise(key, resp, groups=groups) == pytest.approx((1.0, 1.0, 1.0))
    assert coref_scores(key, resp, groups=groups).loc["ceaf_e", "f"] == pytest.approx(1.0)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.booleans(),
                          st.integers(0, 1)), min_size=1, max_size=9))
@settings(max_examples=150, deadline=None)
def test_metrics_equal_naive_reference(rows):
    key = np.array([r[0] for r in rows])
    resp = np.array([r[1] for r in rows])
    mask = np.array([r[2] for r in rows])
    groups = np.array([r[3] for r in rows])
    if not mask.any():
        mask[0] = True
    K = clusters(key, mask, groups)
    R = clusters(resp, mask, groups)
    for fast, slow in ((b_cubed, naive_b3), (muc, naive_muc), (ceaf_e, naive_ceaf_e),
                       (pairwise, naive_pairwise)):
        assert fast(key, resp, mask, groups) == pytest.approx(slow(K, R)), fast.__name__


def test_identical_clusterings_score_one():
    key = np.array([0, 0, 1, 2, 2, 2])
    table = coref_scores(key, key + 10)
    np.testing.assert_allclose(table[["p", "r", "f"]].to_numpy(), 1.0)


def test_length_mismatch_is_rejected():
    with pytest.raises(ValueError, match="one length"):
        b_cubed([1, 2], [1])


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=25))
@settings(max_examples=150, deadline=None)
def test_muc_b3_ceaf_e_equal_the_scorch_package(labels):
    # scorch (Grobol's reference-checked scorer) is an independent implementation over lists
    # of sets; ours works on label arrays through a sparse contingency table
    from scorch import scores as scorch

    key = np.array([k for k, _ in labels])
    response = np.array([r for _, r in labels])
    K, R = clusters(key), clusters(response)
    for ours, theirs in ((b_cubed, scorch.b_cubed), (ceaf_e, scorch.ceaf_e), (muc, scorch.muc)):
        p, r, f = ours(key, response)
        sr, sp, sf = theirs(K, R)
        if theirs is scorch.muc and (all(len(c) == 1 for c in K) or all(len(c) == 1 for c in R)):
            # scorch sets P, R and F to 0 when either side has only singletons (the reference
            # scorer's convention); ours has no links to count on that side: F is 0 in both
            assert f == sf == 0.0
            continue
        assert (p, r, f) == pytest.approx((sp, sr, sf), abs=1e-12), ours.__name__
