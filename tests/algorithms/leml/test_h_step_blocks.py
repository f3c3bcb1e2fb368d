"""The squared loss's H-step from row-block partial sums (``update_H_by_blocks``) against the
whole-data H-step (``update_H``) and a naive per-label solve."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.preprocessing import normalize

from scarce.algorithms.leml import (
    LEML,
    LocalBlocks,
    prepare_data,
    split_rows,
    update_H_bound_by_blocks,
    update_H_by_blocks,
    update_H_newton_by_blocks,
)
from scarce.algorithms.leml.h_step import block_label_grams

N, D, L, K, LAM = 150, 9, 13, 4, 0.7


def _problem(case: str, dtype=np.float64, fit_intercept=False):
    X = normalize(sp.random(N, D, density=0.4, random_state=1, format="csr"))
    Y = sp.random(N, L, density=0.2, random_state=2, format="csr")
    Y.data[:] = 1
    if case == "full":
        return prepare_data(X, Y, fit_intercept=fit_intercept, dtype=dtype)
    mask = sp.random(N, L, density=0.4, random_state=3, format="csr").astype(bool)
    return prepare_data(X, Y, mask, fit_intercept=fit_intercept, dtype=dtype,
                        entries=case.split("-")[1])


def _W(data, seed=0):
    return np.random.default_rng(seed).standard_normal((data.n_features, K)).astype(data.dtype)


def _dense_labels(data):
    """Dense copies of the labels and of the observed-entries mask."""
    if data.fully_observed:
        return data.Y.toarray(), np.ones((data.n_samples, data.n_labels), dtype=bool)
    ent = data.entries
    if ent.dense:
        return ent.y.astype(np.float64), ent.mask.astype(bool)
    Y = sp.csr_matrix((ent.y, ent.cols, ent.indptr), shape=ent.shape).toarray()
    observed = sp.csr_matrix((np.ones(ent.size), ent.cols, ent.indptr),
                             shape=ent.shape).toarray().astype(bool)
    return Y, observed


def _naive_H(data, W, lam):
    """Label by label in float64: ``(2 sum_{i in Omega_j} a_i a_i^T + lam I)^{-1}
    2 sum_{i in Omega_j} y_ij a_i`` from dense copies."""
    X = data.X.toarray().astype(np.float64)
    A = X @ W.astype(np.float64)
    Y, observed = _dense_labels(data)
    H = np.empty((data.n_labels, W.shape[1]))
    for j in range(data.n_labels):
        Aj = A[observed[:, j]]
        M = 2 * Aj.T @ Aj + lam * np.eye(W.shape[1])
        H[j] = np.linalg.solve(M, 2 * Aj.T @ Y[observed[:, j], j])
    return H


def _rel(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("case", ["full", "masked-sparse", "masked-dense"])
@pytest.mark.parametrize("n_blocks", [1, 3, 7])
@pytest.mark.parametrize("label_block", [None, 1, 5])
def test_block_sums_equal_the_whole_data_h_step(case, n_blocks, label_block):
    data = _problem(case, fit_intercept=True)
    W = _W(data)
    model = LEML(lam=LAM)
    H_whole, _ = model.h_step(data, W, None)
    H_blocks, info = update_H_by_blocks(LocalBlocks(split_rows(data, n_blocks)), W, LAM,
                                        "squared", label_block=label_block)
    assert H_blocks.dtype == np.float64 and H_blocks.shape == (L, K)
    assert info == {"newton_iter": 0}
    assert _rel(H_blocks, H_whole) <= 1e-10
    assert _rel(H_blocks, _naive_H(data, W, LAM)) <= 1e-10


@pytest.mark.parametrize("case", ["full", "masked-sparse"])
def test_estimator_h_step_takes_the_blocks_as_a_backend(case):
    data = _problem(case, dtype=np.float32)
    W = _W(data)
    model = LEML(lam=LAM)
    H_whole, _ = model.h_step(data, W, None)
    H_blocks, _ = model.h_step(data, W, None, backend=LocalBlocks(split_rows(data, 4)))
    assert H_blocks.dtype == np.float32  # the working dtype throughout
    assert _rel(H_blocks, H_whole) <= 1e-5


@pytest.mark.parametrize("in_flight", [1, 2])
def test_a_label_block_of_gram_matrices_is_all_that_is_built_at_once(in_flight):
    data = _problem("masked-sparse")
    seen, open_blocks, most_open = [], [0], [0]

    class Recording(LocalBlocks):
        def sum(self, parts):
            seen.append(max(np.shape(p)[0] for p in parts))
            return super().sum(parts)

        def reduce(self, fn, parts, *args):
            seen.append(max(np.shape(p)[0] for p in parts))
            open_blocks[0] += 1
            most_open[0] = max(most_open[0], open_blocks[0])
            return super().reduce(fn, parts, *args)

        def fetch(self, handle):
            open_blocks[0] -= 1
            return super().fetch(handle)

    backend = Recording(split_rows(data, 3))
    backend.in_flight = in_flight
    H, _ = update_H_by_blocks(backend, _W(data), LAM, "squared", label_block=4)
    # the right-hand sides (L x k), then ceil(13 / 4) = 4 label blocks of at most 4 labels,
    # at most `in_flight` of them built and not yet solved
    assert seen == [L, 4, 4, 4, 1]
    assert most_open[0] == in_flight and open_blocks[0] == 0
    assert _rel(H, _naive_H(data, _W(data), LAM)) <= 1e-10


@pytest.mark.parametrize("k", [1, 3, 15, 16, 40])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pair_products_are_the_upper_triangles_of_each_rows_outer_product(k, dtype):
    """Both ways of forming ``a_i (x) a_i`` (few columns: gathers; many: a product per row of
    the triangle) against ``np.outer``, in ``np.triu_indices`` order, C-ordered."""
    from scarce.algorithms.leml.entries import pair_products

    rows = np.random.default_rng(k).standard_normal((7, k)).astype(dtype)
    P = pair_products(rows)
    iu, ju = np.triu_indices(k)
    assert P.dtype == dtype and P.flags.c_contiguous and P.shape == (7, iu.size)
    for i in range(7):
        assert np.array_equal(P[i], np.outer(rows[i], rows[i])[iu, ju])


def _naive_label_grams(data, A, v=None):
    """``sum_{i in Omega_j} v_ij a_i a_i^T`` label by label in float64 from dense copies, as
    upper triangles (L x k(k+1)/2); ``v``: dense n x L weights (None: 1)."""
    _, observed = _dense_labels(data)
    weights = observed.astype(np.float64) if v is None else v * observed
    iu, ju = np.triu_indices(A.shape[1])
    A64 = A.astype(np.float64)
    return np.stack([(A64.T * weights[:, j]) @ A64 for j in range(data.n_labels)])[:, iu, ju]


def _dense_weights(data, v):
    """A vector of weights over the entries (CSR order for sparse entries) as n x L."""
    ent = data.entries
    if ent.dense:
        return v.astype(np.float64)
    return sp.csr_matrix((v, ent.cols, ent.indptr), shape=ent.shape).toarray()


#: A :data:`~scarce.algorithms.leml.entries.BLOCK` small enough that at rank ``K`` the default
#: label blocks are groups of 4 labels (``label_block_elements(4) = 18``), the dense entries'
#: batches 5 rows (of 13 labels), the sparse entries' 7, the solve's batches 4 labels.
SMALL_BLOCK = 4 * 18


@pytest.mark.parametrize("case", ["masked-sparse", "masked-dense"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("block", [None, SMALL_BLOCK])
def test_label_grams_of_a_label_range_equal_those_of_all_labels(case, weighted, dtype, block,
                                                                monkeypatch):
    """The observed entries' Gram matrices of a label range: the rows of those of all labels
    bit for bit, sparse entries (sums in row order per label whatever the range) and dense
    ones (each label from the BLAS product over its default label block, whatever the
    range), with one default label block or several (``block``); a naive per-label sum to
    rounding."""
    import scarce.algorithms.leml.entries as leml_entries

    if block is not None:
        monkeypatch.setattr(leml_entries, "BLOCK", block)
        assert leml_entries.label_groups(L, K) == [(0, 4), (4, 8), (8, 12), (12, 13)]
    data = _problem(case, dtype=dtype)
    A = np.ascontiguousarray(data.X @ _W(data))
    iu, ju = np.triu_indices(K)
    ent = data.entries
    v = (ent.masked(np.random.default_rng(5).random(ent.y.shape).astype(dtype)) if weighted
         else None)
    whole = ent.label_grams(A, 0, L, v)
    assert whole.dtype == dtype
    naive = _naive_label_grams(data, A, None if v is None else _dense_weights(data, v))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(whole, naive, rtol=tol, atol=tol)
    for l0, l1 in [(0, L), (2, 7), (3, 11), (12, 13), (5, 5), (1, L)]:
        part = (ent.label_grams(A, l0, l1, v) if weighted
                else block_label_grams(data, A, l0, l1))
        assert part.shape == (l1 - l0, iu.size)
        assert np.array_equal(part, whole[l0:l1]), (l0, l1)


@pytest.mark.parametrize("case", ["full", "masked-sparse", "masked-dense"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("block", [None, 17 * 18])
def test_the_h_step_has_the_same_bits_whatever_its_label_blocks(case, dtype, block,
                                                                 monkeypatch):
    """``update_H`` with label blocks of 1, 7, 13 and all 40 labels: the bits of its default
    label blocks, for every loss and H-step solver, on the whole data (and blocks of 7 labels
    on 3 row blocks); with one default label block or default blocks of 17 labels
    (``block``), for float32 and float64 and every layout of the labels (fully observed
    labels reach the per-label Gram matrices through the Newton steps)."""
    import scarce.algorithms.leml.entries as leml_entries
    from scarce.algorithms.leml import update_H
    from scarce.algorithms.leml.params import H_SOLVERS, LOSS_NAMES

    n_labels = 40
    if block is not None:
        monkeypatch.setattr(leml_entries, "BLOCK", block)
        assert leml_entries.label_groups(n_labels, K)[:3] == [(0, 17), (17, 34), (34, 40)]
    X = normalize(sp.random(N, D, density=0.4, random_state=1, format="csr"))
    Y = sp.random(N, n_labels, density=0.2, random_state=2, format="csr")
    Y.data[:] = 1
    mask = (None if case == "full" else
            sp.random(N, n_labels, density=0.4, random_state=3, format="csr").astype(bool))
    data = prepare_data(X, Y, mask, fit_intercept=True, dtype=dtype,
                        entries="auto" if case == "full" else case.split("-")[1])
    W = _W(data)
    H0 = (np.random.default_rng(4).standard_normal((n_labels, K)) * 0.3).astype(dtype)
    settings = [("squared", "direct")] + [(loss, h_solver) for loss in LOSS_NAMES[1:]
                                          for h_solver in H_SOLVERS]
    for loss, h_solver in settings:
        for where, label_blocks in ((data, (1, 7, 13, n_labels)),
                                    (LocalBlocks(split_rows(data, 3)), (7,))):
            def step(label_block, where=where, loss=loss, h_solver=h_solver):
                return update_H(where, W, LAM, loss, H0=H0, newton_max_iter=2,
                                h_solver=h_solver, cg_max_iter=3, cg_tol=1e-3,
                                label_block=label_block)[0]

            default = step(None)
            assert default.dtype == dtype
            for label_block in label_blocks:
                assert np.array_equal(step(label_block), default), (loss, h_solver,
                                                                    label_block)


def test_each_h_step_on_blocks_refuses_the_losses_and_solvers_of_the_others():
    data = _problem("full")
    with pytest.raises(ValueError, match="squared loss only"):
        update_H_by_blocks(LocalBlocks(split_rows(data, 2)), _W(data), LAM, "logistic")
    with pytest.raises(ValueError, match="'direct' or 'cg' here, got 'bound'"):
        update_H_newton_by_blocks(LocalBlocks(split_rows(data, 2)), _W(data),
                                  np.zeros((L, K)), LAM, "logistic", n_steps=1,
                                  h_solver="bound")
    with pytest.raises(ValueError, match="exact: use update_H_by_blocks"):
        update_H_newton_by_blocks(LocalBlocks(split_rows(data, 2)), _W(data),
                                  np.zeros((L, K)), LAM, "squared", n_steps=1)
    with pytest.raises(ValueError, match="exact: use update_H_by_blocks"):
        update_H_bound_by_blocks(LocalBlocks(split_rows(data, 2)), _W(data), np.zeros((L, K)),
                                 LAM, "squared", n_steps=1)
    with pytest.raises(ValueError, match=r"W has shape \(3, 4\)"):
        update_H_by_blocks(LocalBlocks(split_rows(data, 2)), np.ones((3, K)), LAM, "squared")


def _naive_bound_H(data, W, H, lam, loss, n_steps):
    """Label by label in float64 from dense copies: ``n_steps`` of ``h_j -= (c sum_{i in
    Omega_j} a_i a_i^T + lam I)^{-1} (sum_{i in Omega_j} loss'(y_ij, a_i^T h_j) a_i +
    lam h_j)``."""
    from scarce.algorithms.leml.losses import get_loss

    loss = get_loss(loss)
    A = data.X.toarray().astype(np.float64) @ W.astype(np.float64)
    Y, observed = _dense_labels(data)
    H = np.array(H, dtype=np.float64)
    c = float(loss.curvature_bound)
    for j in range(data.n_labels):
        Aj, yj = A[observed[:, j]], Y[observed[:, j], j]
        M = c * Aj.T @ Aj + lam * np.eye(W.shape[1])
        for _ in range(n_steps):
            d = loss.derivative(yj.astype(data.dtype), (Aj @ H[j]).astype(data.dtype))
            H[j] -= np.linalg.solve(M, Aj.T @ d.astype(np.float64) + lam * H[j])
    return H


@pytest.mark.parametrize("case", ["full", "masked-sparse", "masked-dense"])
@pytest.mark.parametrize("loss", ["logistic", "sqhinge"])
def test_bound_steps_from_block_sums_equal_the_whole_data_bound_steps(case, loss):
    """The margin losses' bound H-step over 1, 3 and 7 row blocks (label blocks of 5 labels
    and of all): the whole-data ``update_H(h_solver="bound")`` to rounding, a naive per-label
    loop in float64 too, and the estimator's ``h_step`` with the blocks as its backend."""
    from scarce.algorithms.leml import update_H

    data = _problem(case, fit_intercept=True)
    W = _W(data)
    H0 = np.random.default_rng(4).standard_normal((L, K)) * 0.3
    whole, _ = update_H(data, W, LAM, loss, H0=H0, newton_max_iter=3, h_solver="bound",
                        cg_max_iter=1, cg_tol=0.1)
    naive = _naive_bound_H(data, W, H0, LAM, loss, 3)
    assert _rel(whole, naive) < 1e-10
    for n_blocks in (1, 3, 7):
        for label_block in (5, None):
            H, info = update_H_bound_by_blocks(LocalBlocks(split_rows(data, n_blocks)), W, H0,
                                               LAM, loss, n_steps=3, label_block=label_block)
            assert info == {"newton_iter": 3}
            assert H.dtype == whole.dtype and _rel(H, whole) < 1e-12, (n_blocks, label_block)
    est = LEML(lam=LAM, loss=loss, h_solver="bound", newton_max_iter=3, fit_intercept=True)
    H, _ = est.h_step(data, W, H0, backend=LocalBlocks(split_rows(data, 3)))
    assert _rel(H, whole) < 1e-12


@pytest.mark.parametrize("keep", [True, False])
def test_bound_steps_build_the_gram_matrices_once_when_the_backend_keeps_them(keep):
    """A backend that keeps the bound steps' Gram matrices (one process) builds each label
    block's once over the steps; one that does not (a cluster) builds them at every step; the
    same bits either way."""
    data = _problem("masked-sparse", fit_intercept=True)
    built = []

    class Recording(LocalBlocks):
        keep_label_grams = keep

        def each(self, fn, *shared, per_block=None):
            if fn.__name__ == "block_label_grams":
                built.append(shared[:2])
            return super().each(fn, *shared, per_block=per_block)

    H0 = np.random.default_rng(4).standard_normal((L, K)) * 0.3
    H, _ = update_H_bound_by_blocks(Recording(split_rows(data, 3)), _W(data), H0, LAM,
                                    "logistic", n_steps=3, label_block=5)
    label_blocks = [(0, 5), (5, 10), (10, 13)]
    assert built == (label_blocks if keep else label_blocks * 3)
    other, _ = update_H_bound_by_blocks(LocalBlocks(split_rows(data, 3)), _W(data), H0, LAM,
                                        "logistic", n_steps=3, label_block=5)
    assert np.array_equal(H, other)


@pytest.mark.parametrize("n_labels", [1, 2, 13, 100, 181, 361, 1000])
@pytest.mark.parametrize("k", [1, 4, 50, 151, 300, 3000])
def test_default_label_blocks_are_as_many_labels_as_a_block_holds(n_labels, k):
    """The default label blocks cover the labels in order, each of as many labels as fit
    2^22 elements of what a label block holds per label (its Gram triangle, its rows of
    the right-hand side and of the solution; one more label would not fit), the last one
    what remains (at least one label, even where one label's triangle is larger); a given
    ``label_block`` is taken as it is."""
    from scarce.algorithms.leml.entries import BLOCK, label_block_elements
    from scarce.algorithms.leml.h_step import _label_ranges

    per_label = k * (k + 1) // 2 + 2 * k
    assert label_block_elements(k) == per_label
    ranges = _label_ranges(n_labels, k, None)
    assert ranges[0][0] == 0 and ranges[-1][1] == n_labels
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    size = ranges[0][1] - ranges[0][0]
    if len(ranges) > 1:
        assert all(l1 - l0 == size for l0, l1 in ranges[:-1])
        assert 0 < ranges[-1][1] - ranges[-1][0] <= size
    assert size * per_label <= BLOCK or size == 1
    assert size == n_labels or (size + 1) * per_label > BLOCK
    given = _label_ranges(n_labels, k, 4)
    assert [l1 - l0 for l0, l1 in given] == [4] * (n_labels // 4) + (
        [n_labels % 4] if n_labels % 4 else [])


def _naive_newton_H(data, W, H, lam, loss, n_steps):
    """Label by label in float64 from dense copies: ``n_steps`` Newton steps ``s = -(A_j^T
    D''_j A_j + lam I)^{-1} g_j``, each with a backtracking line search (at most 30 halvings
    from 1 to the first point whose objective is at most ``f + 1e-4 alpha g_j.s``; none
    found: ``h_j`` is kept)."""
    from scarce.algorithms.leml.losses import get_loss

    loss = get_loss(loss)
    A = data.X.toarray().astype(np.float64) @ W.astype(np.float64)
    Y, observed = _dense_labels(data)
    H = np.array(H, dtype=np.float64)
    for j in range(data.n_labels):
        Aj, yj = A[observed[:, j]], Y[observed[:, j], j]

        def f(h, Aj=Aj, yj=yj):
            return float(np.sum(loss.value(yj, Aj @ h))) + 0.5 * lam * h @ h

        for _ in range(n_steps):
            z = Aj @ H[j]
            g = Aj.T @ loss.derivative(yj, z) + lam * H[j]
            hess = Aj.T @ (loss.second_derivative(yj, z)[:, None] * Aj) + lam * np.eye(len(g))
            s = -np.linalg.solve(hess, g)
            slope, f0, alpha = g @ s, f(H[j]), 1.0
            if slope >= 0:
                continue
            for _ls in range(30):
                if f(H[j] + alpha * s) <= f0 + 1e-4 * alpha * slope:
                    H[j] = H[j] + alpha * s
                    break
                alpha *= 0.5
    return H


@pytest.mark.parametrize("case", ["full", "masked-sparse", "masked-dense"])
@pytest.mark.parametrize("loss", ["logistic", "sqhinge"])
def test_newton_steps_from_block_sums_equal_the_whole_data_newton_steps(case, loss):
    """The margin losses' Newton H-step over 1, 3 and 7 row blocks (Hessians in label blocks
    of 5 labels and of all; and the truncated Newton steps of ``h_solver="cg"``): the
    whole-data ``update_H`` to rounding, a naive per-label Newton loop in float64 for the
    direct solver, and the estimator's ``h_step`` with the blocks as its backend."""
    from scarce.algorithms.leml import update_H

    data = _problem(case, fit_intercept=True)
    W = _W(data)
    H0 = np.random.default_rng(4).standard_normal((L, K)) * 0.3
    for h_solver in ("direct", "cg"):
        whole, info_whole = update_H(data, W, LAM, loss, H0=H0, newton_max_iter=3,
                                     h_solver=h_solver, cg_max_iter=3, cg_tol=1e-3)
        if h_solver == "direct":
            assert _rel(whole, _naive_newton_H(data, W, H0, LAM, loss, 3)) < 1e-10
        for n_blocks in (1, 3, 7):
            for label_block in (5, None):
                H, info = update_H_newton_by_blocks(
                    LocalBlocks(split_rows(data, n_blocks)), W, H0, LAM, loss, n_steps=3,
                    h_solver=h_solver, cg_max_iter=3, cg_tol=1e-3, label_block=label_block)
                assert info == info_whole
                assert H.dtype == whole.dtype
                assert _rel(H, whole) < 1e-10, (h_solver, n_blocks, label_block)
        est = LEML(lam=LAM, loss=loss, h_solver=h_solver, newton_max_iter=3, cg_max_iter=3,
                   cg_tol=1e-3, fit_intercept=True)
        H, _ = est.h_step(data, W, H0, backend=LocalBlocks(split_rows(data, 3)))
        assert _rel(H, whole) < 1e-10


# -- the objective over row blocks -----------------------------------------------------------
@pytest.mark.parametrize("case", ["full", "masked-sparse", "masked-dense"])
@pytest.mark.parametrize("loss", ["squared", "logistic", "sqhinge"])
@pytest.mark.parametrize("n_blocks", [1, 4])
def test_objective_over_blocks_equals_the_whole_data_objective(case, loss, n_blocks):
    data = _problem(case, fit_intercept=True)
    W = _W(data)
    H = np.random.default_rng(1).standard_normal((L, K))
    model = LEML(lam=LAM, loss=loss)
    whole = model.objective(data, W, H)
    blocks = model.objective(data, W, H, backend=LocalBlocks(split_rows(data, n_blocks)))
    assert isinstance(blocks, float)
    assert blocks == pytest.approx(whole, rel=1e-12)
    # against the definition, in float64 from dense copies: squared loss on 0/1 targets
    if loss == "squared":
        Z = data.X.toarray() @ W @ H.T
        if data.fully_observed:
            Y, observed = data.Y.toarray(), np.ones(Z.shape, dtype=bool)
        elif data.entries.dense:
            Y, observed = data.entries.y, data.entries.mask.astype(bool)
        else:
            ent = data.entries
            Y = sp.csr_matrix((ent.y, ent.cols, ent.indptr), shape=ent.shape).toarray()
            observed = sp.csr_matrix((np.ones(ent.size), ent.cols, ent.indptr),
                                     shape=ent.shape).toarray().astype(bool)
        naive = ((Y - Z)[observed] ** 2).sum() + 0.5 * LAM * ((W**2).sum() + (H**2).sum())
        assert blocks == pytest.approx(naive, rel=1e-10)
