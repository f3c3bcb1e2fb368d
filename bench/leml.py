"""LEML against the published row, ridge, binary relevance and extreme-classification libraries.

Its sections share one data set, one grid and one table; the sections that need no grid live in
modules of their own (peers, w-step, distributed, partition).

Sections (``--sections``, comma-separated):

* ``accuracy``: P@1/3/5 and instance AUC on the test split of each dataset
  (``*_xmlrepo_*`` files).  LEML's rank ``k``, ``lam`` and number of outer
  iterations (early stopping on validation P@1) are chosen on a seeded validation
  part of the training set, then refitted on the whole training set; the same is
  done for the ridge penalty of full-rank ridge (closed form) and binary relevance.
  The published LEML row of the Extreme Classification Repository is printed next
  to them.
* ``missing``: 20% / 40% of the training label matrix observed (uniformly at random,
  seeded); LEML against binary-relevance ridge on the same observed entries, P@1 and
  AUC on the fully labelled test set.  Settings are chosen on the validation rows
  scored against their *observed* labels only (the unobserved ones are unknown to a
  user too).
* ``speed``: training seconds of LEML (at the setting chosen in ``accuracy``, or the rank and
  ``lam`` of ``--set``, by default LEML's), one-vs-rest ridge (every label at
  once in closed form) and logistic regression (scikit-learn), full-rank ridge and omikuji,
  one BLAS thread each, in the same run; as ratios to LEML, with the test P@1 each reaches.
  ``scarce bench baselines`` times BR ridge against a plain closed-form ridge.
* ``peers``: LEML at the ``speed`` section's setting against PECOS XR-Linear, napkinXC PLT
  and omikuji, each run in a fresh single-threaded process: training seconds, prediction
  milliseconds per 1,000 test rows, the peak memory training adds, P@1/3/5, ratios to LEML;
  medians over ``--repeats`` with the order rotated.  The peers run with the interpreter
  ``--peer-python`` (an environment with ``pip install libpecos napkinxc omikuji``;
  libpecos pulls in torch, so it is not in the ``bench`` extra) (:mod:`scarce.bench.leml_peers`).
* ``scaling``: one W-step on 1x, 2x, 4x stacked copies of the training data, fully
  observed squared loss and 20% observed; its time ratio against the growth of
  ``nnz(X) + nnz(Y)`` (fully observed) or ``nnz(X) + |Omega|``, and against the bare
  sparse products it needs (CG iterations x (``X V`` + ``X^T U``)).
* ``w-step``: one W-step (squared loss, k=50,
  10 CG iterations, float32; Bibtex fully observed also float64) on a Dask LocalCluster
  with 1 and then 2 single-threaded worker processes (``LEML.w_step`` with a
  ``tasks.leml_dask.RowBlockBackend`` backend, row blocks scattered once), on Bibtex (fully
  observed and 20% observed) and on the synthetic Wikipedia-shaped problem at
  ``--synthetic-scale`` (default 0.1 here): seconds, max |W_dask - W_single| /
  max |W_single|, whether 2 workers give the 1-worker W bit for bit, CG's own
  sensitivity (the single-process solve with its right-hand side and every product
  moved by one ulp; relative differences are printed times 1e6)
  and each worker's peak RSS.  A fresh cluster per problem, so the peaks are that
  problem's (:mod:`scarce.bench.leml_w_step`).
* ``distributed``: the whole LEML flow (``scarce run leml``, 3 iterations, k = 50) on the
  synthetic problem written as folders of Parquet parts, in one process and on 1 and 2 Dask
  workers: wall and iteration seconds, the peak RSS of the flow's process and of each
  worker, P@k, and the factors against the one-process run (:mod:`scarce.bench.leml_cluster`).
* ``partition``: one row block of a stored CSR matrix read as a partition task reads it
  (``tasks.store.encoding.read_rows``) against the whole entry read and sliced, each in a fresh
  process: seconds and peak RSS (:mod:`scarce.bench.leml_partition`).

LEML's parameters are given by ``--set KEY=VALUE`` (repeatable; the keys of the config's
``model`` section, checked as ``scarce run --set model.KEY=VALUE`` checks them) and apply to
every section's fits, but for what a section chooses itself (the grids' rank, ``lam``, loss
and iterations, chosen without early stopping).  A parameter not given keeps the estimator's
default (``LEML``'s signature is the one source of defaults).

Features are preprocessed by ``--features`` (``raw``, ``l2``: rows scaled to unit
norm, ``tfidf``: scikit-learn's TfidfTransformer fitted on train), identically for
every method.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from scarce.algorithms.leml import (
    LEML,
    BinaryRelevance,
    ClosedFormLowRank,
    prepare_data,
)
from scarce.algorithms.metrics.multilabel import multilabel_scores, precision_at_k
from scarce.bench.leml_common import (
    _best_time,
    _load,
    _mask,
    _one_w_step,
    _preprocess,
    _say,
    _timed,
    estimator_params,
    split_files,
)
from scarce.bench.leml_peer_child import omikuji_top_k, write_xc
from scarce.bench.leml_peers import as_ranking
from scarce.bench.leml_peers import run_section as peers_section
from scarce.bench.synthetic import WIKI, synthetic_wikipedia
from scarce.flows.published import LEML_XC
from scarce.tasks.leml import validation_rows

SECTIONS = ("accuracy", "missing", "speed", "peers", "scaling", "synthetic", "w-step",
            "distributed", "partition")
# Extreme Classification Repository, LEML row (P@1, P@3, P@5, in %).
PUBLISHED = {name: tuple(row.values()) for name, row in LEML_XC.items()}
COLUMNS = ["section", "dataset", "method", "setting", "metric", "value"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from scarce.algorithms.leml.params import LOSS_NAMES
    from scarce.bench.leml_cluster import MODES
    from scarce.flows.commands.types import (
        POSITIVE,
        SEED,
        NumberList,
        comma_list,
        config_number,
        integer,
    )
    from scarce.flows.commands.types import number as finite
    from scarce.flows.config import project_root
    from scarce.flows.leml import LemlConfig

    def key(name: str):  # an option setting a config key takes the key's bounds
        return config_number(LemlConfig, name)

    parser.add_argument("--data", type=Path, default=project_root() / "data",
                        help="folder holding xmc/<name>/<name>_xmlrepo_{train,test}.txt.gz")
    # any Extreme Classification set: a name without its files under --data is skipped
    parser.add_argument("--datasets", type=comma_list(), default=["bibtex", "delicious"],
                        help="comma-separated data sets, each read from "
                        "xmc/<name>/<name>_<split>_{train,test}.txt.gz under --data (skipped "
                        "when absent; one at least must be there, checked before any work)")
    parser.add_argument("--sections", type=comma_list(SECTIONS), default=list(SECTIONS),
                        help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true", help="a reduced run (< 2 minutes)")
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--validation-fraction", type=key("dataset.validation_fraction"),
                        default=0.2)
    parser.add_argument("--features", choices=["raw", "l2", "tfidf"], default="l2")
    parser.add_argument("--set", dest="estimator", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="a parameter of LEML for every fit of the bench (a key of the "
                        "config's model section, checked as `scarce run --set model.KEY` is: "
                        "loss, rank, lam, outer_iterations, early_stopping, cg_max_iter, "
                        "h_solver, ...); the grids of accuracy and missing choose rank, lam, "
                        "loss and the iterations themselves (from --ranks, --lams, --losses, "
                        "at most outer_iterations: default 15, 4 with --quick; no early "
                        "stopping)")
    parser.add_argument("--losses", type=comma_list(LOSS_NAMES), default=None,
                        help="LEML losses in the accuracy and missing sections, comma-separated "
                        f"subset of {','.join(LOSS_NAMES)} (default squared)")
    parser.add_argument("--ranks", type=NumberList(key("model.rank")), default=None,
                        help="LEML ranks to try")
    parser.add_argument("--lams", type=NumberList(key("model.lam")), default=None,
                        help="LEML lam values to try (times the mean squared row norm of X)")
    parser.add_argument("--alphas", type=NumberList(key("baseline_alpha")), default=None,
                        help="ridge penalties to try (times the mean squared row norm of X)")
    parser.add_argument("--observed", type=NumberList(key("observed_fraction")),
                        default=[0.2, 0.4],
                        help="observed fractions in the missing-label section")
    parser.add_argument("--scales", type=NumberList(POSITIVE), default=[1, 2, 4],
                        help="copies of the data in the scaling section")
    parser.add_argument("--br-accuracy", action=argparse.BooleanOptionalAction, default=True,
                        help="also fit BR ridge in the accuracy section")
    parser.add_argument("--br-logistic", action=argparse.BooleanOptionalAction, default=True,
                        help="time scikit-learn BR logistic in the speed section")
    parser.add_argument("--split", choices=["xmlrepo", "mulan"], default="xmlrepo",
                        help="the public train / test split read: <name>_<split>_{train,test}"
                        ".txt.gz (the Extreme Classification Repository's or Mulan's)")
    parser.add_argument("--repeats", type=POSITIVE, default=3,
                        help="timing repeats (best kept; the median in the peers section)")
    parser.add_argument("--peer-python", type=Path, default=None,
                        help="peers section: the Python interpreter that runs PECOS, napkinXC "
                        "and omikuji, from an environment with pip install libpecos napkinxc "
                        "omikuji (default: this one; a peer missing there is skipped)")
    parser.add_argument("--synthetic-scale", type=finite(0, low_open=True), default=None,
                        help="size of the synthetic Wikipedia-shaped problem as a fraction "
                        "of the real one (points, features and labels); default 1 in the "
                        "synthetic section, 0.1 in the w-step and distributed ones")
    parser.add_argument("--dask-memory-limit", default="6GiB",
                        help="memory limit of each Dask worker in the w-step and "
                        "distributed sections")
    parser.add_argument("--modes", type=comma_list(MODES), default=["local", "dask-1", "dask-2"],
                        help="distributed section: the runs to compare, comma-separated subset "
                        f"of {','.join(MODES)} (bench.leml_cluster)")
    parser.add_argument("--parts", type=POSITIVE, default=4,
                        help="distributed section: Parquet parts (row blocks) of the "
                        "training and test sets")
    parser.add_argument("--flow-iterations", type=key("model.outer_iterations"), default=3,
                        help="distributed section: the flow's alternating iterations")
    parser.add_argument("--partition-shape", type=NumberList(POSITIVE, sep="x", length=2),
                        default=(400_000, 100_000),
                        help="partition section: rows x features of the stored matrix")
    parser.add_argument("--partition-row-nnz", type=POSITIVE, default=50,
                        help="partition section: entries a row")
    parser.add_argument("--partition-blocks", type=POSITIVE, default=8,
                        help="partition section: row blocks the matrix is cut into")
    parser.add_argument("--partition-block", type=integer(0), default=3,
                        help="partition section: the block read (0-based)")


# --------------------------------------------------------------------------- data
# The flow's own split and mask (the plain functions of its steps), so the bench chooses on
# the validation rows a run holds out.
_split = validation_rows


# --------------------------------------------------------------------------- scoring
def _scores(model, X, Y) -> dict[str, float]:
    m = multilabel_scores(Y, lambda s, e: model.decision_function(X[s:e]),
                          threshold=model.threshold_)
    return {"P@1": 100 * m["precision@1"], "P@3": 100 * m["precision@3"],
            "P@5": 100 * m["precision@5"], "AUC": 100 * m["instance_auc"]}


def _p1(model, X, Y) -> float:
    top = model.predict_top_k(X, 1)
    return 100 * float(precision_at_k(Y, top, ks=(1,))[1])


def _mean_sq_norm(X) -> float:
    return float(X.multiply(X).sum() / X.shape[0]) if sp.issparse(X) else float(
        (X * X).sum() / X.shape[0])


def _leml(args, **params) -> LEML:
    """LEML of the grids with the ``--set`` parameters (``params`` on top), early stopping
    off (the grid chooses the iterations); the others keep the estimator's defaults."""
    return LEML(random_state=args.seed, **{**args.params, "early_stopping": False, **params})


def leml_setting(name: str, args, grid: dict, chosen: dict) -> tuple[dict, str]:
    """LEML's parameters in the speed and peers sections, and their description.

    The rank, ``lam`` and outer iterations chosen in ``accuracy`` when it ran on ``name``,
    else those ``--set`` gives (by default LEML's rank and ``lam``, the grid's iterations);
    the other ``--set`` parameters (the loss among them).  Plain values (JSON), so that a
    child process can build the same estimator.
    """
    default = LEML()
    given = args.params
    rank, lam, T = chosen.get(name, (given.get("rank", default.rank),
                                     grid["scale"] * given.get("lam", default.lam),
                                     grid["outer_iterations"]))
    params = {**given, "rank": int(rank), "lam": float(lam), "outer_iterations": int(T),
              "loss": given.get("loss", "squared"), "random_state": args.seed}
    setting = f"k={rank} lam={lam:.3g} T={T}"
    for key, value in given.items():
        if key not in ("rank", "lam", "outer_iterations", "loss"):
            setting += f" {key}={value}"
    if params["loss"] != "squared":
        leml = LEML(**params)
        solvers = leml.resolved_params()  # what "auto" runs with
        setting += (f" newton={leml.newton_max_iter} h_solver={solvers['h_solver']} "
                    f"w_solver={solvers['w_solver']} "
                    f"squared_init={solvers['squared_init_iter']}")
    return params, setting


class _Search:
    """Grid over (rank, lam) for LEML with early stopping on validation P@1."""

    def __init__(self, X, Y, mask, fit_rows, val_rows, Y_val_truth, outer_iterations, args):
        self.Xf, self.Yf = X[fit_rows], Y[fit_rows]
        self.mask_f = None if mask is None else mask[fit_rows]
        self.Xv, self.Yv = X[val_rows], Y_val_truth
        self.outer_iterations, self.args = outer_iterations, args

    def leml(self, loss, rank, lam):
        """Validation P@1 after each outer iteration: list of floats."""
        curve = []
        model = _leml(self.args, rank=rank, lam=lam, loss=loss,
                      outer_iterations=self.outer_iterations)
        model.callback = lambda it, sec, obj: curve.append(_p1(model, self.Xv, self.Yv))
        model.fit(self.Xf, self.Yf, self.mask_f)
        return curve

    def best_leml(self, loss, ranks, lams):
        best = (-1.0, None)
        for rank in ranks:
            if rank > min(self.Xf.shape[1] + 1, self.Yf.shape[1]):
                continue
            for lam in lams:
                curve = self.leml(loss, rank, lam)
                t = int(np.argmax(curve))
                _say(f"  LEML {loss} k={rank} lam={lam:.4g}: val P@1 "
                     f"{' '.join(f'{v:.1f}' for v in curve)} -> T={t + 1}")
                if curve[t] > best[0]:
                    best = (curve[t], (rank, lam, t + 1))
        return best

    def best_alpha(self, make, alphas):
        best = (-1.0, None)
        for alpha in alphas:
            model = make(alpha).fit(self.Xf, self.Yf, self.mask_f)
            p1 = _p1(model, self.Xv, self.Yv)
            _say(f"  {type(model).__name__} alpha={alpha:.4g}: val P@1 {p1:.2f}")
            if p1 > best[0]:
                best = (p1, alpha)
        return best


# --------------------------------------------------------------------------- sections
def _accuracy(ds, args, grid, rows, chosen):
    name, Xtr, Ytr, Xte, Yte = ds
    fit_rows, val_rows = _split(Xtr.shape[0], args.validation_fraction, args.seed)
    search = _Search(Xtr, Ytr, None, fit_rows, val_rows, Ytr[val_rows],
                     grid["outer_iterations"], args)
    s = grid["scale"]

    def add(method, setting, metrics):
        for metric, value in metrics.items():
            rows.append(("accuracy", name, method, setting, metric, value))
        _say(f"RESULT accuracy {name} | {method} | {setting} | "
             + " ".join(f"{m}={v:.2f}" for m, v in metrics.items()))

    if name in PUBLISHED:
        add("LEML (published, XC repository)", "", dict(zip(("P@1", "P@3", "P@5"),
                                                             PUBLISHED[name], strict=True)))
    for loss in grid["losses"]:
        _say(f"{name}: LEML {loss} grid")
        val, (rank, lam, T) = search.best_leml(loss, grid["ranks"], [s * v for v in grid["lams"]])
        model, sec = _timed(lambda: _leml(args, rank=rank, lam=lam, loss=loss,  # noqa: B023
                                          outer_iterations=T).fit(Xtr, Ytr))  # noqa: B023
        setting = f"k={rank} lam={lam:.3g} T={T} (val P@1 {val:.1f})"
        add(f"LEML {loss}", setting, {**_scores(model, Xte, Yte), "train seconds": sec})
        if loss == "squared":
            chosen[name] = (rank, lam, T)
    _say(f"{name}: ridge grids")
    alphas = [s * a for a in grid["alphas"]]
    val, alpha = search.best_alpha(
        lambda a: ClosedFormLowRank(rank=None, alpha=a, fit_intercept=True), alphas)
    model, sec = _timed(lambda: ClosedFormLowRank(alpha=alpha, fit_intercept=True).fit(Xtr, Ytr))
    add("full-rank ridge (closed form)", f"alpha={alpha:.3g} (val P@1 {val:.1f})",
        {**_scores(model, Xte, Yte), "train seconds": sec})
    chosen[("alpha", name)] = alpha
    if not grid["br_ridge"]:
        _say(f"{name}: BR ridge skipped in accuracy (--no-br-accuracy or --quick)")
        return
    # The same minimiser as full-rank ridge up to the intercept's penalty: fitted once at
    # the alpha chosen for it.
    model, sec = _timed(lambda: BinaryRelevance("ridge", alpha=alpha).fit(Xtr, Ytr))
    add("BR ridge", f"alpha={alpha:.3g} (from full-rank ridge)",
        {**_scores(model, Xte, Yte), "train seconds": sec})


def _missing(ds, args, grid, rows):
    name, Xtr, Ytr, Xte, Yte = ds
    fit_rows, val_rows = _split(Xtr.shape[0], args.validation_fraction, args.seed)
    s = grid["scale"]
    for frac in args.observed:
        mask = _mask(Ytr.shape, frac, args.seed)
        Y_obs = Ytr.multiply(mask).tocsr()  # what a user knows: observed positives
        search = _Search(Xtr, Ytr, mask, fit_rows, val_rows, Y_obs[val_rows],
                         grid["outer_iterations"], args)
        setting_obs = f"observed={frac:.0%}"
        for loss in grid["missing_losses"]:
            _say(f"{name} {setting_obs}: LEML {loss} grid")
            val, (rank, lam, T) = search.best_leml(loss, grid["ranks"],
                                                   [s * v for v in grid["lams"]])
            model = _leml(args, rank=rank, lam=lam, loss=loss,
                          outer_iterations=T).fit(Xtr, Ytr, mask)
            m = _scores(model, Xte, Yte)
            setting = f"{setting_obs} k={rank} lam={lam:.3g} T={T} (val P@1 {val:.1f})"
            rows += [("missing", name, f"LEML {loss}", setting, k, m[k]) for k in ("P@1", "AUC")]
            _say(f"RESULT missing {name} | LEML {loss} | {setting} | P@1={m['P@1']:.2f} "
                 f"AUC={m['AUC']:.2f}")
        _say(f"{name} {setting_obs}: BR ridge grid")
        val, alpha = search.best_alpha(lambda a: BinaryRelevance("ridge", alpha=a),
                                       [s * a for a in grid["alphas"]])
        model = BinaryRelevance("ridge", alpha=alpha).fit(Xtr, Ytr, mask)
        m = _scores(model, Xte, Yte)
        setting = f"{setting_obs} alpha={alpha:.3g} (val P@1 {val:.1f})"
        rows += [("missing", name, "BR ridge", setting, k, m[k]) for k in ("P@1", "AUC")]
        _say(f"RESULT missing {name} | BR ridge | {setting} | P@1={m['P@1']:.2f} "
             f"AUC={m['AUC']:.2f}")


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptors 1 and 2 (omikuji's Rust logger and progress bars)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


def _omikuji(Xtr, Ytr, Xte, Yte):
    """Train omikuji (default Parabel-like hyper-parameters, 1 thread); (seconds, P@1)."""
    import omikuji

    tmp = Path(tempfile.mkdtemp(prefix="bench-omikuji-"))
    try:
        path = tmp / "train.txt"
        write_xc(path, Xtr, Ytr)
        with _quiet_stderr():  # omikuji logs and draws progress bars
            model, sec = _timed(lambda: omikuji.Model.train_on_data(str(path), n_threads=1))
        top = as_ranking(omikuji_top_k(model, Xte, 1), Yte)  # none predicted: a miss
        p1 = 100 * float(precision_at_k(Yte, top, ks=(1,))[1])
        return sec, p1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _speed(ds, args, grid, rows, chosen):
    name, Xtr, Ytr, Xte, Yte = ds
    alpha = chosen.get(("alpha", name), grid["scale"])
    params, setting = leml_setting(name, args, grid, chosen)
    leml = LEML(**params)
    peers = [
        (f"LEML {params['loss']}", setting, lambda: leml),
        ("full-rank ridge (closed form)", f"alpha={alpha:.3g}",
         lambda: ClosedFormLowRank(alpha=alpha, fit_intercept=True)),
        ("BR ridge (closed form, unpenalised intercept)", f"alpha={alpha:.3g}",
         lambda: BinaryRelevance("ridge", alpha=alpha)),
    ]
    if grid["br_logistic"]:
        peers.append(("BR logistic (scikit-learn liblinear)", "C=1",
                      lambda: BinaryRelevance("logistic", alpha=1.0)))
    base = None
    for method, setting, make in peers:
        _say(f"{name}: timing {method}")
        best, model = np.inf, None
        for _ in range(args.repeats if method.startswith("LEML") else 1):
            model, sec = _timed(lambda: make().fit(Xtr, Ytr))  # noqa: B023
            best = min(best, sec)
        base = best if base is None else base
        p1 = _p1(model, Xte, Yte)
        rows += [("speed", name, method, setting, "train seconds", best),
                 ("speed", name, method, setting, "time / LEML", best / base),
                 ("speed", name, method, setting, "P@1", p1)]
        _say(f"RESULT speed {name} | {method} | {setting} | {best:.2f}s "
             f"({best / base:.2f}x LEML) P@1={p1:.2f}")
    try:
        version = importlib.metadata.version("omikuji")
    except importlib.metadata.PackageNotFoundError:
        _say("omikuji is not installed (pip install omikuji): skipped")
        return
    _say(f"{name}: timing omikuji {version}")
    sec, p1 = _omikuji(Xtr, Ytr, Xte, Yte)
    setting = f"omikuji=={version} defaults, 1 thread"
    rows += [("speed", name, "omikuji", setting, "train seconds", sec),
             ("speed", name, "omikuji", setting, "time / LEML", sec / base),
             ("speed", name, "omikuji", setting, "P@1", p1)]
    _say(f"RESULT speed {name} | omikuji | {setting} | {sec:.2f}s ({sec / base:.2f}x LEML) "
         f"P@1={p1:.2f}")


def _scaling(ds, args, grid, rows):
    name, Xtr, Ytr, _, _ = ds
    k = grid["scaling_rank"]
    model = LEML(rank=k, lam=1.0, cg_max_iter=10, cg_tol=0.0, random_state=args.seed)
    first = {}
    for copies in args.scales:
        X = sp.vstack([Xtr] * copies, format="csr")
        Y = sp.vstack([Ytr] * copies, format="csr")
        frac = 0.2
        mask = sp.vstack([_mask(Ytr.shape, frac, args.seed)] * copies, format="csr")
        for case, data in (
            ("fully observed", model.prepare(X, Y)),
            (f"{frac:.0%} observed", prepare_data(X, Y, mask, fit_intercept=model.fit_intercept,
                                                  dtype=model.dtype, entries="sparse")),
        ):
            _, H = model.start(data)
            step_sec, (_, info) = _best_time(lambda d=data, h=H: _one_w_step(model, d, h),
                                             args.repeats)
            n_cg = info["cg_iter"]
            V = np.asarray(np.random.default_rng(args.seed).standard_normal(
                (data.n_features, k)), dtype=data.dtype)
            U = np.asarray(data.X @ V)
            bare, _ = _best_time(
                lambda d=data, v=V, u=U, m=n_cg: [(d.X @ v, d.xt_matmul(u)) for _ in range(m)],
                args.repeats)
            size = X.nnz + (Y.nnz if data.fully_observed else data.n_observed)
            first.setdefault(case, (step_sec, size, X.shape[0] * Y.shape[1]))
            t1, s1, nl1 = first[case]
            setting = (f"{case}, {copies}x copies, k={k}, {n_cg} CG, "
                       f"nnz(X)={X.nnz}, {'nnz(Y)' if data.fully_observed else '|Omega|'}="
                       f"{size - X.nnz}")
            rows += [
                ("scaling", name, "LEML W-step", setting, "seconds", step_sec),
                ("scaling", name, "LEML W-step", setting, "time ratio vs 1x", step_sec / t1),
                ("scaling", name, "LEML W-step", setting, "size ratio vs 1x", size / s1),
                ("scaling", name, "LEML W-step", setting, "n x L ratio vs 1x",
                 X.shape[0] * Y.shape[1] / nl1),
                ("scaling", name, "LEML W-step", setting, "time / bare products",
                 step_sec / bare),
            ]
            _say(f"RESULT scaling {name} | {setting} | W-step {step_sec:.3f}s, bare {bare:.3f}s,"
                 f" time x{step_sec / t1:.2f} size x{size / s1:.2f} step/bare "
                 f"{step_sec / bare:.2f}")


def _synthetic(args, rows):
    import resource

    scale = args.synthetic_scale
    n, d, n_labels = (max(64, int(round(v * scale))) for v in WIKI)
    name = f"synthetic Wikipedia-shaped ({scale:g}x)"
    k = 50
    _say(f"{name}: generating {n} x {d}, {n_labels} labels")
    (X, Y), gen_sec = _timed(lambda: synthetic_wikipedia(n, d, n_labels, seed=args.seed))
    model = LEML(rank=k, lam=1.0, cg_max_iter=10, fit_intercept=False, random_state=args.seed)
    data, prep_sec = _timed(lambda: model.prepare(X, Y))
    W, H = model.start(data)
    _say(f"{name}: nnz(X)={data.X.nnz}, nnz(Y)={Y.nnz}; one alternating iteration at k={k}")
    (W, info), w_sec = _timed(lambda: model.w_step(data, W, H))
    (H, _), h_sec = _timed(lambda: model.h_step(data, W, H))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB (Linux)
    setting = (f"SYNTHETIC n={n} d={d} L={n_labels} nnz(X)={data.X.nnz} nnz(Y)={Y.nnz} "
               f"k={k} squared, {info['cg_iter']} CG")
    for metric, value in (("generate seconds", gen_sec), ("prepare seconds", prep_sec),
                          ("W-step seconds", w_sec), ("H-step seconds", h_sec),
                          ("iteration seconds", w_sec + h_sec),
                          ("peak RSS GiB (process)", peak)):
        rows.append(("synthetic", name, "LEML one alternating iteration", setting, metric,
                     value))
    _say(f"{name}: W-step {w_sec:.1f}s, H-step {h_sec:.1f}s, peak RSS {peak:.2f} GiB")


# --------------------------------------------------------------------------- run
def _grid(args, Xtr) -> dict:
    quick = args.quick
    scale = {"raw": _mean_sq_norm(Xtr)}.get(args.features, 1.0)
    return {
        "scale": scale,
        "losses": args.losses or ["squared"],
        "missing_losses": args.losses or ["squared"],
        "ranks": args.ranks or ([16] if quick else [50, 100]),
        "lams": args.lams or ([0.3] if quick else [0.1, 0.3, 1.0]),
        "alphas": args.alphas or ([0.3, 1.0] if quick else [0.1, 0.3, 1.0, 3.0]),
        "outer_iterations": args.params.get("outer_iterations", 4 if quick else 15),
        "br_ridge": args.br_accuracy and not quick,
        "br_logistic": args.br_logistic and not quick,
        "scaling_rank": 16 if quick else 50,
    }


#: The sections run on each data set of ``--datasets``.
DATA_SECTIONS = ("accuracy", "missing", "speed", "peers", "scaling")


def check(args: argparse.Namespace) -> None:
    """``--set``'s parameters (:func:`estimator_params`, kept as ``args.params``) and, when a
    section runs on the data sets, that one of ``--datasets`` at least has its files under
    ``--data`` (a name without them is skipped, as ``none`` is: a misspelt name alone would
    run nothing after the start-up)."""
    from scarce.tasks.errors import InputError

    args.params = estimator_params(args.estimator)
    if not set(args.sections) & set(DATA_SECTIONS):
        return
    data = Path(args.data)
    if not any(all(p.is_file() for p in split_files(data, name, args.split))
               for name in args.datasets):
        here = sorted(d.name for d in (data / "xmc").glob("*")
                      if all(p.is_file() for p in split_files(data, d.name, args.split)))
        raise InputError(
            f"--datasets {','.join(args.datasets)}: no such data set has its files "
            f"xmc/<name>/<name>_{args.split}_{{train,test}}.txt.gz under --data (there: "
            f"{', '.join(here) or 'none'}); the sections {', '.join(DATA_SECTIONS)} need one",
            path=data)


def run(args: argparse.Namespace) -> pd.DataFrame:
    check(args)  # before any data is read (again, when the command line checked first)
    if args.quick:
        args.observed = args.observed[:1]
        args.scales = [c for c in args.scales if c <= 2]
        args.repeats = 1
    distributed_scale = 0.1 if args.synthetic_scale is None else args.synthetic_scale
    if args.synthetic_scale is None:
        args.synthetic_scale = 1.0
    rows: list[tuple] = []
    chosen: dict = {}
    with threadpool_limits(1):
        for name in args.datasets:
            loaded = _load(Path(args.data), name, args.split)
            if loaded is None:
                _say(f"{name}: no xmc/{name}/{name}_{args.split}_*.txt.gz under {args.data}: "
                     "skipped (pass --data with the full sets)")
                continue
            Xtr, Ytr, Xte, Yte = loaded
            Xtr, Xte = _preprocess(args.features, Xtr, Xte)
            _say(f"{name}: train {Xtr.shape} x {Ytr.shape[1]} labels, test {Xte.shape[0]}, "
                 f"features={args.features}")
            grid = _grid(args, Xtr)
            ds = (name, Xtr, Ytr, Xte, Yte)
            if "accuracy" in args.sections:
                _accuracy(ds, args, grid, rows, chosen)
            if "missing" in args.sections:
                _missing(ds, args, grid, rows)
            if "speed" in args.sections:
                _speed(ds, args, grid, rows, chosen)
            if "peers" in args.sections:
                peers_section(ds, args, rows, leml_setting(name, args, grid, chosen))
            if "scaling" in args.sections:
                _scaling(ds, args, grid, rows)
        if "synthetic" in args.sections:
            if args.quick:
                args.synthetic_scale = min(args.synthetic_scale, 0.01)
            _synthetic(args, rows)
        if "w-step" in args.sections:
            from scarce.bench.leml_w_step import run_section as w_step_section

            w_step_section(args, rows, min(distributed_scale, 0.01) if args.quick
                         else distributed_scale)
        if "distributed" in args.sections:
            from scarce.bench.leml_cluster import run_section

            run_section(args, rows, min(distributed_scale, 0.01) if args.quick
                        else distributed_scale)
        if "partition" in args.sections:
            from scarce.bench.leml_partition import run_section as partition_section

            if args.quick:
                args.partition_shape = (min(args.partition_shape[0], 40_000),
                                        min(args.partition_shape[1], 10_000))
            partition_section(args, rows)
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["value"] = table["value"].astype(float).round(4)
    return table

