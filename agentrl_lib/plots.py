"""Learning curves and evaluation tables as matplotlib figures (saved as PNG).

Introduced in notebooks/00_quickstart.md §5.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt

if TYPE_CHECKING:  # the annotations' np.ndarray; the functions import numpy themselves
    import numpy as np

CURVES = [("success_rate", "success rate"), ("return_mean", "mean return"), ("invalid_rate", "invalid-action rate"),
          ("entropy", "entropy (nats/token)"), ("group_return_std", "within-group return std"),
          ("grad_norm", "grad norm")]


def save_and_close(fig, path: str | Path) -> None:
    """Write `fig` as a PNG and release it: a process that trains many runs (a sweep) keeps no figures alive."""
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_learning_curves(rows: list[dict], path: str | Path | None = None, title: str = ""):
    """One panel per metric in CURVES against the RL step; saves a PNG when `path` is given. Returns the figure
    (pass it to `save_and_close` or plt.close when it is not shown)."""
    fig, axes = plt.subplots(2, 3, figsize=(12, 6))
    steps = [r["step"] for r in rows]
    for ax, (key, label) in zip(axes.flat, CURVES):
        ax.plot(steps, [r.get(key, float("nan")) for r in rows], marker="o", ms=3)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig


def plot_stage_comparison(results: dict[str, dict], path: str | Path | None = None, title: str = "held-out games"):
    """Bar chart of success rate (and invalid-action rate) per stage, e.g. {'base': eval, 'SFT': eval, 'RL': eval}."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = list(results)
    succ = [results[n]["success_rate"] for n in names]
    inval = [results[n]["invalid_rate"] for n in names]
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], succ, width=0.4, label="success rate")
    ax.bar([i + 0.2 for i in x], inval, width=0.4, label="invalid-action rate")
    ax.set_xticks(list(x), names)
    ax.set_ylim(0, 1.05)
    ax.legend()
    ax.set_title(title)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig


# ------------------------------------------------------------------------------------------------ sweeps
def _cell_value(record: dict, axis: str):
    """The value of `axis` in a record: its cell's (a grid axis or a tag)."""
    return record.get("cell", {}).get(axis)


def _selected(records: list[dict], where: dict | None) -> list[dict]:
    return [r for r in records if all(_cell_value(r, k) == v for k, v in (where or {}).items())]


def seed_curves(records: list[dict], metric: str) -> tuple[list[int], "np.ndarray"]:
    """Per-step values of `metric` (a records.STEP_KEYS name) of several runs as an array (runs, steps), NaN where a run
    has no value; steps are the union of the runs' step numbers. Returns (steps, values)."""
    import numpy as np

    steps = sorted({s["step"] for r in records for s in r.get("steps", [])})
    col = {s: i for i, s in enumerate(steps)}
    values = np.full((len(records), len(steps)), np.nan)
    for i, r in enumerate(records):
        for s in r.get("steps", []):
            if s.get(metric) is not None:
                values[i, col[s["step"]]] = s[metric]
    return steps, values


def plot_sweep_curves(records: list[dict], metric: str = "success_rate", by: str = "algo", ax=None,
                      where: dict | None = None, label_eval: bool = True):
    """Training curves of a sweep: one line per value of the cell axis `by` (mean over seeds) with a min–max band,
    `metric` (a per-step key of records.STEP_KEYS, e.g. success_rate of the training rollouts) against the step.

    Args:
        records: sweep records (records.load_results); `where` keeps those whose cell matches
            ({"reward.kind": "dense"}).
        label_eval: add each line's held-out success (mean over seeds) to its legend label.
    Returns: the matplotlib Axes. Raises ValueError when no record matches `where` or lacks the axis `by`.
    """
    import numpy as np

    chosen = _selected(records, where)
    values = sorted({_cell_value(r, by) for r in chosen if _cell_value(r, by) is not None}, key=str)
    if not values:
        raise ValueError(f"no record with a cell value for {by!r}" + (f" where {where}" if where else ""))
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.2))
    for v in values:
        runs = [r for r in chosen if _cell_value(r, by) == v]
        steps, y = seed_curves(runs, metric)
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a step where every seed is NaN
                mean, lo, hi = np.nanmean(y, 0), np.nanmin(y, 0), np.nanmax(y, 0)
        label = f"{v}"
        if label_eval:
            ev = [r["eval"]["success_rate"] for r in runs if r.get("eval")]
            label += f" (held-out {np.mean(ev):.0%}, n={len(ev)})" if ev else ""
        (line,) = ax.plot(steps, mean, label=label)
        ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("RL step")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title=by, title_fontsize=8)
    return ax


def plot_cell_means(records: list[dict], metric: str = "eval.success_rate", x: str = "sft.demos",
                    hue: str | None = None, ax=None, label: str | None = None):
    """A record metric (report.metric_value path, e.g. eval.success_rate or evals.hard.success_rate) against a numeric
    cell axis `x`: each seed a dot, the mean a line (one line per value of `hue`, if given).
    Returns the Axes. Raises ValueError when no record has a value for `x` and `metric`."""
    import numpy as np

    from .report import metric_value

    groups: dict = {}
    for r in records:
        xv, yv = _cell_value(r, x), metric_value(r, metric)
        if xv is None or yv is None:
            continue
        groups.setdefault(_cell_value(r, hue) if hue else None, {}).setdefault(xv, []).append(yv)
    if not groups:
        raise ValueError(f"no record has both {x!r} and {metric!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.2))
    for h, pts in sorted(groups.items(), key=lambda kv: str(kv[0])):
        xs = sorted(pts)
        (line,) = ax.plot(xs, [np.mean(pts[v]) for v in xs], marker="o",
                          label=label or (f"{hue}={h}" if hue else metric))
        for v in xs:
            ax.scatter([v] * len(pts[v]), pts[v], color=line.get_color(), alpha=0.4, s=12)
    ax.set_xlabel(x)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


# ------------------------------------------------------------------------------------------------ diagnostics
DIAGNOSTIC_PANELS = [
    ("success rate", [("success_rate", "training success")]),
    ("reward spread", [("group_return_std", "within-group return std"), ("zero_std_group_frac", "zero-std groups")]),
    ("entropy (nats/token)", [("entropy", "entropy")]),
    ("grad norm", [("grad_norm", "grad norm (before clipping)")]),
    ("invalid / repetition", [("invalid_rate", "invalid-action rate"), ("repetition_rate", "repetition rate")]),
]
"""The panels of plot_diagnostics: (title, [(metrics key, legend label), ...])."""

ALERT_COLORS = {"reward_std_collapse": "tab:red", "grad_norm_spike": "tab:purple", "invalid_rising": "tab:orange",
                "repetition_rising": "tab:brown"}
"""The color of each diagnostics.KINDS alert marker."""


def plot_diagnostics(rows_or_record, alerts: list | None = None, title: str = "", path: str | Path | None = None):
    """Echo-Trap diagnostics of one run as small multiples against the RL step (DIAGNOSTIC_PANELS: success rate,
    within-group return std and zero-std group fraction, entropy, grad norm, invalid and repetition rate), with a
    dashed vertical line at each alert's step in every panel (colour by kind, ALERT_COLORS).

    Args:
        rows_or_record: metrics rows (metrics.jsonl) or a sweep record (its "steps"). A key a row lacks or holds
            null for is a gap; a panel with no value at all says so.
        alerts: Alert objects or their dicts; None → diagnostics.read_alerts(rows_or_record) (the logged ones, or a
            replay through a default CollapseDetector for records written before the detector).
        path: save a PNG there as well.
    Returns: the matplotlib Figure. Raises ValueError when there are no rows.
    Introduced in notebooks/05_stability.md.
    """
    from .diagnostics import read_alerts

    rows = rows_or_record.get("steps", []) if isinstance(rows_or_record, dict) else list(rows_or_record)
    if not rows:
        raise ValueError("plot_diagnostics: no metrics rows to plot")
    if alerts is None:
        alerts = read_alerts(rows_or_record)
    alerts = [a if isinstance(a, dict) else a.to_dict() for a in alerts]
    fig, axes = plt.subplots(1, len(DIAGNOSTIC_PANELS), figsize=(3.2 * len(DIAGNOSTIC_PANELS), 3.0), sharex=True)
    steps = [r.get("step") for r in rows]
    for ax, (panel, keys) in zip(axes, DIAGNOSTIC_PANELS):
        drawn = False
        for key, label in keys:
            ys = [r.get(key) for r in rows]
            ys = [float("nan") if y is None else y for y in ys]
            if all(y != y for y in ys):
                continue
            ax.plot(steps, ys, marker="o", ms=2.5, label=label)
            drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "not logged", transform=ax.transAxes, ha="center", va="center", color="gray")
        for a in alerts:
            ax.axvline(a["step"], color=ALERT_COLORS.get(a["kind"], "k"), ls="--", lw=1, alpha=0.8)
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
        if len(keys) > 1 and drawn:
            ax.legend(fontsize=7)
    if alerts:
        from matplotlib.lines import Line2D

        kinds = list(dict.fromkeys(a["kind"] for a in alerts))
        fig.legend([Line2D([], [], color=ALERT_COLORS.get(k, "k"), ls="--") for k in kinds],
                   [f"alert: {k}" for k in kinds], loc="lower center", ncol=len(kinds), fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.08 if alerts else 0, 1, 1))
    if path:
        fig.savefig(path, dpi=100)
    return fig
