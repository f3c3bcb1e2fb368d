"""apply-strip: the rules a finished StRip run learned, on new CoNLL-U documents.

::

    load rules -> per file: preprocess -> apply rules -> write chains -> count and score chains

``preprocess`` is the training flow's own step, run with the settings the model records (window,
sentence limit, sources), so the pairs and features of a new document are built exactly as in
training (a document the training run read is a cache hit); ``apply rules`` fires the chosen
variant's rules on the pairs and clusters the positive ones by single link
(:func:`scarce.tasks.strip.chains`, the function the training run's ``evaluate`` scores);
``write chains`` writes the file's CoNLL-U with the chains as CorefUD ``Entity=``
annotations.  Nothing is learned. ``count chains`` records the counts of chains and, for the
files whose mentions carry gold chains (some entity id with two mentions or more,
:func:`scarce.tasks.strip.has_gold_chains`), the scores the training run's ``evaluate``
records (:func:`scarce.tasks.strip.chain_scores`); a file whose mentions are all singletons
has no gold and is counted only.

The mentions are those the input marks (its ``Entity=`` spans: gold mentions, or the mentions of
another system written in the same format); the input's entity ids are used only to score the
chains.  Mention detection is not part of this project.  Options: ``configs/apply-strip.yaml``;
the model format is in docs/strip.md.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.utilities.annotations import unmapped
from pydantic import Field

from scarce.flows.apply import ApplyConfig, input_files
from scarce.flows.config import resolve_path
from scarce.flows.model_strip import ModelVariant, open_strip_model
from scarce.flows.outputs import Output, Protected, check_output, check_targets, write_failed
from scarce.flows.run_names import namer
from scarce.flows.runtime import RunContext, RunOptions
from scarce.flows.strip import Variant
from scarce.tasks import strip
from scarce.tasks.errors import InputError
from scarce.tasks.store import atomic_write_bytes


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
