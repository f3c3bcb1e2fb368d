"""One against two Dask workers: the relation stability search and a LEML sweep.

``scarce bench workers`` starts a Dask ``LocalCluster`` of single-threaded worker processes
(one BLAS/OpenMP thread each: the workers' environment pins them), first with one worker,
then with two (``--workers``), and on each cluster runs, through Prefect:

* ``relations``: the relations flow (``configs/relations.yaml`` without the baselines, with
  ``--set relations:KEY=VALUE`` overrides, as ``scarce bench overhead`` takes them, e.g.
  ``--set relations:baselines=true``; ``--quick``: 400 pairs, k in 2..6, 3 subsamples) in a
  fresh temporary store,
  so every step is computed.  Its (k, prefix) candidates and (k, subsample) stability units
  are ``.map``-ped, so the workers share them.  The ``relations: search`` rows are the time
  inside those task runs alone (the union of the Running intervals of the ``candidate`` and
  ``stability`` task runs, read from the Prefect API), without parsing, contexts, ranking,
  labelling and the baselines around the search.
* ``leml-sweep``: a flow defined here mapping one task per (rank, lam) point of a grid
  (``--ranks`` x ``--lams``); each fits :class:`scarce.algorithms.leml.LEML` on the bundled
  Bibtex training set (rows scaled to unit L2 norm) less a seeded validation part
  (``--validation-fraction``, the split of ``tasks.leml.split``) and returns the validation
  P@1.  The point of best P@1 (first in grid order on ties) is the selection.  LEML's other
  parameters are those ``--set KEY=VALUE`` gives (a key of the LEML config's model section,
  checked as ``scarce bench leml --set`` checks it; the grid's own ``rank`` and ``lam``
  excepted), else the estimator's defaults (``--quick``: 4 outer iterations).

Each cluster is started, and every worker has imported the code, before anything is timed:
``seconds`` is the flow's wall time, not the cluster's start.  ``ratio`` is the first worker
count's seconds over this row's (above 1: faster).  ``identical`` compares every run with the
first one: for ``relations`` the chosen k, the chosen number of words |F| and the sha256 of
every output of the run manifest (the volatile ones aside, as ``scarce runs diff`` does) and
the metrics file; for ``leml-sweep`` the selection and every point's P@1, exactly.

Times are wall-clock on a shared machine: the ratio is the result, the seconds indicative.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from prefect import flow, task, unmapped
from prefect.cache_policies import NO_CACHE

COLUMNS = ["job", "workers", "seconds", "ratio", "selection", "identical"]
JOBS = ("relations", "leml-sweep")
# The bench's relations run leaves out the baselines (Hasegawa et al., k-means at the true k,
# the RLBaseline search on all words) unless ``--set baselines=true``: the method's own
# search is what is measured, and the whole bench stays within minutes.
DEFAULT_RELATIONS = ["baselines=false"]
QUICK_RELATIONS = ["max_pairs=400", "k_low=2", "k_high=6", "n_subsamples=3"]
QUICK_LEML = {"ranks": [25, 50], "lams": [0.3, 1.0], "outer_iterations": 4}
#: The sweep's grid without --ranks and --lams.
SWEEP = {"ranks": [25, 50, 100], "lams": [0.1, 0.3, 1.0]}
#: The sweep's grid sets these at each point: ``--set`` cannot.
GRID = {"rank": "--ranks", "lam": "--lams"}
#: The prefix of a ``--set`` that is a relations config key.
RELATIONS_SET = "relations:"
# One BLAS/OpenMP thread per worker process (set before the worker starts).
# What a worker imports before the timing starts (unpickling the first task would otherwise
# pay for it inside the first timed run only).
WORKER_MODULES = ("scarce.tasks.relations", "scarce.algorithms.leml",
                  "scarce.algorithms.metrics.multilabel", "scarce.tasks.readers.xmc",
                  "sklearn.preprocessing")
BIBTEX_TRAIN = Path("data") / "xmc" / "bibtex" / "bibtex_xmlrepo_train.txt.gz"


def _listed(values: list) -> str:
    return ",".join(map(str, values))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from scarce.flows.commands.types import POSITIVE, SEED, NumberList, comma_list, config_number
    from scarce.flows.leml import LemlConfig

    def key(name: str):  # an option setting a config key takes the key's bounds
        return config_number(LemlConfig, name)

    parser.add_argument("--workers", type=NumberList(POSITIVE), default="1,2",
                        help="comma-separated worker counts; ratios are to the first (default 1,2)")
    parser.add_argument("--jobs", type=comma_list(JOBS), default=list(JOBS),
                        help=f"comma-separated jobs (default: {','.join(JOBS)})")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="[relations:]KEY=VALUE",
                        help="a parameter of LEML in the sweep, as `scarce bench leml --set`, "
                        "e.g. cg_max_iter=5 (default: the estimator's); with relations:, a "
                        "relations config override, e.g. relations:max_pairs=2000 "
                        "(repeatable)")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes: relations " + " ".join(QUICK_RELATIONS)
                        + f"; LEML ranks {_listed(QUICK_LEML['ranks'])}, lams "
                        f"{_listed(QUICK_LEML['lams'])}, "
                        f"{QUICK_LEML['outer_iterations']} iterations")
    parser.add_argument("--ranks", type=NumberList(key("model.rank")), default=None,
                        help=f"LEML ranks (default {_listed(SWEEP['ranks'])})")
    parser.add_argument("--lams", type=NumberList(key("model.lam")), default=None,
                        help=f"LEML lambdas (default {_listed(SWEEP['lams'])})")
    parser.add_argument("--validation-fraction", type=key("dataset.validation_fraction"),
                        default=0.2, help="the share of Bibtex's training rows LEML is scored on")
    parser.add_argument("--seed", type=SEED, default=0, help="seed of the LEML split and fits")


def _say(*parts) -> None:
    print("[bench workers]", *parts, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- LEML sweep
@functools.lru_cache(maxsize=2)
def _bibtex_split(path: str, validation_fraction: float, seed: int):
    """Bibtex train, L2-normalised rows, split as ``tasks.leml.split`` (once per process)."""
    import numpy as np
    from sklearn.preprocessing import normalize

    from scarce.tasks.readers.xmc import read_xmc

    X, Y = read_xmc(path)
    X = normalize(X).astype(X.dtype)
    n = X.shape[0]
    rng = np.random.default_rng(np.random.SeedSequence([seed, 101]))
    val = np.zeros(n, dtype=bool)
    val[rng.choice(n, size=int(round(validation_fraction * n)), replace=False)] = True
    fit, hold = np.flatnonzero(~val), np.flatnonzero(val)
    return X[fit], Y[fit], X[hold], Y[hold]


@task(name="leml-sweep-point", task_run_name="leml rank={rank} lam={lam}",
      cache_policy=NO_CACHE)
def fit_point(rank: int, lam: float, train: str, validation_fraction: float, seed: int,
              params: dict) -> dict:
    """Validation P@1 (%) of LEML with ``params`` at one (rank, lam), one BLAS thread."""
    from threadpoolctl import threadpool_limits

    from scarce.algorithms.leml import LEML
    from scarce.algorithms.metrics.multilabel import precision_at_k

    X_fit, Y_fit, X_val, Y_val = _bibtex_split(train, validation_fraction, seed)
    with threadpool_limits(1):
        model = LEML(rank=rank, lam=lam, random_state=seed, **params)
        model.fit(X_fit, Y_fit)
        top = model.predict_top_k(X_val, 1)
    p1 = 100 * float(precision_at_k(Y_val, top, ks=(1,))[1])
    return {"rank": rank, "lam": lam, "p1": p1}


@flow(name="bench-leml-sweep")
def leml_sweep(ranks: list[int], lams: list[float], train: str, validation_fraction: float,
               seed: int, params: dict) -> list[dict]:
    """One mapped task per (rank, lam); the points in grid order."""
    grid = [(r, la) for r in ranks for la in lams]
    futures = fit_point.map(
        rank=[r for r, _ in grid], lam=[la for _, la in grid], train=unmapped(train),
        validation_fraction=unmapped(validation_fraction), seed=unmapped(seed),
        params=unmapped(params))
    return [f.result() for f in futures]


def _best(points: list[dict]) -> dict:
    best = points[0]
    for p in points[1:]:
        if p["p1"] > best["p1"]:
            best = p
    return best


# --------------------------------------------------------------------------- Prefect API
def _task_runs(flow_run_id) -> list[tuple[str, float, float]]:
    """(name, start, end) of the task runs of a flow run that ran."""
    from scarce.bench.overhead import task_runs

    return [(tr.name, tr.start_time.timestamp(), tr.end_time.timestamp())
            for tr in task_runs(flow_run_id) if tr.start_time and tr.end_time]


def _search_seconds(flow_run_id) -> tuple[float, int]:
    """Union of the Running intervals of the candidate and stability task runs, and their
    number."""
    from scarce.bench.overhead import busy_seconds

    spans = [(s, e) for name, s, e in _task_runs(flow_run_id)
             if name.startswith(("candidate ", "stability "))]
    return busy_seconds(spans), len(spans)


# --------------------------------------------------------------------------- runs
def _import_worker_modules() -> None:
    import importlib

    for name in WORKER_MODULES:
        importlib.import_module(name)


def _relations_once(runner, spec, config) -> dict:
    from scarce.flows.runtime import RunOptions
    from scarce.tasks.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="scarce-bench-workers-"))
    try:
        options = RunOptions(store=str(tmp / "cache"), runs=str(tmp / "runs"), runner="dask")
        flow_fn = spec.load_flow().with_options(task_runner=runner)
        t0 = time.perf_counter()
        state = flow_fn(config=config, options=options, return_state=True)
        seconds = time.perf_counter() - t0
        summary = state.result()  # raises if the flow failed
        manifest = summary["manifest"]
        metrics = summary["metrics"]
        method = metrics[(metrics["method"] == config.ranking) & (metrics["metric"] == "k_chosen")]
        k = int(method["value"].iloc[0])
        store = Store(options.store)
        subsets = [o["ref"] for o in manifest["outputs"]
                   if o["step"] == "relations-subsets" and o["ref"].endswith("-subsets")]
        table = store.read(subsets[0])
        n_features = int(table.loc[table["k"].astype(int) == k, "n_features"].iloc[0])
        hashes = {o["ref"]: o["sha256"] for o in manifest["outputs"] if not o.get("volatile")}
        hashes["metrics.parquet"] = manifest["metrics_sha256"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    search, units = _search_seconds(state.state_details.flow_run_id)
    return {"seconds": seconds, "search": search, "units": units, "k": k,
            "n_features": n_features, "hashes": hashes,
            "selection": f"k={k}, {n_features} words"}


def _leml_once(runner, params: dict) -> dict:
    flow_fn = leml_sweep.with_options(task_runner=runner)
    t0 = time.perf_counter()
    points = flow_fn(**params)
    seconds = time.perf_counter() - t0
    best = _best(points)
    return {"seconds": seconds, "points": points,
            "selection": f"rank={best['rank']} lam={best['lam']:g} P@1={best['p1']:.2f}",
            "key": (best["rank"], best["lam"], [(p["rank"], p["lam"], p["p1"]) for p in points])}


def _same_relations(a: dict, b: dict) -> bool:
    return (a["k"], a["n_features"], a["hashes"]) == (b["k"], b["n_features"], b["hashes"])


def _report_difference(name: str, a: dict, b: dict) -> None:
    if name == "relations":
        refs = sorted(r for r in set(a["hashes"]) | set(b["hashes"])
                      if a["hashes"].get(r) != b["hashes"].get(r))
        _say(f"relations differ: k {a['k']} vs {b['k']}, |F| {a['n_features']} vs "
             f"{b['n_features']}, outputs {refs[:10]}")
    else:
        _say(f"leml-sweep differs: {a['key']} vs {b['key']}")


def sweep_params(texts: list[str], quick: bool) -> dict:
    """LEML's parameters in the sweep besides the grid's: those the LEML ``--set KEY=VALUE``
    give (every one but the ``relations:`` ones), checked as ``scarce bench leml --set`` checks
    them; with ``quick``, 4 outer iterations unless given.  The others keep the estimator's
    defaults (its signature is the one source of them).

    Raises
    ------
    InputError
        One line naming the key: an unknown key, a value out of bounds or of a wrong type, a
        key the grid sets.
    """
    from scarce.bench.leml_common import estimator_params
    from scarce.tasks.errors import InputError

    given = estimator_params([t for t in texts if not t.startswith(RELATIONS_SET)])
    for name, option in GRID.items():
        if name in given:
            raise InputError(f"--set {name}: the sweep's grid sets it at each point (use "
                             f"{option})", key=f"model.{name}")
    quick_iterations = {"outer_iterations": QUICK_LEML["outer_iterations"]} if quick else {}
    return {**quick_iterations, **given}


def check(args: argparse.Namespace) -> tuple:
    """The jobs' settings, checked before any work (``--set``'s against the sweep's LEML
    parameters and the relations config, each given to a job that runs; the bundled Bibtex
    file): the relations flow and its config, and the sweep's parameters (None for a job
    not run)."""
    from scarce.flows.config import load_config, project_root, resolve_path
    from scarce.flows.registry import FLOWS
    from scarce.tasks.errors import InputError

    jobs = list(args.jobs)  # each one of JOBS (checked by the parser)
    spec = config = params = None
    relations_sets = [t.removeprefix(RELATIONS_SET) for t in args.overrides
                      if t.startswith(RELATIONS_SET)]
    leml_params = sweep_params(args.overrides, args.quick)
    for job, sets in (("relations", [RELATIONS_SET + t for t in relations_sets]),
                      ("leml-sweep", [t for t in args.overrides
                                      if not t.startswith(RELATIONS_SET)])):
        if sets and job not in jobs:
            raise InputError(f"--set {sets[0]}: the {job} job is not run (--jobs)")
    if "relations" in jobs:
        spec = FLOWS["relations"]
        overrides = (DEFAULT_RELATIONS + (QUICK_RELATIONS if args.quick else [])
                     + relations_sets)
        config = load_config(resolve_path(spec.config_file), spec.load_model(), overrides)
    if "leml-sweep" in jobs:
        train = project_root() / BIBTEX_TRAIN
        if not train.is_file():
            raise InputError("the bundled Bibtex training file is missing", path=train)
        grid = QUICK_LEML if args.quick else SWEEP
        params = {
            "ranks": args.ranks or list(grid["ranks"]),
            "lams": args.lams or list(grid["lams"]),
            "train": str(train),
            "validation_fraction": args.validation_fraction,
            "seed": args.seed,
            "params": leml_params,
        }
    return spec, config, params


def run(args: argparse.Namespace) -> pd.DataFrame:
    from scarce.bench.overhead import warm_up
    from scarce.flows.runners import worker_env

    counts = args.workers  # positive counts (checked by the parser)
    jobs = list(args.jobs)
    spec, config, params = check(args)
    # Dask's modules imported once the settings are checked: a bad one is told at once
    from distributed import Client, LocalCluster
    from prefect_dask import DaskTaskRunner

    warm_up()  # a temporary Prefect server starts here, untimed
    env = worker_env()  # one BLAS thread, and this process's Prefect API (as --runner dask)
    results: dict[str, list[tuple[int, dict]]] = {j: [] for j in jobs}
    for n in counts:
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               dashboard_address=None, env=env)
        try:
            with Client(cluster) as client:
                client.run(_import_worker_modules)
            runner = DaskTaskRunner(address=cluster.scheduler_address)
            for job in jobs:
                _say(f"{job}: {n} worker(s)")
                if job == "relations":
                    out = _relations_once(runner, spec, config)
                    _say(f"relations, {n} worker(s): {out['seconds']:.1f}s (search "
                         f"{out['search']:.1f}s over {out['units']} task runs), {out['selection']}")
                else:
                    out = _leml_once(runner, params)
                    _say(f"leml-sweep, {n} worker(s): {out['seconds']:.1f}s, {out['selection']}; "
                         + ", ".join(f"({p['rank']}, {p['lam']:g}) {p['p1']:.2f}"
                                     for p in out["points"]))
                results[job].append((n, out))
        finally:
            cluster.close()

    rows = []
    for job in jobs:
        (_, first), *_ = results[job]
        for n, out in results[job]:
            if job == "relations":
                same = _same_relations(first, out)
            else:
                same = first["key"] == out["key"]
            if not same:
                _report_difference(job, first, out)
            rows.append((job, n, out["seconds"], first["seconds"] / out["seconds"],
                         out["selection"], same))
            if job == "relations":
                ratio = first["search"] / out["search"] if out["search"] > 0 else float("nan")
                rows.append(("relations: search", n, out["search"], ratio,
                             f"{out['units']} task runs", same))
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["seconds"] = table["seconds"].astype(float).round(2)
    table["ratio"] = table["ratio"].astype(float).round(3)
    table["identical"] = table["identical"].astype(bool)
    return table
