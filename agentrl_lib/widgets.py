"""Widgets of the chapters: a sweep explorer (toggle the algorithm and the reward, see the training curves), an
episode browser (what each stage's agent did on each held-out game) and a trajectory browser (one episode's tokens
coloured by loss mask, with their rewards and advantages).

The explorer and the episode browser work without a kernel, as in the static book: they pre-render every page (a
figure per cell, an HTML page per game and stage) and switch them with `jslink` between the controls and nested
`widgets.Stack`s (a Python callback never runs in a static page: ../shared/NOTES.md). The trajectory browser's
slider needs a running kernel (its static page shows the first episode).

    from agentrl_lib import records, widgets
    widgets.sweep_explorer(records.load_results("algo_reward"))

Introduced in notebooks/00_quickstart (episode_browser), 02_reward and 03_policy.
"""
from __future__ import annotations

import html
import io
from typing import Any, Sequence

from .paths import shown_path

DEFAULT_METRICS = ("success_rate", "return_mean", "group_return_std", "entropy")
"""Per-step keys (records.STEP_KEYS) the explorer plots for each cell."""


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def cell_figure(records: list[dict], metrics: Sequence[str] = DEFAULT_METRICS, title: str = ""):
    """One figure of the runs of one cell: a panel per metric against the training step (2 x 2 for four metrics),
    each seed a thin line, the mean thick; each y axis labelled with the glossary's name and unit (plots.axis_label).
    Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    from .plots import STEP_LABEL, label_axis, seed_curves

    ncols = 2 if len(metrics) >= 4 else len(metrics)  # 2 x 2 for the default four: legible at page width
    nrows = -(-len(metrics) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 2.5 * nrows), squeeze=False)
    for ax in axes.flat[len(metrics):]:
        ax.set_visible(False)
    for ax, metric in zip(axes.flat, metrics):
        steps, y = seed_curves(records, metric)
        for row in y:
            ax.plot(steps, row, color="tab:blue", alpha=0.35, linewidth=0.8)
        if len(steps):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                ax.plot(steps, np.nanmean(y, 0), color="tab:blue", linewidth=2)
        label_axis(ax, metric)
        ax.yaxis.label.set_fontsize(9)
        ax.set_xlabel(STEP_LABEL, fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _cell_title(records: list[dict], cell: dict) -> str:
    import numpy as np

    ev = [r["eval"]["success_rate"] for r in records if r.get("eval")]
    what = ", ".join(f"{k}={v}" for k, v in cell.items())
    if not ev:
        return f"{what}: no runs"
    return (f"{what}: held-out success {np.mean(ev):.1%} (seeds: "
            f"{', '.join(f'{v:.0%}' for v in ev)}); thin = one seed, thick = mean")


def _values(records: list[dict], axis: str, fixed: dict) -> list:
    """The values of the cell axis `axis` among the records whose cell matches `fixed`, sorted as text."""
    return sorted({r["cell"][axis] for r in records if all(r["cell"][a] == v for a, v in fixed.items())}, key=str)


def _toggle(axis: str, values: list):
    import ipywidgets as w

    return w.ToggleButtons(options=[str(v) for v in values], description=axis, value=str(values[0]),
                           style={"button_width": "auto", "description_width": "initial"})


def sweep_explorer(records: list[dict], metrics: Sequence[str] = DEFAULT_METRICS,
                   axes: Sequence[str] = ("algo", "reward.kind"), title: str | None = None):
    """A widget: one ToggleButtons per cell axis in `axes` over the pre-rendered training curves of each cell that
    has runs (a combination the sweep did not run has no button and no figure).

    The figures (one per cell with runs; panels = `metrics`, per seed and mean) are rendered now, as PNG, into nested
    `widgets.Stack`s — level k is indexed by the k-th axis — and each ToggleButtons' `index` is `jslink`ed to the
    `selected_index` of its Stacks, so the switch happens in the browser: live in JupyterLab and in the static book
    alike. A level whose values are the same whichever values the levels above it have (a full grid) has one
    ToggleButtons above the figures, linked to every Stack of the level; from the first level where they differ
    (a partial grid: GRPO ran with sparse rewards only) each Stack page carries its own ToggleButtons with the values
    that exist under it.

    Args:
        records: sweep records (records.load_results); every record must have each axis in its cell.
        metrics: per-step keys of records.STEP_KEYS.
        axes: cell axes to toggle (1 or more), e.g. ("algo", "reward.kind").
    Returns: an ipywidgets.VBox (title, shared toggles, figures); its `links` attribute lists the jslinks.
    Raises: ValueError when a record lacks an axis or `records` is empty.
    """
    import ipywidgets as w

    if not records:
        raise ValueError("no records: run the sweep first (results/regenerate.py)")
    for r in records:
        missing = [a for a in axes if a not in r.get("cell", {})]
        if missing:
            raise ValueError(f"a record's cell {r.get('cell')} lacks the axis {missing[0]!r}; pick axes among its keys")
    prefixes: list[dict] = [{}]
    shared = 0  # levels 0 .. shared-1 have one ToggleButtons each, above the figures
    while shared < len(axes) and len({tuple(map(str, _values(records, axes[shared], f))) for f in prefixes}) == 1:
        prefixes = [{**f, axes[shared]: v} for f in prefixes for v in _values(records, axes[shared], f)]
        shared += 1
    toggles = [_toggle(a, _values(records, a, {})) for a in axes[:shared]]
    levels: list[list] = [[] for _ in axes[:shared]]  # the Stacks of each shared level, to link with its toggle
    links = []

    def build(k: int, fixed: dict) -> Any:
        if k == len(axes):
            runs = [r for r in records if all(r["cell"][a] == v for a, v in fixed.items())]
            fig = cell_figure(runs, metrics, _cell_title(runs, fixed))
            return w.Image(value=_png(fig), format="png", layout=w.Layout(max_width="100%"))
        vs = _values(records, axes[k], fixed)
        stack = w.Stack([build(k + 1, {**fixed, axes[k]: v}) for v in vs], selected_index=0)
        if k < shared:
            levels[k].append(stack)
            return stack
        own = _toggle(axes[k], vs)  # this page's own values of axis k
        links.append(w.jslink((own, "index"), (stack, "selected_index")))
        return w.VBox([own, stack])

    root = build(0, {})
    links += [w.jslink((toggle, "index"), (stack, "selected_index"))
              for toggle, stacks in zip(toggles, levels) for stack in stacks]
    head = [w.HTML(f"<b>{html.escape(title)}</b>")] if title else []
    box = w.VBox([*head, *toggles, root])
    box.links = links  # the jslinks (kept with the box; the static page's embedded state holds them too)
    return box


def _episode_html(stage: str, row: dict | None) -> str:
    if row is None:
        return f"<p><b>{html.escape(stage)}</b> did not play this game.</p>"
    outcome = "WON" if row.get("won") else html.escape(str(row.get("termination", "lost")))
    inval = f", {row['invalid']} invalid action(s)" if "invalid" in row else ""
    score = (f", score {row['score']:g}/{row['max_score']:g}" if row.get("max_score") is not None
             and row.get("score") is not None else "")
    actions = "".join(f"<li><code>{html.escape(str(a))}</code></li>" for a in row.get("actions", []))
    return (f"<p><b>{html.escape(stage)}</b>: {outcome} in {row.get('turns', '?')} turns{score}{inval}</p>"
            f"<ol style='margin-top:0'>{actions}</ol>")


def episode_browser(results: dict[str, dict]):
    """A widget to read what each stage's agent did on each evaluated game: a Dropdown picks the game, a
    ToggleButtons the stage; the page shows the outcome, turns, score and the actions, in order.

    Every page (game × stage) is rendered now as HTML into nested `widgets.Stack`s (outer: game, inner: stage) and
    the controls' `index` is jslinked to their `selected_index`: it switches without a kernel, in the static book too.

    Args:
        results: {stage name: evaluate()'s dict} (its `per_game` rows: game, won, turns, score, max_score,
            invalid, actions, termination), e.g. {"base": ..., "SFT": ..., "RL": ...}.
    Returns: an ipywidgets.VBox (controls, pages); its `links` attribute lists the jslinks.
    Raises: ValueError when no stage has per-game rows.
    Introduced in notebooks/00_quickstart.md §6.
    """
    import ipywidgets as w

    stages = list(results)
    games = list(dict.fromkeys(g["game"] for s in stages for g in results[s].get("per_game") or []))
    if not games:
        raise ValueError("episode_browser: no per-game rows in the results (evaluate()'s per_game)")
    rows = {(s, g["game"]): g for s in stages for g in results[s].get("per_game") or []}
    pick = w.Dropdown(options=games, value=games[0], description="game")
    stage = w.ToggleButtons(options=stages, value=stages[0], description="stage",
                            style={"button_width": "auto"})
    inner = [w.Stack([w.HTML(_episode_html(s, rows.get((s, g)))) for s in stages], selected_index=0) for g in games]
    outer = w.Stack(inner, selected_index=0)
    links = [w.jslink((pick, "index"), (outer, "selected_index"))]
    links += [w.jslink((stage, "index"), (st, "selected_index")) for st in inner]
    box = w.VBox([w.HBox([pick, stage]), outer])
    box.links = links
    return box


# ------------------------------------------------------------------------------------------------ trajectories
def _colour(value: float, scale: float) -> str:
    """Background for a token's advantage / reward: green positive, red negative, white 0."""
    if scale <= 0 or value == 0:
        return "#ffffff"
    a = min(abs(value) / scale, 1.0)
    r, g, b = (int(255 - a * 120), 255, int(255 - a * 120)) if value > 0 else (255, int(255 - a * 120),
                                                                                int(255 - a * 120))
    return f"#{r:02x}{g:02x}{b:02x}"


def trajectory_html(trajectory, tokenizer, token_rewards=None, advantages=None, max_tokens: int = 2000) -> str:
    """One episode as HTML: each token of its sequence; environment / prompt tokens (loss mask 0) grey, policy
    tokens (mask 1) boxed and coloured by advantage (green > 0, red < 0); a token carrying a reward (a turn end)
    is marked with it. Hover a token for its id, mask, reward and advantage.

    Args:
        trajectory: a rollout.Trajectory (its ids and loss mask).
        tokenizer: its tokenizer (decodes each id).
        token_rewards, advantages: per-token sequences of the trajectory's length (e.g. a row of the trainer's
            (B, T) tensors cut to the trajectory), or None.
    Returns: an HTML string (display with IPython.display.HTML).
    """
    ids = list(trajectory.ids)[:max_tokens]
    mask = list(trajectory.mask)[:max_tokens]
    rew = [float(x) for x in token_rewards][:len(ids)] if token_rewards is not None else [0.0] * len(ids)
    adv = [float(x) for x in advantages][:len(ids)] if advantages is not None else [0.0] * len(ids)
    scale = max([abs(a) for a, m in zip(adv, mask) if m] or [0.0])
    parts = []
    for i, (t, m, r, a) in enumerate(zip(ids, mask, rew, adv)):
        text = html.escape(tokenizer.decode([t])).replace("\n", "↵<br>")
        tip = f"#{i} id {t} mask {int(m)} reward {r:+.3f} advantage {a:+.3f}"
        if m:
            style = f"background:{_colour(a, scale)};border:1px solid #88a;border-radius:2px"
        else:
            style = "color:#888"
        badge = (f"<sup style='color:#b50;font-weight:bold'>r={r:+.2f}</sup>" if r else "")
        parts.append(f"<span title='{tip}' style='{style}'>{text}</span>{badge}")
    legend = ("<div style='font-size:85%;margin-bottom:4px'>grey: prompt / environment tokens (loss mask 0) · boxed: "
              "policy tokens (mask 1), green = positive advantage, red = negative · <b>r=</b>: the turn reward on "
              "its turn-end token</div>")
    return legend + "<div style='font-family:monospace;font-size:85%;line-height:1.6'>" + "".join(parts) + "</div>"


def trajectory_browser(trajectories: Sequence, tokenizer, token_rewards=None, advantages=None):
    """A widget to browse episodes: a slider picks the episode, its tokens are shown as trajectory_html renders
    them, with its game, return and turns. `token_rewards` / `advantages`: per-episode per-token sequences (or a
    (B, T) tensor whose row i belongs to trajectories[i]), or None. Needs a kernel to switch episodes (the first
    one is shown in a static page). Returns an ipywidgets.VBox."""
    import ipywidgets as w

    if not trajectories:
        raise ValueError("no trajectories to browse")
    out = w.HTML()
    pick = w.IntSlider(min=0, max=len(trajectories) - 1, value=0, description="episode")

    def show(i: int) -> None:
        tr = trajectories[i]
        n = len(tr.ids)
        rew = None if token_rewards is None else list(token_rewards[i])[:n]
        adv = None if advantages is None else list(advantages[i])[:n]
        head = (f"<b>episode {i}</b>: game {html.escape(shown_path(tr.game))}, group {tr.group}, "
                f"won {tr.won}, turns {len(tr.turn_ends)}, actions {html.escape(' | '.join(tr.actions))}, "
                f"return {sum(float(x) for x in (rew or [])):+.3f}<br>")
        out.value = head + trajectory_html(tr, tokenizer, rew, adv)

    pick.observe(lambda change: show(change["new"]), names="value")
    show(0)
    return w.VBox([pick, out])
