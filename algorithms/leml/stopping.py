"""When LEML's alternation stops: the relative decrease of ``tol``, and ``early_stopping``'s
held-out rows, its pass over them and the fit that follows.

The rules are functions of the values they read, so that the estimator (:class:`scarce.algorithms.
leml.LEML`, whose methods of the same names call these) and a driver that runs the steps
itself (the flow) stop at the same iteration.
"""

from __future__ import annotations

import logging
import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.utils import check_random_state

from scarce.algorithms.leml.data import EARLY_STOPPING_STREAM, validation_rows
from scarce.algorithms.metrics.multilabel import precision_at_k

__all__ = ["best_iteration", "converged", "early_stopping_rows", "fit_early_stopping",
           "held_out_pass", "no_gain", "split_rows"]

log = logging.getLogger("scarce.algorithms.leml.model")  # the estimator's log, as before


def converged(objectives, tol: float) -> str | None:
    """Why the alternation stops by ``tol`` after these objectives (one per completed outer
    iteration of a fit, oldest first), or None to go on.

    The rule: the last iteration lowered the objective by less than ``tol`` relative to the
    one before, ``(J_{t-1} - J_t) / |J_{t-1}| < tol``.  ``outer_iterations`` bounds the loop
    apart from it.
    """
    objectives = [float(v) for v in objectives]
    if not tol or len(objectives) < 2:
        return None
    before, now = objectives[-2], objectives[-1]
    change = (before - now) / abs(before) if before else 0.0
    if change < tol:
        return (f"relative objective change {change:.3g} < tol {tol:g} after "
                f"{len(objectives)} outer iterations")
    return None


def no_gain(scores, n_iter_no_change: int) -> str | None:
    """Why the held-out pass of ``early_stopping`` ends after these held-out P@1 scores (one
    per completed iteration, oldest first), or None to go on: ``n_iter_no_change``
    iterations have passed since the best (the first of equal best scores), none of them
    higher."""
    scores = [float(v) for v in scores]
    if not scores:
        return None
    best = int(np.argmax(scores))
    if len(scores) - 1 - best >= int(n_iter_no_change):
        return (f"held-out P@1 {scores[best]:.4f} after iteration {best + 1}, not passed "
                f"in the {len(scores) - 1 - best} iterations after it")
    return None


def best_iteration(scores) -> int:
    """The number of iterations with the highest held-out P@1 (the first of equal best
    scores: fewer iterations for the same score)."""
    return int(np.argmax([float(v) for v in scores])) + 1


def early_stopping_rows(n: int, validation_fraction: float,
                        random_state) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``n`` that ``early_stopping`` fits on and those it holds out (both
    sorted): ``round(validation_fraction n)`` rows, drawn from ``random_state`` (an int;
    another value draws one from it) by :func:`~scarce.algorithms.leml.data.validation_rows` on the
    early-stopping stream, so a driver holding the same seed holds out the same rows."""
    seed = random_state
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
        seed = int(check_random_state(seed).randint(np.iinfo(np.int32).max))
    fit_rows, val_rows = validation_rows(int(n), float(validation_fraction), int(seed),
                                         EARLY_STOPPING_STREAM)
    if fit_rows.size == 0 or val_rows.size == 0:
        raise ValueError(f"early_stopping holds out {val_rows.size} of {n} rows "
                         f"(validation_fraction={validation_fraction}): it needs rows "
                         "on both sides")
    return fit_rows, val_rows


def split_rows(X, Y, mask, fit_rows, val_rows):
    """The rows ``fit_rows`` of the training data and the held-out rows ``val_rows``.

    Returns
    -------
    X_fit, Y_fit, mask_fit, X_val, Y_val
        ``Y_val``: the held-out rows' observed positive labels (sparse 0/1; an entry the
        mask leaves unobserved, or a NaN, is not a label there), what their P@1 is
        scored against.  ``mask_fit`` is None without a mask.
    """
    def rows(M, r):
        return None if M is None else M.tocsr()[r] if sp.issparse(M) else np.asarray(M)[r]

    Y_val = rows(Y, val_rows)
    Y_val = sp.csr_matrix(np.nan_to_num(Y_val, nan=0.0) if not sp.issparse(Y_val)
                          else Y_val)
    if mask is not None:
        Y_val = Y_val.multiply(sp.csr_matrix(rows(mask, val_rows), dtype=bool)).tocsr()
    return (rows(X, fit_rows), rows(Y, fit_rows), rows(mask, fit_rows), rows(X, val_rows),
            Y_val)


def held_out_pass(model, X, Y, mask, X_val, Y_val, k: int = 1) -> tuple[list[float], str]:
    """The alternation of ``model`` (a :class:`~scarce.algorithms.leml.LEML`) on ``X, Y, mask``
    from a fresh start, scoring P@``k`` of the held-out rows ``X_val`` against ``Y_val``
    after each outer iteration, until :func:`no_gain` or :func:`converged` says to stop or
    ``outer_iterations`` are done: the scores, and why it stopped.  What ``early_stopping``
    runs on the rows it holds out, and what a search over settings runs for each (the best
    count is :func:`best_iteration` of the scores)."""
    probe = clone(model).set_params(early_stopping=False, callback=None, verbose=False)
    data = probe.prepare(X, Y, mask)
    W, H = probe.start(data)
    Y_val = sp.csr_matrix(Y_val)
    scores, objectives = [], []
    for _ in range(int(model.outer_iterations)):
        W, _ = probe.w_step(data, W, H)
        H, _ = probe.h_step(data, W, H)
        objectives.append(probe.objective(data, W, H))
        top = probe.set_factors(W, H).predict_top_k(X_val, k)
        scores.append(float(precision_at_k(Y_val, top, ks=[k])[k]))
        reason = probe.no_gain(scores) or probe.converged(objectives)
        if reason is not None:
            return scores, reason
    return scores, f"outer_iterations = {model.outer_iterations} reached"


def fit_early_stopping(model, X, Y, mask, W_init, H_init, start_iter):
    """``model.fit`` with ``early_stopping``: the held-out pass, then all rows for
    ``best_iteration_`` iterations (see the parameter); returns ``model``, fitted."""
    model.check_params()
    if W_init is not None or H_init is not None or start_iter:
        raise ValueError("early_stopping chooses the iterations from a start of its own; "
                         "a warm start (W_init, H_init, start_iter) needs "
                         "early_stopping=False")
    X_fit, Y_fit, mask_fit, X_val, Y_val = model.early_stopping_split(X, Y, mask)
    scores, reason = model.held_out_pass(X_fit, Y_fit, mask_fit, X_val, Y_val)
    best = best_iteration(scores)
    log.info("LEML early stopping: %d outer iterations (%s)", best, reason)
    final = clone(model).set_params(early_stopping=False, outer_iterations=best)
    final.fit(X, Y, mask)
    model.__dict__.update({k: v for k, v in vars(final).items()
                           if k.endswith("_") and not k.startswith("_")})
    model.best_iteration_, model.validation_scores_ = best, scores
    return model
