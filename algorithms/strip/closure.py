"""Coverage of NP pairs by a rule set: plain, or after the transitive closure within each document.

StRip (Stoyanov and Cardie, 2006, section 3) changes one thing in RIPPER: before any rule-quality
computation, the pairs a rule set marks positive are closed transitively within their document
(single-link clustering) and every pair whose two noun phrases fall into one cluster counts as
covered.  Plain RIPPER counts only the pairs the rules mark positive.  Both go through
:class:`PairGraph` so that the rule learner is the same code.

Every mention is a node of one graph over all documents; pairs only join mentions of one document,
so the graph is block diagonal and one call to
:func:`scipy.sparse.csgraph.connected_components` clusters all documents at once.

Incremental evaluation of many candidate antecedents (:class:`CoverageContext`): the pairs already
marked positive by the rule set (the *base*) are closed once; each base cluster becomes one node.
A candidate rule adds a bag ``B`` of pairs.  Only the base clusters touched by ``B`` can merge, so
the new clustering is the connected components of a graph over the touched clusters only, and the
newly covered labelled pairs are read from a sparse table of the labelled, not-yet-covered pairs
between base clusters (rows indexed by cluster).  One candidate costs
``O(|B| + sum of table rows of the touched clusters)`` (a union-find over the touched clusters,
compiled in :mod:`scarce.algorithms.strip._kernels`) instead of
``O(n_mentions + n_pairs)`` for closing everything again; the base closure is paid once per
refinement step.  For a nominal feature the candidate bags (one per value) are disjoint, so a whole
feature costs ``O(|cover(rule)|)`` plus the table rows; thresholds of a numeric feature are nested
prefixes of the rule's cover sorted by the feature, each evaluated the same way (the cap on the
number of thresholds bounds that cost).  This replaces the paper's forward and backward pass over
value bags with a running clustering: the result is the same counts, computed per bag against a
fixed base clustering.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

__all__ = ["PairGraph", "CoverageContext", "closure_labels", "covered_pairs"]


def closure_labels(n_nodes: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Connected-component label of every node of the undirected graph with edges ``(u, v)``.

    Parameters
    ----------
    n_nodes : int
        Number of nodes.
    u, v : ndarray of int
        Edge endpoints.

    Returns
    -------
    labels : ndarray of int64, shape (n_nodes,)
        Nodes share a label iff they are connected (transitive closure of the edges).
    """
    u = np.asarray(u, dtype=np.int64)
    v = np.asarray(v, dtype=np.int64)
    if u.size == 0:
        return np.arange(n_nodes, dtype=np.int64)
    g = sp.csr_matrix((np.ones(u.size, dtype=np.int8), (u, v)), shape=(n_nodes, n_nodes))
    _, labels = connected_components(g, directed=True, connection="weak")
    return labels.astype(np.int64, copy=False)


class PairGraph:
    """Mentions as nodes and candidate coreference pairs as potential edges.

    Parameters
    ----------
    groups : array-like, shape (n_pairs,)
        Document of each pair.
    mention_i, mention_j : array-like, shape (n_pairs,)
        The two mentions of each pair (any hashable ids, unique within a document).
    closure : bool, default True
        True: a pair is covered when its two mentions are in one cluster of the transitive closure
        of the positive pairs (StRip).  False: a pair is covered when it is positive itself
        (RIPPER).

    Attributes
    ----------
    u, v : ndarray of int64
        Node ids of the pair endpoints (nodes are (document, mention) and never shared between
        documents).
    n_nodes : int
        Number of distinct mentions.
    groups, mention_i, mention_j : ndarray
        The arguments, as arrays.
    """

    def __init__(self, groups, mention_i, mention_j, closure: bool = True):
        groups = np.asarray(groups)
        mi = np.asarray(mention_i)
        mj = np.asarray(mention_j)
        if not (groups.shape == mi.shape == mj.shape) or groups.ndim != 1:
            raise ValueError(f"groups, mention_i and mention_j must be 1-d of one length; got "
                             f"shapes {groups.shape}, {mi.shape}, {mj.shape}")
        n = groups.size
        _, g = np.unique(groups, return_inverse=True)
        _, m = np.unique(np.concatenate([mi, mj]), return_inverse=True)
        key = np.concatenate([g, g]).astype(np.int64) * (int(m.max()) + 1 if n else 1) + m
        _, nodes = np.unique(key, return_inverse=True)
        self.groups, self.mention_i, self.mention_j = groups, mi, mj
        self.u = nodes[:n].astype(np.int64)
        self.v = nodes[n:].astype(np.int64)
        self.n_nodes = int(nodes.max()) + 1 if n else 0
        self.n_pairs = n
        self.closure = bool(closure)

    def labels(self, positive: np.ndarray) -> np.ndarray:
        """Cluster label of every node after the closure of the ``positive`` pairs."""
        positive = self._mask(positive)
        return closure_labels(self.n_nodes, self.u[positive], self.v[positive])

    def clusters(self, positive: np.ndarray) -> pd.DataFrame:
        """The chains of the closure of the ``positive`` pairs (single-link clustering).

        Returns
        -------
        DataFrame
            One row per mention of a pair, in order of first appearance (``mention_i`` of every
            pair, then ``mention_j``): ``doc``, ``mention`` and ``cluster``, the node label of
            :meth:`labels` (an integer below ``n_nodes``, unique over all documents).
        """
        lab = self.labels(positive)
        ends = pd.DataFrame({
            "doc": np.concatenate([self.groups, self.groups]),
            "mention": np.concatenate([self.mention_i, self.mention_j]),
            "node": np.concatenate([self.u, self.v]),
        }).drop_duplicates("node")
        return pd.DataFrame({"doc": ends["doc"].to_numpy(), "mention": ends["mention"].to_numpy(),
                             "cluster": lab[ends["node"].to_numpy()]})

    def covered(self, positive: np.ndarray) -> np.ndarray:
        """Boolean mask of the pairs covered when ``positive`` pairs are marked coreferent."""
        positive = self._mask(positive)
        if not self.closure:
            return positive.copy()
        lab = self.labels(positive)
        return lab[self.u] == lab[self.v]

    def context(self, positive, w_pos, w_neg) -> CoverageContext:
        """A :class:`CoverageContext` for evaluating candidate bags against ``positive``."""
        return CoverageContext(self, positive, w_pos, w_neg)

    def _mask(self, positive):
        positive = np.asarray(positive)
        if positive.dtype != bool or positive.shape != (self.n_pairs,):
            raise ValueError(f"positive must be a boolean mask of shape ({self.n_pairs},); got "
                             f"{positive.dtype} {positive.shape}")
        return positive


def covered_pairs(groups, mention_i, mention_j, positive, closure: bool = True) -> np.ndarray:
    """Which pairs are covered by the ``positive`` pairs (see :class:`PairGraph`)."""
    return PairGraph(groups, mention_i, mention_j, closure=closure).covered(
        np.asarray(positive, dtype=bool))


class CoverageContext:
    """Counts of newly covered pairs for candidate bags added to a fixed base of positive pairs.

    Parameters
    ----------
    graph : PairGraph
    positive : ndarray of bool, shape (n_pairs,)
        Pairs the current rule set marks positive (the base).
    w_pos, w_neg : ndarray of float, shape (n_pairs,)
        Weight of each pair when counted as a covered positive / negative: 1 for a labelled
        positive (negative) pair of the data in use, the loss ratio for negatives if wanted, and 0
        for unknown labels and pairs outside the data.  Unknown pairs still take part in the
        closure (they are edges when a candidate covers them).

    Attributes
    ----------
    covered_base : ndarray of bool
        Pairs covered by the base.
    """

    def __init__(self, graph: PairGraph, positive, w_pos, w_neg):
        self.graph = graph
        positive = graph._mask(positive)
        self.w_pos = np.asarray(w_pos, dtype=np.float64)
        self.w_neg = np.asarray(w_neg, dtype=np.float64)
        self.closure = graph.closure
        if self.closure:
            comp = graph.labels(positive)
            _, comp = np.unique(comp, return_inverse=True)
            self.comp = comp.astype(np.int64)
            self.n_comp = int(comp.max()) + 1 if comp.size else 0
            a = self.comp[graph.u]
            b = self.comp[graph.v]
            self.covered_base = a == b
            # Table of labelled, uncovered pairs between base clusters, row = min cluster.
            live = ~self.covered_base & ((self.w_pos != 0) | (self.w_neg != 0))
            lo = np.minimum(a[live], b[live])
            hi = np.maximum(a[live], b[live])
            order = np.lexsort((hi, lo))
            self._cols = hi[order]
            self._rows = lo[order]
            self._wp = self.w_pos[live][order]
            self._wn = self.w_neg[live][order]
            self._indptr = np.searchsorted(self._rows, np.arange(self.n_comp + 1))
            # scratch of the compiled counting loop (union-find over touched clusters)
            self._parent = np.full(self.n_comp, -1, dtype=np.int64)
            self._touched = np.empty(self.n_comp, dtype=np.int64)
        else:
            self.covered_base = positive.copy()
        self._free_p = np.where(self.covered_base, 0.0, self.w_pos)
        self._free_n = np.where(self.covered_base, 0.0, self.w_neg)

    # ------------------------------------------------------------------ totals
    def totals(self) -> tuple[float, float]:
        """Weighted positives and negatives not yet covered by the base."""
        return float(self._free_p.sum()), float(self._free_n.sum())

    def edges(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Restrict pair indices ``idx`` to those that can change the coverage.

        Returns the kept indices and, for the closure, their base-cluster endpoints.
        """
        keep, a, b, _ = self._edges(idx)
        return keep, a, b

    def prepare(self, idx: np.ndarray) -> tuple:
        """The edges of ``idx`` for repeated :meth:`counts_by_value` / :meth:`counts_by_threshold`
        calls over the same pairs (one per feature): pass the result as ``edges=``."""
        return self._edges(idx)

    def _edges(self, idx):
        idx = np.asarray(idx, dtype=np.int64)
        if not self.closure:
            m = ~self.covered_base[idx]
            keep = idx[m]
            return keep, keep, keep, m
        a = self.comp[self.graph.u[idx]]
        b = self.comp[self.graph.v[idx]]
        m = a != b
        return idx[m], a[m], b[m], m

    # ------------------------------------------------------------------ one bag
    def counts(self, idx: np.ndarray) -> tuple[float, float]:
        """Weighted (positives, negatives) newly covered when the pairs ``idx`` become positive."""
        keep, a, b = self.edges(idx)
        return self._counts_edges(keep, a, b)

    def _counts_edges(self, keep, a, b) -> tuple[float, float]:
        if keep.size == 0:
            return 0.0, 0.0
        if not self.closure:
            return float(self._free_p[keep].sum()), float(self._free_n[keep].sum())
        p, n = self._nested(a, b, np.array([a.size], dtype=np.int64))
        return float(p[0]), float(n[0])

    def _nested(self, a, b, cuts):
        """Counts for the nested bags ``edges[:cut]``, ``cut`` in increasing ``cuts``: a running
        union-find over the touched base clusters, recounting the table entries among them at
        each cut (``O(|edges| + table rows of the touched clusters)`` per cut), compiled."""
        # Imported here, where the learner counts: applying rules (a PairGraph's clusters)
        # needs no compiled loop, and a loaded model's predictions no numba.
        from scarce.algorithms.strip._kernels import nested_counts

        return nested_counts(np.ascontiguousarray(a, dtype=np.int64),
                             np.ascontiguousarray(b, dtype=np.int64),
                             np.ascontiguousarray(cuts, dtype=np.int64), self._indptr,
                             self._cols, self._wp, self._wn, self._parent, self._touched)

    # ------------------------------------------------------------------ many bags
    def counts_by_value(self, idx: np.ndarray, codes: np.ndarray, n_values: int, edges=None):
        """Counts for each bag ``idx[codes == c]``, c = 0..n_values-1 (disjoint bags).

        ``codes`` are aligned with ``idx``; ``edges`` is ``prepare(idx)`` when already computed.

        Returns
        -------
        p, n : ndarray of float64, shape (n_values,)
        """
        if edges is None:
            edges = self._edges(idx)
        keep, a, b, m = edges
        c = np.asarray(codes)[m]
        if not self.closure:
            p = np.bincount(c, weights=self._free_p[keep], minlength=n_values)
            n = np.bincount(c, weights=self._free_n[keep], minlength=n_values)
            return p, n
        p = np.zeros(n_values)
        n = np.zeros(n_values)
        if n_values <= 8:  # few values (bool features): a scan per value beats a sort
            bags = (np.flatnonzero(c == val) for val in range(n_values))
        else:
            order = np.argsort(c, kind="stable")
            bounds = np.searchsorted(c[order], np.arange(n_values + 1))
            bags = (order[bounds[val]:bounds[val + 1]] for val in range(n_values))
        for val, sl in enumerate(bags):
            if sl.size:
                pv, nv = self._nested(a[sl], b[sl], np.array([sl.size], dtype=np.int64))
                p[val], n[val] = pv[0], nv[0]
        return p, n

    def counts_by_threshold(self, idx: np.ndarray, values: np.ndarray, thresholds: np.ndarray,
                            edges=None):
        """Counts for the bags ``idx[values <= t]`` and ``idx[values >= t]`` for each threshold.

        ``values`` are aligned with ``idx``; ``edges`` is ``prepare(idx)`` when already computed.

        Returns
        -------
        p_le, n_le, p_ge, n_ge : ndarray of float64, shape (n_thresholds,)
        """
        if edges is None:
            edges = self._edges(idx)
        keep, a, b, m = edges
        vals = np.asarray(values, dtype=np.float64)[m]
        order = np.argsort(vals, kind="stable")
        keep, vals = keep[order], vals[order]
        thresholds = np.asarray(thresholds, dtype=np.float64)
        cut_le = np.searchsorted(vals, thresholds, side="right")
        cut_ge = np.searchsorted(vals, thresholds, side="left")
        m = thresholds.size
        out = np.zeros((4, m))
        if not self.closure:
            cp = np.concatenate([[0.0], np.cumsum(self._free_p[keep])])
            cn = np.concatenate([[0.0], np.cumsum(self._free_n[keep])])
            out[0] = cp[cut_le]
            out[1] = cn[cut_le]
            out[2] = cp[-1] - cp[cut_ge]
            out[3] = cn[-1] - cn[cut_ge]
            return out[0], out[1], out[2], out[3]
        a, b = a[order], b[order]
        p_le, n_le = self._nested(a, b, cut_le)
        # ">= t" bags are suffixes: a forward pass over the reversed order
        p_ge, n_ge = self._nested(a[::-1], b[::-1], (keep.size - cut_ge)[::-1])
        return p_le, n_le, p_ge[::-1], n_ge[::-1]
