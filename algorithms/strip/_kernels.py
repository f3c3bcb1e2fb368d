"""Compiled inner loop of StRip's coverage counting (numba).

StRip evaluates every candidate antecedent by the labelled pairs it would newly cover after the
transitive closure (:class:`scarce.algorithms.strip.closure.CoverageContext`).  A candidate is a bag
of
edges between the clusters of the current rule set (the *base* clusters); the count is the weight
of the labelled, not yet covered pairs whose two base clusters the bag joins.  Growing one rule
evaluates tens of thousands of such bags (every value of every nominal feature and every
threshold of every numeric one, at every refinement step), most of them small: in NumPy each bag
paid a dozen array calls (about 2 ms a bag, 65 % of the training time), here it pays for its
edges and for the table rows of the clusters it touches.  scipy's ``connected_components`` has
the same per-call overhead and does not count weighted entries; this loop is the paper's own
computation, so it is written here.

:func:`nested_counts` is a union-find over the touched base clusters (``parent`` is a scratch
array over all base clusters, ``-1`` = untouched, reset before returning).  For each cut of the
edge sequence it sums the table entries ``(x, y)`` (``x < y`` base clusters, stored in CSR rows
by ``x``) whose two ends are touched and in one component.  Sums run in a fixed order, so the
counts do not depend on anything but the inputs.

The compiled functions are cached beside this file (numba's ``cache=True``).  numba finds a
cached function by this file's path, size and modification time, and the cache records the
module's import name: after a change of the package's import name the old cache is found
and cannot be loaded, so such a change must change this file too (any edit rebuilds it).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["nested_counts"]


@numba.njit(cache=True, nogil=True)
def _find(parent, x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]  # path halving
        x = parent[x]
    return x


@numba.njit(cache=True, nogil=True)
def nested_counts(a, b, cuts, indptr, cols, wp, wn, parent, touched):  # pragma: no cover
    """Weighted (pos, neg) table entries joined by the edge prefixes ``(a, b)[:cut]``.

    Parameters
    ----------
    a, b : int64 arrays
        Edge ends (base cluster ids), in the order the prefixes take them.
    cuts : int64 array
        Increasing prefix lengths; one count per cut.
    indptr, cols, wp, wn : arrays
        The table of labelled, uncovered pairs between base clusters: row ``x`` holds the
        entries ``(x, cols[q])``, ``q`` in ``indptr[x]:indptr[x + 1]``, with weights
        ``wp[q]`` (positive) and ``wn[q]`` (negative).
    parent, touched : int64 arrays of the number of base clusters
        Scratch: ``parent`` all ``-1`` on entry and on return; ``touched`` any content.

    Returns
    -------
    p, n : float64 arrays, one entry per cut
    """
    m = cuts.size
    p = np.zeros(m)
    n = np.zeros(m)
    nt = 0
    prev = 0
    for t in range(m):
        cut = cuts[t]
        for e in range(prev, cut):
            x = a[e]
            y = b[e]
            if parent[x] < 0:
                parent[x] = x
                touched[nt] = x
                nt += 1
            if parent[y] < 0:
                parent[y] = y
                touched[nt] = y
                nt += 1
            rx = _find(parent, x)
            ry = _find(parent, y)
            if rx != ry:
                if rx < ry:
                    parent[ry] = rx
                else:
                    parent[rx] = ry
        if cut > prev or t == 0:
            sp = 0.0
            sn = 0.0
            for i in range(nt):
                x = touched[i]
                rx = _find(parent, x)
                for q in range(indptr[x], indptr[x + 1]):
                    y = cols[q]
                    if parent[y] >= 0 and _find(parent, y) == rx:
                        sp += wp[q]
                        sn += wn[q]
            p[t] = sp
            n[t] = sn
        else:  # the same prefix as the previous cut
            p[t] = p[t - 1]
            n[t] = n[t - 1]
        prev = max(prev, cut)
    for i in range(nt):
        parent[touched[i]] = -1
    return p, n
