"""Learning curves and evaluation tables as matplotlib figures (saved as PNG).

Introduced in notebooks/00_quickstart.md §5.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

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
    """Per-step values of `metric` (a sweep.STEP_KEYS name) of several runs as an array (runs, steps), NaN where a run
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
    `metric` (a per-step key of sweep.STEP_KEYS, e.g. success_rate of the training rollouts) against the step.

    Args:
        records: sweep records (sweep.load_records); `where` keeps those whose cell matches ({"reward.kind": "dense"}).
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
    """A record metric (sweep.metric_value path, e.g. eval.success_rate or evals.hard.success_rate) against a numeric
    cell axis `x`: each seed a dot, the mean a line (one line per value of `hue`, if given).
    Returns the Axes. Raises ValueError when no record has a value for `x` and `metric`."""
    import numpy as np

    from .sweep import metric_value

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
