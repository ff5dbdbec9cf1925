"""agentrl_lib.widgets and the sweep plots: the explorer's figure for each toggle position is the figure of that
cell (toggles jslinked to every Stack of their level, so the static book switches them too), the trajectory
renderer marks policy tokens, rewards and advantage signs, the sweep plots average over seeds."""
import ipywidgets as w
import matplotlib

matplotlib.use("Agg")
import numpy as np
import pytest

from agentrl_lib import plots, widgets
from agentrl_lib.rollout import Trajectory


def _records():
    recs = []
    for a_i, algo in enumerate(["ppo", "grpo"]):
        for r_i, reward in enumerate(["sparse", "dense"]):
            for seed in (0, 1):
                base = 0.1 * a_i + 0.2 * r_i + 0.05 * seed
                recs.append({"cell": {"algo": algo, "reward.kind": reward}, "seed": seed,
                             "steps": [{"step": s, "success_rate": base + 0.01 * s, "return_mean": base,
                                        "group_return_std": 0.1, "entropy": 1.0} for s in (1, 2, 3)],
                             "eval": {"success_rate": base}})
    return recs


def _leaf(root, path):
    node = root
    for i in path:
        node = node.children[i]
    return node


def test_explorer_leaf_of_each_toggle_position_is_that_cells_figure():
    recs = _records()
    box = widgets.sweep_explorer(recs, metrics=("success_rate",), axes=("algo", "reward.kind"))
    algo_t, reward_t, root = box.children
    assert list(algo_t.options) == ["grpo", "ppo"] and list(reward_t.options) == ["dense", "sparse"]
    images = {}
    for i, algo in enumerate(algo_t.options):
        for j, reward in enumerate(reward_t.options):
            leaf = _leaf(root, (i, j))
            assert isinstance(leaf, w.Image) and leaf.value[:4] == b"\x89PNG"
            runs = [r for r in recs if r["cell"] == {"algo": algo, "reward.kind": reward}]
            fixed = {"algo": algo, "reward.kind": reward}
            expected = widgets._png(widgets.cell_figure(runs, ("success_rate",), widgets._cell_title(runs, fixed)))
            assert leaf.value == expected, f"toggle position ({algo}, {reward}) shows another cell's figure"
            images[(algo, reward)] = leaf.value
    assert len(set(images.values())) == 4


def test_explorer_toggles_are_jslinked_to_every_stack_of_their_level():
    box = widgets.sweep_explorer(_records(), metrics=("success_rate",))
    algo_t, reward_t, root = box.children
    links = box.links
    linked = {(id(k.source[0]), k.source[1], id(k.target[0]), k.target[1]) for k in links}
    assert (id(algo_t), "index", id(root), "selected_index") in linked
    for inner in root.children:
        assert (id(reward_t), "index", id(inner), "selected_index") in linked


def test_explorer_refuses_a_missing_axis_and_no_records():
    with pytest.raises(ValueError, match="lacks the axis 'level'"):
        widgets.sweep_explorer(_records(), axes=("level",))
    with pytest.raises(ValueError, match="no records"):
        widgets.sweep_explorer([])


class _Tok:
    def decode(self, ids):
        return f"<{ids[0]}>"


def test_trajectory_html_marks_policy_tokens_rewards_and_advantage_sign():
    tr = Trajectory(game="g", group=0, ids=[1, 2, 3, 4, 5, 6], mask=[0, 1, 1, 0, 1, 1], turn_ends=[2, 5],
                    actions=["a", "b"])
    rewards = [0, 0, 0.5, 0, 0, 1.0]
    adv = [0, 0.3, 0.3, 0, -0.2, -0.2]
    page = widgets.trajectory_html(tr, _Tok(), rewards, adv)
    assert page.count("color:#888") == 2  # the two mask-0 tokens
    assert page.count("border:1px solid") == 4
    assert "r=+0.50" in page and "r=+1.00" in page and page.count("r=+") == 2
    green, red = widgets._colour(0.3, 0.3), widgets._colour(-0.2, 0.3)
    assert green.startswith("#87ff") and red.startswith("#ff") and green in page and red in page
    browser = widgets.trajectory_browser([tr, tr], _Tok(), [rewards, rewards], [adv, adv])
    slider, out = browser.children
    slider.value = 1
    assert "episode 1" in out.value and "a | b" in out.value


def test_sweep_curves_average_over_seeds_and_cell_means():
    import matplotlib.pyplot as plt

    recs = _records()
    ax = plots.plot_sweep_curves(recs, "success_rate", by="algo", where={"reward.kind": "sparse"})
    lines = {line.get_label().split(" ")[0]: line.get_ydata() for line in ax.get_lines()}
    np.testing.assert_allclose(lines["ppo"], [0.025 + 0.01 * s for s in (1, 2, 3)])
    np.testing.assert_allclose(lines["grpo"], [0.125 + 0.01 * s for s in (1, 2, 3)])
    plt.close("all")
    for r in recs:
        r["cell"]["sft.demos"] = 8 if r["cell"]["algo"] == "ppo" else 16
    ax = plots.plot_cell_means(recs, "eval.success_rate", x="sft.demos")
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [0.125, 0.225])
    plt.close("all")
    with pytest.raises(ValueError):
        plots.plot_sweep_curves(recs, by="nope")


def _images(widget) -> list:
    """Every w.Image under `widget` (the explorer's pre-rendered figures)."""
    if isinstance(widget, w.Image):
        return [widget]
    return [im for child in getattr(widget, "children", ()) for im in _images(child)]


def test_explorer_of_a_partial_grid_shows_only_cells_with_runs():
    recs = [r for r in _records() if r["cell"] != {"algo": "grpo", "reward.kind": "dense"}]  # GRPO: sparse only
    box = widgets.sweep_explorer(recs, metrics=("success_rate",), axes=("algo", "reward.kind"))
    algo_t, root = box.children  # the reward toggle differs per algorithm: it sits on each algorithm's page
    assert list(algo_t.options) == ["grpo", "ppo"]
    assert len(_images(box)) == 3, "one figure per cell that has runs, no 'no runs' figures"
    pages = {}
    for i, algo in enumerate(algo_t.options):
        reward_t, stack = root.children[i].children
        assert isinstance(reward_t, w.ToggleButtons)
        pages[algo] = list(reward_t.options)
        linked = {(id(k.source[0]), id(k.target[0])) for k in box.links}
        assert (id(reward_t), id(stack)) in linked and (id(algo_t), id(root)) in linked
        for j, reward in enumerate(reward_t.options):
            runs = [r for r in recs if r["cell"] == {"algo": algo, "reward.kind": reward}]
            fixed = {"algo": algo, "reward.kind": reward}
            assert stack.children[j].value == widgets._png(
                widgets.cell_figure(runs, ("success_rate",), widgets._cell_title(runs, fixed)))
    assert pages == {"grpo": ["sparse"], "ppo": ["dense", "sparse"]}


def test_cell_figure_labels_every_axis():
    import matplotlib.pyplot as plt

    fig = widgets.cell_figure(_records()[:2], ("success_rate", "entropy"), "t")
    assert [ax.get_ylabel() for ax in fig.axes] == ["success rate (%)", "entropy (nats/token)"]
    assert all(ax.get_xlabel() == plots.STEP_LABEL for ax in fig.axes)
    plt.close(fig)
    fig = widgets.cell_figure(_records()[:2], title="t")  # the default four metrics: 2 x 2, legible at page width
    assert [ax.get_ylabel() for ax in fig.axes] == [plots.axis_label(m) for m in widgets.DEFAULT_METRICS]
    assert len({round(ax.get_position().y0, 2) for ax in fig.axes}) == 2 and fig.get_size_inches()[0] <= 7.5
    plt.close(fig)


def test_episode_browser_prerenders_every_game_and_stage_and_links_its_controls():
    def game(i, won):
        return {"game": f"g{i}", "won": won, "turns": 2, "score": int(won), "max_score": 1, "invalid": 1 - won,
                "actions": [f"open box {i}", "take <key>"], "termination": "won" if won else "max_turns"}

    results = {"base": {"per_game": [game(0, 0), game(1, 0)]}, "SFT": {"per_game": [game(0, 1), game(1, 0)]},
               "RL": {"per_game": [game(0, 1)]}}  # RL did not play g1
    box = widgets.episode_browser(results)
    (pick, stage), outer = box.children[0].children, box.children[1]
    assert list(pick.options) == ["g0", "g1"] and list(stage.options) == ["base", "SFT", "RL"]
    linked = {(id(k.source[0]), k.source[1], id(k.target[0]), k.target[1]) for k in box.links}
    assert (id(pick), "index", id(outer), "selected_index") in linked
    for i, g in enumerate(pick.options):
        inner = outer.children[i]
        assert (id(stage), "index", id(inner), "selected_index") in linked
        for j, s in enumerate(stage.options):
            page = inner.children[j].value
            assert f"<b>{s}</b>" in page
            if s == "RL" and g == "g1":
                assert "did not play" in page
            else:
                assert f"open box {i}" in page and "take &lt;key&gt;" in page
    assert "WON in 2 turns" in outer.children[0].children[1].value
    with pytest.raises(ValueError, match="no per-game rows"):
        widgets.episode_browser({"base": {}})
