"""Config keys under their former names, and the names they have now.

A config file, a recorded run (``scarce rerun``), an override (``--set``) or the runs table
(``scarce runs``) may give a key under the name it had before a section was renamed; each
reads it under its current name, with a :class:`FutureWarning`.  Kept apart from the flows so
that the runs table reads old manifests without importing them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from scarce.tasks.errors import InputError

#: The keys of LEML's former ``w_step`` section, by the ``compute`` key each became.
W_STEP_KEYS = {"runner": "backend", "blocks": "row_blocks", "workers": "workers",
               "address": "address", "driver": "solvers"}
#: The values of the former ``w_step.runner``, by the ``compute.backend`` each became.
W_STEP_RUNNERS = {"local": "local", "blocks": "local-blocks", "dask": "dask"}


def compute_from_w_step(data: dict) -> dict:
    """A config mapping with its former ``w_step`` section (if any) given as ``compute``
    (:data:`W_STEP_KEYS`, :data:`W_STEP_RUNNERS`), with a :class:`FutureWarning` naming the
    new keys, so that configs and recorded runs (``scarce rerun``) written with it still load.

    Raises
    ------
    ValueError
        When both sections are given, or ``w_step`` holds a key it never had.
    """
    if "w_step" not in data:
        return data
    if "compute" in data:
        raise ValueError("w_step is the former name of compute: give compute only")
    old = data["w_step"]
    new = old
    if isinstance(old, dict):
        unknown = sorted(set(old) - set(W_STEP_KEYS))
        if unknown:
            raise ValueError(f"w_step.{unknown[0]}: unknown key (w_step, now compute, had "
                             f"{', '.join(W_STEP_KEYS)})")
        new = {W_STEP_KEYS[k]: W_STEP_RUNNERS.get(v, v) if k == "runner" else v
               for k, v in old.items()}
    renamed = ", ".join(f"{k} -> {W_STEP_KEYS[k]}" for k in W_STEP_KEYS)
    warnings.warn(f"config section w_step is now compute ({renamed}; runner blocks -> "
                  "backend local-blocks); read as compute", FutureWarning, stacklevel=2)
    out = {k: v for k, v in data.items() if k != "w_step"}
    out["compute"] = new
    return out


def leml_renamed_key(keys: list[str], value: Any) -> tuple[list[str], Any]:
    """A LEML config key and value under its current name: ``w_step.blocks`` (or the whole
    ``w_step``) as the ``compute`` key it became, with a :class:`FutureWarning`; any other key
    as it is.

    Raises
    ------
    InputError
        A key ``w_step`` never had.
    """
    if keys[0] != "w_step":
        return keys, value
    dotted = ".".join(keys)
    if len(keys) > 2:
        raise InputError("--set: w_step (now compute) has no sub-keys here", key=dotted)
    try:
        with warnings.catch_warnings():  # the one warning is below, naming the override
            warnings.simplefilter("ignore", FutureWarning)
            compute = compute_from_w_step(
                {"w_step": {keys[1]: value} if len(keys) == 2 else value})["compute"]
    except ValueError as exc:
        raise InputError(f"--set: {exc}", key=dotted) from None
    if len(keys) == 2:
        ((name, value),) = compute.items()
        new = ["compute", name]
    else:
        new, value = ["compute"], compute
    warnings.warn(f"--set {dotted} is set as {'.'.join(new)} (w_step is now compute)",
                  FutureWarning, stacklevel=2)
    return new, value


#: The renaming of each flow whose config renamed a key (``flow -> (keys, value) -> ...``).
RENAMED: dict[str, Callable[[list[str], Any], tuple[list[str], Any]]] = {
    "leml": leml_renamed_key,
}


def current_key(flow: str, keys: list[str], value: Any) -> tuple[list[str], Any]:
    """A key of a ``flow`` config and its value under the current name, without a warning
    (for reading recorded runs); a key the flow never renamed is returned as it is."""
    renamed = RENAMED.get(flow)
    if renamed is None:
        return keys, value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        try:
            return renamed(keys, value)
        except InputError:
            return keys, value
