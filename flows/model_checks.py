"""What a loaded model checks: the parameters of the run's estimator, and what it is given.

A loaded model (:func:`scarce.load_model`) exposes the run's estimator, built with every
parameter the run used, so that ``sklearn.base.clone(model.estimator_)`` trains what the run
trained: read from ``model.json``'s ``params``, or, for a model written before they were
recorded, from the run's config.  Its methods refuse a bad argument in one line naming the
argument and the row (:func:`kind_of` words what was given).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scarce.tasks.errors import InputError, excerpt


def run_params(estimator: type, meta: dict, config: Callable[[], Any], path: Path
               ) -> dict[str, Any]:
    """The parameters of ``estimator`` a run trained with: ``model.json``'s ``params``, or,
    for a model written before they were recorded, those of the run's config (``config()``:
    the keys named as the parameters, at its top level or under ``model``, and its ``seed``
    as ``random_state``; a parameter the config lacks had the estimator's default, the
    config's defaults being the estimator's).

    Raises
    ------
    InputError
        Naming ``path`` (``model.json``) and ``params`` when they are not the estimator's.
    """
    names = set(estimator._get_param_names())
    params = meta.get("params")
    if params is None:
        recorded = config()
        section = {**recorded, **(recorded.get("model") or {})} if isinstance(
            recorded, dict) else {}
        params = {k: v for k, v in section.items() if k in names}
        if "random_state" in names and isinstance(section.get("seed"), int):
            params["random_state"] = section["seed"]
    if not isinstance(params, dict) or not set(params) <= names:
        unknown = sorted(set(params) - names) if isinstance(params, dict) else params
        raise InputError(f"not the parameters of {estimator.__name__}: {excerpt(unknown)}",
                         path=path, key="params")
    return dict(params)


def read_json(path: Path) -> Any:
    """A JSON file of a model folder (an :class:`InputError` naming it when unreadable)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read it ({exc})", path=path) from None


def kind_of(value: Any) -> str:
    """``None``, ``an int``, ``a dict``: what a bad argument is, for a message."""
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
