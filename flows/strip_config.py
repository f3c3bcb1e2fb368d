"""The StRip flow's config schema (``configs/strip.yaml``).

Apart from the flow (:mod:`scarce.flows.strip`), and importing neither Prefect, scikit-learn, numba
nor Dask, so that a command validates a config before it imports the learner.  The learner's
options, defaults and bounds are in :mod:`scarce.algorithms.strip.params`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from scarce.algorithms.strip.params import PARAMS, VARIANTS
from scarce.flows.config import (
    DATASET_NAME,
    NAME_LENGTH,
    FlowConfig,
    Strict,
    from_declared,
    input_path,
)

#: The estimator whose parameters the config holds.
ESTIMATOR = "scarce.algorithms.strip.ripper.StRip"

Variant = Literal[VARIANTS]


def from_params(name: str, **field) -> object:
    """A field holding the learner's parameter ``name``: its default and bounds
    (:data:`scarce.algorithms.strip.params.PARAMS`)."""
    param = PARAMS[name]
    return from_declared(ESTIMATOR, name, param.default, **param.bounds(), **field)


class SourceConfig(Strict):
    """Which mentions are labelled ("sources"); pairs with a non-source mention are unknown."""

    kind: Literal["etype", "fraction"] = Field(
        "etype",
        description="etype: mentions of entities of the types in 'etypes' (the "
        "opinion holders of the paper's setting); fraction: a seeded "
        "fraction of the entities of each document.",
    )
    etypes: list[str] = Field(
        ["person", "organization"],
        min_length=1,
        description="Entity types whose mentions are sources (kind: etype).",
    )
    fraction: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Share of each document's entities that are sources "
        "(kind: fraction), drawn with the run's seed.",
    )


class StripConfig(FlowConfig):
    """Options of the StRip flow (``configs/strip.yaml``); the learner's defaults are StRip's."""

    dataset: str = Field(
        "gum",
        pattern=DATASET_NAME,
        max_length=NAME_LENGTH,
        description="Dataset name in run names and the metrics table.",
    )
    data_dir: str = input_path(
        "folder",
        "data/coref/gum",
        description="Folder of <doc_id>.conllu[.gz] files (CorefUD Entity= "
        "annotations), relative to the project root.",
    )
    splits_file: str = input_path(
        "file",
        "data/coref/gum/splits.tsv",
        description="Tab-separated doc_id / split file, relative "
        "to the project root; listed documents "
        "absent from data_dir are skipped.",
    )
    train_splits: list[str] = Field(
        ["train"], min_length=1, description="Splits whose documents train the rules."
    )
    test_splits: list[str] = Field(
        ["test"], min_length=1, description="Splits whose documents are scored."
    )
    dev_splits: list[str] = Field(
        ["dev"],
        description="Splits whose documents choose each variant's loss ratio among "
        "`loss_ratios` (the paper's protocol: train on train at each ratio, keep the ratio "
        "best on dev, score that model on test); []: every variant uses `loss_ratio`.",
    )
    loss_ratios: list[float] = Field(
        [1.0, 0.5, 2.0],
        min_length=1,
        description="The loss ratios tried on dev (with dev_splits).",
    )
    select_by: Literal["b3", "conll"] = Field(
        "b3",
        description="The dev score that chooses the loss ratio: B³ F1, or the CoNLL F1 (mean "
        "of MUC, B³ and CEAF-e); ties go to the higher pairwise F1, then to the ratio nearest 1.",
    )
    window: int = Field(
        20, ge=1, description="Candidate pairs: mentions at most this many mentions apart."
    )
    max_sentence_distance: int | None = Field(
        None, ge=0, description="And at most this many sentences apart; null: no limit."
    )
    sources: SourceConfig = Field(SourceConfig(), description="The labelled mentions.")
    variants: list[Variant] = Field(
        list(VARIANTS),
        min_length=1,
        description="ripper: plain RIPPER on labelled pairs (baseline); strip-labeled: StRip "
        "on labelled pairs; strip-partial: StRip on all pairs, unknown labels "
        "taking part in the closure only.",
    )
    loss_ratio: float = from_params(
        "loss_ratio", description="Cost of a false positive over a false negative (the paper "
        "varied it); used when dev_splits is empty.",
    )
    k_optimize: int = from_params("k_optimize",
                                  description="Rounds of RIPPER's optimisation.")
    dl_surplus: float = from_params(
        "dl_surplus", description="Stop adding rules when the description length exceeds the "
        "least seen by this many bits.",
    )
    max_thresholds: int = from_params(
        "max_thresholds", description="Candidate thresholds per numeric feature (quantiles).",
    )

    @model_validator(mode="after")
    def _distinct(self) -> StripConfig:
        if len(set(self.variants)) != len(self.variants):
            raise ValueError("variants: each variant at most once")
        roles = (self.train_splits, self.dev_splits, self.test_splits)
        if sum(len(set(r)) for r in roles) != len(set().union(*roles)):
            raise ValueError("train_splits, dev_splits and test_splits must not share a split")
        if any(not (r > 0 and r < float("inf")) for r in self.loss_ratios):
            raise ValueError("loss_ratios: each must be a positive finite number")
        if len(set(self.loss_ratios)) != len(self.loss_ratios):
            raise ValueError("loss_ratios: each ratio at most once")
        return self

    def ratios(self) -> list[float]:
        """The loss ratios each variant is trained with."""
        return list(self.loss_ratios) if self.dev_splits else [self.loss_ratio]
