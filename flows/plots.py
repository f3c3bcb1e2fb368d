"""Figures for the Prefect UI: stored tables in, PNG bytes out.

Each function takes the tables a flow already stores (no data is recomputed here) and returns
the bytes of a small PNG (100 dpi).  The same tables give the same bytes: the figure is drawn
with matplotlib's Agg canvas (no pyplot, no global state) and written without the ``Software``
text chunk, and PNG carries no timestamp unless asked to.  matplotlib is imported inside the
functions so that importing a flow does not pay for it.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

DPI = 100
# Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")


def _figure(width: float, height: float, ncols: int = 1, nrows: int = 1, **kwargs: Any):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, **kwargs)
    return fig, axes.ravel().tolist()


def _wrap(title: str, width_inches: float, points: float = 12.0) -> str:
    """``title`` broken into lines that fit ``width_inches`` at ``points`` (a run's title
    names its data and settings, often wider than one panel; matplotlib clips a long title
    rather than wrapping it)."""
    chars = max(20, int(width_inches * 72 / (0.6 * points)))
    return "\n".join(textwrap.wrap(title, chars)) or title


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _require(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} lacks columns {missing}; it has {list(frame.columns)}")
    if frame.empty:
        raise ValueError(f"{what} is empty")


def _finite(values: Any) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    return arr[np.isfinite(arr)]


# ----------------------------------------------------------------------------- LEML
def leml_convergence(convergence: pd.DataFrame, title: str = "LEML convergence") -> bytes:
    """Objective (left axis) and validation P@1 (right axis, if any) over outer iterations.

    ``convergence`` is the ``convergence`` output of ``leml-evaluate``: ``iteration``,
    ``objective`` and optionally ``validation_p_at_1`` (a fraction; NaN without a validation
    split).  ``seconds`` is not drawn: it is volatile, and the figure should not be.
    """
    _require(convergence, ["iteration", "objective"], "convergence table")
    conv = convergence.sort_values("iteration")
    it = conv["iteration"].to_numpy(dtype=float)
    obj = conv["objective"].to_numpy(dtype=float)
    fig, (ax,) = _figure(6.4, 3.6)
    ax.plot(it, obj, "o-", color=COLOURS[0], label="objective")
    ax.set_xlabel("outer iteration")
    ax.set_ylabel("objective", color=COLOURS[0])
    ax.tick_params(axis="y", colors=COLOURS[0])
    ax.xaxis.get_major_locator().set_params(integer=True)
    finite = _finite(obj)
    if finite.size and finite.min() > 0 and finite.max() / finite.min() > 20:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    handles = ax.get_lines()
    if "validation_p_at_1" in conv.columns and _finite(conv["validation_p_at_1"]).size:
        right = ax.twinx()
        p1 = 100 * conv["validation_p_at_1"].to_numpy(dtype=float)
        handles += right.plot(it, p1, "s--", color=COLOURS[1], label="validation P@1 (%)")
        right.set_ylabel("validation P@1 (%)", color=COLOURS[1])
        right.tick_params(axis="y", colors=COLOURS[1])
    fig.legend(handles=handles, labels=[h.get_label() for h in handles],
               loc="outside lower center", ncols=len(handles), frameon=False)
    ax.set_title(_wrap(title, 6.4))
    return _png(fig)


# ----------------------------------------------------------------------------- relations
def relations_stability(
    curve: pd.DataFrame,
    chosen_k: int | None = None,
    subsets: pd.DataFrame | None = None,
    baseline_curve: pd.DataFrame | None = None,
    title: str = "Stability over k",
) -> bytes:
    """M_norm over k with its spread across subsamples; below it, the criterion of F_k.

    ``curve`` is the ``curve`` output of ``relations-choose`` (``k``, ``m_norm`` and, if
    present, ``m_std`` and ``n_features``); ``subsets`` the ``subsets`` output of
    ``relations-subsets`` (``k``, ``n_features``, ``criterion``); ``baseline_curve`` the
    RLBaseline's curve (stability on all words), drawn dashed.
    """
    _require(curve, ["k", "m_norm"], "stability curve")
    curve = curve.sort_values("k")
    panels = 2 if subsets is not None and not subsets.empty else 1
    fig, axes = _figure(6.4, 3.2 * panels + 0.4, nrows=panels, sharex=True)
    ax = axes[0]
    k = curve["k"].to_numpy(dtype=float)
    m = curve["m_norm"].to_numpy(dtype=float)
    if "m_std" in curve.columns:
        std = curve["m_std"].to_numpy(dtype=float)
        ax.fill_between(k, m - std, m + std, color=COLOURS[0], alpha=0.2, lw=0,
                        label="± std over subsamples")
    ax.plot(k, m, "o-", color=COLOURS[0], label="M_norm (selected words F_k)")
    if baseline_curve is not None and not baseline_curve.empty:
        _require(baseline_curve, ["k", "m_norm"], "baseline stability curve")
        b = baseline_curve.sort_values("k")
        ax.plot(b["k"].to_numpy(dtype=float), b["m_norm"].to_numpy(dtype=float), "s--",
                color=COLOURS[1], label="M_norm (all words, RLBaseline)")
    if chosen_k is not None:
        ax.axvline(chosen_k, color=COLOURS[2], ls=":", lw=1.5, label=f"chosen k = {chosen_k}")
    ax.set_ylabel("M_norm (Eq. 3)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    ax.set_title(_wrap(title, 6.4))
    ax.xaxis.get_major_locator().set_params(integer=True)
    if panels == 2:
        _require(subsets, ["k", "criterion"], "subsets table")
        s = subsets.sort_values("k")
        low = axes[1]
        sk = s["k"].to_numpy(dtype=float)
        low.plot(sk, s["criterion"].to_numpy(dtype=float), "o-", color=COLOURS[4],
                 label="criterion trace(P_W⁻¹ P_B) of F_k")
        low.set_ylabel("criterion", color=COLOURS[4])
        low.tick_params(axis="y", colors=COLOURS[4])
        low.grid(True, alpha=0.3)
        handles = low.get_lines()
        if "n_features" in s.columns:
            right = low.twinx()
            handles += right.plot(sk, s["n_features"].to_numpy(dtype=float), "^--",
                                  color=COLOURS[5], label="|F_k| (words)")
            right.set_ylabel("|F_k|", color=COLOURS[5])
            right.tick_params(axis="y", colors=COLOURS[5])
        if chosen_k is not None:
            low.axvline(chosen_k, color=COLOURS[2], ls=":", lw=1.5)
        fig.legend(handles=handles, labels=[h.get_label() for h in handles],
                   loc="outside lower center", ncols=len(handles), frameon=False,
                   fontsize="small")
    axes[-1].set_xlabel("k (number of clusters)")
    return _png(fig)


# ----------------------------------------------------------------------------- StRip
SCORE_LABELS = {"muc_f": "MUC", "b3_f": "B³", "ceaf_e_f": "CEAF-e", "pairwise_f": "pairwise"}
PHASES = ("grow", "prune", "optimize")


def _grouped_bars(ax, groups: list[str], series: dict[str, np.ndarray]) -> None:
    n = max(len(series), 1)
    width = 0.8 / n
    x = np.arange(len(groups), dtype=float)
    for i, (name, values) in enumerate(series.items()):
        bars = ax.bar(x + (i - (n - 1) / 2) * width, values, width, label=name,
                      color=COLOURS[i % len(COLOURS)])
        ax.bar_label(bars, fmt="%.3g", fontsize="x-small", padding=1)
    ax.set_xticks(x, groups)


def strip_comparison(
    scores: pd.DataFrame, phases: pd.DataFrame | None = None, title: str = "StRip on the test set"
) -> bytes:
    """F1 over the source mentions per method; beside it, the rule-set size after each phase.

    ``scores`` is the ``scores`` output of ``strip-evaluate`` (``method``, ``muc_f``, ``b3_f``,
    ``ceaf_e_f``, ``pairwise_f``, ``n_rules``); ``phases`` its ``timings`` output, of which
    only ``method``, ``phase`` and ``n_rules`` are drawn (never the seconds, which vary).
    """
    _require(scores, ["method"], "scores table")
    measures = [c for c in SCORE_LABELS if c in scores.columns]
    if not measures:
        raise ValueError(f"scores table has none of the columns {list(SCORE_LABELS)}")
    methods = scores["method"].astype(str).tolist()
    with_phases = phases is not None and not phases.empty
    fig, axes = _figure(10.0 if with_phases else 6.4, 3.8, ncols=2 if with_phases else 1)
    ax = axes[0]
    _grouped_bars(ax, [SCORE_LABELS[c] for c in measures],
                  {m: scores.loc[scores["method"] == m, measures].to_numpy(float)[0]
                   for m in methods})
    ax.set_ylim(0, 1.08)  # room for the value labels of F1 = 1
    ax.set_yticks(np.linspace(0.0, 1.0, 6))
    ax.set_ylabel("F1 over source mentions")
    # one legend for both panels: the same methods in the same colours
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center",
               ncols=len(methods), frameon=False)
    if with_phases:  # the run's title over both panels, each panel its own short one
        fig.suptitle(_wrap(title, 10.0))
        ax.set_title("Scores per measure")
    else:
        ax.set_title(_wrap(title, 6.4))
    ax.grid(True, axis="y", alpha=0.3)
    if with_phases:
        _require(phases, ["method", "phase", "n_rules"], "phase table")
        table = phases.pivot_table(index="method", columns="phase", values="n_rules",
                                   aggfunc="last")
        order = [p for p in PHASES if p in table.columns]
        right = axes[1]
        _grouped_bars(right, order,
                      {m: table.loc[m, order].to_numpy(float) for m in methods
                       if m in table.index})
        top = float(np.nanmax(table[order].to_numpy(float))) if order else 1.0
        right.set_ylim(0, max(1.0, math.ceil(top * 1.15)))
        right.yaxis.get_major_locator().set_params(integer=True)
        right.set_ylabel("rules")
        right.set_title("Rule-set size after each phase")
        right.grid(True, axis="y", alpha=0.3)
    return _png(fig)


def _short(text: str, width: int = 46) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def strip_rule_coverage(
    coverage: pd.DataFrame,
    methods: Sequence[str] | None = None,
    title: str = "Rule coverage on the test set",
) -> bytes:
    """Per method, what each rule adds to the chains: labelled pairs newly covered after closure.

    ``coverage`` is the ``coverage`` output of ``strip-evaluate`` (``method``, ``rule_id``,
    ``rule``, ``new_pos``, ``new_neg``): one panel per method, one pair of horizontal bars per
    rule in rule order (coreferent and non-coreferent labelled pairs it brings into a chain,
    links through unlabelled NPs included), the rule's text as its label.  ``methods`` (default:
    those in the table) sets the panels; a method without rules gets a panel saying so.
    """
    columns = ["method", "rule_id", "rule", "new_pos", "new_neg"]
    missing = [c for c in columns if c not in coverage.columns]
    if missing:
        raise ValueError(f"rule coverage table lacks columns {missing}; it has "
                         f"{list(coverage.columns)}")
    methods = list(dict.fromkeys(coverage["method"].astype(str))) if methods is None \
        else [str(m) for m in methods]
    if not methods:
        raise ValueError("rule coverage table is empty and no methods were given")
    counts = coverage["method"].astype(str).value_counts()
    heights = [0.7 + 0.34 * max(int(counts.get(m, 0)), 1) for m in methods]
    # one panel per method, stacked, each as tall as its rule list
    fig, axes = _figure(8.0, 0.8 + sum(heights), nrows=len(methods),
                        gridspec_kw={"height_ratios": heights})
    top = float(max(coverage["new_pos"].max(), coverage["new_neg"].max(), 1)) \
        if len(coverage) else 1.0
    for ax, method in zip(axes, methods, strict=True):
        part = coverage[coverage["method"].astype(str) == method].sort_values("rule_id")
        ax.set_title(method, fontsize="medium")
        if part.empty:
            ax.text(0.5, 0.5, "no rules: every pair is not coreferent", ha="center",
                    va="center", transform=ax.transAxes, fontsize="small")
            ax.set_axis_off()
            continue
        y = np.arange(len(part), dtype=float)
        for off, column, label, colour in ((-0.2, "new_pos", "coreferent", COLOURS[2]),
                                           (0.2, "new_neg", "not coreferent", COLOURS[1])):
            bars = ax.barh(y + off, part[column].to_numpy(float), 0.4, label=label, color=colour)
            ax.bar_label(bars, fmt="%d", fontsize="x-small", padding=1)
        ax.set_yticks(y, [f"R{r}: {_short(t)}" for r, t in zip(part["rule_id"], part["rule"],
                                                                 strict=True)],
                      fontsize="x-small")
        ax.invert_yaxis()  # the first rule on top
        ax.set_xlim(0, top * 1.18)
        ax.set_xlabel("labelled pairs newly covered after closure")
        ax.grid(True, axis="x", alpha=0.3)
    handles = [h for ax in axes for h in [ax.get_legend_handles_labels()] if h[0]]
    if handles:
        fig.legend(*handles[0], loc="outside lower center", ncols=2, frameon=False)
    fig.suptitle(_wrap(title, fig.get_figwidth()))
    return _png(fig)
