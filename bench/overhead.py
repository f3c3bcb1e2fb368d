"""What orchestration costs: cached reruns and Prefect's share of a flow's time.

``scarce bench overhead`` runs each flow (its config in ``configs/``, with ``--set``
overrides) three times in a fresh temporary store, through Prefect exactly as
``scarce run`` does (local task runner, the Prefect server in use or a temporary one):

0. an untimed trivial flow first, so a temporary server's start is not counted;
1. a first run that computes every step;
2. the same run again, every step a cache hit: its time as a share of the first run's
   (the goal: under 10%).  Hits whose entries pass their checks are resolved from the store
   without a Prefect task run (see ``RunContext._store_hit``);
3. nothing more: the first run's task runs are read back from the Prefect API, and the
   time inside them (the union of their Running intervals, so concurrent tasks count once)
   is the computation; the rest of the flow's wall time is orchestration: task submission,
   cache-key computation, state changes, artifacts and the API calls around them.  The
   first run's wall time less the time inside all its task runs is the run's fixed cost.

Each flow's work is also done bare, side by side (:data:`BARE`): the estimator call that the
flow's computing steps split into tasks, with the run's parameters and seed, in a fresh
Python process with one BLAS thread, just before each first run (``--repeats`` pairs, each
pair's ratio taken and the medians reported); its inputs are prepared by the
flow's own task functions (their ``.fn``, not timed).  The union of the Running intervals
of the first run's task runs that do the same work, over the bare seconds, is what the flow
adds to that work (the store's reads and writes, keys, task states):

* LEML: ``LEML.fit`` on the run's training file (read and normalised by the flow's
  ``load``), against the start and every half-step (``initial factors``,
  ``alternate-W/H iter=i``) and, with early stopping, the rows it holds out (``hold out for
  early stopping``) and the alternation on the others, as ``LEML.fit`` does them.  The bare
  fit needs what ``LEML.fit`` takes: one training file, every label observed, no validation
  split, the local backend; other configs are measured without it.  The baselines, the
  evaluation and the model's outputs are in neither.
* relations: ``RelationDiscovery.fit`` on the pairs' context matrix (parsed, sampled and
  featurised by the flow's ``parse``, ``combine`` and ``extract_features``): the ranking,
  the subset search, the stability search and the choice of k, the DCM labels and the
  centroids; against ``rank``, the ``stability-search`` stage (its wall time, so the
  submission of its units counts, and each of its candidate, reference, subsample and
  choice units), ``label clusters`` and ``model`` (the centroids, with the selected words'
  and the clusters' tables).  Not timed on either side: the baselines (Hasegawa et al.,
  k-means at the true k, RLBaseline's search on all words), the evaluation and the
  assignment of the pairs.  The flow runs the search's units in Prefect's thread pool, so
  on several cores the units overlap and the flow can take less wall time than the one bare
  process; with ``baselines`` on, Hasegawa's clustering runs beside the ranking and the search
  and shares the cores (``--set relations:baselines=false`` leaves the search alone).
* strip: ``StRipClassifier.fit`` (``StRip.fit`` on the pair table: prepare, grow, prune,
  optimize) of every variant at every loss ratio the run trains (each of ``loss_ratios``
  with dev splits, else ``loss_ratio``), on the training documents' pairs (built by the
  flow's ``preprocess``, concatenated untimed); against the ``grow``, ``prune`` and
  ``optimize`` task runs, each of which concatenates and prepares the pairs again.  Not
  timed on either side: the scores on dev that choose each variant's loss ratio, the
  evaluation on test and the chains written.

Every relations and StRip config can be done bare: their estimators take every option the
flows pass, and the inputs are prepared by the same task functions whatever the config.

Times are wall-clock on a shared machine: the ratios are the result, the seconds indicative.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from scarce.flows.server_process import RECORDED_WITHIN

#: The flows measured: the training flows of :data:`scarce.flows.registry.FLOWS` (a test checks).
FLOWS = ("leml", "relations", "strip")
COLUMNS = ["flow", "run", "seconds", "metric", "value"]


def chosen_flows(given: list[str] | None) -> list[str]:
    """The flows ``--flow`` names (each once, in the order given), else every one of
    :data:`FLOWS`."""
    return list(dict.fromkeys(given)) if given else list(FLOWS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from scarce.flows.commands.types import POSITIVE, FlowSetting

    parser.add_argument("--flow", dest="flows", action="append", choices=FLOWS, metavar="FLOW",
                        help=f"a flow to measure: {', '.join(FLOWS)} (repeatable; default: "
                        "all three)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        type=FlowSetting(FLOWS), metavar="FLOW:KEY=VALUE",
                        help="a config override for one flow, e.g. leml:model.rank=16 "
                        "(every flow's config checked before anything runs)")
    parser.add_argument("--repeats", type=POSITIVE, default=1,
                        help="first runs per flow, each beside its own bare run just before "
                        "it (the pair's ratio taken, the medians reported; the cached rerun "
                        "follows the last): on a shared machine one pair is noise")
    parser.add_argument("--quick", action="store_true",
                        help="small configs (LEML rank 16 and 3 iterations, 400 relation "
                        "pairs with k in 2..6, StRip window 5) for a check in a few minutes")


QUICK = {
    "leml": ["model.rank=16", "model.outer_iterations=3"],
    "relations": ["max_pairs=400", "k_low=2", "k_high=6", "n_subsamples=3"],
    "strip": ["window=5", "variants=[ripper,strip-partial]"],
}


def flow_settings(names: list[str], settings: list[tuple[str, str]], quick: bool,
                  ) -> dict[str, list[str]]:
    """Each flow of ``names``' overrides: ``--quick``'s settings, then ``settings`` (``--set``'s
    ``(FLOW, KEY=VALUE)``), every one of which must be of a flow of ``names``.

    Raises
    ------
    InputError
        A setting of a flow not measured."""
    from scarce.tasks.errors import InputError

    sets: dict[str, list[str]] = {n: list(QUICK[n]) if quick else [] for n in names}
    for flow, setting in settings:
        if flow not in sets:
            raise InputError(f"--set {flow}:{setting}: {flow} is not measured (the flows "
                             f"measured: {', '.join(names)})")
        sets[flow].append(setting)
    return sets


def flow_configs(names: list[str], settings: list[tuple[str, str]], quick: bool) -> dict:
    """The config of each flow of ``names``: its bundled file with :func:`flow_settings`,
    every one read and checked before a benchmark starts its work, so that a bad setting of
    the last flow is not found after the first one's minutes.

    Raises
    ------
    InputError
        A setting of a flow not measured, or one its config refuses (naming the key)."""
    from scarce.flows import registry
    from scarce.flows.config import load_config, resolve_path

    sets = flow_settings(names, settings, quick)
    return {name: load_config(resolve_path(registry.FLOWS[name].config_file),
                              registry.FLOWS[name].load_model(), sets[name])
            for name in names}


def check(args: argparse.Namespace) -> None:
    """Every measured flow's config with the ``--set`` settings (:func:`flow_configs`)."""
    flow_configs(chosen_flows(args.flows), args.overrides, args.quick)


#: A bare script's lines before its work: the config from its first argument.
_PROLOGUE = """
import json, sys, time
from scarce.flows.config import resolve_path
"""

#: LEML: the training file read by the flow's own load step (not timed), then ``LEML.fit``
#: with the config's parameters, timed.
LEML_FIT = _PROLOGUE + """
from scarce.flows.leml import LemlConfig
from scarce.tasks.leml import load
config = LemlConfig.model_validate(json.loads(sys.argv[1]))
d, m = config.dataset, config.model
data = load.fn(path=resolve_path(d.train), format=d.format, dtype=m.dtype,
               n_labels=d.n_labels, normalize=d.normalize, labelled=True)
model = m.estimator(random_state=config.seed)
t0 = time.perf_counter()
model.fit(data["X"], data["Y"])
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""

#: Relations: the pairs parsed, sampled and featurised by the flow's own steps (not timed),
#: then ``RelationDiscovery.fit`` with the config's estimator, timed; the result is the chosen
#: k, the size of its F_k and the sha256 of the final clustering's labels (int64; its first 16
#: digits).
RELATIONS_FIT = _PROLOGUE + """
import hashlib
import numpy as np
from scarce.flows.relations import RelationsConfig
from scarce.tasks import relations as rel
config = RelationsConfig.model_validate(json.loads(sys.argv[1]))
parts = [rel.parse.fn(path=resolve_path(p), fmt=config.format,
                      relation_types=config.relation_types, include_other=config.include_other,
                      directed=config.directed, source=resolve_path(p).name)
         for p in config.data]
data = rel.combine.fn(parts=parts, max_pairs=config.max_pairs, seed=config.seed)
feats = rel.extract_features.fn(mentions=data["mentions"], window=config.window,
                                weighting=config.weighting, position_tags=config.position_tags,
                                lowercase=config.lowercase, min_df=config.min_df)
words = feats["vocabulary"]["word"].to_numpy(dtype=object)
model = config.estimator()
t0 = time.perf_counter()
model.fit(feats["X"], feature_names=words)
seconds = time.perf_counter() - t0
labels = np.asarray(model.labels_, np.int64).tobytes()
print(json.dumps({"seconds": seconds, "result": {
    "k": int(model.n_clusters_), "n_features": int(len(model.selected_features_)),
    "labels_sha256": hashlib.sha256(labels).hexdigest()[:16]}}))
"""

#: StRip: the training documents' pairs built by the flow's own preprocess step and
#: concatenated (not timed), then ``StRipClassifier.fit`` of every variant at every loss ratio
#: the run trains, timed; the result is each model's rule count and the sha256 of its rules'
#: text (its first 16 digits), by ``variant@ratio``.
STRIP_FIT = _PROLOGUE + """
import hashlib
import pandas as pd
from scarce.algorithms.strip.pipeline import StRipClassifier
from scarce.algorithms.strip.ripper import rule_count, rules_to_text
from scarce.flows.strip import StripConfig, preprocess_options
from scarce.tasks import strip
config = StripConfig.model_validate(json.loads(sys.argv[1]))
documents = strip.select_documents(resolve_path(config.splits_file),
                                   resolve_path(config.data_dir), {"train": config.train_splits})
prep = preprocess_options(config)
pairs = pd.concat([strip.preprocess.fn(path=p, **prep)["pairs"] for p in documents["file"]],
                  ignore_index=True)
seconds, result = 0.0, {}
for variant in config.variants:
    for ratio in config.ratios():
        model = StRipClassifier.from_variant(
            variant, loss_ratio=ratio, k_optimize=config.k_optimize,
            dl_surplus=config.dl_surplus, max_thresholds=config.max_thresholds,
            random_state=config.seed)
        t0 = time.perf_counter()
        model.fit(pairs)
        seconds += time.perf_counter() - t0
        text = rules_to_text(model.rules_)
        result[f"{variant}@{ratio:g}"] = {"rules": rule_count(model.rules_),
                                          "sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}
print(json.dumps({"seconds": seconds, "result": result}))
"""


def leml_why_not(config) -> str | None:
    """Why the bare ``LEML.fit`` cannot train what the run trains (None when it can)."""
    from scarce.flows.config import resolve_path

    d = config.dataset
    if d.format == "table":
        return "a table is read by the table steps"
    if resolve_path(d.train).is_dir():
        return "a folder of parts"
    if config.observed_fraction < 1:
        return "labels missing (observed_fraction < 1)"
    if d.validation_fraction > 0:
        return "a validation split"
    if config.compute.backend != "local":
        return f"the {config.compute.backend} backend"
    return None


def always_possible(config) -> None:
    """None: the bare side can do the work of any config of the flow."""
    return None


@dataclass(frozen=True)
class Bare:
    """A flow's work done bare, and where the flow does the same work.

    ``call`` names what the bare side runs (in the table), ``script`` runs it in a fresh
    process given the config's JSON and prints ``{"seconds": ..., "result": {...}}`` (the
    result, optional, says what it computed), ``training`` matches the names of the flow's task
    runs that do that work, and ``why_not`` says why a config cannot be done bare (None when it
    can).
    """

    call: str
    script: str
    training: re.Pattern
    why_not: Callable[[Any], str | None] = always_possible


#: Each flow's bare side (see the module's docstring for what each covers).
BARE = {
    "leml": Bare("LEML.fit", LEML_FIT,
                 re.compile(r"^(hold out for early stopping|hold out the mask's rows"
                            r"|initial factors|alternate-[WH] iter=\d+)$"), leml_why_not),
    "relations": Bare("RelationDiscovery.fit", RELATIONS_FIT, re.compile(
        r"^(rank \w+|stability-search|candidate k=\d+ F=\d+|choose F_k"
        r"|reference k=\d+ r=\d+ F=\d+|stability k=\d+ sample=\d+ F=\d+|choose k \(F_k\)"
        r"|label clusters|model k=\d+ F=\d+)$")),
    "strip": Bare("StRipClassifier.fit (every variant, loss ratio)", STRIP_FIT,
                  re.compile(r"^(grow|prune|optimize) [a-z-]+ L=\S+$")),
}


def bare_seconds(flow: str, config) -> tuple[float, dict]:
    """Seconds of ``flow``'s work on ``config``'s data in a fresh Python process with one
    BLAS thread (:data:`BARE`), and what the work computed (its script's result)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", BARE[flow].script, config.model_dump_json()],
                         capture_output=True, text=True, env=env, timeout=24 * 3600)
    if out.returncode != 0:
        raise RuntimeError(f"the bare {flow} run failed: {out.stderr.strip()[-2000:]}")
    done = json.loads(out.stdout.strip().splitlines()[-1])
    return float(done["seconds"]), done.get("result", {})


def training_seconds(intervals: list[tuple[float, float]], names: list[str],
                     training: re.Pattern) -> float:
    """The union of the Running intervals of the task runs ``training`` matches among
    ``intervals`` (one per task run, named ``names``)."""
    return busy_seconds([iv for iv, name in zip(intervals, names, strict=True)
                         if training.match(name)])


def _say(*parts) -> None:
    print("[bench overhead]", *parts, file=sys.stderr, flush=True)


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``[start, end]`` intervals."""
    total, end = 0.0, -float("inf")
    for s, e in sorted(intervals):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def task_runs(flow_run_id, page: int = 200, settle: float = RECORDED_WITHIN) -> list:
    """Every task run of a flow run, read from the Prefect API.

    One read returns at most ``PREFECT_API_DEFAULT_LIMIT`` runs (200 by default), so they are
    read ``page`` at a time in a fixed order until a page comes back empty.  The server records
    task runs from the events the flow's process sends, a little after they happen (in
    batches, by the servers scarce starts): the whole read is repeated ``settle`` seconds
    apart, longer than a batch waits, until two give the same runs in the same states (at
    most a minute).
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.client.schemas.sorting import TaskRunSort

    def read_all(client) -> list:
        runs, offset = {}, 0
        while True:
            got = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
                sort=TaskRunSort.ID_DESC, limit=page, offset=offset)
            if not got:
                return list(runs.values())
            runs.update((tr.id, tr) for tr in got)
            offset += len(got)

    seen, deadline = None, time.monotonic() + 60
    with get_client(sync_client=True) as client:
        while True:
            runs = read_all(client)
            now = sorted((str(tr.id), tr.state_name or "") for tr in runs)
            if now == seen or time.monotonic() > deadline:
                return runs
            seen = now
            time.sleep(settle)


def _task_intervals(flow_run_id) -> tuple[list[tuple[float, float]], list[str], int]:
    """Running intervals of a flow run's task runs, the names of those that ran, and the
    number of cache hits."""
    runs = task_runs(flow_run_id)
    intervals, ran, cached = [], [], 0
    for tr in runs:
        name = tr.state.name if tr.state else ""
        if name == "Cached":
            cached += 1
        elif tr.start_time and tr.end_time:
            ran.append(tr.name)
            intervals.append((tr.start_time.timestamp(), tr.end_time.timestamp()))
    return intervals, ran, cached


def warm_up() -> None:
    """Start the Prefect server (a temporary one unless PREFECT_API_URL is set) untimed."""
    from prefect import flow

    @flow(name="overhead-warm-up")
    def warm_up() -> int:
        return 1

    warm_up()


def _timed_run(spec, config, options):
    flow_fn = spec.load_flow()
    t0 = time.perf_counter()
    state = flow_fn(config=config, options=options, return_state=True)
    seconds = time.perf_counter() - t0
    summary = state.result()  # raises if the flow failed
    return seconds, state.state_details.flow_run_id, summary["manifest"]


def run(args: argparse.Namespace) -> pd.DataFrame:
    from scarce.flows import registry
    from scarce.flows.runtime import RunOptions

    names = chosen_flows(args.flows)
    configs = flow_configs(names, args.overrides, args.quick)
    rows: list[tuple] = []
    warm_up()
    for name in names:
        spec, config = registry.FLOWS[name], configs[name]
        work = BARE[name]
        why_not = work.why_not(config)
        if why_not is not None:
            _say(f"{name}: no bare run: {why_not}")
        bares, trains, firsts, busys = [], [], [], []
        for r in range(args.repeats):
            bare = None
            if why_not is None:
                _say(f"{name}: the same work bare ({work.call} in a fresh process), "
                     f"repeat {r + 1} of {args.repeats}")
                bare, result = bare_seconds(name, config)
                bares.append(bare)
                if result:
                    _say(f"{name}: bare {bare:.1f}s: {json.dumps(result)}")
            tmp = Path(tempfile.mkdtemp(prefix=f"scarce-overhead-{name}-"))
            try:
                opts = {"store": str(tmp / "cache"), "runs": str(tmp / "runs")}
                _say(f"{name}: first run (every step computed), repeat {r + 1} of "
                     f"{args.repeats}")
                first, first_id, _ = _timed_run(spec, config, RunOptions(**opts))
                intervals, ran, _ = _task_intervals(first_id)
                firsts.append(first)
                busys.append(busy_seconds(intervals))
                if bare is not None:
                    trains.append(training_seconds(intervals, ran, work.training))
                    _say(f"{name}: training {trains[-1]:.1f}s in the flow, {bare:.1f}s bare "
                         f"({trains[-1] / bare:.2f}x)")
                if r == args.repeats - 1:
                    _say(f"{name}: first run {first:.1f}s; cached run")
                    again, again_id, manifest = _timed_run(spec, config, RunOptions(**opts))
                    _, ran_again, prefect_cached = _task_intervals(again_id)
                    completed, recomputed = len(ran), len(ran_again)
                    outputs = manifest["outputs"]
                    reused = sum(o["cached"] for o in outputs)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        first, busy = statistics.median(firsts), statistics.median(busys)
        fixed = statistics.median(f - b for f, b in zip(firsts, busys, strict=True))
        rows += [
            (name, "first", first, "task runs computed", completed),
            (name, "first", first, "seconds inside task runs (union)", busy),
            (name, "first", first, "orchestration share of wall time", 1 - busy / first),
            (name, "cached", again, "outputs reused", reused),
            (name, "cached", again, "outputs recomputed", len(outputs) - reused),
            (name, "cached", again, "task runs (cached, recomputed)", prefect_cached + recomputed),
            (name, "cached", again, "time / first run", again / first),
            (name, "first", first, "fixed cost seconds (wall less inside task runs)", fixed),
        ]
        if bares:
            bare, train = statistics.median(bares), statistics.median(trains)
            ratio = statistics.median(t / b for t, b in zip(trains, bares, strict=True))
            n_training = sum(bool(work.training.match(n)) for n in ran)
            rows += [(name, "bare", bare, f"{work.call} seconds, fresh process", bare),
                     (name, "first", first, "training task runs seconds (union)", train),
                     (name, "first", first, "in-flow training / bare fit", ratio)]
            _say(f"RESULT {name}: training {train:.1f}s in the flow ({n_training} task runs), "
                 f"{bare:.1f}s bare (median of {args.repeats} pairs' ratios {ratio:.2f}x: "
                 + ", ".join(f"{t / b:.2f}" for t, b in zip(trains, bares, strict=True))
                 + f"); fixed cost {fixed:.1f}s")
        _say(f"RESULT {name}: first {first:.1f}s ({completed} tasks, {busy:.1f}s inside them, "
             f"orchestration {1 - busy / first:.0%}); cached {again:.1f}s = "
             f"{again / first:.1%} of the first ({reused} of {len(outputs)} outputs reused; "
             f"{prefect_cached + recomputed} task runs"
             f"{': ' + ', '.join(ran_again) if ran_again else ''})")
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["seconds"] = table["seconds"].round(2)
    table["value"] = table["value"].astype(float).round(4)
    return table
