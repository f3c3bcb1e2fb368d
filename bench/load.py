"""How long a fresh Python process takes to load a LEML model and predict: `scarce bench load`.

What a script pays for ``import scarce; m = scarce.load_model(RUN); m.predict_top_k(ROWS, 5)``
in a new interpreter, from its start to its exit, beside peers measured in the same run.  Each
row is one ``python -c`` command, run ``--repeats`` times in a rotated order (so that a burst of
load on a shared machine falls on every row alike); the table holds, per row, the median and
the smallest wall-clock seconds measured by this process around the child, the median seconds
of CPU the child used (user and system, from the operating system: the time it waited for a
core left out), each median over the peer's (:data:`PEER`), and the heavy packages the child
had imported when it ended (:data:`HEAVY`):

* ``python``: the interpreter's start and exit alone (``pass``);
* ``numpy + scipy.sparse``: importing them, the peer;
* ``+ pandas + pyarrow.parquet``: importing pandas and pyarrow's Parquet reader too, which a
  result that is a DataFrame read from Parquet files needs, whatever the loader;
* ``bare factors``: the same scores from the model's files by a script of its own: ``W`` and
  ``H`` read from their Parquet files, the rows read, their l2 norms divided out, ``X W H^T``
  and each row's five best labels by numpy (no manifest, no ``model.json``, no checks, no
  label names);
* ``load_model + predict_top_k``: the command above, the run given by its folder;
* ``import sklearn.base`` and ``import prefect``: what the load path leaves out, for scale.

The model is ``RUN_ID``'s (a run id of the project, or a run folder), else that of a LEML run
of the bundled config (``configs/leml.yaml``, its baselines left out) made first in a temporary
folder.  ``ROWS`` is a file of the first ``--rows`` rows of the run's test file, in its format
(the Extreme Classification text format, or a CSV table).  The table is printed after a line
with the date, the command line and the machine's load average before and after: the wall
times are a quiet machine's only when the load stayed well under its cores.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from scarce.flows.commands import types

#: The packages a child is asked about when it ends.
HEAVY = ("prefect", "sklearn", "dask", "distributed", "numba", "pydantic")
#: The row every median is divided by.
PEER = "numpy + scipy.sparse"
LOAD = "load_model + predict_top_k"
#: What any loader that reads Parquet files and returns DataFrames imports: the row the load
#: path cannot go under while its results are DataFrames.
FLOOR = "+ pandas + pyarrow.parquet"
FLOOR_CODE = "import numpy, scipy.sparse, pandas, pyarrow.parquet"
COLUMNS = ["command", "median_seconds", "min_seconds", "median_cpu_seconds", "ratio_to_peer",
           "cpu_ratio_to_peer", "heavy_imports", "repeats", "code"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", nargs="?", default=None, metavar="RUN_ID",
                        help="the LEML run whose model is loaded: a run id of this project or "
                        "a run folder (default: a run of the bundled config, made first in a "
                        "temporary folder)")
    parser.add_argument("--rows", type=types.POSITIVE, default=100,
                        help="rows predicted: the first rows of the run's test file")
    parser.add_argument("--repeats", type=types.POSITIVE, default=7,
                        help="fresh processes per command")


def _say(*parts) -> None:
    print("[bench load]", *parts, file=sys.stderr, flush=True)


def _trained_run(tmp: Path) -> Path:
    """The folder of a LEML run of the bundled config, its baselines left out, in ``tmp``."""
    from scarce.flows.config import load_config, resolve_path
    from scarce.flows.registry import FLOWS
    from scarce.flows.runtime import RunOptions

    spec = FLOWS["leml"]
    config = load_config(resolve_path(spec.config_file), spec.load_model(), ["baselines=[]"])
    _say("training the bundled LEML config in", tmp)
    state = spec.load_flow()(config=config, return_state=True,
                             options=RunOptions(store=str(tmp / "cache"), runs=str(tmp / "runs")))
    return Path(state.result()["run_dir"])  # (raises if the flow failed)


def _run_folder(run: str) -> Path:
    from scarce.flows import manifest as mf
    from scarce.flows.config import default_runs_root

    path = Path(run)
    folder = path if (path / mf.MANIFEST).is_file() else default_runs_root() / run
    if not (folder / mf.MANIFEST).is_file():
        raise ValueError(f"--run {run!r}: no such run folder or run id in "
                         f"{default_runs_root()}")
    if mf.read_manifest(folder)["flow"] != "leml":
        raise ValueError(f"--run {run!r}: not a LEML run")
    return folder.resolve()


def _first_rows(run_dir: Path, n: int, tmp: Path) -> Path:
    """A file of the first ``n`` rows of the run's test file, in its format."""
    from scarce.flows import manifest as mf
    from scarce.flows.config import resolve_path

    dataset = mf.read_manifest(run_dir)["config"]["dataset"]
    source, fmt = resolve_path(dataset["test"]), dataset.get("format", "xmc")
    if fmt == "xmc" and source.is_file():
        opener = gzip.open if source.name.endswith(".gz") else open
        with opener(source, "rt", encoding="utf-8") as f:
            _, d, labels = f.readline().split()
            lines = [line for _, line in zip(range(n), f, strict=False)]
        out = tmp / "rows.txt"
        out.write_text(f"{len(lines)} {d} {labels}\n" + "".join(lines), encoding="utf-8")
        return out
    if fmt == "table" and source.is_file() and source.suffix.lower() == ".csv":
        out = tmp / "rows.csv"
        pd.read_csv(source, nrows=n).to_csv(out, index=False)
        return out
    raise ValueError(f"the run's test file {source} ({fmt}) is not one file of the Extreme "
                     "Classification format or a CSV table")


def commands(run_dir: Path) -> dict[str, str]:
    """The code of each row's ``python -c``, with ``RUN`` (the run folder), ``ROWS`` (the rows'
    file), ``W_FILE`` and ``H_FILE`` (the factors' files) in place of their paths
    (:func:`_filled`)."""
    meta = json.loads((run_dir / "outputs" / "model" / "model.json").read_text())
    out = {"python": "pass", PEER: "import numpy, scipy.sparse", FLOOR: FLOOR_CODE}
    if meta["input_format"] == "xmc":
        out["bare factors"] = "; ".join(line for line in [
            "import numpy as np, scipy.sparse as sp",
            "from scarce.tasks.readers.xmc import read_xmc",
            "from scarce.tasks.store.encoding import read_parquet_entry",
            "W, H = read_parquet_entry(W_FILE), read_parquet_entry(H_FILE)",
            "X = sp.csr_matrix(read_xmc(ROWS, dtype=np.float32)[0])",
            "X = sp.diags(1 / np.maximum(np.sqrt(X.multiply(X).sum(axis=1).A1), 1e-30)) @ X"
            if meta["normalize"] == "l2" else "",
            "A = X @ W[:-1] + W[-1]" if meta["fit_intercept"] else "A = X @ W",
            "top = np.argsort(-(A @ H.T), axis=1, kind='stable')[:, :5]",
        ] if line)
    out[LOAD] = "import scarce; m = scarce.load_model(RUN); m.predict_top_k(ROWS, 5)"
    out["import sklearn.base"] = "import sklearn.base"
    out["import prefect"] = "import prefect"
    return out


def _filled(code: str, run_dir: Path, rows: Path) -> str:
    """``code`` with the paths in place of the names :func:`commands` gives them."""
    meta = json.loads((run_dir / "outputs" / "model" / "model.json").read_text())
    folder = run_dir / "outputs" / "model"
    paths = {"RUN": run_dir, "ROWS": rows, "W_FILE": folder / meta["files"]["W"],
             "H_FILE": folder / meta["files"]["H"]}
    return re.sub(r"\b(RUN|ROWS|W_FILE|H_FILE)\b", lambda m: repr(str(paths[m.group()])), code)


def _child(code: str) -> tuple[float, float, list[str]]:
    """Wall seconds, CPU seconds and the :data:`HEAVY` packages of one ``python -c code``."""
    report = ("\nimport json as _j, sys as _s\n"
              f"print(_j.dumps(sorted({{m.split('.')[0] for m in _s.modules}} & {set(HEAVY)!r})))")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code + report], capture_output=True, text=True,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"{code!r} failed: {out.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(out.stdout.strip().splitlines()[-1])


def measure(codes: dict[str, str], repeats: int, fill=lambda code: code) -> pd.DataFrame:
    """The table of :data:`COLUMNS` for the commands ``codes`` (label -> code, run as
    ``fill(code)``)."""
    labels = list(codes)
    walls = {label: [] for label in labels}
    cpus = {label: [] for label in labels}
    heavy: dict[str, list[str]] = {}
    for r in range(repeats):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            wall, cpu, found = _child(fill(codes[label]))
            walls[label].append(wall)
            cpus[label].append(cpu)
            heavy[label] = found
    peer_wall, peer_cpu = statistics.median(walls[PEER]), statistics.median(cpus[PEER])
    rows = []
    for label in labels:
        wall, cpu = statistics.median(walls[label]), statistics.median(cpus[label])
        rows.append((label, round(wall, 3), round(min(walls[label]), 3), round(cpu, 3),
                     round(wall / peer_wall, 2), round(cpu / peer_cpu, 2),
                     ", ".join(heavy[label]) or "none", repeats, codes[label]))
    return pd.DataFrame(rows, columns=COLUMNS)


def run(args: argparse.Namespace) -> pd.DataFrame:
    tmp = Path(tempfile.mkdtemp(prefix="scarce-bench-load-"))
    try:
        run_dir = _run_folder(args.run_id) if args.run_id is not None else _trained_run(tmp)
        rows = _first_rows(run_dir, args.rows, tmp)
        codes = commands(run_dir)
        load_before = os.getloadavg()[0]
        _say(f"{len(codes)} commands x {args.repeats} fresh processes, model of {run_dir.name}")
        table = measure(codes, args.repeats, lambda code: _filled(code, run_dir, rows))
        load_after = os.getloadavg()[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    command = "scarce bench load" + (f" {args.run_id}" if args.run_id is not None else "") + (
        f" --rows {args.rows} --repeats {args.repeats}")
    print(f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, `{command}` (model of "
          f"{run_dir.name}; load average {load_before:.2f} before, {load_after:.2f} after, "
          f"{os.cpu_count()} cores)\n")
    return table
