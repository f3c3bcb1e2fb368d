"""LEML's and StRip's claims checked on their runs and experiments: ``scarce claims RUN_ID``.

Yu, Jain, Kar and Dhillon (2014) claim that LEML
  (p) reaches the published P@1, P@3 and P@5 on Bibtex and Delicious (the Extreme
      Classification Repository's LEML row), checked on a LEML run of either set;
  (m) is ahead of binary relevance when labels are missing, checked on an experiment over
      ``leml`` whose rows include ``observed_fraction`` (``configs/experiments/
      leml-missing.yaml``): LEML against ``br-ridge`` trained on the same observed entries.
Stoyanov and Cardie (2006) claim that StRip with partial supervision
  (s) is ahead of RIPPER on B³ F1 and on pairwise F1, checked on an experiment over ``strip``
      (``strip-loss-ratio.yaml``): ``strip-partial`` against ``ripper``.

The verdict rule is that of Chen et al.'s claims (:mod:`flows.claims`): a comparison *holds*
when the mean over the repetitions (the seeds) is ahead by more than the larger of the two
standard deviations, *fails* when it is behind by more than that, and is *level* otherwise.
Against a published figure there is no spread: the run holds when above it, fails when below.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from scarce.flows.claims import verdict
from scarce.flows.manifest import read_manifest
from scarce.flows.published import LEML_XC
from scarce.flows.registry import FLOWS
from scarce.tasks.errors import InputError

#: The metrics each comparison of an experiment is made on.
LEML_METRICS = ("precision@1", "precision@3", "precision@5")
STRIP_METRICS = ("b3_f", "pairwise_f")
#: The methods compared: (the paper's, the one it claims to beat), by flow.
PAIRS = {"leml": ("leml", "br-ridge"), "strip": ("strip-partial", "ripper")}
#: The claim of each flow's experiment, and of a LEML run.
CLAIM = {"leml": "m", "strip": "s", "published": "p"}
CLAIMS_TEXT = {
    "p": "(p) LEML reaches the published {metric} on {group}",
    "m": "(m) LEML is ahead of binary relevance on {metric} with labels missing",
    "s": "(s) StRip with partial supervision is ahead of RIPPER on {metric}",
}


def _manifest(run_dir: Path) -> dict:
    return read_manifest(run_dir)  # its keys' types checked


def flow_of(run_dir: Path) -> str:
    """``relations``, ``leml`` or ``strip``: the flow an experiment ran, or ``published`` for
    a LEML run (checked against the published figures)."""
    m = _manifest(run_dir)
    flow = (m.get("config") or {}).get("flow")
    if m.get("flow") == "experiment" and flow in ("relations", "leml", "strip"):
        return str(flow)
    if m.get("flow") == "leml":
        return "published"
    what = f"an experiment over {flow!r}" if m.get("flow") == "experiment" else repr(m.get("flow"))
    raise InputError(f"claims are checked on an experiment over relations, leml or strip, or "
                     f"on a LEML run; this run is {what}", path=run_dir / "manifest.json")


def compare(table: pd.DataFrame, group: list[str], mine: str, other: str,
            metrics: tuple[str, ...], claim: str) -> pd.DataFrame:
    """Per value of the ``group`` columns and per metric: ``mine`` against ``other``, means and
    standard deviations over the other axes (the repetitions), and the verdict."""
    ok = table[table["error"].isna()] if "error" in table else table
    ok = ok[ok["metric"].isin(metrics) & ok["method"].isin([mine, other])]
    rows = []
    keys = group or None
    for g, part in (ok.groupby(keys, sort=False) if keys else [((), ok)]):
        g = g if isinstance(g, tuple) else (g,)
        for metric in metrics:
            values = part[part["metric"] == metric].groupby("method")["value"]
            mean, std = values.mean(), values.std(ddof=1).fillna(0.0)
            if mine not in mean or other not in mean:
                continue
            diff, spread = mean[mine] - mean[other], max(std[mine], std[other])
            rows.append({"group": ", ".join(f"{k} {v}" for k, v in zip(group, g, strict=True)),
                         "claim": claim, "metric": metric, "method": mine, "other": other,
                         "mean": mean[mine], "other_mean": mean[other],
                         "n": int(values.count()[mine]), "verdict": verdict(diff, spread),
                         "figure": f"{mean[mine]:.3f} vs {mean[other]:.3f} (difference "
                                   f"{diff:+.3f}, spread {spread:.3f}, "
                                   f"{int(values.count()[mine])} seeds)"})
    return pd.DataFrame(rows)


def experiment_claims(run_dir: Path, flow: str) -> pd.DataFrame:
    """The claim of a LEML or StRip experiment, from its ``table.parquet``: grouped by the
    table's row axes that are not ``method`` (LEML's also by ``model.loss`` when an axis)."""
    m = _manifest(run_dir)
    config = m.get("config") or {}
    table = pd.read_parquet(run_dir / "outputs" / "table.parquet")
    if flow == "leml":
        if "method_name" not in table.columns:  # recorded before the table named families
            table = table.assign(method=table["method"].str.replace(
                FLOWS["leml"].method_family, r"\1", regex=True))
        if "observed_fraction" not in config.get("axes", {}):
            raise InputError("LEML's claim (m) is on missing labels: give an experiment with "
                             "an observed_fraction axis (configs/experiments/leml-missing.yaml)",
                             path=run_dir / "manifest.json")
    rows = [a for a in (config.get("table") or {}).get("rows", []) if a in table.columns]
    mine, other = PAIRS[flow]
    metrics = LEML_METRICS if flow == "leml" else STRIP_METRICS
    return compare(table, rows, mine, other, metrics, CLAIM[flow])


def published_claims(run_dir: Path) -> pd.DataFrame:
    """Claim (p) on a LEML run of Bibtex or Delicious: each P@k of the run's LEML method
    against the published figure (in %)."""
    m = _manifest(run_dir)
    dataset = str(((m.get("config") or {}).get("dataset") or {}).get("name", ""))
    if dataset not in LEML_XC:
        raise InputError(f"the published LEML figures are for {', '.join(LEML_XC)}; this run is "
                         f"on {dataset!r}", path=run_dir / "manifest.json")
    if ((m.get("config") or {}).get("observed_fraction", 1.0) or 1.0) < 1.0:
        raise InputError("the published figures have every label observed; this run has "
                         "observed_fraction < 1", path=run_dir / "manifest.json")
    metrics = pd.read_parquet(run_dir / "metrics.parquet")
    mine = metrics[metrics["method"].str.startswith("leml-")]
    rows = []
    for metric, published in LEML_XC[dataset].items():
        value = mine.loc[mine["metric"] == metric, "value"]
        if value.empty:
            continue
        got = 100.0 * float(value.iloc[0])
        rows.append({"group": dataset, "claim": "p", "metric": metric,
                     "method": str(mine["method"].iloc[0]), "other": "published",
                     "mean": got, "other_mean": published, "n": 1,
                     "verdict": verdict(got - published, 0.0),
                     "figure": f"{got:.2f} vs {published:.2f} published "
                               f"(difference {got - published:+.2f} points)"})
    return pd.DataFrame(rows)


def claims_markdown(verdicts: pd.DataFrame) -> str:
    """The verdicts, one line each, under their group."""
    lines: list[str] = []
    for group, part in verdicts.groupby("group", sort=False):
        lines += [f"{group}:" if group else "all points:"]
        lines += [f"- {CLAIMS_TEXT[r.claim].format(metric=r.metric, group=r.group)}: "
                  f"**{r.verdict}**, {r.figure}" for r in part.itertuples()]
        lines.append("")
    return "\n".join(lines)
