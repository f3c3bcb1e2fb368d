"""A stand-in for a Dask client that runs every task in this process (``local-blocks``).

The same block tasks, in the same block order, as a cluster runs them, so the results are the
same bits as on any number of Dask workers.
"""

from __future__ import annotations


class _InlineFuture:
    """The value of a task :class:`InlineClient` ran (a future already done)."""

    def __init__(self, key, value) -> None:
        self.key, self.value = key, value

    def result(self):
        return self.value

    def release(self) -> None:
        self.value = None


class InlineClient:
    """A stand-in for a Dask client that runs each task in this process when it is
    submitted: :class:`RowBlockBackend`, :func:`evaluate_on_blocks` and :func:`predict_on_blocks`
    on the same row blocks, by the same code, without Dask (the flow's ``compute.backend:
    local-blocks``).  One "worker", no memory limit.  The tasks are the ones a cluster runs, added
    in the same block order, so the results are the same bits as on any number of Dask
    workers (tested)."""

    asynchronous = False

    #: Values this process keeps by task key: the row blocks of the last W-step
    #: (:meth:`keep`), as Dask workers keep them between the half-steps.
    _kept: dict = {}

    class _Scheduler:
        address = "inline"

    def __init__(self) -> None:
        self.scheduler = self._Scheduler()

    def scheduler_info(self, n_workers: int = -1) -> dict:
        return {"workers": {"inline": {"name": "inline", "memory_limit": 0}}}

    def submit(self, fn, *args, key=None, **_placement):
        if key is not None and key in InlineClient._kept:
            return _InlineFuture(key, InlineClient._kept[key])
        args = [a.value if isinstance(a, _InlineFuture) else a for a in args]
        return _InlineFuture(key, fn(*args))

    @staticmethod
    def keep(futures) -> None:
        """Keep the values of ``futures`` (a W-step's row blocks, named after their files) in
        place of those kept before: the next half-step on the same data asks for the same
        keys and is given them without reading its files again."""
        InlineClient._kept = {f.key: f.value for f in futures}

    @staticmethod
    def release_kept() -> None:
        InlineClient._kept = {}

    def scatter(self, data, **_placement):
        return _InlineFuture(None, data)

    def gather(self, futures):
        return [f.value for f in futures]
