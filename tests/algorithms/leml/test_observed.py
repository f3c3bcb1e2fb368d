"""The observed entries Omega (algorithms.leml.observed): the mask is the uniform draw of the
whole label matrix at once, whatever the row blocks it is drawn in; the reasons a mask leaves
nothing to learn; the label counts a mask lets the model see, against a loop over entries."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from scarce.algorithms.leml.observed import (
    MASK_STREAM,
    nothing_observed,
    observed_label_counts,
    observed_mask,
)


@pytest.mark.parametrize("n, n_labels, part", [(7, 5, None), (5000, 1000, None), (30, 4, 2)])
def test_the_mask_is_one_uniform_draw_of_the_whole_matrix(n, n_labels, part):
    # 5000 x 1000 is drawn in two row blocks of 2^22 entries at most
    mask = observed_mask(n, n_labels, 0.3, seed=11, part=part)
    stream = [11, MASK_STREAM] if part is None else [11, MASK_STREAM, part]
    whole = np.random.default_rng(np.random.SeedSequence(stream)).random((n, n_labels)) < 0.3
    assert mask.dtype == bool and mask.has_sorted_indices
    np.testing.assert_array_equal(mask.toarray(), whole)


def test_nothing_observed_names_what_is_missing():
    Y = sp.csr_matrix(np.array([[1, 0], [0, 1]], dtype=np.float32))
    none = sp.csr_matrix((2, 2), dtype=bool)
    assert nothing_observed(none, Y, 0.001).startswith("0.001 observes none of the 2 x 2")
    negatives_only = sp.csr_matrix(np.array([[0, 1], [1, 0]], dtype=bool))
    assert "none of its 2 positive labels" in nothing_observed(negatives_only, Y, 0.5)
    assert nothing_observed(sp.csr_matrix(np.eye(2, dtype=bool)), Y, 0.5) is None


def test_label_counts_are_the_observed_positives_counted_entry_by_entry():
    rng = np.random.default_rng(0)
    Y = sp.random(40, 9, density=0.3, format="csr", random_state=1, dtype=np.float32)
    Y.data[:3] = 0  # explicit zeros are no label
    mask = sp.csr_matrix(rng.random((40, 9)) < 0.5)
    dense_y, dense_m = Y.toarray(), mask.toarray()
    want = [sum(1 for i in range(40) if dense_y[i, j] != 0 and dense_m[i, j]) for j in range(9)]
    assert observed_label_counts(Y, mask).tolist() == want
    before = Y.copy()
    assert observed_label_counts(Y).tolist() == [int((dense_y[:, j] != 0).sum())
                                                 for j in range(9)]
    assert (Y != before).nnz == 0 and Y.nnz == before.nnz  # the caller's Y left as it was
