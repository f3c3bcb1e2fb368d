"""What the sections of ``scarce bench leml`` share (its messages, the data sets read and
preprocessed, the flow's mask, timing), and with ``scarce bench workers`` LEML's parameters
given by ``--set``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from scarce.algorithms.leml import LEML
from scarce.tasks.leml import observe
from scarce.tasks.readers.xmc import read_xmc


def _say(*parts) -> None:
    print("[bench leml]", *parts, file=sys.stderr, flush=True)


def split_files(data_dir: Path, name: str, split: str = "xmlrepo") -> list[Path]:
    """The training and test files of the data set ``name`` under ``data_dir``."""
    folder = data_dir / "xmc" / name
    return [folder / f"{name}_{split}_{part}.txt.gz" for part in ("train", "test")]


def _load(data_dir: Path, name: str, split: str = "xmlrepo"):
    paths = split_files(data_dir, name, split)
    if not all(p.exists() for p in paths):
        return None
    (Xtr, Ytr), (Xte, Yte) = (read_xmc(p) for p in paths)
    return Xtr, Ytr, Xte, Yte


def _preprocess(kind: str, Xtr, Xte):
    if kind == "raw":
        return Xtr, Xte
    if kind == "l2":
        from sklearn.preprocessing import normalize

        return normalize(Xtr).astype(Xtr.dtype), normalize(Xte).astype(Xte.dtype)
    from sklearn.feature_extraction.text import TfidfTransformer

    tf = TfidfTransformer().fit(Xtr)
    return tf.transform(Xtr).astype(Xtr.dtype), tf.transform(Xte).astype(Xte.dtype)


def _mask(shape, fraction: float, seed: int) -> sp.csr_matrix:
    """Each entry observed with probability ``fraction``: ``tasks.leml.observe``."""
    return observe(sp.csr_matrix(shape, dtype=np.float32), fraction, seed)


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _best_time(fn, repeats):
    best, out = np.inf, None
    for _ in range(repeats):
        out, sec = _timed(fn)
        best = min(best, sec)
    return best, out


def _one_w_step(model: LEML, data, H, backend=None):
    """``model.w_step`` from ``W = 0``: ``(W, info)``."""
    return model.w_step(data, np.zeros((data.n_features, H.shape[1]), data.dtype), H,
                        backend=backend)


def estimator_params(texts: list[str]) -> dict:
    """The LEML parameters ``--set KEY=VALUE`` gives (only those), checked as ``scarce run
    --set model.KEY`` is: a key of the config's model section, its type, bounds and choices,
    and the estimator's own checks of them together.

    Raises
    ------
    InputError
        One line naming the key: an unknown key, a value out of bounds or of a wrong type.
    """
    from scarce.flows.config import apply_overrides, validate_config
    from scarce.flows.leml import LemlConfig

    section = LemlConfig.model_fields["model"].annotation
    given = apply_overrides({}, texts, section)  # an unknown key: its one line
    checked = validate_config(given, section, None)
    return {name: getattr(checked, name) for name in given}
