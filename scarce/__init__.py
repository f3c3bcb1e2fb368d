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


__all__ = ["__version__", "load_model"]
