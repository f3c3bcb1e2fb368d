"""The table of past runs: one row per run with its settings and its method's headline metrics.

``scarce runs`` prints it and ``scarce.runs()`` returns it as a DataFrame, as ``mlflow
.search_runs`` or ``dvc exp show`` do: the run's id, flow, data set, a digest of its input
files (two runs that read one path are told apart when its bytes differ), status, start and
duration; every config value (a dotted key, ``model.rank``), of which only those that differ
between the listed runs are kept unless asked for; and the headline metrics of the flow's own
method (LEML's ``leml-*``, not the binary-relevance baseline beside it), with the method's name.
Everything is read from the runs' manifests: nothing is recomputed.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from scarce.flows.config import safe_load
from scarce.flows.manifest import (
    inputs_digest,
    read_manifest,
    run_dataset,
    run_folders,
    run_seconds,
)
from scarce.tasks.errors import InputError

#: The columns every table has, before the config values and the metrics.
RUN_COLUMNS = ["run_id", "flow", "dataset", "inputs", "status", "started", "seconds"]
#: Columns kept only when they differ between the listed runs (unless chosen), after these.
OPTIONAL_COLUMNS = ["runner", "tags"]
#: Tags the table's ``tags`` column leaves out: other columns show them.
SHOWN_TAGS = ("flow:", "dataset:", "runner:", "method:", "rerun-of:")

# The flow's own method among the methods of its metrics, by name prefix in order of
# preference (the first prefix any method has wins); a flow not named here shows the first
# method of its headline.  An apply run shows what its training flow would.
OWN_METHODS: dict[str, tuple[str, ...]] = {
    "leml": ("leml-",),
    "strip": ("strip-partial", "strip-labeled", "strip"),
}


def own_method(flow: str, methods: Sequence[str]) -> str | None:
    """The method of ``methods`` (in headline order) that is the flow's own, or None."""
    if not methods:
        return None
    for prefix in OWN_METHODS.get(flow.removeprefix("apply-"), ()):
        hit = next((m for m in methods if m.startswith(prefix)), None)
        if hit is not None:
            return hit
    return methods[0]


def flat_config(config: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys (``{"model": {"rank": 8}}`` -> ``{"model.rank": 8}``);
    a list is kept as its JSON text, so that a column holds one type and compares by value."""
    out: dict[str, Any] = {}
    if not isinstance(config, dict):
        return out
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flat_config(value, dotted + "."))
        elif isinstance(value, list | dict):
            out[dotted] = json.dumps(value, sort_keys=True)
        else:
            out[dotted] = value
    return out


def recorded_config(m: dict[str, Any]) -> dict[str, Any]:
    """A manifest's config as dotted keys (:func:`flat_config`)."""
    return flat_config(m.get("config"))


def manifest_tags(m: dict[str, Any]) -> list[str]:
    """The run's tags as recorded, or, for a run recorded before its tags were, those its
    manifest gives (flow, data set, runner, the run it reruns)."""
    if isinstance(m.get("tags"), list):
        return [str(t) for t in m["tags"]]
    tags = [f"flow:{m.get('flow')}"]
    dataset = run_dataset(m.get("config"))
    if dataset:
        tags.append(f"dataset:{dataset}")
    options = m.get("options") or {}
    tags.append(f"runner:{options.get('runner') or 'local'}")
    if options.get("rerun_of"):
        tags.append(f"rerun-of:{options['rerun_of']}")
    return tags


def _headline(m: dict[str, Any]) -> dict[str, Any]:
    """``method`` and the own method's headline metrics of a manifest (``dataset/method/
    metric`` keys, checked by :func:`scarce.flows.manifest.read_manifest`)."""
    headline = m.get("headline")
    if not headline:
        return {}
    split = [(k.rsplit("/", 2)[1], k.rsplit("/", 1)[1], float(v)) for k, v in headline.items()]
    method = own_method(str(m.get("flow", "")), list(dict.fromkeys(s[0] for s in split)))
    return {"method": method, **{metric: v for name, metric, v in split if name == method}}


def _row(run_dir: Path, m: dict[str, Any]) -> dict[str, Any]:
    options = m.get("options") or {}
    rerun_of = options.get("rerun_of")
    runner = "dask" if m.get("task_runner") == "DaskTaskRunner" else (
        options.get("runner") or "local")
    tags = manifest_tags(m)
    return {
        "run_id": run_dir.name,
        "flow": m["flow"],
        "dataset": run_dataset(m.get("config")),
        "inputs": inputs_digest(m),
        "status": f"rerun of {rerun_of}" if rerun_of else "finished",
        "started": str(m.get("started", ""))[:19].replace("T", " "),
        "seconds": run_seconds(m),
        "runner": runner,
        "tags": ",".join(t for t in tags if not t.startswith(SHOWN_TAGS)),
        "_tags": tags,
        "_config": recorded_config(m),
        "_headline": _headline(m),
    }


def parse_where(texts: Iterable[str]) -> list[tuple[str, Any]]:
    """``KEY=VALUE`` filters, the value read as YAML (``model.rank=8`` compares as a number)."""
    out = []
    for text in texts:
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--where expects KEY=VALUE, got {text!r}", key="--where")
        try:
            value = safe_load(raw) if raw.strip() else ""  # read as a config's values are
        except yaml.YAMLError:
            value = raw
        out.append((key.strip(), value))
    return out


def _matches(cell: Any, value: Any) -> bool:
    if cell is None or (isinstance(cell, float) and pd.isna(cell)):
        return value is None
    if isinstance(value, list | dict):
        value = json.dumps(value, sort_keys=True)
    if isinstance(cell, bool) or isinstance(value, bool):
        return cell is value or str(cell).lower() == str(value).lower()
    if isinstance(cell, int | float) and isinstance(value, int | float):
        return float(cell) == float(value)
    return str(cell) == str(value)


def _differs(column: pd.Series) -> bool:
    """Two of the runs that have the value (a config key of one flow is blank in the rows of
    another) hold different ones."""
    values = {json.dumps(v, sort_keys=True, default=str) for v in column.tolist()
              if v is not None and not (isinstance(v, float) and pd.isna(v))}
    return len(values) > 1


def _one_type(column: pd.Series) -> pd.Series:
    """A config column as one type: integers (some runs without the key) as pandas' nullable
    integers, not floats; mixed kinds (a number in one run, text in another) as text, so that
    the table writes to Parquet."""
    values = [v for v in column.tolist() if v is not None
              and not (isinstance(v, float) and pd.isna(v))]
    kinds = {type(v) for v in values}
    if kinds == {int}:
        return column.astype("Int64")
    if len(kinds) <= 1 or kinds == {int, float}:
        return column
    return column.map(lambda v: None if v is None else str(v))


def _unknown(what: str, name: str, columns: Sequence[str]) -> InputError:
    near = difflib.get_close_matches(name, columns, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(near)}?" if near else " (see --all-columns)"
    return InputError(f"no run has a column {name!r}{hint}", key=what)


def runs_table(runs_dir: Path, *, flow: str | None = None, tags: Sequence[str] = (),
               where: Sequence[str] = (), columns: Sequence[str] | None = None,
               all_columns: bool = False, warn: list[str] | None = None) -> pd.DataFrame:
    """The table of the finished runs under ``runs_dir``, oldest first.

    Parameters
    ----------
    runs_dir : Path
        The runs folder (``data/runs``).
    flow : str, optional
        Only the runs of this flow.
    tags : sequence of str
        Only the runs that carry every one of these tags (``dataset:bibtex``,
        ``experiment:rank``, ``rerun-of:RUN``; ``scarce runs RUN`` lists a run's).
    where : sequence of str
        ``KEY=VALUE`` filters on any column, config values and metrics included
        (``model.rank=8``, ``dataset=bibtex``); a value compares as a number when both are.
    columns : sequence of str, optional
        The columns to show after ``run_id``, in this order; by default the fixed columns, the
        runner and tags if they differ, the config values that differ between the listed
        runs of one flow, ``method`` and its metrics.
    all_columns : bool
        Every config value, whether it differs or not.
    warn : list of str, optional
        Collects a line per manifest left out (unreadable) or headline left out (malformed).

    Raises
    ------
    InputError
        A ``--where`` key or a chosen column that no listed run has.
    """
    warn = [] if warn is None else warn
    rows = []
    for d in run_folders(runs_dir):
        dropped: list[InputError] = []
        try:  # a malformed headline leaves out the metrics, not the run
            m = read_manifest(d, droppable=("headline",), dropped=dropped)
        except InputError as exc:
            warn.append(f"run {d.name}: {exc}; left out")
            continue
        warn += [f"run {d.name}: malformed headline metrics in its manifest ({exc}); left out"
                 for exc in dropped]
        if flow is not None and m["flow"] != flow:
            continue
        row = _row(d, m)
        if all(t in row["_tags"] for t in tags):
            rows.append(row)
    config_keys = list(dict.fromkeys(k for r in rows for k in r["_config"]))
    metric_keys = list(dict.fromkeys(k for r in rows for k in r["_headline"] if k != "method"))
    fixed = RUN_COLUMNS + OPTIONAL_COLUMNS
    # a config key named as a fixed column (a flow's own ``flow`` key) keeps its dotted name
    config_names = {k: (f"config.{k}" if k in fixed or k == "method" else k)
                    for k in config_keys}
    records = []
    for r in rows:
        record = {c: r[c] for c in fixed}
        record.update({config_names[k]: r["_config"].get(k) for k in config_keys})
        record["method"] = r["_headline"].get("method")
        record.update({k: r["_headline"].get(k) for k in metric_keys})
        records.append(record)
    names = fixed + [config_names[k] for k in config_keys] + ["method", *metric_keys]
    # object columns, so that an integer setting some runs lack stays an integer (_one_type)
    frame = pd.DataFrame(records, columns=names, dtype=object)
    for name in ["seconds", *metric_keys]:
        frame[name] = pd.to_numeric(frame[name]).astype("float64")
    for key, value in parse_where(where):
        if key not in frame.columns:
            raise _unknown("--where", key, list(frame.columns))
        frame = frame[[_matches(c, value) for c in frame[key].tolist()]]
    frame = frame.sort_values(["started", "run_id"], kind="stable").reset_index(drop=True)
    for name in config_names.values():
        frame[name] = _one_type(frame[name])
    for name in frame.columns:  # text columns as pandas' text type, as Parquet reads them
        if frame[name].dtype == object:
            frame[name] = frame[name].infer_objects()
    if columns is not None:
        unknown = [c for c in columns if c not in frame.columns]
        if unknown:
            raise _unknown("--columns", unknown[0], list(frame.columns))
        return frame[["run_id", *[c for c in columns if c != "run_id"]]]
    keep = list(RUN_COLUMNS)
    keep += [c for c in OPTIONAL_COLUMNS if _differs(frame[c])]
    # a config value differs between runs of one flow (a key two flows share, such as
    # ``window``, means a different thing in each)
    by_flow = [group for _, group in frame.groupby("flow", sort=False)]
    keep += [c for c in config_names.values()
             if all_columns or any(_differs(group[c]) for group in by_flow)]
    keep += [c for c in ["method", *metric_keys] if frame[c].notna().any()]
    return frame[keep]
