"""The relation discovery flow's config schema (``configs/relations.yaml``).

Apart from the flow (:mod:`scarce.flows.relations`), and importing neither Prefect, scikit-learn nor
Dask, so that a command validates a config before it imports the method.  The method's options,
defaults and bounds are declared once in :mod:`scarce.algorithms.relations.params`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator, model_validator

from scarce.algorithms.params import Param
from scarce.algorithms.relations.params import (
    CONTEXT_PARAMS,
    INPUT_FORMATS,
    PARAMS,
    RANKINGS,
    check_n_pairs,
    k_values,
    parse_window,
)
from scarce.flows.config import (
    DATASET_NAME,
    NAME_LENGTH,
    FlowConfig,
    from_declared,
    input_path,
)

if TYPE_CHECKING:
    from scarce.algorithms.relations.model import RelationDiscovery

#: Where each table of parameters is used, by the table.
_OWNER = {id(PARAMS): "scarce.algorithms.relations.model.RelationDiscovery",
          id(CONTEXT_PARAMS): "scarce.algorithms.relations.contexts.build_contexts"}

# ASCII digits: the window is part of the run name (flows.config.NAME_LENGTH bounds it)
WINDOW_PATTERN = r"^[0-9]+-[0-9]+-[0-9]+$"


def from_params(table: dict[str, Param], name: str, **field) -> object:
    """A field holding the parameter ``name`` of ``table``
    (:data:`scarce.algorithms.relations.params.
    PARAMS`, the estimator's; :data:`~scarce.algorithms.relations.params.CONTEXT_PARAMS`, the
    contexts'): its default and bounds."""
    param = table[name]
    return from_declared(_OWNER[id(table)], name, param.default, **param.bounds(), **field)


class RelationsConfig(FlowConfig):
    """Options of the relation discovery flow (``configs/relations.yaml``).

    The method's options are :class:`RelationDiscovery`'s parameters under the same names
    (``seed`` is its ``random_state``), with its defaults; the contexts' are those of
    :func:`~scarce.algorithms.relations.contexts.build_contexts`.
    """

    dataset: str = Field("semeval-9", pattern=DATASET_NAME, max_length=NAME_LENGTH,
                         description="Dataset name in run names and the metrics table.")
    data: list[str] = input_path(
        "file",
        ["data/relations/semeval2010_task8/TRAIN_FILE.TXT"],
        min_length=1,
        description="Input files, relative to the project root: SemEval-2010 Task 8 files "
        "or JSON Lines (tokens, head, tail, optional label); concatenated.",
    )
    format: Literal[("auto", *INPUT_FORMATS)] = Field(
        "auto", description="Input format; 'auto' guesses from the name (.jsonl/.json)."
    )
    relation_types: list[str] | None = Field(
        None, description="Keep only these undirected types; null keeps every type."
    )
    include_other: bool = Field(False, description="Keep the pairs labelled 'Other'.")
    directed: bool = Field(
        False,
        description="Evaluate against the directed labels (18 types) instead of the "
        "undirected types.",
    )
    max_pairs: int | None = Field(
        None, ge=10, description="Seeded sample of this many pairs; null uses every pair."
    )

    window: str = from_params(
        CONTEXT_PARAMS, "window", pattern=WINDOW_PATTERN, max_length=NAME_LENGTH,
        description="Context window pre-mid-post (the paper: 0-10-0 best).",
    )
    weighting: Literal["tfidf", "binary"] = from_params(
        CONTEXT_PARAMS, "weighting", description="Context weights."
    )
    position_tags: bool = from_params(
        CONTEXT_PARAMS, "position_tags", description="Tag words with pre:/mid:/post:."
    )
    lowercase: bool = from_params(
        CONTEXT_PARAMS, "lowercase", description="Lowercase context words."
    )
    min_df: int = from_params(
        CONTEXT_PARAMS, "min_df", description="Keep words in at least this many contexts."
    )

    ranking: Literal[RANKINGS] = from_params(PARAMS, "ranking",
        description="Word ranking: entropy (Dash et al.), or the ablations frequency and chi2 "
        "(k-means pseudo-labels).",
    )
    entropy_binary: bool = from_params(PARAMS, "entropy_binary",
        description="Rank on the binarised contexts (exact Hamming-histogram method).",
    )
    entropy_samples: int | None = from_params(PARAMS, "entropy_samples",
        description="Rank on a seeded subsample of this many pairs; null: all.",
    )
    chi2_k: int | None = from_params(PARAMS, "chi2_k",
        description="k of the chi2 pseudo-labels; null: (k_low + k_high) // 2.",
    )

    k_low: int = from_params(PARAMS, "k_low", description="K_low, the smallest number of clusters."
    )
    k_high: int = from_params(
        PARAMS, "k_high", description="K_high, the largest number of clusters."
    )
    prefix_step: int | None = from_params(PARAMS, "prefix_step",
        description="Prefix lengths step, 2*step, ...; null: n_prefixes geometric lengths "
        "from min_prefix to all words.",
    )
    n_prefixes: int = from_params(
        PARAMS, "n_prefixes", description="Number of geometric prefix lengths."
    )
    min_prefix: int = from_params(
        PARAMS, "min_prefix", description="Smallest geometric prefix length."
    )
    theta: float = from_params(PARAMS, "theta",
        description="Coverage threshold: share of pairs with a selected word.",
    )
    reg: float = from_params(PARAMS, "reg",
        description="Relative ridge on P_W in trace(P_W^-1 P_B).",
    )
    row_norm: bool = from_params(
        PARAMS, "row_norm", description="L2-normalise pairs after selecting words."
    )
    n_init: int = from_params(
        PARAMS, "n_init", description="k-means restarts of the subset search."
    )

    n_subsamples: int = from_params(PARAMS, "n_subsamples", description="q, subsamples per k."
    )
    rho: float = from_params(PARAMS, "rho", description="Subsample fraction rho."
    )
    n_init_reference: int | None = from_params(PARAMS, "n_init_reference",
        description="k-means restarts of each reference clustering C of a k (C_1 of the "
        "chosen k is the final clustering, C_1 on all words at the true k the k-means "
        "baseline); null: n_init (C_1 is then the clustering the subset search scored).",
    )
    n_init_subsample: int | None = from_params(PARAMS, "n_init_subsample",
        description="k-means restarts of the subsample clusterings C^mu; null: n_init.",
    )
    n_references: int = from_params(PARAMS, "n_references",
        description="R, reference clusterings C per k (own seeds); Eq. 2 is averaged over "
        "them. 1: the paper's single C.",
    )

    n_label_words: int = from_params(
        PARAMS, "n_label_words", description="DCM words reported per cluster."
    )
    baselines: bool = Field(
        True,
        description="Also run Hasegawa et al. and k-means on all words at the true k, "
        "and RLBaseline (stability on all words); needs gold labels.",
    )
    hasegawa_window: str = Field(
        "0-5-0",
        pattern=WINDOW_PATTERN,
        description="Between-words window of the Hasegawa baseline.",
    )

    @field_validator("window", "hasegawa_window")
    @classmethod
    def _window_selects_words(cls, value: str) -> str:
        parse_window(value)
        return value

    @model_validator(mode="after")
    def _k_range(self) -> RelationsConfig:
        k_values(self.k_low, self.k_high)
        if self.max_pairs is not None:  # the most pairs the method will see
            check_n_pairs(self.method_params(), self.max_pairs)
        return self

    def method_params(self) -> dict:
        """The method's parameters in this config
        (:data:`scarce.algorithms.relations.params.PARAMS`)."""
        return {name: getattr(self, name) for name in PARAMS}

    def estimator(self) -> RelationDiscovery:
        """The method with this config's parameters (``seed`` as its ``random_state``)."""
        from scarce.algorithms.relations.model import RelationDiscovery

        return RelationDiscovery(random_state=self.seed, **self.method_params())
