"""The BR ridge baseline against a plain closed-form ridge on the same matrices.

The LEML flow's ``br-ridge`` baseline (:class:`scarce.algorithms.leml.BinaryRelevance` with
``model="ridge"``, fully observed labels) is timed beside its peers on the same ``X`` and
``Y``, in one process with one BLAS thread; each problem's methods run ``--repeats`` times
with their order rotated, and the table holds the median wall-clock seconds, the median
seconds of CPU the process used (``time.process_time``: on a shared machine, the time waiting
for a core left out), and both as ratios to the plain closed form's medians measured in the
same run:

* ``br-ridge``: the baseline as the flow fits it (an unpenalised intercept);
* ``cholesky``: the peer, a plain closed-form ridge with scipy: the constant column appended
  (its weight penalised like the others), the smaller of the ``d x d`` and ``n x n`` normal
  equations formed from sparse products, one Cholesky factorisation, all labels solved at once;
* ``closed-form``: :class:`scarce.algorithms.leml.ClosedFormLowRank` at full rank (the flow's
  ``closed-form`` baseline: the ``d x d`` system with the constant column);
* ``sklearn``: ``sklearn.linear_model.Ridge`` on sparse ``X`` with an intercept, one
  multi-output fit (its iterative solver, one label at a time).

Each row also gives the relative residual ``||A Z - B||_F / ||B||_F`` of the normal equations
``A Z = B`` the method solves (the centred ones for ``br-ridge`` and ``sklearn``), computed
from sparse products: how close to the exact solution it got.

Problems (``--problems``): ``text`` is a table of ``--rows`` short texts (real sentences: the
FewRel validation set and the SemEval-2010 Task 8 training and test sets shipped under
``data/relations``, in that order) as TF-IDF rows over the ``--features`` most frequent words
(the project's vectoriser, :func:`scarce.algorithms.leml.text.fit_vocabulary`), with the tag sets of
the Delicious bookmarks (training then test rows, repeated from the top when there are more
texts) kept to their ``--labels`` most frequent tags, or Bibtex's tags when ``--data`` has no
Delicious; the texts and the tags are real, their pairing is not (no data set here has both),
which leaves the work of a direct solve unchanged.  ``text-dual`` is its first ``--dual-rows``
rows (fewer rows than features: the ``n x n`` system).  ``bibtex`` and ``delicious`` are the
training sets under ``--data``, rows of unit norm as the bundled flow reads them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.linalg
import scipy.sparse as sp
from sklearn.preprocessing import normalize
from threadpoolctl import threadpool_limits

from scarce.algorithms.leml import BinaryRelevance, ClosedFormLowRank
from scarce.algorithms.leml.data import add_constant_column
from scarce.algorithms.leml.text import fit_vocabulary, vectorize

PROBLEMS = ("text", "text-dual", "bibtex", "delicious")
METHODS = ("br-ridge", "cholesky", "closed-form", "sklearn")
PEER = "cholesky"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from scarce.flows.commands import types
    from scarce.flows.config import project_root

    parser.add_argument("--data", type=Path, default=project_root() / "data",
                        help="folder holding xmc/<name>/<name>_xmlrepo_{train,test}.txt.gz "
                        "(Bibtex, Delicious); the texts are always the project's "
                        "data/relations")
    parser.add_argument("--problems", type=types.comma_list(PROBLEMS),
                        default=["text", "text-dual", "bibtex"],
                        help=f"comma-separated subset of {','.join(PROBLEMS)}")
    parser.add_argument("--methods", type=types.comma_list(METHODS),
                        default=["br-ridge", "cholesky", "sklearn"],
                        help=f"comma-separated subset of {','.join(METHODS)}")
    parser.add_argument("--repeats", type=types.POSITIVE, default=3,
                        help="timed runs of each method, order rotated; the median is kept")
    parser.add_argument("--alpha", type=types.number(0, low_open=True), default=1.0,
                        help="the ridge penalty")
    parser.add_argument("--rows", type=types.POSITIVE, default=17_000, help="text: the texts")
    parser.add_argument("--features", type=types.POSITIVE, default=5_000,
                        help="text: the vocabulary's size (the most frequent words)")
    parser.add_argument("--labels", type=types.POSITIVE, default=540,
                        help="text: the labels, the most frequent tags")
    parser.add_argument("--dual-rows", type=types.POSITIVE, default=3_000,
                        help="text-dual: the first rows of the text problem")


def _say(*parts) -> None:
    print("[bench baselines]", *parts, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- problems
def _xmc(data: Path, name: str, parts=("train",)):
    from scarce.tasks.readers.xmc import read_xmc

    paths = [data / "xmc" / name / f"{name}_xmlrepo_{part}.txt.gz" for part in parts]
    if not all(p.exists() for p in paths):
        return None
    read = [read_xmc(p) for p in paths]
    return (sp.vstack([X for X, _ in read], format="csr"),
            sp.vstack([Y for _, Y in read], format="csr"))


def _sentences() -> list[str]:
    from scarce.flows.config import project_root
    from scarce.tasks.readers.jsonl import read_jsonl
    from scarce.tasks.readers.semeval import read_semeval

    folder = project_root() / "data" / "relations"
    frames = [read_jsonl(folder / "fewrel" / "val_wiki.jsonl.gz"),
              read_semeval(folder / "semeval2010_task8" / "TRAIN_FILE.TXT"),
              read_semeval(folder / "semeval2010_task8" / "TEST_FILE_FULL.TXT")]
    return [" ".join(tokens) for frame in frames for tokens in frame["tokens"]]


def _text(args) -> tuple[sp.csr_matrix, sp.csr_matrix, str]:
    texts = _sentences()
    if args.rows > len(texts):
        raise ValueError(f"--rows {args.rows}: the shipped sentences are {len(texts)}")
    texts = texts[:args.rows]
    terms, idf = fit_vocabulary(texts, "tfidf", max_features=args.features)
    X = vectorize(texts, terms, idf, "tfidf")
    source = "delicious"
    tags = _xmc(Path(args.data), "delicious", ("train", "test"))
    if tags is None:
        source = "bibtex"
        _say(f"no xmc/delicious under {args.data}: the text problem takes Bibtex's tags")
        tags = _xmc(Path(args.data), "bibtex", ("train", "test"))
    Y = tags[1]
    counts = np.asarray(Y.sum(axis=0)).ravel()
    keep = np.sort(np.argsort(-counts, kind="stable")[:args.labels])
    Y = Y[:, keep][np.arange(len(texts)) % Y.shape[0]].tocsr()
    return X, Y, f"TF-IDF of real sentences, tags of {source}"


def problems(args) -> list[tuple[str, sp.csr_matrix, sp.csr_matrix, str]]:
    """``(name, X, Y, what)`` of each of ``args.problems`` that can be built."""
    out = []
    text = None
    for name in args.problems:
        if name in ("text", "text-dual"):
            text = text or _text(args)
            X, Y, what = text
            if name == "text-dual":
                X, Y = X[:args.dual_rows], Y[:args.dual_rows]
            out.append((name, X, Y, what))
            continue
        loaded = _xmc(Path(args.data), name)
        if loaded is None:
            _say(f"{name}: no xmc/{name}/{name}_xmlrepo_train.txt.gz under {args.data}: "
                 "skipped")
            continue
        X, Y = loaded
        out.append((name, normalize(X).astype(np.float64), Y.astype(np.float64),
                    "training set, rows of unit norm"))
    return out


# --------------------------------------------------------------------------- methods
def cholesky_ridge(X, Y, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The peer: ridge on ``[X, 1]`` (the constant's weight penalised), from the smaller of
    the two systems, by one Cholesky factorisation; ``(Z of shape (d + 1, L), [X, 1])``."""
    Xa = add_constant_column(sp.csr_matrix(X, dtype=np.float64))
    n, d = Xa.shape
    if d <= n:
        A = (Xa.T @ Xa).toarray()
        B = (Xa.T @ Y).toarray()
    else:
        A = (Xa @ Xa.T).toarray()
        B = Y.toarray()
    A[np.diag_indices_from(A)] += alpha
    sol = scipy.linalg.cho_solve(scipy.linalg.cho_factor(A, overwrite_a=True,
                                                         check_finite=False),
                                 B, overwrite_b=True, check_finite=False)
    return (sol if d <= n else np.asarray(Xa.T @ sol)), Xa


def _fit(method: str, X, Y, alpha: float):
    """Fit ``method``; what :func:`_residual` needs."""
    if method == "br-ridge":
        model = BinaryRelevance(model="ridge", alpha=alpha).fit(X, Y)
        return "centred", model.coef_.T
    if method == "cholesky":
        Z, _ = cholesky_ridge(X, Y, alpha)
        return "constant", Z
    if method == "closed-form":
        model = ClosedFormLowRank(rank=None, alpha=alpha, fit_intercept=True).fit(X, Y)
        return "constant", np.vstack([model.coef_.T, model.intercept_])
    if method == "sklearn":
        from sklearn.linear_model import Ridge

        model = Ridge(alpha=alpha, fit_intercept=True).fit(X, Y.toarray())
        return "centred", model.coef_.T
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def _residual(kind: str, W: np.ndarray, X, Y, alpha: float) -> float:
    """``||A W - B||_F / ||B||_F`` for the normal equations of ``kind``: ``(Xcᵀ Xc + αI) W =
    Xcᵀ Yc`` (centred) or ``([X 1]ᵀ [X 1] + αI) W = [X 1]ᵀ Y`` (constant column)."""
    X = sp.csr_matrix(X, dtype=np.float64)
    if kind == "constant":
        X = add_constant_column(X)
        AW = np.asarray(X.T @ (X @ W)) + alpha * W
        B = (X.T @ Y).toarray()
    else:
        n = X.shape[0]
        x_mean = np.asarray(X.mean(axis=0)).ravel()
        y_mean = np.asarray(Y.mean(axis=0)).ravel()
        AW = np.asarray(X.T @ (X @ W)) - n * np.outer(x_mean, x_mean @ W) + alpha * W
        B = (X.T @ Y).toarray() - n * np.outer(x_mean, y_mean)
    return float(np.linalg.norm(AW - B) / np.linalg.norm(B))


# --------------------------------------------------------------------------- run
def run(args: argparse.Namespace) -> pd.DataFrame:
    methods = list(args.methods)  # names and repeats checked by the parser
    rows = []
    with threadpool_limits(1):
        for name, X, Y, what in problems(args):
            n, d = X.shape
            _say(f"{name}: {n} x {d}, {Y.shape[1]} labels, nnz(X)={X.nnz}, nnz(Y)={Y.nnz}")
            seconds = {m: [] for m in methods}
            cpu = {m: [] for m in methods}
            fitted = {}
            for r in range(args.repeats):
                order = methods[r % len(methods):] + methods[:r % len(methods)]
                for method in order:
                    t, c = time.perf_counter(), time.process_time()
                    fitted[method] = _fit(method, X, Y, args.alpha)
                    seconds[method].append(time.perf_counter() - t)
                    cpu[method].append(time.process_time() - c)
                    _say(f"  {method}: {seconds[method][-1]:.2f}s ({cpu[method][-1]:.2f}s CPU)")
            median = {m: float(np.median(s)) for m, s in seconds.items()}
            median_cpu = {m: float(np.median(s)) for m, s in cpu.items()}
            for method in methods:
                rows.append({
                    "problem": name, "data": what, "n": n, "d": d, "labels": Y.shape[1],
                    "nnz_X": X.nnz, "method": method, "repeats": args.repeats,
                    "median_seconds": median[method],
                    f"ratio_to_{PEER}": (median[method] / median[PEER] if PEER in median
                                         else np.nan),
                    "median_cpu_seconds": median_cpu[method],
                    f"cpu_ratio_to_{PEER}": (median_cpu[method] / median_cpu[PEER]
                                             if PEER in median_cpu else np.nan),
                    "residual": _residual(*fitted[method], X, Y, args.alpha),
                })
            _say(f"RESULT {name}: " + ", ".join(f"{m} {median[m]:.2f}s" for m in methods))
    return pd.DataFrame(rows)
