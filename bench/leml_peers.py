"""LEML against PECOS XR-Linear, napkinXC PLT and omikuji, each in its own fresh process.

Section ``peers`` of ``scarce bench leml``: one table of the extreme-classification
libraries a user would otherwise reach for, on each dataset's preprocessed split:

* PECOS XR-Linear (``libpecos``): PIFA label embedding, hierarchical k-means indexer,
  ``XLinearModel`` with its defaults; predictions with beam 10;
* napkinXC PLT (``napkinxc``) with its defaults;
* omikuji with its defaults (its training reads the Extreme Classification Repository's
  text format, so its training seconds include parsing that file);
* LEML at the setting of the ``speed`` section (the parameters ``--set`` gives; the rank,
  ``lam`` and iterations chosen in ``accuracy`` when that section ran).

Each run is a fresh process (:mod:`scarce.bench.leml_peer_child`) with one BLAS / OpenMP / Rayon
thread and ``threads=1`` passed to the library, reading the split that this process wrote
once per dataset as ``.npz`` files.  Rows per method: training seconds, prediction
milliseconds per 1,000 test rows (top 5), the peak resident memory that training added to
the process (MiB; data loaded and library imported before the peak is reset; NaN without
``/proc``), P@1/3/5 in % on the test split, computed here from each method's top 5 with
:func:`scarce.algorithms.metrics.multilabel.precision_at_k` (a method ranking fewer than 5 labels
for a row is charged a miss for each one absent), and training time and peak as ratios to
LEML.  Each figure is the median over ``--repeats`` repeats; the order of the methods is
rotated between repeats (repeat ``r`` starts at method ``r mod m``) so that drift of a
shared machine falls on all of them alike.  Library versions are in the ``setting`` column.

libpecos pulls in torch and transformers (several GB), so the peers are not in the
``bench`` extra; they run with the interpreter of another environment, given by
``--peer-python`` (default: this one).  LEML always runs with this interpreter::

    python -m venv peers && peers/bin/pip install libpecos napkinxc omikuji
    scarce bench leml --sections peers --peer-python peers/bin/python --data DIR

A peer whose library does not import there is reported skipped and left out of the table.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from scarce.algorithms.metrics.multilabel import precision_at_k
from scarce.bench.leml_peer_child import DISTRIBUTIONS, MISSING, TOP_K

CHILD = Path(__file__).resolve().with_name("leml_peer_child.py")
# One thread in the child, whichever pool a library uses.
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "RAYON_NUM_THREADS")
# The peers: child method, table name, setting after the version.
PEERS = (
    ("pecos", "PECOS XR-Linear", "PIFA+hierarchical k-means, beam 10, 1 thread"),
    ("napkinxc", "napkinXC PLT", "PLT defaults, 1 thread"),
    ("omikuji", "omikuji", "defaults, beam 10, 1 thread"),
)
KS = (1, 3, 5)
STDERR_TAIL = 4000


def _say(*parts) -> None:
    print("[bench leml peers]", *parts, file=sys.stderr, flush=True)


def rotation(methods: list, repeat: int) -> list:
    """The order of ``methods`` in repeat ``repeat``: starting at method ``repeat mod m``."""
    start = repeat % len(methods) if methods else 0
    return methods[start:] + methods[:start]


def interpreter(path) -> str:
    """``--peer-python`` as a path that holds in the child's working folder: a bare name
    looked up on PATH, a relative path made absolute (not resolved: a virtual
    environment's ``bin/python`` must stay the link it is)."""
    text = str(path)
    if os.sep not in text:
        found = shutil.which(text)
        if found is None:
            raise FileNotFoundError(f"--peer-python {text}: no such interpreter on PATH")
        return found
    return os.path.abspath(text)


def write_split(workdir: Path, Xtr, Ytr, Xte) -> None:
    """The split as the child reads it: ``train_X.npz``, ``train_Y.npz``, ``test_X.npz``."""
    from scarce.tasks.store.atomic import atomic_open, synced_folders

    with synced_folders() as syncs:  # the folder fsync-ed once, after the last file
        for stem, M in (("train_X", Xtr), ("train_Y", Ytr), ("test_X", Xte)):
            with atomic_open(workdir / f"{stem}.npz", syncs) as fh:
                sp.save_npz(fh, sp.csr_matrix(M), compressed=False)


class LibraryMissing(Exception):
    """The child could not import the method's library; the message is its import error."""


def run_child(python: str, method: str, workdir: Path, params: dict) -> dict:
    """``method`` trained and run by ``python`` in a fresh process on the split in
    ``workdir``: its JSON line, with ``top5`` (the ranking it wrote) added.

    Raises :class:`LibraryMissing` when the library does not import there, RuntimeError
    with the end of the child's stderr when it fails otherwise.
    """
    (workdir / "top5.npy").unlink(missing_ok=True)
    env = {**os.environ, **dict.fromkeys(THREAD_VARIABLES, "1")}
    err_path = workdir / f"{method}.stderr"
    with open(err_path, "w+b") as err:
        proc = subprocess.run([python, str(CHILD), method, str(workdir), json.dumps(params)],
                              stdout=subprocess.PIPE, stderr=err, env=env, cwd=workdir,
                              text=True, check=False)
        err.seek(max(0, err.tell() - STDERR_TAIL))
        tail = err.read().decode(errors="replace").replace("\r", "\n").strip()
    if proc.returncode == MISSING:
        raise LibraryMissing(tail.splitlines()[-1] if tail else "")
    if proc.returncode != 0:
        raise RuntimeError(f"{method} ({python}) exited with code {proc.returncode}; "
                           f"the end of its stderr:\n{tail}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    out = json.loads(lines[-1])
    out["top5"] = np.load(workdir / "top5.npy", allow_pickle=False)
    return out


def as_ranking(top: np.ndarray, Y) -> np.ndarray:
    """``top`` with each ``-1`` (fewer than 5 labels ranked) replaced by a label the row
    does not have, so that an absent prediction counts as a miss."""
    top = np.array(top, dtype=np.int64)
    Y = sp.csr_matrix(Y)
    for i in np.flatnonzero((top < 0).any(axis=1)):
        have = set(Y.indices[Y.indptr[i]:Y.indptr[i + 1]].tolist())
        miss = next((j for j in range(Y.shape[1]) if j not in have), 0)
        top[i, top[i] < 0] = miss
    return top


def run_section(ds, args, rows: list[tuple], leml: tuple[dict, str]) -> None:
    """Section ``peers`` on one dataset ``ds = (name, Xtr, Ytr, Xte, Yte)``; ``leml`` is
    LEML's parameters and setting (``bench.leml.leml_setting``)."""
    name, Xtr, Ytr, Xte, Yte = ds
    params, leml_setting = leml
    peer_python = interpreter(args.peer_python or sys.executable)
    methods = [("leml", f"LEML {params['loss']}", leml_setting, sys.executable, params)]
    methods += [(key, label, setting, peer_python, {}) for key, label, setting in PEERS]
    runs: dict[str, list[dict]] = {m[0]: [] for m in methods}
    workdir = Path(tempfile.mkdtemp(prefix="scarce-bench-peers-"))
    try:
        write_split(workdir, Xtr, Ytr, Xte)
        active = list(methods)
        for r in range(args.repeats):
            for key, label, _, python, child_params in rotation(active, r):
                _say(f"{name}: {label}, repeat {r + 1} of {args.repeats}")
                try:
                    out = run_child(python, key, workdir, child_params)
                except LibraryMissing as missing:
                    if key == "leml":
                        raise RuntimeError(f"LEML's child could not import it: {missing}") \
                            from None
                    _say(f"{name}: {label} skipped (pip install {DISTRIBUTIONS[key]} in the "
                         f"--peer-python environment): {missing}")
                    continue
                top = out.pop("top5")
                absent = int((top < 0).sum())
                if absent:
                    _say(f"{name}: {label} ranked fewer than {TOP_K} labels: {absent} "
                         "places counted as misses")
                p = precision_at_k(Yte, as_ranking(top, Yte), ks=KS)
                out.update({f"P@{k}": 100 * p[k] for k in KS})
                runs[key].append(out)
            active = [m for m in active if runs[m[0]]]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def median(key, field):
        return float(np.median([run[field] for run in runs[key]]))

    base_train, base_peak = median("leml", "train_seconds"), median("leml", "added_peak_mib")
    for key, label, setting, _, _ in methods:
        if not runs[key]:
            continue
        version = runs[key][0]["version"]
        setting = f"{DISTRIBUTIONS[key]}=={version} {setting}"
        train, peak = median(key, "train_seconds"), median(key, "added_peak_mib")
        metrics = {
            "train seconds": train,
            "predict ms per 1,000 test rows":
                median(key, "predict_seconds") * 1e6 / Xte.shape[0],
            "peak added RSS MiB": peak,
            **{f"P@{k}": median(key, f"P@{k}") for k in KS},
            "train time / LEML": train / base_train,
            "peak / LEML": peak / base_peak if base_peak else float("nan"),
        }
        rows += [("peers", name, label, setting, metric, value)
                 for metric, value in metrics.items()]
        _say(f"RESULT peers {name} | {label} | {setting} | "
             + " ".join(f"{m}={v:.3g}" for m, v in metrics.items()))
