"""apply-strip: the rules a finished StRip run learned, on new CoNLL-U documents.

::

    load rules -> per file: preprocess -> apply rules -> write chains -> count and score chains

``preprocess`` is the training flow's own step, run with the settings the model records (window,
sentence limit, sources), so the pairs and features of a new document are built exactly as in
training (a document the training run read is a cache hit); ``apply rules`` fires the chosen
variant's rules on the pairs and clusters the positive ones by single link
(:func:`tasks.strip.chains`, the function the training run's ``evaluate`` scores); ``write chains``
writes the file's CoNLL-U with the chains as CorefUD ``Entity=`` annotations.  Nothing is learned.
``count chains`` records the counts of chains and, for the files whose mentions carry gold chains
(some entity id with two mentions or more, :func:`tasks.strip.has_gold_chains`), the scores the
training run's ``evaluate`` records (:func:`tasks.strip.chain_scores`); a file whose mentions are
all singletons has no gold and is counted only.

The mentions are those the input marks (its ``Entity=`` spans: gold mentions, or the mentions of
another system written in the same format); the input's entity ids are used only to score the
chains.  Mention detection is not part of this project.  Options: ``configs/apply-strip.yaml``;
the model format is in docs/strip.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from prefect import flow
from prefect.utilities.annotations import unmapped
from pydantic import BaseModel, ConfigDict, Field

from scarce.flows.apply import (
    MODEL_JSON,
    ApplyConfig,
    input_files,
    open_model,
    resolve_model_run,
)
from scarce.flows.config import resolve_path, validate_config
from scarce.flows.outputs import Output, Protected, check_output, check_targets, write_failed
from scarce.flows.run_names import namer
from scarce.flows.runtime import RunContext, RunOptions
from scarce.flows.strip import Variant
from scarce.tasks import strip
from scarce.tasks.errors import InputError
from scarce.tasks.store import atomic_write_bytes

PAPER_VARIANT = "strip-partial"  # the paper's method: applied when the run trained it


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
    model = open_strip_model(config.model_run, config.variant, runs, announce=announce)
    files = input_files(resolve_path(config.input), strip.DOC_SUFFIXES, config.allow_empty)
    names, targets = plan_outputs(config, files, runs, store)
    return model, files, names, targets


@flow(name="apply-strip", flow_run_name=namer("apply-strip"))
def apply_strip_flow(config: ApplyStripConfig, options: RunOptions | None = None) -> dict:
    """load rules -> preprocess -> apply rules -> write chains (per file) -> count chains and,
    where the input has gold chains, score them."""
    ctx = RunContext.open("apply-strip", config, options)
    model, files, names, targets = prepare(config, ctx.run_dir.parent, ctx.store.root)
    rules = ctx.run(strip.load_rules, path=model.rules)
    data = ctx.gather([ctx.submit(strip.preprocess, path=p, **model.preprocess) for p in files])
    clusters = ctx.map(strip.apply_rules, path=files, pairs=[d["pairs"] for d in data],
                       mentions=[d["mentions"] for d in data], rules=unmapped(rules),
                       method=model.variant, kinds=unmapped(model.kinds))
    written = ctx.map(strip.write_predicted, path=files, clusters=clusters)
    metrics = ctx.run(strip.count_chains, clusters=clusters, mentions=[d["mentions"] for d in data],
                      dataset=Path(config.input).name)
    texts = [ctx.read(ref)["conllu"].iloc[0] for ref in written]
    for name, text in zip(names, texts, strict=True):
        ctx.record.write_output(f"predicted/{name}", text)
    summary = ctx.finish(metrics)
    try:
        for target, text in zip(targets, texts if targets else [], strict=True):  # --output
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(target, text.encode("utf-8"))
    except OSError as exc:
        raise write_failed(exc, Path(config.output), "output",
                           f"{ctx.run_dir / 'outputs'}") from None
    return summary


# ----------------------------------------------------------------------------- the model
class _Variant(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Variant
    rules: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*\.parquet$")
    n_rules: int = Field(ge=0)
    loss_ratio: float | None = Field(None, gt=0)  # the ratio the rules were trained with


class _Preprocess(BaseModel):
    model_config = ConfigDict(extra="forbid")
    window: int = Field(ge=1)
    max_sentence_distance: int | None = Field(ge=0)
    source_kind: Literal["etype", "fraction"]
    etypes: list[str]
    fraction: float | None = Field(gt=0, le=1)
    seed: int | None = Field(ge=0)


class _ModelJson(BaseModel):
    """The parts of ``model.json`` apply-strip reads (the others describe the training)."""

    model_config = ConfigDict(extra="ignore")
    variants: list[_Variant] = Field(min_length=1)
    preprocess: _Preprocess
    features: dict[str, Literal["nominal", "numeric"]] = Field(min_length=1)


@dataclass(frozen=True)
class ModelVariant:
    """What apply-strip needs of a model: a variant, its rule file, how to build the pairs
    (and the variants the run trained)."""

    variant: str
    rules: Path
    preprocess: dict
    kinds: dict[str, str]
    trained: tuple[str, ...] = ()


def open_strip_model(model_run: str, variant: str | None, runs_root: Path,
                     announce: bool = True) -> ModelVariant:
    """The model of the StRip run ``model_run`` (see :func:`flows.apply.resolve_model_run`),
    with the rules of ``variant`` (default: :data:`PAPER_VARIANT` when trained, else the run's
    first variant).

    Raises
    ------
    InputError
        No such run, a run of another flow, no model, an older format version, a malformed
        ``model.json`` (naming the key), a variant the run did not train, a missing rule file.
    """
    run_dir = resolve_model_run(model_run, "strip", runs_root)
    meta, folder = open_model(run_dir, "strip", strip.MODEL_VERSION, announce=announce)
    m = validate_config(meta, _ModelJson, folder / MODEL_JSON)
    trained = [v.name for v in m.variants]
    chosen = variant or (PAPER_VARIANT if PAPER_VARIANT in trained else trained[0])
    if chosen not in trained:
        raise InputError(f"run {run_dir.name} did not train {chosen} (it trained "
                         f"{', '.join(trained)})", key="variant")
    rules = folder / m.variants[trained.index(chosen)].rules
    if not rules.is_file():
        raise InputError("rule table of the model is missing", path=rules)
    return ModelVariant(chosen, rules, m.preprocess.model_dump(), dict(m.features),
                        tuple(trained))


def plan_outputs(config: ApplyStripConfig, files: list[Path], runs: Path,
                 store: Path) -> tuple[list[str], list[Path]]:
    """The name of each file's output (``outputs/predicted/<name>``) and, with ``output``, where
    it is delivered: ``output`` itself for one input file (or a file in it when it is a
    folder), ``output/<name>`` for a folder of inputs.  Checked before anything runs, with
    the runs folder ``runs`` and the store ``store`` protected."""
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
