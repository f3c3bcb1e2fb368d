"""Discriminative Category Matching labels for clusters (Fung, Yu and Lu, 2002).

Chen et al. (2005, Sec. 2.4) name each relation cluster by the words with the largest
DCM weight.  With ``pf_ik`` the number of pairs of cluster k whose context contains word i,
``N_k`` the size of cluster k and ``K`` the number of clusters:

    WC_ik = log2(pf_ik + 1) / log2(N_k + 1)                       (in-cluster importance)
    CC_i  = log(K * max_k WC_ik / sum_k WC_ik) / log K             (cross-cluster: 1 when the
                                                                     word occurs in one cluster
                                                                     only, 0 when spread evenly)
    W_ik  = sqrt(2) * WC_ik^2 * CC_i^2 / sqrt(WC_ik^2 + CC_i^2)     (in [0, 1])

The combination ``WC^2 CC^2 / sqrt(WC^2 + CC^2)`` is the one of Fung et al. (2002) as used
by Chen et al. (2005) (the same formula appears in an independent public reimplementation of
Chen et al.'s labelling).  The factor sqrt(2) scales the maximum (WC = CC = 1, which gives
1/sqrt(2) without it) to 1, so that W lies in [0, 1] as the issue states; I could not check
the PDF of Fung et al. here, so the sqrt(2) comes from my recollection of their definition.
It is a constant factor and does not change which words are chosen.

Conventions: a word that occurs in no pair has all weights 0; with a single cluster
(``K = 1``, where ``log K = 0``) every occurring word gets ``CC_i = 1`` (nothing to
discriminate against, so the most typical words are reported).

References
----------
G. P. C. Fung, J. X. Yu and H. Lu. Discriminative Category Matching: Efficient Text
Classification for Huge Document Collections. ICDM 2002, 187-194.
J. Chen, D. Ji, C. L. Tan and Z. Niu. Unsupervised Feature Selection for Relation
Extraction. IJCNLP 2005, Sec. 2.4, Table 6.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def dcm_weights(X, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """DCM weights of every word for every cluster.

    Parameters
    ----------
    X : array-like or sparse (n_pairs, n_words)
        Context matrix; any non-zero counts as "contains the word".
    labels : array of shape (n_pairs,)
        Cluster of each pair.

    Returns
    -------
    W : ndarray (n_clusters, n_words)
        The combined weight ``W_ik``.
    WC : ndarray (n_clusters, n_words)
    CC : ndarray (n_words,)
    clusters : ndarray (n_clusters,)
        The cluster label of each row, sorted.
    """
    X = sp.csr_matrix(X)
    labels = np.asarray(labels)
    if labels.shape != (X.shape[0],):
        raise ValueError(f"labels has shape {labels.shape} but X has {X.shape[0]} rows")
    clusters, inv = np.unique(labels, return_inverse=True)
    K = clusters.size
    present = sp.csr_matrix((np.ones(X.nnz), X.indices.copy(), X.indptr.copy()), shape=X.shape)
    present.sum_duplicates()
    present.data[:] = 1.0
    onehot = sp.csr_matrix((np.ones(labels.size), (inv, np.arange(labels.size))),
                           shape=(K, labels.size))
    pf = np.asarray((onehot @ present).todense())
    sizes = np.asarray(onehot.sum(axis=1)).ravel()
    WC = np.log2(pf + 1.0) / np.log2(sizes + 1.0)[:, None]
    total = WC.sum(axis=0)
    occurs = total > 0
    CC = np.zeros(X.shape[1])
    if K == 1:
        CC[occurs] = 1.0
    else:
        CC[occurs] = np.log(K * WC.max(axis=0)[occurs] / total[occurs]) / np.log(K)
    CC = np.clip(CC, 0.0, 1.0)  # rounding guard; mathematically in [0, 1]
    CC2 = CC[None, :] ** 2
    WC2 = WC**2
    denom = np.sqrt(WC2 + CC2)
    with np.errstate(invalid="ignore", divide="ignore"):
        W = np.where(denom > 0, np.sqrt(2.0) * WC2 * CC2 / np.where(denom > 0, denom, 1.0), 0.0)
    return W, WC, CC, clusters


def top_words(X, labels, vocabulary, n_words: int) -> dict:
    """The ``n_words`` words with the largest DCM weight per cluster (Chen et al., Table 6).

    Ties are broken by the lower column index.  Words with weight 0 are never reported.

    Returns
    -------
    dict cluster label -> list of (word, weight)
    """
    W, _, _, clusters = dcm_weights(X, labels)
    vocabulary = np.asarray(vocabulary, dtype=object)
    if vocabulary.shape != (W.shape[1],):
        raise ValueError(f"vocabulary has {vocabulary.size} words but X has {W.shape[1]} columns")
    out = {}
    idx = np.arange(W.shape[1])
    for row, c in enumerate(clusters):
        order = np.lexsort((idx, -W[row]))[: int(n_words)]
        out[c.item() if hasattr(c, "item") else c] = [
            (str(vocabulary[j]), float(W[row, j])) for j in order if W[row, j] > 0]
    return out
