"""The LEML flow: load -> (alternate-W -> alternate-H) x T -> evaluate.

Yu, Jain, Kar and Dhillon, "Large-scale Multi-label Learning with Missing
Labels", ICML 2014.  Options live in ``configs/leml.yaml``.
"""

from __future__ import annotations

from typing import Literal

from prefect import flow
from pydantic import Field, model_validator

from flows import plots
from flows.config import FlowConfig, Strict
from flows.published import LEML_XC
from flows.runtime import RunContext, RunOptions, markdown_table
from tasks.leml import (
    alternate_H,
    alternate_W,
    baseline,
    collect,
    evaluate,
    initialise,
    load,
    margin_start,
    observe,
    split,
)

PUBLISHED = LEML_XC


class DatasetConfig(Strict):
    name: str = Field(
        "bibtex",
        pattern=r"^[a-z0-9][a-z0-9_-]*$",
        description="Dataset name used in run names and metrics.",
    )
    format: Literal["xmc", "arff", "parquet"] = Field(
        "xmc", description="Extreme Classification text, Mulan ARFF, or an X/Y Parquet pair."
    )
    train: str = Field(description="Training file, relative to the project root.")
    test: str = Field(description="Test file, relative to the project root.")
    n_labels: int | None = Field(None, ge=1, description="Label count (ARFF only).")
    normalize: Literal["none", "l2"] = Field(
        "none", description="Scale every row of X to unit L2 norm (train and test alike)."
    )
    validation_fraction: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Share of the training set held out (seeded) for validation P@1; "
        "hyperparameters are chosen on it, never on test.",
    )


class ModelConfig(Strict):
    loss: Literal["squared", "logistic", "sqhinge"] = Field("squared", description="Loss.")
    rank: int = Field(100, ge=1, description="k, the rank of Z = W H^T.")
    lam: float = Field(1.0, gt=0, description="Regularisation lambda.")
    outer_iterations: int = Field(5, ge=1, le=1000, description="Alternating iterations T.")
    cg_max_iter: int = Field(25, ge=1, description="CG iterations per W-step / Newton step.")
    cg_tol: float = Field(1e-3, gt=0, lt=1, description="CG relative residual tolerance.")
    newton_max_iter: int = Field(3, ge=1, description="Newton steps (logistic, sq. hinge).")
    fit_intercept: bool = Field(True, description="Add a constant feature.")
    h_solver: Literal["direct", "cg", "bound"] = Field(
        "direct",
        description="H-step Newton directions for logistic / sq. hinge: explicit per-label "
        "k x k Hessians or per-label conjugate gradient (cg_max_iter, cg_tol); or bound: "
        "newton_max_iter steps on the quadratic curvature bound.",
    )
    w_solver: Literal["tron", "bound"] = Field(
        "tron",
        description="W-step for logistic / sq. hinge: TRON, or newton_max_iter steps on the "
        "quadratic curvature bound solved through the eigendecomposition of X^T X.",
    )
    squared_init_iter: int = Field(
        0,
        ge=0,
        description="Logistic / sq. hinge: start from this many squared-loss iterations "
        "mapped to +-1 margins (needs fit_intercept; 0 = random start).",
    )
    dtype: Literal["float32", "float64"] = Field("float32", description="Floating type.")


class WStepConfig(Strict):
    runner: Literal["local", "dask"] = Field(
        "local",
        description="Where the W-step's gradient and Hessian-vector products run: this "
        "process, or Dask over row blocks of X kept on the workers.",
    )
    blocks: int = Field(
        4, ge=1, le=256, description="Row blocks of X (fixes the reduction order, so W)."
    )
    workers: int = Field(
        2, ge=1, le=64, description="Workers of the LocalCluster started when no address."
    )
    address: str | None = Field(
        None,
        description="Scheduler of an existing Dask cluster (tcp://host:8786); none: the "
        "task runner's cluster under --runner dask, else a LocalCluster.",
    )


class LemlConfig(FlowConfig):
    dataset: DatasetConfig
    model: ModelConfig = ModelConfig()
    observed_fraction: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Share of label-matrix entries observed (uniform, seeded); 1 = all.",
    )
    baselines: list[Literal["br-ridge", "br-logistic", "closed-form"]] = Field(
        default_factory=list, description="Baselines trained on the same observed entries."
    )
    baseline_alpha: float = Field(1.0, gt=0, description="Ridge / inverse-C strength.")
    w_step: WStepConfig = Field(
        default_factory=WStepConfig, description="Where the W-step runs (Dask: row blocks)."
    )
    batch_size: int = Field(2048, ge=1, description="Rows scored at a time in evaluation.")

    @model_validator(mode="after")
    def _margin_start_needs_intercept(self) -> LemlConfig:
        m = self.model
        if m.squared_init_iter > 0 and m.loss != "squared":
            if not m.fit_intercept:
                raise ValueError("model.squared_init_iter > 0 needs model.fit_intercept: true")
            if m.rank < 2:
                raise ValueError("model.squared_init_iter > 0 needs model.rank >= 2")
        if m.w_solver == "bound" and m.loss != "squared" and self.w_step.runner != "local":
            raise ValueError("model.w_solver: bound runs on one process; use w_step.runner: "
                             "local (or model.w_solver: tron)")
        return self

    @model_validator(mode="after")
    def _closed_form_needs_full_labels(self) -> LemlConfig:
        if "closed-form" in self.baselines and self.observed_fraction < 1:
            raise ValueError("baselines: closed-form needs observed_fraction = 1")
        return self


def _run_name() -> str:
    from prefect.runtime import flow_run

    cfg = flow_run.parameters["config"]
    cfg = cfg if isinstance(cfg, dict) else cfg.model_dump()
    frac = cfg.get("observed_fraction", 1.0)
    miss = "" if frac >= 1 else f"-obs{int(round(frac * 100))}"
    return f"leml-{cfg['dataset']['name']}-k{cfg['model']['rank']}{miss}-seed{cfg['seed']}"


@flow(name="leml", flow_run_name=_run_name)
def leml_flow(config: LemlConfig, options: RunOptions | None = None) -> dict:
    ctx = RunContext.open("leml", config, options)
    d, m = config.dataset, config.model
    read = dict(format=d.format, dtype=m.dtype, n_labels=d.n_labels, normalize=d.normalize)
    train = ctx.run(load, path=ctx.path(d.train), **read)
    test = ctx.run(load, path=ctx.path(d.test), **read)
    fit, val = train, None
    if d.validation_fraction > 0:
        parts = ctx.run(
            split, train=train, validation_fraction=d.validation_fraction, seed=config.seed
        )
        fit = {"X": parts["X_fit"], "Y": parts["Y_fit"]}
        val = {"X": parts["X_val"], "Y": parts["Y_val"]}
    mask = None
    if config.observed_fraction < 1:
        mask = ctx.run(
            observe, Y=fit["Y"], observed_fraction=config.observed_fraction, seed=config.seed
        )

    common = dict(
        lam=m.lam,
        loss=m.loss,
        fit_intercept=m.fit_intercept,
        dtype=m.dtype,
        newton_max_iter=m.newton_max_iter,
    )
    factors = ctx.run(
        initialise,
        train=fit,
        rank=m.rank,
        fit_intercept=m.fit_intercept,
        dtype=m.dtype,
        seed=config.seed,
    )
    if m.squared_init_iter > 0 and m.loss != "squared":
        factors = ctx.run(
            margin_start,
            train=fit,
            mask=mask,
            H=factors["H"],
            lam=m.lam,
            fit_intercept=m.fit_intercept,
            dtype=m.dtype,
            squared_init_iter=m.squared_init_iter,
            cg_max_iter=m.cg_max_iter,
            cg_tol=m.cg_tol,
        )
    W, H = factors["W"], factors["H"]
    traces, timings = [], []
    progress = ctx.progress(
        "iterations", m.outer_iterations, f"Outer iterations (of {m.outer_iterations})"
    )
    # the local W-step passes nothing, so its cache keys stay those of earlier runs
    w_step = {} if config.w_step.runner == "local" else {
        "w_step": config.w_step.model_dump(exclude={"runner"})}
    if m.w_solver != "tron":  # passed only when set, so earlier cache keys stay valid
        w_step["w_solver"] = m.w_solver
    for t in range(1, m.outer_iterations + 1):
        w = ctx.run(
            alternate_W,
            train=fit,
            mask=mask,
            W=W,
            H=H,
            iteration=t,
            cg_max_iter=m.cg_max_iter,
            cg_tol=m.cg_tol,
            **w_step,
            **common,
        )
        h = ctx.run(
            alternate_H,
            train=fit,
            mask=mask,
            W=w["W"],
            H=H,
            validation=val,
            iteration=t,
            h_solver=m.h_solver,
            cg_max_iter=m.cg_max_iter,
            cg_tol=m.cg_tol,
            **common,
        )
        W, H = w["W"], h["H"]
        traces.append(h["trace"])
        timings += [w["timings"], h["timings"]]
        progress.advance()

    result = ctx.run(
        evaluate,
        test=test,
        W=W,
        H=H,
        traces=traces,
        timings=timings,
        dataset=d.name,
        method=f"leml-{m.loss}-k{m.rank}",
        loss=m.loss,
        fit_intercept=m.fit_intercept,
        batch_size=config.batch_size,
    )
    tables = [result["metrics"]]
    for method in config.baselines:
        tables.append(
            ctx.run(
                baseline,
                train=fit,
                mask=mask,
                test=test,
                method=method,
                alpha=config.baseline_alpha,
                rank=m.rank,
                dataset=d.name,
                batch_size=config.batch_size,
            )
        )
    metrics = ctx.run(collect, tables=tables)
    ctx.publish_table(
        "convergence",
        result["convergence"],
        "Objective, seconds and validation P@1 per outer iteration",
    )
    ctx.publish_image(
        "objective",
        ctx.plot(
            plots.leml_convergence,
            ctx.read(result["convergence"]),
            title=f"LEML on {d.name}: k={m.rank}, lambda={m.lam:g}, {m.loss} loss",
        ),
        "Objective and validation P@1 over outer iterations",
    )
    ctx.publish_markdown(
        "summary",
        summary_markdown(ctx, metrics, result["convergence"], config),
        "The run beside the published LEML row (Extreme Classification Repository)",
    )
    return ctx.finish(metrics, headline=headline(ctx.read(metrics)))


def summary_markdown(
    ctx: RunContext, metrics_ref: str, convergence_ref: str, config: LemlConfig
) -> str:
    """The run against the published LEML row, and the objective over iterations."""
    metrics = ctx.read(metrics_ref)
    conv = ctx.read(convergence_ref)
    lines = [
        f"# LEML on {config.dataset.name}",
        "",
        f"rank {config.model.rank}, lambda {config.model.lam}, loss {config.model.loss}, "
        f"observed {config.observed_fraction:.0%}, seed {config.seed}",
        "",
        "| method | metric | value | published LEML |",
        "| --- | --- | --- | --- |",
    ]
    published = PUBLISHED.get(config.dataset.name, {})
    for row in metrics.itertuples(index=False):
        ref = published.get(row.metric) if config.observed_fraction == 1 else None
        shown = (
            f"{100 * row.value:.2f}" if row.metric.startswith("precision@") else f"{row.value:.4f}"
        )
        lines.append(f"| {row.method} | {row.metric} | {shown} | {'' if ref is None else ref} |")
    lines += [
        "",
        "Published LEML (Extreme Classification Repository, P@1 / P@3 / P@5 in %): "
        + "; ".join(
            f"{name.capitalize()} " + " / ".join(f"{v:.2f}" for v in row.values())
            for name, row in PUBLISHED.items()
        )
        + ". Comparable only on the repository's split with every label observed.",
        "",
        "Objective per outer iteration: " + sparkline(conv["objective"].tolist()),
        "",
        markdown_table(conv),
    ]
    return "\n".join(lines)


def headline(metrics) -> dict[str, float]:
    """P@1, P@5 and AUC of every method."""
    keep = metrics[metrics["metric"].isin(["precision@1", "precision@5", "instance_auc"])]
    return {f"{r.dataset}/{r.method}/{r.metric}": float(r.value) for r in keep.itertuples()}


def sparkline(values: list[float]) -> str:
    bars = "▁▂▃▄▅▆▇█"
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    return "".join(bars[int((v - lo) / span * (len(bars) - 1))] for v in values)
