"""Relation discovery: Chen, Ji, Tan and Niu, "Unsupervised Feature Selection for Relation
Extraction" (IJCNLP 2005), as a Prefect flow.

parse -> extract_features -> rank_features -> subset search over (k, prefix) ->
stability over (k, subsample) -> choose k -> label_clusters -> evaluate.
The two searches are ``.map``-ped units, so a Dask task runner spreads them.
"""

from __future__ import annotations

import json
from typing import Literal

import pandas as pd
from prefect import flow, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from pydantic import Field, field_validator, model_validator

from flows import plots
from flows.config import FlowConfig
from flows.published import CHEN_ACE
from flows.runtime import RunContext, RunOptions, markdown_table
from tasks import relations as rel
from tasks.errors import InputError

WINDOW_PATTERN = r"^\d+-\d+-\d+$"

PUBLISHED_ACE = CHEN_ACE  # ACE is LDC-licensed and not used here


class RelationsConfig(FlowConfig):
    """Options of the relation discovery flow (``configs/relations.yaml``)."""

    dataset: str = Field("semeval-9", description="Dataset name in the metrics table.")
    data: list[str] = Field(
        ["data/relations/semeval2010_task8/TRAIN_FILE.TXT"],
        min_length=1,
        description="Input files, relative to the project root: SemEval-2010 Task 8 files "
        "or JSON Lines (tokens, head, tail, optional label); concatenated.",
    )
    format: Literal["auto", "semeval", "jsonl"] = Field(
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

    window: str = Field(
        "0-10-0",
        pattern=WINDOW_PATTERN,
        description="Context window pre-mid-post (the paper: 0-10-0 best).",
    )
    weighting: Literal["tfidf", "binary"] = Field("tfidf", description="Context weights.")
    position_tags: bool = Field(True, description="Tag words with pre:/mid:/post:.")
    lowercase: bool = Field(True, description="Lowercase context words.")
    min_df: int = Field(1, ge=1, description="Keep words in at least this many contexts.")

    ranking: Literal["entropy", "frequency", "chi2"] = Field(
        "entropy",
        description="Word ranking: entropy (Dash et al.), or the ablations "
        "frequency and chi2 (k-means pseudo-labels).",
    )
    entropy_alpha: Literal["exact", "fixed"] = Field(
        "exact",
        description="alpha recomputed per removal (exact) or held at the full-data "
        "value (an approximation).",
    )
    entropy_binary: bool = Field(
        True, description="Rank on the binarised contexts (exact Hamming-histogram method)."
    )
    entropy_samples: int | None = Field(
        None, ge=2, description="Rank on a seeded subsample of this many pairs; null: all."
    )
    chi2_k: int | None = Field(
        None, ge=2, description="k of the chi2 pseudo-labels; null: (k_low + k_high) // 2."
    )

    k_low: int = Field(2, ge=2, description="K_low, the smallest number of clusters tried.")
    k_high: int = Field(20, ge=2, description="K_high, the largest number of clusters tried.")
    prefix_step: int | None = Field(
        None,
        ge=1,
        description="Prefix lengths step, 2*step, ...; null: n_prefixes "
        "geometric lengths from min_prefix to all words.",
    )
    n_prefixes: int = Field(12, ge=1, description="Number of geometric prefix lengths.")
    min_prefix: int = Field(10, ge=1, description="Smallest geometric prefix length.")
    theta: float = Field(
        0.9, ge=0.0, le=1.0, description="Coverage threshold: share of pairs with a selected word."
    )
    reg: float = Field(1e-3, gt=0.0, description="Relative ridge on P_W in trace(P_W^-1 P_B).")
    row_norm: bool = Field(True, description="L2-normalise pairs after selecting words.")
    n_init: int = Field(3, ge=1, description="k-means restarts.")

    n_subsamples: int = Field(10, ge=1, description="q, subsamples per k for stability.")
    rho: float = Field(0.9, gt=0.0, le=1.0, description="Subsample fraction rho.")
    random_baseline: Literal["closed_form", "simulated"] = Field(
        "closed_form", description="Random predictor of Eq. 3: exact 1/k or simulated."
    )
    n_baseline_draws: int = Field(1, ge=1, description="Draws of the simulated predictor.")
    n_init_reference: int | None = Field(
        None,
        ge=1,
        description="k-means restarts of the reference clustering C of each k (stability), "
        "of the final clustering and of the k-means baselines; null: n_init (C is then the "
        "clustering the subset search scored).",
    )
    n_init_subsample: int | None = Field(
        None,
        ge=1,
        description="k-means restarts of the subsample clusterings C^mu; null: n_init.",
    )
    n_references: int = Field(
        1,
        ge=1,
        description="R, reference clusterings C per k (each with n_init_reference restarts, "
        "own seed); Eq. 2 is averaged over them. 1: the paper's single C.",
    )
    k_rule: Literal["max", "one_se"] = Field(
        "max",
        description="k from the Eq. 3 curve: its maximum (the paper) or the smallest k "
        "within one standard error of it (a deviation, algorithms/relations/stability.py).",
    )
    stability_pairs: Literal["all", "distinct"] = Field(
        "all",
        description="Pairs counted by Eq. 2: all (the paper) or only pairs whose vectors "
        "differ (a deviation, see algorithms/relations/stability.py).",
    )

    n_label_words: int = Field(2, ge=1, description="DCM words reported per cluster.")
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
        if not any(int(part) for part in value.split("-")):
            raise ValueError(f"window {value!r} selects no context words")
        return value

    @model_validator(mode="after")
    def _k_range(self) -> RelationsConfig:
        if self.k_low > self.k_high:
            raise ValueError(f"k_low ({self.k_low}) must not exceed k_high ({self.k_high})")
        return self


def _search(ctx, cfg, X, ranking, k_values, sizes, all_features):
    """Map the (k, prefix) units, then the (k, mu) units; returns refs and the choice."""
    grid = [(k, s) for k in k_values for s in sizes]
    units = [(k, mu) for k in k_values for mu in range(cfg.n_subsamples)]
    what = "RLBaseline (all words)" if all_features else f"{cfg.ranking} ranking"
    progress = ctx.progress(
        "rl-baseline-search" if all_features else "stability-search",
        len(grid) + len(units),
        f"Stability search, {what}: {len(grid)} (k, prefix) candidates, "
        f"then {len(units)} (k, subsample) units",
    )
    common = dict(
        X=X,
        ranking=ranking,
        all_features=all_features,
        seed=cfg.seed,
        n_init=cfg.n_init,
        row_norm=cfg.row_norm,
    )
    cands = ctx.map(
        rel.score_candidate,
        progress=progress,
        k=[k for k, _ in grid],
        n_features=[s for _, s in grid],
        theta=cfg.theta,
        reg=cfg.reg,
        **common,
    )
    labels = {g: c["labels"] for g, c in zip(grid, cands, strict=True)}
    if all_features:
        subsets = {k: sizes[0] for k in k_values}
        search = None
    else:
        search = ctx.run(rel.choose_subsets, scores=[c["score"] for c in cands])
        table = ctx.read(search["subsets"])
        subsets = dict(zip(table["k"].astype(int), table["n_features"].astype(int), strict=True))
    n_refs = cfg.n_references
    references = {k: [labels[(k, subsets[k])]] for k in k_values}
    if reference_restarts(cfg) != cfg.n_init or n_refs > 1:  # C: more restarts, or R of them
        ref_units = [(k, r) for k in k_values for r in range(n_refs)]
        refs = ctx.map(
            rel.reference_clustering,
            k=[k for k, _ in ref_units],
            n_features=[subsets[k] for k, _ in ref_units],
            index=[r for _, r in ref_units],
            **dict(common, n_init=reference_restarts(cfg)),
        )
        references = {k: [] for k in k_values}
        for (k, _), ref in zip(ref_units, refs, strict=True):
            references[k].append(ref)
        labels.update({(k, subsets[k]): references[k][0] for k in k_values})
    samples = ctx.map(
        rel.stability_sample,
        progress=progress,
        k=[k for k, _ in units],
        sample_index=[mu for _, mu in units],
        n_features=[subsets[k] for k, _ in units],
        full_labels=[references[k] if n_refs > 1 else references[k][0] for k, _ in units],
        rho=cfg.rho,
        baseline=cfg.random_baseline,
        n_baseline_draws=cfg.n_baseline_draws,
        pairs=cfg.stability_pairs,
        **dict(common, n_init=subsample_restarts(cfg)),
    )
    chosen = ctx.run(rel.choose, samples=samples, rule=cfg.k_rule)
    choice = ctx.read(chosen["choice"]).iloc[0]
    return labels, search, chosen, int(choice["k"]), int(choice["n_features"])


def reference_restarts(cfg: RelationsConfig) -> int:
    """k-means restarts of C, the final clustering and the k-means baselines."""
    return cfg.n_init if cfg.n_init_reference is None else cfg.n_init_reference


def subsample_restarts(cfg: RelationsConfig) -> int:
    """k-means restarts of the subsample clusterings C^mu."""
    return cfg.n_init if cfg.n_init_subsample is None else cfg.n_init_subsample


RUN_NAME = "relations-{config.dataset}-{config.window}-seed{config.seed}"


@flow(name="relations", flow_run_name=RUN_NAME)
def relations_flow(config: RelationsConfig, options: RunOptions | None = None) -> dict:
    cfg = config
    ctx = RunContext.open("relations", cfg, options)
    parts = [
        ctx.run(
            rel.parse,
            path=ctx.path(p),
            fmt=cfg.format,
            relation_types=cfg.relation_types,
            include_other=cfg.include_other,
            directed=cfg.directed,
        )
        for p in cfg.data
    ]
    data = ctx.run(rel.combine, parts=parts, max_pairs=cfg.max_pairs, seed=cfg.seed)
    n_pairs = json.loads(ctx.store.meta(data["mentions"])["shape"])[0]
    if cfg.k_high >= n_pairs:
        raise InputError(f"k_high must be below the number of pairs ({n_pairs})", key="k_high")
    classes = ctx.read(data["classes"])
    with_baselines = cfg.baselines and int(classes["count"].sum()) == n_pairs
    k_true = len(classes)
    if with_baselines:  # O(N^2) and independent of the rest: runs beside the search
        hasegawa = ctx.submit(
            rel.hasegawa,
            mentions=data["mentions"],
            k=k_true,
            window=cfg.hasegawa_window,
            lowercase=cfg.lowercase,
        )
    feats = ctx.run(
        rel.extract_features,
        mentions=data["mentions"],
        window=cfg.window,
        weighting=cfg.weighting,
        position_tags=cfg.position_tags,
        lowercase=cfg.lowercase,
        min_df=cfg.min_df,
    )
    X, vocab = unmapped(feats["X"]), feats["vocabulary"]
    ranking = ctx.run(
        rel.rank_features,
        X=feats["X"],
        vocabulary=vocab,
        method=cfg.ranking,
        alpha=cfg.entropy_alpha,
        binary=cfg.entropy_binary,
        n_samples=cfg.entropy_samples,
        seed=cfg.seed,
        chi2_k=cfg.chi2_k or (cfg.k_low + cfg.k_high) // 2,
        n_init=cfg.n_init,
        row_norm=cfg.row_norm,
    )
    n_words = len(ctx.read(vocab))
    k_values = list(range(cfg.k_low, cfg.k_high + 1))
    sizes = rel.prefix_lengths(
        n_words, step=cfg.prefix_step, n_steps=cfg.n_prefixes, min_size=cfg.min_prefix
    )
    _, search, chosen, k, n_features = _search(ctx, cfg, X, ranking, k_values, sizes, False)
    labelled = ctx.run(
        rel.label_clusters,
        X=feats["X"],
        vocabulary=vocab,
        ranking=ranking,
        mentions=data["mentions"],
        k=k,
        n_features=n_features,
        seed=cfg.seed,
        n_init=reference_restarts(cfg),
        row_norm=cfg.row_norm,
        n_label_words=cfg.n_label_words,
    )

    baselines, k_used, rl_curve = {}, {}, None
    if with_baselines:
        rl_labels, _, rl, k_rl, _ = _search(ctx, cfg, X, None, k_values, [n_words], True)
        rl_curve = ctx.read(rl["curve"])
        baselines["rl-baseline"] = rl_labels[(k_rl, n_words)]
        baselines["kmeans-true-k"] = (
            rl_labels.get((k_true, n_words))
            or ctx.run(
                rel.reference_clustering,
                X=feats["X"],
                ranking=None,
                k=k_true,
                n_features=n_words,
                all_features=True,
                seed=cfg.seed,
                n_init=reference_restarts(cfg),
                row_norm=cfg.row_norm,
            )
        )
        (baselines["hasegawa-true-k"],) = ctx.gather([hasegawa])
        k_used = {"rl-baseline": k_rl, "kmeans-true-k": k_true, "hasegawa-true-k": k_true}
    metrics = ctx.run(
        rel.evaluate,
        clusters=labelled["clusters"],
        baselines=baselines,
        dataset=cfg.dataset,
        method=cfg.ranking,
        k_chosen=k,
        k_baselines=k_used,
    )

    create_markdown_artifact(
        rel.stability_markdown(ctx.read(chosen["curve"]), k, rl_curve),
        key="relations-stability",
        description=f"M_norm over k; chosen k={k}, |F|={n_features}",
    )
    create_table_artifact(
        rel.label_rows(ctx.read(labelled["words"])),
        key="relations-labels",
        description=f"DCM labels of the {k} clusters",
    )
    ctx.publish_image(
        "stability-plot",
        ctx.plot(
            plots.relations_stability,
            ctx.read(chosen["curve"]),
            chosen_k=k,
            subsets=ctx.read(search["subsets"]),
            baseline_curve=rl_curve,
            title=f"Stability over k: {cfg.dataset}, window {cfg.window}, {cfg.ranking} "
            f"ranking, seed {cfg.seed}",
        ),
        f"M_norm over k (chosen k={k}, |F|={n_features}) and the criterion of F_k",
    )
    ctx.publish_markdown(
        "summary",
        summary_markdown(ctx.read(metrics), cfg, k, n_features),
        "The run beside Chen et al. (2005); not like-for-like (ACE against this data)",
    )
    return ctx.finish(metrics)


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
