"""The ``apply-strip`` flow's config schema and the checks of an apply run before it starts.

Apart from the flow (:mod:`scarce.flows.apply_strip`), and importing neither Prefect, Dask nor
the learner (scikit-learn, numba): the checks (:func:`prepare`) read the model with
:func:`scarce.flows.model_strip.open_strip_model` and the documents' names with
:mod:`scarce.tasks.strip.documents` and :mod:`~scarce.tasks.strip.outputs`, none of which
imports them, so that ``scarce apply`` checks a StRip run before it imports the flow or starts
a server.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from scarce.flows.apply import ApplyConfig, input_files
from scarce.flows.config import resolve_path
from scarce.flows.outputs import Output, Protected, check_output, check_targets
from scarce.flows.strip_config import Variant
from scarce.tasks.errors import InputError

if TYPE_CHECKING:
    from scarce.flows.model_strip import ModelVariant


class ApplyStripConfig(ApplyConfig):
    """Options of the apply-strip flow (``configs/apply-strip.yaml``)."""

    variant: Variant | None = Field(
        None,
        description="The variant whose rules are applied; null: strip-partial (the paper's "
        "method) when the run trained it, else the run's first variant.",
    )


    def check_before_run(self, runs: Path, store: Path) -> None:
        """The model, the input and the output, as the flow checks them first
        (:func:`prepare`)."""
        super().check_before_run(runs, store)
        prepare(self, runs, store, announce=False)


def prepare(config: ApplyStripConfig, runs: Path, store: Path, announce: bool = True
            ) -> tuple[ModelVariant, list[Path], list[str], list[Path]]:
    """The model of ``config.model_run`` in the runs folder ``runs``, the input files, their
    outputs' names and where ``output`` puts them (:func:`plan_outputs`, with the store
    ``store``), all checked before anything is read: by the flow first, and by the command
    before it starts a server.  ``announce``: log which model is applied."""
    # The model's reader imports pandas and the CoNLL-U reader: imported here, so that the
    # schema above is read without them.
    from scarce.flows.model_strip import open_strip_model
    from scarce.tasks import strip

    model = open_strip_model(config.model_run, config.variant, runs, announce=announce)
    files = input_files(resolve_path(config.input), strip.DOC_SUFFIXES, config.allow_empty)
    names, targets = plan_outputs(config, files, runs, store)
    return model, files, names, targets


def plan_outputs(config: ApplyStripConfig, files: list[Path], runs: Path,
                 store: Path) -> tuple[list[str], list[Path]]:
    """The name of each file's output (``outputs/predicted/<name>``) and, with ``output``, where
    it is delivered: ``output`` itself for one input file (or a file in it when it is a
    folder), ``output/<name>`` for a folder of inputs.  Checked before anything runs, with
    the runs folder ``runs`` and the store ``store`` protected."""
    from scarce.tasks import strip

    source = resolve_path(config.input)
    names = [strip.output_name(p) for p in files]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"two input files would both be written as {twice[0]} (a name with "
                         "and without .gz?)", path=source, key="input")
    if config.output is None:
        return names, []
    out = resolve_path(config.output)
    protected = Protected.of(store, runs)
    if source.is_dir() or out.is_dir():
        if out.exists() and not out.is_dir():
            raise InputError("a folder of inputs is written to a folder, and this is a file",
                             path=out, key="output")
        check_output(out, Output("folder"), force=config.force, protected=protected)
        targets = [out / n for n in names] if source.is_dir() else [out / names[0]]
    else:
        check_output(out, Output("file", (".conllu",)), force=config.force, protected=protected)
        targets = [out]
    check_targets(targets, inputs=files, source=source, force=config.force,
                  protected=protected)
    return names, targets
