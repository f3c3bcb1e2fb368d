"""Closure coverage: fast paths against a brute-force transitive closure."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarce.algorithms.strip._kernels import nested_counts
from scarce.algorithms.strip.closure import PairGraph, closure_labels, covered_pairs


def brute_closure(n, edges):
    """Reachability by repeated squaring of a boolean matrix (Warshall)."""
    r = np.eye(n, dtype=bool)
    for a, b in edges:
        r[a, b] = r[b, a] = True
    for k in range(n):
        r |= r[:, [k]] & r[[k], :]
    return r


@st.composite
def pair_sets(draw, max_docs=3, max_mentions=7):
    docs = draw(st.integers(1, max_docs))
    rows = []
    for d in range(docs):
        m = draw(st.integers(2, max_mentions))
        cand = list(itertools.combinations(range(m), 2))
        chosen = draw(st.lists(st.sampled_from(cand), min_size=1, max_size=len(cand),
                               unique=True))
        rows += [(f"d{d}", i, j) for i, j in chosen]
    n = len(rows)
    positive = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    y = np.array(draw(st.lists(st.sampled_from([-1, 0, 1]), min_size=n, max_size=n)))
    return rows, positive, y


def brute_joined(rows, positive, d, i, j):
    """Whether mentions ``i`` and ``j`` of document ``d`` are joined by the positive pairs."""
    nodes = sorted({x for dd, a, b in rows if dd == d for x in (a, b)})
    pos = {x: p for p, x in enumerate(nodes)}
    edges = [(pos[a], pos[b]) for (dd, a, b), p in zip(rows, positive, strict=True)
             if dd == d and p]
    return bool(brute_closure(len(nodes), edges)[pos[i], pos[j]])


def brute_covered(rows, positive):
    return np.array([brute_joined(rows, positive, d, i, j) for d, i, j in rows])


@given(pair_sets())
@settings(max_examples=60, deadline=None)
def test_covered_equals_brute_force_closure_within_documents(data):
    rows, positive, _ = data
    d, i, j = map(np.array, zip(*rows, strict=True))
    got = covered_pairs(d, i, j, positive, closure=True)
    np.testing.assert_array_equal(got, brute_covered(rows, positive))
    # plain coverage (RIPPER) is the positive mask itself
    np.testing.assert_array_equal(covered_pairs(d, i, j, positive, closure=False), positive)


@given(pair_sets())
@settings(max_examples=60, deadline=None)
def test_clusters_are_the_brute_force_chains_of_every_paired_mention(data):
    rows, positive, _ = data
    d, i, j = map(np.array, zip(*rows, strict=True))
    chains = PairGraph(d, i, j).clusters(positive)
    mentions = sorted({(dd, x) for dd, a, b in rows for x in (a, b)})
    assert sorted(zip(chains["doc"], chains["mention"], strict=True)) == mentions
    label = dict(zip(zip(chains["doc"], chains["mention"], strict=True), chains["cluster"],
                     strict=True))
    # two mentions share a chain iff the brute-force closure within their document joins them
    for (da, a), (db, b) in itertools.combinations(mentions, 2):
        joined = da == db and brute_joined(rows, positive, da, a, b)
        assert (label[(da, a)] == label[(db, b)]) == joined


def test_closure_never_crosses_documents():
    # same mention ids in two documents; linking 0-1 in d0 and 1-2 in d1 joins nothing across
    d = np.array(["d0", "d1", "d0"])
    i = np.array([0, 1, 0])
    j = np.array([1, 2, 2])
    got = covered_pairs(d, i, j, np.array([True, True, False]))
    np.testing.assert_array_equal(got, [True, True, False])


@given(st.integers(1, 12), st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)),
                                    max_size=30), st.data())
@settings(max_examples=80, deadline=None)
def test_compiled_nested_counts_equal_scipy_components(k, edges, draw):
    # table: every pair x < y of the k clusters with weights (1, 0.5); the count after a prefix
    # of edges is the weight of the pairs in one connected component of that prefix
    edges = [(a % k, b % k) for a, b in edges]
    a = np.array([e[0] for e in edges], dtype=np.int64)
    b = np.array([e[1] for e in edges], dtype=np.int64)
    rows, cols = np.triu_indices(k, 1)
    indptr = np.searchsorted(rows, np.arange(k + 1)).astype(np.int64)
    wp, wn = np.ones(rows.size), np.full(rows.size, 0.5)
    cuts = np.array(sorted(draw.draw(st.lists(st.integers(0, a.size), min_size=1, max_size=4))),
                    dtype=np.int64)
    parent = np.full(k, -1, dtype=np.int64)
    p, n = nested_counts(a, b, cuts, indptr, cols.astype(np.int64), wp, wn, parent,
                         np.empty(k, dtype=np.int64))
    assert (parent == -1).all()  # the scratch is reset for the next bag
    for t, cut in enumerate(cuts):
        lab = closure_labels(k, a[:cut], b[:cut])
        same = int(np.count_nonzero(lab[rows] == lab[cols]))
        assert (p[t], n[t]) == (same, 0.5 * same)


def brute_counts(rows, base, bag, y):
    """Newly covered labelled (pos, neg) when ``bag`` pairs join the base positives."""
    before = brute_covered(rows, base)
    after = brute_covered(rows, base | bag)
    new = after & ~before
    return float(np.sum(new & (y == 1))), float(np.sum(new & (y == 0)))


@given(pair_sets(), st.data())
@settings(max_examples=60, deadline=None)
def test_context_counts_equal_brute_force(data, draw):
    rows, base, y = data
    n = len(rows)
    d, i, j = map(np.array, zip(*rows, strict=True))
    graph = PairGraph(d, i, j, closure=True)
    ctx = graph.context(base, (y == 1).astype(float), (y == 0).astype(float))
    # one bag
    bag = np.array(draw.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    assert ctx.counts(np.flatnonzero(bag)) == brute_counts(rows, base, bag, y)
    # disjoint bags by value
    codes = np.array(draw.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    idx = np.arange(n)
    p, q = ctx.counts_by_value(idx, codes, 3)
    for v in range(3):
        assert (p[v], q[v]) == brute_counts(rows, base, codes == v, y)
    # nested bags by threshold, both directions
    vals = np.array(draw.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), float)
    thr = np.array([0.0, 1.0, 2.5, 4.0])
    ple, nle, pge, nge = ctx.counts_by_threshold(idx, vals, thr)
    for t, th in enumerate(thr):
        assert (ple[t], nle[t]) == brute_counts(rows, base, vals <= th, y)
        assert (pge[t], nge[t]) == brute_counts(rows, base, vals >= th, y)



@given(pair_sets(max_mentions=9), st.data())
@settings(max_examples=60, deadline=None)
def test_prepared_edges_give_the_brute_force_counts(data, draw):
    # prepare(idx) localises the clusters of all of idx once; large bags reuse it, small bags
    # are localised alone: both must count as the brute-force closure does
    rows, base, y = data
    n = len(rows)
    d, i, j = map(np.array, zip(*rows, strict=True))
    graph = PairGraph(d, i, j, closure=True)
    ctx = graph.context(base, (y == 1).astype(float), 0.5 * (y == 0))
    sub = np.array(draw.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    idx = np.flatnonzero(sub)
    edges = ctx.prepare(idx)
    n_values = draw.draw(st.sampled_from([2, 3, 12]))  # 12: the sorted path for many values
    codes = np.array(draw.draw(st.lists(st.integers(0, n_values - 1), min_size=idx.size,
                                        max_size=idx.size)), dtype=np.int64)
    p, q = ctx.counts_by_value(idx, codes, n_values, edges=edges)
    for v in range(n_values):
        bag = np.zeros(n, dtype=bool)
        bag[idx[codes == v]] = True
        bp, bn = brute_counts(rows, base, bag, y)
        assert (p[v], q[v]) == (bp, 0.5 * bn)
    vals = np.array(draw.draw(st.lists(st.integers(0, 4), min_size=idx.size,
                                       max_size=idx.size)), float)
    thr = np.array([0.0, 1.0, 2.5, 4.0])
    got = ctx.counts_by_threshold(idx, vals, thr, edges=edges)
    assert all(np.array_equal(a, b) for a, b in zip(got, ctx.counts_by_threshold(idx, vals, thr),
                                                    strict=True))
    for t, th in enumerate(thr):
        for k, keep in ((0, vals <= th), (2, vals >= th)):
            bag = np.zeros(n, dtype=bool)
            bag[idx[keep]] = True
            bp, bn = brute_counts(rows, base, bag, y)
            assert (got[k][t], got[k + 1][t]) == (bp, 0.5 * bn)


def test_unknown_pairs_are_not_counted_but_link_clusters():
    # mentions a0 - u - a1 in one document: the two labelled mentions are linked only through u
    d = np.array(["d"] * 3)
    i = np.array([0, 1, 0])
    j = np.array([1, 2, 2])
    y = np.array([-1, -1, 1])  # only (0, 2) is labelled, coreferent
    graph = PairGraph(d, i, j, closure=True)
    ctx = graph.context(np.zeros(3, bool), (y == 1).astype(float), (y == 0).astype(float))
    assert ctx.totals() == (1.0, 0.0)
    # marking the two unknown pairs positive covers the labelled pair through the closure
    assert ctx.counts(np.array([0, 1])) == (1.0, 0.0)
    # one of them is not enough; unknown pairs themselves are never counted
    assert ctx.counts(np.array([0])) == (0.0, 0.0)
    plain = PairGraph(d, i, j, closure=False).context(
        np.zeros(3, bool), (y == 1).astype(float), (y == 0).astype(float))
    assert plain.counts(np.array([0, 1])) == (0.0, 0.0)


def test_bad_positive_mask_is_rejected():
    graph = PairGraph(["d", "d"], [0, 1], [1, 2])
    with pytest.raises(ValueError, match="boolean mask of shape"):
        graph.covered(np.array([1, 0]))
