"""The ``apply-leml`` flow's config schema and the checks of an apply run before it starts.

Apart from the flow (:mod:`scarce.flows.apply_leml`), and importing neither Prefect, scikit-learn
nor
Dask, so that ``scarce apply`` checks the model, the input tables (their columns and label
cells) and the output before it imports the flow or starts a server.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import Field, field_validator

from scarce.algorithms.leml.params import BATCH_SIZE, TOP_K
from scarce.algorithms.leml.predict import PREDICTION_COLUMNS
from scarce.flows.apply import (
    ApplyConfig,
    input_files,
    open_model,
    output_names,
    output_target,
    resolve_model_run,
)
from scarce.flows.config import resolve_path
from scarce.tasks.errors import InputError
from scarce.tasks.kept_columns import check_kept_columns
from scarce.tasks.leml_files import LABEL_NAME, MODEL_FILES, MODEL_VERSION
from scarce.tasks.leml_table import check_table_columns, check_table_labels
from scarce.tasks.readers.table import TABLE_SUFFIXES

#: The endings (lower case) of the files of a folder each format reads (a Parquet pair by X).
SUFFIXES = {"xmc": (".txt", ".txt.gz"), "arff": (".arff", ".arff.gz"),
            "parquet": (".x.parquet",), "table": TABLE_SUFFIXES}
#: The columns of the predictions (a kept column takes none of these names).
PREDICTIONS = (*PREDICTION_COLUMNS, LABEL_NAME)
#: What ``apply-leml`` reads from ``model.json``.
MODEL_KEYS = ("rank", "loss", "dtype", "n_labels", "fit_intercept", "normalize", "input_format",
              "shapes")


class ApplyLemlConfig(ApplyConfig):
    top_k: int = Field(TOP_K, ge=1, description="Labels per row, best first (at most the "
                       "model's label count).")
    format: Literal["xmc", "arff", "parquet", "table"] | None = Field(
        None, description="Input format; null: the format the model was trained on (a "
        "table model reads tables only: its vectoriser and label names are the model's).")
    batch_size: int = Field(BATCH_SIZE, ge=1, description="Rows scored at a time.")
    keep_columns: list[str] = Field(
        [], description="Columns of an input table copied into its predictions, first, on "
        "every line of their row (an id, to join the predictions back to the table); each "
        "table must have them.")

    @field_validator("keep_columns")
    @classmethod
    def _kept_names(cls, names: list[str]) -> list[str]:
        clash = [n for n in names if n in PREDICTIONS]
        if clash:
            raise ValueError(f"{clash[0]!r} is a column of the predictions; keep a column of "
                             "another name")
        if len(set(names)) != len(names) or not all(names):
            raise ValueError("each column at most once, each a non-empty name")
        return names


    def check_before_run(self, runs: Path, store: Path) -> None:
        """The model, the input and the output, as the flow checks them first
        (:func:`prepare`)."""
        super().check_before_run(runs, store)
        prepare(self, runs, store, announce=False)


@dataclass(frozen=True)
class Prepared:
    """What ``apply-leml`` reads and writes, checked (:func:`prepare`)."""

    meta: dict
    folder: Path
    fmt: str
    source: Path
    files: list[Path]
    names: list[str]
    output: Path | None


def prepare(config: ApplyLemlConfig, runs: Path, store: Path,
            announce: bool = True) -> Prepared:
    """The model of ``config.model_run`` in the runs folder ``runs``, the input files (each
    a table with the columns the model reads and keeps, its label cells joined as the
    model's were) and where the predictions go (the output guard, with the store ``store``),
    all checked before anything is read in full or scored: by the flow first, and by the
    command before it starts a server (:meth:`ApplyLemlConfig.check_before_run`).
    ``announce``: log which model is applied."""
    run_dir = resolve_model_run(config.model_run, "leml", runs)
    meta, folder = open_model(run_dir, "leml", MODEL_VERSION, MODEL_KEYS, announce=announce)
    fmt, source = config.format or meta["input_format"], resolve_path(config.input)
    files = input_files(source, SUFFIXES[fmt], config.allow_empty)
    if config.keep_columns:  # the columns to keep are in every table, before any is scored
        if fmt != "table":
            raise InputError(f"columns are kept from a table; this input is read as {fmt}",
                             key="keep_columns")
        check_kept_columns(files, config.keep_columns)
    check_format(config, meta, fmt)
    if fmt == "table":  # the columns the model reads, and the label cells of each head
        check_table_columns({"input": files}, meta["table"], labelled=False)
        labels = pd.read_parquet(folder / MODEL_FILES["labels"], columns=["name"])
        for path in files:
            check_table_labels(path, meta["table"], known=labels["name"].astype(str))
    names = output_names(source, files, SUFFIXES[fmt], "predictions.parquet")
    output = None if config.output is None else output_target(
        resolve_path(config.output), names, inputs=files, source=source, store_root=store,
        runs_root=runs, force=config.force)
    return Prepared(meta, folder, fmt, source, files, names, output)


def check_format(config: ApplyLemlConfig, meta: dict, fmt: str) -> None:
    """A model trained on a table reads tables only (its vectoriser and label names are its
    own), and a table only a model trained on one."""
    if (fmt == "table" or meta["input_format"] == "table") and (
            fmt != meta["input_format"] or "table" not in meta):
        raise InputError(f"the model of run {config.model_run} was trained on "
                         f"{meta['input_format']} data; it reads {meta['input_format']} "
                         f"input, not {fmt}", key="format")
