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

from scarce.flows.apply_strip_config import ApplyStripConfig, plan_outputs, prepare
from scarce.flows.outputs import write_failed
from scarce.flows.run_names import namer
from scarce.flows.runtime import RunContext, RunOptions
from scarce.tasks import strip
from scarce.tasks.store.atomic import atomic_write_bytes, synced_folders

# The config schema and the checks before a run live in flows.apply_strip_config (a command
# checks an apply run without importing this flow); their names are read here too.
__all__ = ["ApplyStripConfig", "apply_strip_flow", "plan_outputs", "prepare"]


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
        write_outputs(targets, texts if targets else [])  # --output
    except OSError as exc:
        raise write_failed(exc, Path(config.output), "output",
                           f"{ctx.run_dir / 'outputs'}") from None
    return summary


def write_outputs(targets: list[Path], texts: list[str]) -> None:
    """Each predicted CoNLL-U text to its ``--output`` file, atomically, the missing folders
    created; each folder fsync-ed once, after its last file, rather than once per file."""
    with synced_folders() as syncs:
        for target, text in zip(targets, texts, strict=True):
            atomic_write_bytes(target, text.encode("utf-8"), syncs)
