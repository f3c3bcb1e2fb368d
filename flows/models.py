"""A finished run's model as a Python object: what :func:`scarce.load_model` returns.

The run is found from its manifest, and its model is loaded by the class of its flow
(:data:`LOADERS`), imported only then: each imports what its own model needs, none of them
Prefect or the flows' modules (a LEML model not even scikit-learn), so that a notebook or a
script pays for reading the model and scoring its rows, not for the pipelines.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from scarce.flows import manifest as mf
from scarce.flows.environment import default_runs_root
from scarce.flows.model_format import resolve_model_run
from scarce.tasks.errors import InputError

#: The flows whose models load into Python, by the flow name a manifest records: the class of
#: the model as ``module:name``.
LOADERS: dict[str, str] = {
    "leml": "scarce.flows.model_leml:LemlModel",
    "relations": "scarce.flows.model_relations:RelationsModel",
    "strip": "scarce.flows.model_strip:StripModel",
}


def model_class(flow: str) -> type:
    """The class of the models of ``flow``'s runs (one of :data:`LOADERS`), imported now."""
    module, _, name = LOADERS[flow].partition(":")
    return getattr(importlib.import_module(module), name)



def load_model(run: str | os.PathLike[str] = "latest", flow: str | None = None) -> Any:
    """The model of a finished run.

    Parameters
    ----------
    run : str or path, default="latest"
        A run id, ``latest`` / ``latest:<name>`` (the newest finished run of ``flow``, by
        default of any flow that has a model), or a run folder's path.
    flow : str, optional
        The training flow, to choose among ``latest`` runs.

    Returns
    -------
    LemlModel, RelationsModel or StripModel
        By the run's flow (the keys of :data:`LOADERS`): ``predict_top_k`` of texts, tables
        or files (LEML); ``assign`` of entity pairs (relations); ``predict`` of CoNLL-U
        documents (StRip).  Each gives ``scarce apply``'s results on the same input.

    Raises
    ------
    InputError
        No such run, a run of a flow whose model does not load into Python, a model written in
        a format version this code does not read.
    """
    runs = default_runs_root()
    text = str(run)
    if text == "latest" or text.startswith("latest:"):
        flows = [flow] if flow else list(LOADERS)
        found = []
        for name in flows:
            try:
                found.append(resolve_model_run(text, name, runs))
            except InputError:
                continue
        if not found:
            raise InputError(f"no finished run of {' or '.join(flows)} in {runs}", key="run")
        run_dir = max(found, key=lambda d: (mf.read_run_keys(d)["finished"] or "", d.name))
    else:
        path = Path(run)
        run_dir = path if (path / mf.MANIFEST).is_file() else runs / text
        if not (run_dir / mf.MANIFEST).is_file():
            raise InputError(f"no run {text!r} in {runs} (see `scarce runs`)", key="run")
    recorded = mf.read_run_keys(run_dir)["flow"]
    if recorded not in LOADERS:
        raise InputError(f"run {run_dir.name} is a {recorded} run; models of "
                         f"{', '.join(sorted(LOADERS))} runs load into Python (the others "
                         f"through `scarce apply`)", key="run")
    return model_class(recorded)(run_dir)
