"""Relation discovery: Chen, Ji, Tan and Niu, "Unsupervised Feature Selection for Relation
Extraction" (IJCNLP 2005), as a Prefect flow.

The flow function reads as the method's outline::

    parse -> feature-extract -> rank -> stability-search -> label -> evaluate
                                                              -> model -> assign

``stability-search`` is one task run holding its mapped units: the (k, prefix) candidates,
the choice of F_k, the reference clusterings, the (k, subsample) scores and the choice of k;
RLBaseline's search on all words is another (``rl-baseline-search``).  Every unit is a step
of :class:`~scarce.algorithms.relations.model.RelationDiscovery` run as its own cached task, so a
Dask task runner spreads them; the estimator's ``fit`` is the same loop in one process.

Every run names its results in ``outputs/`` (:func:`name_outputs`): ``assignments.parquet``,
``clusters.parquet``, ``features.parquet`` and ``model/``, which ``scarce apply`` reads
(``flows/apply_relations.py``; the format is in docs/relations.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from prefect import flow, unmapped

from scarce.algorithms.relations.model import RelationDiscovery, TooFewPairsError
from scarce.flows import plots
from scarce.flows.apply import MODEL_DIR, MODEL_JSON, model_document
from scarce.flows.config import check_input_paths
from scarce.flows.published import CHEN_ACE
from scarce.flows.relations_config import WINDOW_PATTERN, RelationsConfig
from scarce.flows.run_names import namer
from scarce.flows.runtime import RunContext, RunOptions, markdown_table
from scarce.tasks import relations as rel
from scarce.tasks.errors import InputError

# The config schema lives in flows.relations_config (a command checks a config without
# importing this flow); its names are read here too.
__all__ = ["WINDOW_PATTERN", "RelationsConfig", "relations_flow"]

PUBLISHED_ACE = CHEN_ACE  # ACE is LDC-licensed and not used here


@dataclass(frozen=True)
class Search:
    """What a stability search left in the store (refs) and what it chose."""

    choice: dict  # relations-choose: samples, curve, choice
    references: dict  # k -> refs of C_1..C_R
    k: int
    n_features: int
    subsets: dict | None = None  # relations-subsets: search, subsets (None on all words)


def stability_search(ctx: RunContext, model: RelationDiscovery, X, ranking, n_words: int):
    """The subset search over (k, prefix), F_k per k, then the stability step on F_k."""
    grid = model.candidate_units(n_words)
    progress = ctx.artifacts.progress(
        "stability-search", len(grid) + len(model.reference_units() + model.stability_units()),
        f"Stability search, {model.ranking} ranking: {len(grid)} (k, prefix) candidates, "
        "then the reference clusterings and the (k, subsample) units",
    )
    scores = ctx.map(rel.score_candidate, progress=progress, X=unmapped(X),
                     ranking=unmapped(ranking), k=[k for k, _ in grid],
                     n_features=[s for _, s in grid],
                     params=unmapped(model.step_params("score_candidate")))
    subsets = ctx.run(rel.choose_subsets, scores=scores,
                      params=model.step_params("choose_subsets"))
    table = ctx.read(subsets["subsets"])
    sizes = dict(zip(table["k"].astype(int), table["n_features"].astype(int), strict=True))
    return select_k(ctx, model, X, ranking, sizes, progress, subsets)


def rl_baseline_search(ctx: RunContext, model: RelationDiscovery, X, n_words: int):
    """RLBaseline: the stability step with every word for every k."""
    n = len(model.reference_units() + model.stability_units())
    progress = ctx.artifacts.progress("rl-baseline-search", n,
                                      "Stability search, RLBaseline (all words)")
    return select_k(ctx, model, X, None, dict.fromkeys(model.k_values(), n_words), progress)


def select_k(ctx, model, X, ranking, sizes: dict, progress, subsets=None) -> Search:
    """References (k, r), subsample scores (k, mu) and the choice of k on the columns ``sizes``
    (k -> prefix length of ``ranking``; every column when ``ranking`` is None)."""
    common = dict(X=unmapped(X), ranking=unmapped(ranking), all_features=ranking is None)
    refs, units = model.reference_units(), model.stability_units()
    labels = ctx.map(rel.cluster_reference, progress=progress, k=[k for k, _ in refs],
                     index=[r for _, r in refs], n_features=[sizes[k] for k, _ in refs],
                     params=unmapped(model.step_params("cluster_reference")), **common)
    references = {k: [] for k in sizes}
    for (k, _), ref in zip(refs, labels, strict=True):
        references[k].append(ref)
    samples = ctx.map(rel.score_subsample, progress=progress, k=[k for k, _ in units],
                      sample_index=[mu for _, mu in units], n_features=[sizes[k] for k, _ in units],
                      references=[references[k] for k, _ in units],
                      params=unmapped(model.step_params("score_subsample")), **common)
    chosen = ctx.run(rel.choose_k, samples=samples, all_features=ranking is None,
                     params=model.step_params("choose_k"))
    choice = ctx.read(chosen["choice"]).iloc[0]
    words = "all words" if ranking is None else f"the first {int(choice['n_features'])} words"
    ctx.record.decide("k" if ranking is not None else "k (RLBaseline, all words)",
                      int(choice["k"]),
                      f"the largest M_norm, {float(choice['m_norm']):.4f}, of k in "
                      f"{min(sizes)}..{max(sizes)}; clustered on {words}")
    return Search(chosen, references, int(choice["k"]), int(choice["n_features"]), subsets)


@flow(name="relations", flow_run_name=namer("relations"))
def relations_flow(config: RelationsConfig, options: RunOptions | None = None) -> dict:
    check_input_paths(config)  # a missing input refused before any step (a rerun, a grid point)
    cfg, model = config, config.estimator()
    ctx = RunContext.open("relations", cfg, options)
    # One file is the whole data: its parse checks that its pairs suffice for the method
    # before storing them (several files are checked together, once combined).
    enough_for = model.step_params("check_n_pairs") if len(cfg.data) == 1 else None
    parts = [ctx.run(rel.parse, path=ctx.path(p), fmt=cfg.format, relation_types=cfg.relation_types,
                     include_other=cfg.include_other, directed=cfg.directed,
                     source=ctx.path(p).name, enough_for=enough_for) for p in cfg.data]
    data = ctx.run(rel.combine, parts=parts, max_pairs=cfg.max_pairs, seed=cfg.seed)
    n_pairs = ctx.store.shape(data["mentions"])[0]
    try:
        model.check_n_pairs(n_pairs)
    except TooFewPairsError as exc:
        raise InputError(str(exc), key=exc.param) from None
    classes = ctx.read(data["classes"])
    with_baselines, k_true = cfg.baselines and int(classes["count"].sum()) == n_pairs, len(classes)
    if with_baselines:  # O(N^2) and independent of the rest: runs beside the search
        hasegawa = ctx.submit(rel.hasegawa, mentions=data["mentions"], k=k_true,
                              window=cfg.hasegawa_window, lowercase=cfg.lowercase)
    feats = ctx.run(rel.extract_features, mentions=data["mentions"], window=cfg.window,
                    weighting=cfg.weighting, position_tags=cfg.position_tags,
                    lowercase=cfg.lowercase, min_df=cfg.min_df)
    X, vocab, n_words = feats["X"], feats["vocabulary"], len(ctx.read(feats["vocabulary"]))
    ranking = ctx.run(rel.rank_features, X=X, vocabulary=vocab, params=model.step_params("rank"))
    search = ctx.stage("stability-search", stability_search, ctx, model, X, ranking, n_words)
    labelled = ctx.run(rel.label_clusters, X=X, vocabulary=vocab, mentions=data["mentions"],
                       labels=search.references[search.k][0], params=model.step_params("label"))
    baselines, k_used, rl = {}, {}, None
    if with_baselines:
        rl = ctx.stage("rl-baseline-search", rl_baseline_search, ctx, model, X, n_words)
        kmeans = ctx.run(rel.cluster_reference, X=X, ranking=None, k=k_true, n_features=n_words,
                         all_features=True, index=0, params=model.step_params("cluster_reference"))
        (hasegawa_labels,) = ctx.gather([hasegawa])
        baselines = {"rl-baseline": rl.references[rl.k][0], "kmeans-true-k": kmeans,
                     "hasegawa-true-k": hasegawa_labels}
        k_used = {"rl-baseline": rl.k, "kmeans-true-k": k_true, "hasegawa-true-k": k_true}
    metrics = ctx.run(rel.evaluate, clusters=labelled["clusters"], baselines=baselines,
                      dataset=cfg.dataset, method=cfg.ranking, k_chosen=search.k,
                      k_baselines=k_used)
    built = ctx.run(rel.build_model, X=X, ranking=ranking, labels=search.references[search.k][0],
                    words=labelled["words"], k=search.k, n_features=search.n_features,
                    params=model.step_params("centroids"))
    contexts = context_options(cfg)
    assigned = ctx.run(rel.assign_pairs, mentions=data["mentions"], vocabulary=vocab, **built,
                       contexts=contexts, params=model.step_params("assign"))
    examples = ctx.run(rel.cluster_examples, clusters=built["clusters"], assigned=assigned,
                       n_examples=rel.N_EXAMPLES)
    publish(ctx, cfg, search, rl, labelled, metrics, examples)
    name_outputs(ctx, vocab, built, assigned, examples, model_document(
        "relations", rel.MODEL_VERSION, dataset=cfg.dataset, directed=cfg.directed,
        n_pairs=n_pairs, vocabulary_size=n_words, k=search.k, n_features=search.n_features,
        ranking=cfg.ranking, contexts=contexts, assign=model.step_params("assign"),
        params=model.get_params(),
        files={part: f"{part}.parquet" for part in rel.MODEL_PARTS}))
    return ctx.finish(metrics)


def context_options(cfg: RelationsConfig) -> dict:
    """How the run made its contexts, as its model records them for ``apply-relations``."""
    return {"window": cfg.window, "weighting": cfg.weighting, "position_tags": cfg.position_tags,
            "lowercase": cfg.lowercase, "drop_punctuation": rel.DROP_PUNCTUATION,
            "min_df": cfg.min_df}


def name_outputs(ctx: RunContext, vocabulary: str, built: dict, assigned: str, examples: str,
                 model_json: str) -> None:
    """The run's named outputs: ``assignments.parquet`` (each pair's cluster),
    ``clusters.parquet`` (the model's clusters with the pairs nearest each centroid) and
    ``features.parquet``, and ``model/`` (the vocabulary, the selected features, the
    centroids, the clusters and ``model.json``); all but ``model.json`` are store entries."""
    ctx.record.name_output("assignments.parquet", assigned)
    ctx.record.name_output("clusters.parquet", examples)
    ctx.record.name_output("features.parquet", built["features"])
    for part, ref in {"vocabulary": vocabulary, **built}.items():
        ctx.record.name_output(f"{MODEL_DIR}/{part}.parquet", ref)
    ctx.record.write_output(f"{MODEL_DIR}/{MODEL_JSON}", model_json)


def publish(ctx: RunContext, cfg: RelationsConfig, search: Search, rl: Search | None,
            labelled: dict, metrics: str, examples: str) -> None:
    """The run's artifacts: the stability curve (table and plot), the DCM labels, the summary."""
    k, n = search.k, search.n_features
    curve = ctx.read(search.choice["curve"])
    rl_curve = None if rl is None else ctx.read(rl.choice["curve"])
    ctx.artifacts.markdown("stability", rel.stability_markdown(curve, k, rl_curve),
                           f"M_norm over k; chosen k={k}, |F|={n}")
    ctx.artifacts.table("labels", pd.DataFrame(rel.label_rows(ctx.read(labelled["words"]),
                                                              ctx.read(examples))),
                         f"DCM labels of the {k} clusters, and the pairs nearest each centroid")
    title = (f"Stability over k: {cfg.dataset}, window {cfg.window}, {cfg.ranking} ranking, "
             f"seed {cfg.seed}")
    png = ctx.artifacts.plot(plots.relations_stability, curve, chosen_k=k,
                             subsets=ctx.read(search.subsets["subsets"]),
                             baseline_curve=rl_curve, title=title)
    ctx.artifacts.image("stability-plot", png,
                      f"M_norm over k (chosen k={k}, |F|={n}) and the criterion of F_k")
    ctx.artifacts.markdown("summary", summary_markdown(ctx.read(metrics), cfg, k, n),
                           "The run beside Chen et al. (2005); not like-for-like (ACE against "
                           "this data)")


def _pct(values: tuple[float, ...]) -> str:
    return " / ".join(f"{v:.1f}" for v in values)


def summary_markdown(metrics: pd.DataFrame, cfg: RelationsConfig, k: int, n_features: int) -> str:
    """The run's accuracy, ARI and V per method next to the paper's ACE accuracies."""
    lines = [
        f"# Relation discovery on {cfg.dataset}",
        "",
        f"window {cfg.window}, {cfg.ranking} ranking, k in [{cfg.k_low}, {cfg.k_high}], "
        f"seed {cfg.seed}: chosen k = {k} with {n_features} words.",
        "",
    ]
    wide = metrics.pivot_table(index="method", columns="metric", values="value", sort=False)
    if "accuracy" in wide.columns:
        k_used = wide.get("k_chosen", pd.Series(dtype=float)).reindex(wide.index)
        if "k_used" in wide.columns:
            k_used = k_used.fillna(wide["k_used"])
        table = pd.DataFrame({
            "method": wide.index,
            "accuracy": wide["accuracy"].map("{:.3f}".format).to_numpy(),
            "published accuracy on ACE (%)": [
                " / ".join(f"{v:.1f}" for v in PUBLISHED_ACE[m]) if m in PUBLISHED_ACE else ""
                for m in wide.index],
            "ARI": wide["ari"].map("{:.3f}".format).to_numpy(),
            "V-measure": wide["v_measure"].map("{:.3f}".format).to_numpy(),
            "k": ["" if pd.isna(v) else str(int(v)) for v in k_used],
        })
        if "k_true" in wide.columns:
            lines[-2] += f" The true number of types is {int(wide['k_true'].dropna().iloc[0])}."
        lines.append(markdown_table(table))
    else:
        lines.append("No gold relation types in the input: only the chosen k is reported.")
    lines += [
        "",
        "**Not a like-for-like comparison.** Chen, Ji, Tan and Niu (2005) report accuracy on "
        f"ACE (three domains): entropy ranking {_pct(CHEN_ACE['entropy'])} % against "
        f"Hasegawa et al. (true k) {_pct(CHEN_ACE['hasegawa-true-k'])} %, with the chosen k "
        "within 1 to 3 of the true number of types. ACE is LDC-licensed; this run uses other "
        "data (SemEval-2010 Task 8 by default), other relation types, entity annotations and "
        "pair counts. Only the ordering of the methods and the distance of the chosen k from "
        "the true k can be compared, not the numbers.",
    ]
    return "\n".join(lines)
