"""``scarce run`` as a child process, for the reliability tests (kill, share, damage).

The children talk to the test session's Prefect server (``prefect_server`` fixture:
``prefect_test_harness`` serves its API on a local port, and its URL works from
another process), each with its own temporary project (``SCARCE_ROOT``).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scarce.tasks.store import Store
from scarce.tasks.store.layout import SUFFIX

REPO = Path(__file__).resolve().parents[2]


def child_env(project: Path, **extra: str) -> dict[str, str]:
    """The environment of a child ``scarce``: this session's Prefect API, one BLAS thread."""
    import prefect.settings

    env = dict(os.environ)
    for var in ("SCARCE_STORE", "SCARCE_RUNS"):
        env.pop(var, None)
    env.update(
        SCARCE_ROOT=str(project),
        PREFECT_API_URL=str(prefect.settings.PREFECT_API_URL.value()),
        PREFECT_HOME=str(prefect.settings.PREFECT_HOME.value()),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        OPENBLAS_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
    )
    env.update(extra)
    return env


@dataclass
class Child:
    """A running ``scarce`` process and the file its output goes to."""

    proc: subprocess.Popen
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float = 300) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL the whole process group (the CLI and anything it started)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)


_children: list[Child] = []


@atexit.register
def _kill_leftovers() -> None:
    """A test that failed before waiting leaves no ``scarce`` process behind."""
    for child in _children:
        if child.proc.poll() is None:
            child.kill()


def start(project: Path, args: list[str], log: Path, **env: str) -> Child:
    """Start ``scarce ARGS`` in ``project`` in a new session; stdout and stderr go to ``log``."""
    fh = open(log, "wb")  # noqa: SIM115 - the child owns it; closed when the Popen is
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scarce.flows.cli", *args],
            cwd=project,
            env=child_env(project, **env),
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        fh.close()
    _children.append(Child(proc, log))
    return _children[-1]


def run(project: Path, args: list[str], log: Path, timeout: float = 300, **env: str) -> str:
    """Run ``scarce ARGS`` to the end; assert exit 0 and return its output."""
    child = start(project, args, log, **env)
    code = child.wait(timeout)
    out = child.output()
    assert code == 0, f"scarce {' '.join(args)} exited {code}:\n{out[-4000:]}"
    return out


def wait_until(
    child: Child, predicate: Callable[[], bool], timeout: float = 120, every: float = 0.02
) -> bool:
    """Poll ``predicate`` until it holds (True) or the child exits first (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if child.proc.poll() is not None:
            return predicate()
        time.sleep(every)
    raise TimeoutError(f"condition not met in {timeout} s; output:\n{child.output()[-3000:]}")


def entries(store_root: Path, task: str) -> list[Path]:
    """The complete Parquet entries of one step (temporary files left out)."""
    folder = store_root / task
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob(f"*{SUFFIX}") if not p.name.startswith("."))


def run_ids(project: Path) -> list[str]:
    d = project / "data" / "runs"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def manifest(project: Path, run_id: str) -> dict:
    return json.loads((project / "data" / "runs" / run_id / "manifest.json").read_text())


def only_manifest(project: Path) -> dict:
    ids = run_ids(project)
    assert len(ids) == 1, ids
    return manifest(project, ids[0])


def stable_outputs(m: dict) -> dict[str, str]:
    """ref -> sha256 of a manifest's outputs, wall-clock (volatile) parts left out."""
    return {o["ref"]: o["sha256"] for o in m["outputs"] if not o["volatile"]}


def cache_hit_lines(output: str) -> list[str]:
    """The step names of the ``cache hit: <step> -> refs`` lines of a run's log."""
    out = []
    for line in output.splitlines():
        if "cache hit: " in line:
            out.append(line.split("cache hit: ", 1)[1].split(" ->", 1)[0].strip())
    return out


def stray_files(store_root: Path) -> list[str]:
    """Files in the store that are neither entries nor Prefect records (temporaries)."""
    store = Store(store_root)
    known = {store.path(r) for r in store.refs()}
    out = []
    for p in store_root.rglob("*"):
        if not p.is_file() or p in known:
            continue
        if p.relative_to(store_root).parts[0] == "_prefect" and not p.name.startswith("."):
            continue
        if p.relative_to(store_root).parts == ("_leases", "gc.lock"):  # gc's lock file
            continue
        out.append(str(p.relative_to(store_root)))
    return sorted(out)


# -- the two small real projects the reliability tests run ---------------------------
DATA = REPO / "data"
BIBTEX = DATA / "xmc" / "bibtex"
SEMEVAL = DATA / "relations" / "semeval2010_task8" / "TRAIN_FILE.TXT"

# All of Bibtex (4,880 x 1,836, 159 labels), rank 16, 4 short alternating iterations:
# about 0.3 s a step, so a poll every 20 ms sees each iteration land.
LEML_ITERATIONS = 4
LEML_CONFIG = {
    "seed": 0,
    "name": "reliability",
    "dataset": {
        "name": "bibtex",
        "format": "xmc",
        "train": str(BIBTEX / "bibtex_xmlrepo_train.txt.gz"),
        "test": str(BIBTEX / "bibtex_xmlrepo_test.txt.gz"),
        "normalize": "l2",
    },
    "model": {"rank": 16, "outer_iterations": LEML_ITERATIONS, "cg_max_iter": 5},
    "baselines": [],
}
# 300 SemEval pairs, k in [3, 5] x 2 prefixes, then 3 x 6 = 18 stability units (a wide
# window for the kill test to land between its second and its last unit).
RELATIONS_K = (3, 5)
RELATIONS_SUBSAMPLES = 6
RELATIONS_CONFIG = {
    "seed": 1,
    "dataset": "semeval-sample",
    "data": [str(SEMEVAL)],
    "max_pairs": 300,
    "min_df": 1,
    "k_low": RELATIONS_K[0],
    "k_high": RELATIONS_K[1],
    "n_prefixes": 2,
    "min_prefix": 20,
    "theta": 0.5,
    "n_init": 2,
    "n_subsamples": RELATIONS_SUBSAMPLES,
    "baselines": False,
}
CONFIGS = {"leml": LEML_CONFIG, "relations": RELATIONS_CONFIG}


def make_project(root: Path, flow: str) -> Path:
    """A project folder with ``configs/<flow>.yaml`` (the data stay in this checkout)."""
    import yaml

    (root / "configs").mkdir(parents=True, exist_ok=True)
    (root / "configs" / f"{flow}.yaml").write_text(yaml.safe_dump(CONFIGS[flow]))
    return root


_started: dict[str, tuple[Path, Child]] = {}
_references: dict[str, tuple[Path, dict]] = {}


def start_references(tmp_path_factory) -> None:
    """Start the uninterrupted reference run of every flow in ``CONFIGS`` in the background
    (once per session), so that they run beside the tests' own processes."""
    for flow in CONFIGS:
        if flow not in _started:
            project = make_project(tmp_path_factory.mktemp(f"{flow}-reference"), flow)
            _started[flow] = (project, start(project, ["run", flow], project / "run.log"))


def reference(tmp_path_factory, flow: str) -> tuple[Path, dict]:
    """The uninterrupted run of ``flow`` in its own project, shared by every test of the
    session (started by :func:`start_references`); returns the project and its manifest."""
    if flow not in _references:
        start_references(tmp_path_factory)
        project, child = _started[flow]
        code = child.wait(600)
        assert code == 0, f"reference run of {flow} exited {code}:\n{child.output()[-4000:]}"
        _references[flow] = (project, only_manifest(project))
    return _references[flow]
