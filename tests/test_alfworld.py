"""ALFWorld offline: generated games of all six task types, the fast env, splits, official-data loading, and
`agentrl make-games alfworld` (a relative --out; generation stops with the one reason when every candidate game
fails to load)."""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("fast_downward")

from agentrl_lib.cli import main
from agentrl_lib.envs import make_env
from agentrl_lib.envs.alfworld import TASK_TYPES, AlfWorldEnv
from agentrl_lib.envs.alfworld_gen import _split_of_fingerprint, floor_plans, make_alfworld_games
from agentrl_lib.envs.alfworld_official import load_official_games
from agentrl_lib.envs.base import GameLoadError, GameSetError, StepResult, load_game_set

from helpers import assert_one_clear_error


@pytest.fixture(scope="session")
def train_set(tmp_path_factory):
    return make_alfworld_games(tmp_path_factory.mktemp("alf_train"), n=6, seed=0, split="train", progress=False)


@pytest.fixture(scope="session")
def seen_set(tmp_path_factory):
    return make_alfworld_games(tmp_path_factory.mktemp("alf_seen"), n=2, seed=0, split="valid_seen",
                               task_types=["pick_and_place_simple", "look_at_obj_in_light"], progress=False)


@pytest.fixture(scope="session")
def unseen_set(tmp_path_factory):
    return make_alfworld_games(tmp_path_factory.mktemp("alf_unseen"), n=2, seed=0, split="valid_unseen",
                               task_types="pick_and_place_simple,pick_two_obj_and_place", progress=False)


@pytest.fixture(scope="module")
def env():
    e = AlfWorldEnv()
    yield e
    e.close()


@pytest.mark.subprocess
def test_every_task_type_is_generated_and_its_walkthrough_wins(train_set, env):
    assert len(train_set) == 6
    assert sorted(g.params["task_type"] for g in train_set.games) == sorted(TASK_TYPES)
    assert train_set.params["games_per_task_type"] == {t: 1 for t in TASK_TYPES}
    assert sum(train_set.params["games_per_floor_plan"].values()) == 6
    for g in train_set.games:
        folder = Path(g.path)
        assert (folder / "traj_data.json").is_file() and (folder / "game.tw-pddl").is_file()
        data = json.loads((folder / "game.tw-pddl").read_text())
        assert data["solvable"] is True and data["walkthrough"] == g.walkthrough and g.max_score == 1
        r = env.reset(g.path)
        assert r.obs.startswith("You are in the middle of a room. Looking quickly around you, you see ")
        assert "Your task is to: " + r.info.objective in r.obs
        assert r.info.expert_action == g.walkthrough[0]
        total = 0.0
        for i, action in enumerate(g.walkthrough):
            assert action in r.info.admissible
            assert r.info.expert_action == action
            r = env.step(action)
            assert r.info.valid
            total += r.reward
            assert r.done == (i == len(g.walkthrough) - 1)
        assert r.info.won and r.info.score == 1 and r.info.max_score == 1 and total == 1
        assert r.info.expert_action is None


@pytest.mark.subprocess
def test_env_protocol_details(train_set, env):
    g = train_set.games[0]
    r = env.reset(g.path)
    assert not r.done and r.reward == 0 and r.info.admissible == sorted(r.info.admissible)
    r2 = env.step("dance wildly")
    assert r2.obs == "Nothing happens." and not r2.info.valid and r2.reward == 0
    assert r2.info.expert_action == g.walkthrough[0]  # unchanged state: same expert action
    r3 = env.step("  " + g.walkthrough[0].upper() + ". ")  # case/space/punctuation-insensitive
    assert r3.info.valid and r3.obs != "Nothing happens."
    env.step("look")  # a look keeps the plan: expert goes on with the walkthrough
    assert env.step("inventory").info.expert_action == g.walkthrough[1]
    with pytest.raises(RuntimeError):
        AlfWorldEnv().step("look")
    assert isinstance(make_env("alfworld"), AlfWorldEnv)


@pytest.mark.subprocess
def test_same_text_as_stock_engine_on_a_random_walk(train_set):
    """Our cached env answers exactly like alfworld's stock PddlEnv + AlfredDemangler (admissible commands and
    feedback) and the expert stays consistent with textworld's policy_commands after deviations."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs import PddlEnv

    rng = random.Random(1)
    env = AlfWorldEnv(expert="planner")
    for g in train_set.games[:2]:
        stock = AlfredDemangler(PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True,
                                                           policy_commands=True)), shuffle=False)
        stock.load(str(Path(g.path) / "game.tw-pddl"))
        s, r = stock.reset(), env.reset(g.path)
        assert s.feedback.strip().endswith(r.obs.split("\n\n")[-1])
        for _ in range(12):
            assert sorted(s["admissible_commands"]) == r.info.admissible
            assert len(s["policy_commands"]) == len(env._plan or [])  # same optimal plan length
            action = rng.choice(r.info.admissible)
            s, _, done = stock.step(action)
            r = env.step(action)
            assert s.feedback.strip() == r.obs and done == r.done
            if done:
                break
    env.close()


@pytest.mark.subprocess
def test_generation_is_deterministic(train_set, tmp_path):
    # candidate i depends only on (seed, split, i) and the task-type balance, so 2 games = the first 2 of the 6
    again = make_alfworld_games(tmp_path / "again", n=2, seed=0, split="train", progress=False)
    assert [g.walkthrough for g in again.games] == [g.walkthrough for g in train_set.games[:2]]
    assert [g.params["fingerprint"] for g in again.games] == [g.params["fingerprint"] for g in train_set.games[:2]]
    other = make_alfworld_games(tmp_path / "other", n=2, seed=1, split="train", progress=False)
    assert {g.params["fingerprint"] for g in other.games}.isdisjoint(g.params["fingerprint"] for g in again.games)
    a = json.loads((Path(again.games[0].path) / "game.tw-pddl").read_text())
    b = json.loads((Path(train_set.games[0].path) / "game.tw-pddl").read_text())
    assert a == b


@pytest.mark.subprocess
def test_cached_set_is_reused(train_set):
    t0 = train_set.params["generation_seconds"]
    same = make_alfworld_games(train_set.root, n=6, seed=0, split="train", progress=False)
    assert same.params["generation_seconds"] == t0 and len(same) == 6


@pytest.mark.subprocess
def test_splits_are_disjoint(train_set, seen_set, unseen_set):
    train_plans, unseen_plans = set(floor_plans("train")), set(floor_plans("valid_unseen"))
    assert set(floor_plans("valid_seen")) == train_plans and not train_plans & unseen_plans
    assert len(unseen_plans) == 24 and len(train_plans) == 96
    for g in train_set.games + seen_set.games:
        assert int(g.params["floor_plan"].removeprefix("FloorPlan")) in train_plans
    for g in unseen_set.games:
        assert int(g.params["floor_plan"].removeprefix("FloorPlan")) in unseen_plans
    train_ids = {g.params["fingerprint"] for g in train_set.games}
    seen_ids = {g.params["fingerprint"] for g in seen_set.games}
    assert not train_ids & seen_ids
    assert all(_split_of_fingerprint(f.ljust(40, "0")) == "train" for f in train_ids)
    assert all(_split_of_fingerprint(f.ljust(40, "0")) == "valid_seen" for f in seen_ids)
    assert {g.params["split"] for g in seen_set.games} == {"valid_seen"}
    assert {g.params["task_type"] for g in unseen_set.games} == {"pick_and_place_simple", "pick_two_obj_and_place"}


def test_unknown_task_type_and_split():
    with pytest.raises(ValueError, match="pick_and_place_simple"):
        make_alfworld_games("/tmp/never", n=1, task_types=["pick_and_dance"])
    with pytest.raises(ValueError, match="valid_unseen"):
        make_alfworld_games("/tmp/never", n=1, split="test")
    with pytest.raises(ValueError):
        make_alfworld_games("/tmp/never", n=0)


@pytest.mark.subprocess
def test_corrupted_game_folder_raises_game_load_error(train_set, tmp_path):
    src = Path(train_set.games[0].path)
    bad_json = tmp_path / "bad_json"
    shutil.copytree(src, bad_json)
    (bad_json / "game.tw-pddl").write_text((src / "game.tw-pddl").read_text()[:500])
    bad_pddl = tmp_path / "bad_pddl"
    shutil.copytree(src, bad_pddl)
    data = json.loads((src / "game.tw-pddl").read_text())
    data["pddl_problem"] = data["pddl_problem"][: len(data["pddl_problem"]) // 2]
    (bad_pddl / "game.tw-pddl").write_text(json.dumps(data))
    env = AlfWorldEnv()
    for folder in (bad_json, bad_pddl, tmp_path / "missing"):
        with pytest.raises(GameLoadError, match=str(folder.name)):
            env.reset(str(folder))
    assert isinstance(env.reset(str(src)), StepResult)  # the env still works afterwards
    env.close()


@pytest.mark.subprocess
def test_alfworlds_own_loader_accepts_generated_games(train_set):
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    config = {"env": {"goal_desc_human_anns_prob": 0, "task_types": [1, 2, 3, 4, 5, 6]},
              "dataset": {"data_path": str(train_set.root), "num_train_games": -1}}
    stock = AlfredTWEnv(config, train_eval="train")
    assert sorted(stock.game_files) == sorted(str(Path(g.path) / "game.tw-pddl") for g in train_set.games)


@pytest.mark.subprocess
def test_official_layout_loads(train_set, tmp_path, monkeypatch):
    data = tmp_path / "alfworld-download"
    for g in train_set.games[:2]:
        src = Path(g.path)
        dst = data / "json_2.1.1" / "valid_seen" / src.parent.name / "trial_T20190909_000000_000000"
        shutil.copytree(src, dst)
    monkeypatch.setenv("ALFWORLD_DATA", str(data))
    gs = load_official_games("valid_seen", cache_dir=tmp_path / "cache")
    assert len(gs) == 2 and gs.family == "alfworld"
    assert load_game_set(tmp_path / "cache").games[0].path == gs.games[0].path
    only = load_official_games("valid_seen", task_types=[train_set.games[0].params["task_type"]], n=5,
                               cache_dir=tmp_path / "cache1")
    assert len(only) == 1
    env = AlfWorldEnv()
    g = gs.games[0]
    r = env.reset(g.path)
    for a in g.walkthrough:
        r = env.step(a)
    assert r.info.won
    env.close()


def test_missing_alfworld_data_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(GameSetError, match="ALFWORLD_DATA=.*nowhere.*does not exist"):
        load_official_games("train", cache_dir=tmp_path / "c")
    monkeypatch.delenv("ALFWORLD_DATA")
    with pytest.raises(GameSetError, match="ALFWORLD_DATA is not set"):
        load_official_games("train", cache_dir=tmp_path / "c")


@pytest.mark.subprocess
def test_process_pool_plays_alfworld(train_set):
    from agentrl_lib.envs.process_pool import ProcessPool

    games = train_set.games[:2]
    with ProcessPool(2, family="alfworld", timeout_s=120) as pool:
        results = pool.reset([0, 1], [g.path for g in games])
        assert all(isinstance(r, StepResult) for r in results)
        for t in range(max(len(g.walkthrough) for g in games)):
            slots = [i for i, g in enumerate(games) if t < len(g.walkthrough)]
            out = pool.step(slots, [games[i].walkthrough[t] for i in slots])
            for i, r in zip(slots, out):
                results[i] = r
        assert all(r.info.won for r in results)


@pytest.mark.slow
@pytest.mark.trains
@pytest.mark.subprocess
def test_trainer_runs_on_alfworld_games(train_set, tiny_model_dir, tmp_path):
    """`agentrl train` on an ALFWorld games dir: episodes play (no env errors) in the default pool."""
    from agentrl_lib.config import AlgoConfig, EnvConfig, ModelConfig, RunConfig, TrainConfig
    from agentrl_lib.trainer import Trainer

    cfg = RunConfig(env=EnvConfig(games=str(train_set.root), max_turns=2),
                    algo=AlgoConfig.from_preset("rloo", group_size=2),
                    model=ModelConfig(device="cpu"),
                    train=TrainConfig(steps=1, games_per_step=1, max_new_tokens=4, temperature=1.0))
    trainer = Trainer(cfg, tmp_path / "run", init=tiny_model_dir, progress=False)
    row = trainer.step(0)
    trainer.close()
    assert row["env_errors"] == 0 and row["mean_turns"] == 2 and row["episodes"] == 2


@pytest.mark.subprocess
def test_sft_examples_use_alfworlds_prompt_and_mask_only_actions(train_set, tokenizer):
    """SFT, rollouts and evaluation share one system prompt per family; the loss mask covers the actions only."""
    from agentrl_lib.envs.alfworld import SYSTEM_PROMPT as ALFWORLD_SYSTEM_PROMPT
    from agentrl_lib.prompts import ChatFormat, system_prompt_for
    from agentrl_lib.sft import expert_examples

    assert system_prompt_for("alfworld") == ALFWORLD_SYSTEM_PROMPT
    chat = ChatFormat(tokenizer)
    examples = expert_examples(train_set, chat)
    assert len(examples) == len(train_set)
    for ex, game in zip(examples, train_set.games):
        assert ex["input_ids"][:20] == chat.prompt_ids(ALFWORLD_SYSTEM_PROMPT, "x")[:20]
        masked = [i for i, m in zip(ex["input_ids"], ex["assistant_masks"]) if m]
        assert masked == [t for a in game.walkthrough for t in chat.action_ids(a)]
    with pytest.raises(ValueError, match="unknown environment family 'minigrid'; known: textworld, alfworld"):
        system_prompt_for("minigrid")


@pytest.mark.subprocess
def test_import_does_not_create_a_mistyped_alfworld_data(tmp_path):
    """`import alfworld` creates whatever ALFWORLD_DATA names; prepare_alfworld keeps a typo from becoming a dir."""
    import os
    import subprocess
    import sys

    repo = str(Path(__file__).resolve().parents[1])
    code = ("import os; from agentrl_lib.envs.alfworld import prepare_alfworld; prepare_alfworld(); "
            "import alfworld.agents.utils.misc; print(os.environ['ALFWORLD_DATA'])")
    env = dict(os.environ, ALFWORLD_DATA=str(tmp_path / "typo" / "data"), PYTHONPATH=repo)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(tmp_path / "typo" / "data"), "the user's value is kept"
    assert not (tmp_path / "typo").exists()
    env["ALFWORLD_DATA"] = str(tmp_path / "typo2")  # negative control: a plain import creates it
    subprocess.run([sys.executable, "-c", "import alfworld"], env=env, check=True)
    assert (tmp_path / "typo2").is_dir()


@pytest.mark.subprocess
def test_unsafe_text_is_an_invalid_action_in_alfworld(train_set, env):
    """ALFWorld has no interpreter to crash: backslashes, NUL, control characters and meta commands are unknown
    commands ("Nothing happens."), invalid, and change nothing."""
    game = train_set.games[0]
    first = env.reset(game.path)
    for action in ("\\n go", "\\boxed{go to sinkbasin 1}", "\\help", "\x00", "look\x00", "save", "quit", "\t"):
        r = env.step(action)
        assert r.obs == "Nothing happens." and not r.info.valid and not r.done, action
        assert r.info.admissible == first.info.admissible
    for a in game.walkthrough:
        r = env.step(a)
    assert r.info.won


@pytest.mark.subprocess
def test_damaged_alfworld_game_fails_the_game_check(train_set, tmp_path):
    from agentrl_lib.envs.base import check_game_set
    from agentrl_lib.envs.pool import SerialPool

    root = tmp_path / "games"
    shutil.copytree(train_set.root, root)
    gs = load_game_set(root)
    with SerialPool(2, family="alfworld") as pool:
        assert check_game_set(gs, pool)["played"] == len(gs)
        bad = Path(gs.games[1].path) / "game.tw-pddl"
        bad.write_text(bad.read_text()[:400])  # truncated JSON
        with pytest.raises(GameSetError,
                           match=f"1 of {len(gs)} games .*{gs.games[1].name}: reset failed: GameLoadError"):
            check_game_set(gs, pool)
        gs.family = "textworld"  # a manifest whose family lies
        with pytest.raises(GameSetError, match="is a folder, not a TextWorld story file"):
            check_game_set(gs, pool)


# ---------------------------------------------------------------------------------- make-games through the CLI
@pytest.mark.subprocess
def test_alfworld_relative_out(tmp_path, monkeypatch, capsys):
    """`make-games alfworld --out REL` (its planner worker runs in another working directory) makes the games."""
    pytest.importorskip("alfworld")
    pytest.importorskip("fast_downward")
    monkeypatch.chdir(tmp_path)
    rc = main(["make-games", "alfworld", "--n", "1", "--task-types", "pick_and_place_simple", "--out", "rel/alf"])
    out, err = capsys.readouterr()
    assert rc == 0 and "1 alfworld games in" in out, err[-500:]
    assert json.loads((tmp_path / "rel" / "alf" / "manifest.json").read_text())["games"]


class _LoadFailsPool:
    """Stands in for the planner's ProcessPool: every reset fails as a game the worker cannot load (kind 'error'),
    or, with kind='timeout', as a planner that runs out of time."""

    def __init__(self, *args, kind="error", **kwargs):
        self.kind, self.resets = kind, 0

    def reset(self, slots, games):
        from agentrl_lib.envs.protocol import EnvFailure

        self.resets += 1
        return [EnvFailure(f"GameLoadError: ALFWorld game folder {g} does not exist" if self.kind == "error"
                           else "worker timed out after 20 s", kind=self.kind) for g in games]

    def close(self):
        pass


def test_alfworld_generation_stops_with_the_one_reason_every_candidate_fails(tmp_path, monkeypatch, capsys):
    pytest.importorskip("alfworld")
    from agentrl_lib.envs import alfworld_gen, process_pool

    pools = []
    monkeypatch.setattr(process_pool, "ProcessPool", lambda *a, **k: pools.append(_LoadFailsPool()) or pools[-1])
    rc = main(["make-games", "alfworld", "--n", "1", "--task-types", "pick_and_place_simple", "--out",
               str(tmp_path / "alf")])
    err = capsys.readouterr().err
    assert_one_clear_error(rc, "", err.strip().splitlines()[-1], "make-games",
                           ["the first 5 candidate games all failed to load the same way",
                            "GameLoadError: ALFWorld game folder <game> does not exist"])
    assert pools[0].resets == alfworld_gen.LOAD_FAILURES_BEFORE_STOP, "it stops at once, not after 240 attempts"
    # negative control: planner outcomes (timeouts) are skipped, not a reason to stop early
    monkeypatch.setattr(process_pool, "ProcessPool",
                        lambda *a, **k: pools.append(_LoadFailsPool(kind="timeout")) or pools[-1])
    assert main(["make-games", "alfworld", "--n", "1", "--task-types", "pick_and_place_simple", "--out",
                 str(tmp_path / "alf2")]) == 2
    assert pools[1].resets > alfworld_gen.LOAD_FAILURES_BEFORE_STOP
    assert "made only 0/1 train games" in capsys.readouterr().err
