"""Multi-label metrics against scikit-learn, naive loops and hand-worked examples."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import hamming_loss as sk_hamming_loss
from sklearn.metrics import ndcg_score, roc_auc_score

from scarce.algorithms.metrics.multilabel import (
    average_instance_auc,
    hamming_loss,
    instance_auc,
    inverse_propensity,
    multilabel_scores,
    multilabel_sums,
    ndcg_at_k,
    precision_at_k,
    psprecision_at_k,
    scores_from_sums,
)


def random_case(seed, n, n_labels, tie_levels=None):
    rng = np.random.default_rng(seed)
    Y = (rng.random((n, n_labels)) < 0.3).astype(np.int8)
    if tie_levels:
        scores = rng.integers(0, tie_levels, (n, n_labels)).astype(float)
    else:
        scores = rng.standard_normal((n, n_labels))
    return Y, scores


def naive_precision(Y, ranked, k):
    return np.mean([len(set(ranked[i, :k]) & set(np.flatnonzero(Y[i]))) / k
                    for i in range(Y.shape[0])])


def test_precision_at_k_by_hand():
    Y = np.array([[1, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]])
    ranked = np.array([[2, 1, 0], [0, 1, 2], [3, 2, 1]])
    p = precision_at_k(Y, ranked, ks=(1, 2, 3))
    assert p[1] == pytest.approx((1 + 0 + 0) / 3)
    assert p[2] == pytest.approx((0.5 + 0 + 0) / 3)
    assert p[3] == pytest.approx((2 / 3 + 0 + 0) / 3)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 12), n_labels=st.integers(5, 15))
def test_precision_at_k_equals_naive_loop(seed, n, n_labels):
    Y, scores = random_case(seed, n, n_labels)
    ranked = np.argsort(-scores, axis=1)[:, :5]
    fast = precision_at_k(sp.csr_matrix(Y), ranked)
    for k in (1, 3, 5):
        assert fast[k] == pytest.approx(naive_precision(Y, ranked, k))
    per_row = precision_at_k(Y, ranked, ks=(3,), average=False)[3]
    assert per_row.shape == (n,) and per_row.mean() == pytest.approx(fast[3])


def test_precision_at_k_rejects_bad_shapes():
    Y = np.eye(3)
    with pytest.raises(ValueError, match="each k"):
        precision_at_k(Y, np.zeros((3, 2), dtype=int), ks=(1, 3))
    with pytest.raises(ValueError, match="outside"):
        precision_at_k(Y, np.full((3, 1), 7), ks=(1,))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 10), n_labels=st.integers(1, 10))
def test_hamming_loss_equals_sklearn(seed, n, n_labels):
    Y, scores = random_case(seed, n, n_labels)
    pred = (scores > 0.5).astype(np.int8)
    expected = sk_hamming_loss(Y, pred)
    assert hamming_loss(Y, pred) == pytest.approx(expected)
    assert hamming_loss(sp.csr_matrix(Y), sp.csr_matrix(pred)) == pytest.approx(expected)
    assert hamming_loss(Y, pred, average=False).mean() == pytest.approx(expected)


def test_hamming_loss_by_hand():
    assert hamming_loss([[1, 0, 1], [0, 0, 0]], [[1, 1, 0], [0, 0, 0]]) == pytest.approx(2 / 6)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 10), n_labels=st.integers(2, 12),
       ties=st.sampled_from([None, 2, 3]))
def test_instance_auc_equals_sklearn_per_row(seed, n, n_labels, ties):
    Y, scores = random_case(seed, n, n_labels, ties)
    auc = instance_auc(sp.csr_matrix(Y), scores)
    expected = []
    for i in range(n):
        if 0 < Y[i].sum() < n_labels:
            assert auc[i] == pytest.approx(roc_auc_score(Y[i], scores[i]))
            expected.append(auc[i])
        else:
            assert np.isnan(auc[i])  # skipped: all or no positives
    avg = average_instance_auc(Y, scores)
    if expected:
        assert avg == pytest.approx(np.mean(expected))
    else:
        assert np.isnan(avg)


def test_instance_auc_by_hand():
    Y = np.array([[1, 0, 0, 1], [1, 1, 1, 1]])
    scores = np.array([[0.9, 0.8, 0.1, 0.5], [1, 2, 3, 4]])
    # Row 0: positives 0.9 and 0.5 against negatives 0.8, 0.1: 3 of 4 pairs correct.
    auc = instance_auc(Y, scores)
    assert auc[0] == pytest.approx(0.75) and np.isnan(auc[1])
    assert average_instance_auc(Y, scores) == pytest.approx(0.75)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 15), n_labels=st.integers(2, 9),
       batch_size=st.integers(1, 6))
def test_multilabel_scores_in_batches_equal_the_separate_metrics(seed, n, n_labels,
                                                                 batch_size):
    Y, scores = random_case(seed, n, n_labels)
    out = multilabel_scores(sp.csr_matrix(Y), lambda s, e: scores[s:e], threshold=0.2,
                            batch_size=batch_size)
    for k in (1, 3, 5):
        # Naive P@k over a full stable ranking; divisor k even when k > L.
        ranked = np.argsort(-scores, axis=1, kind="stable")
        assert out[f"precision@{k}"] == pytest.approx(naive_precision(Y, ranked, k))
    assert out["hamming_loss"] == pytest.approx(sk_hamming_loss(Y, scores > 0.2))
    valid = [i for i in range(n) if 0 < Y[i].sum() < n_labels]
    if valid:
        assert out["instance_auc"] == pytest.approx(
            np.mean([roc_auc_score(Y[i], scores[i]) for i in valid]))
    else:
        assert np.isnan(out["instance_auc"])


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40), n_labels=st.integers(2, 9),
       cuts=st.lists(st.integers(0, 40), max_size=4))
def test_sums_of_any_row_blocks_give_the_same_precision_and_hamming_to_the_bit(
        seed, n, n_labels, cuts):
    """Row blocks as workers hold them: P@k and the Hamming loss are ratios of integer counts,
    equal bit for bit to the one-pass metrics; the AUC equal to rounding."""
    Y, scores = random_case(seed, n, n_labels)
    whole = multilabel_scores(sp.csr_matrix(Y), lambda s, e: scores[s:e], threshold=0.2,
                              batch_size=7)
    bounds = sorted({0, n, *(c for c in cuts if c < n)})
    parts = [multilabel_sums(sp.csr_matrix(Y[a:b]), scores[a:b], threshold=0.2)
             for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    blocks = scores_from_sums(parts)
    for k in (1, 3, 5):
        assert blocks[f"precision@{k}"] == whole[f"precision@{k}"]
        hits = sum(len(set(np.argsort(-scores[i], kind="stable")[:min(k, n_labels)])
                       & set(np.flatnonzero(Y[i]))) for i in range(n))
        assert sum(p[f"hits@{k}"] for p in parts) == hits
    assert blocks["hamming_loss"] == whole["hamming_loss"]
    assert sum(p["wrong"] for p in parts) == int(((scores > 0.2) != (Y != 0)).sum())
    np.testing.assert_allclose(blocks["instance_auc"], whole["instance_auc"], rtol=1e-12)


def test_batches_over_many_labels_hold_at_most_the_scores_per_batch(monkeypatch):
    """With ``batch_size x L`` over ``SCORES_PER_BATCH`` (here 20 scores, L = 7), the metrics
    and the model's batched predictions score 2 rows at a time (at least one with L > 20)
    and give what one batch of every row gives."""
    import scarce.algorithms.memory as memory
    from scarce.algorithms.leml import LEML

    Y, scores = random_case(3, 9, 7)
    whole = multilabel_scores(sp.csr_matrix(Y), lambda s, e: scores[s:e], threshold=0.2,
                              batch_size=100)
    asked = []

    def score_rows(s, e):
        asked.append(e - s)
        return scores[s:e]

    monkeypatch.setattr(memory, "SCORES_PER_BATCH", 20)
    assert memory.rows_per_batch(100, 7) == 2 and memory.rows_per_batch(100, 50) == 1
    out = multilabel_scores(sp.csr_matrix(Y), score_rows, threshold=0.2, batch_size=100)
    assert asked == [2, 2, 2, 2, 1]
    for key in ("precision@1", "precision@3", "precision@5", "hamming_loss"):
        assert out[key] == whole[key]
    assert out["instance_auc"] == pytest.approx(whole["instance_auc"], abs=1e-12)
    rng = np.random.default_rng(0)
    model = LEML(fit_intercept=False).set_factors(rng.standard_normal((4, 3)),
                                                  rng.standard_normal((7, 3)))
    X = rng.standard_normal((9, 4))
    np.testing.assert_array_equal(model.predict_top_k(X, 3, batch_size=100),
                                  np.argsort(-(X @ model.W_ @ model.H_.T), axis=1)[:, :3])
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        memory.rows_per_batch(0, 7)


def ranked(scores, K):
    return np.argsort(-scores, axis=1, kind="stable")[:, :K]


@pytest.mark.parametrize(("seed", "n", "n_labels"), [(0, 40, 12), (1, 7, 30), (2, 25, 5)])
def test_ndcg_at_k_equals_sklearn(seed, n, n_labels):
    Y, scores = random_case(seed, n, n_labels)
    Y[0] = 0  # a row without labels: 0 in both
    got = ndcg_at_k(sp.csr_matrix(Y), ranked(scores, 5), ks=(1, 3, 5))
    for k in (1, 3, 5):
        assert got[k] == pytest.approx(ndcg_score(Y, scores, k=k), abs=1e-12)


def test_ndcg_at_k_by_hand():
    # row 0: true {1, 3}, ranked 3, 0, 1: DCG@3 = 1 + 1/log2(4) = 1.5,
    # ideal with 2 true labels = 1 + 1/log2(3); row 1: no true label, 0
    Y = np.array([[0, 1, 0, 1], [0, 0, 0, 0]])
    top = np.array([[3, 0, 1], [0, 1, 2]])
    got = ndcg_at_k(Y, top, ks=(1, 3), average=False)
    np.testing.assert_allclose(got[1], [1.0, 0.0])
    np.testing.assert_allclose(got[3], [1.5 / (1 + 1 / np.log2(3)), 0.0])


def test_inverse_propensity_by_hand():
    # N = 4 rows; label 0 in 3 rows, label 1 in 1, label 2 in none
    Y = np.array([[1, 0, 0], [1, 1, 0], [1, 0, 0], [0, 0, 0]])
    A, B = 0.55, 1.5
    C = (np.log(4) - 1) * (B + 1) ** A
    expected = [1 + C * (3 + B) ** -A, 1 + C * (1 + B) ** -A, 1 + C * B ** -A]
    np.testing.assert_allclose(inverse_propensity(sp.csr_matrix(Y)), expected, rtol=1e-15)
    assert inverse_propensity(Y)[0] < inverse_propensity(Y)[1] < inverse_propensity(Y)[2]


def naive_psprecision(Y, top, w, k):
    gain = sum(w[j] for i in range(Y.shape[0]) for j in top[i, :k] if Y[i, j])
    best = sum(sum(sorted((w[j] for j in np.flatnonzero(Y[i])), reverse=True)[:k])
               for i in range(Y.shape[0]))
    return gain / best


@pytest.mark.parametrize(("seed", "n", "n_labels"), [(0, 40, 12), (1, 7, 30), (2, 25, 5)])
def test_psprecision_at_k_equals_naive_loop(seed, n, n_labels):
    Y, scores = random_case(seed, n, n_labels)
    w = inverse_propensity(random_case(seed + 10, 60, n_labels)[0])
    top = ranked(scores, 5)
    got = psprecision_at_k(sp.csr_matrix(Y), top, w, ks=(1, 3, 5))
    for k in (1, 3, 5):
        assert got[k] == pytest.approx(naive_psprecision(Y, top, w, k), rel=1e-12)


def test_psprecision_is_one_at_best_and_with_equal_weights_is_precision_over_its_best():
    Y, scores = random_case(3, 30, 10)
    w = inverse_propensity(random_case(4, 50, 10)[0])
    # the best ranking: true labels first, the largest weight first
    best = np.argsort(-(Y * (w + 10.0)), axis=1, kind="stable")[:, :5]
    assert psprecision_at_k(Y, best, w, ks=(1, 3, 5)) == pytest.approx({1: 1, 3: 1, 5: 1})
    top = ranked(scores, 5)
    ones = np.ones(10)
    for k in (1, 3, 5):
        ceiling = np.minimum(Y.sum(axis=1), k).mean() / k  # the best precision@k possible
        assert psprecision_at_k(Y, top, ones, ks=(k,))[k] == pytest.approx(
            precision_at_k(Y, top, ks=(k,))[k] / ceiling, rel=1e-12)


def test_psprecision_by_hand_as_pyxclib_defines_it():
    """pyxclib's psprecision: the mean over rows of the weighted hits of the top k, over the
    same of the best ranking (the true labels by weight); here 2 rows, weights 1, 2, 4."""
    Y = np.array([[1, 0, 1], [0, 1, 0]])
    top = np.array([[0, 2, 1], [0, 1, 2]])
    w = np.array([1.0, 2.0, 4.0])
    # k = 1: hits 1 (row 0's label 0) + 0 over the best 4 + 2; k = 2: 1 + 4 + 2 over 4 + 1 + 2
    assert psprecision_at_k(Y, top, w, ks=(1, 2)) == pytest.approx({1: 1 / 6, 2: 1.0})


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 30), n_labels=st.integers(2, 9),
       batch_size=st.integers(1, 6), cuts=st.lists(st.integers(0, 30), max_size=4))
def test_ndcg_and_psp_in_batches_and_row_blocks_equal_the_ranking_metrics(
        seed, n, n_labels, batch_size, cuts):
    """multilabel_scores's nDCG@k and PSP@k (a stable full ranking, cut to L labels when k > L)
    equal ndcg_at_k and the naive PSP loop, in any batches or row blocks to rounding."""
    Y, scores = random_case(seed, n, n_labels)
    w = inverse_propensity(random_case(seed + 1, 20, n_labels)[0])
    out = multilabel_scores(sp.csr_matrix(Y), lambda s, e: scores[s:e], threshold=0.2,
                            batch_size=batch_size, inv_propensity=w)
    full = np.argsort(-scores, axis=1, kind="stable")
    for k in (1, 3, 5):
        cut = min(k, n_labels)
        assert out[f"ndcg@{k}"] == pytest.approx(ndcg_at_k(Y, full, ks=(cut,))[cut], abs=1e-12)
        expected = (naive_psprecision(Y, full, w, cut) if Y.any() else 0.0)
        assert out[f"psp@{k}"] == pytest.approx(expected, abs=1e-12)
    bounds = sorted({0, n, *(c for c in cuts if c < n)})
    parts = [multilabel_sums(sp.csr_matrix(Y[a:b]), scores[a:b], threshold=0.2,
                             inv_propensity=w)
             for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    blocks = scores_from_sums(parts)
    for key in (f"{m}@{k}" for m in ("ndcg", "psp") for k in (1, 3, 5)):
        assert blocks[key] == pytest.approx(out[key], abs=1e-12)
    assert not any(key.startswith("psp") for key in multilabel_scores(
        sp.csr_matrix(Y), lambda s, e: scores[s:e], threshold=0.2))


def test_ranking_metrics_refuse_bad_shapes():
    Y = np.eye(3, dtype=int)
    with pytest.raises(ValueError, match="each k must be in"):
        ndcg_at_k(Y, np.zeros((3, 2), dtype=int), ks=(3,))
    with pytest.raises(ValueError, match=r"inv_propensity must have shape \(3,\)"):
        psprecision_at_k(Y, np.zeros((3, 1), dtype=int), np.ones(4), ks=(1,))
    with pytest.raises(ValueError, match="at least 2 training rows"):
        inverse_propensity(np.ones((1, 3)))
