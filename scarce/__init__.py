"""scarce: reproducible pipelines for learning when labels are scarce.

Three published methods, each a Prefect flow over real data: LEML (multi-label learning with
missing labels), unsupervised relation discovery, and StRip (partially supervised
coreference).  The mathematics is in :mod:`scarce.algorithms` (estimators usable without
Prefect), the steps and all I/O in :mod:`scarce.tasks`, the flows and the command line in
:mod:`scarce.flows`, the benchmarks in :mod:`scarce.bench`.
"""

import sys as _sys
from pathlib import Path as _Path


def __getattr__(name: str):
    # ``__version__`` is looked up when first asked for: importlib.metadata, and its search of
    # the installed distributions, are no part of ``import scarce`` (a script that loads a
    # model pays for them otherwise).
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("scarce")
    except PackageNotFoundError:  # imported from a checkout that is not installed
        value = "unknown"
    globals()["__version__"] = value
    return value

#: The subpackages that live in the repository's top-level folders (setup.py maps them).
SUBPACKAGES = ("algorithms", "tasks", "flows", "bench", "configs")


class _CheckoutFinder:
    """Finds ``scarce.<folder>`` in the checkout's top-level folder ``<folder>``.

    In the repository, this file's folder ``scarce/`` sits beside ``flows/``, ``tasks/`` and
    the others, which an install maps under ``scarce`` (setup.py).  Python run from the
    repository's root finds ``./scarce`` first, whose own folder holds none of them, so
    ``import scarce.flows`` failed there, installed or not (only an editable install, whose
    finder maps the folders, escaped it).  This finder, placed after Python's own, gives the
    folders of :data:`SUBPACKAGES` as the subpackages, and nothing else of the repository.
    """

    def __init__(self, root: _Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path=None, target=None):
        parent, _, child = fullname.rpartition(".")
        if parent != __name__ or child not in SUBPACKAGES:
            return None
        if getattr(_sys.modules.get(__name__), "_checkout_root", None) != self.root:
            return None  # another copy of scarce was imported since
        from importlib.machinery import PathFinder

        return PathFinder.find_spec(fullname, [str(self.root)])


def _find_checkout() -> _Path | None:
    """The repository this package was imported from, if it was (not an installed copy)."""
    root = _Path(__file__).resolve().parent.parent
    try:
        project = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    if 'name = "scarce"' not in project or not (root / "flows" / "cli.py").is_file():
        return None
    return root


_checkout_root = _find_checkout()
if _checkout_root is not None and not any(
        isinstance(f, _CheckoutFinder) and f.root == _checkout_root for f in _sys.meta_path):
    _sys.meta_path.append(_CheckoutFinder(_checkout_root))


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

    from scarce.flows.config import default_runs_root
    from scarce.flows.runs_table import runs_table

    folder = Path(root) if root is not None else default_runs_root()
    return runs_table(folder, flow=flow, tags=list(tags), where=list(where), columns=columns,
                      all_columns=all_columns)


__all__ = ["__version__", "load_model", "runs"]
