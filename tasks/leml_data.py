"""LEML's steps over the training and test rows: load, hold out, mask, stack, cut into row
blocks, count the labels' propensities.

Each runs where the run's data lives (:func:`data_client`: on the Dask cluster with
``compute.backend: dask``, so that the flow's process never holds the data; else here).  The
mathematics of the masks, the held-out rows and the row normalisation is in
:mod:`scarce.algorithms.leml` (:mod:`~scarce.algorithms.leml.observed`,
:mod:`~scarce.algorithms.leml.data`,
:mod:`~scarce.algorithms.leml.normalize`); these steps read, call and store.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np
import scipy.sparse as sp

# (not the estimator at the top: it imports scikit-learn, which reading rows does not need,
# and an apply run reads its rows with the load step here)
from scarce.algorithms.leml import row_block_bounds
from scarce.algorithms.leml.data import validation_rows
from scarce.algorithms.leml.observed import nothing_observed, observed_label_counts, observed_mask
from scarce.algorithms.metrics.multilabel import inverse_propensity_from_counts
from scarce.tasks.errors import InputError
from scarce.tasks.leml_dask.clients import CLIENTS, in_dask_worker
from scarce.tasks.leml_files import check_training_rows, parquet_pair, read_dataset
from scarce.tasks.readers import names as name_rules
from scarce.tasks.steps import cached_file_sha256, content_only, step
from scarce.tasks.store.encoding import entry_shape, read_parquet_entry, read_rows


@contextmanager
def data_client(cluster: dict | None):
    """Where a step over the training or test data runs (``where`` of :func:`load`,
    :func:`observe` and the partition steps): on the W-step's Dask cluster when the flow
    names one (``compute.backend: dask``), so that the flow's process never holds the data,
    once a worker there can start it (:func:`scarce.tasks.leml_dask.check_workers_can_run`); here
    (a client of None) for the other runners, and inside a Dask worker (where a
    ``--runner dask`` task already runs)."""
    if not cluster or cluster.get("in_process") or in_dask_worker():
        yield None
        return
    from scarce.tasks.leml_dask import check_workers_can_run

    with CLIENTS.client(cluster) as client:
        check_workers_can_run(client)
        yield client


def _name_read(path: Path, call: dict):
    """What :func:`load` takes from the name of ``path`` (its key's
    :data:`scarce.tasks.steps.NameRule`):
    gzip for the text formats; for a Parquet pair, the files the name sends it to (X, and Y
    unless ``with_labels`` is off: ``<name>.X.parquet`` and ``<name>.Y.parquet`` whichever
    of the two ``path`` names), each by its bytes when it is not ``path`` itself.  The whole
    name for any other format."""
    fmt = call.get("format")
    if fmt in ("xmc", "arff"):
        return {"gzip": name_rules.gzip_by_name(path)}
    if fmt != "parquet":
        return Path(path).name

    def read(sibling: Path) -> str | None:  # path itself is keyed by its bytes already
        if sibling == Path(path):
            return None
        return cached_file_sha256(sibling) if sibling.is_file() else "missing"

    x_path, y_path = parquet_pair(path)
    return {"X": read(x_path), "Y": read(y_path) if call.get("with_labels", True) else None}


@step("leml-load", files={"path": _name_read, "labels_file": content_only},
      outputs=("X", "Y", "features", "labels"),
      run_name="load {path.name}", runtime=("labelled",),
      where=("cluster", data_client))
def load(path: Path, format: str, dtype: str, n_labels: int | None, normalize: str,
         labels_file: Path | None = None, cluster: dict | None = None,
         labelled: bool = False, with_labels: bool = True) -> dict:
    """Read a multi-label dataset: Extreme Classification text, Mulan ARFF or Parquet.

    ``cluster``: where the step runs (:func:`data_client`), not what it computes.
    ``labelled``: the file is the whole training or test set, refused (before anything is
    stored) when none of its points has a label or none a feature
    (:func:`~scarce.tasks.leml_files.check_rows`).  A check, not part of what the step computes:
    left
    out of its key.

    ``labels_file`` is :func:`~scarce.tasks.leml_files.label_file` of ``path`` (the Y of a Parquet
    pair): a declared input file, so a changed Y recomputes the step even when X is unchanged.
    Without ``with_labels`` a Parquet X is read alone (new rows to label: Y has no column).

    ``normalize="l2"`` scales every row of X to unit Euclidean norm (a per-row
    operation, so train and test are treated alike without shared statistics).
    ``features`` and ``labels`` are the index maps of X's and Y's columns
    (:func:`~scarce.tasks.leml_files.index_map`; names from an ARFF header, none for the other
    formats).  The reading is :func:`~scarce.tasks.leml_files.read_dataset`'s.
    """
    return read_dataset(path, format, dtype, n_labels, normalize, labelled=labelled,
                        with_labels=with_labels)


@step("leml-split", inputs=("train",), outputs=("X_fit", "Y_fit", "X_val", "Y_val"),
      run_name="split validation={validation_fraction}",
      where=("cluster", data_client))
def split(train: dict, validation_fraction: float, seed: int,
          cluster: dict | None = None) -> dict:
    """Hold out a seeded random part of the training set for validation.  ``cluster``:
    where the step runs (:func:`data_client`)."""
    X, Y = train["X"], train["Y"]
    check_training_rows(X.shape[0], validation_fraction, None)
    fit_rows, val_rows = validation_rows(X.shape[0], validation_fraction, seed)
    return {"X_fit": X[fit_rows], "Y_fit": Y[fit_rows], "X_val": X[val_rows], "Y_val": Y[val_rows]}


@step("leml-early-split", inputs=("train", "mask"),
      outputs=("X_fit", "Y_fit", "X_val", "Y_val"), run_name="hold out for early stopping",
      where=("cluster", data_client))
def early_split(train: dict, mask, params: dict, cluster: dict | None = None) -> dict:
    """The rows :class:`~scarce.algorithms.leml.LEML`'s ``early_stopping`` fits on and those it
    holds
    out, as its own :meth:`~scarce.algorithms.leml.LEML.early_stopping_split` draws them (``Y_val``:
    the held-out rows' observed labels).  ``cluster``: where the step runs."""
    from scarce.algorithms.leml import LEML  # (scikit-learn: imported by the steps that fit)

    try:
        X_fit, Y_fit, _, X_val, Y_val = LEML(**params).early_stopping_split(
            train["X"], train["Y"], mask)
    except ValueError as exc:
        raise InputError(str(exc), key="model.validation_fraction") from None
    return {"X_fit": X_fit, "Y_fit": Y_fit, "X_val": X_val,
            "Y_val": sp.csr_matrix(Y_val, dtype=np.float32)}


@step("leml-early-split-mask", inputs=("mask",), run_name="hold out the mask's rows",
      where=("cluster", data_client))
def early_split_mask(mask: sp.csr_matrix, params: dict,
                     cluster: dict | None = None) -> sp.csr_matrix:
    """The mask's rows that :func:`early_split` keeps for fitting."""
    from scarce.algorithms.leml import LEML

    fit_rows, _ = LEML(**params).early_stopping_rows(mask.shape[0])
    return sp.csr_matrix(mask)[fit_rows]


@step("leml-mask", inputs=("Y",), run_name="mask observed={observed_fraction}",
      where=("cluster", data_client))
def observe(Y: sp.csr_matrix, observed_fraction: float, seed: int,
            part: int | None = None, cluster: dict | None = None) -> sp.csr_matrix:
    """The observed set Omega: each entry of the n x L label matrix kept with the given
    probability, uniformly at random (the paper's missing-label experiment).  ``part``: the
    index of ``Y``'s part in a folder of parts, drawn from its own stream (``seed``,
    ``part``), so each part's mask is made without the others.  ``cluster``: where the step
    runs (:func:`data_client`).

    For a whole training set (``part`` None), a mask that observes no entry, or none of the
    labels ``Y`` holds, is an :class:`InputError` naming ``observed_fraction``: the model
    would learn from nothing (a part of a folder may observe none of its own labels)."""
    n, n_labels = Y.shape
    mask = observed_mask(n, n_labels, observed_fraction, seed, part)
    if part is None and (why := nothing_observed(mask, Y, observed_fraction)):
        raise InputError(why, key="observed_fraction")
    return mask


@step("leml-stack", inputs=("parts",), run_name="stack {what} of the parts")
def stack(parts: list, what: str):
    """The rows of the ``parts`` (sparse matrices of one width: the X, Y or masks of the
    parts of a folder) stacked in part order, for the steps that need the whole."""
    return sp.vstack(parts, format="csr")


def partition_files(train: dict, block: int, blocks: int, mask=None,
                    cluster: dict | None = None) -> dict:
    """Row block ``block`` of ``blocks`` of the training data: its rows of ``X`` and ``Y``
    (and of the observed-entries ``mask``), the rows
    :func:`~scarce.algorithms.leml.data.row_block_bounds` gives it, read from the store files
    (``train``: ``{"X", "Y"}`` paths; ``mask``: a path or None) by
    :func:`scarce.tasks.store.encoding.read_rows`, which reads only the row groups that hold the
    block: no
    partition task holds the whole training set.

    Each block is its own store entries, read by the worker that builds that block of the
    distributed W-step (:class:`scarce.tasks.leml_dask.PartitionedData`).  The number of blocks is
    fixed by the config, not by the number of workers, so sums in block order are the same
    bits for any number of workers.  ``cluster``: where the step runs (:func:`data_client`).
    """
    n_rows = entry_shape(train["X"])[0]
    bounds = row_block_bounds(n_rows, blocks)
    if not 0 <= block < len(bounds):
        raise ValueError(f"block {block} of {blocks}: {n_rows} rows make {len(bounds)} blocks")
    start, stop = bounds[block]
    out = {"X": read_rows(train["X"], start, stop), "Y": read_rows(train["Y"], start, stop)}
    if mask is not None:
        out["mask"] = read_rows(mask, start, stop)
    return out


#: :func:`partition_files` of fully observed training data, and with a mask.
partition = step("leml-partition", paths=("train",), outputs=("X", "Y"),
                 run_name="partition block {block} of {blocks}",
                 where=("cluster", data_client))(partition_files)
partition_masked = step("leml-partition-masked", paths=("train", "mask"),
                        outputs=("X", "Y", "mask"),
                        run_name="partition block {block} of {blocks}",
                        where=("cluster", data_client))(partition_files)


@step("leml-propensity", paths=("train", "mask", "partition"),
      where=("cluster", data_client), run_name="label propensities A={a} B={b}")
def propensity(a: float, b: float, train: dict | None = None, mask=None,
               partition: list | None = None, cluster: dict | None = None) -> np.ndarray:
    """The labels' inverse propensities for PSP@k
    (:func:`~scarce.algorithms.metrics.multilabel.inverse_propensity_from_counts`, ``A = a``,
    ``B = b``) from the training labels the model sees: the entries of ``Y`` that ``mask``
    observes (all of ``Y`` without one).  Read from the store files of ``train`` (``{"X",
    "Y"}``) and ``mask``, or of the row blocks ``partition`` (their counts added), only their
    label matrices; on the data's cluster when ``cluster`` names one (:func:`data_client`).
    """
    blocks = partition if partition is not None else [{"Y": train["Y"], "mask": mask}]
    counts, rows = None, 0
    for files in blocks:
        Y = read_parquet_entry(files["Y"])
        observed = None if files.get("mask") is None else read_parquet_entry(files["mask"])
        here = observed_label_counts(Y, observed)
        counts = here if counts is None else counts + here
        rows += Y.shape[0]
    return inverse_propensity_from_counts(counts, rows, a, b)
