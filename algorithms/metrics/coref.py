"""Coreference scores: B³, MUC, CEAF-e and pairwise precision / recall / F1.

Clusterings are given as one label per mention (``key`` the gold entity, ``response`` the
predicted chain), aligned over the same mentions.  ``mask`` restricts scoring to a subset of the
mentions (the "source" mentions): the other mentions are removed from both clusterings before
scoring, as Stoyanov and Cardie (2006) discard non-source NPs.  ``groups`` (documents) makes
labels document-local, so equal labels in two documents never mean one cluster.  All scores are
computed from the sparse contingency table ``n[k, r]`` (mentions in key cluster ``k`` and response
cluster ``r``).  Empty denominators give 0.

References
----------
Bagga, A. and Baldwin, B. (1998). Algorithms for scoring coreference chains (B³).
Vilain, M. et al. (1995). A model-theoretic coreference scoring scheme (MUC).
Luo, X. (2005). On coreference resolution performance metrics (CEAF; φ4 entity similarity).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

__all__ = ["contingency", "b_cubed", "muc", "ceaf_e", "pairwise", "coref_scores"]


def _prf(num_p, den_p, num_r, den_r):
    p = num_p / den_p if den_p > 0 else 0.0
    r = num_r / den_r if den_r > 0 else 0.0
    f = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return float(p), float(r), float(f)


def contingency(key, response, mask=None, groups=None):
    """Sparse contingency table of the two clusterings over the masked mentions.

    Returns
    -------
    table : scipy.sparse.csr_matrix of int64, shape (n_key_clusters, n_response_clusters)
    key_doc : ndarray
        Document code of each key cluster (all zero when ``groups`` is None).
    """
    key = np.asarray(key)
    response = np.asarray(response)
    if key.shape != response.shape or key.ndim != 1:
        raise ValueError(f"key and response must be 1-d of one length; got {key.shape} and "
                         f"{response.shape}")
    if mask is None:
        mask = np.ones(key.shape, dtype=bool)
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != key.shape:
        raise ValueError(f"mask has shape {mask.shape} but key has {key.shape}")
    g = np.zeros(key.shape, dtype=np.int64) if groups is None else pd.factorize(
        np.asarray(groups))[0]
    if g.shape != key.shape:
        raise ValueError(f"groups has shape {g.shape} but key has {key.shape}")
    g = g[mask]
    kc = pd.factorize(pd.MultiIndex.from_arrays([g, key[mask]]))[0]
    rc = pd.factorize(pd.MultiIndex.from_arrays([g, response[mask]]))[0]
    nk = int(kc.max()) + 1 if kc.size else 0
    nr = int(rc.max()) + 1 if rc.size else 0
    table = sp.csr_matrix((np.ones(kc.size, dtype=np.int64), (kc, rc)), shape=(nk, nr))
    table.sum_duplicates()
    key_doc = np.zeros(nk, dtype=np.int64)
    key_doc[kc] = g
    return table, key_doc


def b_cubed(key, response, mask=None, groups=None):
    """B³ precision, recall and F1 (Bagga and Baldwin 1998), mention-averaged."""
    t, _ = contingency(key, response, mask, groups)
    n = t.sum()
    ksize = np.asarray(t.sum(axis=1)).ravel()
    rsize = np.asarray(t.sum(axis=0)).ravel()
    c = t.tocoo()
    sq = c.data.astype(np.float64) ** 2
    return _prf((sq / rsize[c.col]).sum(), n, (sq / ksize[c.row]).sum(), n)


def muc(key, response, mask=None, groups=None):
    """MUC precision, recall and F1 (Vilain et al. 1995): links needed to join each cluster."""
    t, _ = contingency(key, response, mask, groups)
    ksize = np.asarray(t.sum(axis=1)).ravel()
    rsize = np.asarray(t.sum(axis=0)).ravel()
    kparts = np.diff(t.indptr)  # response clusters each key cluster is split into
    rparts = np.diff(t.tocsc().indptr)
    return _prf((rsize - rparts).sum(), (rsize - 1).sum(), (ksize - kparts).sum(),
                (ksize - 1).sum())


def ceaf_e(key, response, mask=None, groups=None):
    """Entity-based CEAF (Luo 2005, φ4 = 2 |K ∩ R| / (|K| + |R|)), optimal alignment per document.

    The alignment is the Hungarian assignment (``scipy.optimize.linear_sum_assignment``) on each
    document's block of the similarity matrix (clusters never span documents).
    """
    # imported here: scipy.optimize is CEAF's alone, and the modules that import this one
    # (the StRip steps a loaded model applies its rules with) do not score
    from scipy.optimize import linear_sum_assignment

    t, key_doc = contingency(key, response, mask, groups)
    nk, nr = t.shape
    if nk == 0:
        return 0.0, 0.0, 0.0
    ksize = np.asarray(t.sum(axis=1)).ravel()
    rsize = np.asarray(t.sum(axis=0)).ravel()
    c = t.tocoo()
    resp_doc = np.zeros(nr, dtype=np.int64)
    resp_doc[c.col] = key_doc[c.row]
    total = 0.0
    korder = np.argsort(key_doc, kind="stable")
    rorder = np.argsort(resp_doc, kind="stable")
    kb = np.searchsorted(key_doc[korder], np.arange(key_doc.max() + 2))
    rb = np.searchsorted(resp_doc[rorder], np.arange(key_doc.max() + 2))
    tc = t.tocsr()
    for d in range(int(key_doc.max()) + 1):
        ks = korder[kb[d]:kb[d + 1]]
        rs = rorder[rb[d]:rb[d + 1]]
        if ks.size == 0 or rs.size == 0:
            continue
        block = tc[ks][:, rs].toarray().astype(np.float64)
        sim = 2 * block / (ksize[ks][:, None] + rsize[rs][None, :])
        ri, ci = linear_sum_assignment(sim, maximize=True)
        total += sim[ri, ci].sum()
    return _prf(total, nr, total, nk)


def pairwise(key, response, mask=None, groups=None):
    """Pairwise precision, recall and F1 over mention pairs after clustering.

    A pair is predicted coreferent when both mentions are in one response cluster (the transitive
    closure of the positive links), and truly coreferent when in one key cluster.
    """
    t, _ = contingency(key, response, mask, groups)

    def pairs(x):
        x = np.asarray(x, dtype=np.float64)
        return (x * (x - 1) / 2).sum()

    both = pairs(t.data)
    return _prf(both, pairs(np.asarray(t.sum(axis=0)).ravel()), both,
                pairs(np.asarray(t.sum(axis=1)).ravel()))


def coref_scores(key, response, mask=None, groups=None) -> pd.DataFrame:
    """All four metrics as a frame with rows ``muc, b3, ceaf_e, pairwise`` and columns p, r, f."""
    rows = {
        "muc": muc(key, response, mask, groups),
        "b3": b_cubed(key, response, mask, groups),
        "ceaf_e": ceaf_e(key, response, mask, groups),
        "pairwise": pairwise(key, response, mask, groups),
    }
    return pd.DataFrame.from_dict(rows, orient="index", columns=["p", "r", "f"])
