"""The LEML flow's stages: the data loaded, the training data drawn, the number of iterations
chosen (a tuning, early stopping, or the config's), the alternation run, the baselines.

Each stage takes the run (``ctx``), the plan of where the data lives
(:class:`scarce.tasks.leml_plan.LemlPlan`, through which every step runs) and the parts of the
config it reads; none branches on where the data lives.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scarce.algorithms.leml import LEML
from scarce.tasks.errors import InputError
from scarce.tasks.leml import (
    alternate_H,
    alternate_W,
    baseline,
    baseline_params,
    check_parts,
    check_training_rows,
    early_split,
    task_params,
    tune,
)
from scarce.tasks.leml_files import label_file
from scarce.tasks.leml_plan import LemlPlan, Placed, xy
from scarce.tasks.leml_table import load_table, table_space
from scarce.tasks.steps import cached_file_sha256, log_both


@dataclass(frozen=True)
class Loaded:
    """The loaded training and test sets: per file (one, or the parts of a folder) the
    ``leml-load`` refs; ``test`` None when the metrics are of held-out training rows;
    ``folder``: the training set is a folder of parts; ``rows``: its rows; ``path``: the
    training set as the config names it (errors name it), ``first``: its file or first
    part."""

    train: list[dict]
    test: list[dict] | None
    folder: bool
    rows: int
    path: Path
    first: Path

    @property
    def maps(self) -> dict:
        """The training file's refs: its index maps name the model's columns."""
        return self.train[0]


@dataclass(frozen=True)
class Training:
    """The training data: ``data``, ``{"train", "mask"}`` refs (``train`` None when the
    whole is not needed), ``validation`` refs held out of it (or None) and, for a folder,
    ``blocks``: the parts as row blocks (per part its X, Y and mask refs)."""

    data: dict
    validation: dict | None
    blocks: list[dict] | None


def load_sets(ctx, plan: LemlPlan, d: Any, dtype: str, files: dict) -> Loaded:
    """The training set and, when the metrics are of the test set, the test set (``d``: the
    dataset config), each file or part read on its own, checked as far as they tell: the
    training rows are enough (counted from the heads where they tell, XC and Parquet; an
    ARFF file or a table tells only once read), the test set has labels (a file as it is
    read; the parts of a folder once all are: a part alone may have none)."""
    train = _load_parts(ctx, plan, d, dtype, files["train"], labelled=len(files["train"]) == 1)
    rows = sum(ctx.store.shape(p["X"])[0] for p in train)
    check_training_rows(rows, d.validation_fraction if len(train) == 1 else 0.0,
                        ctx.path(d.train))
    test = (_load_parts(ctx, plan, d, dtype, files["test"], labelled=len(files["test"]) == 1)
            if d.evaluate_on == "test" else None)
    for which, parts in (("train", train), ("test", test)):
        if parts is not None and len(parts) > 1:
            check_parts([ctx.store.path(p["X"]) for p in parts],
                        [ctx.store.path(p["Y"]) for p in parts], ctx.path(getattr(d, which)),
                        key=f"dataset.{which}")
    path = ctx.path(d.train)
    return Loaded(train, test, len(train) > 1 or path.is_dir(), rows, path, files["train"][0])


def _load_parts(ctx, plan: LemlPlan, d: Any, dtype: str, files: list,
                labelled: bool = False) -> list[dict]:
    """The ``leml-load`` refs of ``files`` (already checked to agree on the numbers of
    features and labels by :func:`scarce.tasks.leml.check_inputs`), each read on its own where the
    data lives; ``labelled``: the one file is the training set, refused when no point has a
    label (a part of a folder may have none)."""
    if d.format == "table":
        return _load_tables(ctx, d, dtype, files, labelled)
    read = dict(format=d.format, dtype=dtype, n_labels=d.n_labels, normalize=d.normalize)
    return [plan.load(f, label_file(f, d.format), labelled, **read) for f in files]


def _load_tables(ctx, d: Any, dtype: str, files: list, labelled: bool) -> list[dict]:
    """The ``leml-load-table`` refs of the tables ``files`` in the training table's space
    (``leml-table-space``: its labels and vectoriser, learned from the training table only),
    with the space's refs as each file's index maps, as :func:`_load_parts` gives them."""
    train = ctx.path(d.train)
    label_list = None if d.table.label_list is None else ctx.path(d.table.label_list)
    space = ctx.run(table_space, path=train, table=d.table.options(), label_list=label_list)
    maps = {part: ctx.store.path(space[part]) for part in ("features", "labels")}
    loaded = [ctx.run(load_table, path=f, table=d.table.options(), dtype=dtype,
                      normalize=d.normalize, labelled=labelled, **maps) for f in files]
    return [{**loaded_xy, "features": space["features"], "labels": space["labels"]}
            for loaded_xy in loaded]


def training_data(ctx, plan: LemlPlan, loaded: Loaded, d: Any, observed_fraction: float,
                  seed: int, whole: bool) -> Training:
    """The training data the model learns from (see :class:`Training`); ``whole``: the whole
    is stacked (:meth:`LemlPlan.needs_whole`).

    One file: the validation rows held out of it, then the mask drawn over the rest.  A
    folder: each part's mask drawn from (seed, part), the parts stacked only when the whole
    is needed; no validation split (refused)."""
    parts = loaded.train
    if not loaded.folder:
        train, validation = plan.hold_out(xy(parts[0]), d.validation_fraction, seed)
        mask = plan.observe(train["Y"], observed_fraction, seed) if observed_fraction < 1 else None
        return Training({"train": train, "mask": mask}, validation, None)
    if d.validation_fraction > 0:
        raise InputError("a folder of parts is read part by part; hold out validation rows in "
                         "a file of their own (validation_fraction 0 here)",
                         path=ctx.path(d.train), key="dataset.validation_fraction")
    masks = [None] * len(parts)
    if observed_fraction < 1:
        masks = [plan.observe(p["Y"], observed_fraction, seed, part=i)
                 for i, p in enumerate(parts)]
    blocks = [{"X": p["X"], "Y": p["Y"], **({} if mk is None else {"mask": mk})}
              for p, mk in zip(parts, masks, strict=True)]
    train = plan.stacked(parts) if whole else None
    mask = None if masks[0] is None or not whole else plan.stack_masks(masks)
    return Training({"train": train, "mask": mask}, None, blocks)


def tunes(ctx, t: Any, loaded: Loaded) -> bool:
    """Whether the run tunes (``t``: the tune config, ``tune.when``), said in the log when
    ``auto`` decides not to."""
    if t.when == "never":
        return False
    if loaded.folder:
        if t.when == "always":
            raise InputError("tuning holds out rows of one training file; a folder of parts is "
                             "read part by part: give a file, or tune.when never",
                             path=loaded.path, key="tune.when")
        return _not_tuned(ctx, "a folder of parts (tune.when auto)")
    if t.when == "auto" and cached_file_sha256(loaded.first) in set(t.chosen_on):
        return _not_tuned(ctx, "the bundled defaults were chosen on this training file "
                          "(tune.chosen_on); tune.when always tunes it too")
    n_rows = loaded.rows
    held = round(t.validation_fraction * n_rows)
    if t.when == "auto" and held < t.min_rows:
        return _not_tuned(ctx, f"{held:,} held-out rows of {n_rows:,} are fewer than "
                          f"tune.min_rows {t.min_rows} (tune.when always tunes anyway)")
    return True


def _not_tuned(ctx, why: str) -> bool:
    """Say why ``tune.when auto`` keeps the config's values (the log and the manifest's
    notes); False."""
    log_both(logging.INFO, f"not tuned: {why}")
    ctx.record.note("tuning", f"not tuned: {why}")
    return False


def tune_on_held_out(ctx, plan: LemlPlan, t: Any, seed: int, model: LEML, data: dict,
          floor: int) -> int:
    """Rank and lambda chosen on held-out training rows (``t``: the tune config;
    ``leml-tune``, each setting from a fresh start while the held-out score rises,
    :meth:`LEML.held_out_pass`), set on ``model``, a logged decision with the validation
    table as an artifact; returns the number of iterations the chosen setting's held-out
    score peaked at (the final training on every row runs that many).  ``floor``: the fewest
    rows on each side of the split."""
    params = {k: v for k, v in model.get_params().items() if k not in ("callback", "verbose")}
    params.update(early_stopping=False, random_state=seed)
    split_params = {"validation_fraction": t.validation_fraction, "random_state": seed}
    n_rows, n_labels = ctx.store.shape(data["train"]["Y"])
    n_features = ctx.store.shape(data["train"]["X"])[1] + int(bool(model.fit_intercept))
    held = round(t.validation_fraction * n_rows)
    if held < floor or n_rows - held < floor:
        raise InputError(f"tune.validation_fraction {t.validation_fraction:g} of {n_rows:,} "
                         f"training rows holds out {held:,}: tuning needs at least "
                         f"{floor} rows on each side (or tune.when never)",
                         key="tune.validation_fraction")
    fit, validation = plan.early_split(data, split_params)
    grid = tuning_grid(t.rank, t.lam, min(n_features, n_labels))
    started = time.perf_counter()
    result = ctx.run(tune, **fit, validation=validation, params=params, grid=grid,
                     k=int(t.metric.rsplit("@", 1)[1]))
    seconds = time.perf_counter() - started
    table = ctx.read(result["table"])
    best = table.loc[table["chosen"]].iloc[0]
    chosen = {"rank": int(best["rank"]), "lam": float(best["lam"])}
    iterations = int(best["best_iteration"])
    model.set_params(**chosen, outer_iterations=iterations, early_stopping=False)
    ctx.artifacts.table("tuning", result["table"],
                         f"Each setting's {t.metric} on {held:,} held-out training rows")
    ctx.record.name_output("tuning.parquet", result["table"])
    ctx.record.decide(
        "tuned", {**chosen, "outer_iterations": iterations},
        f"the best {t.metric} of {len(grid)} settings on {held:,} held-out training rows "
        f"(tune.validation_fraction {t.validation_fraction:g}), {float(best['score']):.4f} "
        f"after {iterations} iterations, in {seconds:.1f} s; then every training row with "
        "them (tune.when never keeps the config's values)")
    return iterations


def tuning_grid(ranks: list[int], lams: list[float], most: int) -> list[dict]:
    """The settings a tuning tries: every rank (a rank beyond ``most``, the features with the
    intercept or the labels, tried at ``most``, once) with every lambda, in order."""
    seen = list(dict.fromkeys(min(int(r), int(most)) for r in ranks))
    return [{"rank": r, "lam": float(lam)} for r in seen for lam in lams]


def stop_early(ctx, plan: LemlPlan, model: LEML, data: dict, loaded: Loaded) -> int:
    """The held-out pass of ``model.early_stopping`` (:meth:`LEML.fit` with it): the rows
    the estimator holds out (``leml-early-split``, its own split), the alternation on the
    others while the held-out P@1 rises (:meth:`LEML.no_gain`), and the best number of
    iterations, a logged decision."""
    if loaded.folder:
        raise InputError("early stopping holds out rows of one training file; a folder of "
                         "parts is read part by part: turn it off (false) or give a file",
                         path=loaded.path, key="model.early_stopping")
    fit, held = plan.early_split(data, task_params(model, early_split))
    ended: list[str] = []

    def stop(read: list) -> str | None:
        reason = model.no_gain([r["validation_p_at_1"] for r in read])
        ended[:] = [reason] if reason else []
        return reason

    _, traces, _ = alternate(ctx, plan, model, plan.place(fit, held), model.outer_iterations,
                             stop, "Early stopping: iterations on the rows not held out",
                             key="early-stopping")
    scores = [float(ctx.read(t)["validation_p_at_1"].iloc[0]) for t in traces]
    best = model.best_iteration(scores)
    why = ended[0] if ended else (
        model.converged([float(ctx.read(t)["objective"].iloc[0]) for t in traces])
        or f"model.outer_iterations = {model.outer_iterations} reached")
    held_rows = ctx.store.shape(held["X"])[0]
    ctx.record.decide("outer iterations", best,
                      f"model.early_stopping on {held_rows:,} held-out training rows "
                      f"(model.validation_fraction {model.validation_fraction:g}): {why}; "
                      f"then every training row for {best} iterations")
    ctx.record.note("early_stopping", {"validation_p_at_1": scores, "best_iteration": best})
    return best


def alternate(ctx, plan: LemlPlan, model: LEML, placed: Placed, iterations: int, stop=None,
              what: str = "Outer iterations", key: str = "iterations") -> tuple[dict, list, list]:
    """The start, then (alternate-W, alternate-H) up to ``iterations`` times: the last factors'
    refs, the iterations' trace refs and timing refs.

    After each iteration the loop ends when ``stop(traces)`` (the trace tables read so far)
    gives a reason, and when the estimator's ``tol`` rule says so (:meth:`LEML.converged`),
    as :meth:`LEML.fit` ends."""
    w_params, h_params = task_params(model, alternate_W), task_params(model, alternate_H)
    traces, timings, read = [], [], []
    with plan.fitting():
        factors = plan.initialise(model, placed)
        progress = ctx.artifacts.progress(key, iterations, f"{what} (of {iterations})")
        for t in range(1, iterations + 1):
            w = plan.w_step(placed, factors, t, w_params)
            h = plan.h_step(placed, w["W"], factors["H"], t, h_params)
            factors = {"W": w["W"], "H": h["H"]}
            traces.append(h["trace"])
            timings += [w["timings"], h["timings"]]
            progress.advance()
            if model.tol or stop is not None:  # the estimator's own rules, as its fit asks
                # the copy of the trace kept at its write (its file is still being written
                # behind: reading it would wait for the whole checkpoint before the next step)
                read.append(ctx.store.read_input(h["trace"]).iloc[0])
                if model.converged([r["objective"] for r in read]) is not None or (
                        stop is not None and stop(read) is not None):
                    break
    return factors, traces, timings


def baselines(ctx, names: list[str], alpha: float, rank: int, data: dict, test: dict | None,
              weights: str, dataset: str, batch_size: int) -> list[str]:
    """The metrics tables' refs of the baselines ``names`` (``leml-baseline``), each trained
    on the same observed entries ``data`` and scored on the ``test`` refs."""
    return [ctx.run(baseline, **data, test=test, propensity=weights, method=name,
                    dataset=dataset, batch_size=batch_size,
                    params=baseline_params(name, alpha=alpha, rank=rank))
            for name in names]
