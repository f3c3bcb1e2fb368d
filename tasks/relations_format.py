"""The relations model's format: its version and what ``model.json`` holds.

Apart from the steps (:mod:`scarce.tasks.relations`), which import the method and scikit-learn, so
that ``scarce apply`` checks a model before it imports them.
"""

from __future__ import annotations

__all__ = ["MODEL_KEYS", "MODEL_VERSION"]

#: Version of the model format (``outputs/model/``, docs/relations.md); ``apply-relations`` and
#: a loaded model read only this one.
MODEL_VERSION = 1
#: What ``apply-relations`` and a loaded model read from ``model.json``.
MODEL_KEYS = ("directed", "contexts", "assign", "files", "dataset")
