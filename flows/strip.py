"""StRip: partially supervised coreference by structured rule learning, as a Prefect flow.

Stoyanov and Cardie, "Partially Supervised Coreference Resolution for Opinion Summarization
through Structured Rule Learning" (EMNLP 2006)::

    preprocess (per file) -> for each variant: grow -> prune -> optimize -> evaluate
        -> write chains (per test file)

Each training step calls the same-named step method of
:class:`~scarce.algorithms.strip.ripper.StRip` (``StRip.fit`` is the loop over them); the variants
are
:data:`scarce.algorithms.strip.ripper.VARIANTS`, the learner's defaults its signature.  Options live
in
``configs/strip.yaml``.

Named outputs (``data/runs/<run-id>/outputs/``, listed in the manifest, compared by ``scarce
rerun``; see docs/strip.md): ``rules.parquet`` and ``rules.txt`` (every variant's rules with their
coverage of the labelled test pairs), ``model/`` (each variant's rule table and ``model.json``,
which the ``apply-strip`` flow reads) and ``predicted/<variant>/<file>.conllu`` (the test
documents with the predicted chains as CorefUD ``Entity=`` annotations).
"""

from __future__ import annotations

import re

import pandas as pd
from prefect import flow, get_run_logger
from prefect.utilities.annotations import unmapped

from scarce.algorithms.strip.ripper import rule_count
from scarce.flows import plots
from scarce.flows.apply import MODEL_DIR, MODEL_JSON, model_document
from scarce.flows.claims import ONE_RUN
from scarce.flows.config import check_input_paths
from scarce.flows.paper_claims import chosen_here
from scarce.flows.published import STOYANOV_MPQA
from scarce.flows.run_names import namer
from scarce.flows.runtime import RunContext, RunOptions, markdown_table
from scarce.flows.strip_config import SourceConfig, StripConfig, Variant
from scarce.tasks import strip

# The config schema lives in flows.strip_config (a command checks a config without importing
# this flow); its names are read here too.
__all__ = ["SourceConfig", "StripConfig", "Variant", "strip_flow"]

PUBLISHED_MPQA = STOYANOV_MPQA


@flow(name="strip", flow_run_name=namer("strip"))
def strip_flow(config: StripConfig, options: RunOptions | None = None) -> dict:
    """preprocess -> grow -> prune -> optimize (per variant and loss ratio) -> select the loss
    ratio on dev -> evaluate on test -> write chains, then the artifacts and named outputs."""
    check_input_paths(config)  # a missing input refused before any step (a rerun, a grid point)
    ctx = RunContext.open("strip", config, options)
    documents, data = preprocess(ctx, config)
    trained = train_variants(ctx, config, [d["pairs"] for d in data["train"]])
    if config.dev_splits:
        chosen = ctx.stage("select-loss-ratio", select_loss_ratios, ctx, config, data["dev"],
                           trained)
    else:
        chosen = dict.fromkeys(config.variants, config.loss_ratio)
    rules = {v: trained[v, r]["rules"] for v, r in chosen.items()}
    result = ctx.run(
        strip.evaluate,
        test_pairs=[d["pairs"] for d in data["test"]],
        test_mentions=[d["mentions"] for d in data["test"]],
        rules=rules,
        timings={v: trained[v, r]["timings"] for v, r in chosen.items()},
        dataset=f"{config.dataset}-{'+'.join(config.test_splits)}",
        loss_ratios=chosen,
    )
    test_files = list(documents.loc[documents["role"] == "test", "file"])
    predicted = ctx.map(strip.write_predicted, path=test_files,
                        clusters=unmapped(result["clusters"]))
    publish(ctx, config, rules, result, chosen)
    name_outputs(ctx, config, rules, result, data, dict(zip(test_files, predicted, strict=True)),
                 chosen)
    return ctx.finish(result["metrics"], headline=strip.headline(ctx.read(result["metrics"])))


def train_variants(ctx: RunContext, config: StripConfig, train: list[str]) -> dict:
    """grow -> prune -> optimize for every variant at every loss ratio: ``{(variant, ratio):
    {"rules": ref, "timings": [refs]}}``.  The steps read the training files and prepare a
    model's problem once between them (``tasks.strip.training._prepare``), dropped at the end."""
    ratios = config.ratios()
    progress = ctx.artifacts.progress(
        "training", 3 * len(config.variants) * len(ratios),
        f"grow, prune, optimize for {len(config.variants)} variants x {len(ratios)} loss ratios")
    trained = {}
    try:
        for v in config.variants:
            for ratio in ratios:
                learn = dict(train=train, variant=v, loss_ratio=ratio,
                             max_thresholds=config.max_thresholds)
                grown = ctx.run(strip.grow, dl_surplus=config.dl_surplus, seed=config.seed,
                                **learn)
                progress.advance()
                pruned = ctx.run(strip.prune, rules=grown["rules"], **learn)
                progress.advance()
                optimized = ctx.run(strip.optimize, rules=pruned["rules"], rng=grown["rng"],
                                    dl_surplus=config.dl_surplus, k_optimize=config.k_optimize,
                                    **learn)
                progress.advance()
                trained[v, ratio] = {"rules": optimized["rules"], "timings": [
                    grown["timings"], pruned["timings"], optimized["timings"]]}
    finally:  # the training pairs and problem the steps kept between them
        strip.release_training_pairs()
    return trained


def select_loss_ratios(ctx: RunContext, config: StripConfig, dev: list[dict],
                       trained: dict) -> dict[str, float]:
    """Score every trained model on the dev documents and keep, per variant, the best loss
    ratio (``strip.choose_loss_ratio``); the table is an artifact of the run."""
    names = {f"{v}@{r:g}": (v, r) for v, r in trained}
    scored = ctx.run(
        strip.evaluate,
        test_pairs=[d["pairs"] for d in dev],
        test_mentions=[d["mentions"] for d in dev],
        rules={name: trained[key]["rules"] for name, key in names.items()},
        timings={name: trained[key]["timings"] for name, key in names.items()},
        dataset=f"{config.dataset}-{'+'.join(config.dev_splits)}",
        loss_ratios={name: r for name, (_, r) in names.items()},
    )
    selection = ctx.run(strip.select_loss_ratio, scores=scored["scores"],
                        ratios={name: [v, r] for name, (v, r) in names.items()},
                        select_by=config.select_by)
    table = ctx.read(selection)
    ctx.artifacts.table("loss-ratio-selection", selection,
                         f"Dev F1 of every variant at every loss ratio "
                         f"({'+'.join(config.dev_splits)} documents); chosen by {config.select_by}")
    best = table[table["chosen"]]
    measure = {"b3": "B³ F1", "conll": "CoNLL F1"}[config.select_by]
    chosen = {}
    for v in config.variants:
        row = best.loc[best["variant"] == v].iloc[0]
        chosen[v] = float(row["loss_ratio"])
        ctx.record.decide(f"loss ratio of {v}", chosen[v],
                          f"the best {measure} on {'+'.join(config.dev_splits)} of ratios "
                          f"{', '.join(f'{r:g}' for r in config.loss_ratios)}: dev B³ F1 "
                          f"{row['b3_f']:.4f}, pairwise F1 {row['pairwise_f']:.4f}")
    return chosen


def preprocess_options(config: StripConfig) -> dict:
    """The parameters of the ``preprocess`` step besides the file; ``model.json`` records them
    so that apply-strip builds the pairs of new documents as this run did."""
    src = config.sources
    drawn = src.kind == "fraction"  # the seed and fraction key the step only when they are used
    return dict(
        window=config.window,
        max_sentence_distance=config.max_sentence_distance,
        source_kind=src.kind,
        etypes=src.etypes,
        fraction=src.fraction if drawn else None,
        seed=config.seed if drawn else None,
    )


def preprocess(ctx: RunContext, config: StripConfig
               ) -> tuple[pd.DataFrame, dict[str, list[dict[str, str]]]]:
    """One ``preprocess`` step per CoNLL-U file, per role (``train``, ``test``).

    Returns the document table (:func:`scarce.tasks.strip.select_documents`) and, per role, the refs
    of its files' steps.

    The splits file is read once; the document table is stored after every document has been
    read, so that a malformed CoNLL-U file leaves nothing in the store (the training files are
    read, and fail, before the test files are submitted).
    """
    splits_file = ctx.path(config.splits_file)
    roles = {"train": config.train_splits, "dev": config.dev_splits, "test": config.test_splits}
    roles = {role: names for role, names in roles.items() if names}
    documents = strip.select_documents(splits_file, ctx.path(config.data_dir), roles)
    prep = preprocess_options(config)
    data = {
        role: ctx.gather([ctx.submit(strip.preprocess, path=p, **prep) for p in part["file"]])
        for role, part in documents.groupby("role", sort=False)
    }
    ctx.run(strip.record_documents, splits_file=splits_file,
            documents=documents.assign(file=[p.name for p in documents["file"]]).to_dict("records"))
    return documents, data


def ratio_text(chosen: dict[str, float], config: StripConfig) -> str:
    """``loss ratio 1`` or, chosen on dev, ``loss ratios chosen on dev: ripper 1, ...``."""
    if not config.dev_splits:
        return f"loss ratio {config.loss_ratio:g}"
    return "loss ratios chosen on dev: " + ", ".join(f"{v} {r:g}" for v, r in chosen.items())


def claims_line(scores: pd.DataFrame, config: StripConfig) -> str | None:
    """One line: the margins of each StRip variant over RIPPER in B³ and pairwise F1 over the
    sources, the paper's claims in this run.  One run has no seed spread, so the line judges
    none of them (the rule of ``scarce claims``, :func:`scarce.flows.claims.verdict`, says ``holds``
    only beyond it) and names where they are judged over seeds; it says where the loss ratios
    were chosen on this corpus (:func:`scarce.flows.paper_claims.chosen_here`)."""
    wide = scores.set_index("method")
    if "ripper" not in wide.index:
        return None
    base, parts = wide.loc["ripper"], []
    claims = {"strip-labeled": "StRip beats RIPPER on the labelled pairs",
              "strip-partial": "StRip with partial supervision beats RIPPER"}
    for v, claim in claims.items():
        if v in wide.index:
            margins = [(name, wide.loc[v, f"{m}_f"] - base[f"{m}_f"])
                       for name, m in (("B³", "b3"), ("pairwise", "pairwise"))]
            parts.append(f"{claim}: " + ", ".join(f"{name} {d:+.3f}" for name, d in margins))
    if not parts:
        return None
    note = chosen_here("strip", config.model_dump(mode="json"))
    return (f"The paper's claims in this run, margins over RIPPER{f' ({note})' if note else ''}: "
            + "; ".join(parts) + f". Not judged: {ONE_RUN} has no seed spread; `scarce claims` "
            "judges them over seeds on an experiment (`scarce run experiment "
            "strip-loss-ratio`).")


def publish(ctx: RunContext, config: StripConfig, rules: dict[str, str], result: dict,
            chosen: dict[str, float]) -> None:
    """The run's artifacts: rules, scores, timings, comparison and rule-coverage plots, summary."""
    scores = ctx.read(result["scores"])
    ctx.artifacts.markdown(
        "rules",
        rules_markdown(
            {v: ctx.read(r) for v, r in rules.items()},
            f"# StRip rules ({config.dataset}, window {config.window})\n\n"
            f"{ratio_text(chosen, config)}\n\n" + markdown_table(scores),
        ),
        "The rules each method learned, one antecedent per line",
    )
    ctx.artifacts.table("scores", result["scores"], "F1 over the source mentions per method")
    ctx.artifacts.table("training-time", result["timings"], "Seconds per method and phase")
    ctx.artifacts.image(
        "comparison",
        # only the rule counts of the (volatile) timings table are drawn: the seconds, which
        # vary between runs, stay out of the plot's memo key
        ctx.artifacts.plot(strip_plot, scores,
                           ctx.read(result["timings"])[["method", "phase", "n_rules"]],
                           config, chosen),
        "F1 over the source mentions per method, and rules after each phase",
    )
    coverage = ctx.read(result["coverage"])
    ctx.artifacts.table("rule-coverage", coverage,
                         "Per rule: labelled test pairs it fires on, and those it brings into a "
                         "chain after the closure")
    ctx.artifacts.image(
        "rule-coverage-plot",
        ctx.artifacts.plot(coverage_plot,
                           coverage[["method", "rule_id", "rule", "new_pos", "new_neg"]], config),
        "Labelled test pairs each rule newly covers after single-link clustering",
    )
    claims = claims_line(scores, config)
    if claims:  # the margins in the terminal too
        get_run_logger().info(claims)
    ctx.artifacts.markdown(
        "summary",
        summary_markdown(scores, config, chosen),
        "RIPPER against StRip in this run; the paper's MPQA figures are not comparable",
    )


def rules_markdown(rule_tables: dict[str, pd.DataFrame], header: str = "") -> str:
    """The learned rule sets as markdown lists that wrap at any width.

    Parameters
    ----------
    rule_tables : dict of str to DataFrame
        Per method, its rule table (:data:`scarce.algorithms.strip.ripper.RULE_COLUMNS`); rows with
        ``pruned`` set are not part of a rule and are left out.
    header : str
        Markdown put first (a title, the scores table).

    Returns
    -------
    str
        Per method a section ``## <method>: <n> rules`` listing each rule as
        ``- **R<id>**: coreferent if`` with its antecedents as a nested list, one per line,
        then ``- otherwise: not coreferent`` (``- every pair: not coreferent`` without rules).
        A fenced block would keep a rule of many antecedents on one line, which the UI cuts
        at the right edge.
    """
    lines = [header, ""] if header else []
    for method, table in rule_tables.items():
        kept = table[~table["pruned"].astype(bool)] if "pruned" in table.columns else table
        rules = list(kept.sort_values(["rule_id", "antecedent_index"]).groupby("rule_id"))
        lines += [f"## {method}: {len(rules)} rule{'' if len(rules) == 1 else 's'}", ""]
        for rule_id, rule in rules:
            tests = [_code(f"{f} {o} {v}")
                     for f, o, v in zip(rule["feature"], rule["op"], rule["value"], strict=True)]
            if len(tests) == 1:
                lines.append(f"- **R{rule_id}**: coreferent if {tests[0]}")
            else:
                lines += [f"- **R{rule_id}**: coreferent if all of", *(f"  - {t}" for t in tests)]
        lines += ["- otherwise: not coreferent" if rules else "- every pair: not coreferent", ""]
    return "\n".join(lines).rstrip("\n")


def _code(text: str) -> str:
    """``text`` as a markdown code span (a fence longer than any run of backticks in it)."""
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def name_outputs(ctx: RunContext, config: StripConfig, rules: dict[str, str], result: dict,
                 data: dict, predicted: dict, chosen: dict[str, float]) -> None:
    """The run's named outputs: the rules, the model apply-strip reads, the predicted chains.

    ``rules.parquet`` is ``evaluate``'s coverage table and ``model/rules-<variant>.parquet`` the
    rule table of ``optimize`` (hard links of the store entries); ``model/model.json`` records
    what ``preprocess`` needs to build the pairs of new documents as in training;
    ``predicted/<variant>/<file>.conllu`` holds each test file with a variant's chains.
    """
    ctx.record.name_output("rules.parquet", result["coverage"])
    ctx.record.write_output("rules.txt", strip.rules_text(
        ctx.read(result["coverage"]), config.variants,
        f"# StRip rules ({config.dataset}, window {config.window}, "
        f"{ratio_text(chosen, config)}, seed {config.seed}); coverage: the labelled pairs of the "
        f"{'+'.join(config.test_splits)} documents"))
    variants = []
    for v in config.variants:
        ctx.record.name_output(f"{MODEL_DIR}/rules-{v}.parquet", rules[v])
        variants.append({"name": v, "rules": f"rules-{v}.parquet",
                         "n_rules": rule_count(ctx.read(rules[v])), "loss_ratio": chosen[v]})
    ctx.record.write_output(f"{MODEL_DIR}/{MODEL_JSON}", model_document(
        "strip", strip.MODEL_VERSION,
        variants=variants,
        preprocess=preprocess_options(config),
        features=strip.feature_kinds(ctx.read(data["train"][0]["pairs"])),
        learner={"k_optimize": config.k_optimize, "dl_surplus": config.dl_surplus,
                 "max_thresholds": config.max_thresholds, "seed": config.seed,
                 "loss_ratio": {"dev_splits": config.dev_splits, "tried": config.ratios(),
                                "select_by": config.select_by if config.dev_splits else None}},
        trained_on={"dataset": config.dataset, "train_splits": config.train_splits,
                    "files": len(data["train"])},
    ))
    for path, ref in predicted.items():
        table = ctx.read(ref)
        for method, text in zip(table["method"], table["conllu"], strict=True):
            ctx.record.write_output(f"predicted/{method}/{strip.output_name(path)}", text)


def strip_plot(scores: pd.DataFrame, phases: pd.DataFrame, config: StripConfig,
               chosen: dict[str, float]) -> bytes:
    return plots.strip_comparison(
        scores,
        phases,
        title=f"{config.dataset} {'+'.join(config.test_splits)}: window {config.window}, "
        f"{ratio_text(chosen, config)}",
    )


def coverage_plot(coverage: pd.DataFrame, config: StripConfig) -> bytes:
    return plots.strip_rule_coverage(
        coverage,
        config.variants,
        title=f"{config.dataset} {'+'.join(config.test_splits)}: what each rule adds to the "
        "chains",
    )


def summary_markdown(scores: pd.DataFrame, config: StripConfig,
                     chosen: dict[str, float]) -> str:
    """RIPPER and the StRip variants side by side, and why the paper's figures are apart."""
    measures = [c for c in plots.SCORE_LABELS if c in scores.columns]
    table = scores[["method", *measures, "n_rules"]].rename(
        columns={c: f"{plots.SCORE_LABELS[c]} F1" for c in measures}
    )
    lines = [
        f"# StRip on {config.dataset} ({'+'.join(config.test_splits)})",
        "",
        f"window {config.window}, {ratio_text(chosen, config)}, sources: "
        + (
            ", ".join(config.sources.etypes)
            if config.sources.kind == "etype"
            else f"{config.sources.fraction:.0%} of the entities"
        )
        + f", seed {config.seed}. F1 over the source mentions:",
        "",
        markdown_table(table),
        "",
    ]
    claims = claims_line(scores, config)
    if claims:
        lines += [claims, ""]
    lines += [
        "| method | B³ F1 (%) | pairwise F1 (%) |",
        "| --- | --- | --- |",
        *(
            f"| {m} (Stoyanov and Cardie 2006, MPQA) | {b:.1f} | {pw:.1f} |"
            for m, (b, pw) in PUBLISHED_MPQA.items()
        ),
        "",
        "**The published figures are not comparable with this run.** They are on MPQA "
        "(opinion-holder sources in news, with the paper's own features and mention "
        "detection); this run is on GUM, with the CorefUD gold mentions, the feature set "
        "listed in `algorithms/strip/features.py` and the sources chosen above. Compare "
        "RIPPER with StRip within one run, not with the paper's numbers.",
    ]
    return "\n".join(lines)
