"""One method of the ``peers`` section of ``scarce bench leml``, trained and run in this process.

Run as ``PYTHON leml_peer_child.py METHOD WORKDIR PARAMS_JSON`` by :mod:`scarce.bench.leml_peers`,
with ``METHOD`` one of :data:`METHODS`.  ``WORKDIR`` holds the preprocessed split as
``train_X.npz``, ``train_Y.npz`` and ``test_X.npz`` (``scipy.sparse.save_npz``); the
child writes its top-5 label indices, best first, as ``top5.npy`` there (``-1`` where a
method gave fewer than 5) and prints one JSON line on stdout: ``train_seconds``,
``predict_seconds``, ``added_peak_mib`` (the peak resident memory added by training, above
the process with its data loaded and its library imported; NaN without ``/proc``) and
``version``.

Only numpy, scipy and the method's own library are imported: the peers run in another
Python environment (``--peer-python``), one that need not have ``scarce``; only ``leml``
imports it.  A method whose library does not import exits with :data:`MISSING`, so the
parent can tell a missing library from a crash.  Everything the libraries print goes to
stderr: stdout carries the JSON line only.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path; its modules (``store``,
# ``workers``, ...) must not shadow what a library imports.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

METHODS = ("leml", "pecos", "napkinxc", "omikuji")
# Distribution of each method's library (pip's name): its version, and what to install.
DISTRIBUTIONS = {"leml": "scarce", "pecos": "libpecos", "napkinxc": "napkinxc",
                 "omikuji": "omikuji"}
MISSING = 3
TOP_K = 5


def write_xc(path: Path, X: sp.csr_matrix, Y: sp.csr_matrix) -> None:
    """``X`` and ``Y`` in the Extreme Classification Repository's text format (omikuji's
    training input): a header ``n d L``, then ``labels features`` a row."""
    with open(path, "w") as fh:
        fh.write(f"{X.shape[0]} {X.shape[1]} {Y.shape[1]}\n")
        for i in range(X.shape[0]):
            labels = ",".join(map(str, Y.indices[Y.indptr[i]:Y.indptr[i + 1]]))
            lo, hi = X.indptr[i], X.indptr[i + 1]
            feats = " ".join(f"{j}:{v:.6g}" for j, v in zip(X.indices[lo:hi], X.data[lo:hi],
                                                            strict=True))
            fh.write(f"{labels} {feats}\n")


def feature_pairs(X: sp.csr_matrix) -> list[list[tuple[int, float]]]:
    """Each row of ``X`` as ``(feature, value)`` pairs: omikuji's prediction input."""
    return [list(zip(X.indices[X.indptr[i]:X.indptr[i + 1]].tolist(),
                     X.data[X.indptr[i]:X.indptr[i + 1]].tolist(), strict=True))
            for i in range(X.shape[0])]


def padded(ranked: list, k: int) -> np.ndarray:
    """Ranked label lists (best first, possibly shorter than ``k``) as an ``n x k`` int64
    array, ``-1`` where a row has fewer than ``k``."""
    top = np.full((len(ranked), k), -1, dtype=np.int64)
    for i, labels in enumerate(ranked):
        labels = list(labels)[:k]
        top[i, :len(labels)] = labels
    return top


def _omikuji_top_k(model, pairs, k: int) -> list[list[int]]:
    return [[label for label, _ in model.predict(p, top_k=k)] for p in pairs]


def omikuji_top_k(model, X: sp.csr_matrix, k: int) -> np.ndarray:
    """An omikuji model's top ``k`` labels of each row of ``X`` (``-1`` padded)."""
    return padded(_omikuji_top_k(model, feature_pairs(X), k), k)


# --------------------------------------------------------------------------- memory
def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak():
    """Reset the peak RSS to the current RSS (``clear_refs`` 5); the current RSS in KiB, or
    None where ``/proc`` cannot do it."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return _status_kib("VmRSS")
    except (OSError, KeyError):
        return None


def _added_peak_mib(base) -> float:
    if base is None:
        return float("nan")
    try:
        return (_status_kib("VmHWM") - base) / 1024
    except (OSError, KeyError):
        return float("nan")


# --------------------------------------------------------------------------- methods
# Each: (import the library, returning it; prepare(lib, data, params, workdir) -> state
# outside the clock; train(lib, state) -> model; predict(lib, model, state) -> raw output;
# top_k(raw) -> n x 5 array outside the clock).
def _import(method: str):
    if method == "leml":
        from scarce.algorithms.leml import LEML

        return LEML
    if method == "pecos":
        from pecos.xmc import Indexer, LabelEmbeddingFactory
        from pecos.xmc.xlinear.model import XLinearModel

        return Indexer, LabelEmbeddingFactory, XLinearModel
    if method == "napkinxc":
        from napkinxc.models import PLT

        return PLT
    if method == "omikuji":
        import omikuji

        return omikuji
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def _version(method: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTIONS[method])
    except PackageNotFoundError:
        return "unknown"


def _run(method: str, lib, workdir: Path, params: dict):
    Xtr = sp.load_npz(workdir / "train_X.npz").tocsr()
    Ytr = sp.load_npz(workdir / "train_Y.npz").tocsr()
    Xte = sp.load_npz(workdir / "test_X.npz").tocsr()
    if method == "leml":
        def train():
            return lib(**params).fit(Xtr, Ytr)

        def predict(model):
            return model.predict_top_k(Xte, TOP_K)

        def top_k(raw):
            return np.asarray(raw, dtype=np.int64)
    elif method == "pecos":
        Indexer, LabelEmbeddingFactory, XLinearModel = lib
        X = Xtr.astype(np.float32)
        Y = Ytr.astype(np.float32).tocsc()
        Xt = Xte.astype(np.float32)

        def train():
            emb = LabelEmbeddingFactory.create(Y, X, method="pifa")
            chain = Indexer.gen(emb, indexer_type="hierarchicalkmeans", threads=1)
            return XLinearModel.train(X, Y, C=chain, threads=1)

        def predict(model):
            return model.predict(Xt, beam_size=10, only_topk=TOP_K, threads=1)

        def top_k(raw):
            raw = raw.tocsr()
            return padded([raw.indices[lo:hi][np.argsort(-raw.data[lo:hi], kind="stable")]
                           for lo, hi in zip(raw.indptr[:-1], raw.indptr[1:], strict=True)],
                          TOP_K)
    elif method == "napkinxc":
        output = workdir / "napkinxc-model"  # PLT keeps its model in a folder
        shutil.rmtree(output, ignore_errors=True)
        X, Y, Xt = (M.astype(np.float32) for M in (Xtr, Ytr, Xte))  # its csr dtypes

        def train():
            model = lib(str(output), threads=1)
            model.fit(X, Y)
            return model

        def predict(model):
            return model.predict(Xt, top_k=TOP_K)

        def top_k(raw):
            return padded(raw, TOP_K)
    elif method == "omikuji":
        path = workdir / "omikuji-train.txt"
        write_xc(path, Xtr, Ytr)
        pairs = feature_pairs(Xte)

        def train():
            return lib.Model.train_on_data(str(path), n_threads=1)

        def predict(model):
            return _omikuji_top_k(model, pairs, TOP_K)

        def top_k(raw):
            return padded(raw, TOP_K)
    else:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")

    base = _reset_peak()
    t = time.perf_counter()
    model = train()
    train_seconds = time.perf_counter() - t
    peak = _added_peak_mib(base)
    t = time.perf_counter()
    raw = predict(model)
    predict_seconds = time.perf_counter() - t
    top = top_k(raw)
    del model, raw
    if top.shape != (Xte.shape[0], TOP_K):
        raise ValueError(f"{method} gave a ranking of shape {top.shape}, expected "
                         f"({Xte.shape[0]}, {TOP_K})")
    tmp = workdir / ".top5.npy.tmp"
    with open(tmp, "wb") as fh:
        np.save(fh, top)
    os.replace(tmp, workdir / "top5.npy")
    return {"train_seconds": train_seconds, "predict_seconds": predict_seconds,
            "added_peak_mib": peak, "version": _version(method)}


def main(argv: list[str]) -> int:
    method, workdir, params = argv[0], Path(argv[1]), json.loads(argv[2])
    result = os.dup(1)
    os.dup2(2, 1)  # what the libraries print (omikuji logs to stdout) goes to stderr
    try:
        lib = _import(method)
    except ImportError as exc:
        print(f"{method}: {exc}", file=sys.stderr)
        return MISSING
    out = _run(method, lib, workdir, params)
    sys.stdout.flush()
    os.write(result, (json.dumps(out) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
