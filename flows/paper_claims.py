"""LEML's and StRip's claims checked on their experiments and runs: ``scarce claims RUN_ID``.

Yu, Jain, Kar and Dhillon (2014) claim that LEML
  (p) reaches the published P@1, P@3 and P@5 on Bibtex and Delicious (the Extreme
      Classification Repository's LEML row), judged on an experiment over ``leml`` without an
      ``observed_fraction`` axis (``configs/experiments/leml-splits.yaml``: both public splits of
      each set, three seeds): the mean over the seeds against the published figure.  On one
      LEML run the figure is shown and not judged;
  (m) is ahead of binary relevance when labels are missing, judged on an experiment over
      ``leml`` whose axes include ``observed_fraction`` (``configs/experiments/
      leml-missing.yaml``): LEML against ``br-ridge`` trained on the same observed entries.
Stoyanov and Cardie (2006) claim that StRip with partial supervision
  (s) is ahead of RIPPER on B³ F1 and on pairwise F1, judged on an experiment over ``strip``
      (``strip-loss-ratio.yaml``): ``strip-partial`` against ``ripper``.

The verdict rule is that of Chen et al.'s claims (:func:`scarce.flows.claims.verdict`): a comparison
*holds* when the mean over the seeds is ahead by more than the seed-to-seed spread (the larger
of the two standard deviations; a published figure has no spread of its own, so the seeds'
alone), *fails* when it is behind by more, and is *level* otherwise.  The repetitions are the
seeds: every other axis of the experiment makes a group of its own.  Fewer than two seeds have
no spread to be beyond, and the verdict is *one run* (:data:`scarce.flows.claims.ONE_RUN`), never
*holds*.

A verdict whose settings were chosen on the corpus it is judged on says so
(:func:`chosen_here`): LEML's bundled settings, chosen by the ``leml-defaults`` experiment on
validation rows of its data sets, and StRip's loss ratios, chosen on dev documents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from scarce.flows.claims import ONE_RUN, verdict
from scarce.flows.manifest import read_manifest
from scarce.flows.published import LEML_XC
from scarce.flows.registry import FLOWS
from scarce.tasks.errors import InputError

#: The metrics each comparison of an experiment is made on.
LEML_METRICS = ("precision@1", "precision@3", "precision@5")
STRIP_METRICS = ("b3_f", "pairwise_f")
#: The methods compared: (the paper's, the one it claims to beat), by flow.
PAIRS = {"leml": ("leml", "br-ridge"), "strip": ("strip-partial", "ripper")}
#: The axis whose values are the repetitions of a comparison.
REPETITIONS = "seed"
#: The experiment that chose a flow's bundled settings (its ``select``): the axes it chooses
#: are the settings, the data sets of its points the corpora they were chosen on.
TUNED_BY = {"leml": "leml-defaults"}
#: The experiment that judges claim (p) over seeds, named where one run cannot be judged.
SPLITS = "leml-splits"
CLAIMS_TEXT = {
    "p": "(p) LEML reaches the published {metric} of {dataset}",
    "m": "(m) LEML is ahead of binary relevance on {metric} with labels missing",
    "s": "(s) StRip with partial supervision is ahead of RIPPER on {metric}",
}


def _manifest(run_dir: Path) -> dict:
    return read_manifest(run_dir)  # its keys' types checked


def flow_of(run_dir: Path) -> str:
    """``relations``, ``leml`` or ``strip``: the flow an experiment ran, or ``published`` for
    a LEML run (shown beside the published figures)."""
    m = _manifest(run_dir)
    flow = (m.get("config") or {}).get("flow")
    if m.get("flow") == "experiment" and flow in ("relations", "leml", "strip"):
        return str(flow)
    if m.get("flow") == "leml":
        return "published"
    what = f"an experiment over {flow!r}" if m.get("flow") == "experiment" else repr(m.get("flow"))
    raise InputError(f"claims are checked on an experiment over relations, leml or strip, or "
                     f"on a LEML run; this run is {what}", path=run_dir / "manifest.json")


def _dotted(config: dict, key: str) -> Any:
    """The value of a dotted key in a config mapping (None when absent)."""
    value: Any = config
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _dotted_or_default(config: dict, key: str, model: Any) -> Any:
    """:func:`_dotted`, or the config model's default for a key the config leaves out (a
    config written before the key existed, or by hand)."""
    value = _dotted(config, key)
    if value is not None:
        return value
    for part in key.split("."):
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        model = field.annotation
    default = field.get_default(call_default_factory=True)
    return default.model_dump(mode="json") if hasattr(default, "model_dump") else default


def tuning(flow: str, configs: Path | None = None) -> tuple[dict[str, Any], set[str]]:
    """What the flow's tuning experiment (:data:`TUNED_BY`) chose: the bundled value of each
    setting it chooses (dotted key: the value in the package's config) and the data sets it
    chose them on.  Both are read from the files shipped with the package (``configs``, by
    default :func:`scarce.flows.config.packaged_configs`), never from a project's own copies, which
    hold the user's values.  ``({}, set())`` for a flow without one."""
    from scarce.flows.config import apply_values, load_config, packaged_configs, read_yaml
    from scarce.flows.experiment_config import ExperimentConfig, grid, settings

    if flow not in TUNED_BY:
        return {}, set()
    configs = configs or packaged_configs()
    model = FLOWS[flow].load_model()
    tune = load_config(configs / "experiments" / f"{TUNED_BY[flow]}.yaml", ExperimentConfig,
                       inputs=False)
    base_path = configs.parent / tune.base
    base = read_yaml(base_path, "base config") or {}
    bundled = model.model_validate(base).model_dump(mode="json")
    keys = [k for axis in tune.selected_axes() for k in (
        sorted({k for s in tune.axes[axis].values() for k in s})
        if isinstance(tune.axes[axis], dict) else [axis])]
    tuned = apply_values(base, tune.set, model)
    corpora = {_dotted(model.model_validate(apply_values(tuned, settings(tune, p), model))
                       .model_dump(mode="json"), "dataset.name")
               for p in grid(tune)}
    return {k: _dotted(bundled, k) for k in keys}, corpora


def chosen_here(flow: str, config: dict, tuned: tuple[dict[str, Any], set[str]] | None = None
                ) -> str | None:
    """Where a run's settings were chosen on the corpus its claim is judged on, as its verdict
    says it; None when they were not.

    LEML: the run's value of every setting the tuning experiment chooses equals the bundled
    one and its data set is one the experiment chose them on (``tuned``: :func:`tuning`, read
    when None).  StRip: ``dev_splits`` is set, so each variant's loss ratio was chosen on dev
    documents of the run's corpus.  ``config`` is the run's config as its manifest records it.
    """
    if flow == "strip":
        return ("loss ratios chosen on dev documents of this corpus"
                if config.get("dev_splits") else None)
    bundled, corpora = tuned if tuned is not None else tuning(flow)
    if not bundled or _dotted(config, "dataset.name") not in corpora:
        return None
    model = FLOWS[flow].load_model()
    if any(_dotted_or_default(config, k, model) != v for k, v in bundled.items()):
        return None
    return f"settings chosen on validation rows of this corpus, by {TUNED_BY[flow]}"


def _with(figure: str, note: str | None) -> str:
    return f"{figure} ({note})" if note else figure


def _experiment(run_dir: Path) -> tuple[Any, pd.DataFrame]:
    """The experiment's config (validated again from its manifest) and its long table with
    the failed points left out (LEML's ``method`` as the family, ``leml``)."""
    from scarce.flows.config import validate_config
    from scarce.flows.experiment_config import ExperimentConfig

    path = run_dir / "manifest.json"
    config = validate_config(_manifest(run_dir).get("config") or {}, ExperimentConfig, path)
    table = pd.read_parquet(run_dir / "outputs" / "table.parquet")
    if "error" in table:
        table = table[table["error"].isna()]
    family = FLOWS[config.flow].method_family
    if family and "method_name" not in table.columns:  # before the table named families
        table = table.assign(method=table["method"].str.replace(family, r"\1", regex=True))
    return config, table


def _groups(config: Any, table: pd.DataFrame) -> list[str]:
    """The columns a comparison is grouped by: the table's rows (not ``method``), then every
    other axis but the repetitions (:data:`REPETITIONS`)."""
    rows = [a for a in config.table.rows if a in table.columns and a != "method"]
    return rows + [a for a in sorted(config.axes) if a not in rows and a != REPETITIONS]


def _point_config(config: Any, row: pd.Series, path: Path) -> dict:
    """The config of the grid point a table row came from, as its run's manifest records it."""
    from scarce.flows.experiment_config import axis_values, point_config
    from scarce.tasks.experiment import cell

    point = {}
    for axis in config.axes:
        shown = row[axis]
        values = [v for v in axis_values(config, axis) if cell(v) == shown]
        if not values:
            raise InputError(f"the table's {axis} {shown!r} is no value of the experiment's "
                             "axis", path=path)
        point[axis] = values[0]
    return point_config(config, point).model_dump(mode="json")


def _parts(config: Any, table: pd.DataFrame, path: Path):
    """Per group of :func:`_groups`: its label, its rows and the config of its first point."""
    keys = _groups(config, table)
    for g, part in (table.groupby(keys, sort=False) if keys else [((), table)]):
        g = g if isinstance(g, tuple) else (g,)
        label = ", ".join(f"{k} {v}" for k, v in zip(keys, g, strict=True))
        yield label, part, _point_config(config, part.iloc[0], path)


def _stats(values: pd.Series) -> tuple[float, float, int]:
    """Mean, standard deviation (ddof 1; 0 for one value) and count."""
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0, \
        int(values.count())


def _seeds(n: int) -> str:
    return f"{n} seed{'s' if n != 1 else ''}"


def experiment_claims(run_dir: Path, flow: str) -> pd.DataFrame:
    """The claims of a LEML or StRip experiment, from its ``table.parquet``: LEML's (m) when
    an axis is ``observed_fraction``, else (p); StRip's (s)."""
    if flow == "leml" and "observed_fraction" not in (
            (_manifest(run_dir).get("config") or {}).get("axes") or {}):
        return splits_claims(run_dir)
    config, table = _experiment(run_dir)
    mine, other = PAIRS[flow]
    metrics = LEML_METRICS if flow == "leml" else STRIP_METRICS
    claim = "m" if flow == "leml" else "s"
    tuned = tuning(flow)
    rows = []
    for label, part, point in _parts(config, table, run_dir / "manifest.json"):
        note = chosen_here(flow, point, tuned)
        for metric in metrics:
            values = part[part["metric"] == metric]
            a = values.loc[values["method"] == mine, "value"]
            b = values.loc[values["method"] == other, "value"]
            if a.empty or b.empty:
                continue
            (mean, sd, n), (other_mean, other_sd, other_n) = _stats(a), _stats(b)
            diff, spread, seeds = mean - other_mean, max(sd, other_sd), min(n, other_n)
            rows.append({"group": label, "claim": claim, "metric": metric, "method": mine,
                         "other": other, "mean": mean, "other_mean": other_mean, "n": seeds,
                         "verdict": verdict(diff, spread, seeds),
                         "figure": _with(f"{mean:.3f} vs {other_mean:.3f} (difference "
                                         f"{diff:+.3f}, spread {spread:.3f}, {_seeds(seeds)})",
                                         note)})
    return pd.DataFrame(rows)


def _comparable(config: dict, where: str, path: Path) -> str:
    """The data set of a run that can stand beside the published figures: Bibtex or
    Delicious, every label observed, scored on the test file."""
    dataset = str(_dotted(config, "dataset.name") or "")
    if dataset not in LEML_XC:
        raise InputError(f"the published LEML figures are for {', '.join(LEML_XC)}; {where} "
                         f"is on {dataset!r}", path=path)
    if (config.get("observed_fraction", 1.0) or 1.0) < 1.0:
        raise InputError(f"the published figures have every label observed; {where} has "
                         "observed_fraction < 1", path=path)
    if (_dotted(config, "dataset.evaluate_on") or "test") != "test":
        raise InputError(f"the published figures are on the test file; {where} is scored on "
                         "validation rows (dataset.evaluate_on)", path=path)
    return dataset


def splits_claims(run_dir: Path) -> pd.DataFrame:
    """Claim (p) on a LEML experiment: per group (a split) and per P@k, the mean over the
    seeds of the LEML method's value (in %) against the published figure; the spread is the
    seeds' standard deviation."""
    config, table = _experiment(run_dir)
    path = run_dir / "manifest.json"
    tuned = tuning("leml")
    rows = []
    for label, part, point in _parts(config, table, path):
        dataset = _comparable(point, f"the experiment's {label or 'point'}", path)
        note = chosen_here("leml", point, tuned)
        mine = part[part["method"] == PAIRS["leml"][0]]
        for metric, published in LEML_XC[dataset].items():
            values = 100.0 * mine.loc[mine["metric"] == metric, "value"]
            if values.empty:
                continue
            mean, sd, n = _stats(values)
            diff = mean - published
            rows.append({"group": label, "dataset": dataset, "claim": "p", "metric": metric,
                         "method": PAIRS["leml"][0], "other": "published", "mean": mean,
                         "other_mean": published, "n": n, "verdict": verdict(diff, sd, n),
                         "figure": _with(f"{mean:.2f} vs {published:.2f} published "
                                         f"(difference {diff:+.2f} points, spread {sd:.2f}, "
                                         f"{_seeds(n)})", note)})
    return pd.DataFrame(rows)


def published_claims(run_dir: Path) -> pd.DataFrame:
    """Claim (p) on one LEML run of Bibtex or Delicious: each P@k of the run's LEML method
    beside the published figure (in %).  One run has no seed spread: the verdict is
    :data:`scarce.flows.claims.ONE_RUN`, and the figure names the experiment that judges it."""
    path = run_dir / "manifest.json"
    config = _manifest(run_dir).get("config") or {}
    dataset = _comparable(config, "this run", path)
    note = chosen_here("leml", config)
    metrics = pd.read_parquet(run_dir / "metrics.parquet")
    mine = metrics[metrics["method"].str.startswith("leml-")]
    rows = []
    for metric, published in LEML_XC[dataset].items():
        value = mine.loc[mine["metric"] == metric, "value"]
        if value.empty:
            continue
        got = 100.0 * float(value.iloc[0])
        rows.append({"group": dataset, "dataset": dataset, "claim": "p", "metric": metric,
                     "method": str(mine["method"].iloc[0]), "other": "published",
                     "mean": got, "other_mean": published, "n": 1,
                     "verdict": verdict(got - published, 0.0, 1),
                     "figure": _with(f"{got:.2f} vs {published:.2f} published (difference "
                                     f"{got - published:+.2f} points; {ONE_RUN} has no seed "
                                     f"spread: `scarce run experiment {SPLITS}` judges it over "
                                     "seeds)", note)})
    return pd.DataFrame(rows)


def claims_markdown(verdicts: pd.DataFrame) -> str:
    """The verdicts, one line each, under their group."""
    lines: list[str] = []
    for group, part in verdicts.groupby("group", sort=False):
        lines += [f"{group}:" if group else "all points:"]
        lines += [f"- {CLAIMS_TEXT[r.claim].format(**r._asdict())}: "
                  f"**{r.verdict}**, {r.figure}" for r in part.itertuples()]
        lines.append("")
    return "\n".join(lines)
