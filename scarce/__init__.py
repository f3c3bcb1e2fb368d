"""scarce: reproducible pipelines for learning when labels are scarce.

Three published methods, each a Prefect flow over real data: LEML (multi-label learning with
missing labels), unsupervised relation discovery, and StRip (partially supervised
coreference).  The mathematics is in :mod:`scarce.algorithms` (estimators usable without
Prefect), the steps and all I/O in :mod:`scarce.tasks`, the flows and the command line in
:mod:`scarce.flows`, the benchmarks in :mod:`scarce.bench`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("scarce")
except PackageNotFoundError:  # imported from a checkout that is not installed
    __version__ = "unknown"


def load_model(run="latest", flow=None):
    """The model of a finished run, ready to use from Python (see
    :func:`scarce.flows.models.load_model`)::

        import scarce
        m = scarce.load_model("latest", flow="leml")     # the newest LEML run's model
        m.predict_top_k(["some text"], 5)                # five best labels with names, scores
        scarce.load_model(RUN_ID).assign(pairs)          # relations: cluster, label words
        scarce.load_model(RUN_ID).predict("doc.conllu")  # StRip: the mentions' chains
    """
    from scarce.flows.models import load_model as _load

    return _load(run, flow)


def runs(flow=None, *, tags=(), where=(), columns=None, all_columns=False, root=None):
    """The table of past runs as a DataFrame, as ``scarce runs`` prints it: a row per run
    (id, flow, data set, status, start, seconds), the config values that differ between the
    listed runs, and the headline metrics of the flow's own method::

        import scarce
        scarce.runs("leml", where=["dataset.name=bibtex"])   # LEML runs on Bibtex
        scarce.runs(tags=["experiment:rank"], all_columns=True)

    ``root`` is the runs folder (default: the project's ``data/runs``); the other arguments
    are those of :func:`scarce.flows.runs_table.runs_table`.
    """
    from pathlib import Path

    from scarce.flows.runs_table import runs_table
    from scarce.flows.runtime import default_runs_root

    folder = Path(root) if root is not None else default_runs_root()
    return runs_table(folder, flow=flow, tags=list(tags), where=list(where), columns=columns,
                      all_columns=all_columns)


__all__ = ["__version__", "load_model", "runs"]
