"""results/regenerate.py (experiments.regenerate): the pilot's rule for the number of seeds (seeds_for), the collection
of stage evaluations and the swe part's evaluation command (`agentrl eval --max-new-tokens`), and a dry run on a cut
sft_choice.json or a torn results line (one line, one warning)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from experiments import regenerate

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def flags_restored(monkeypatch):
    """regenerate.main() sets the module's ENV, DRY_RUN and RESULTS from its flags, and the module is imported once
    per session: each test gets them back as they were."""
    for name in ("ENV", "DRY_RUN", "RESULTS"):
        monkeypatch.setattr(regenerate, name, getattr(regenerate, name))


def interval_half_width(a, b) -> float:
    """scipy's pooled two-sample t interval of mean(a) - mean(b): half its width."""
    lo, hi = stats.ttest_ind(a, b, equal_var=True).confidence_interval(0.95)
    return (hi - lo) / 2


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_half_width_is_scipys_two_sample_interval(n):
    """Two cells of n seeds whose pooled sd is the pilot's: scipy's interval has the half-width seeds_for predicts."""
    regen = regenerate
    pilot = [[0.30, 0.52], [0.61, 0.47]]
    got = regen.seeds_for(pilot)
    sd = got["pooled_sd"]
    z = np.linspace(-1, 1, n)
    a = 0.5 + sd * z / z.std(ddof=1)          # sample sd exactly `sd`
    b = 0.3 + sd * z / z.std(ddof=1)
    assert got["half_width_by_n"][n] == pytest.approx(interval_half_width(a, b), rel=1e-9)


def test_a_planted_formula_error_is_caught():
    """Negative control: a half-width without the sqrt(2) of a difference disagrees with scipy's interval."""
    sd, n = 0.1, 4
    planted = stats.t.ppf(0.975, 2 * (n - 1)) * sd * (1 / n) ** 0.5
    z = np.linspace(-1, 1, n)
    a, b = 0.5 + sd * z / z.std(ddof=1), 0.3 + sd * z / z.std(ddof=1)
    assert planted != pytest.approx(interval_half_width(a, b), rel=1e-3)


def test_seed_count_rule():
    regen = regenerate
    assert regen.seeds_for([[0.50, 0.60], [0.40, 0.45]])["n_seeds"] == 3          # small spread: the minimum
    wide = regen.seeds_for([[0.10, 0.60], [0.40, 0.80]])
    assert wide["n_seeds"] == regen.MAX_SEEDS and not wide["met"]                # capped, and it says so
    mid = regen.seeds_for([[0.40, 0.52], [0.45, 0.55]])
    n = mid["n_seeds"]
    assert mid["half_width_by_n"][n] <= regen.MAX_DIFF_HALF_WIDTH
    assert n == 3 or mid["half_width_by_n"][n - 1] > regen.MAX_DIFF_HALF_WIDTH    # the fewest that meets it
    with pytest.raises(ValueError):
        regen.seeds_for([[0.5], [0.4]])


def test_collect_evals_appends_each_finished_evaluation_once(tmp_path, monkeypatch):
    """runs/evals (agentrl eval) and runs/evals-swe (the swe part's evaluation) land in stage_evals.jsonl once each,
    with their config; an evaluation whose result file is missing (still running) is not collected."""
    import json

    regen = regenerate
    monkeypatch.setattr(regen, "ROOT", tmp_path)
    monkeypatch.setattr(regen, "RESULTS", tmp_path / "results")
    (tmp_path / "results").mkdir()
    result = {"success_rate": 0.5, "mean_turns": 3.0, "invalid_rate": 0.1, "mean_score_frac": 0.6, "n_games": 2,
              "env_errors": 0, "per_game": [{"game": "g0", "won": True, "turns": 2}, {"game": "g1", "won": False,
                                                                                    "turns": 4}]}
    for folder, meta in [("evals", {"stage": "base", "model": "embedded", "games": "cooking-heldout", "max_turns": 8}),
                         ("evals-swe", {"stage": "sft", "model": "runs/sft/x", "games": "swe-heldout-l1",
                                        "level": 1, "max_turns": 5, "max_new_tokens": 160, "extra": "dropped"})]:
        d = tmp_path / "runs" / folder
        d.mkdir(parents=True)
        (d / "a.meta.json").write_text(json.dumps(meta))
        (d / "a.json").write_text(json.dumps(result))
        (d / "b.meta.json").write_text(json.dumps({**meta, "model": "still-running"}))   # no b.json yet
    assert regen.collect_evals() == 1 and regen.collect_evals("evals-swe") == 1
    assert regen.collect_evals() == 0 and regen.collect_evals("evals-swe") == 0          # once each
    recs = [json.loads(x) for x in (tmp_path / "results" / "stage_evals.jsonl").read_text().splitlines()]
    plain, swe = recs
    assert plain["config"]["command"] == "agentrl eval" and plain["config"]["max_new_tokens"] == 24
    assert swe["config"]["command"] == "agentrl eval" and swe["config"]["max_new_tokens"] == 160
    assert swe["level"] == 1 and "extra" not in swe and plain["eval"]["per_game"] == [["g0", True, 2], ["g1", False, 4]]
    assert swe["eval"]["success_rate"] == 0.5 and swe["eval"]["mean_score_frac"] == 0.6
    assert plain["seed"] is None and swe["seed"] == 0     # the base model has no seed; an SFT model has its own


def test_explore_evals_evaluate_each_run_here_at_each_temperature_and_keep_the_episodes(tmp_path, monkeypatch):
    """Every recorded exploration run whose dir is here gets one `agentrl eval` per EXPLORE_EVAL_TEMPERATURES at its
    own turn limit (the commands parse with the real CLI: greedy without --temperature, sampled with it and seed 0);
    a run whose dir is gone is skipped; the collected records (results/exploration_evals.jsonl, not
    stage_evals.jsonl) keep the temperature, the training seed and each episode's score and actions beside the
    game's walkthrough (the game set's manifest), once each.
    Negative control (by hand when written): with the temperature left out of collect_evals' key, a run's second
    temperature, finished after its first was collected, was never collected (0 == 1)."""
    import json

    from agentrl_lib import cli

    regen = regenerate
    for name, value in [("ROOT", tmp_path), ("RESULTS", tmp_path / "results"), ("DRY_RUN", False)]:
        monkeypatch.setattr(regen, name, value)
    (tmp_path / "results").mkdir()
    recs = [{"run_dir": f"runs/sweeps/exploration/t{t}-s{s}", "seed": s, "cell": {"env.max_turns": t},
             "config": {"env": {"max_turns": t}}} for t, s in [(15, 1), (5, 0)]]
    (tmp_path / "results" / "exploration.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (tmp_path / recs[0]["run_dir"]).mkdir(parents=True)
    (tmp_path / recs[0]["run_dir"] / "config.yaml").write_text("{}")     # the 5-turn run's dir is not here
    (tmp_path / "games" / "cooking-heldout").mkdir(parents=True)
    (tmp_path / "games" / "cooking-heldout" / "manifest.json").write_text(json.dumps(
        {"games": [{"name": "g0", "walkthrough": ["take tuna from fridge", "prepare meal", "eat meal"]}]}))
    jobs = regen.explore_evals()
    assert len(jobs) == len(regen.EXPLORE_EVAL_TEMPERATURES) == 4
    parsed = [cli.build_parser().parse_args(cmd[3:]) for _, cmd in jobs]
    assert [a.temperature for a in parsed] == list(regen.EXPLORE_EVAL_TEMPERATURES)
    assert {a.model for a in parsed} == {recs[0]["run_dir"]} and {getattr(a, "env.max_turns") for a in parsed} == {15}
    assert {getattr(a, "train.seed") for a in parsed} == {0}
    ep = {"game": "g0", "won": False, "turns": 15, "score": 2.0, "max_score": 3.0, "actions": ["prepare meal"]}
    for _, cmd in jobs:   # each evaluation finishes after the previous one was collected
        Path(cmd[cmd.index("--out") + 1]).write_text(json.dumps(
            {"success_rate": 0.0, "n_games": 1, "per_game": [ep], "commit": "abc", "device": "cpu"}))
        assert regen.collect_evals("evals-explore") == 1
    assert regen.collect_evals("evals-explore") == 0
    assert not (tmp_path / "results" / "stage_evals.jsonl").exists()
    out = sorted((json.loads(x) for x in (tmp_path / "results" / "exploration_evals.jsonl").read_text().splitlines()),
                 key=lambda r: r["temperature"])
    assert [r["temperature"] for r in out] == [r["config"]["temperature"] for r in out] == [0.0, 0.4, 0.7, 1.0]
    assert {r["seed"] for r in out} == {1} and {r["sample_seed"] for r in out} == {0} and out[0]["commit"] == "abc"
    assert out[3]["eval"]["episodes"] == [{"game": "g0", "score_frac": 2 / 3, "actions": ["prepare meal"],
                                           "walkthrough": ["take tuna from fridge", "prepare meal", "eat meal"]}]
    assert out[3]["eval"]["per_game"] == [["g0", False, 15]]


@pytest.mark.parametrize("dry_run", [False, True])
def test_swe_stage_eval_is_agentrl_eval_with_the_swe_configs_budget(tmp_path, monkeypatch, dry_run):
    """The swe part evaluates through `agentrl eval` itself: its command parses with the real CLI parser, and the
    parsed evaluation gets configs/swe.yaml's turns and tokens per turn (160, not eval's default 24: a reply with a
    patch). Negative control (done by hand when this test was written): without eval's --max-new-tokens flag in
    cli.build_parser the parse exits (argparse: unrecognized arguments), and without the flag in the command the
    parsed budget is 24."""
    import yaml

    from agentrl_lib import cli
    from agentrl_lib.config import EnvConfig
    from agentrl_lib.flags import section_args

    regen = regenerate
    monkeypatch.setattr(regen, "ROOT", tmp_path)
    monkeypatch.setattr(regen, "DRY_RUN", dry_run)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "swe.yaml").write_text((ROOT / "configs" / "swe.yaml").read_text())
    conf = yaml.safe_load((ROOT / "configs" / "swe.yaml").read_text())
    ((name, cmd),) = regen.swe_stage_eval("runs/sft/x", "swe-heldout-l2", "sft", 2)
    assert name == "eval-sft-x-on-swe-heldout-l2" and cmd[:3] == regen.AGENTRL and cmd[3] == "eval"
    a = cli.build_parser().parse_args(cmd[3:])
    assert a.func is cli.commands.cmd_eval and a.model == "runs/sft/x" and a.temperature == 0.0
    assert getattr(a, "train.max_new_tokens") == conf["train"]["max_new_tokens"] == 160
    env = EnvConfig(**section_args(a, "env"))
    assert (env.games, env.max_turns) == ("games/swe-heldout-l2", conf["env"]["max_turns"])
    assert a.out == str(tmp_path / "runs" / "evals-swe" / "sft-x-on-swe-heldout-l2.json")
    meta = tmp_path / "runs" / "evals-swe" / "sft-x-on-swe-heldout-l2.meta.json"
    assert meta.exists() != dry_run  # a dry run writes nothing


def test_behaviour_part_samples_each_candidate_as_its_first_rollouts_would(tmp_path, monkeypatch):
    """The `behaviour` part's evaluation command parses with the real CLI into a sampled (T = configs/cooking.yaml's
    temperature), seeded evaluation of the validation games at the RL runs' max turns; sft_behaviour.json puts each
    candidate's sampled numbers beside the greedy ones of the SFT rounds. Negative control: a candidate whose
    evaluation is missing is left out, not given a number."""
    import json

    import yaml

    from agentrl_lib import cli

    regen = regenerate
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(regen, "ROOT", tmp_path)
    monkeypatch.setattr(regen, "RESULTS", results)
    monkeypatch.setattr(regen, "SFT_CANDIDATES", ((64, 6e-6), (64, 9e-6)))
    monkeypatch.setattr(regen, "DRY_RUN", True)
    (name, cmd), _ = regen.behaviour_success()["jobs"]
    a = cli.build_parser().parse_args(cmd[3:])
    conf = yaml.safe_load((ROOT / "configs" / "cooking.yaml").read_text())
    assert a.func is cli.commands.cmd_eval and a.temperature == regen.BEHAVIOUR_T
    from agentrl_lib.config import TrainConfig

    assert regen.BEHAVIOUR_T == conf["train"].get("temperature", TrainConfig().temperature)
    assert getattr(a, "train.seed") == 0 and getattr(a, "env.max_turns") == conf["env"]["max_turns"]
    assert getattr(a, "env.games") == "games/cooking-valid"  # validation games, never held-out ones

    monkeypatch.setattr(regen, "DRY_RUN", False)
    monkeypatch.setattr(regen, "parallel", lambda jobs, n: [])
    out_dir = tmp_path / "runs" / "evals-sampled"
    out_dir.mkdir(parents=True)
    (out_dir / f"sampled-{Path(regen.sft_dir('cooking-train', 64, 1.0, 0, 6e-6)).name}-on-cooking-valid.json"
     ).write_text(json.dumps({"success_rate": 0.0625, "invalid_rate": 0.81}))
    (results / "sft_round1.json").write_text(json.dumps({"validation_success": {"64@6e-06": 0.47, "64@9e-06": 0.8},
                                                          "invalid_rate": {"64@6e-06": 0.51}}))
    res = regen.behaviour_success()
    assert res["candidates"] == {"64@6e-06": {"sampled_success": 0.0625, "sampled_invalid": 0.81,
                                              "greedy_success": 0.47, "greedy_invalid": 0.51}}
    assert json.loads((results / "sft_behaviour.json").read_text())["candidates"] == res["candidates"]


def test_choose_by_behaviour_takes_the_sampled_success_nearest_the_target(tmp_path, monkeypatch):
    """The candidate whose sampled validation success is nearest TARGET_SFT_SUCCESS inside the band (ties: the
    smaller learning rate) becomes sft_choice.json; the greedy choice before it is kept as sft_choice_greedy.json; a
    second call keeps the choice. Negative control: with no candidate inside the band the choice stops, naming them."""
    import json

    regen = regenerate
    monkeypatch.setattr(regen, "RESULTS", tmp_path)
    monkeypatch.setattr(regen, "SFT_CANDIDATES", ((64, 6.5e-6), (64, 7e-6), (64, 8e-6), (64, 9e-6)))

    def cands(*values):
        return {regen.candidate_name(64, lr): {"sampled_success": v, "greedy_success": 0.6}
                for lr, v in zip((6.5e-6, 7e-6, 8e-6, 9e-6), values)}

    with pytest.raises(SystemExit, match=r"64@6.5e-06: 6%, 64@7e-06: 20%, 64@8e-06: 60%"):
        regen.choose_by_behaviour(cands(0.0625, 0.2, 0.6, 0.7))
    (tmp_path / "sft_choice.json").write_text(json.dumps({"chosen": "runs/sft/greedy"}))
    chosen = regen.choose_by_behaviour(cands(0.0625, 0.4375, 0.5, 0.69))  # 0.4375 and 0.5: |−0.0125| < |0.05|
    assert chosen == regen.sft_dir("cooking-train", 64, 1.0, 0, 7e-6)
    assert json.loads((tmp_path / "sft_choice_greedy.json").read_text())["chosen"] == "runs/sft/greedy"
    c = json.loads((tmp_path / "sft_choice.json").read_text())
    assert c["statistic"] == "sampled" and c["chosen_lr"] == 7e-6 and c["sampled_success"]["64@7e-06"] == 0.4375
    assert regen.choose_by_behaviour(cands(0.45, 0.45, 0.45, 0.45)) == chosen  # chosen once, kept
    (tmp_path / "sft_choice.json").unlink()
    assert regen.choose_by_behaviour(cands(0.0, 0.45, 0.45, 0.9)).endswith("lr7e-06-s0")  # tie: the smaller lr


def test_choose_seeds_counts_only_pilot_records_with_the_configs_probe_settings(tmp_path, monkeypatch):
    """The seeds rule reads the pilot's four runs with configs/cooking.yaml's train.lr and whitening setting
    (regenerate.DESIGN_FIELDS) from the chosen start; runs with another setting (the stopped 3e-5 pilot, or whitened
    advantages) must not complete the pilot (planted: the same four runs at either leave it unfinished)."""
    import json

    regen = regenerate
    monkeypatch.setattr(regen, "RESULTS", tmp_path)

    def write(lr, whiten=False):
        recs = [{"cell": {"algo": a, "reward.kind": "dense"}, "seed": s, "eval": {"success_rate": v},
                 "config": {"model": {"name": "/x/runs/sft/chosen"}, "train": {"lr": lr},
                            "algo": {"normalize_advantages": whiten}}}
                for (a, s), v in zip([("ppo", 0), ("ppo", 1), ("rloo", 0), ("rloo", 1)], [0.5, 0.6, 0.4, 0.45])]
        (tmp_path / "algo_reward.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))

    settings = regen.design_settings()
    assert settings == {"train.lr": 1e-5, "algo.normalize_advantages": False}  # configs/cooking.yaml's
    for planted in [(3e-5, False), (1e-5, True)]:
        write(*planted)
        with pytest.raises(SystemExit, match="the pilot is not finished"):
            regen.choose_seeds("runs/sft/chosen")
    write(1e-5, False)
    assert regen.choose_seeds("runs/sft/chosen") == (0, 1, 2)
    assert json.loads((tmp_path / "seeds_choice.json").read_text())["n_seeds"] == 3


@pytest.mark.subprocess
def test_all_plans_the_probe_and_the_pilot_before_the_main_sweep(tmp_path):
    """`regenerate.py all` on a fresh results folder: the PPO probe and the pilot come before the main sweep's
    other cells (the main sweep's seeds come from the pilot), and the dry run assumes SEEDS until the pilot is in."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / "results" / "regenerate.py"), "all", "--dry-run", "--results",
                          str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    names = [ln.split(" ", 1)[0] for ln in out.stdout.splitlines() if " sweep --base configs/cooking.yaml" in ln]
    assert names[0].startswith("ppo_probe-ppo-dense-1e-05,3e-05-false,true")
    first_main = next(i for i, n in enumerate(names) if n.startswith(("algo_reward-grpo", "algo_reward-ppo-sparse")))
    pilot = [i for i, n in enumerate(names) if n.startswith(("algo_reward-ppo-dense", "algo_reward-rloo-dense"))]
    assert 0 < pilot[0] and pilot[3] < first_main  # the pilot's four runs, then the main sweep
    assert "the plan below assumes 3 seeds" in out.stdout + out.stderr


def test_all_runs_the_pilot_before_it_chooses_the_main_sweeps_seeds(tmp_path, monkeypatch):
    """Without --dry-run, `all` runs the probe and the pilot first, then chooses the seeds, then the rest: the order
    the seeds rule needs (before, `all` stopped on a fresh machine with "run pilot first"). Every command is
    replaced by a recorder; the planted order (seeds chosen before the pilot ran) is what the assertion rejects."""
    import subprocess
    import sys

    regen = regenerate
    calls = []
    monkeypatch.setattr(regen, "parallel", lambda jobs, n: calls.append([name for name, _ in jobs]) or [])
    monkeypatch.setattr(regen, "choose_sft", lambda jobs: "runs/sft/chosen")
    monkeypatch.setattr(regen, "choose_seeds", lambda init: calls.append(["<seeds>"]) or (0, 1, 2))
    monkeypatch.setattr(regen, "games", lambda names: [])
    monkeypatch.setattr(regen, "swe_part", lambda n: [])
    monkeypatch.setattr(regen, "balanced_part", lambda n: [])
    monkeypatch.setattr(regen, "collect_evals", lambda folder="evals": 0)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: None)
    monkeypatch.setattr(sys, "argv", ["regenerate.py", "all", "--results", str(tmp_path)])
    (tmp_path / "sft_choice.json").write_text('{"chosen": "runs/sft/chosen", "chosen_demos": 64, "chosen_lr": 7e-6}')
    with pytest.raises(SystemExit) as stop:
        regen.main()
    assert stop.value.code == 0
    flat = [n for c in calls for n in c]
    seeds_at = flat.index("<seeds>")
    assert any(n.startswith("ppo_probe-") for n in flat[:seeds_at])
    assert sum(n.startswith(("algo_reward-ppo-dense", "algo_reward-rloo-dense")) for n in flat[:seeds_at]) == 4
    assert any(n.startswith("algo_reward-grpo") for n in flat[seeds_at:])


def test_only_the_smallest_worlds_complexity_runs_are_evaluated_on_the_larger_worlds():
    """The transfer finding reads `evals.w8` of the w2-o3-q4 runs: their sweep command evaluates the larger levels'
    held-out games at the training max turns; a larger level's runs get no extra evaluation (each would cost ~10 CPU
    minutes and answer nothing)."""
    regen = regenerate
    assert regen.transfer_evals("w2-o3-q4") == ["--also-eval", "w4=games/w4-o6-q4-heldout@10",
                                                "w8=games/w8-o12-q4-heldout@10"]
    assert regen.transfer_evals("w4-o6-q4") == regen.transfer_evals("w8-o12-q4") == []
    import yaml

    assert yaml.safe_load((ROOT / "configs" / "custom.yaml").read_text())["env"]["max_turns"] == \
        regen.COMPLEXITY_TURNS


def test_game_sets_lists_each_cooking_games_ingredient_places_in_sft_order(tmp_path, monkeypatch):
    regen = regenerate
    monkeypatch.setattr(regen, "ROOT", tmp_path)
    monkeypatch.setattr(regen, "RESULTS", tmp_path / "results")
    (tmp_path / "results").mkdir()
    walk = [["inventory", "examine cookbook", f"take {x} from {p}", "prepare meal", "eat meal"]
            for x, p in [("tuna", "fridge"), ("salt", "counter"), ("carrot", "fridge")]]
    walk.append(["inventory", "examine cookbook", "take a from counter", "take b from fridge", "prepare meal",
                 "eat meal"])
    (tmp_path / "games" / "cooking-train").mkdir(parents=True)
    (tmp_path / "games" / "cooking-train" / "manifest.json").write_text(json.dumps(
        {"games": [{"name": f"game_{i}", "walkthrough": w} for i, w in enumerate(walk)]}))
    (tmp_path / "games" / "w2-o3-q4-train").mkdir(parents=True)   # not a cooking set: left out
    (tmp_path / "games" / "w2-o3-q4-train" / "manifest.json").write_text(json.dumps({"games": []}))
    regen.write_game_sets()
    sets = json.loads((tmp_path / "results" / "game_sets.json").read_text())["sets"]
    assert list(sets) == ["cooking-train"]
    assert sets["cooking-train"]["games"] == ["game_0", "game_1", "game_2", "game_3"]
    assert sets["cooking-train"]["take_places"] == [["fridge"], ["counter"], ["fridge"], ["counter", "fridge"]]
    assert sets["cooking-train"]["walkthrough_len"] == [5, 5, 5, 6]
    assert sets["cooking-train"]["make_games"][-4:] == ["--n", "64", "--seed", "0"]


def test_committed_game_sets_match_the_held_out_walkthroughs_in_the_evaluations():
    """results/game_sets.json and results/exploration_evals.jsonl were written from the same held-out games: the
    place of each game's ingredient must agree (a game set made with other flags or seeds would not)."""
    sets = json.loads((ROOT / "results" / "game_sets.json").read_text())["sets"]
    from agentrl_lib.records import ingredient_places, load_results
    seen = ingredient_places(load_results("exploration_evals"))
    held = dict(zip(sets["cooking-heldout"]["games"], sets["cooking-heldout"]["take_places"]))
    assert seen and {g: held[g][0] for g in seen} == seen
    assert len(sets["cooking-train"]["games"]) == 64


def _pool(root, places: list[str]):
    """A planted textworld pool: game i (seed i) takes its ingredient from places[i]; story files are stand-ins."""
    from agentrl_lib.envs.base import write_manifest
    from agentrl_lib.envs.protocol import GameRecord

    root.mkdir(parents=True)
    games = []
    for i, place in enumerate(places):
        (root / f"g{i}.z8").write_bytes(b"z")
        (root / f"g{i}.json").write_text("{}")
        games.append(GameRecord(path=str(root / f"g{i}.z8"), name=f"g{i}", seed=i, max_score=3.0,
                                walkthrough=["open fridge", f"take apple from {place}", "eat apple"]))
    write_manifest(root, "textworld", games, {"n": len(places)})


def test_balanced_games_take_as_many_fridge_as_counter_games_interleaved(tmp_path, monkeypatch):
    """The balanced sets: the first k games of each place in seed order, fridge, counter, fridge, ... (so `--demos d`
    takes them balanced too), their files copied; a pool short of one place stops with the line that says what to
    raise (the control: a pool that would give 3 fridge games and 1 counter game is refused, not written)."""
    from agentrl_lib.envs.base import load_game_set

    regen = regenerate
    monkeypatch.setattr(regen, "ROOT", tmp_path)
    monkeypatch.setattr(regen, "BALANCED", {"bal": ("pool", 2), "short": ("pool2", 2)})
    _pool(tmp_path / "games" / "pool", ["fridge", "fridge", "fridge", "counter", "fridge", "counter", "counter"])
    assert regen.balanced_games("bal") == {"fridge": 2, "counter": 2}
    made = load_game_set(tmp_path / "games" / "bal")
    assert [g.name for g in made.games] == ["g0", "g3", "g1", "g5"]
    assert all(Path(g.path).parent == tmp_path / "games" / "bal" and Path(g.path).exists() for g in made.games)
    assert made.params["balanced_from"] == "pool" and made.params["per_place"] == 2
    _pool(tmp_path / "games" / "pool2", ["fridge", "fridge", "fridge", "counter"])
    with pytest.raises(SystemExit, match="too few games of a place for short .*counter: 1.*raise its --n"):
        regen.balanced_games("short")
    assert not (tmp_path / "games" / "short").exists()


def test_seeds_for_paired_takes_out_the_seed_effect():
    """A pilot whose seeds differ a lot (+-0.3) but whose cells differ by a constant plus small noise: the residual sd
    is the noise, so few seeds resolve +-15 points; the control (the same numbers with the seed effect scrambled
    across cells) asks for the most seeds."""
    noise = [[0.01, -0.02], [0.0, 0.02], [-0.01, 0.0]]
    seed_effect = [0.3, -0.3]
    table = {f"c{i}": {s: 0.5 + 0.1 * i + seed_effect[s] + noise[i][s] for s in (0, 1)} for i in range(3)}
    got = regenerate.seeds_for_paired(table)
    assert got["n_seeds"] == 3 and got["met"] and got["residual_sd"] < 0.03
    scrambled = {f"c{i}": {s: 0.5 + 0.1 * i + seed_effect[(s + i) % 2] for s in (0, 1)} for i in range(3)}
    bad = regenerate.seeds_for_paired(scrambled)
    assert bad["residual_sd"] > 0.2 and not bad["met"] and bad["n_seeds"] == 6
    with pytest.raises(ValueError, match="at least 2 cells with 2 common seeds"):
        regenerate.seeds_for_paired({"c0": {0: 0.1, 1: 0.2}})


@pytest.mark.parametrize("argv,line", [(["main", "--jobs", "0"], "--jobs 0: run at least 1 command"),
                                       (["main", "--results", "README.md"], "--results README.md is a file")])
def test_bad_flags_get_one_line(argv, line, monkeypatch, capsys):
    """A bad --jobs or --results: argparse's one line (exit 2), nothing run, no traceback."""
    import sys

    regen = regenerate
    monkeypatch.setattr(sys, "argv", ["regenerate.py", *argv])
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as stop:
        regen.main()
    err = capsys.readouterr().err
    assert stop.value.code == 2 and line in err and "Traceback" not in err


# ----------------------------------------------------------------------------- damaged inputs of a dry run
@pytest.mark.subprocess
def test_regenerate_dry_run_on_a_truncated_choice_and_a_torn_line(tmp_path):
    """`regenerate.py pilot --dry-run --results DIR` with sft_choice.json cut short: one line naming the file, exit 2
    (was a JSONDecodeError traceback); with the choice whole and the results file's last line torn: the plan is
    printed, and the torn line is one warning (records.load_results). Control: json.loads raises on that file."""
    root = Path(__file__).resolve().parents[1]
    whole = (root / "results" / "sft_choice.json").read_text()
    (tmp_path / "sft_choice.json").write_text(whole[:50])
    cmd = [sys.executable, str(root / "results" / "regenerate.py"), "pilot", "--dry-run", "--results", str(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-800:]
    last = p.stderr.strip().splitlines()[-1]  # the file, and what is wrong with it
    assert last.startswith(f"regenerate.py: error: {tmp_path}/sft_choice.json ") and "JSON" in last, last
    with pytest.raises(json.JSONDecodeError):  # control: the old read
        json.loads((tmp_path / "sft_choice.json").read_text())
    (tmp_path / "sft_choice.json").write_text(whole)
    (tmp_path / "algo_reward.jsonl").write_text((root / "results" / "algo_reward.jsonl").read_text()[:300])
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env, timeout=300)
    assert p.returncode == 0 and "commands to run" in p.stdout, p.stderr[-800:]
    assert re.search(r"algo_reward\.jsonl\b.*\bline 1\b.*\bignored\b", p.stderr), p.stderr  # the file, the line
