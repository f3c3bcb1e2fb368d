"""The ``apply-relations`` flow: the clusters a finished ``relations`` run discovered, for new
entity pairs.

read the model -> parse (the training flow's own step) -> assign each pair its nearest cluster
(the step that wrote the training run's ``assignments.parquet``) -> summarise.  Nothing is
learned: the vocabulary, idf, selected words and centroids are read from the training run's
``outputs/model/`` (format in docs/relations.md).  Every input file is parsed and assigned by
store steps keyed by the file's hash and the model's, so a folder applied again computes only
its new files.
"""

from __future__ import annotations

from prefect import flow

from scarce.flows.apply import export
from scarce.flows.apply_relations_config import SUFFIXES, ApplyRelationsConfig, prepare
from scarce.flows.run_names import namer
from scarce.flows.runtime import RunContext, RunOptions
from scarce.tasks import relations as rel

# The config schema and the checks before a run live in flows.apply_relations_config (a command
# checks an apply run without importing this flow); their names are read here too.
__all__ = ["SUFFIXES", "ApplyRelationsConfig", "apply_relations_flow", "prepare"]

@flow(name="apply-relations", flow_run_name=namer("apply-relations"))
def apply_relations_flow(config: ApplyRelationsConfig, options: RunOptions | None = None) -> dict:
    """Parse every input file as the training run parsed its data (every pair kept, gold
    labels when the file has them), give each pair the model's nearest cluster with its label
    words, and write the ``assignments.parquet`` of each file."""
    ctx = RunContext.open("apply-relations", config, options)
    meta, folder, source, files, names, output = prepare(config, ctx.run_dir.parent,
                                                         ctx.store.root)
    model = ctx.run(rel.read_model, **{p: folder / meta["files"][p] for p in rel.MODEL_PARTS})
    parsed = ctx.gather([ctx.submit(rel.parse, path=path, fmt=config.format, relation_types=None,
                                    include_other=True, directed=bool(meta["directed"]),
                                    source=path.name) for path in files])
    assigned = ctx.gather([ctx.submit(rel.assign_pairs, mentions=mentions, **model,
                                      contexts=meta["contexts"], params=meta["assign"])
                           for mentions in parsed])
    for name, ref in zip(names, assigned, strict=True):
        ctx.record.name_output(name, ref)
    summary = ctx.finish(ctx.run(rel.apply_metrics, assignments=assigned,
                                 dataset=config.name or source.name))
    if output is not None:
        export(ctx.store, assigned, names, output, ctx.run_dir)
    return summary
