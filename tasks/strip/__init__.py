"""StRip's Prefect steps: preprocess -> grow -> prune -> optimize -> evaluate -> write chains.

Stoyanov and Cardie, "Partially Supervised Coreference Resolution for Opinion Summarization
through Structured Rule Learning", EMNLP 2006.  Thin wrappers: the rule learner is
:class:`scarce.algorithms.strip.ripper.StRip` (over :mod:`scarce.algorithms.strip.closure`), the
pair features
:mod:`scarce.algorithms.strip.features`, the scores :mod:`scarce.algorithms.metrics.coref` and the
reader
:mod:`scarce.tasks.readers.conllu`.  The metrics table never holds a time.

One job per module (each name below is importable from here too):

- :mod:`~scarce.tasks.strip.documents`: the documents each role reads, from the splits file, and the
  run's document table (``record_documents``);
- :mod:`~scarce.tasks.strip.pairs`: one file's mentions and candidate pairs (``preprocess``) and the
  parts of a pair table;
- :mod:`~scarce.tasks.strip.training`: ``grow``, ``prune`` and ``optimize``, the estimator's phases,
  the training pairs kept between them and the memory they need;
- :mod:`~scarce.tasks.strip.evaluation`: chains from pair decisions, their scores (``evaluate``) and
  each variant's loss ratio chosen on dev (``select_loss_ratio``);
- :mod:`~scarce.tasks.strip.outputs`: the rules as text and the CoNLL-U files with the
  predicted chains (``write_predicted``);
- :mod:`~scarce.tasks.strip.apply`: a run's rules applied to new files (``load_rules``,
  ``apply_rules``, ``count_chains``), for the ``apply-strip`` flow.

A name is imported from its module when it is first used (:pep:`562`), so that what needs only
the documents' names or the outputs' (the checks ``scarce apply`` makes before it starts a
server, a model loaded into Python) does not import the learner's scikit-learn and numba with
the training steps.
"""

from __future__ import annotations

import importlib

#: The module of each name importable from here.
_MODULES = {
    "documents": ("DOC_SUFFIXES", "DOCUMENT_COLUMNS", "conllu_name", "record_documents",
                  "select_documents"),
    "pairs": ("MENTION_KEYS", "PAIR_KEYS", "feature_kinds", "features", "pair_ends",
              "preprocess"),
    "training": ("check_training_memory", "grow", "optimize", "prune",
                 "release_training_pairs", "training_memory"),
    "evaluation": ("CLUSTER_COLUMNS", "SCORE_NAMES", "SELECT_BY", "chain_scores", "chains",
                   "choose_loss_ratio", "evaluate", "has_gold_chains", "headline",
                   "select_loss_ratio"),
    "outputs": ("MODEL_VERSION", "chain_etypes", "number_chains", "output_name", "rules_text",
                "write_predicted"),
    "apply": ("apply_rules", "count_chains", "load_rules"),
}
_MODULE_OF = {name: module for module, names in _MODULES.items() for name in names}
__all__ = [  # (each name's module is in _MODULES)
    "DOC_SUFFIXES", "DOCUMENT_COLUMNS", "conllu_name", "record_documents", "select_documents",
    "MENTION_KEYS", "PAIR_KEYS", "feature_kinds", "features", "pair_ends", "preprocess",
    "check_training_memory", "grow", "optimize", "prune", "release_training_pairs",
    "training_memory",
    "CLUSTER_COLUMNS", "SCORE_NAMES", "SELECT_BY", "chain_scores", "chains", "choose_loss_ratio",
    "evaluate", "has_gold_chains", "headline", "select_loss_ratio",
    "MODEL_VERSION", "chain_etypes", "number_chains", "output_name", "rules_text",
    "write_predicted",
    "apply_rules", "count_chains", "load_rules",
]


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # (later look-ups find it without this function)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
