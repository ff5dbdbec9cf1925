"""Echo-Trap diagnostics (agentrl_lib/diagnostics.py): the per-step signals on made-up episodes, the collapse detector
on synthetic metric streams (firing and not, with negative controls) and replayed on the 7 real runs of
results/algo_reward_first_design.jsonl, its wiring into Trainer.train (alerts in the rows, --stop-on-collapse stops
resumably), the notebook table and the diagnostics plot."""
import json
import logging
import random
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest

from agentrl_lib import cli, flags
from agentrl_lib.config import AlgoConfig, EnvConfig, ModelConfig, RunConfig, TrainConfig
from agentrl_lib.diagnostics import (
    KINDS,
    CollapseDetector,
    CollapseError,
    alerts_markdown,
    collapse_step,
    detect,
    input_dependence,
    read_alerts,
    repetition_rate,
    stopping_kinds,
)
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.parts import run_parts
from agentrl_lib.trainer import Trainer

from helpers import ParityEnv, scripted_games

RECORDS = Path(__file__).resolve().parent.parent / "results" / "algo_reward_first_design.jsonl"


# ------------------------------------------------------------------------------------ per-step signals
def _brute_repetition(episodes):
    turns = reps = 0
    for actions, replies in episodes:
        for k in range(len(actions)):
            turns += 1
            a = " ".join(actions[k].lower().split())
            r = " ".join(replies[k].lower().split())
            earlier_a = {" ".join(x.lower().split()) for x in actions[:k]}
            earlier_r = {" ".join(x.lower().split()) for x in replies[:k]}
            reps += (a != "" and a in earlier_a) or r in earlier_r
    return reps / turns


def test_repetition_rate_counts_repeats_within_an_episode_only():
    eps = [(["go north", "go north", "take key"], ["I go north", "Go  North now", "take key"]),  # action repeat
           (["open door", "", ""], ["open door", "!!!!", "!!!!"]),  # reply repeat (empty action)
           (["look", "go north"], ["look", "go north"])]  # no repeat in this episode (go north is episode 1's)
    assert repetition_rate(eps) == pytest.approx(2 / 8) == pytest.approx(_brute_repetition(eps))
    rng = random.Random(0)
    words = ["go", "north", "take", "key", "!"]
    for _ in range(50):
        eps = [([rng.choice(words) for _ in range(n)], [rng.choice(words) for _ in range(n)])
               for n in (rng.randint(1, 5) for _ in range(4))]
        assert repetition_rate(eps) == pytest.approx(_brute_repetition(eps))
    assert repetition_rate([(["a"], ["a"])]) == 0.0 and repetition_rate([]) is None
    assert repetition_rate([(["x"] * 5, ["x"] * 5)]) == pytest.approx(4 / 5)


def test_input_dependence_separates_templated_from_game_specific_replies():
    games = [g for g in ("kitchen", "garden", "cellar", "attic") for _ in range(4)]
    same = ["<think>I should act.</think><answer>go north</answer>"] * len(games)
    assert input_dependence(same, games) == pytest.approx(0.0)  # the Echo Trap's template: ~0
    specific = {"kitchen": "open the fridge and take the milk", "garden": "dig under the old oak tree",
                "cellar": "light the lamp then read the scroll", "attic": "unlock chest with brass key"}
    reply = [specific[g] for g in games]
    assert input_dependence(reply, games) > 0.9
    rng = random.Random(1)
    vocab = [f"w{i}" for i in range(200)]
    noise = [" ".join(rng.sample(vocab, 4)) for _ in games]  # replies that ignore the game, all different
    assert abs(input_dependence(noise, games)) < 0.05
    # negative control: the same game-specific replies scored against shuffled game labels look input-independent
    shuffled = games[:]
    random.Random(2).shuffle(shuffled)
    assert input_dependence(reply, shuffled) < 0.35
    assert input_dependence(["a", "b"], ["g", "g"]) is None  # one game: no across-game pair
    assert input_dependence(["a", "b"], ["g", "h"]) is None  # one episode per game: no within-game pair
    with pytest.raises(ValueError, match="2 replies but 1 games"):
        input_dependence(["a", "b"], ["g"])


def test_input_dependence_uses_every_turn_and_matches_its_definition():
    # cooking-like: every game's right first move is `inventory`; the later turns name the game's own objects
    games = [g for g in ("soup", "salad", "cake") for _ in range(4)]
    plan = {"soup": ["take carrot", "slice carrot"], "salad": ["take lettuce", "chop lettuce"],
            "cake": ["take flour", "bake flour"]}
    episodes = [["inventory"] + plan[g] for g in games]
    first_only = input_dependence([e[0] for e in episodes], games)
    assert first_only == pytest.approx(0.0)  # the first reply alone cannot tell a game-aware policy from a template
    assert input_dependence(episodes, games) > 0.4
    assert input_dependence([["inventory", "look", "wait"]] * len(games), games) == pytest.approx(0.0)
    rng = random.Random(6)  # brute force, episodes of different lengths
    vocab = ["go", "take", "key", "north", "open", "door", "!"]
    for _ in range(20):
        eps = [[" ".join(rng.sample(vocab, 3)) for _ in range(rng.randint(1, 4))] for _ in games]
        same, diff = [], []
        for i in range(len(eps)):
            for j in range(i + 1, len(eps)):
                for k in range(min(len(eps[i]), len(eps[j]))):
                    a, b = set(eps[i][k].split()), set(eps[j][k].split())
                    (same if games[i] == games[j] else diff).append(len(a & b) / len(a | b))
        want = sum(same) / len(same) - sum(diff) / len(diff)
        assert input_dependence(eps, games) == pytest.approx(want)


# ------------------------------------------------------------------------------------ synthetic streams
def _stream(n, **series):
    return [{"step": i + 1, **{k: (v(i) if callable(v) else v) for k, v in series.items()}} for i in range(n)]


def _kinds(alerts):
    return [(a.step, a.kind) for a in alerts]


def test_reward_std_collapse_fires_once_while_reward_has_not_converged():
    # the Echo Trap: std falls from 0.4 to 0 by step 10 while success stays at 0.1
    rows = _stream(30, group_return_std=lambda i: max(0.0, 0.4 - 0.045 * i), success_rate=0.1, return_mean=0.1)
    alerts = detect(rows)
    flat_from = next(r["step"] for r in rows if r["group_return_std"] <= 0.05)
    assert _kinds(alerts) == [(flat_from + 4, "reward_std_collapse")], "once, when the 5th flat step is seen"
    assert alerts[0].evidence["peak_std"] == pytest.approx(0.4) and "Echo Trap" in alerts[0].message
    assert "\n" not in alerts[0].message
    # the condition clears (std back) and returns: a second episode, a second alert
    rows2 = rows[:20] + _stream(3, group_return_std=0.3, success_rate=0.1) + _stream(10, group_return_std=0.0,
                                                                                     success_rate=0.1)
    for i, r in enumerate(rows2):
        r["step"] = i + 1
    assert [k for _, k in _kinds(detect(rows2))] == ["reward_std_collapse"] * 2
    # zero_std_group_frac stands in when group_return_std is missing
    assert _kinds(detect(_stream(8, zero_std_group_frac=1.0, success_rate=0.0))) == [(5, "reward_std_collapse")]
    assert detect(_stream(8, zero_std_group_frac=0.5, success_rate=0.0)) == []


def test_a_converged_run_does_not_fire_and_the_control_without_the_convergence_check_does():
    # healthy: success climbs to 1, then every group ties at the maximum return (std 0): converged, not collapsed
    rows = _stream(40, success_rate=lambda i: min(1.0, 0.1 + 0.05 * i),
                   group_return_std=lambda i: 0.0 if i >= 18 else 0.4, return_mean=lambda i: min(0.9, 0.05 * i),
                   invalid_rate=lambda i: max(0.0, 0.5 - 0.03 * i), grad_norm=lambda i: 2.0 + 0.5 * (i % 3))
    assert detect(rows) == []
    broken = detect(rows, check_convergence=False)  # negative control: the convergence check removed
    assert [k for _, k in _kinds(broken)] == ["reward_std_collapse"]


def test_grad_norm_spike_fires_on_a_spike_not_on_noise():
    rng = random.Random(3)
    noisy = [2.5 * rng.lognormvariate(0, 0.4) for _ in range(300)]  # demo-like spread (max/median ≈ 3)
    assert max(noisy) / sorted(noisy)[150] > 2.5, "the noise must be real noise"
    healthy = _stream(300, grad_norm=lambda i: noisy[i], success_rate=0.5, group_return_std=0.3)
    assert detect(healthy) == []
    spiky = [dict(r) for r in healthy]
    for s in (100, 101, 102):  # a 3-step spike: one alert
        spiky[s - 1]["grad_norm"] = 60.0
    spiky[199]["grad_norm"] = float("inf")
    assert _kinds(detect(spiky)) == [(100, "grad_norm_spike"), (200, "grad_norm_spike")]
    # a step without an update logs grad_norm 0: ignored, it neither spikes nor drags the median down
    skipped = _stream(12, grad_norm=lambda i: 0.0 if i < 8 else 3.0, skipped_update=lambda i: 1.0 if i < 8 else 0.0)
    assert detect(skipped) == []
    # negative control: a spike factor inside the noise fires on the healthy run
    assert detect(healthy, spike_factor=1.5) != []


@pytest.mark.parametrize("key,kind", [("invalid_rate", "invalid_rising"), ("repetition_rate", "repetition_rising")])
def test_rising_invalid_or_repetition_rate_fires_noise_does_not(key, kind):
    rng = random.Random(4)
    wobble = [min(1.0, max(0.0, 0.3 + rng.uniform(-0.2, 0.2))) for _ in range(60)]
    assert detect(_stream(60, **{key: lambda i: wobble[i]}, group_return_std=0.3)) == []
    rising = _stream(30, **{key: lambda i: 0.1 if i < 15 else min(1.0, 0.1 + 0.15 * (i - 14))}, group_return_std=0.3)
    alerts = detect(rising)
    assert [k for _, k in _kinds(alerts)] == [kind]
    assert 16 <= alerts[0].step <= 22
    falling = _stream(30, **{key: lambda i: max(0.0, 0.9 - 0.05 * i)}, group_return_std=0.3)  # a healthy run
    assert detect(falling) == []


def test_rising_rule_matches_its_definition_on_random_streams():
    """Brute force: fire at t when mean(v[t-w:t]) - min over earlier non-overlapping w-spans >= rise_by and the mean
    >= rise_level, and the condition was off at t-1 (once per episode)."""
    w, rise_by, level = 3, 0.2, 0.4
    rng = random.Random(5)
    for _ in range(30):
        v = [rng.random() * rng.choice([0.3, 1.0]) for _ in range(40)]
        on = [False] * (len(v) + 1)
        for t in range(2 * w, len(v) + 1):
            recent = sum(v[t - w:t]) / w
            base = min(sum(v[i:i + w]) / w for i in range(t - 2 * w + 1))
            on[t] = recent - base >= rise_by - 1e-12 and recent >= level
        want = [t for t in range(1, len(v) + 1) if on[t] and not on[t - 1]]
        rows = _stream(len(v), invalid_rate=lambda i: v[i])
        got = [a.step for a in detect(rows, window=w, rise_by=rise_by, rise_level=level)]
        assert got == want


def test_detector_tolerates_rows_with_nulls_and_refuses_bad_parameters():
    rows = [{"step": 1, "success_rate": 0.0, "entropy": None, "grad_norm": None, "group_return_std": None}] * 10
    assert detect(rows) == []
    with pytest.raises(ValueError, match="window"):
        CollapseDetector(window=0)
    with pytest.raises(ValueError, match="spike_factor"):
        CollapseDetector(spike_factor=1.0)
    assert set(KINDS) == {"reward_std_collapse", "grad_norm_spike", "invalid_rising", "repetition_rising"}


# ------------------------------------------------------------------------------------ the real runs
def _records():
    return [json.loads(x) for x in RECORDS.read_text().splitlines() if x.strip()]


def _visible_collapse_step(record, min_steps=5):
    """notebooks/03_policy.md's `collapsed` rule: the step where std < 1e-3 and success 0 have held for 5 steps."""
    run = 0
    for s in record["steps"]:
        run = run + 1 if (s["group_return_std"] or 0.0) < 1e-3 and (s["success_rate"] or 0.0) == 0.0 else 0
        if run >= min_steps:
            return s["step"]
    return None


EXPECTED = {  # run → step at which (a) fires; None: it must not fire (the two runs that took off)
    ("ppo", "dense", 2): 9, ("rloo", "dense", 2): 12, ("ppo", "sparse", 2): 13, ("grpo", "sparse", 0): 12,
    ("grpo", "sparse", 1): 10, ("rloo", "sparse", 0): None, ("rloo", "dense", 0): None}


def test_replayed_on_the_real_runs_it_fires_on_the_5_collapses_and_not_on_the_2_that_took_off():
    records = _records()
    assert len(records) == 7
    for r in records:
        name = (r["cell"]["algo"], r["cell"]["reward.kind"], r["seed"])
        fired = [a.step for a in detect(r) if a.kind == "reward_std_collapse"]
        visible = _visible_collapse_step(r)
        assert (visible is not None) == (r["eval"]["success_rate"] == 0.0), name  # 5 collapsed, 2 took off
        assert fired == ([EXPECTED[name]] if EXPECTED[name] else []), name
        if visible is not None:  # no later than notebook 03's rule sees it (ppo dense s2: one step earlier)
            assert visible - 1 <= fired[0] <= visible, name
    # ppo sparse s2 ends in an invalid-action collapse (0 → 1.0 from step 19): (c) sees it
    ppo_sparse = next(r for r in records if r["cell"] == {"algo": "ppo", "reward.kind": "sparse"})
    assert (21, "invalid_rising") in _kinds(detect(ppo_sparse))
    # negative control: a std floor far above the runs' noise fires on the runs that took off too
    took_off = [r for r in records if r["eval"]["success_rate"] > 0.5]
    assert len(took_off) == 2 and all(detect(r, std_floor=0.3) for r in took_off)


def test_collapse_step_is_the_first_reward_std_collapse_alert_of_any_source(tmp_path):
    """The library's one collapse rule, on a sweep record, its rows, a run dir and a metrics.jsonl file; the 5 real
    collapses and not the 2 runs that took off; negative control: a converged run (zero spread at success 1) and an
    earlier alert of another kind are not a collapse."""
    records = _records()
    steps = {(r["cell"]["algo"], r["cell"]["reward.kind"], r["seed"]): collapse_step(r) for r in records}
    assert steps == EXPECTED
    r = next(r for r in records if EXPECTED[(r["cell"]["algo"], r["cell"]["reward.kind"], r["seed"])])
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in r["steps"]))
    assert collapse_step(r["steps"]) == collapse_step(run) == collapse_step(run / "metrics.jsonl") == collapse_step(r)
    assert collapse_step(str(run / "metrics.jsonl")) == collapse_step(r)
    won = [{"step": i, "group_return_std": 0.0, "success_rate": 1.0} for i in range(1, 9)]
    assert collapse_step(won) is None and collapse_step([{**x, "success_rate": 0.0} for x in won]) == 5
    spike = {"step": 2, "kind": "grad_norm_spike", "message": "", "evidence": {}}
    assert collapse_step([{"step": 1, "alerts": []}, {"step": 2, "alerts": [spike]}]) is None
    assert collapse_step(tmp_path / "nothing") is None


def test_alerts_markdown_replays_records_written_before_the_detector():
    records = _records()
    collapsed = next(r for r in records if r["cell"]["algo"] == "grpo")
    table = alerts_markdown(collapsed)
    assert table.startswith("| step | kind | message |") and "reward_std_collapse" in table
    took_off = next(r for r in records if r["eval"]["success_rate"] == 1.0)
    assert alerts_markdown(took_off).startswith("No collapse alerts")
    rows = [{"step": 1, "alerts": []}, {"step": 2, "alerts": [{"step": 2, "kind": "grad_norm_spike",
                                                               "message": "step 2: a|b", "evidence": {}}]}]
    assert read_alerts(rows) == rows[1]["alerts"] and "a\\|b" in alerts_markdown(rows)


def test_plot_diagnostics_draws_the_real_records(tmp_path):
    from agentrl_lib.plots import DIAGNOSTIC_PANELS, plot_diagnostics

    records = _records()
    for r in (records[0], records[1], records[4]):  # collapsed, took off, collapsed with two alerts
        fig = plot_diagnostics(r, title=str(r["cell"]))
        assert len(fig.axes) == len(DIAGNOSTIC_PANELS)
        n_alerts = len(read_alerts(r))
        assert sum(len(ax.lines) for ax in fig.axes) >= n_alerts * len(DIAGNOSTIC_PANELS)
        matplotlib.pyplot.close(fig)
    fig = plot_diagnostics(_records()[0], alerts=[], path=tmp_path / "d.png")
    assert (tmp_path / "d.png").stat().st_size > 1000
    matplotlib.pyplot.close(fig)
    with pytest.raises(ValueError, match="no metrics rows"):
        plot_diagnostics([])


# ------------------------------------------------------------------------------------ the trainer
def _config(games, steps, stop, stop_kinds="reward_std_collapse"):
    return RunConfig(env=EnvConfig(games=str(games), max_turns=2), algo=AlgoConfig.from_preset("grpo", group_size=4),
                     model=ModelConfig(device="cpu"),
                     train=TrainConfig(steps=steps, games_per_step=2, minibatch_size=8, lr=1e-3, max_new_tokens=4,
                                       temperature=1.0, seed=1, checkpoint_every=10, stop_on_collapse=stop,
                                       stop_kinds=stop_kinds))


def _planted(monkeypatch):
    """Plant a collapse: every row reports tied groups and no win (whatever the tiny model did)."""
    step = Trainer.step
    monkeypatch.setattr(Trainer, "step", lambda self, i: {**step(self, i), "group_return_std": 0.0,
                                                          "zero_std_group_frac": 1.0, "success_rate": 0.0})


def _planted_spike(monkeypatch):
    """Plant a lone grad-norm spike at step 2 (1 → 100) in rows that otherwise look healthy (groups differ)."""
    step = Trainer.step
    monkeypatch.setattr(Trainer, "step", lambda self, i: {**step(self, i), "grad_norm": 100.0 if i == 1 else 1.0,
                                                          "skipped_update": 0.0, "group_return_std": 0.5,
                                                          "zero_std_group_frac": 0.0, "success_rate": 0.5})


def _trainer(cfg, run, tiny_model_dir, resume=False):
    t = Trainer(cfg, run, init=tiny_model_dir, resume=resume, pool=SerialPool(8, factory=ParityEnv), progress=False)
    t.detector = CollapseDetector(window=2)  # a short window keeps the run at 3 steps
    return t


@pytest.mark.slow
@pytest.mark.trains
def test_trainer_logs_alerts_and_stop_on_collapse_stops_resumably(tiny_model_dir, tmp_path, monkeypatch, caplog):
    games = scripted_games(tmp_path / "games")
    _planted(monkeypatch)
    # without the flag: a warning and the row's alerts, and the run goes to its end
    t = _trainer(_config(games, 3, stop=False), tmp_path / "free", tiny_model_dir)
    with caplog.at_level(logging.WARNING, logger="agentrl_lib.trainer"):
        try:
            rows = t.train()
        finally:
            t.close()
    assert [r["step"] for r in rows] == [1, 2, 3]
    logged = [json.loads(x) for x in (tmp_path / "free" / "metrics.jsonl").read_text().splitlines()]
    assert [[a["kind"] for a in r["alerts"]] for r in logged] == [[], ["reward_std_collapse"], []]
    assert any("reward-variance collapse" in m for m in caplog.messages)
    assert "reward_std_collapse" in alerts_markdown(tmp_path / "free")
    assert all(isinstance(r["repetition_rate"], float) and r["response_length"] >= 1 for r in logged)
    assert all(-1 <= r["input_dependence"] <= 1 for r in logged)  # 2 games x 4 episodes: both kinds of pairs
    # with the flag: stops after step 2's checkpoint, one clear line; resume runs on to the end without a new alert
    run = tmp_path / "stop"
    t = _trainer(_config(games, 3, stop=True), run, tiny_model_dir)
    try:
        with pytest.raises(CollapseError) as err:
            t.train()
    finally:
        t.close()
    msg = str(err.value)
    assert "\n" not in msg and "stopped at step 2" in msg and "--resume" in msg and "step_000002" in msg
    assert cli.is_user_error(err.value)  # the CLI prints it as one line
    assert (run / "checkpoints" / "step_000002").is_dir()  # run_rl draws the curves of a stopped run: test_run.py
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
    t = _trainer(_config(games, 3, stop=True), run, tiny_model_dir, resume=True)
    try:
        rows = t.train()
    finally:
        t.close()
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[2]["alerts"] == []


@pytest.mark.trains
def test_a_lone_grad_norm_spike_stops_the_run_only_when_its_kind_is_selected(tiny_model_dir, tmp_path, monkeypatch):
    games = scripted_games(tmp_path / "games")
    _planted_spike(monkeypatch)
    # default stop_kinds (the reward-std collapse only): the spike is logged, the run goes on to its end
    t = _trainer(_config(games, 2, stop=True), tmp_path / "std-only", tiny_model_dir)
    t.detector = CollapseDetector(window=2, spike_min_history=1)  # one earlier grad norm is enough history
    try:
        rows = t.train()
    finally:
        t.close()
    assert [[a["kind"] for a in r["alerts"]] for r in rows] == [[], ["grad_norm_spike"]]
    # the same run with the spike's kind selected stops at step 2, after its checkpoint (control: the spike is seen)
    run = tmp_path / "spike"
    t = _trainer(_config(games, 2, stop=True, stop_kinds="reward_std_collapse, grad_norm_spike"), run, tiny_model_dir)
    t.detector = CollapseDetector(window=2, spike_min_history=1)
    try:
        with pytest.raises(CollapseError, match="stopped at step 2 .*grad_norm_spike: grad-norm spike"):
            t.train()
    finally:
        t.close()
    assert (run / "checkpoints" / "step_000002").is_dir()


def test_stop_kinds_select_the_alerts_that_stop_and_bad_ones_are_refused():
    from agentrl_lib.config import ConfigError

    def stops(train: TrainConfig) -> frozenset[str]:
        return run_parts(RunConfig(train=train)).stop_kinds

    assert stops(TrainConfig(stop_on_collapse=True)) == {"reward_std_collapse"}
    assert stops(TrainConfig(stop_on_collapse=True, stop_kinds="all")) == set(KINDS)
    assert stops(TrainConfig(stop_kinds="all")) == set()  # stop_on_collapse off: never
    assert stopping_kinds(True, " grad_norm_spike, invalid_rising ") == {"grad_norm_spike", "invalid_rising"}
    for bad, says in (("grad_norm", "unknown: grad_norm"), ("", "got ''"), ("all,bogus", "unknown: bogus")):
        RunConfig(train=TrainConfig(stop_kinds=bad))  # the config alone does not know the alert kinds ...
        with pytest.raises(ConfigError, match="train.stop_kinds") as err:  # ... their lookup refuses it, on or off
            run_parts(RunConfig(train=TrainConfig(stop_kinds=bad)))
        assert says in str(err.value) and "reward_std_collapse,grad_norm_spike" in str(err.value)


def test_stop_on_collapse_is_a_train_flag():
    a = cli.build_parser().parse_args(["train", "--out", "o", "--stop-on-collapse"])
    assert flags.build_config(a).train.stop_on_collapse is True
    a = cli.build_parser().parse_args(["train", "--out", "o"])
    assert flags.build_config(a).train.stop_on_collapse is False
    assert flags.build_config(a).train.stop_kinds == "reward_std_collapse"
    a = cli.build_parser().parse_args(["train", "--out", "o", "--stop-kinds", "grad_norm_spike,invalid_rising"])
    assert run_parts(flags.build_config(a)).stop_kinds == set()  # the kinds alone do not turn stopping on
    a = cli.build_parser().parse_args(["train", "--out", "o", "--stop-on-collapse", "--stop-kinds", "invalid_rising"])
    assert run_parts(flags.build_config(a)).stop_kinds == {"invalid_rising"}
