"""The test set scored where its row blocks are read: metric sums and top-k predictions per block.

Each block is a task that reads its own files on a worker; the factors are sent once; the
sums are added, the tables stacked, in block order, so the metrics and predictions equal the
single-process evaluation's.
"""

from __future__ import annotations

import uuid

import pandas as pd
import scipy.sparse as sp

from scarce.algorithms.metrics.multilabel import multilabel_sums, scores_from_sums
from scarce.tasks.leml_dask.cluster import cluster_workers
from scarce.tasks.leml_dask.transport import _call, _send_array


def block_metric_sums(files: dict, W, H, params: dict, batch_size: int,
                      ks=(1, 3, 5), inv_propensity=None) -> list[dict]:
    """The :func:`~scarce.algorithms.metrics.multilabel.multilabel_sums` of one row block of the
    test set, batch by batch: the block read from its own files (``{"X", "Y"}``, written by
    the flow's ``leml-partition`` step) and scored by the factors ``W``, ``H`` as
    ``LEML(**params).set_factors(W, H)`` predicts (PSP@k's sums too, given the training
    labels' ``inv_propensity``)."""
    from scarce.algorithms.leml import LEML
    from scarce.tasks.store.encoding import read_parquet_entry

    X = sp.csr_matrix(read_parquet_entry(files["X"]))
    Y = sp.csr_matrix(read_parquet_entry(files["Y"]))
    from scarce.algorithms.memory import rows_per_batch

    model = LEML(**params).set_factors(W, H)
    batch_size = rows_per_batch(batch_size, Y.shape[1])
    return [multilabel_sums(Y[s:s + batch_size], model.decision_function(X[s:s + batch_size]),
                            threshold=model.threshold_, ks=ks, inv_propensity=inv_propensity)
            for s in range(0, X.shape[0], batch_size)]


def _on_blocks(client, fn, files: list[dict], W, H, *args, name: str, workers=None) -> list:
    """``fn(files[b], W, H, *args)`` for every row block ``b``, each where it is read: on the
    workers of ``client`` (block ``b`` on worker ``b mod n_workers``; ``workers``: those of the
    cluster's workers to use, all by default), or in this process when ``client`` is None.
    Only the factors go out (once), and the results come back in block order."""
    if client is None:
        return [fn(f, W, H, *args) for f in files]
    workers = sorted(workers or cluster_workers(client))
    if not workers:
        raise ValueError("the Dask cluster has no workers; start some before the evaluation")
    tag = uuid.uuid4().hex[:8]
    factors = [_send_array(client, a, f"leml-e-{n}-{tag}") for n, a in (("W", W), ("H", H))]
    futures = [client.submit(_call, fn, True, f, *factors, *args,
                             key=f"leml-e-{name}-{tag}-block{b}",
                             workers=[workers[b % len(workers)]], allow_other_workers=True,
                             pure=False)
               for b, f in enumerate(files)]
    try:
        return client.gather(futures)
    finally:
        for future in [*futures, *factors]:
            future.release()


def evaluate_on_blocks(client, files: list[dict], W, H, params: dict, batch_size: int,
                       ks=(1, 3, 5), workers=None, inv_propensity=None) -> dict[str, float]:
    """Test metrics from the row blocks ``files`` of the test set, each scored where it is
    read (:func:`_on_blocks`: on the workers of ``client``, or in this process when
    ``client`` is None).  Only the factors go out and only per-batch counts come
    back; they are added in block and batch order, so the metrics are the same bits on any
    number of workers, and precision@k and the Hamming loss equal the one-process metrics
    to the last bit (integer counts; the AUC, nDCG@k and, given the training labels'
    ``inv_propensity``, PSP@k to rounding)."""
    blocks = _on_blocks(client, block_metric_sums, files, W, H, params, batch_size, tuple(ks),
                        inv_propensity, name="block_metric_sums", workers=workers)
    return scores_from_sums([p for block in blocks for p in block], ks)


def block_predictions(files: dict, W, H, params: dict, top_k: int,
                      batch_size: int) -> tuple[int, pd.DataFrame]:
    """The rows of one row block of the test set, read from its own files, and their
    predictions table (:func:`~scarce.algorithms.leml.predict.predictions_table`; its ``row``
    counts from the block's first row)."""
    from scarce.algorithms.leml import LEML
    from scarce.algorithms.leml.predict import predictions_table
    from scarce.tasks.store.encoding import read_parquet_entry

    model = LEML(**params).set_factors(W, H)
    X = sp.csr_matrix(read_parquet_entry(files["X"]))
    return X.shape[0], predictions_table(model, X, top_k, batch_size)


def predict_on_blocks(client, files: list[dict], W, H, params: dict, top_k: int,
                      batch_size: int, workers=None) -> pd.DataFrame:
    """The test set's predictions table from its row blocks ``files``, each block predicted
    where it is read (:func:`_on_blocks`) and the tables put end to end in block order, rows
    numbered from the first block's first row: the table the whole test set gives, with only
    the factors going out and only the top labels coming back."""
    tables = _on_blocks(client, block_predictions, files, W, H, params, top_k, batch_size,
                        name="block_predictions", workers=workers)
    offset, parts = 0, []
    for n_rows, table in tables:
        parts.append(table.assign(row=table["row"] + offset))
        offset += n_rows
    return pd.concat(parts, ignore_index=True)
