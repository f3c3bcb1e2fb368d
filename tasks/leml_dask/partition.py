"""Row blocks of LEML's training data described by their files: each block rebuilt on a worker.

:class:`PartitionedData` is the durable source of the row-block backend's blocks: block ``b``
is read from its own store files only (the flow's ``leml-partition`` step wrote them), so a
worker reads one block's share of the data and a lost worker's blocks are rebuilt elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import numpy as np

from scarce.algorithms.leml.data import (
    LEMLData,
    labels_layout,
    layout_of_counts,
    prepare_rows,
    row_block_bounds,
)
from scarce.tasks.leml_dask.memory import prepared_nbytes


@dataclass(frozen=True)
class PartitionedData:
    """Prepared training data, described by the files of its row blocks.

    The durable source of :class:`RowBlockBackend`'s row blocks: block ``b`` is rebuilt from its
    own files only (``blocks[b]``: its rows of ``X``, ``Y`` and the mask, written by the
    flow's ``leml-partition`` step), so a worker reads one block's share of the data, and the
    blocks survive the loss of the worker holding them.

    Parameters
    ----------
    blocks : tuple of dict
        Per row block, in row order: ``{"X", "Y", "mask"}``, store-format Parquet files
        (:mod:`scarce.tasks.store.encoding`) of its rows of the features, the labels and the
        observed-entries mask (None when every label is observed), on a file system every
        worker sees at the same path.
    fit_intercept : bool
        As the estimator's (a constant feature appended).
    dtype : str
        The working dtype, ``"float32"`` or ``"float64"``.
    layout : tuple of (str, str or None)
        ``(labels, index_dtype)`` of :func:`~scarce.algorithms.leml.data.labels_layout` of the whole
        prepared data, imposed on every block.
    n_samples, n_features, n_labels : int
        The whole prepared data's shape (``n_features`` counts the constant feature): each
        block is checked against it when it is built.
    rows : tuple of int
        The rows of each block (``row_block_bounds(n_samples, len(blocks))`` for the flow's
        own partition; any sizes for the parts of a partitioned input).
    """

    blocks: tuple
    fit_intercept: bool
    dtype: str
    layout: tuple
    n_samples: int
    n_features: int
    n_labels: int
    rows: tuple

    @classmethod
    def of(cls, data: LEMLData, blocks) -> PartitionedData:
        """The row-block files ``blocks`` (a list of ``{"X", "Y", "mask"}``) of the data that
        ``data`` is the preparation of, with its preparation parameters, layout and shape."""
        blocks = tuple({"X": str(b["X"]), "Y": str(b["Y"]),
                        "mask": None if b.get("mask") is None else str(b["mask"])}
                       for b in blocks)
        n = len(row_block_bounds(data.n_samples, len(blocks)))
        if not blocks or n != len(blocks):
            raise ValueError(f"{len(blocks)} row blocks for {data.n_samples} rows; expected "
                             f"between 1 and {data.n_samples}")
        layout = labels_layout(data)
        rows = tuple(stop - start for start, stop in row_block_bounds(data.n_samples, n))
        return cls(blocks=blocks, fit_intercept=data.fit_intercept,
                   dtype=np.dtype(data.dtype).name,
                   layout=(layout["labels"], layout["index_dtype"]),
                   n_samples=data.n_samples, n_features=data.n_features,
                   n_labels=data.n_labels, rows=rows)

    @classmethod
    def from_files(cls, blocks, *, fit_intercept: bool, dtype) -> PartitionedData:
        """The training data held in the row-block files ``blocks`` (a list of ``{"X", "Y",
        "mask"}``, the mask absent or None when every label is observed), described from
        the files' footers only: no block is read.

        The shape is the blocks' shapes added up, and the label layout the one
        :func:`~scarce.algorithms.leml.data.prepare_data` would give the whole
        (:func:`~scarce.algorithms.leml.data.layout_of_counts`, from the number of entries the
        masks store, which ``leml-mask`` writes as ones only).  Equal to
        :meth:`of` the prepared whole, without the whole ever in one process.  The blocks
        may have any numbers of rows (the parts of a partitioned input); a block whose shape
        does not fit the others is named in a ``ValueError``.
        """
        blocks = tuple({"X": str(b["X"]), "Y": str(b["Y"]),
                        "mask": None if b.get("mask") is None else str(b["mask"])}
                       for b in blocks)
        if not blocks:
            raise ValueError("no row blocks: the partition is empty")
        rows, n_features, n_labels, observed = [], None, None, 0
        for b, files in enumerate(blocks):
            x_shape = _footer(files["X"])[0]
            y_shape = _footer(files["Y"])[0]
            if x_shape[0] != y_shape[0]:
                raise ValueError(f"{files['Y']}: {y_shape[0]} rows, but X of row block {b} "
                                 f"({files['X']}) has {x_shape[0]}")
            if (blocks[0]["mask"] is None) != (files["mask"] is None):
                raise ValueError(f"row block {b}: a mask in some blocks and not in others")
            if n_features is None:
                n_features, n_labels = x_shape[1], y_shape[1]
            elif (x_shape[1], y_shape[1]) != (n_features, n_labels):
                raise ValueError(f"{files['X']}: row block {b} has {x_shape[1]} features and "
                                 f"{y_shape[1]} labels, block 0 {n_features} and {n_labels}")
            if files["mask"] is not None:
                m_shape, m_entries = _footer(files["mask"])
                if tuple(m_shape) != tuple(y_shape):
                    raise ValueError(f"{files['mask']}: mask of shape {m_shape}, Y of row "
                                     f"block {b} {y_shape}")
                observed += m_entries
            rows.append(x_shape[0])
        n = sum(rows)
        if n == 0:
            raise ValueError(f"{blocks[0]['X']}: the row blocks hold no rows")
        layout = layout_of_counts(n, n_labels, None if blocks[0]["mask"] is None else observed)
        return cls(blocks=blocks, fit_intercept=bool(fit_intercept),
                   dtype=np.dtype(dtype).name, layout=(layout["labels"], layout["index_dtype"]),
                   n_samples=n, n_features=n_features + int(bool(fit_intercept)),
                   n_labels=n_labels, rows=tuple(rows))

    @property
    def fully_observed(self) -> bool:
        """True when every label entry is observed (as :class:`LEMLData`'s)."""
        return self.layout[0] == "full"

    @property
    def bounds(self) -> list[tuple[int, int]]:
        """Row range of each block."""
        stops = np.cumsum(self.rows).tolist()
        return list(zip([0, *stops[:-1]], stops, strict=True))

    def block_nbytes(self) -> list[int]:
        """The bytes each row block takes once a worker has prepared it (:meth:`block`),
        estimated from the footers of its files (the number of stored entries), without
        reading the data: :func:`prepared_nbytes`."""
        def entries(path):
            return 0 if path is None else _footer(path)[1]

        return [prepared_nbytes(stop - start, self.n_features, self.n_labels,
                                nnz_x=entries(files["X"]), nnz_y=entries(files["Y"]),
                                nnz_mask=entries(files["mask"]), labels=self.layout[0],
                                index_dtype=self.layout[1], dtype=self.dtype,
                                fit_intercept=self.fit_intercept)
                for files, (start, stop) in zip(self.blocks, self.bounds, strict=True)]

    def block(self, b: int) -> LEMLData:
        """Row block ``b``, read from its own files only and prepared as
        :func:`~scarce.algorithms.leml.data.split_rows` cuts the prepared whole."""
        from scarce.tasks.store.encoding import read_parquet_entry

        files = self.blocks[b]
        X, Y = read_parquet_entry(files["X"]), read_parquet_entry(files["Y"])
        mask = None if files["mask"] is None else read_parquet_entry(files["mask"])
        labels, index_dtype = self.layout
        data = prepare_rows(X, Y, mask, fit_intercept=self.fit_intercept, dtype=self.dtype,
                            layout={"labels": labels, "index_dtype": index_dtype})
        start, stop = self.bounds[b]
        got = (data.n_samples, data.n_features, data.n_labels)
        if got != (stop - start, self.n_features, self.n_labels):
            raise ValueError(f"{files['X']}: row block {b} of shape {got}, expected "
                             f"{(stop - start, self.n_features, self.n_labels)} (the files "
                             "changed since the W-step started)")
        return data

    def token(self) -> str:
        """A digest of the files (path, size, modification time) and the parameters: the
        name of the blocks on the cluster, new when a file is rewritten."""
        stats = []
        for files in self.blocks:
            for name in ("X", "Y", "mask"):
                path = files[name]
                if path is not None:
                    st = os.stat(path)
                    stats.append([name, path, st.st_size, st.st_mtime_ns])
        text = json.dumps([stats, self.fit_intercept, self.dtype, list(self.layout)],
                          sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _footer(path: str) -> tuple[tuple[int, int], int]:
    """The shape of the matrix in a store-format Parquet file and the entries it stores (the
    rows of a sparse entry, every element of a dense one), from the file's footer only."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    info = meta.metadata or {}
    if b"scarce.shape" not in info:
        raise ValueError(f"{path}: not a matrix in the store's Parquet format (no scarce.shape "
                         "in its metadata)")
    shape = tuple(json.loads(info[b"scarce.shape"]))
    if len(shape) != 2:
        raise ValueError(f"{path}: a matrix of shape {list(shape)}, expected 2 dimensions")
    kind = info.get(b"scarce.kind", b"").decode()
    return shape, meta.num_rows if kind == "sparse" else int(np.prod(shape))


def _partition_block(source: PartitionedData, b: int) -> LEMLData:
    """Row block ``b`` of ``source``, from its own files (:meth:`PartitionedData.block`)."""
    return source.block(b)
