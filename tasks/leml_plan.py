"""Where a LEML run's data lives: one plan, made once by the flow, through which every step runs.

``compute.backend`` places the data one of three ways:

* ``local``: the whole training set as store entries, which the W- and H-steps read and
  prepare once between them (:func:`scarce.tasks.leml.release_training_data` drops them);
* ``local-blocks``: the training set cut into ``row_blocks`` row blocks (``leml-partition``,
  each block its own store entries), whose tasks run in this process without Dask;
* ``dask``: the same row blocks, each read and kept by a Dask worker; the steps over the data
  (loading, the masks, the partitions, the propensities) run on the cluster too, so that the
  flow's process holds none of it (:data:`scarce.tasks.leml_dask.CLIENTS` opens the clients).

:class:`LemlPlan` holds that choice and is the one place that reads it: the flow calls
``plan.load``, ``plan.place``, ``plan.initialise``, ``plan.w_step``, ``plan.h_step``,
``plan.evaluate``, ``plan.predict`` the same way whatever the placement, and the plan passes
each step the arguments that say where (``cluster``, a runtime parameter outside the step's
key) and what it reads (the training refs or the row blocks' refs, ``partition``).  Entered
once per run as a context manager, it releases on exit what the steps keep between them: the
prepared training data (also at the end of each alternation, :meth:`LemlPlan.fitting`) and
the Dask clients with the row blocks kept on the workers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from scarce.algorithms.leml import LEML, row_block_bounds
from scarce.tasks.leml import (
    alternate_H,
    alternate_W,
    early_split,
    early_split_mask,
    evaluate,
    initialise,
    load,
    observe,
    partition,
    partition_masked,
    predict,
    propensity,
    release_training_data,
    split,
    stack,
    task_params,
)
from scarce.tasks.leml_dask.clients import CLIENTS


def xy(loaded: dict) -> dict:
    """The X and Y refs of a loaded file (what the learning steps take)."""
    return {"X": loaded["X"], "Y": loaded["Y"]}


@dataclass(frozen=True)
class Placed:
    """The training data where the half-steps read it, and the validation rows scored after
    each H-step.

    ``train`` and ``mask``: the whole data's refs (read here), or None when ``blocks``, the
    row blocks' refs (``{"X", "Y"[, "mask"]}`` per block, read by the workers), take their
    place.  ``validation``: the held-out rows' refs, scored here; or ``validation_blocks``,
    their row blocks, scored on the workers.
    """

    train: dict | None = None
    mask: str | None = None
    blocks: list[dict] | None = None
    validation: dict | None = None
    validation_blocks: list[dict] | None = None

    @property
    def data(self) -> dict:
        """The training data's arguments of a step: ``train``, ``mask`` and ``partition``."""
        return {"train": self.train, "mask": self.mask, "partition": self.blocks}

    @property
    def row_blocks(self) -> int | None:
        """The number of row blocks the half-steps' sums run over (None: the whole data)."""
        return None if self.blocks is None else len(self.blocks)


@dataclass(frozen=True)
class ScoredRows:
    """The rows a run scores: ``here``, their refs scored in this process (None when
    ``blocks`` is given), ``blocks``, their row blocks scored on the workers, and ``whole``,
    their refs whenever a step here needs them (the baselines)."""

    here: dict | None
    blocks: list[dict] | None
    whole: dict | None


class LemlPlan:
    """Where a run's data lives, and the steps run there.

    Parameters
    ----------
    ctx : RunContext
        The run (its ``run``, ``map``, ``read``, ``store`` and ``record``).
    backend : {"local", "local-blocks", "dask"}
        ``compute.backend`` (see the module docstring).
    row_blocks : int
        ``compute.row_blocks``: the training data's row blocks when ``backend`` is not
        ``local``.
    cluster : dict or None
        The ``cluster`` argument of the steps (where they run, outside their keys): None
        for ``local``, ``{"in_process": True}`` for ``local-blocks``, the scheduler and the
        solvers' place for ``dask``.
    """

    def __init__(self, ctx: Any, backend: str, row_blocks: int, cluster: dict | None) -> None:
        self.ctx, self.backend, self.n_blocks, self.cluster = ctx, backend, row_blocks, cluster
        #: Whether the half-steps run over row blocks.
        self.blocked = backend != "local"
        # With the dask backend the steps over the data run on the cluster too: the flow's
        # process holds none of it.
        self.data_cluster = cluster if backend == "dask" else None

    def __enter__(self) -> LemlPlan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def fitting(self) -> Iterator[LemlPlan]:
        """One alternation of the half-steps: the training data they read and prepare once
        between them is released when it ends, however it ends."""
        try:
            yield self
        finally:
            release_training_data()

    def close(self) -> None:
        """Release what the steps keep between them: the prepared training data, the Dask
        clients this process opened and the row blocks kept on the workers."""
        try:
            release_training_data()
        finally:
            CLIENTS.close()

    # -- the rows, where the data lives --------------------------------------------------
    def load(self, path, labels_file, labelled: bool, **read) -> dict:
        """``leml-load`` of ``path`` (its X, Y and index maps' refs), read where the data
        lives; ``read``: the format, dtype, labels and row normalisation."""
        return self.ctx.run(load, path=path, labels_file=labels_file, cluster=self.data_cluster,
                            labelled=labelled, **read)

    def needs_whole(self, here: bool) -> bool:
        """Whether the whole training set is stacked into store entries of its own: always on
        the whole data, and over row blocks when a step ``here`` needs it (the baselines, a
        tuning); else the steps take the blocks and none reads the whole."""
        return not self.blocked or here

    def stacked(self, parts: list[dict]) -> dict:
        """The X and Y refs of the loaded ``parts`` as one data set: the one part's own, or
        their rows stacked in part order (``leml-stack``)."""
        if len(parts) == 1:
            return xy(parts[0])
        return {name: self.ctx.run(stack, parts=[p[name] for p in parts], what=name)
                for name in ("X", "Y")}

    def stack_masks(self, masks: list[str]) -> str:
        """The parts' masks stacked in part order (``leml-stack``)."""
        return self.ctx.run(stack, parts=masks, what="mask")

    def hold_out(self, train: dict, fraction: float, seed: int) -> tuple[dict, dict | None]:
        """The training refs and the validation refs held out of them (``leml-split``; None
        when ``fraction`` is 0)."""
        if fraction == 0:
            return train, None
        parts = self.ctx.run(split, train=train, validation_fraction=fraction, seed=seed,
                             cluster=self.data_cluster)
        return ({"X": parts["X_fit"], "Y": parts["Y_fit"]},
                {"X": parts["X_val"], "Y": parts["Y_val"]})

    def observe(self, Y: str, fraction: float, seed: int, part: int | None = None) -> str:
        """The mask of the observed entries of ``Y`` (``leml-mask``); ``part``: the index of
        ``Y``'s part in a folder of parts."""
        where = {} if part is None else {"part": part}
        return self.ctx.run(observe, Y=Y, observed_fraction=fraction, seed=seed, **where,
                            cluster=self.data_cluster)

    def early_split(self, data: dict, params: dict) -> tuple[dict, dict]:
        """The rows the estimator's early stopping (or a tuning) fits on, ``{"train",
        "mask"}``, and the rows it holds out (``leml-early-split``)."""
        parts = self.ctx.run(early_split, train=data["train"], mask=data["mask"],
                             params=params, cluster=self.data_cluster)
        mask = None if data["mask"] is None else self.ctx.run(
            early_split_mask, mask=data["mask"], params=params, cluster=self.data_cluster)
        return ({"train": {"X": parts["X_fit"], "Y": parts["Y_fit"]}, "mask": mask},
                {"X": parts["X_val"], "Y": parts["Y_val"]})

    def partition(self, train: dict, mask: str | None = None) -> list[dict]:
        """``train`` (and its ``mask``) as row blocks (``leml-partition``, one task and one
        set of store entries per block, where the data lives): per block the refs of its rows
        of X, Y and the mask."""
        # what RunContext.map passes to every call; imported here, as the steps need no Prefect
        from prefect.utilities.annotations import unmapped

        n_rows = self.ctx.store.shape(train["X"])[0]
        count = len(row_block_bounds(n_rows, self.n_blocks))
        blocks, where = list(range(count)), unmapped(self.data_cluster)
        if mask is None:
            return self.ctx.map(partition, train=unmapped(train), block=blocks,
                                blocks=self.n_blocks, cluster=where)
        return self.ctx.map(partition_masked, train=unmapped(train), mask=unmapped(mask),
                            block=blocks, blocks=self.n_blocks, cluster=where)

    def place(self, data: dict, validation: dict | None = None,
              blocks: list[dict] | None = None) -> Placed:
        """Where the iterations find the training data ``data`` (``{"train", "mask"}``
        refs) and the ``validation`` refs: as they are on the whole data; over row blocks,
        ``blocks`` (the parts of a folder) or else ``data`` cut into ``row_blocks`` blocks,
        and the validation rows' blocks (their P@1 on the workers too)."""
        if not self.blocked:
            return Placed(train=data["train"], mask=data["mask"], validation=validation)
        if blocks is None:
            blocks = self.partition(data["train"], data["mask"])
        return Placed(blocks=blocks, validation_blocks=None if validation is None
                      else self.partition(validation))

    def test_set(self, parts: list[dict], whole: bool) -> ScoredRows:
        """The loaded test ``parts`` as the scoring steps take them: over row blocks, the
        parts of a folder or else ``row_blocks`` blocks of the one file; on the whole data,
        or when a step here needs them (``whole``: the baselines), the rows stacked."""
        blocks = stacked = None
        if self.blocked:
            blocks = ([xy(p) for p in parts] if len(parts) > 1
                      else self.partition(xy(parts[0])))
        if not self.blocked or whole:
            stacked = self.stacked(parts)
        return ScoredRows(here=None if blocks else stacked, blocks=blocks, whole=stacked)

    def propensity(self, placed: Placed, a: float, b: float) -> str:
        """The labels' inverse propensities (``leml-propensity``) from the training labels
        the model sees, read where they live."""
        return self.ctx.run(propensity, **placed.data, a=a, b=b, cluster=self.data_cluster)

    # -- the estimator's steps -------------------------------------------------------------
    def initialise(self, model: LEML, placed: Placed) -> dict:
        """The starting factors' refs (``leml-init``); the squared-loss start of a margin
        loss runs on the W-step's row blocks, as the iterations do."""
        return self.ctx.run(initialise, **placed.data, params=task_params(model, initialise),
                            row_blocks=placed.row_blocks if model.squared_start() else None,
                            cluster=self.cluster)

    def w_step(self, placed: Placed, factors: dict, iteration: int, params: dict) -> dict:
        """One W-step (``leml-alternate-W``) from ``factors``: the new W's and the timings'
        refs."""
        return self.ctx.run(alternate_W, **placed.data, **factors, iteration=iteration,
                            params=params, row_blocks=placed.row_blocks, cluster=self.cluster)

    def h_step(self, placed: Placed, W: str, H: str, iteration: int, params: dict) -> dict:
        """One H-step (``leml-alternate-H``) with its objective and validation P@1: the new
        H's, the trace's and the timings' refs."""
        return self.ctx.run(alternate_H, **placed.data, W=W, H=H, validation=placed.validation,
                            validation_partition=placed.validation_blocks, iteration=iteration,
                            params=params, row_blocks=placed.row_blocks, cluster=self.cluster)

    def note_where(self, timings: list) -> None:
        """Over row blocks, where the last W-step ran (its timings: the scheduler and the
        number of workers), for the manifest's notes."""
        if self.blocked:
            where = self.ctx.read(timings[-2]).iloc[0]
            self.ctx.record.note("w_step", {"scheduler": where["scheduler"],
                                            "workers": int(where["workers"])})

    def evaluate(self, model: LEML, test: ScoredRows, factors: dict, **scored) -> dict:
        """The test metrics and the convergence table (``leml-evaluate``), of the test rows
        here or of their blocks on the workers; ``scored``: the traces, timings, propensities,
        dataset, method and batch size."""
        return self.ctx.run(evaluate, test=test.here, **factors, **scored,
                            params=task_params(model, evaluate), partition=test.blocks,
                            cluster=self.cluster)

    def predict(self, model: LEML, test: ScoredRows, factors: dict, **scored) -> str:
        """The test rows' top labels (``leml-predict``), here or on the workers; ``scored``:
        the label map, ``top_k`` and the batch size."""
        return self.ctx.run(predict, test=test.here, **factors, **scored,
                            params=task_params(model, predict), partition=test.blocks,
                            cluster=self.cluster)
