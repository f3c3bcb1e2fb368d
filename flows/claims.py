"""Chen et al.'s claims checked on a relation-discovery experiment: ``scarce claims RUN_ID``
(LEML's and StRip's: :mod:`scarce.flows.paper_claims`).

Chen, Ji, Tan and Niu (2005) make four claims a reader can check on any labelled corpus
without giving the method the answer:

(a) entropy-based feature selection beats Hasegawa et al. (2004) run at the true k;
(b) it beats RLBaseline, the same resampling search over every word (at its own chosen k);
(c) the chosen k is within 3 of the true number of types;
(d) the chosen k is stable: the same on 4 of 5 seeds.

An experiment over ``relations`` (``configs/experiments/relations-corpora.yaml``,
``relations-windows.yaml``) holds everything needed: its ``table.parquet`` has every metric of
every child run (accuracy, ARI and V of the method and the baselines, the chosen and the true
k), and each child's ``outputs/model/model.json`` the words the search kept out of the
vocabulary.  The groups are the experiment table's rows (the corpus, the window); the other
axes (the seeds) are the repetitions.

A comparison *holds* when the mean accuracy over the repetitions is ahead by more than the
larger of the two standard deviations (the seed-to-seed spread), *fails* when it is behind by
more than that, and is *level* otherwise; (c) and (d) hold on at least 4 of 5 repetitions
(:data:`SHARE`).  Where (b) is not met, the count of repetitions whose search kept every word
says whether the subset search ever left the baseline's feature set; the children's subset
searches (their ``relations-subsets`` entries in the store) say for how many k the prefix F_k
was every word or the smallest one the coverage threshold theta allows, and how much larger the
criterion trace(P_W^-1 P_B) is on every word than on that smallest prefix.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from scarce.flows.manifest import read_manifest
from scarce.tasks.errors import InputError

__all__ = ["ONE_RUN", "SHARE", "K_TOLERANCE", "claims", "claims_markdown", "read_experiment",
           "verdict", "read_experiments"]

#: Share of the repetitions on which (c) and (d) must hold: the paper's "4 of 5 seeds".
SHARE = 0.8
#: How far the chosen k may be from the true k for (c).
K_TOLERANCE = 3
BASELINES = {"a": "hasegawa-true-k", "b": "rl-baseline"}
#: The verdict of a comparison made once: it has no seed spread to be beyond.
ONE_RUN = "one run"
METRICS = ("accuracy", "ari", "v_measure")


def read_experiment(run_dir: Path, runs_root: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The experiment's long table, the words each child kept, and its config.

    The words frame has the table's axes, ``n_features`` (words kept) and ``vocabulary_size``,
    one row per child, read from the child's ``outputs/model/model.json``.
    """
    manifest_path = run_dir / "manifest.json"
    manifest = read_manifest(run_dir)
    config = manifest.get("config") or {}
    if manifest.get("flow") != "experiment" or config.get("flow") != "relations":
        raise InputError("claims are Chen et al.'s: give the id of an experiment over the "
                         f"relations flow (this run is {manifest.get('flow')!r} over "
                         f"{config.get('flow')!r})", path=manifest_path)
    table = pd.read_parquet(run_dir / "outputs" / "table.parquet")
    children = json.loads((run_dir / "outputs" / "children.json").read_text())
    rows = []
    for child in children:
        if child.get("run_id") is None:
            continue
        model = runs_root / child["run_id"] / "outputs" / "model" / "model.json"
        try:
            doc = json.loads(model.read_text())
        except FileNotFoundError:
            raise InputError("the child run's model is gone (its run folder was removed)",
                             path=model) from None
        rows.append({**child["point"], "n_features": int(doc["n_features"]),
                     "vocabulary_size": int(doc["vocabulary_size"]),
                     **_subset_search(runs_root / child["run_id"])})
    return table, pd.DataFrame(rows), config


def _growth(ratio: float) -> str:
    """A seed's criterion ratio as ``scarce claims`` prints it ("none feasible" without a
    feasible prefix at any k)."""
    return "none feasible" if pd.isna(ratio) else f"{ratio:.1f}"


def _subset_search(child_dir: Path) -> dict:
    """How the child's subset search chose F_k, from its ``relations-subsets`` entries: for
    how many k F_k was every word (``k_every_word``) or the smallest prefix with coverage at
    least theta (``k_smallest``), of ``k_count``; for how many no prefix reached theta
    (``k_no_feasible``: F_k is then the prefix of largest coverage); and the median over k of
    the criterion on every word over the criterion on the smallest feasible prefix
    (``growth``).  Empty when
    the child's manifest does not name those entries (nothing to read)."""
    from scarce.flows.environment import default_store_root
    from scarce.tasks.store import Store
    from scarce.tasks.store.encoding import CorruptEntry

    if not (child_dir / "manifest.json").is_file():
        return {}
    manifest = read_manifest(child_dir)
    refs = {o["ref"].rsplit("-", 1)[-1]: o["ref"] for o in manifest.get("outputs", ())
            if o.get("step") == "relations-subsets"}
    if not {"search", "subsets"} <= set(refs):
        return {}
    # Today's store ($SCARCE_STORE or the project's): the path a manifest recorded is a fact
    # about the past, never a place to read or write (a copied project would reach the old one).
    store = Store(default_store_root())
    try:
        search, subsets = store.read(refs["search"]), store.read(refs["subsets"])
    except (FileNotFoundError, KeyError, CorruptEntry):
        raise InputError("the child's subset search is gone from the store (was the store "
                         "cleaned, or moved?)", path=child_dir / "manifest.json") from None
    feasible = search[search["feasible"]]
    every = int(search["n_features"].max())
    smallest = feasible.groupby("k")["n_features"].min()
    chosen = subsets.set_index("k")["n_features"]
    crit = feasible.set_index(["k", "n_features"])["criterion"]
    growth = [crit[(k, every)] / crit[(k, n)] for k, n in smallest.items()
              if (k, every) in crit.index and crit[(k, n)] > 0]
    return {"k_count": int(len(chosen)),
            "k_no_feasible": int(len(set(chosen.index) - set(smallest.index))),
            "k_every_word": int((chosen == every).sum()),
            "k_smallest": int((chosen == smallest.reindex(chosen.index)).sum()),
            "growth": float(pd.Series(growth).median()) if growth else float("nan")}


def _method_of(part: pd.DataFrame, group) -> str:
    """The method of a group's rows: the one whose chosen k is recorded."""
    names = part.loc[part["metric"] == "k_chosen", "method"].unique().tolist()
    if len(names) != 1:
        raise InputError(f"group {group!r} of the table has {len(names)} methods with a chosen k "
                         f"({', '.join(map(str, names)) or 'none'}); expected one")
    return str(names[0])


def read_experiments(run_dirs: list[Path], runs_root: Path
                     ) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Several experiments' tables and words as one, grouped by the union of their row axes.

    A run without one of those axes takes its value from its base config (the entropy
    ranking of ``relations-corpora`` beside the ``ranking`` axis of ``relations-rankings``).
    With one row axis the group is that column; with several, a column named by the axes
    joined with ", " whose values are joined the same way.  Returns (table, words, group).
    """
    read = [(d, *read_experiment(d, runs_root)) for d in run_dirs]
    axes: list[str] = []
    for _, _, _, config in read:
        axes += [a for a in config["table"]["rows"] if a not in axes]
    tables, words = [], []
    for run_dir, table, kept, config in read:
        base = config.get("base_config") or {}
        for axis in axes:
            if axis in table.columns:
                continue
            if axis not in base:
                raise InputError(f"this experiment has no axis {axis!r} and its base config no "
                                 f"such key, so its rows cannot join the others'",
                                 path=run_dir / "manifest.json")
            table = table.assign(**{axis: base[axis]})
            kept = kept.assign(**{axis: base[axis]})
        tables.append(table)
        words.append(kept)
    table = pd.concat(tables, ignore_index=True)
    words = pd.concat(words, ignore_index=True)
    for frame in (table, words):  # labels, so that a None axis value is a group of its own
        for axis in axes:
            frame[axis] = frame[axis].map(_axis_label).astype(str)
    if len(axes) == 1:
        return table, words, axes[0]
    group = ", ".join(axes)
    for frame in (table, words):
        if len(frame):
            frame[group] = frame[axes].agg(", ".join, axis=1)
        else:
            frame[group] = pd.Series(dtype=str)
    return table, words, group


def _axis_label(value) -> str:
    """An axis value as its group reads: None (a base config's ``prefix_step: null``, which
    pandas turns to NaN beside numbers) as "none", and 200.0 (an integer that the same
    beside-None made a float) as "200"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "none"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def verdict(diff: float, spread: float, n: int | None = None) -> str:
    """``holds`` when ``diff`` is ahead by more than ``spread`` (the seed-to-seed spread),
    ``fails`` when behind by more, ``level`` otherwise.

    ``n``, the repetitions the difference was measured over: below 2 there is no spread to be
    beyond, and the verdict is :data:`ONE_RUN`, never ``holds``.  None: not counted (Chen et
    al.'s claims, whose experiments repeat every point over seeds).
    """
    if n is not None and n < 2:
        return ONE_RUN
    if diff > spread:
        return "holds"
    if diff < -spread:
        return "fails"
    return "level"


def claims(table: pd.DataFrame, words: pd.DataFrame, group: str, method: str | None = None
           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per group: the scores (mean and standard deviation over the repetitions) and the
    verdicts on (a) to (d), with the figures behind each.

    ``method`` names the method's rows; None takes, in each group, the method whose chosen k
    the table records (the ranking of the run: entropy, frequency or chi2).
    """
    ok = table[table["error"].isna()] if "error" in table else table
    scores = (ok[ok["metric"].isin(METRICS)]
              .groupby([group, "method", "metric"], sort=False)["value"]
              .agg(mean="mean", std="std", n="count")
              .fillna({"std": 0.0})  # one repetition: no spread
              .reset_index())
    verdicts = []
    for g, part in ok.groupby(group, sort=False):
        acc = part[part["metric"] == "accuracy"].groupby("method")["value"]
        mean, std = acc.mean(), acc.std(ddof=1).fillna(0.0)
        name = method or _method_of(part, g)
        mine = part[part["method"] == name]
        k = mine[mine["metric"] == "k_chosen"]["value"].astype(int).tolist()
        k_true = int(mine[mine["metric"] == "k_true"]["value"].iloc[0])
        n = len(k)
        kept = words[words[group] == g] if len(words) else words
        every = int((kept["n_features"] == kept["vocabulary_size"]).sum()) if len(kept) else 0
        for claim, other in BASELINES.items():
            if other not in mean:
                continue
            diff, spread = mean[name] - mean[other], max(std[name], std[other])
            verdicts.append({group: g, "method": name, "claim": claim,
                             "verdict": verdict(diff, spread),
                             "figure": f"{mean[name]:.3f} vs {mean[other]:.3f} "
                                       f"(difference {diff:+.3f}, spread {spread:.3f})"})
        near = sum(abs(x - k_true) <= K_TOLERANCE for x in k)
        verdicts.append({group: g, "method": name, "claim": "c",
                         "verdict": "holds" if near >= SHARE * n else "fails",
                         "figure": f"within {K_TOLERANCE} of {k_true} on {near} of {n} "
                                   f"(chosen k {', '.join(map(str, k))})"})
        counts = pd.Series(k).value_counts()
        mode, count = (counts.index[0], int(counts.iloc[0])) if n else (None, 0)
        verdicts.append({group: g, "method": name, "claim": "d",
                         "verdict": "holds" if count >= SHARE * n else "fails",
                         "figure": f"k = {mode} on {count} of {n}"})
        if len(kept):
            verdicts.append({group: g, "method": name, "claim": "every word kept",
                             "verdict": f"{every} of {n}",
                             "figure": "words kept " + ", ".join(
                                 f"{a:,}/{b:,}" for a, b in zip(kept["n_features"],
                                                               kept["vocabulary_size"],
                                                               strict=True))})
        if "k_count" in kept and kept["k_count"].notna().all():
            total = int(kept["k_count"].sum())
            verdicts.append({
                group: g, "method": name, "claim": "F_k",
                "verdict": f"every word for {int(kept['k_every_word'].sum())} of {total}",
                "figure": f"no prefix reached coverage theta for "
                          f"{int(kept['k_no_feasible'].sum())} (F_k is then the prefix of "
                          f"largest coverage); "
                          f"the smallest feasible prefix for {int(kept['k_smallest'].sum())}; "
                          f"criterion on every word / on the smallest feasible prefix, median "
                          f"over k: {', '.join(_growth(x) for x in kept['growth'])}"})
    return scores, pd.DataFrame(verdicts)


CLAIMS_TEXT = {"a": "(a) {method} selection beats Hasegawa et al. (true k)",
               "b": "(b) {method} selection beats RLBaseline",
               "c": f"(c) the chosen k is within {K_TOLERANCE} of the truth",
               "d": "(d) the same k on 4 of 5 seeds",
               "every word kept": "the subset search kept every word on",
               "F_k": "F_k, (seed, k) pairs"}


def claims_markdown(scores: pd.DataFrame, verdicts: pd.DataFrame, group: str) -> str:
    """Scores as a table (mean ± standard deviation), then the verdicts of each group."""
    wide = scores.assign(cell=[f"{m:.3f} ± {s:.3f}" for m, s in
                               zip(scores["mean"], scores["std"], strict=True)])
    wide = wide.pivot(index=[group, "method"], columns="metric", values="cell")
    order = pd.MultiIndex.from_frame(scores[[group, "method"]].drop_duplicates())
    wide = wide.reindex(index=order, columns=[m for m in METRICS if m in wide.columns])
    wide = wide.reset_index()
    names = {"accuracy": "accuracy", "ari": "ARI", "v_measure": "V"}
    head = [group, "method", *(names[m] for m in METRICS if m in wide.columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in wide.itertuples(False)]
    for g, part in verdicts.groupby(group, sort=False):
        lines += ["", f"{group} = {g}:"]
        lines += [f"- {CLAIMS_TEXT[r.claim].format(method=r.method)}: **{r.verdict}**, "
                  f"{r.figure}" for r in part.itertuples()]
    return "\n".join(lines) + "\n"
