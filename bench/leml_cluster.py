"""The LEML flow on a Dask cluster against the same flow in one process.

Kept as one module: the cluster benchmark's set-up, runs and table share one synthetic
problem.

Section ``distributed`` of ``scarce bench leml``.  The synthetic Wikipedia-shaped problem of
:func:`scarce.bench.synthetic.synthetic_wikipedia` at ``--synthetic-scale`` (1 is the size of Yu et
al.'s Wikipedia set: 881,805 x 366,932, 213,707 labels; 10,000 test points) is written as
two folders of Parquet parts, ``--parts`` each (training and test), one part generated at a
time from its own seed stream, so this process never holds the whole X either.  Then, for
each mode of ``--modes``, ``scarce run leml`` runs as a process of its own on those folders
(squared loss, k = 50, lambda 1, ``--flow-iterations`` alternating iterations of 10 CG
steps, no intercept, float32, fully observed, no baseline), each in a fresh store, so every
step is computed:

* ``local``: the whole flow in one process (``compute.backend: local``, the parts stacked);
* ``blocks``: one process over the parts as row blocks (``compute.backend: local-blocks``);
* ``dask-1`` and ``dask-2``: a LocalCluster of 1 or 2 single-threaded worker processes
  started by the benchmark (``--dask-memory-limit`` each) and given to the flow by
  ``compute.address``: each part is one row block read by a worker; the flow's process is
  the client, and runs the steps' solvers (the W-step's conjugate gradient);
* ``dask-1-worker`` and ``dask-2-worker``: the same, with ``compute.solvers: worker``: the
  steps that run the solvers run whole on a worker too, and the flow's process only
  orchestrates.

The same modes run first on each of ``--datasets`` whose Extreme Classification files are
under ``--data`` (``xmc/<name>/<name>_xmlrepo_{train,test}.txt.gz``; Bibtex is bundled):
the bundled config (``configs/leml.yaml``) with only the data changed and no baseline, as
``scarce run leml`` runs it.

Rows, per mode: the flow's wall time and its ratio to the ``local`` run's; whether P@1, P@3
and P@5 equal the ``local`` run's exactly; the seconds of each iteration (its W-step and
H-step, from the steps' ``timings`` entries) and their mean; the peak RSS of the flow's
process (its ``VmHWM``, read until it exits: the Prefect API is the
benchmark's, so the flow starts no server); each worker's peak RSS (``VmHWM``) and the
RSS it had before the flow, and on the synthetic problem the bytes of the row blocks it
holds (block ``b`` on worker ``b mod n``, their size estimated from the parts' footers) and
its peak above them (what a worker holds whatever its share of the data); each
worker's ``VmRSS`` sampled every 20 ms, its highest reading while each kind of task
computed on it and between tasks (:func:`peaks_by_task`: where its peak is); P@1/3/5;
max |W - W_local| / max |W_local| and the same for H;
whether W and H equal the first Dask mode's bit for bit.  Then ``W-step / bare products``:
a W-step's seconds over what its sparse products alone cost on the same parts, timed here
in one thread, (CG iterations + 1) x sum over parts of (X_b V + X_b^T U), divided by the
number of workers (4 parts on 2 workers: 2 each); and the same products timed on as many
processes as workers at once, each with its workers' parts (:func:`bare_products_at_once`):
the W-step over that, and the ceiling this machine gives the workers' products, one process
over as many at once (its cores share memory bandwidth and caches).

Times are wall-clock on a shared 2-core machine: compare modes of one run, as ratios.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

MODES = ("local", "blocks", "dask-1", "dask-2", "dask-1-worker", "dask-2-worker")
TEST_POINTS = 10_000  # the Wikipedia set's test points (Yu et al., Table 2)


def _import_worker_modules() -> None:
    """Run on each worker before anything is timed: the block tasks' modules imported."""
    import importlib

    importlib.import_module("scarce.tasks.leml_dask")


def _say(*parts) -> None:
    print("[bench leml distributed]", *parts, file=sys.stderr, flush=True)


def write_parts(folder: Path, n: int, d: int, n_labels: int, parts: int, seed: int,
                stream: int) -> dict:
    """``parts`` Parquet pairs ``part-NNN.X.parquet`` / ``.Y.parquet`` of ``n`` points in
    all, part ``i`` drawn by :func:`scarce.bench.synthetic.synthetic_wikipedia` from the seed stream
    (``stream``, ``i``): one part in memory at a time.  Returns the counts."""
    from scarce.bench.synthetic import synthetic_wikipedia
    from scarce.tasks.store.atomic import atomic_write_parquet, synced_folders
    from scarce.tasks.store.encoding import encode

    nnz_x = nnz_y = 0
    with synced_folders() as syncs:  # the folder fsync-ed once, after the last part
        for i, rows in enumerate(np.array_split(np.arange(n), parts)):
            X, Y = synthetic_wikipedia(len(rows), d, n_labels, seed=seed, stream=(stream, i))
            X.sum_duplicates()  # as the part is stored: its nnz is the flow's
            atomic_write_parquet(folder / f"part-{i:03d}.X.parquet", encode(X), syncs)
            atomic_write_parquet(folder / f"part-{i:03d}.Y.parquet", encode(Y), syncs)
            nnz_x, nnz_y = nnz_x + X.nnz, nnz_y + Y.nnz
            del X, Y
    return {"n": n, "nnz_x": nnz_x, "nnz_y": nnz_y}


def flow_config(train: Path, test: Path, mode: str, iterations: int, address: str | None,
                seed: int) -> dict:
    """The bundled LEML config with the benchmark's data, model and runner."""
    from scarce.flows.config import project_root, read_yaml

    config = read_yaml(project_root() / "configs" / "leml.yaml", "config")
    config.update(seed=seed, name="synthetic-wikipedia", baselines=[], observed_fraction=1.0)
    config["dataset"].update(name="synthetic-wikipedia", format="parquet", train=str(train),
                             test=str(test), normalize="none", validation_fraction=0.0)
    # a fixed count of iterations, the same in every placement: no early stopping (it holds
    # out rows of one file, and this data is a folder of parts) and no tuning
    config["model"].update(loss="squared", rank=50, lam=1.0, outer_iterations=iterations,
                           cg_max_iter=10, cg_tol=1e-3, cg_preconditioner="none",
                           fit_intercept=False, dtype="float32", early_stopping=False)
    config["tune"] = {**config.get("tune", {}), "when": "never"}
    return _runner(config, mode, address)


def _status_bytes(pid: int, field: str) -> int | None:
    """A memory field of ``/proc/<pid>/status`` (``VmHWM``, ``VmRSS``) in bytes; None when
    the process is gone (or there is no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class _Watch:
    """Calls :meth:`_read` every ``every`` seconds in a thread of its own until :meth:`stop`."""

    def __init__(self, every: float) -> None:
        import threading

        self.every = every
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        raise NotImplementedError

    def _watch(self) -> None:
        while not self._done.wait(self.every):
            self._read()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


class _PeakWatch(_Watch):
    """The peak RSS of process ``pid`` alone: its ``VmHWM`` (the high-water mark of its own
    memory since its exec), read every 50 ms until :meth:`stop`.

    Not ``ru_maxrss`` from ``wait4``: Linux keeps a process's high-water mark across
    ``exec``, so a child forked from this benchmark reported at least this process's RSS at
    the fork (1.49 GiB after writing the synthetic parts, the same in every mode), not its
    own peak.
    """

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0
        super().__init__(0.05)

    def _read(self) -> None:
        self.peak = max(self.peak, _status_bytes(self.pid, "VmHWM") or 0)  # gone: it stands


class _RSSTimeline(_Watch):
    """The resident set size of each of ``pids`` (``VmRSS``, bytes) against the wall clock
    (``time.time()``, the clock of the scheduler's task stream on the same machine), read
    every 20 ms until :meth:`stop`: ``samples[name]`` is a list of ``(time, rss)``."""

    def __init__(self, pids: dict[str, int], every: float = 0.02) -> None:
        self.pids = pids
        self.samples: dict[str, list[tuple[float, int]]] = {name: [] for name in pids}
        super().__init__(every)

    def _read(self) -> None:
        for name, pid in self.pids.items():
            rss = _status_bytes(pid, "VmRSS")
            if rss is not None:
                self.samples[name].append((time.time(), rss))


BETWEEN_TASKS = "between tasks"


def task_kind(key) -> str:
    """What a task of the flow does, from its key: ``w-block`` (the read of a row block,
    ``leml-w-block-<token>-<b>of<n>``), ``w-block_products``, ``h-...``, ``e-...`` (the
    function a block task runs, :meth:`scarce.tasks.leml_dask.RowBlockBackend._key`), or Dask's own
    key prefix for any other task."""
    import re

    from dask.utils import key_split

    found = re.match(r"leml-([a-z])-([A-Za-z_]+)", str(key))
    return f"{found[1]}-{found[2]}" if found else key_split(key)


def peaks_by_task(samples: list[tuple[float, int]], stream: list[dict],
                  worker: str) -> dict[str, int]:
    """The highest RSS of one worker's ``samples`` (``(time, rss)``) while each kind of
    task (:func:`task_kind`) was computing on it, by the scheduler's task stream
    (``get_task_stream``: each record's ``worker`` and its ``startstops``' ``compute``
    intervals), and :data:`BETWEEN_TASKS` for the samples outside every interval: where in
    the flow the worker's memory peaked."""
    spans = sorted((part["start"], part["stop"], task_kind(record["key"]))
                   for record in stream if record["worker"] == worker
                   for part in record["startstops"] if part["action"] == "compute")
    starts = np.array([span[0] for span in spans])
    peaks: dict[str, int] = {}
    for t, rss in samples:
        i = int(np.searchsorted(starts, t, side="right")) - 1  # the last task begun by t
        kind = spans[i][2] if i >= 0 and t <= spans[i][1] else BETWEEN_TASKS
        peaks[kind] = max(peaks.get(kind, 0), rss)
    return peaks


def run_flow(config: dict, root: Path, env: dict[str, str]) -> dict:
    """``scarce run leml`` on ``config`` as a process of its own, in a fresh store and runs
    folder under ``root``; its wall seconds, peak RSS (bytes, that process alone) and run
    folder."""
    from scarce.flows.config import project_root

    root.mkdir(parents=True)
    path = root / "leml.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**env, "SCARCE_STORE": str(root / "cache"), "SCARCE_RUNS": str(root / "runs")}
    scarce = Path(sys.executable).with_name("scarce")
    start = time.perf_counter()
    with open(root / "flow.log", "wb") as log:
        proc = subprocess.Popen([str(scarce), "run", "leml", "--config", str(path)],
                                cwd=project_root(), env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        watch = _PeakWatch(proc.pid)
        _, status, _usage = os.wait4(proc.pid, 0)
        watch.stop()
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = (root / "flow.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"scarce run leml exited {proc.returncode}:\n{tail}")
    run_dir = next((root / "runs").glob("leml-*"))
    return {"seconds": seconds, "peak_rss": watch.peak, "run_dir": run_dir,
            "store": root / "cache"}


def read_run(result: dict) -> dict:
    """The run's factors, metrics and per-iteration seconds (W-step, H-step)."""
    import pandas as pd

    from scarce.tasks.store import Store
    from scarce.tasks.store.encoding import read_parquet_entry

    run_dir = result["run_dir"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    store = Store(result["store"])
    halves = pd.concat([store.read(o["ref"]) for o in manifest["outputs"]
                        if o["ref"].endswith("-timings")
                        and o["step"] in ("leml-alternate-W", "leml-alternate-H")])
    per = halves.pivot_table(index="iteration", columns="half", values="seconds",
                             aggfunc="sum")
    cg = halves[halves["half"] == "W"].set_index("iteration")["cg_iter"]
    metrics = pd.read_parquet(run_dir / "metrics.parquet")
    return {"W": np.asarray(read_parquet_entry(run_dir / "outputs" / "model" / "W.parquet")),
            "H": np.asarray(read_parquet_entry(run_dir / "outputs" / "model" / "H.parquet")),
            "metrics": dict(zip(metrics["metric"], metrics["value"], strict=True)),
            "iterations": per, "cg": cg}


def _part_with_vectors(path: Path, k: int, rng) -> tuple:
    """A training part's X (CSR) and random ``V`` (d x k) and ``U`` (n_b x k) for it."""
    from scarce.tasks.store.encoding import read_parquet_entry

    X = read_parquet_entry(path).tocsr()
    return (X, rng.standard_normal((X.shape[1], k), dtype=np.float32),
            rng.standard_normal((X.shape[0], k), dtype=np.float32))


def _best_products_seconds(held: list[tuple]) -> float:
    """Seconds of ``X_b V`` and ``X_b^T U`` over the parts ``held``, best of 3, one thread."""
    from threadpoolctl import threadpool_limits

    best = np.inf
    with threadpool_limits(1):
        for _ in range(3):
            t = time.perf_counter()
            for X, V, U in held:
                X @ V
                X.T @ U
            best = min(best, time.perf_counter() - t)
    return best


def bare_products(train: Path, cg_steps: float, k: int, seed: int) -> float:
    """Seconds of the sparse products of one W-step alone, one thread: ``cg_steps`` times,
    for every part, ``X_b V`` (d x k) and ``X_b^T U`` (n_b x k), best of 3 (one part in
    memory at a time)."""
    rng = np.random.default_rng(seed)
    return cg_steps * sum(_best_products_seconds([_part_with_vectors(path, k, rng)])
                          for path in sorted(train.glob("*.X.parquet")))


def _bare_share(paths: list[str], k: int, seed: int, barrier, queue) -> None:
    """In a process of its own: the seconds of ``X_b V`` and ``X_b^T U`` over its parts
    ``paths``, best of 3, started when every process of the measurement has its parts."""
    rng = np.random.default_rng(seed)
    held = [_part_with_vectors(Path(path), k, rng) for path in paths]
    barrier.wait()
    queue.put(_best_products_seconds(held))


def bare_products_at_once(train: Path, cg_steps: float, k: int, seed: int,
                          processes: int) -> float:
    """What :func:`bare_products` measures, the parts shared among ``processes`` processes
    as the row blocks are among the workers (part ``b`` on process ``b mod processes``) and
    timed all at once: the slowest process's seconds times ``cg_steps``.  Against
    :func:`bare_products` over ``processes``, it is what this machine gives a second worker
    (its cores share memory bandwidth and caches), the ceiling of the speed-up of the
    workers' block products."""
    import multiprocessing

    parts = [str(p) for p in sorted(train.glob("*.X.parquet"))]
    context = multiprocessing.get_context("spawn")
    barrier, queue = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=_bare_share, args=(parts[i::processes], k, seed,
                                                         barrier, queue))
               for i in range(processes)]
    for w in workers:
        w.start()
    try:
        seconds = [queue.get(timeout=3600) for _ in workers]
    finally:
        for w in workers:
            w.join()
    return cg_steps * max(seconds)


def run_section(args, rows: list[tuple], scale: float) -> None:
    """The flow in each mode of ``--modes`` on each of ``--datasets`` found under ``--data``
    (the bundled config, the data changed, no baseline) and on the synthetic problem."""
    from prefect.settings import PREFECT_API_URL

    from scarce.bench.synthetic import WIKI

    modes = list(args.modes)  # each one of MODES (checked by the parser)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    if PREFECT_API_URL.value():
        env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    with tempfile.TemporaryDirectory(prefix="scarce-bench-distributed-") as tmp:
        tmp = Path(tmp)
        for name in args.datasets:
            folder = Path(args.data) / "xmc" / name
            train, test = (folder / f"{name}_xmlrepo_{p}.txt.gz" for p in ("train", "test"))
            if not (train.is_file() and test.is_file()):
                _say(f"{name}: no {train.name} and {test.name} under {folder}: skipped")
                continue

            def config(mode, address, name=name, train=train, test=test):
                return dataset_config(name, train, test, mode, address)

            results = _compare(args, name, modes, config, tmp / name, env)
            _rows(rows, name, "the bundled config, no baseline", modes, results, None)
        n, d, n_labels = (max(64, int(round(v * scale))) for v in WIKI)
        n_test = max(64, int(round(TEST_POINTS * scale)))
        name = f"synthetic Wikipedia-shaped ({scale:g}x)"
        _say(f"{name}: writing {n} x {d} ({n_labels} labels) and {n_test} test points as "
             f"{args.parts} Parquet parts each")
        t = time.perf_counter()
        train = write_parts(tmp / "train", n, d, n_labels, args.parts, args.seed, 0)
        write_parts(tmp / "test", n_test, d, n_labels, args.parts, args.seed, 1)
        _say(f"{name}: written in {time.perf_counter() - t:.0f} s, nnz(X) {train['nnz_x']}")
        setting = (f"n={n} d={d} L={n_labels} nnz(X)={train['nnz_x']} nnz(Y)={train['nnz_y']}"
                   f" test={n_test}, k=50 squared, {args.flow_iterations} iterations of 10 CG"
                   f", {args.parts} parts")

        def synthetic(mode, address):
            return flow_config(tmp / "train", tmp / "test", mode, args.flow_iterations,
                               address, args.seed)

        results = _compare(args, name, modes, synthetic, tmp / "synthetic", env)
        bare = None
        if any(m != "local" for m in modes):
            some = next(results[m] for m in modes if m != "local")
            steps = float(some["cg"].mean()) + 1
            bare = {0: bare_products(tmp / "train", steps, 50, args.seed)}
            for n in sorted({int(m.split("-")[1]) for m in modes if m.startswith("dask")}):
                bare[n] = bare_products_at_once(tmp / "train", steps, 50, args.seed, n)
                _say(f"{name}: bare products on {n} process(es) at once {bare[n]:.1f} s, "
                     f"one after the other in one {bare[0]:.1f} s")
        _rows(rows, name, setting, modes, results, bare, block_bytes(tmp / "train"))


def block_bytes(train: Path) -> list[int]:
    """The bytes of each row block of the training parts in ``train`` once a worker has
    prepared it (its ``X``, ``X^T``, ``Y`` and ``Y^T``; estimated from the files' footers by
    :meth:`~scarce.tasks.leml_dask.PartitionedData.block_nbytes`), as the benchmark's flow
    prepares them (float32, no constant feature)."""
    from scarce.tasks.leml import input_parts
    from scarce.tasks.leml_dask import PartitionedData
    from scarce.tasks.leml_files import parquet_pair

    parts = [dict(zip(("X", "Y"), map(str, parquet_pair(x)), strict=True))
             for x in input_parts(train, "parquet")]
    return PartitionedData.from_files(parts, fit_intercept=False,
                                      dtype="float32").block_nbytes()


def _runner(config: dict, mode: str, address: str | None) -> dict:
    """``config`` with the ``compute`` section of ``mode``."""
    backend = {"local": "local", "blocks": "local-blocks"}.get(mode, "dask")
    config["compute"].update(backend=backend, address=address)
    if mode.endswith("-worker"):
        config["compute"]["solvers"] = "worker"
    return config


def dataset_config(name: str, train: Path, test: Path, mode: str, address: str | None) -> dict:
    """The bundled LEML config on another data set (its XC files), without baselines."""
    from scarce.flows.config import project_root, read_yaml

    config = read_yaml(project_root() / "configs" / "leml.yaml", "config")
    config.update(name=name, baselines=[])
    config["dataset"].update(name=name, train=str(train), test=str(test))
    return _runner(config, mode, address)


def _compare(args, name: str, modes: list[str], make_config, root: Path,
             env: dict[str, str]) -> dict[str, dict]:
    """The flow of ``make_config(mode, scheduler address)`` in each mode, a fresh
    LocalCluster of single-threaded worker processes for each Dask mode: per mode the
    run's results (:func:`run_flow`, :func:`read_run`) and the workers' RSS."""
    from contextlib import nullcontext

    import dask
    from distributed import Client, LocalCluster, get_task_stream

    from scarce.tasks.leml_dask import NO_WORK_STEALING, tasks_off_their_worker, worker_peak_memory

    results: dict[str, dict] = {}
    for mode in modes:
        workers = int(mode.split("-")[1]) if mode.startswith("dask") else 0
        cluster = client = None
        try:
            if workers:
                with dask.config.set(NO_WORK_STEALING):  # as the flow's own clusters
                    cluster = LocalCluster(n_workers=workers, threads_per_worker=1,
                                           processes=True,
                                           memory_limit=args.dask_memory_limit,
                                           dashboard_address=None)
                client = Client(cluster)
                client.wait_for_workers(workers)
                client.run(_import_worker_modules)
                base = worker_peak_memory(client)
                timeline = _RSSTimeline(client.run(os.getpid))
            config = make_config(mode, cluster.scheduler_address if cluster else None)
            _say(f"{name}: {mode} ...")
            try:
                with get_task_stream(client) if workers else nullcontext() as stream:
                    result = run_flow(config, root / mode, env)
            finally:
                if workers:
                    timeline.stop()
            if workers:
                peaks = worker_peak_memory(client)
                result["off"] = len(tasks_off_their_worker(stream.data, list(peaks)))
                result["phases"] = [peaks_by_task(timeline.samples[a], stream.data, a)
                                    for a in sorted(peaks)]
        finally:
            if client is not None:
                client.close()
            if cluster is not None:
                cluster.close()
        result.update(read_run(result))
        if workers:
            result["workers"] = [(base[a], peaks[a]) for a in sorted(peaks)]
        results[mode] = result
        per = result["iterations"].sum(axis=1)
        _say(f"RESULT distributed {name} | {mode} | wall {result['seconds']:.1f} s, "
             f"iterations " + ", ".join(f"{s:.1f}" for s in per) + " s, client peak "
             f"{result['peak_rss'] / 2**30:.2f} GiB"
             + (", workers peak " + ", ".join(f"{p / 2**30:.2f}" for _, p in
                                              result["workers"]) + " GiB" if workers
                else "")
             + (f", {result['off']} row-block tasks off their worker" if workers else ""))
        for i, phases in enumerate(result.get("phases", [])):
            _say(f"RESULT distributed {name} | {mode} | worker {i} sampled RSS peak by task: "
                 + ", ".join(f"{kind} {rss / 2**30:.2f}" for kind, rss in
                             sorted(phases.items(), key=lambda kv: -kv[1])) + " GiB")
    return results


def _rows(rows, name, setting, modes, results, bare, blocks=None) -> None:
    reference = results.get("local")
    first_dask = next((results[m] for m in modes if m.startswith("dask")), None)
    for mode in modes:
        r = results[mode]
        method = f"LEML flow ({mode})"

        def add(metric, value, r_method=method):
            rows.append(("distributed", name, r_method, setting, metric, float(value)))

        per = r["iterations"]
        add("wall seconds", r["seconds"])
        for it, row in per.iterrows():
            add(f"iteration {it} seconds (W + H)", row.sum())
        add("mean iteration seconds", per.sum(axis=1).mean())
        add("mean W-step seconds", per["W"].mean())
        add("mean H-step seconds", per["H"].mean())
        add("client peak RSS GiB", r["peak_rss"] / 2**30)
        if "off" in r:
            add("row-block tasks run off their block's worker", r["off"])
        for i, (start, peak) in enumerate(r.get("workers", [])):
            add(f"worker {i} RSS GiB before the flow", start / 2**30)
            add(f"worker {i} peak RSS GiB", peak / 2**30)
            if blocks is not None:  # block b on worker b mod n, as RowBlockBackend places them
                held = sum(blocks[i::len(r["workers"])])
                add(f"worker {i} row blocks GiB", held / 2**30)
                add(f"worker {i} peak above its row blocks GiB", (peak - held) / 2**30)
            for kind, rss in sorted(r["phases"][i].items()):
                add(f"worker {i} sampled peak RSS GiB in {kind}", rss / 2**30)
        for metric in ("precision@1", "precision@3", "precision@5"):
            add(metric, r["metrics"][metric])
        if reference is not None and mode != "local":
            add("wall / local wall", r["seconds"] / reference["seconds"])
            add("P@1, P@3, P@5 equal to local's (exactly)",
                all(r["metrics"][m] == reference["metrics"][m]
                    for m in ("precision@1", "precision@3", "precision@5")))
            for f in ("W", "H"):
                ref = reference[f]
                add(f"max|d{f}|/max|{f}| vs local (x1e-6)",
                    1e6 * np.abs(r[f] - ref).max() / np.abs(ref).max())
        if first_dask is not None and mode.startswith("dask"):
            add("W and H bit-identical to the first Dask mode",
                np.array_equal(r["W"], first_dask["W"]) and np.array_equal(r["H"],
                                                                            first_dask["H"]))
        if bare is not None and mode != "local":
            workers = int(mode.split("-")[1]) if mode.startswith("dask") else 1
            add("W-step / bare products", per["W"].mean() / (bare[0] / workers))
            if workers in bare and mode.startswith("dask"):
                add("W-step / bare products on as many processes at once",
                    per["W"].mean() / bare[workers])
                add("bare products: one process / as many at once (the machine's ceiling)",
                    bare[0] / bare[workers])
