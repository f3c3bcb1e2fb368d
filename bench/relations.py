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
  the entropy measure (Dash et al.; :mod:`scarce.algorithms.relations.entropy`).

Contexts: position-tagged lower-cased words, tf-idf, minimum document frequency 2 (the flow's
defaults, ``configs/relations.yaml``); the entropy ranking uses the binarised matrix (the exact
Hamming-histogram algorithm).  The method is unsupervised: nothing is tuned on gold labels; the
settings are theta = 0.9, rho = 0.9 and the flow's defaults.  Gold labels are used
only to score the final clusterings (mapped accuracy of Chen et al. Sec. 3.3, ARI, V-measure).

Method settings: ``--k-low``, ``--k-high``, ``--n-prefixes``, ``--min-prefix``, ``--theta``,
``--reg``, ``--n-init``, ``--n-subsamples``, ``--rho``, ``--n-init-reference``,
``--n-init-subsample`` and ``--n-references`` are the parameters of
:class:`~scarce.algorithms.relations.model.RelationDiscovery` under the same names, with its
defaults
(but ``--min-prefix 20``); the k-means baselines and RLBaseline are run with the same
estimator's steps (:meth:`~RelationDiscovery.cluster_reference` on all words at the true k,
:meth:`~RelationDiscovery.select_k` on all words).  With ridge 1e-3 the invariant criterion
is dominated by clusters of identical vectors (zero within-scatter), so F_k jumps between the
46 and the 1,880 top words from one k to the next; with ``--reg 0.1`` F_k is steady.
``--n-init-reference 50`` makes C the best of 50 k-means runs: a poor local optimum in C
shifts the whole M(k), since every subsample is compared with the same C.  ``--n-references
R`` (a variance reduction, default 1 = the paper) averages Eq. 2 over R reference clusterings
with their own seeds; ``--n-init-subsample`` sets the restarts of the subsample clusterings.
The options ``--k-rule``, ``--subset-rule``, ``--stability-pairs``, ``--baseline``,
``--n-null`` and ``--entropy-importance`` were removed with the estimator options they set
(their findings: the journal's relations-retired-options entry, under docs/journal/).

For the main setting (``--main-window``, 0-10-0) the entropy method is rerun with
``--seeds`` further seeds (the seed drives k-means, the subsamples and nothing else) to show
whether the chosen k is steady.  The ranking's speed is the naive O(M^2 N^2) reference over
the fast one on a seeded subsample of ``--speed-pairs`` pairs (only the words present in it),
checked to give the same ranking; the fast ranking's seconds on all pairs are reported too.

Settings (``--setting``; the main setting and two further ones):

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
[2, 12] (the default range cut at 12 to save time, not a choice of k), 4 prefixes, 3
subsamples, 2 seeds, a 120-pair speed check.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from scarce.algorithms.metrics.clustering import clustering_scores
from scarce.algorithms.relations import baselines as bl
from scarce.algorithms.relations.contexts import build_contexts_frame, parse_window
from scarce.algorithms.relations.entropy import entropy_ranking, entropy_ranking_naive
from scarce.algorithms.relations.model import RelationDiscovery
from scarce.flows.config import project_root
from scarce.tasks import relations as tasks_rel
from scarce.tasks.errors import InputError

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


# The options that are RelationDiscovery's parameters (same names, its defaults but min_prefix).
METHOD_OPTIONS = ("k_low", "k_high", "n_prefixes", "min_prefix", "theta", "reg", "n_init",
                  "n_subsamples", "rho", "n_init_reference", "n_init_subsample", "n_references")
MIN_PREFIX = 20


def _window(text: str) -> str:
    """A window setting ``pre-mid-post`` as given, checked (:func:`parse_window`)."""
    try:
        parse_window(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from scarce.flows.commands.types import POSITIVE, SEED, comma_list, config_number
    from scarce.flows.relations import RelationsConfig

    defaults = RelationDiscovery().get_params()
    parser.add_argument("--data", type=Path, default=None,
                        help="folder holding relations/semeval2010_task8/ (default: data/)")
    parser.add_argument("--setting", choices=list(SETTINGS), default="nine",
                        help="pairs and gold types: nine = 9 undirected types without Other "
                        "(8,853 pairs), other = 9 types + Other (10,717), directed = 18 directed "
                        "labels without Other (8,853), directed-other = 18 directed labels + "
                        "Other (10,717)")
    parser.add_argument("--windows", type=comma_list(item=parse_window), default=list(WINDOWS),
                        help="comma-separated window settings pre-mid-post")
    parser.add_argument("--main-window", type=_window, default="0-10-0",
                        help="the setting whose entropy method is rerun over --seeds")
    parser.add_argument("--rankings", type=comma_list(RANKINGS), default=list(RANKINGS),
                        help=f"comma-separated subset of {', '.join(RANKINGS)}")
    helps = {
        "k_low": "K_low", "k_high": "K_high", "n_prefixes": "prefix lengths per k",
        "min_prefix": "smallest prefix length", "theta": "coverage threshold",
        "reg": "relative ridge of P_W in the invariant criterion",
        "n_init": "k-means restarts (subset search; references and subsample clusterings "
        "unless set)",
        "n_subsamples": "q, subsamples per k", "rho": "subsample fraction",
        "n_init_reference": "k-means restarts of the reference clusterings C per k (so of the "
        "final clustering and the k-means baselines; default: --n-init)",
        "n_init_subsample": "k-means restarts of the subsample clusterings C^mu (default: "
        "--n-init)",
        "n_references": "reference clusterings C per k, Eq. 2 averaged over them (1: the paper)",
    }
    for name in METHOD_OPTIONS:
        default = MIN_PREFIX if name == "min_prefix" else defaults[name]
        # the config key's type and bounds (an int or a float in its range)
        parser.add_argument("--" + name.replace("_", "-"),
                            type=config_number(RelationsConfig, name), default=default,
                            help=f"{helps[name]} (default {default})")
    parser.add_argument("--min-df", type=config_number(RelationsConfig, "min_df"), default=2)
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--seeds", type=POSITIVE, default=5,
                        help="seeds (seed, seed+1, ...) of the entropy method on the main window")
    parser.add_argument("--max-pairs", type=config_number(RelationsConfig, "max_pairs"),
                        default=None,
                        help="a seeded sample of this many pairs (default: all)")
    parser.add_argument("--speed-pairs", type=POSITIVE, default=300,
                        help="pairs of the subsample on which the naive ranking is timed")
    parser.add_argument("--no-baselines", action="store_true",
                        help="skip Hasegawa, k-means at the true k and RLBaseline")
    parser.add_argument("--baselines", type=comma_list(BASELINES), default=list(BASELINES),
                        help=f"comma-separated subset of {', '.join(BASELINES)} (the baselines "
                        "run unless --no-baselines)")
    parser.add_argument("--quick", action="store_true",
                        help="1,500 pairs, main window only, K in [2, 12], 4 prefixes, "
                        "3 subsamples, 2 seeds, 120-pair speed check")


def _log(msg: str) -> None:
    print(f"[bench relations] {msg}", file=sys.stderr, flush=True)


def _apply_quick(args: argparse.Namespace) -> None:
    args.windows = [args.main_window]
    args.k_high = min(args.k_high, 12)
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
    parts = [tasks_rel.parse.fn(str(p), fmt="semeval", relation_types=None,
                                include_other=include_other, directed=directed)
             for p in paths]
    return tasks_rel.combine.fn(parts, max_pairs=max_pairs, seed=seed)["mentions"]


def _row(window, method, seed, k, k_true, y, labels, n_features, seconds, note=""):
    s = clustering_scores(y, labels)
    return {"window": window, "method": method, "seed": seed, "k": int(k), "k_true": k_true,
            "accuracy": s["accuracy"], "ari": s["ari"], "v_measure": s["v_measure"],
            "n_features": int(n_features), "seconds": seconds, "note": note}


def estimator(args: argparse.Namespace, seed: int, ranking: str = "entropy"
              ) -> RelationDiscovery:
    """The method with the benchmark's settings."""
    return RelationDiscovery(ranking=ranking, random_state=seed,
                             **{name: getattr(args, name) for name in METHOD_OPTIONS})


def rl_baseline(X, model: RelationDiscovery) -> tuple[int, np.ndarray]:
    """RLBaseline with the method's stability settings: all words, k by Eq. 3, C_1 at k."""
    every = np.arange(X.shape[1])
    _, _, k, references = model.select_k(X, dict.fromkeys(model.k_values(), every))
    return k, references[k][0]


def ranking_speedup(Xb, n_pairs: int, seed: int) -> dict:
    """Naive over fast entropy ranking on a seeded subsample (its words only)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 5]))
    rows = np.sort(rng.choice(Xb.shape[0], size=min(n_pairs, Xb.shape[0]), replace=False))
    sub = Xb[rows]
    sub = sub[:, np.flatnonzero(sub.getnnz(axis=0))]
    t0 = time.perf_counter()
    r_fast, _ = entropy_ranking(sub, binary=True)
    fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    r_naive, _ = entropy_ranking_naive(sub.toarray())
    naive = time.perf_counter() - t0
    return {"n": sub.shape[0], "m": sub.shape[1], "fast": fast, "naive": naive,
            "same": bool(np.array_equal(r_fast, r_naive))}


def run(args: argparse.Namespace) -> pd.DataFrame:
    if args.quick:
        _apply_quick(args)
    data = args.data or project_root() / "data"
    windows, rankings = list(args.windows), list(args.rankings)  # checked by the parser
    if args.main_window not in windows:
        windows.append(args.main_window)
    baselines = [] if args.no_baselines else list(args.baselines)

    base = estimator(args, args.seed)
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
                labels = base.cluster_reference(X, np.arange(m), k_true, 0)
                rows.append(_row(window, "kmeans-true-k", args.seed, k_true, k_true, y, labels,
                                 m, time.perf_counter() - t0, "all words, true k"))
                _log(f"  k-means@{k_true} {rows[-1]['accuracy']:.3f}")
            if "rl-baseline" in baselines:
                t0 = time.perf_counter()
                k_rl, labels = rl_baseline(X, base)
                rows.append(_row(window, "rl-baseline", args.seed, k_rl, k_true, y, labels, m,
                                 time.perf_counter() - t0, "all words, k by stability"))
                _log(f"  rl-baseline k={k_rl} {rows[-1]['accuracy']:.3f}")
            seeds = [args.seed]
            if window == args.main_window:
                seeds = [args.seed + i for i in range(max(1, args.seeds))]
            for name in rankings:
                for seed in seeds if name == "entropy" else [args.seed]:
                    t0 = time.perf_counter()
                    model = estimator(args, seed, name).fit(X)
                    seconds, t_rank = time.perf_counter() - t0, model.timings_["ranking"]
                    rows.append(_row(window, name, seed, model.n_clusters_, k_true, y,
                                     model.labels_, model.selected_features_.size,
                                     seconds, f"ranking {t_rank:.1f}s"))
                    _log(f"  {name} seed {seed}: k={model.n_clusters_} "
                         f"|F|={model.selected_features_.size} acc={rows[-1]['accuracy']:.3f} "
                         f"({seconds:.0f}s)")
                    _log("    curve k:|F|:M:baseline:score " + " ".join(
                        f"{int(r.k)}:{int(r.n_features)}:{r.m_mean:.3f}:{r.m_random:.3f}:"
                        f"{r.m_norm:.3f}" for r in model.stability_.itertuples()))

        Xm, _ = build_contexts_frame(tokens, args.main_window, weighting="tfidf",
                                     min_df=args.min_df, position_tags=True, lowercase=True)
        Xb = Xm.copy()
        Xb.data[:] = 1.0
        t0 = time.perf_counter()
        entropy_ranking(Xb, binary=True)
        t_all = time.perf_counter() - t0
        sp_ = ranking_speedup(Xb, args.speed_pairs, args.seed)
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
