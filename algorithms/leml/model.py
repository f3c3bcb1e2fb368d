"""LEML: low-rank empirical risk minimisation for multi-label learning (the estimator).

The estimator's step methods and its ``fit`` loop over them are this one scikit-learn class;
what they rest on lives by job beside it: the parameters' declaration, checks and what each
step reads (:mod:`scarce.algorithms.leml.params`), the factors' memory and the margin start
(:mod:`scarce.algorithms.leml.factors`), when the alternation stops
(:mod:`scarce.algorithms.leml.stopping`).

The model is ``Z = W H^T`` with ``W`` (d x k) and ``H`` (L x k); the decision
value of label ``j`` for instance ``x_i`` is ``x_i^T W h_j``.  Training minimises
over the observed entries ``Omega`` of the label matrix

    J(W, H) = sum_{(i, j) in Omega} loss(Y_ij, x_i^T W h_j)
              + (lam / 2) (||W||_F^2 + ||H||_F^2)

(Yu et al., Sec. 2: the trace-norm regulariser in its factored form, since
``||Z||_* = min_{Z = W H^T} (||W||_F^2 + ||H||_F^2) / 2``)

by alternating minimisation (Sec. 3): with ``H`` fixed the problem in ``W`` is a
``d k``-dimensional regularised ERM over the features ``x~_ij = h_j (x) x_i``
(:mod:`scarce.algorithms.leml.w_step`); with ``W`` fixed it splits into ``L`` independent
``k``-dimensional problems, one per label (:mod:`scarce.algorithms.leml.h_step`).

:class:`LEML` is the method.  Its step methods -- :meth:`~LEML.prepare`,
:meth:`~LEML.start`, :meth:`~LEML.w_step`, :meth:`~LEML.h_step`, :meth:`~LEML.objective`
-- are what an outside driver calls one at a time (the Prefect flow ``flows.leml`` stores
each step's result, keyed by :meth:`~LEML.step_params`), and :meth:`~LEML.fit` is the plain
loop over the same steps, as scikit-learn's ``partial_fit`` and ``fit``.

References
----------
H.-F. Yu, P. Jain, P. Kar and I. S. Dhillon, "Large-scale Multi-label Learning
with Missing Labels", ICML 2014.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, clone
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted
from tqdm.auto import tqdm

from scarce.algorithms.leml import params, stopping
from scarce.algorithms.leml.data import (
    LEMLData,
    check_factor,
    prepare_data,
)
from scarce.algorithms.leml.factors import check_factor_memory, check_factors, margin_factors
from scarce.algorithms.leml.h_step import update_H
from scarce.algorithms.leml.losses import get_loss
from scarce.algorithms.leml.objective import objective, objective_by_blocks
from scarce.algorithms.leml.params import AUTO, AUTO_SQUARED_INIT_ITER, STEPS, check_params
from scarce.algorithms.leml.params import DEFAULTS as _D
from scarce.algorithms.leml.predict import (
    BATCH_SIZE,
    check_new_X,
    embed,
    predict_top_k_in_batches,
    threshold_in_batches,
)
from scarce.algorithms.leml.w_step import update_W
from scarce.algorithms.memory import check_allocation
from scarce.algorithms.metrics.multilabel import precision_at_k

__all__ = ["AUTO", "AUTO_SQUARED_INIT_ITER", "LEML", "STEPS"]

log = logging.getLogger(__name__)



class LEML(BaseEstimator):
    """Low-rank multi-label learning with missing labels (Yu, Jain, Kar and Dhillon, 2014).

    Minimises ``sum_{(i,j) in Omega} loss(Y_ij, x_i^T W h_j) + lam/2 (||W||^2 + ||H||^2)``
    (Sec. 2, the factored trace-norm surrogate) by alternating W-steps and H-steps
    (Sec. 3), see :meth:`w_step` and :meth:`h_step`.

    Parameters
    ----------
    rank : int, default=50
        ``k``, the rank of ``Z = W H^T``.
    lam : float, default=1.0
        Regularisation ``lam > 0``.
    loss : {"squared", "logistic", "sqhinge"}, default="squared"
        See :mod:`scarce.algorithms.leml.losses`.  Squared loss fits the ``{0, 1}`` labels
        (threshold 0.5); logistic and squared hinge use ``{-1, +1}`` margins
        (threshold 0).
    outer_iterations : int, default=10
        Outer (alternating) iterations ``T``, counted from 0 also after a warm start: the
        most that run when ``tol`` stops the alternation earlier.
    tol : float, default=0.0
        Stop once an outer iteration lowers the objective by less than ``tol`` relative to
        the objective before it, ``(J_{t-1} - J_t) / |J_{t-1}| < tol`` (a rise counts as
        no progress); see :meth:`converged`.  0 runs all ``outer_iterations``.
    early_stopping : bool, default=False
        Choose the number of outer iterations on held-out rows: hold out
        ``validation_fraction`` of the rows (:meth:`early_stopping_split`), run the
        alternation on the others while the held-out rows' P@1 (against their observed
        labels) keeps rising (:meth:`no_gain`), then fit all the rows for the best number of
        iterations, ``best_iteration_``.  Training on all rows again recovers what holding
        the rows out costs; the held-out pass costs at most ``best_iteration_ +
        n_iter_no_change`` iterations more.
    validation_fraction : float, default=0.2
        The share of the rows held out by ``early_stopping``.
    n_iter_no_change : int, default=2
        ``early_stopping`` ends the held-out pass after this many iterations without a
        higher held-out P@1 than the best so far.
    cg_max_iter : int, default=10
        CG iterations per W-step (squared loss), or inner CG iterations per Newton
        step (other losses).  The W-step starts from the previous ``W``, so a few
        iterations suffice; every benchmark of ``scarce bench leml`` ran with 10.
    cg_tol : float, default=1e-3
        Relative residual at which CG stops.
    cg_preconditioner : {"none", "diagonal"}, default="none"
        The squared loss's W-step: plain CG, as in the paper, or CG preconditioned by
        ``c H^T H (x) diag(X^T X) + lam I``, the Hessian with ``X^T X`` kept to its
        diagonal (inverted exactly in the eigenbasis of ``H^T H``; see
        :func:`~scarce.algorithms.leml.w_step.kronecker_preconditioner`); with missing labels
        each row's squares weighted by the share of its labels observed, the Hessian's
        expectation when a row's observed labels are a uniform draw.  It reaches a given
        objective in far fewer Hessian-vector products, so fewer CG and outer iterations
        are needed, and those counts are chosen with it (on a validation split).  The
        margin losses' bound W-step (``w_solver="bound"``) preconditions its CG alike
        above 4096 features; TRON's CG runs unpreconditioned, and the estimator logs a
        warning when this is set for a TRON W-step.
    newton_max_iter : int, default=3
        Newton steps (or bound steps, see ``w_solver`` and ``h_solver``) per
        half-step for the logistic and squared-hinge losses.
    fit_intercept : bool, default=True
        Add a constant feature; its weights are the last row of ``W_`` (regularised
        like the others).
    h_solver : {"auto", "direct", "cg", "bound"}, default="auto"
        ``"auto"``: ``"bound"`` with ``cg_preconditioner="diagonal"``, else ``"direct"``
        (:meth:`resolved_params`).
        Newton directions of the H-step for the logistic and squared-hinge losses:
        explicit ``k x k`` Hessians per label (``O(|Omega| k^2)`` per Newton step)
        or at most ``cg_max_iter`` conjugate-gradient iterations of
        ``O(|Omega| k)`` each; or ``"bound"``: ``newton_max_iter``
        majorise-minimise steps on the quadratic bound of curvature
        ``c = loss.curvature_bound`` (1/4 logistic, 2 squared hinge), each one
        gradient and a solve with matrices formed once per H-step, see
        :func:`~scarce.algorithms.leml.h_step.update_H`.  No effect on the squared loss.
    w_solver : {"auto", "tron", "bound"}, default="auto"
        ``"auto"``: ``"bound"`` with ``cg_preconditioner="diagonal"`` (``"tron"`` on a
        backend of row blocks: the bound W-step runs in one process), else ``"tron"``
        (:meth:`resolved_params`).
        W-step of the logistic and squared-hinge losses: TRON with
        Hessian-vector products over ``Omega``, or ``newton_max_iter``
        majorise-minimise steps on the same quadratic bound, each one gradient
        and an exact solve of ``c X^T X S H^T H + lam S = -grad`` through the
        eigendecomposition of ``X^T X`` (computed once per data), see
        :func:`~scarce.algorithms.leml.w_step.update_W`.  No effect on the squared loss.
    squared_init_iter : int or "auto", default="auto"
        ``"auto"``: :data:`AUTO_SQUARED_INIT_ITER` for the logistic and squared-hinge
        losses with ``cg_preconditioner="diagonal"`` when ``fit_intercept=True`` and
        ``rank >= 2`` (else 0, with a warning), else 0 (:meth:`resolved_params`).
        Logistic and squared-hinge losses only (needs ``fit_intercept=True``): when
        positive, :meth:`start` begins with ``squared_init_iter`` alternating
        iterations of the squared loss (cheap when every label is observed) at rank
        ``k - 1``, mapped to the ``{-1, +1}`` margins: with ``Z = X W H^T`` the
        squared-loss fit of the 0/1 labels, the starting factors
        ``W0 = [sqrt(2) W, -c e]`` and ``H0 = [sqrt(2) H, 1 / c]`` (``e`` the
        intercept row, ``c = L^(1/4)`` balancing the two norms) give exactly
        ``X W0 H0^T = 2 Z - 1``.  Those iterations are not counted in
        ``outer_iterations``, ``objective_`` or ``n_iter_`` and do not call
        ``callback``.  Ignored for the squared loss.
    dtype : {"float32", "float64"}, default="float32"
        Working floating type of the data and the factors (a numpy type such as
        ``np.float64`` works too).
    random_state : int, RandomState instance or None, default=None
        Seeds the random initial ``H`` (normal, scaled by ``1/sqrt(k)``; ``W``
        starts at zero), see :meth:`start`.
    verbose : bool, default=False
        Show a tqdm progress bar over outer iterations with the objective.
    callback : callable, optional
        ``callback(iteration, seconds, objective)`` after each outer iteration
        (``iteration`` counts completed iterations, from 1; ``seconds`` is that
        iteration's wall time).  ``W_`` and ``H_`` already hold that iteration's
        factors when it is called.

    Attributes
    ----------
    W_ : ndarray of shape (n_features + fit_intercept, k)
    H_ : ndarray of shape (n_labels, k)
    objective_ : list of float
        Objective after each outer iteration of the last ``fit`` call.
    n_iter_ : int
        Outer iterations completed in total (including those before a warm start).
    best_iteration_ : int
        With ``early_stopping``: the number of outer iterations chosen on the held-out rows
        (and run on all rows).
    validation_scores_ : list of float
        With ``early_stopping``: the held-out rows' P@1 after each iteration of the
        held-out pass.
    threshold_ : float
        Decision threshold used by :meth:`predict`.
    squared_init_iter_, w_solver_, h_solver_ : int, str, str
        The values :meth:`fit` ran with (:meth:`resolved_params`: ``"auto"`` resolved).
    n_features_in_ : int
    n_labels_ : int

    References
    ----------
    H.-F. Yu, P. Jain, P. Kar and I. S. Dhillon, "Large-scale Multi-label Learning
    with Missing Labels", ICML 2014.

    Examples
    --------
    The loop of :meth:`fit`, one step at a time (as the Prefect flow runs it)::

        model = LEML(rank=8, random_state=0)
        data = model.prepare(X, Y)
        W, H = model.start(data)
        for _ in range(model.outer_iterations):
            W, _ = model.w_step(data, W, H)
            H, _ = model.h_step(data, W, H)
        model.set_factors(W, H).predict_top_k(X_test, 5)
    """

    # The defaults (and bounds) are declared once, in algorithms.leml.params.
    def __init__(self, rank=_D["rank"], lam=_D["lam"], loss=_D["loss"],
                 outer_iterations=_D["outer_iterations"], tol=_D["tol"],
                 early_stopping=_D["early_stopping"],
                 validation_fraction=_D["validation_fraction"],
                 n_iter_no_change=_D["n_iter_no_change"], cg_max_iter=_D["cg_max_iter"],
                 cg_tol=_D["cg_tol"], cg_preconditioner=_D["cg_preconditioner"],
                 newton_max_iter=_D["newton_max_iter"], fit_intercept=_D["fit_intercept"],
                 h_solver=_D["h_solver"], w_solver=_D["w_solver"],
                 squared_init_iter=_D["squared_init_iter"], dtype=_D["dtype"],
                 random_state=None, verbose=False, callback=None):
        self.rank = rank
        self.lam = lam
        self.loss = loss
        self.outer_iterations = outer_iterations
        self.tol = tol
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.cg_max_iter = cg_max_iter
        self.cg_tol = cg_tol
        self.cg_preconditioner = cg_preconditioner
        self.newton_max_iter = newton_max_iter
        self.fit_intercept = fit_intercept
        self.h_solver = h_solver
        self.w_solver = w_solver
        self.squared_init_iter = squared_init_iter
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback

    # -- parameters
    def check_params(self, *, distributed: bool = False) -> LEML:
        """Validate the parameters (what every step method does first).

        Parameters
        ----------
        distributed : bool, default=False
            Also check that the W-step can run on a backend (``w_step(backend=...)``):
            ``w_solver="bound"`` of a margin loss cannot.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            Naming the parameter, what it was and what was expected.
        """
        check_params(self.get_params(), distributed=distributed)
        return self

    def check_memory(self, n_samples: int, n_features: int, n_labels: int, *,
                     fully_observed: bool = True, what: str = "") -> LEML:
        """Raise :class:`~scarce.algorithms.memory.MemoryBudgetError` unless the factors at this
        ``rank`` fit for data of these sizes (``n_features`` without the intercept): the
        check :meth:`start` makes, for a driver that knows the sizes before reading the data.
        ``what`` opens the message (where the sizes come from)."""
        self.check_params()
        check_factor_memory(n_samples, int(n_features) + int(bool(self.fit_intercept)),
                            n_labels, int(self.rank), self.dtype, fully_observed, what)
        return self

    def converged(self, objectives) -> str | None:
        """Why the alternation stops by ``tol`` after these objectives (one per completed
        outer iteration of this fit, oldest first), or None to go on
        (:func:`scarce.algorithms.leml.stopping.converged`).  A driver that runs the steps itself
        (the flow) asks here after each iteration, as :meth:`fit` does."""
        return stopping.converged(objectives, self.tol)

    def no_gain(self, scores) -> str | None:
        """Why the held-out pass of ``early_stopping`` ends after these held-out P@1 scores
        (one per completed iteration, oldest first), or None to go on
        (:func:`scarce.algorithms.leml.stopping.no_gain`).  A driver that runs the steps itself (the
        flow) asks here, as :meth:`fit` does."""
        return stopping.no_gain(scores, self.n_iter_no_change)

    @staticmethod
    def best_iteration(scores) -> int:
        """The number of iterations with the highest held-out P@1 (the first of equal best
        scores: fewer iterations for the same score)."""
        return stopping.best_iteration(scores)

    def early_stopping_rows(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows of ``n`` that ``early_stopping`` fits on and those it holds out (both
        sorted), see :meth:`early_stopping_split`."""
        self.check_params()
        return stopping.early_stopping_rows(n, self.validation_fraction, self.random_state)

    def early_stopping_split(self, X, Y, mask=None):
        """The rows ``early_stopping`` fits on and those it holds out
        (:func:`scarce.algorithms.leml.stopping.split_rows` of :meth:`early_stopping_rows`):
        ``X_fit, Y_fit, mask_fit, X_val, Y_val``."""
        n = X.shape[0] if hasattr(X, "shape") else len(X)
        return stopping.split_rows(X, Y, mask, *self.early_stopping_rows(n))

    def resolved_params(self, *, distributed: bool = False) -> dict:
        """The values the steps use for ``squared_init_iter``, ``w_solver`` and ``h_solver``
        (``"auto"`` resolved by the rest of the setting):
        :func:`scarce.algorithms.leml.params.resolved_params`."""
        return params.resolved_params(self.get_params(deep=False), distributed=distributed)

    def interaction_warnings(self, *, distributed: bool = False) -> list[str]:
        """The settings that turn off something another setting relies on, one line each
        (what :meth:`fit` and the flow log as warnings):
        :func:`scarce.algorithms.leml.params.interaction_warnings`."""
        return params.interaction_warnings(self.get_params(deep=False), distributed=distributed)

    def resolve_params(self, *, distributed: bool = False) -> dict:
        """:meth:`resolved_params`, having logged what ``"auto"`` resolved to (INFO) and
        :meth:`interaction_warnings` (WARNING): what :meth:`fit` and a driver that runs the
        steps (the flow) call once before the steps."""
        resolved = self.resolved_params(distributed=distributed)
        chosen = [f"{name} auto -> {resolved[name]}" for name in resolved
                  if getattr(self, name) == AUTO]
        if chosen and get_loss(self.loss).name != "squared":
            log.info("LEML with the %s loss: %s", self.loss, ", ".join(chosen))
        for line in self.interaction_warnings(distributed=distributed):
            log.warning("LEML: %s", line)
        return resolved

    def squared_start(self) -> bool:
        """Whether :meth:`start` begins with squared-loss iterations (a margin loss with
        ``squared_init_iter > 0``, resolved) rather than a random start alone."""
        return params.squared_start(self.get_params(deep=False))

    def step_params(self, step: str, *, distributed: bool = False) -> dict:
        """The parameters that step ``step`` reads, with their values (``"auto"`` resolved):
        what a driver that stores the step's results keys them by
        (:func:`scarce.algorithms.leml.params.step_params`, where each step's are listed).

        Parameters
        ----------
        step : {"start", "w_step", "h_step", "objective", "predict", "early_stopping_split"}
        distributed : bool, default=False
            The step runs on a backend (row blocks), as ``w_step(backend=...)``.
        """
        return params.step_params(self.get_params(deep=False), step, distributed=distributed)

    # -- the steps
    def prepare(self, X, Y, mask=None) -> LEMLData:
        """The training data, validated and converted once for the other steps.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n, d)
        Y : {array-like, sparse matrix} of shape (n, L)
            Labels in ``{0, 1}``; a dense ``Y`` may hold NaN for missing entries.
        mask : {array-like, sparse matrix} of shape (n, L), optional
            Observed entries; None means every (non-NaN) entry is observed.

        Returns
        -------
        LEMLData
            See :func:`~scarce.algorithms.leml.data.prepare_data` (with this estimator's
            ``fit_intercept`` and ``dtype``).
        """
        self.check_params()
        return prepare_data(X, Y, mask, fit_intercept=self.fit_intercept, dtype=self.dtype)

    def _random_start(self, data: LEMLData):
        """``W = 0`` and ``H ~ N(0, 1/k)`` entrywise, from ``random_state``."""
        check_factors(data, int(self.rank))
        rng = check_random_state(self.random_state)
        k = int(self.rank)
        H = (rng.standard_normal((data.n_labels, k)) / math.sqrt(k)).astype(data.dtype)
        return np.zeros((data.n_features, k), dtype=data.dtype), H

    def start(self, data: LEMLData, *, backend=None) -> tuple[np.ndarray, np.ndarray]:
        """The starting factors of the alternation (:meth:`fit` without a warm start).

        ``W = 0`` and ``H ~ N(0, 1/k)`` entrywise, drawn from ``random_state``.  For
        a margin loss with ``squared_init_iter > 0``: that many alternating
        iterations of the squared loss at rank ``k - 1``, from ``W = 0`` and the
        first ``k - 1`` columns of that ``H``, mapped to the margins (see the
        parameter ``squared_init_iter``).

        Parameters
        ----------
        data : LEMLData
            From :meth:`prepare`.
        backend : object, optional
            Row blocks of ``data`` on which the squared-loss iterations take their
            products and sums, as for :meth:`w_step` and :meth:`h_step` (a random start
            does not use it).

        Returns
        -------
        W : ndarray of shape (d', rank)
        H : ndarray of shape (L, rank)
        """
        self.check_params()
        W, H = self._random_start(data)
        if not self.squared_start():
            return W, H
        squared = clone(self).set_params(loss="squared", squared_init_iter=0)
        W, H = np.zeros_like(W[:, :-1]), np.ascontiguousarray(H[:, :-1])
        for _ in range(int(self.resolved_params()["squared_init_iter"])):
            W, _ = squared.w_step(data, W, H, backend=backend)
            H, _ = squared.h_step(data, W, H, backend=backend)
        return margin_factors(W, H, data.n_labels)

    def w_step(self, data: LEMLData, W, H, *, backend=None) -> tuple[np.ndarray, dict]:
        """One W-step: ``W`` minimising ``J(., H)`` (Yu et al., Sec. 3), from ``W``.

        Parameters
        ----------
        data : LEMLData
            From :meth:`prepare`.
        W : ndarray of shape (d', k)
            The warm start.
        H : ndarray of shape (L, k)
        backend : object, optional
            Where the products run (for example ``tasks.leml_dask.RowBlockBackend``, row
            blocks on Dask workers); see :func:`~scarce.algorithms.leml.w_step.update_W`.

        Returns
        -------
        W : ndarray of shape (d', k)
        info : dict
            ``cg_iter`` (Hessian-vector products) and ``newton_iter``.
        """
        self.check_params(distributed=backend is not None)
        w_solver = self.resolved_params(distributed=backend is not None)["w_solver"]
        return update_W(data, H, self.lam, self.loss, W0=W, cg_max_iter=int(self.cg_max_iter),
                        cg_tol=float(self.cg_tol), newton_max_iter=int(self.newton_max_iter),
                        w_solver=w_solver, backend=backend,
                        preconditioner=self.cg_preconditioner)

    def h_step(self, data: LEMLData, W, H, *, backend=None) -> tuple[np.ndarray, dict]:
        """One H-step: ``H`` minimising ``J(W, .)``, all labels at once (Yu et al., Sec. 3).

        Parameters
        ----------
        data : LEMLData
            From :meth:`prepare`.
        W : ndarray of shape (d', k)
        H : ndarray of shape (L, k)
            Start of the Newton iterations of the margin losses (the squared loss's
            H-step is exact and does not use it).
        backend : object, optional
            Row blocks of ``data`` to take the sums from, block by block
            (:class:`~scarce.algorithms.leml.h_step.LocalBlocks`, or
            ``tasks.leml_dask.RowBlockBackend`` on Dask workers); without it ``data`` is one
            block in this process.  Every solver runs on either
            (:func:`~scarce.algorithms.leml.h_step.update_H`): equal up to the order of the
            additions (rounding).

        Returns
        -------
        H : ndarray of shape (L, k)
        info : dict
            ``newton_iter``, and ``cg_iter`` for ``h_solver="cg"``.
        """
        self.check_params()
        h_solver = self.resolved_params()["h_solver"]
        if backend is not None and ((backend.n_features, backend.n_labels)
                                    != (data.n_features, data.n_labels)):
            raise ValueError(f"the backend's blocks have {backend.n_features} features and "
                             f"{backend.n_labels} labels, the data {data.n_features} and "
                             f"{data.n_labels}")
        return update_H(data if backend is None else backend, W, self.lam, self.loss, H0=H,
                        newton_max_iter=int(self.newton_max_iter), h_solver=h_solver,
                        cg_max_iter=int(self.cg_max_iter), cg_tol=float(self.cg_tol))

    def objective(self, data: LEMLData, W, H, *, backend=None) -> float:
        """The objective ``J(W, H)`` on ``data`` (Yu et al., Sec. 2), summed in float64.

        With ``backend`` (row blocks of ``data``, as for :meth:`h_step`) the loss term is
        summed block by block where the blocks are, in block order
        (:func:`~scarce.algorithms.leml.objective.objective_by_blocks`): equal up to rounding.
        """
        self.check_params()
        if backend is not None:
            return objective_by_blocks(backend, W, H, self.lam, self.loss)
        return objective(data, W, H, self.lam, self.loss)

    # -- fitting
    def set_factors(self, W, H) -> LEML:
        """Take ``W`` and ``H`` as the fitted model (what :meth:`fit` ends with).

        A driver that ran the steps itself (or read their results from a store)
        predicts through the estimator's own :meth:`predict_top_k`,
        :meth:`decision_function` and :meth:`predict`.

        Parameters
        ----------
        W : ndarray of shape (n_features + fit_intercept, k)
        H : ndarray of shape (n_labels, k)

        Returns
        -------
        self
        """
        W = np.asarray(W)
        H = np.asarray(H, dtype=W.dtype)
        if W.ndim != 2 or H.ndim != 2 or W.shape[1] != H.shape[1]:
            raise ValueError(f"W has shape {W.shape} and H {H.shape}; expected (d', k) and "
                             "(L, k) with the same k")
        self.W_, self.H_ = W, H
        self.n_features_in_ = W.shape[0] - int(self.fit_intercept)
        self.n_labels_ = H.shape[0]
        self.threshold_ = get_loss(self.loss).threshold
        return self

    def fit(self, X, Y, mask=None, *, W_init=None, H_init=None, start_iter: int = 0):
        """Fit ``W_`` and ``H_`` by alternating minimisation: :meth:`start`, then
        ``outer_iterations`` times :meth:`w_step` and :meth:`h_step`, or fewer when ``tol``
        says the objective has stopped falling (:meth:`converged`).

        Parameters
        ----------
        X, Y, mask
            The training data, as for :meth:`prepare`.
        W_init, H_init : ndarray, optional
            Warm start, shapes ``(d + fit_intercept, rank)`` and ``(L, rank)``
            (e.g. the factors stored after iteration ``start_iter``); a factor not
            given starts as in :meth:`start` without the squared-loss start.
        start_iter : int, default=0
            Outer iterations already done; the loop runs ``start_iter+1 ..
            outer_iterations`` and a resumed run ends with the same factors as an
            uninterrupted one.

        Returns
        -------
        self
        """
        if self.early_stopping:
            return self._fit_early_stopping(X, Y, mask, W_init, H_init, start_iter)
        data = self.prepare(X, Y, mask)
        resolved = self.resolve_params()
        self.squared_init_iter_, self.w_solver_, self.h_solver_ = (
            resolved["squared_init_iter"], resolved["w_solver"], resolved["h_solver"])
        start_iter = int(start_iter)
        if start_iter < 0:
            raise ValueError(f"start_iter must be non-negative, got {start_iter}")
        if start_iter > 0 and (W_init is None or H_init is None):
            raise ValueError("start_iter > 0 needs both W_init and H_init")
        if W_init is None and H_init is None:
            W, H = self.start(data)
        else:
            W, H = self._random_start(data)
            k = int(self.rank)
            if H_init is not None:
                H = check_factor(H_init, (data.n_labels, k), data.dtype, "H_init")
            if W_init is not None:
                W = check_factor(W_init, (data.n_features, k), data.dtype, "W_init")

        self.set_factors(W, H)
        self.objective_ = []
        bar = tqdm(range(start_iter, int(self.outer_iterations)), disable=not self.verbose,
                   desc="LEML", unit="it")
        for t in bar:
            t0 = time.perf_counter()
            W, w_info = self.w_step(data, W, H)
            t1 = time.perf_counter()
            H, _ = self.h_step(data, W, H)
            t2 = time.perf_counter()
            obj = self.objective(data, W, H)
            seconds = time.perf_counter() - t0
            log.debug("iteration %d: W-step %.3fs (%d CG), H-step %.3fs, objective %.6g",
                      t + 1, t1 - t0, w_info["cg_iter"], t2 - t1, obj)
            self.set_factors(W, H)
            self.objective_.append(obj)
            self.n_iter_ = t + 1
            bar.set_postfix(objective=f"{obj:.6g}")
            if self.callback is not None:
                self.callback(t + 1, seconds, obj)
            reason = self.converged(self.objective_)
            if reason is not None:
                log.info("LEML stops: %s", reason)
                return self
        self.n_iter_ = max(start_iter, int(self.outer_iterations))
        return self

    def held_out_pass(self, X, Y, mask, X_val, Y_val, k: int = 1) -> tuple[list[float], str]:
        """The alternation on ``X, Y, mask`` from a fresh start, scoring P@``k`` of the
        held-out rows after each outer iteration until :meth:`no_gain` or :meth:`converged`
        says to stop: the scores, and why it stopped
        (:func:`scarce.algorithms.leml.stopping.held_out_pass`)."""
        return stopping.held_out_pass(self, X, Y, mask, X_val, Y_val, k)

    def _fit_early_stopping(self, X, Y, mask, W_init, H_init, start_iter) -> LEML:
        """``fit`` with ``early_stopping``: the held-out pass, then all rows for
        ``best_iteration_`` iterations
        (:func:`scarce.algorithms.leml.stopping.fit_early_stopping`)."""
        return stopping.fit_early_stopping(self, X, Y, mask, W_init, H_init, start_iter)

    # -- prediction
    def _embed(self, X):
        """``A = X W + intercept`` (n x k) for new ``X``."""
        check_is_fitted(self, ("W_", "H_"))
        X = check_new_X(X, self.W_.dtype, self.n_features_in_, "LEML")
        return embed(X, self.W_, self.fit_intercept)

    def decision_function(self, X) -> np.ndarray:
        """Decision values ``X W H^T`` (n x L, dense; for large L use :meth:`predict_top_k`)."""
        A = self._embed(X)
        check_allocation((A.shape[0], self.H_.shape[0]), A.dtype,
                         what="LEML decision_function (n x L)",
                         advice="score row batches with predict_top_k or predict (batch_size), "
                         "or pass fewer rows at a time")
        return A @ self.H_.T

    def predict(self, X, batch_size: int = BATCH_SIZE) -> sp.csr_matrix:
        """Labels with decision value above ``threshold_``, as a sparse 0/1 matrix (int8).

        The threshold is 0.5 for the squared loss (fitted to ``{0, 1}``) and 0 for
        the logistic and squared-hinge losses (fitted to ``{-1, +1}`` margins).
        """
        A = self._embed(X)
        return threshold_in_batches(lambda s, e: A[s:e] @ self.H_.T, A.shape[0],
                                    self.threshold_, batch_size, n_labels=self.H_.shape[0])

    def score(self, X, Y, batch_size: int = BATCH_SIZE) -> float:
        """Precision at 1 on ``X`` against the 0/1 label matrix ``Y``: the share of rows
        whose best label is one of theirs.  Greater is better, so ``GridSearchCV`` and
        ``cross_val_score`` use it without a scorer of their own."""
        top = self.predict_top_k(X, 1, batch_size)
        return float(precision_at_k(sp.csr_matrix(Y), top, ks=[1])[1])

    def predict_top_k(self, X, k: int = 5, batch_size: int = BATCH_SIZE, *,
                      return_scores: bool = False):
        """The ``k`` labels of highest decision value per row, best first.

        Scores ``batch_size`` rows at a time, so no n x L matrix is allocated.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n, n_features_in_)
        k : int, default=5
            Labels per row (at most ``n_labels_``).
        batch_size : int, default=BATCH_SIZE
            Rows scored at a time.
        return_scores : bool, default=False
            Also return the decision values of the selected labels (as scikit-learn's
            ``kneighbors`` returns distances with ``return_distance``).

        Returns
        -------
        labels : ndarray of shape (n, min(k, n_labels_)), int64
        scores : ndarray of shape (n, min(k, n_labels_))
            Only with ``return_scores``: ``x_i^T W h_j`` of each label, in ``W_``'s dtype.
        """
        A = self._embed(X)
        return predict_top_k_in_batches(lambda s, e: A[s:e] @ self.H_.T, A.shape[0], k,
                                        batch_size, return_scores=return_scores,
                                        n_labels=self.H_.shape[0])
