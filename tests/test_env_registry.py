"""The env-family registry (agentrl_lib/envs/__init__.py): a family registered from this file, whose games are
seeds (no files on disk), runs through the same game sets, pools, rollouts and evaluation as TextWorld; importing
envs/base.py imports no family; an unknown family gives one error naming the known ones."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl_lib.config import EnvConfig
from agentrl_lib.envs import EnvFamily, UnknownFamilyError, family_names, get_family, make_env, register_family
from agentrl_lib.envs.base import (
    GameRecord,
    GameSet,
    GameSetError,
    StepInfo,
    StepResult,
    check_game_set,
    load_game_set,
    write_manifest,
)
from agentrl_lib.envs.pool import SerialPool, open_pool
from agentrl_lib.generation import HFGenerator

GUESS_PROMPT = "You are guessing a number between 1 and 3. Reply with the number only, e.g. 2."


def _target(game: str) -> int:
    return int(game) % 3 + 1


class GuessEnv:
    """Guess the number: the game id is a seed, the hidden number is seed % 3 + 1; three guesses."""

    def __init__(self, hint: bool = False):
        self.hint, self.game, self.turns = hint, "", 0

    def _info(self, won: bool, valid: bool = True) -> StepInfo:
        return StepInfo(won=won, score=float(won), max_score=1.0, admissible=["1", "2", "3"], valid=valid,
                        expert_action=None if won else str(_target(self.game)), objective="guess the number")

    def reset(self, game: str) -> StepResult:
        self.game, self.turns = game, 0
        obs = f"I think of a number (it is {_target(game)})." if self.hint else "I think of a number."
        return StepResult(obs, 0.0, False, self._info(False))

    def step(self, action: str) -> StepResult:
        self.turns += 1
        won = action.strip() == str(_target(self.game))
        done = won or self.turns >= 3
        return StepResult("Yes!" if won else "No.", float(won), done,
                          self._info(won, valid=action.strip() in ("1", "2", "3")))

    def close(self) -> None:
        pass


def make_guess_games(out, n: int, seed: int = 0, force: bool = False) -> GameSet:
    """n games with ids seed .. seed+n-1; only a manifest is written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    games = [GameRecord(path=str(s), name=f"guess-{s}", seed=s, max_score=1.0, walkthrough=[str(_target(str(s)))])
             for s in range(seed, seed + n)]
    write_manifest(out, "guess", games, {"n": n, "seed": seed})
    return load_game_set(out)


GUESS = register_family(EnvFamily(name="guess", make_env=GuessEnv, make_games=make_guess_games,
                                  system_prompt=GUESS_PROMPT, options={"show_inventory": "hint"}, game_id="seed"))


@pytest.mark.subprocess
def test_importing_base_imports_no_env_family():
    code = ("import sys, agentrl_lib.envs.base; print([m for m in sys.modules if 'textworld' in m or 'alfworld' in m])"
            "; from agentrl_lib.envs import get_family; get_family('textworld'); get_family('alfworld'); "
            "print(sorted(m for m in sys.modules if 'textworld' in m or 'alfworld' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[1]).stdout.splitlines()
    assert out[0] == "[]", out
    # negative control: asking for the families does import their modules, but still no engine
    assert out[1] == str(sorted(["agentrl_lib.envs.textworld", "agentrl_lib.envs.alfworld",
                                 "agentrl_lib.envs.alfworld_data", "agentrl_lib.envs.alfworld_engine"])), out


def test_unknown_family_is_one_error_naming_the_known_ones(tmp_path):
    with pytest.raises(UnknownFamilyError, match="unknown environment family 'minigrid'; known: textworld, alfworld, "
                                                 ".*guess"):
        get_family("minigrid")
    with pytest.raises(ValueError, match="known: textworld, alfworld"):
        make_env("minigrid")
    (tmp_path / "manifest.json").write_text(json.dumps({"family": "minigrid", "games": [{"path": "1"}]}))
    with pytest.raises(GameSetError, match="unknown game family 'minigrid' .known: textworld, alfworld"):
        load_game_set(tmp_path)
    assert family_names()[:2] == ["textworld", "alfworld"] and "guess" in family_names()


def test_seed_family_game_set_has_no_game_files(tmp_path):
    gs = get_family("guess").make_games(tmp_path / "g", 4, seed=10)
    assert [p.name for p in (tmp_path / "g").iterdir()] == ["manifest.json"]
    assert [g.path for g in gs.games] == ["10", "11", "12", "13"] and gs.family == "guess"
    with SerialPool(2, family="guess") as pool:
        assert check_game_set(gs, pool, cache=False) == {"games": 4, "played": 4, "cached": 0,
                                                         "seconds": pytest.approx(0, abs=5)}
    # negative control: the same manifest under a "file" family checks that the game files exist
    data = json.loads((tmp_path / "g" / "manifest.json").read_text())
    (tmp_path / "g" / "manifest.json").write_text(json.dumps(dict(data, family="textworld")))
    with pytest.raises(GameSetError, match="game file .*10 listed in .* is missing"):
        load_game_set(tmp_path / "g")


def test_family_options_map_env_config_to_env_kwargs():
    assert GUESS.env_kwargs(EnvConfig(show_inventory=True, show_admissible=True)) == {"hint": True}
    assert get_family("textworld").env_kwargs(EnvConfig(show_inventory=True)) == {"show_inventory": True}
    assert get_family("alfworld").env_kwargs(EnvConfig(show_inventory=True)) == {}, "ALFWorld's env has no inventory"
    games = GameSet(Path("."), "guess", [GameRecord("1", "guess-1", 1, 1.0, ["2"])])  # in memory: no files at all
    with open_pool(EnvConfig(process_pool=False, show_inventory=True, check_games=False), 1, games) as pool:
        assert "it is 2" in pool.reset([0], ["1"])[0].obs, "show_inventory reached the env as its `hint` option"


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("process_pool", [False, True])
def test_rollout_and_evaluate_on_a_registered_seed_family(process_pool, tiny_model_dir, tmp_path):
    from agentrl_lib.evaluate import evaluate
    from agentrl_lib.models import load_policy
    from agentrl_lib.prompts import ChatFormat, first_user_message, system_prompt_for
    from agentrl_lib.rollout import rollout

    games = make_guess_games(tmp_path / "games", 3, seed=0)
    model, tok = load_policy(tiny_model_dir, device="cpu")
    env_cfg = EnvConfig(process_pool=process_pool, step_timeout_s=20.0)
    pool = open_pool(env_cfg, 3, games)  # checks every game (walkthrough replay) through the pool first
    try:
        assert isinstance(pool, SerialPool) != process_pool
        chat = ChatFormat(tok)
        trajs, stats = rollout(HFGenerator(model, tok), tok, pool, [g.path for g in games.games], max_turns=2,
                               max_new_tokens=4, temperature=1.0, chat=chat, system_prompt=system_prompt_for("guess"))
    finally:
        pool.close()
    assert system_prompt_for("guess") == GUESS_PROMPT
    for t in trajs:
        prompt = chat.prompt_ids(GUESS_PROMPT, first_user_message("guess the number", "I think of a number."))
        assert t.ids[:len(prompt)] == prompt, "the episode starts with the family's system prompt"
        assert 1 <= t.n_turns <= 2 and not t.termination.startswith("env_error")
    res = evaluate(model, tok, games, max_turns=2, max_new_tokens=4, batch_size=3, env=env_cfg, progress=False)
    assert res["n_games"] == 3 and res["env_errors"] == 0 and 1 <= res["mean_turns"] <= 2
