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
