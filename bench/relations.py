"""Relation discovery benchmark on SemEval-2010 Task 8: Chen et al. (2005) Tables 4 and 5 redone.

For every window setting (``pre-mid-post``: 0-5-0, 2-5-2, 0-10-0, 2-10-2, 5-10-5) on the pairs
of the 9 undirected relation types without Other (TRAIN + TEST: 8,853 pairs), one row per method:

* ``hasegawa``: Hasegawa, Sekine and Grishman (2004), tf-idf between-words (the window's
  ``mid`` part only, ``0-m-0``), cosine, complete linkage cut at the **true** k;
* ``kmeans-true-k``: k-means on all words at the true k;
* ``rl-baseline``: stability over k with all words (no feature selection), k-means at that k;
* ``frequency``, ``chi2``, ``entropy``: the full method (subset search under coverage >= theta,
  stability over k, k-means at the chosen k) with the words ranked by document frequency, by
  chi^2 against k-means pseudo-labels (label-free; k = the middle of [K_low, K_high]) and by
  the entropy measure (Dash et al.; ``--entropy-importance``, see
  :mod:`algorithms.relations.entropy`).

Contexts: position-tagged lower-cased words, tf-idf, minimum document frequency 2 (the flow's
defaults, ``configs/relations.yaml``); the entropy ranking uses the binarised matrix (the exact
Hamming-histogram algorithm).  The method is unsupervised: nothing is tuned on gold labels; the
settings are the issue's (theta = 0.9, rho = 0.9) and the flow's defaults.  Gold labels are used
only to score the final clusterings (mapped accuracy of Chen et al. Sec. 3.3, ARI, V-measure).

Model-order settings (``--n-init-reference``, ``--stability-pairs``, ``--reg``; see
:mod:`algorithms.relations.stability` and :mod:`algorithms.relations.selection`): the
defaults reproduce the earlier table (reference clustering C with ``--n-init`` restarts, Eq. 2
over all pairs, ridge 1e-3).  With ridge 1e-3 the invariant criterion is dominated by clusters
of identical vectors (zero within-scatter), so F_k jumps between the 46 and the 1,880 top
words from one k to the next; with ``--reg 0.1`` F_k is steady.  ``--n-init-reference 50``
makes C the best of 50 k-means runs: a poor local optimum in C shifts the whole M(k), since
every subsample is compared with the same C.  ``--n-references R`` (a variance reduction,
default 1 = the paper) averages Eq. 2 over R reference clusterings with their own seeds,
each the best of ``--n-init-reference`` restarts; ``--n-init-subsample`` sets the restarts
of the subsample clusterings; ``--k-rule one_se`` (a deviation) takes the smallest k within
one standard error of the curve's maximum.  ``--subset-rule cross_projection`` (a deviation)
picks F_k by Dy and Brodley's (2004) cross-projection comparison instead of the largest
criterion, which favours larger prefixes (:mod:`algorithms.relations.selection`).
``--stability-pairs distinct`` (a deviation from the paper) leaves pairs of identical
vectors out of Eq. 2.  ``--baseline null_permuted`` (a deviation; Dudoit and Fridlyand's
Clest, 2002) subtracts, instead of the random predictor's 1/k, the mean Eq. 2 index of the
same scheme on ``--n-null`` null datasets per k whose columns (words) are permuted over
the pairs independently; it multiplies the stability step's cost by 1 + ``--n-null``.

For the main setting (``--main-window``, 0-10-0) the entropy method is rerun with
``--seeds`` further seeds (the seed drives k-means, the subsamples and nothing else) to show
whether the chosen k is steady.  The ranking's speed is the naive O(M^2 N^2) reference over
the fast one on a seeded subsample of ``--speed-pairs`` pairs (only the words present in it),
checked to give the same ranking; the fast ranking's seconds on all pairs are reported too.

Settings (``--setting``; the issue's main setting and the two further ones it asks for):

* ``nine`` (default): the 9 undirected relation types without Other, 8,853 pairs, true k 9;
* ``other``: the 9 undirected types plus Other as a tenth gold type, 10,717 pairs, true k 10;
* ``directed``: the 18 directed labels (``Cause-Effect(e1,e2)`` and ``Cause-Effect(e2,e1)``
  are two types; ``Entity-Destination(e2,e1)`` has 2 pairs) without Other, 8,853 pairs,
  true k 18 (the flow's ``directed: true``);
* ``directed-other``: the 18 directed labels plus Other, 10,717 pairs, true k 19 (the
  flow's ``directed: true, include_other: true``).

The contexts are the same words in every setting (direction shows only through the
position tags of the words); only the pairs kept and the gold classes differ.  The true k is
the number of gold classes among the pairs used; ``--k-high`` must reach it (e.g. K in
[2, 25] for the directed settings), else the run stops with an input error.

``--baselines`` picks some of the three baselines (e.g. ``kmeans-true-k`` alone, to compare
the method with k-means at the true k over seeds without the cost of RLBaseline).

Data: ``--data DIR`` holds ``relations/semeval2010_task8/{TRAIN_FILE.TXT,TEST_FILE_FULL.TXT}``
(default: the project's bundled copy).  ``--quick``: 1,500 pairs of the main window, K in
[6, 12], 4 prefixes, 3 subsamples, 2 seeds, a 120-pair speed check.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from algorithms.metrics.clustering import clustering_scores
from algorithms.relations import baselines as bl
from algorithms.relations.contexts import build_contexts_frame, parse_window
from algorithms.relations.entropy import entropy_ranking, entropy_ranking_naive
from algorithms.relations.model import RelationDiscovery
from algorithms.relations.stability import BASELINES as EQ3_BASELINES
from algorithms.relations.stability import choose_k, stability_curve
from flows.config import project_root
from tasks import relations as tasks_rel
from tasks.errors import InputError

SETTINGS = {
    # name: (include_other, directed)
    "nine": (False, False),
    "other": (True, False),
    "directed": (False, True),
    "directed-other": (True, True),
}
WINDOWS = ("0-5-0", "2-5-2", "0-10-0", "2-10-2", "5-10-5")
RANKINGS = ("frequency", "chi2", "entropy")
BASELINES = ("hasegawa", "kmeans-true-k", "rl-baseline")
FILES = ("TRAIN_FILE.TXT", "TEST_FILE_FULL.TXT")
COLUMNS = ["setting", "window", "method", "seed", "k", "k_true", "accuracy", "ari", "v_measure",
           "n_features", "seconds", "speedup", "same_ranking", "note"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=None,
                        help="folder holding relations/semeval2010_task8/ (default: data/)")
    parser.add_argument("--setting", choices=list(SETTINGS), default="nine",
                        help="pairs and gold types: nine = 9 undirected types without Other "
                        "(8,853 pairs), other = 9 types + Other (10,717), directed = 18 directed "
                        "labels without Other (8,853), directed-other = 18 directed labels + "
                        "Other (10,717)")
    parser.add_argument("--windows", default=",".join(WINDOWS),
                        help="comma-separated window settings pre-mid-post")
    parser.add_argument("--main-window", default="0-10-0",
                        help="the setting whose entropy method is rerun over --seeds")
    parser.add_argument("--rankings", default=",".join(RANKINGS),
                        help=f"comma-separated subset of {', '.join(RANKINGS)}")
    parser.add_argument("--k-low", type=int, default=2)
    parser.add_argument("--k-high", type=int, default=20)
    parser.add_argument("--n-prefixes", type=int, default=12, help="prefix lengths per k")
    parser.add_argument("--min-prefix", type=int, default=20)
    parser.add_argument("--n-subsamples", type=int, default=10, help="q, subsamples per k")
    parser.add_argument("--n-init", type=int, default=3,
                        help="k-means restarts (subset search and subsample clusterings)")
    parser.add_argument("--n-init-reference", type=int, default=None,
                        help="k-means restarts of the reference clustering C per k, of the "
                        "final clustering and of the k-means baselines (default: --n-init)")
    parser.add_argument("--n-init-subsample", type=int, default=None,
                        help="k-means restarts of the subsample clusterings C^mu (default: "
                        "--n-init)")
    parser.add_argument("--n-references", type=int, default=1,
                        help="reference clusterings C per k, Eq. 2 averaged over them "
                        "(1: the paper)")
    parser.add_argument("--k-rule", choices=["max", "one_se"], default="max",
                        help="k from the Eq. 3 curve: its maximum (the paper) or the "
                        "one-standard-error rule (deviation)")
    parser.add_argument("--subset-rule", choices=["max", "cross_projection"], default="max",
                        help="F_k among the feasible prefixes: the largest invariant criterion "
                        "(the paper) or Dy and Brodley's cross-projection comparison (deviation)")
    parser.add_argument("--stability-pairs", choices=["all", "distinct"], default="all",
                        help="pairs counted by Eq. 2: all (the paper) or pairs of different "
                        "vectors only (deviation)")
    parser.add_argument("--baseline", choices=EQ3_BASELINES,
                        default="closed_form",
                        help="what Eq. 3 subtracts: the random predictor's 1/k (the paper), "
                        "its simulation, or the mean Eq. 2 index on --n-null column-permuted "
                        "null datasets (Dudoit and Fridlyand's Clest; deviation)")
    parser.add_argument("--n-null", type=int, default=5,
                        help="null datasets per k with --baseline null_permuted")
    parser.add_argument("--reg", type=float, default=1e-3,
                        help="relative ridge of P_W in the invariant criterion")
    parser.add_argument("--theta", type=float, default=0.9, help="coverage threshold")
    parser.add_argument("--rho", type=float, default=0.9, help="subsample fraction")
    parser.add_argument("--min-df", type=int, default=2)
    parser.add_argument("--entropy-importance", choices=["change", "removed"], default="change")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=5,
                        help="seeds (seed, seed+1, ...) of the entropy method on the main window")
    parser.add_argument("--max-pairs", type=int, default=None,
                        help="a seeded sample of this many pairs (default: all)")
    parser.add_argument("--speed-pairs", type=int, default=300,
                        help="pairs of the subsample on which the naive ranking is timed")
    parser.add_argument("--no-baselines", action="store_true",
                        help="skip Hasegawa, k-means at the true k and RLBaseline")
    parser.add_argument("--baselines", default=",".join(BASELINES),
                        help=f"comma-separated subset of {', '.join(BASELINES)} (the baselines "
                        "run unless --no-baselines)")
    parser.add_argument("--quick", action="store_true",
                        help="1,500 pairs, main window only, K in [6, 12], 4 prefixes, "
                        "3 subsamples, 2 seeds, 120-pair speed check")


def _log(msg: str) -> None:
    print(f"[bench relations] {msg}", file=sys.stderr, flush=True)


def _apply_quick(args: argparse.Namespace) -> None:
    args.windows = args.main_window
    args.k_low, args.k_high = max(args.k_low, 6), min(args.k_high, 12)
    args.n_prefixes, args.n_subsamples, args.n_init = 4, 3, 1
    args.seeds = min(args.seeds, 2)
    args.max_pairs = min(args.max_pairs or 1500, 1500)
    args.speed_pairs = min(args.speed_pairs, 120)


def load_mentions(data: Path, max_pairs: int | None, seed: int, setting: str = "nine"
                  ) -> pd.DataFrame:
    """The mentions of TRAIN + TEST for ``setting`` (:data:`SETTINGS`), optionally sampled."""
    if setting not in SETTINGS:
        raise InputError(f"unknown setting {setting!r}; expected one of {list(SETTINGS)}")
    include_other, directed = SETTINGS[setting]
    folder = data / "relations" / "semeval2010_task8"
    paths = [folder / f for f in FILES]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise InputError(f"SemEval-2010 Task 8 file not found: {', '.join(missing)}")
    parts = [tasks_rel.parse.fn(str(p), include_other=include_other, directed=directed)
             for p in paths]
    return tasks_rel.combine.fn(parts, max_pairs=max_pairs, seed=seed)["mentions"]


def _row(window, method, seed, k, k_true, y, labels, n_features, seconds, note=""):
    s = clustering_scores(y, labels)
    return {"window": window, "method": method, "seed": seed, "k": int(k), "k_true": k_true,
            "accuracy": s["accuracy"], "ari": s["ari"], "v_measure": s["v_measure"],
            "n_features": int(n_features), "seconds": seconds, "note": note}


def _fit(X, ranking, seed, args):
    model = RelationDiscovery(k_min=args.k_low, k_max=args.k_high, ranking=ranking,
                              theta=args.theta, n_steps=args.n_prefixes,
                              min_prefix=args.min_prefix, n_subsamples=args.n_subsamples,
                              rho=args.rho, n_init=args.n_init, reg=args.reg,
                              n_init_reference=args.n_init_reference,
                              n_init_subsample=args.n_init_subsample, k_rule=args.k_rule,
                              n_references=args.n_references, subset_rule=args.subset_rule,
                              stability_pairs=args.stability_pairs, baseline=args.baseline,
                              n_null=args.n_null, random_state=seed)
    t0 = time.perf_counter()
    model.fit(X)
    return model, time.perf_counter() - t0


def rl_baseline(X, args) -> tuple[int, np.ndarray]:
    """RLBaseline with the method's stability settings: all words, k by Eq. 3, k-means at k."""
    allf = np.arange(X.shape[1])
    n_init_ref = args.n_init if args.n_init_reference is None else args.n_init_reference
    n_init_sub = args.n_init if args.n_init_subsample is None else args.n_init_subsample
    _, curve = stability_curve(X, {k: allf for k in range(args.k_low, args.k_high + 1)},
                               n_samples=args.n_subsamples, seed=args.seed, rho=args.rho,
                               n_init=n_init_sub, pairs=args.stability_pairs,
                               n_init_reference=n_init_ref, n_references=args.n_references,
                               baseline=args.baseline, n_null=args.n_null)
    k = choose_k(curve, rule=args.k_rule)
    return k, bl.kmeans_baseline(X, k, seed=args.seed, n_init=n_init_ref)


def ranking_speedup(Xb, n_pairs: int, seed: int, importance: str) -> dict:
    """Naive over fast entropy ranking on a seeded subsample (its words only)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 5]))
    rows = np.sort(rng.choice(Xb.shape[0], size=min(n_pairs, Xb.shape[0]), replace=False))
    sub = Xb[rows]
    sub = sub[:, np.flatnonzero(sub.getnnz(axis=0))]
    t0 = time.perf_counter()
    r_fast, _ = entropy_ranking(sub, binary=True, importance=importance)
    fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    r_naive, _ = entropy_ranking_naive(sub.toarray(), importance=importance)
    naive = time.perf_counter() - t0
    return {"n": sub.shape[0], "m": sub.shape[1], "fast": fast, "naive": naive,
            "same": bool(np.array_equal(r_fast, r_naive))}


def run(args: argparse.Namespace) -> pd.DataFrame:
    if args.quick:
        _apply_quick(args)
    data = args.data or project_root() / "data"
    windows = [w.strip() for w in args.windows.split(",") if w.strip()]
    for w in windows + [args.main_window]:
        parse_window(w)
    rankings = [r.strip() for r in args.rankings.split(",") if r.strip()]
    bad = sorted(set(rankings) - set(RANKINGS))
    if bad:
        raise InputError(f"unknown ranking(s) {bad}; expected some of {list(RANKINGS)}")
    if args.main_window not in windows:
        windows.append(args.main_window)
    baselines = [] if args.no_baselines else [
        b.strip() for b in args.baselines.split(",") if b.strip()]
    bad = sorted(set(baselines) - set(BASELINES))
    if bad:
        raise InputError(f"unknown baseline(s) {bad}; expected some of {list(BASELINES)}")

    n_init_ref = args.n_init if args.n_init_reference is None else args.n_init_reference
    rows = []
    with threadpool_limits(1):
        mentions = load_mentions(data, args.max_pairs, args.seed, args.setting)
        y = mentions["gold"].astype(str).to_numpy()
        k_true = int(np.unique(y).size)
        _log(f"setting {args.setting}: {len(mentions)} pairs, {k_true} types, "
             f"K in [{args.k_low}, {args.k_high}]")
        if not args.k_low <= k_true <= args.k_high:
            raise InputError(f"the true k of setting {args.setting!r} is {k_true}, outside "
                             f"K in [{args.k_low}, {args.k_high}]: set --k-low/--k-high")
        tokens = tasks_rel.token_lists(mentions)
        hasegawa_done: dict[int, dict] = {}
        for window in windows:
            X, vocab = build_contexts_frame(tokens, window, weighting="tfidf", min_df=args.min_df,
                                            position_tags=True, lowercase=True)
            m = X.shape[1]
            _log(f"window {window}: {m} words")
            if "hasegawa" in baselines:
                mid = parse_window(window)[1]
                if mid not in hasegawa_done:
                    t0 = time.perf_counter()
                    Xh, _ = build_contexts_frame(tokens, f"0-{mid}-0", weighting="tfidf",
                                                 position_tags=False, lowercase=True)
                    labels = bl.hasegawa_clustering(Xh, k_true)
                    hasegawa_done[mid] = _row(window, "hasegawa", args.seed, k_true, k_true, y,
                                              labels, Xh.shape[1], time.perf_counter() - t0,
                                              f"between-words 0-{mid}-0, true k")
                rows.append(dict(hasegawa_done[mid], window=window))
                _log(f"  hasegawa {rows[-1]['accuracy']:.3f}")
            if "kmeans-true-k" in baselines:
                t0 = time.perf_counter()
                labels = bl.kmeans_baseline(X, k_true, seed=args.seed, n_init=n_init_ref)
                rows.append(_row(window, "kmeans-true-k", args.seed, k_true, k_true, y, labels,
                                 m, time.perf_counter() - t0, "all words, true k"))
                _log(f"  k-means@{k_true} {rows[-1]['accuracy']:.3f}")
            if "rl-baseline" in baselines:
                t0 = time.perf_counter()
                k_rl, labels = rl_baseline(X, args)
                rows.append(_row(window, "rl-baseline", args.seed, k_rl, k_true, y, labels, m,
                                 time.perf_counter() - t0, "all words, k by stability"))
                _log(f"  rl-baseline k={k_rl} {rows[-1]['accuracy']:.3f}")
            seeds = [args.seed]
            if window == args.main_window:
                seeds = [args.seed + i for i in range(max(1, args.seeds))]
            for name in rankings:
                for seed in seeds if name == "entropy" else [args.seed]:
                    t0 = time.perf_counter()
                    if name == "entropy":
                        ranking, _ = entropy_ranking(X, binary=True,
                                                     importance=args.entropy_importance)
                    elif name == "frequency":
                        ranking = bl.frequency_ranking(X)
                    else:
                        ranking, _ = bl.chi2_pseudo_ranking(X, (args.k_low + args.k_high) // 2,
                                                            seed=seed, n_init=args.n_init)
                    t_rank = time.perf_counter() - t0
                    model, t_fit = _fit(X, ranking, seed, args)
                    rows.append(_row(window, name, seed, model.n_clusters_, k_true, y,
                                     model.labels_, model.selected_features_.size,
                                     t_rank + t_fit, f"ranking {t_rank:.1f}s"))
                    _log(f"  {name} seed {seed}: k={model.n_clusters_} "
                         f"|F|={model.selected_features_.size} acc={rows[-1]['accuracy']:.3f} "
                         f"({t_rank + t_fit:.0f}s)")
                    _log("    curve k:|F|:M:baseline:score " + " ".join(
                        f"{int(r.k)}:{int(r.n_features)}:{r.m_mean:.3f}:{r.m_random:.3f}:"
                        f"{r.m_norm:.3f}" for r in model.stability_.itertuples()))

        Xm, _ = build_contexts_frame(tokens, args.main_window, weighting="tfidf",
                                     min_df=args.min_df, position_tags=True, lowercase=True)
        Xb = Xm.copy()
        Xb.data[:] = 1.0
        t0 = time.perf_counter()
        entropy_ranking(Xb, binary=True, importance=args.entropy_importance)
        t_all = time.perf_counter() - t0
        sp_ = ranking_speedup(Xb, args.speed_pairs, args.seed, args.entropy_importance)
        _log(f"speed: naive {sp_['naive']:.2f}s, fast {sp_['fast']:.4f}s on {sp_['n']} pairs")
        rows.append({"window": args.main_window, "method": "entropy-ranking speed-up",
                     "seed": args.seed, "k": np.nan, "k_true": k_true,
                     "n_features": sp_["m"], "seconds": sp_["fast"],
                     "speedup": sp_["naive"] / sp_["fast"], "same_ranking": sp_["same"],
                     "note": f"naive/fast on {sp_['n']} pairs x {sp_['m']} words; fast on all "
                             f"{Xb.shape[0]} pairs x {Xb.shape[1]} words: {t_all:.1f}s"})
    table = pd.DataFrame(rows)
    table["setting"] = args.setting
    table = table.reindex(columns=COLUMNS)
    table["k"] = table["k"].astype("Int64")
    table["same_ranking"] = table["same_ranking"].astype("boolean")
    return table
