"""RAGEN's environments (bandit, frozenlake, sokoban) and RAGEN's answer format: walkthroughs win, games are
functions of their seed, rewards are RAGEN's, the parser keeps at most N actions, and one RL step runs on frozenlake.
Each check has a negative control (a planted bug the check catches)."""
from __future__ import annotations

import itertools
import math
import re

import pytest

from agentrl_lib.config import ConfigError, EnvConfig
from agentrl_lib.envs import get_family
from agentrl_lib.envs.bandit import HI_ARM_PROB, LO_ARM_SCORE, BanditEnv, payout
from agentrl_lib.envs.base import Moves, check_game_set, load_game_set, make_moves
from agentrl_lib.envs.frozenlake import ACTIONS as FL_ACTIONS
from agentrl_lib.envs.frozenlake import FrozenLakeEnv, generate_map, shortest_path
from agentrl_lib.envs.pool import SerialPool, open_pool
from agentrl_lib.envs.sokoban import ACTIONS as SK_ACTIONS
from agentrl_lib.envs.sokoban import SokobanEnv, generate_room, push, solve
from agentrl_lib.prompts import format_reply, parse_ragen_answer, parse_reply, system_prompt_for

FAMILIES = ("bandit", "bandit-reversed", "frozenlake", "sokoban")


def play(env, game: str, actions: list[str]):
    res = env.reset(game)
    total = 0.0
    for a in actions:
        res = env.step(a)
        total += res.reward
        if res.done:
            break
    return res, total


# ---- game sets: make-games, walkthroughs win, seeds ------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_game_set_walkthroughs_win_and_pass_the_game_check(family, tmp_path):
    fam = get_family(family)
    gs = fam.make_games(tmp_path / family, 24, seed=0)
    assert load_game_set(tmp_path / family).family == family and len(gs) == 24
    assert [g.path for g in gs.games] == [str(s) for s in range(24)]
    env = fam.make_env()
    for g in gs.games:
        res, total = play(env, g.path, g.walkthrough)
        assert res.done and res.info.won and res.info.valid, (g.name, res.obs)
        assert math.isclose(res.info.score, total, abs_tol=1e-6)
    report = check_game_set(gs, SerialPool(4, family), cache=False)
    assert report["played"] == 24


@pytest.mark.subprocess
def test_ragen_families_run_in_the_process_pool(tmp_path):
    """The runs' default pool (one worker process per slot, the family's env built in the worker) plays them."""
    gs = get_family("frozenlake").make_games(tmp_path / "fl", 3, seed=0)
    pool = open_pool(EnvConfig(games=str(tmp_path / "fl")), 3, gs)  # checks every game through the workers
    try:
        first = pool.reset([0, 1, 2], [g.path for g in gs.games])
        assert all(r.obs.count("\n") == 3 and "P" in r.obs for r in first)
        res = pool.step([0, 1, 2], [" || ".join(g.walkthrough) for g in gs.games])  # whole walkthrough in one turn
        assert all(r.info.won and r.done for r in res)
    finally:
        pool.close()


@pytest.mark.parametrize("family", FAMILIES)
def test_a_game_is_a_function_of_its_seed(family):
    fam = get_family(family)
    a, b = fam.make_env(), fam.make_env()
    obs = [a.reset(str(s)).obs for s in range(12)]
    assert obs == [b.reset(str(s)).obs for s in range(12)]
    if family.startswith("bandit"):  # two arm orders only: the seeds draw both
        assert len(set(obs)) == 2
    else:
        assert len(set(obs)) >= 10, "different seeds should make different games"


def test_sokoban_and_frozenlake_replays_are_deterministic():
    """Same seed, same actions → same observations and rewards (the slips of the ice are drawn from seed and move)."""
    moves = ["Left", "Down", "Right || Up", "Up", "Down || Down"]
    for make in (FrozenLakeEnv, SokobanEnv):
        runs = []
        for _ in range(2):
            env = make()
            env.reset("5")
            runs.append([(r.obs, r.reward, r.done) for r in (env.step(m) for m in moves)])
        assert runs[0] == runs[1]


# ---- Sokoban --------------------------------------------------------------------------------------------------------

def brute_force_shortest(room_text: str, max_len: int) -> int | None:
    """Independent of solve()'s search: try every move sequence of length 1, 2, ... (the moves made by the game's
    own rule, sokoban.push, and checked after each sequence)."""
    from agentrl_lib.envs.sokoban import Room

    room = Room.from_text(room_text)
    for n in range(1, max_len + 1):
        for seq in itertools.product(SK_ACTIONS, repeat=n):
            player, box = room.player, room.box
            for a in seq:
                player, box = push(room.walls, player, box, a)
                if box == room.target:
                    break
            if box == room.target:
                return n
    return None


TINY_ROOMS = ["#####\n#P_O#\n#_X_#\n#___#\n#####",
              "######\n#P___#\n#_X__#\n#___O#\n######",
              "#####\n#PXO#\n#####",
              "#####\n#O__#\n#_X_#\n#__P#\n#####"]


@pytest.mark.parametrize("room", TINY_ROOMS)
def test_sokoban_bfs_solution_is_optimal_against_brute_force(room):
    from agentrl_lib.envs.sokoban import Room

    best = solve(Room.from_text(room))
    assert best is not None
    assert brute_force_shortest(room, len(best)) == len(best)
    res, _ = play(SokobanEnv(), room, best)
    assert res.info.won


def test_brute_force_catches_a_non_optimal_solver():
    """Negative control: a 'solver' that first bumps into a wall (a wasted step) is longer than the brute-force
    optimum, and the optimality check catches it."""
    from agentrl_lib.envs.sokoban import Room

    room = TINY_ROOMS[1]
    padded = ["Up"] + solve(Room.from_text(room))  # the player starts under the top wall
    assert play(SokobanEnv(), room, padded)[0].info.won
    assert brute_force_shortest(room, len(padded)) < len(padded)


def test_sokoban_generator_rooms_are_solvable_and_the_check_matters():
    """Every generated room is solvable by an independent search (brute force over the env); without the BFS check
    the generator makes unsolvable rooms, which the same search catches (negative control)."""
    for s in range(40):
        room, best = generate_room(s)
        assert best, f"seed {s}: no solution"
        if len(best) <= 5:
            assert brute_force_shortest(room.render(), len(best)) == len(best), s
    unsolvable = [s for s in range(40) if generate_room(s, check=False)[1] is None]
    assert unsolvable, "the unchecked generator should make some unsolvable rooms"
    room, _ = generate_room(unsolvable[0], check=False)
    assert brute_force_shortest(room.render(), 6) is None  # the independent search agrees: no short solution


def test_sokoban_rewards_push_on_off_target_and_solved():
    # box right of the player, target right of the box: one push solves
    res, _ = play(SokobanEnv(), "#####\n#PXO#\n#####", ["Right"])
    assert math.isclose(res.reward, -0.1 + 1 + 10) and res.info.won and res.done
    # box on the target (√), pushed off it and then back on
    env = SokobanEnv()
    env.reset("######\n#P√__#\n######")
    off = env.step("Right")
    assert math.isclose(off.reward, -0.1 - 1) and not off.done
    env2 = SokobanEnv()
    env2.reset("######\n#_O__#\n#____#\n#_X__#\n#_P__#\n######")
    assert math.isclose(env2.step("Up").reward, -0.1)  # box moves up, not on target yet
    r = env2.step("Up")
    assert math.isclose(r.reward, -0.1 + 1 + 10) and r.info.won
    # a wall bump is a step (−0.1) that changes nothing; an unknown move is invalid and costs nothing
    env3 = SokobanEnv()
    first = env3.reset("#####\n#P_O#\n#_X_#\n#___#\n#####").obs
    bump = env3.step("Up")
    assert math.isclose(bump.reward, -0.1) and bump.info.valid and bump.obs == first
    bad = env3.step("jump")
    assert not bad.info.valid and bad.reward == 0 and bad.obs.endswith(first)


def test_multi_action_turn_sums_rewards_and_stops_at_done():
    env = SokobanEnv()
    env.reset("######\n#_O__#\n#____#\n#_X__#\n#_P__#\n######")
    res = env.step("Up || Up || Down || Down")  # solved on the 2nd move: the rest are not made
    assert res.done and res.info.won and math.isclose(res.reward, -0.1 + (-0.1 + 1 + 10)) and env.steps == 2
    env.reset("#####\n#P_O#\n#_X_#\n#___#\n#####")
    mixed = env.step("Down || fly || Right")  # the unknown move is skipped, the turn is invalid
    assert not mixed.info.valid and env.steps == 2 and math.isclose(mixed.reward, -0.2)


def _scripted(outcomes):
    """A `move` that returns the next (reward, episode over) of `outcomes`, and the list of moves it was asked for."""
    calls = []

    def move(m):
        calls.append(m)
        return outcomes[len(calls) - 1]
    return calls, move


def _check_make_moves(make_moves):
    """base.make_moves' contract on hand-made turns (moves "a" and "b"; anything else is not a move)."""
    parse = {"a": "A", "b": "B"}.get
    calls, move = _scripted([(0.5, False), (1.0, True), (9.0, False)])  # the 2nd move ends the episode
    assert make_moves("a || b || a", parse, move, 10) == (True, 1.5, True, 2) and calls == ["A", "B"]
    calls, move = _scripted([(-0.1, False)] * 3)  # an unknown piece: skipped, the turn invalid, the rest made
    res = make_moves("a || fly || b", parse, move, 10)
    assert (res.valid, res.over, res.made, calls) == (False, False, 2, ["A", "B"]) and math.isclose(res.reward, -0.2)
    for nothing in ("", "   ", "||", " || "):  # no piece at all: invalid, no move made
        calls, move = _scripted([])
        assert make_moves(nothing, parse, move, 10) == (False, 0.0, False, 0) and calls == []
    calls, move = _scripted([(0.0, False)] * 3)  # the episode's move limit ends it: the 3rd move is not made
    assert make_moves("a||a||a", parse, move, 2) == (True, 0.0, True, 2) and calls == ["A", "A"]


def _make_moves_not_stopping(action, parse_move, move, moves_left):
    """A planted bug: every move is made, even after the episode ended."""
    moves = [parse_move(p.strip()) for p in action.split("||") if p.strip()]
    results = [move(m) for m in moves if m is not None]
    return Moves(bool(moves) and None not in moves, sum(r for r, _ in results), any(o for _, o in results),
                 len(results))


def test_make_moves_follows_ragens_rule_and_the_check_catches_a_helper_that_does_not_stop():
    _check_make_moves(make_moves)
    with pytest.raises(AssertionError):  # negative control: the same checks fail on the planted bug
        _check_make_moves(_make_moves_not_stopping)


# ---- FrozenLake -----------------------------------------------------------------------------------------------------

def test_frozenlake_plan_reaches_the_goal_without_ice_and_maps_are_valid():
    for s in range(50):
        rows = generate_map(s)
        assert len(rows) == 4 and all(len(r) == 4 for r in rows)
        assert sum(r.count("S") for r in rows) == 1 and sum(r.count("G") for r in rows) == 1
        plan = shortest_path(rows)
        res, total = play(FrozenLakeEnv(slippery=False), str(s), [FL_ACTIONS[a] for a in plan])
        assert res.info.won and total == 1.0


def test_frozenlake_is_slippery_and_holes_end_the_episode():
    """On slippery ice the non-slippery plan wins only sometimes (gymnasium's 1/3 rule); a hole ends it, lost."""
    wins = 0
    for s in range(60):
        plan = shortest_path(generate_map(s))
        res, _ = play(FrozenLakeEnv(), str(s), [FL_ACTIONS[a] for a in plan])
        wins += res.info.won
    assert 0 < wins < 45
    lost = None
    for s in range(200):
        env = FrozenLakeEnv(slippery=False)
        rows = generate_map(s)
        env.reset(str(s))
        r0, c0 = env.cell
        for a, (dr, dc) in enumerate([(0, -1), (1, 0), (0, 1), (-1, 0)]):
            r, c = r0 + dr, c0 + dc
            if 0 <= r < 4 and 0 <= c < 4 and rows[r][c] == "H":
                lost = env.step(FL_ACTIONS[a])
                break
        if lost:
            break
    assert lost.done and lost.info.lost and not lost.info.won and "X" in lost.obs and lost.reward == 0


def test_frozenlake_invalid_actions_are_flagged():
    env = FrozenLakeEnv()
    first = env.reset("3").obs
    for bad in ("", "jump", "north", "Left Up"):
        res = env.step(bad)
        assert not res.info.valid and res.obs.endswith(first) and env.steps == 0
    assert env.step("left").info.valid  # case-insensitive


# ---- Bandit ---------------------------------------------------------------------------------------------------------

def test_bandit_payouts_match_ragen():
    """High-risk arm: mean over 4000 seeds within 4 binomial standard errors of p = 0.25; low-risk arm: 0.1 always."""
    n = 4000
    wins = sum(payout(s, hi_arm=True) for s in range(n))
    se = math.sqrt(HI_ARM_PROB * (1 - HI_ARM_PROB) / n)
    assert abs(wins / n - HI_ARM_PROB) < 4 * se
    assert {payout(s, hi_arm=False) for s in range(50)} == {LO_ARM_SCORE}


def test_bandit_arms_win_flags_and_the_reversed_labels():
    for reversed_labels, hi in ((False, "Dragon"), (True, "Phoenix")):
        lo = "Phoenix" if hi == "Dragon" else "Dragon"
        rewards = []
        for s in range(200):
            env = BanditEnv(reversed_labels)
            assert hi in env.reset(str(s)).obs
            r = env.step(hi.upper())
            assert r.done and r.info.won and r.info.valid and r.reward in (0.0, 1.0)
            rewards.append(r.reward)
            env.reset(str(s))
            r = env.step(lo)
            assert r.done and not r.info.won and r.info.lost and r.reward == LO_ARM_SCORE
        assert 0 < sum(rewards) < 100
        env = BanditEnv(reversed_labels)
        env.reset("0")
        bad = env.step("the red one")
        assert bad.done and not bad.info.valid and bad.reward == 0


# ---- RAGEN answer format --------------------------------------------------------------------------------------------

def test_ragen_parser():
    assert parse_ragen_answer("<think>go left</think><answer>Left || Up</answer>", 5) == ["Left", "Up"]
    assert parse_ragen_answer("<think>x</think><answer>Left || Up || Right</answer>", 2) == ["Left", "Up"]
    assert parse_ragen_answer("<answer>Up</answer>") == ["Up"]  # the think block is optional
    assert parse_ragen_answer("Up") is None and parse_ragen_answer("<answer>Up") is None
    assert parse_ragen_answer("<think>a</think>Up") is None
    # "||" and even an <answer> inside the think text are not acted on
    assert parse_ragen_answer("<think>Left || Down? <answer>Down</answer> no</think> <answer>Right</answer>", 3) \
        == ["Right"]
    assert parse_ragen_answer("<answer> || </answer>") == []
    assert parse_reply("<think>t</think><answer>Left || Up || Down</answer>", "ragen", 2) == "Left || Up"
    assert parse_reply("no tags here", "ragen", 3) == ""
    assert parse_reply("Up\nmore", "plain") == "Up"
    with pytest.raises(ValueError):
        parse_ragen_answer("<answer>Up</answer>", 0)


def _parser_ignoring_the_cap(reply: str, max_actions: int = 1):
    out = parse_ragen_answer(reply, 99)
    return out


def test_parser_cap_check_catches_a_parser_ignoring_max_actions():
    """Negative control: the same assertion as test_ragen_parser's cap line fails for a parser that keeps them all."""
    reply = "<think>x</think><answer>Left || Up || Right</answer>"
    assert parse_ragen_answer(reply, 2) == ["Left", "Up"]
    assert _parser_ignoring_the_cap(reply, 2) != ["Left", "Up"]


def test_ragen_reply_drives_the_grid_envs_and_invalid_replies_are_flagged():
    env = SokobanEnv()
    env.reset("######\n#_O__#\n#____#\n#_X__#\n#_P__#\n######")
    res = env.step(parse_reply("<think>push up twice</think><answer>Up || Up</answer>", "ragen", 2))
    assert res.info.won and res.info.valid
    env.reset("######\n#_O__#\n#____#\n#_X__#\n#_P__#\n######")
    res = env.step(parse_reply("Up Up", "ragen", 2))  # no <answer>: no move, an invalid turn
    assert not res.info.valid and env.steps == 0


def test_system_prompt_states_the_format_and_config_validates_it():
    plain, ragen = system_prompt_for("sokoban"), system_prompt_for("sokoban", "ragen", 3)
    assert "<answer>" not in plain and "<answer>" in ragen and "up to 3 actions" in ragen
    assert system_prompt_for("textworld") == system_prompt_for("textworld", "plain")  # TextWorld unchanged
    assert format_reply("Up", "ragen") == "<answer>Up</answer>" and parse_ragen_answer(format_reply("Up", "ragen")) \
        == ["Up"]
    EnvConfig(action_format="ragen", max_actions_per_turn=5).validate()
    for bad in (dict(action_format="xml"), dict(max_actions_per_turn=0)):
        with pytest.raises(ConfigError):
            EnvConfig(**bad).validate()


# ---- SFT demonstrations and one RL step -----------------------------------------------------------------------------

def test_sft_examples_in_ragen_format(tmp_path, tokenizer):
    from agentrl_lib.prompts import ChatFormat
    from agentrl_lib.sft import expert_examples

    gs = get_family("sokoban").make_games(tmp_path / "sk", 3, seed=0)
    chat = ChatFormat(tokenizer)
    ex = expert_examples(gs, chat, action_format="ragen")
    assert len(ex) == 3
    for e, g in zip(ex, gs.games):
        acted = tokenizer.decode([t for t, m in zip(e["input_ids"], e["assistant_masks"]) if m])
        assert acted.count("<answer>") == len(g.walkthrough) and f"<answer>{g.walkthrough[0]}</answer>" in acted
        assert "Answer format" in tokenizer.decode(e["input_ids"])


@pytest.mark.trains
def test_sft_more_games_pools_bandit_and_reversed_walkthroughs(tiny_model_dir, tmp_path, capsys):
    """`agentrl sft --more-games`: the walkthroughs of both label variants are pooled (each arm named equally often:
    chapter 05's format-only warm-up); --demos applies to each set; a --demos the extra set cannot give is one line."""
    import json

    from agentrl_lib.cli import main

    for family in ("bandit", "bandit-reversed"):
        get_family(family).make_games(tmp_path / family, 4, seed=0)
    out = tmp_path / "sft"
    assert main(["sft", "--model", tiny_model_dir, "--games", str(tmp_path / "bandit"), "--more-games",
                 str(tmp_path / "bandit-reversed"), "--demos", "2", "--out", str(out), "--device", "cpu"]) == 0
    summary = json.loads((out / "sft_summary.json").read_text())
    assert summary["examples"] == 4 and summary["games"] == [str(tmp_path / f) for f in ("bandit", "bandit-reversed")]
    # negative control: without --more-games only Dragon is demonstrated
    from agentrl_lib.models import load_tokenizer
    from agentrl_lib.prompts import ChatFormat
    from agentrl_lib.sft import expert_examples

    tok = load_tokenizer(tiny_model_dir)
    def named(gs):
        return {tok.decode([t for t, m in zip(e["input_ids"], e["assistant_masks"]) if m]).split("<")[0]
                for e in expert_examples(gs, ChatFormat(tok))}

    assert named(load_game_set(tmp_path / "bandit")) == {"Dragon"}
    assert named(load_game_set(tmp_path / "bandit-reversed")) == {"Phoenix"}
    get_family("bandit-reversed").make_games(tmp_path / "small", 1, seed=0)
    capsys.readouterr()
    assert main(["sft", "--model", tiny_model_dir, "--games", str(tmp_path / "bandit"), "--more-games",
                 str(tmp_path / "small"), "--demos", "2", "--out", str(tmp_path / "sft2"), "--device", "cpu"]) != 0
    err = capsys.readouterr().err
    assert re.search(r"--demos 2\b.*\b1 games\b.*--more-games", err) and "Traceback" not in err, err


@pytest.mark.trains
def test_one_rl_step_on_frozenlake_in_ragen_format(tiny_model_dir, tmp_path):
    from agentrl_lib.config import AlgoConfig, RunConfig, TrainConfig
    from agentrl_lib.run import run_rl

    get_family("frozenlake").make_games(tmp_path / "fl", 4, seed=0)
    config = RunConfig(env=EnvConfig(games=str(tmp_path / "fl"), max_turns=2, process_pool=False,
                                     action_format="ragen", max_actions_per_turn=2),
                       algo=AlgoConfig(advantage="grpo", group_size=2),
                       train=TrainConfig(steps=1, games_per_step=2, max_new_tokens=8))
    summary = run_rl(config, tmp_path / "run", init=tiny_model_dir, progress=False)
    (row,) = summary["rows"]
    assert row["episodes"] == 4 and row["env_errors"] == 0 and row["policy_tokens"] > 0
    # a random tiny model writes no <answer>: every turn is invalid (the format penalty's case)
    assert row["invalid_rate"] == 1.0, row


@pytest.mark.subprocess
def test_registering_the_families_imports_no_engine():
    """get_family imports the family modules only; gymnasium comes when an env is built (negative control: after
    reset it is imported)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from agentrl_lib.envs import get_family; fams = [get_family(f) for f in "
            "('bandit', 'bandit-reversed', 'frozenlake', 'sokoban')]; print('gymnasium' in sys.modules); "
            "fams[2].make_env().reset('0'); print('gymnasium' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[1]).stdout.split()
    assert out == ["False", "True"], out


# ---- reward.kind="env": RAGEN's own rewards reach the trainer unchanged -------------------------------------------

def test_env_reward_kind_passes_ragen_rewards_through_and_the_others_do_not():
    """A Sokoban episode (a step away and back, a push that leaves the box short of the target, the solving push)
    through rewards.turn_rewards: kind 'env' gives RAGEN's −0.1 / −0.1 / +10.9 per turn; 'sparse' and 'dense' rescale
    them (the negative control: training on those would not be RAGEN's reward)."""
    from agentrl_lib.rewards import turn_rewards

    env = SokobanEnv()
    env.reset("######\n#_O__#\n#____#\n#_X__#\n#_P__#\n######")
    results = [env.step(a) for a in ("Left", "Right", "Up")]  # Left: walk; Right: back; then the 2 pushes
    results += [env.step("Up")]
    increments = [r.reward for r in results]
    won, valid = results[-1].info.won, [r.info.valid for r in results]
    assert won and increments == pytest.approx([-0.1, -0.1, -0.1, 10.9])
    assert turn_rewards("env", increments, results[-1].info.max_score, won, valid) == pytest.approx(increments)
    for kind in ("sparse", "dense"):
        assert turn_rewards(kind, increments, results[-1].info.max_score, won, valid) != pytest.approx(increments)
    # bandit: the random payout itself (RAGEN trains on it), not the win flag
    assert turn_rewards("env", [0.0], 1.0, True, [True]) == [0.0]  # a 'won' pull (the better arm) that paid 0
    assert turn_rewards("sparse", [0.0], 1.0, True, [True]) == [1.0]
    with pytest.raises(ValueError, match="'env'"):
        turn_rewards("shaped", [0.0], 1.0, True, [True])


@pytest.mark.slow
@pytest.mark.trains
@pytest.mark.parametrize("family", ["bandit", "frozenlake", "sokoban"])
def test_every_estimator_trains_on_every_family(family, tiny_model_dir, tmp_path, capsys):
    """`agentrl train --games <games of the family> --advantage <estimator>` runs one RL step for every estimator of
    the registry on every RAGEN family, in RAGEN's answer format (issue 13's acceptance; a tiny random model, so the
    point is that the pipeline runs end to end: rollout, turn rewards, advantages, update, metrics)."""
    import json

    from agentrl_lib.advantages import ESTIMATORS
    from agentrl_lib.cli import main
    from agentrl_lib.diagnostics import is_finite_row

    get_family(family).make_games(tmp_path / "games", 2, seed=0)
    for estimator in ESTIMATORS:
        out = tmp_path / estimator
        rc = main(["train", "--games", str(tmp_path / "games"), "--init", tiny_model_dir, "--advantage", estimator,
                   "--steps", "1", "--games-per-step", "2", "--group-size", "2", "--max-turns", "2",
                   "--max-new-tokens", "8", "--no-process-pool", "--device", "cpu", "--action-format", "ragen",
                   "--out", str(out)])
        assert rc == 0, f"{estimator}: {capsys.readouterr().err[-2000:]}"
        row = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
        assert row["episodes"] == 4 and row["env_errors"] == 0 and is_finite_row(row), (estimator, row)
