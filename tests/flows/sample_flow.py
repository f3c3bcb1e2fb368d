"""A small real flow that exercises the foundation: store, cache, manifest, CLI.

It clusters the UCI handwritten digits (as shipped with scikit-learn, read from
a CSV file the test writes) with k-means and scores the clusters against the
digit labels.  Three steps: load -> cluster -> evaluate.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from prefect import flow
from pydantic import Field
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, v_measure_score

from scarce.flows.config import FlowConfig
from scarce.flows.registry import FlowSpec, register
from scarce.flows.runtime import RunContext, RunOptions
from scarce.tasks.errors import InputError
from scarce.tasks.steps import step


class DigitsConfig(FlowConfig):
    data: str = Field(description="CSV of 64 pixel columns and a 'label' column")
    n_samples: int = Field(400, ge=10, le=1797)
    k: int = Field(10, ge=2, le=50)
    n_init: int = Field(2, ge=1)


@step("digits-load", files=("path",), outputs=("X", "y"), run_name="load n={n_samples}")
def load(path: str, n_samples: int, seed: int) -> dict:
    frame = pd.read_csv(path)
    if "label" not in frame.columns:
        raise InputError("no 'label' column", path=path, line=1)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(frame), size=min(n_samples, len(frame)), replace=False))
    frame = frame.iloc[rows]
    return {
        "X": frame.drop(columns="label").to_numpy(np.float64),
        "y": frame["label"].to_numpy(np.int64),
    }


@step("digits-cluster", inputs=("data",), run_name="kmeans k={k}")
def cluster(data: dict, k: int, n_init: int, seed: int) -> np.ndarray:
    km = KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit(data["X"])
    return km.labels_.astype(np.int64)


@step("digits-evaluate", inputs=("data", "labels"))
def evaluate(data: dict, labels: np.ndarray) -> pd.DataFrame:
    y = data["y"]
    return pd.DataFrame(
        {
            "dataset": "digits",
            "method": "kmeans",
            "metric": ["ari", "v_measure"],
            "value": [adjusted_rand_score(y, labels), v_measure_score(y, labels)],
        }
    )


def cluster_sizes(labels: np.ndarray) -> bytes:
    """A bar chart of the cluster sizes, as PNG bytes (a plot the run publishes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3, 2), dpi=50)
    FigureCanvasAgg(fig)
    sizes = np.bincount(labels)
    fig.subplots().bar(np.arange(sizes.size), sizes)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


@flow(name="digits", flow_run_name="digits-k{config.k}-seed{config.seed}")
def digits_flow(config: DigitsConfig, options: RunOptions | None = None) -> dict:
    ctx = RunContext.open("digits", config, options)
    data = ctx.run(load, path=ctx.path(config.data), n_samples=config.n_samples, seed=config.seed)
    labels = ctx.run(cluster, data=data, k=config.k, n_init=config.n_init, seed=config.seed)
    metrics = ctx.run(evaluate, data=data, labels=labels)
    png = ctx.artifacts.plot(cluster_sizes, ctx.read(labels))
    ctx.artifacts.image("sizes", png, "cluster sizes")
    ctx.record.name_output("labels.parquet", labels)
    ctx.record.write_output("model/k.txt", f"{config.k}\n")
    return ctx.finish(metrics)


SPEC = register(
    FlowSpec(
        name="digits",
        target="tests.flows.sample_flow:digits_flow",
        config_model="tests.flows.sample_flow:DigitsConfig",
        config_file="configs/digits.yaml",
        description="test flow",
    )
)
