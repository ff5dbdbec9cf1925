"""Learning curves, evaluation bars, sweep curves and diagnostics as matplotlib figures (saved as PNG).

Every axis is labelled with the glossary's name of what it shows and its unit (`axis_label`: the unit comes from
agentrl_lib.metrics.METRICS; a fraction is drawn in %), legends sit outside the data, and a bar that summarises games
or seeds carries an interval whose kind the figure names.

Introduced in notebooks/00_quickstart.md §5.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt

if TYPE_CHECKING:  # the annotations' np.ndarray; the functions import numpy themselves
    import numpy as np

STEP_LABEL = "training step"
"""The x-axis label of every curve against the RL iteration (metrics key `step`)."""

NAMES = {"success_rate": "success rate", "return_mean": "mean return", "return_std": "return std",
         "reward_mean": "mean turn reward", "invalid_rate": "invalid-action rate", "entropy": "entropy",
         "group_return_std": "within-group return std", "zero_std_group_frac": "zero-std groups",
         "grad_norm": "grad norm", "repetition_rate": "repetition rate", "mean_turns": "mean turns",
         "kl_ref": "KL to the reference", "approx_kl": "approx. KL (old ‖ new)", "clip_frac": "clipped tokens",
         "kept_fraction": "episodes kept", "truncated_rate": "truncated turns", "mean_score_frac": "score / max score",
         "step": STEP_LABEL}
"""The glossary's name of a metrics key, as an axis shows it (the key itself when absent here)."""

CELL_NAMES = {"sft.demos": "demonstrations d", "algo": "algorithm", "reward.kind": "reward",
              "algo.advantage": "advantage estimator", "algo.keep_top_std": "StarPO-S: groups kept"}
"""How a sweep's cell axis reads on a figure (legend titles, x labels)."""

PREFIXES = {"eval": "held-out", "final": "last-step"}
"""The words before a record metric's name: eval.success_rate → 'held-out success rate'."""


def _unit(key: str) -> str:
    from .metrics import METRICS  # imported here: the schema module imports torch

    if key == "mean_score_frac":
        return "fraction"
    return METRICS[key].unit if key in METRICS else ""


def is_fraction(metric: str) -> bool:
    """Whether `metric` (a metrics key or a record path such as eval.success_rate) is a fraction (drawn in %)."""
    return _unit(metric.rsplit(".", 1)[-1]) == "fraction"


def axis_label(metric: str) -> str:
    """The axis label of a metrics key or record path: the glossary's name and unit, a fraction in %.

    'success_rate' → 'success rate (%)', 'entropy' → 'entropy (nats/token)', 'eval.success_rate' → 'held-out success
    rate (%)', 'evals.hard.success_rate' → 'held-out (hard) success rate (%)', 'grad_norm' → 'grad norm' (no unit)."""
    parts = metric.split(".")
    key = parts[-1]
    prefix = ""
    if len(parts) > 1:
        if parts[0] == "evals" and len(parts) == 3:
            prefix = f"held-out ({parts[1]}) "
        else:
            prefix = PREFIXES.get(parts[0], parts[0]) + " "
    name = prefix + NAMES.get(key, key.replace("_", " "))
    unit = _unit(key)
    if unit == "fraction":
        return f"{name} (%)"
    return f"{name} ({unit})" if unit and unit not in ("flag", "list") else name


def label_axis(ax, metric: str, axis: str = "y") -> None:
    """Label `ax`'s y (or x) axis with axis_label(metric); a fraction gets percent ticks (the data stay fractions)."""
    from matplotlib.ticker import PercentFormatter

    (ax.set_ylabel if axis == "y" else ax.set_xlabel)(axis_label(metric))
    if is_fraction(metric):
        (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(PercentFormatter(xmax=1, decimals=0))


def legend_outside(ax, where: str = "right", **kw):
    """A legend beside the axes, never over the data: 'right' (upper left corner just right of the axes) or 'below'
    (under the x label). Returns the Legend (None when the axes has no labelled artist)."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    kw.setdefault("fontsize", 8)
    if where == "below":
        return ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=min(len(handles), 2), **kw)
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, **kw)


def save_and_close(fig, path: str | Path) -> None:
    """Write `fig` as a PNG and release it: a process that trains many runs (a sweep) keeps no figures alive."""
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


CURVES = ["success_rate", "return_mean", "invalid_rate", "entropy", "group_return_std", "grad_norm"]
"""The metrics keys of plot_learning_curves' panels, in order (labels: axis_label)."""


def plot_learning_curves(rows: list[dict], path: str | Path | None = None, title: str = ""):
    """One panel per metric in CURVES against the training step, each y axis labelled with the glossary's name and
    unit; saves a PNG when `path` is given. Returns the figure (shown once by the notebook's inline backend; pass it
    to `save_and_close` or plt.close when it is not shown)."""
    fig, axes = plt.subplots(2, 3, figsize=(12, 6))
    steps = [r["step"] for r in rows]
    for ax, key in zip(axes.flat, CURVES):
        ax.plot(steps, [float("nan") if r.get(key) is None else r[key] for r in rows], marker="o", ms=3)
        label_axis(ax, key)
        ax.set_xlabel(STEP_LABEL)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig


def stage_intervals(result: dict, confidence: float = 0.95) -> dict[str, tuple[float, float] | None]:
    """The intervals over games of one evaluation (evaluate()'s dict, one seed): success rate → Wilson interval of
    games won out of games; invalid_rate → percentile bootstrap over games of invalid turns / turns (turns of a game
    are not independent, games are). None where `per_game` lacks what it needs."""
    from .stats import bootstrap_ratio_ci, wilson_ci

    games = result.get("per_game") or []
    out: dict = {"success_rate": None, "invalid_rate": None}
    if games and all("won" in g for g in games):
        out["success_rate"] = wilson_ci(sum(bool(g["won"]) for g in games), len(games), confidence)
    if games and all("invalid" in g and "turns" in g for g in games):
        out["invalid_rate"] = bootstrap_ratio_ci([g["invalid"] for g in games], [g["turns"] for g in games],
                                                 confidence)
    return out


STAGE_CAPTION = ("one seed per stage; bar = value over the {n} games, whisker = 95% interval over games: "
                 "Wilson (success rate), percentile bootstrap of invalid turns / turns (invalid-action rate)")
"""The note under plot_stage_comparison's bars: what the whiskers are."""


def plot_stage_comparison(results: dict[str, dict], path: str | Path | None = None, title: str = "held-out games"):
    """Two bar panels over the stages, e.g. {'base': eval, 'SFT': eval, 'RL': eval} (evaluate()'s dicts, one seed
    each): success rate (%) and invalid-action rate (%), each bar with its 95% interval over games (stage_intervals:
    Wilson for the success rate, bootstrap over games for the invalid-action rate), named under the figure."""
    import numpy as np

    names = list(results)
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6))
    for ax, key, color in zip(axes, ("success_rate", "invalid_rate"), ("tab:blue", "tab:orange")):
        vals = np.array([results[n][key] for n in names], dtype=float)
        cis = [stage_intervals(results[n])[key] for n in names]
        lo = np.array([v - c[0] if c else 0.0 for v, c in zip(vals, cis)])
        hi = np.array([c[1] - v if c else 0.0 for v, c in zip(vals, cis)])
        ax.bar(range(len(names)), vals, width=0.6, color=color, yerr=np.vstack([lo.clip(0), hi.clip(0)]),
               capsize=4, error_kw={"elinewidth": 1})
        ax.set_xticks(range(len(names)), names)
        ax.set_ylim(0, 1.05)
        label_axis(ax, key)
        ax.set_xlabel("stage")
        ax.grid(axis="y", alpha=0.3)
    n_games = sorted({len(results[n].get("per_game") or []) or results[n].get("n_games", 0) for n in names})
    fig.suptitle(title)
    fig.text(0.5, 0.01, STAGE_CAPTION.format(n="/".join(map(str, n_games))), ha="center", va="bottom", fontsize=8,
             color="0.3", wrap=True)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
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
                      where: dict | None = None, label_eval: bool = True, legend: str | None = "below"):
    """Training curves of a sweep: one line per value of the cell axis `by` (mean over seeds) with a min–max band
    over seeds, `metric` (a per-step key of records.STEP_KEYS, e.g. success_rate of the training rollouts) against
    the training step; the y axis says the metric's glossary name and unit (axis_label).

    Args:
        records: sweep records (records.load_results); `where` keeps those whose cell matches
            ({"reward.kind": "dense"}).
        label_eval: add each line's held-out success (mean over seeds) and its number of seeds to its label.
        legend: "below" or "right" of the axes (legend_outside; never over the curves), None for no legend.
    Returns: the matplotlib Axes. Raises ValueError when no record matches `where` or lacks the axis `by`.
    """
    import warnings

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
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a step where every seed is NaN
            mean, lo, hi = np.nanmean(y, 0), np.nanmin(y, 0), np.nanmax(y, 0)
        label = f"{v}"
        if label_eval:
            ev = [r["eval"]["success_rate"] for r in runs if r.get("eval")]
            label += f" (held-out {np.mean(ev):.0%}, n={len(ev)})" if ev else ""
        (line,) = ax.plot(steps, mean, label=label)
        ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(STEP_LABEL)
    label_axis(ax, metric)
    ax.grid(alpha=0.3)
    if legend:
        legend_outside(ax, legend, title=f"{CELL_NAMES.get(by, by)} (line: mean, band: min–max over seeds)",
                       title_fontsize=8)
    return ax


def plot_cell_means(records: list[dict], metric: str = "eval.success_rate", x: str = "sft.demos",
                    hue: str | None = None, ax=None, label: str | None = None, legend: str | None = "below"):
    """A record metric (report.metric_value path, e.g. eval.success_rate or evals.hard.success_rate) against a numeric
    cell axis `x`: each seed a dot, the mean a line (one line per value of `hue`, if given); axes labelled with
    axis_label / CELL_NAMES, the legend outside the axes (`legend`: "below", "right" or None).
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
                          label=label or (f"{CELL_NAMES.get(hue, hue)}={h}" if hue else axis_label(metric)))
        for v in xs:
            ax.scatter([v] * len(pts[v]), pts[v], color=line.get_color(), alpha=0.4, s=12)
    ax.set_xlabel(CELL_NAMES.get(x, x))
    label_axis(ax, metric)
    ax.grid(alpha=0.3)
    if legend:
        legend_outside(ax, legend)
    return ax


def run_name(record: dict) -> str:
    """A sweep record's identity on a figure: its cell values and seed ('rloo dense s0')."""
    return " ".join(str(v) for v in record.get("cell", {}).values()) + f" s{record.get('seed', '?')}"


def plot_runs(records: list[dict], metric: str, rows: str = "algo", cols: str = "reward.kind", status=None,
              title: str = "", width: float = 6.8):
    """Each run of a sweep as its own line of `metric` against the training step, in small multiples: one panel per
    cell (a row per value of the cell key `rows`, a column per value of `cols`, e.g. algorithm × reward), colour =
    the seed, line style = solid, or dashed when `status(record)` returns a text (e.g. 'collapsed at step 7'). One
    short legend under the panels: the seeds, and what dashed means. `width` in inches: 6.8 fills a book page (about
    680 px at dpi 100); the height grows with the rows.

    Returns the Figure. Raises ValueError on no records, or when a record's cell lacks `rows` or `cols`."""
    if not records:
        raise ValueError("plot_runs: no records")
    if any(rows not in r.get("cell", {}) or cols not in r.get("cell", {}) for r in records):
        raise ValueError(f"plot_runs: every record's cell needs {rows!r} and {cols!r}")
    row_vals = list(dict.fromkeys(r["cell"][rows] for r in records))
    col_vals = list(dict.fromkeys(r["cell"][cols] for r in records))
    seeds = sorted({r.get("seed", 0) for r in records})
    colors = dict(zip(seeds, plt.get_cmap("tab10").colors * (len(seeds) // 10 + 1)))
    fig, axes = plt.subplots(len(row_vals), len(col_vals), figsize=(width, 1.9 * len(row_vals) + 0.9),
                             sharex=True, sharey=True, squeeze=False)
    dashed = False
    for r in records:
        ax = axes[row_vals.index(r["cell"][rows])][col_vals.index(r["cell"][cols])]
        note = status(r) if status else None
        dashed |= bool(note)
        steps = [s["step"] for s in r.get("steps", [])]
        ys = [float("nan") if s.get(metric) is None else s[metric] for s in r.get("steps", [])]
        ax.plot(steps, ys, color=colors[r.get("seed", 0)], ls="--" if note else "-", lw=1.3, alpha=0.9)
    for i, rv in enumerate(row_vals):
        for j, cv in enumerate(col_vals):
            ax = axes[i][j]
            ax.set_title(f"{rv}, {cv}", fontsize=9)
            ax.grid(alpha=0.3)
            label_axis(ax, metric)
            if j:
                ax.set_ylabel("")
            ax.set_xlabel(STEP_LABEL if i == len(row_vals) - 1 else "")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[s], lw=1.6) for s in seeds]
    labels = [f"seed {s}" for s in seeds]
    if dashed:
        handles.append(Line2D([], [], color="gray", ls="--", lw=1.3))
        labels.append("dashed: " + ("collapsed" if status else "flagged"))
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(handles), 4),
               fontsize=8)
    return fig


# ------------------------------------------------------------------------------------------------ diagnostics
DIAGNOSTIC_PANELS = [
    ("success_rate", [("success_rate", "training success")]),
    ("group_return_std", [("group_return_std", "within-group return std")]),
    ("zero_std_group_frac", [("zero_std_group_frac", "zero-std groups")]),
    ("entropy", [("entropy", "entropy")]),
    ("grad_norm", [("grad_norm", "grad norm (before clipping)")]),
    ("invalid_rate", [("invalid_rate", "invalid-action rate"), ("repetition_rate", "repetition rate")]),
]
"""The panels of plot_diagnostics: (the metrics key whose axis_label labels the y axis, [(metrics key, legend
label), ...]); the last panel's two keys are both fractions of turns, its y label says so."""

ALERT_COLORS = {"reward_std_collapse": "tab:red", "grad_norm_spike": "tab:purple", "invalid_rising": "tab:orange",
                "repetition_rising": "tab:brown"}
"""The color of each diagnostics.KINDS alert marker."""


def plot_diagnostics(rows_or_record, alerts: list | None = None, title: str = "", path: str | Path | None = None):
    """Echo-Trap diagnostics of one run as small multiples against the training step, two rows of three panels
    (DIAGNOSTIC_PANELS: success rate, within-group return std, zero-std group fraction, entropy, grad norm, invalid
    and repetition rate; each y axis labelled with the glossary's name and unit), with a dashed vertical line at each
    alert's step in every panel (colour by kind, ALERT_COLORS; their legend under the panels).

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
    ncols = 3
    nrows = -(-len(DIAGNOSTIC_PANELS) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(10.5, 3.0 * nrows + 0.6), sharex=True, squeeze=False)
    steps = [r.get("step") for r in rows]
    for ax, (panel, keys) in zip(axes.flat, DIAGNOSTIC_PANELS):
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
        label_axis(ax, panel)
        if len(keys) > 1:
            ax.set_ylabel("share of turns (%)")
            if drawn:
                legend_outside(ax, "below", fontsize=8)
        ax.set_xlabel(STEP_LABEL)
        ax.xaxis.set_tick_params(labelbottom=True)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(DIAGNOSTIC_PANELS):]:
        ax.set_visible(False)
    if alerts:
        from matplotlib.lines import Line2D

        kinds = list(dict.fromkeys(a["kind"] for a in alerts))
        fig.legend([Line2D([], [], color=ALERT_COLORS.get(k, "k"), ls="--") for k in kinds],
                   [f"alert: {k}" for k in kinds], loc="lower center", ncol=len(kinds), fontsize=9)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.05 if alerts else 0, 1, 1))
    if path:
        fig.savefig(path, dpi=100)
    return fig
