"""What each command costs a user, from the shell: `scarce bench latency`.

One row per command, each timed as a user's shell sees it: a fresh process of the ``scarce``
command line (or ``python -c``), its wall time from start to exit measured by this process,
``--repeats`` times with the rows' order rotated each time (so that a burst of load on a
shared machine falls on every row alike); the table holds the medians.  Each command is timed

* **cold**: no Prefect server running (the shared server of the bench's Prefect home is stopped
  first by ``scarce server stop``): the command starts it, as a user's first command does;
* **warm**: the shared server already running (the one the cold command left), with its
  preloaded process (:mod:`scarce.flows.preload`, started when the cold command let the server
  go): ``run``, ``apply`` and ``rerun`` run in a fork of it, waiting for its imports if they
  are not done;
* and the **work** inside it, told by the timed process itself: the time the run it made
  records (its manifest's ``started`` to ``finished``: the flow's body, the server's start and
  the interpreter's imports left out) of the run whose id it printed (``== FLOW: run ID``,
  ``rerun ID of ...``), which must be new and have started and finished while it ran (never
  the training run an apply or a rerun reads); or, for the lean path, the seconds of the
  ``predict_top_k`` call the process printed.  Given for the cold and the warm processes
  apart: a server started by the command itself is still settling while the run's first steps
  call it, and medians over both modes mixed the two (with two repeats, the median of four
  can come out the same in both).  ``runs`` and ``claims`` record no time of their own and
  start no server: their cold and warm are alike.

The rows (``--commands``, comma-separated; :data:`ROWS`):

* ``run-leml``, ``run-relations``, ``run-strip``: ``scarce run FLOW`` on the bundled config
  (with ``--quick``, the small settings of ``scarce bench overhead --quick``; ``--set
  FLOW:KEY=VALUE`` overrides), each time in an empty store and runs folder;
* ``apply-leml``, ``apply-relations``, ``apply-strip``: ``scarce apply RUN --input ...`` on
  the rows the training run evaluated (:func:`scarce.bench.apply._inputs`), each time in an empty
  store;
* ``rerun``: ``scarce rerun RUN`` of the LEML run (every step recomputed and compared);
* ``runs``: ``scarce runs`` (the table of the runs folder's runs);
* ``claims``: ``scarce claims RUN`` of the LEML run (Yu et al.'s claims, one run);
* ``load``: ``python -c "import scarce; m = scarce.load_model(RUN); m.predict_top_k(ROWS, 5)"``
  on the first 100 rows of the LEML run's test file (the goal: 1 s);
* ``bad-config``: ``scarce run leml --set model.rank=0``, a one-line error (the goal: 2 s; the
  bench checks its exit code 2, its one ``error:`` line and that no server was started).

The training runs that the apply, rerun, claims and load rows need are made first, untimed, in
the bench's own folder.  Every process gets the bench's temporary ``PREFECT_HOME`` (its Prefect
database made once before the timings, by those training runs or a trivial command, so that no
row pays for creating it), its own store and runs folder, one BLAS thread and no
``PREFECT_API_URL``.  The peer, ``python -c "import numpy, scipy.sparse"`` (the floor of any
command here), is timed in every repeat; each median is also given as a ratio to its median.
The table is printed after a line with the date, the command line and the machine's load
average before and after: the times are a quiet machine's only when the load stayed well under
its cores.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

#: The training flows of the project (those of :data:`scarce.flows.registry.FLOWS`; a test checks).
FLOWS = ("leml", "relations", "strip")
#: The rows ``--commands`` chooses from, in the table's order.
ROWS = (*(f"run-{f}" for f in FLOWS), *(f"apply-{f}" for f in FLOWS), "rerun", "runs",
        "claims", "load", "bad-config")
PEER = "peer"
PEER_CODE = "import numpy, scipy.sparse"
#: The goals of the rows that have one (seconds of wall time).
GOALS = {"load": 1.0, "bad-config": 2.0}
#: ``scarce bench`` runs this benchmark without a Prefect API of its own: its commands use
#: the bench's Prefect home.
USES_PREFECT = False
#: The override of the bad-config row: a rank the config refuses.
BAD_SETTING = "model.rank=0"
COLUMNS = ["command", "cold_seconds", "warm_seconds", "cold_work_seconds", "warm_work_seconds",
           "cold_over_peer",
           "warm_over_peer", "goal_seconds", "repeats", "code"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from scarce.flows.commands.types import POSITIVE, FlowSetting, comma_list

    parser.add_argument("--commands", type=comma_list(ROWS), default=",".join(ROWS),
                        help=f"comma-separated rows to measure, of {','.join(ROWS)}")
    parser.add_argument("--repeats", type=POSITIVE, default=3,
                        help="fresh processes per row and mode (the median is kept)")
    parser.add_argument("--quick", action="store_true",
                        help="the small configs of `scarce bench overhead --quick`")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        type=FlowSetting(FLOWS), metavar="FLOW:KEY=VALUE",
                        help="a config override of one flow's runs, e.g. leml:baselines=[] "
                        "(every flow's config checked before anything runs)")


def _say(*parts) -> None:
    print("[bench latency]", *parts, file=sys.stderr, flush=True)


def table_order(names: list[str]) -> list[str]:
    """The rows named in ``--commands`` (each one of :data:`ROWS`, checked by the parser), in
    :data:`ROWS`' order, each once."""
    return [r for r in ROWS if r in names]


def parse_overrides(settings: list[tuple[str, str]], quick: bool) -> dict[str, list[str]]:
    """Each flow's ``--set`` overrides (``--quick``'s first), every flow's config read and
    checked with them (:func:`scarce.bench.overhead.flow_configs`) before any work."""
    from scarce.bench.overhead import flow_configs, flow_settings

    flow_configs(list(FLOWS), settings, quick)
    return flow_settings(list(FLOWS), settings, quick)


def check(args: argparse.Namespace) -> None:
    """Every flow's config with the ``--set`` settings (:func:`parse_overrides`)."""
    parse_overrides(args.overrides, args.quick)


def scarce_command() -> list[str]:
    """The ``scarce`` command line of this interpreter (its script, else ``-m``)."""
    script = Path(sys.executable).with_name("scarce")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from scarce.flows.launch import entrypoint; entrypoint()"]


@dataclass
class Bench:
    """The bench's folder and the environment of every process it starts."""

    root: Path

    def __post_init__(self) -> None:
        self.home = self.root / "prefect"
        self.count = 0

    def env(self, store: Path, runs: Path) -> dict[str, str]:
        env = {**os.environ, "PREFECT_HOME": str(self.home), "SCARCE_STORE": str(store),
               "SCARCE_RUNS": str(runs), "SCARCE_SERVER": "shared",
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        # a loaded machine can take more than Prefect's default to start a server: a row that
        # failed for it would measure nothing
        env.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "600")
        env.pop("PREFECT_API_URL", None)
        return env

    def fresh(self, what: str) -> Path:
        """An empty folder of the bench's own."""
        self.count += 1
        path = self.root / f"{what}-{self.count}"
        path.mkdir(parents=True)
        return path

    def scarce(self, args: list[str], store: Path, runs: Path,
               check: bool = True) -> subprocess.CompletedProcess:
        """``scarce ARGS`` in the bench's environment, untimed."""
        out = subprocess.run([*scarce_command(), *args], capture_output=True, text=True,
                             env=self.env(store, runs))
        if check and out.returncode != 0:
            raise RuntimeError(f"scarce {shlex.join(args)} failed ({out.returncode}): "
                               f"{out.stderr.strip()[-2000:]}")
        return out

    def stop_server(self) -> None:
        """Stop the shared server of the bench's Prefect home (none may run)."""
        scratch = self.root / "scratch"
        scratch.mkdir(exist_ok=True)
        self.scarce(["server", "stop", "--force"], scratch, scratch)

    def start_server(self) -> None:
        """Start the shared server of the bench's Prefect home in the background, as a
        command does, and leave it running (it stops when idle, or by :meth:`stop_server`)."""
        from scarce.flows.shared_server import shared

        scratch = self.root / "scratch"
        scratch.mkdir(exist_ok=True)
        with shared(self.home, lambda: self.env(scratch, scratch), timeout=600):
            pass

    def wait_preloaded(self, cap: float = 600.0) -> None:
        """Wait until the preloaded process a command left has done its imports (a warm
        command then finds it as a user's later command does), at most ``cap`` seconds."""
        from scarce.flows import preload

        deadline = time.monotonic() + cap
        while preload.read(self.home) is not None and not preload.ready(self.home):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the preloaded process was not ready after {cap:g} s "
                                   f"(its log: {preload.folder(self.home) / preload.LOG})")
            time.sleep(0.1)

    def server_record(self) -> Path:
        from scarce.flows.shared_server import Place

        return Place(self.home).state


@dataclass
class Timed:
    """One timed process: its wall seconds and the work it recorded (None: none)."""

    wall: float
    work: float | None


def _new_run(runs: Path, before: set[str]) -> Path:
    """The run folder ``runs`` gained since ``before`` (its names then)."""
    new = [p for p in runs.iterdir() if p.name not in before and (p / "manifest.json").is_file()]
    if len(new) != 1:
        raise RuntimeError(f"expected one new run in {runs}, found {[p.name for p in new]}")
    return new[0]


def recorded_seconds(run_dir: Path) -> float:
    """The seconds a run records of itself: its manifest's ``started`` to ``finished``."""
    started, finished = recorded_span(run_dir)
    return (finished - started).total_seconds()


def recorded_span(run_dir: Path) -> tuple[dt.datetime, dt.datetime]:
    """A run's manifest's ``started`` and ``finished``."""
    m = json.loads((run_dir / "manifest.json").read_text())
    return dt.datetime.fromisoformat(m["started"]), dt.datetime.fromisoformat(m["finished"])


#: How the commands that make a run name it on stdout: ``scarce run`` and ``scarce apply``
#: (``print_summary``), ``scarce rerun``.
PRINTED_RUN = re.compile(r"^(?:== [\w-]+: run (?P<run>\S+)|rerun (?P<rerun>\S+) of \S+)$",
                         re.MULTILINE)


def made_run(stdout: str, runs: Path, before: set[str], began: dt.datetime,
             ended: dt.datetime) -> Path:
    """The run folder a timed process made: the one run id it printed, a folder of ``runs``
    that was not there before it (``before``: the names then), whose manifest's start and
    finish lie between the process's ``began`` and ``ended``.

    Raises
    ------
    RuntimeError
        Any of these not so: its work would not be the timed process's.
    """
    printed = [m["run"] or m["rerun"] for m in PRINTED_RUN.finditer(stdout)]
    if len(printed) != 1:
        raise RuntimeError(f"expected the process to print one run id, found {printed}")
    run_dir = runs / printed[0]
    if printed[0] in before or not (run_dir / "manifest.json").is_file():
        raise RuntimeError(f"run {printed[0]} is not a new run of {runs}")
    started, finished = recorded_span(run_dir)
    if not began <= started <= finished <= ended:
        raise RuntimeError(f"run {printed[0]} records {started} to {finished}, not within "
                           f"the timed process ({began} to {ended})")
    return run_dir


class Row:
    """A row of the table: how to run its command once, timed (subclasses)."""

    name: str
    code: str = ""

    def once(self, bench: Bench) -> Timed:
        raise NotImplementedError


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    return time.perf_counter() - start, out


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class CommandRow(Row):
    """``scarce ARGS``, a run recorded in the runs folder (``records``) or not; ``store`` and
    ``runs`` give the folders of each call (None: fresh ones)."""

    def __init__(self, name: str, args: list[str], records: bool, runs: Path | None = None,
                 store: Path | None = None) -> None:
        self.name, self.args, self.records = name, args, records
        self.runs, self.store = runs, store
        self.code = "scarce " + shlex.join(args)

    def once(self, bench: Bench) -> Timed:
        runs = self.runs or bench.fresh("runs")
        store = self.store or bench.fresh("store")
        before = {p.name for p in runs.iterdir()}
        began = _now()
        wall, out = _timed([*scarce_command(), *self.args], bench.env(store, runs))
        ended = _now()
        if out.returncode != 0:
            raise RuntimeError(f"{self.code} failed ({out.returncode}): "
                               f"{out.stderr.strip()[-2000:]}")
        if not self.records:
            return Timed(wall, None)
        try:
            run_dir = made_run(out.stdout, runs, before, began, ended)
        except RuntimeError as exc:
            raise RuntimeError(f"{self.code}: {exc}") from None
        return Timed(wall, recorded_seconds(run_dir))


class BadConfigRow(Row):
    """``scarce run leml --set`` of a value the config refuses: one ``error:`` line, exit 2,
    no server started (checked: when none ran before, none is recorded after)."""

    name = "bad-config"

    def __init__(self) -> None:
        self.args = ["run", "leml", "--set", BAD_SETTING]
        self.code = "scarce " + shlex.join(self.args)

    def once(self, bench: Bench) -> Timed:
        runs, record = bench.fresh("runs"), bench.server_record()
        none_before = not record.exists()
        wall, out = _timed([*scarce_command(), *self.args], bench.env(runs, runs))
        lines = out.stderr.strip().splitlines()
        if out.returncode != 2 or len(lines) != 1 or not lines[0].startswith("error: "):
            raise RuntimeError(f"{self.code}: expected one error line and exit 2, got exit "
                               f"{out.returncode} and {out.stderr.strip()[-2000:]!r}")
        if none_before and record.exists():
            raise RuntimeError(f"{self.code} started a server")
        return Timed(wall, None)


class PythonRow(Row):
    """``python -c CODE``; the code may set ``WORK`` (seconds of its own work), reported."""

    def __init__(self, name: str, code: str, shown: str | None = None) -> None:
        self.name, self.source, self.code = name, code, shown or code

    def once(self, bench: Bench) -> Timed:
        report = "\nimport json as _j\nprint(_j.dumps(globals().get('WORK')))"
        scratch = bench.fresh("python")
        wall, out = _timed([sys.executable, "-c", self.source + report],
                           bench.env(scratch, scratch))
        if out.returncode != 0:
            raise RuntimeError(f"{self.code!r} failed: {out.stderr.strip()[-2000:]}")
        work = json.loads(out.stdout.strip().splitlines()[-1])
        return Timed(wall, None if work is None else float(work))


def _train(bench: Bench, flow: str, overrides: list[str], runs: Path, store: Path) -> Path:
    """A run of ``flow``'s bundled config in ``runs`` (untimed); its folder."""
    _say(f"training run of {flow} (untimed)")
    before = {p.name for p in runs.iterdir()}
    bench.scarce(["run", flow, *(a for o in overrides for a in ("--set", o))], store, runs)
    return _new_run(runs, before)


def _apply_input(flow: str, run_dir: Path, tmp: Path) -> str:
    """The input an apply row reads: the rows the training run evaluated."""
    from scarce.bench.apply import _inputs
    from scarce.flows.registry import FLOWS

    config = json.loads((run_dir / "manifest.json").read_text())["config"]
    config = FLOWS[flow].load_model().model_validate(config)
    return _inputs(flow, config, run_dir, tmp)[0]


def build_rows(bench: Bench, names: list[str], overrides: dict[str, list[str]]) -> list[Row]:
    """The rows ``names``, with the training runs they need made first (untimed)."""
    from scarce.bench.load import LOAD, _filled, _first_rows, commands

    runs, store = bench.fresh("trained-runs"), bench.fresh("trained-store")
    needs = {f for f in FLOWS if f"apply-{f}" in names}
    if {"rerun", "claims", "load"} & set(names):
        needs.add("leml")
    trained = {f: _train(bench, f, overrides[f], runs, store) for f in FLOWS if f in needs}
    if not trained:  # the Prefect database made before the timings
        _say("making the Prefect database (untimed)")
        bench.start_server()
    out: list[Row] = []
    for name in names:
        kind, _, flow = name.partition("-")
        if kind == "run" and flow:
            sets = [a for o in overrides[flow] for a in ("--set", o)]
            out.append(CommandRow(name, ["run", flow, *sets], records=True))
        elif kind == "apply":
            source = _apply_input(flow, trained[flow], bench.fresh(f"apply-{flow}-input"))
            out.append(CommandRow(name, ["apply", trained[flow].name, "--input", source],
                                  records=True, runs=runs))
        elif name == "rerun":
            out.append(CommandRow(name, ["rerun", trained["leml"].name], records=True,
                                  runs=runs, store=store))
        elif name == "runs":
            out.append(CommandRow(name, ["runs"], records=False, runs=runs, store=store))
        elif name == "claims":
            out.append(CommandRow(name, ["claims", trained["leml"].name], records=False,
                                  runs=runs, store=store))
        elif name == "load":
            run_dir = trained["leml"]
            rows = _first_rows(run_dir, 100, bench.fresh("rows"))
            shown = commands(run_dir)[LOAD]
            timed = ("import time, scarce; m = scarce.load_model(RUN); t = time.perf_counter(); "
                     "m.predict_top_k(ROWS, 5); WORK = time.perf_counter() - t")
            out.append(PythonRow(name, _filled(timed, run_dir, rows), shown))
        elif name == "bad-config":
            out.append(BadConfigRow())
    return out


def measure(bench: Bench, rows: list[Row], repeats: int) -> pd.DataFrame:
    """The table of :data:`COLUMNS`: each row cold then warm, ``repeats`` times, rotated, and
    the peer in every repeat."""
    peer = PythonRow(PEER, PEER_CODE)
    order = [peer, *rows]
    times: dict[str, dict[str, list]] = {
        r.name: {"cold": [], "warm": [], "cold_work": [], "warm_work": []} for r in order}
    for r in range(repeats):
        for row in order[r % len(order):] + order[:r % len(order)]:
            for mode in ("cold", "warm"):
                if mode == "cold":
                    bench.stop_server()
                elif not bench.server_record().exists():  # a row that started none
                    bench.start_server()
                else:
                    bench.wait_preloaded()
                _say(f"repeat {r + 1}/{repeats}: {row.name} ({mode})")
                done = row.once(bench)
                times[row.name][mode].append(done.wall)
                if done.work is not None:
                    times[row.name][f"{mode}_work"].append(done.work)
        # a long run's figures so far, in case it cannot finish
        _say(f"medians after repeat {r + 1}: " + "; ".join(
            f"{name} cold {statistics.median(t['cold']):.2f} s, warm "
            f"{statistics.median(t['warm']):.2f} s"
            + "".join(f", {mode} work {statistics.median(t[f'{mode}_work']):.2f} s"
                      for mode in ("cold", "warm") if t[f"{mode}_work"])
            for name, t in times.items()))
    floor = statistics.median(times[PEER]["cold"] + times[PEER]["warm"])
    table = []
    for row in order:
        t = times[row.name]
        cold, warm = statistics.median(t["cold"]), statistics.median(t["warm"])
        work = [round(statistics.median(t[k]), 3) if t[k] else float("nan")
                for k in ("cold_work", "warm_work")]
        table.append((row.name, round(cold, 3), round(warm, 3), *work,
                      round(cold / floor, 2), round(warm / floor, 2),
                      GOALS.get(row.name, float("nan")), repeats, row.code))
    return pd.DataFrame(table, columns=COLUMNS)


def run(args: argparse.Namespace) -> pd.DataFrame:
    names = table_order(args.commands)
    overrides = parse_overrides(args.overrides, args.quick)
    bench = Bench(Path(tempfile.mkdtemp(prefix="scarce-bench-latency-")))
    try:
        rows = build_rows(bench, names, overrides)
        load_before = os.getloadavg()[0]
        table = measure(bench, rows, args.repeats)
        load_after = os.getloadavg()[0]
    finally:
        try:
            bench.stop_server()
        finally:
            shutil.rmtree(bench.root, ignore_errors=True)
    command = "scarce bench latency " + shlex.join(
        ["--commands", ",".join(names), "--repeats", str(args.repeats)]
        + (["--quick"] if args.quick else [])
        + [a for f, o in args.overrides for a in ("--set", f"{f}:{o}")])
    print(f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, `{command}` (load average "
          f"{load_before:.2f} before, {load_after:.2f} after, {os.cpu_count()} cores)\n")
    return table
