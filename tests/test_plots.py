"""agentrl_lib.plots: every axis is labelled with the glossary's name and unit, legends sit outside the data, the
stage bars carry their intervals over games (Wilson / bootstrap, stats.wilson_ci / bootstrap_ratio_ci), and the
diagnostics figure is small multiples a page can show at a readable size."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.container import BarContainer

from agentrl_lib import plots
from agentrl_lib.metrics import METRICS
from agentrl_lib.stats import bootstrap_ratio_ci, wilson_ci


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _rows(n=4):
    return [{"step": s, "success_rate": 0.1 * s, "return_mean": 0.2 * s, "invalid_rate": 0.5 - 0.1 * s,
             "entropy": 1.0 / s, "group_return_std": 0.1, "zero_std_group_frac": 0.25 * (s % 2),
             "grad_norm": 3.0, "repetition_rate": 0.0, "alerts": []} for s in range(1, n + 1)]


def _eval(won, invalid, turns):
    games = [{"game": f"g{i}", "won": w, "invalid": v, "turns": t}
             for i, (w, v, t) in enumerate(zip(won, invalid, turns))]
    return {"success_rate": sum(won) / len(won), "invalid_rate": sum(invalid) / sum(turns), "per_game": games,
            "n_games": len(won)}


def _records():
    recs = []
    for algo in ("ppo", "grpo"):
        for seed in (0, 1):
            recs.append({"cell": {"algo": algo, "reward.kind": "dense"}, "seed": seed,
                         "steps": [{"step": s, **{k: v for k, v in r.items() if k != "step"}}
                                   for s, r in enumerate(_rows(), 1)],
                         "eval": {"success_rate": 0.5}})
    return recs


def _overlaps(fig, artist) -> list:
    """The visible axes of `fig` whose drawn area the artist's box overlaps (in pixels)."""
    fig.canvas.draw()
    box = artist.get_window_extent()
    return [ax for ax in fig.axes if ax.get_visible() and box.overlaps(ax.get_window_extent())]


# ------------------------------------------------------------------------------------------------ labels
def test_axis_label_is_the_glossarys_name_and_unit():
    assert plots.axis_label("success_rate") == "success rate (%)"
    assert plots.axis_label("entropy") == "entropy (nats/token)"
    assert plots.axis_label("return_mean") == "mean return (reward)"
    assert plots.axis_label("group_return_std") == "within-group return std (reward)"
    assert plots.axis_label("grad_norm") == "grad norm"
    assert plots.axis_label("eval.success_rate") == "held-out success rate (%)"
    assert plots.axis_label("evals.hard.success_rate") == "held-out (hard) success rate (%)"
    for key in plots.CURVES + [k for _, keys in plots.DIAGNOSTIC_PANELS for k, _ in keys]:
        unit = METRICS[key].unit  # every plotted key is in the glossary, and its unit is on the axis
        assert key in plots.NAMES and (unit in ("", "fraction") or f"({unit})" in plots.axis_label(key))


def test_learning_curves_label_every_axis():
    fig = plots.plot_learning_curves(_rows(), title="t")
    assert len(fig.axes) == len(plots.CURVES)
    for ax, key in zip(fig.axes, plots.CURVES):
        assert ax.get_ylabel() == plots.axis_label(key), f"panel {key}: y label {ax.get_ylabel()!r}"
        assert ax.get_xlabel() == plots.STEP_LABEL
    pct = fig.axes[plots.CURVES.index("success_rate")].yaxis.get_major_formatter()
    assert pct(0.5, 0) == "50%"  # fractions drawn in %, as the label says


# ------------------------------------------------------------------------------------------------ intervals
def test_wilson_interval_matches_hand_computed_values():
    lo, hi = wilson_ci(0, 4)
    assert lo == 0 and hi == pytest.approx(1.959964 ** 2 / (4 + 1.959964 ** 2), abs=1e-6)  # 0.4899: not empty at 0
    lo, hi = wilson_ci(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    assert wilson_ci(4, 4)[1] == 1.0 and wilson_ci(0, 0) is None


def test_bootstrap_ratio_resamples_games():
    lo, hi = bootstrap_ratio_ci([2, 0, 1, 3], [4, 4, 4, 4], n_resamples=2000)
    assert lo <= 6 / 16 <= hi and 0 <= lo < hi <= 0.75
    assert bootstrap_ratio_ci([3, 3], [3, 3]) == (1.0, 1.0)  # every game all invalid: no spread to resample
    assert bootstrap_ratio_ci([1], [2]) is None


def test_stage_bars_have_labels_and_their_intervals_over_games():
    results = {"base": _eval([0, 0, 0, 0], [3, 3, 2, 3], [3, 3, 3, 3]),
               "SFT": _eval([1, 0, 1, 1], [0, 1, 0, 2], [2, 3, 2, 3])}
    fig = plots.plot_stage_comparison(results, title="4 held-out games")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_ylabel() for ax in axes] == ["success rate (%)", "invalid-action rate (%)"]
    for ax, key in zip(axes, ("success_rate", "invalid_rate")):
        assert [t.get_text() for t in ax.get_xticklabels()] == ["base", "SFT"]
        (bars,) = [c for c in ax.containers if isinstance(c, BarContainer)]
        assert bars.errorbar is not None, f"{key}: bars without an interval"
        segments = bars.errorbar.lines[2][0].get_segments()
        for name, seg in zip(results, segments):
            ci = plots.stage_intervals(results[name])[key]
            np.testing.assert_allclose([seg[0][1], seg[1][1]], ci, atol=1e-9)
    base_success = [c for c in axes[0].containers if isinstance(c, BarContainer)][0].errorbar
    assert base_success.lines[2][0].get_segments()[0][1][1] > 0.4  # 0/4 won: still a wide interval
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "Wilson" in caption and "bootstrap" in caption and "one seed" in caption


# ------------------------------------------------------------------------------------------------ legends
@pytest.mark.parametrize("where", ["below", "right"])
def test_sweep_curves_label_the_metric_and_keep_the_legend_off_the_data(where):
    fig, ax = plt.subplots(figsize=(5, 3.2))
    plots.plot_sweep_curves(_records(), "success_rate", by="algo", ax=ax, legend=where)
    fig.tight_layout()
    assert ax.get_ylabel() == "success rate (%)" and ax.get_xlabel() == plots.STEP_LABEL
    legend = ax.get_legend()
    assert legend is not None and "min–max over seeds" in legend.get_title().get_text()
    assert not _overlaps(fig, legend), "the legend covers the curves"


def test_cell_means_and_runs_label_axes_and_keep_legends_off_the_data():
    recs = _records()
    for r, d in zip(recs, (8, 8, 16, 16)):
        r["cell"]["sft.demos"] = d
    fig, ax = plt.subplots(figsize=(5, 3.2))
    plots.plot_cell_means(recs, "eval.success_rate", x="sft.demos", ax=ax)
    fig.tight_layout()
    assert ax.get_ylabel() == "held-out success rate (%)" and ax.get_xlabel() == "demonstrations d"
    assert not _overlaps(fig, ax.get_legend())
    recs[1]["cell"]["reward.kind"] = "sparse"
    fig = plots.plot_runs(recs, "success_rate", status=lambda r: "collapsed at step 3" if r["seed"] else None)
    axes = [ax for ax in fig.axes]
    assert [ax.get_title() for ax in axes] == ["ppo, dense", "ppo, sparse", "grpo, dense", "grpo, sparse"]
    assert axes[0].get_ylabel() == "success rate (%)" and axes[1].get_ylabel() == ""   # left column only
    assert axes[2].get_xlabel() == plots.STEP_LABEL and axes[0].get_xlabel() == ""      # bottom row only
    assert [len(ax.get_lines()) for ax in axes] == [1, 1, 2, 0]                          # one line a run, in its cell
    assert [line.get_linestyle() for line in axes[2].get_lines()] == ["-", "--"]          # seed 1 collapsed
    (legend,) = fig.legends  # one short legend: the seeds and what dashed means, not one entry a run
    assert [t.get_text() for t in legend.get_texts()] == ["seed 0", "seed 1", "dashed: collapsed"]
    assert not _overlaps(fig, legend)
    assert fig.get_size_inches()[0] <= 6.8   # page width, not shrunk
    with pytest.raises(ValueError, match="needs 'algo'"):
        plots.plot_runs([{"cell": {"reward.kind": "dense"}, "seed": 0, "steps": []}], "success_rate")


# ------------------------------------------------------------------------------------------------ diagnostics
def test_diagnostics_are_labelled_small_multiples_of_a_readable_size():
    rows = _rows(6)
    alert = {"step": 3, "kind": "reward_std_collapse", "message": "m", "evidence": {}}
    fig = plots.plot_diagnostics(rows, alerts=[alert], title="t")
    width, height = fig.get_size_inches() * 100  # pixels as stored (dpi 100)
    assert width <= 1100 and width / height < 2.5, f"{width:.0f}x{height:.0f}: a strip too wide for a page"
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == len(plots.DIAGNOSTIC_PANELS)
    for ax in shown:
        assert ax.get_ylabel() and ax.get_xlabel() == plots.STEP_LABEL
        if ax.get_legend():
            assert not _overlaps(fig, ax.get_legend()), f"{ax.get_ylabel()}: its legend covers data"
    assert min(t.get_fontsize() for ax in shown for t in (ax.yaxis.label, ax.xaxis.label)) >= 9
    for legend in fig.legends:
        assert not _overlaps(fig, legend)
