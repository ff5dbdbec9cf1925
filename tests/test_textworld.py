"""The TextWorld env wrapper on real generated games."""
import pytest

from agentrl_lib.envs.base import GameLoadError, load_game_set
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.envs.protocol import EnvFailure
from agentrl_lib.envs.textworld import TextWorldEnv, clean_observation, make_textworld_games


def _play(env, game):
    first = env.reset(game.path)
    results = [first]
    for action in game.walkthrough:
        results.append(env.step(action))
        if results[-1].done:
            break
    return results


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("which", ["cooking_games", "custom_games"])
def test_walkthrough_wins_and_observations_are_clean(which, request):
    games = request.getfixturevalue(which)
    env = TextWorldEnv()
    for game in games.games:
        res = _play(env, game)
        assert res[-1].done and res[-1].info.won and not res[-1].info.lost
        assert res[-1].info.score == game.max_score
        assert sum(r.reward for r in res) == game.max_score  # rewards are score increments
        for r in res:
            assert "$$" not in r.obs and "\\$$" not in r.obs, "ASCII banner left in the observation"
            assert not r.obs.rstrip().splitlines()[-1].startswith(">"), "status line left in the observation"
            assert "Would you like to RESTART" not in r.obs
            assert r.obs.strip()
        assert res[0].obs.startswith("-= "), "the first observation starts at the room header"
        assert res[0].info.objective and res[0].info.admissible
        assert res[0].info.expert_action is not None
        assert all(r.info.valid for r in res[1:])
    env.close()


def test_invalid_action_is_answered_not_a_crash(cooking_games):
    env = TextWorldEnv()
    env.reset(cooking_games.games[0].path)
    res = env.step("fly to the moon")
    assert not res.done and not res.info.valid and res.reward == 0 and res.obs
    res = env.step("")
    assert not res.info.valid
    env.close()


def test_corrupted_game_file_gives_clear_error(tmp_path, cooking_games):
    bad = tmp_path / "broken.z8"
    bad.write_bytes(b"this is not a z-machine file" * 10)
    with pytest.raises(GameLoadError, match="corrupted"):
        TextWorldEnv().reset(str(bad))
    with pytest.raises(GameLoadError, match="does not exist"):
        TextWorldEnv().reset(str(tmp_path / "missing.z8"))
    truncated = tmp_path / "truncated.z8"
    truncated.write_bytes(open(cooking_games.games[0].path, "rb").read()[:5000])
    with pytest.raises(GameLoadError, match="truncated"):
        TextWorldEnv().reset(str(truncated))
    # in a pool the same failure ends that slot's episode only
    pool = SerialPool(2)
    out = pool.reset([0, 1], [str(bad), cooking_games.games[0].path])
    assert isinstance(out[0], EnvFailure) and "GameLoadError" in out[0].reason
    assert not isinstance(out[1], EnvFailure)
    pool.close()


@pytest.mark.subprocess
def test_generation_is_cached_and_deterministic(tmp_path, cooking_games):
    again = load_game_set(cooking_games.root)
    assert [g.walkthrough for g in again.games] == [g.walkthrough for g in cooking_games.games]
    fresh = make_textworld_games(tmp_path / "again", 2, seed=7, challenge="tw-cooking",
                                 challenge_args="--recipe 1 --take 1 --go 1", progress=False)
    assert [g.params["fingerprint"] for g in fresh.games] == [g.params["fingerprint"] for g in cooking_games.games[:2]]
    with pytest.raises(ValueError, match="unknown arguments"):
        make_textworld_games(tmp_path / "x", 1, challenge="tw-cooking", challenge_args="--recipes 1", progress=False)
    with pytest.raises(ValueError, match="n must be"):
        make_textworld_games(tmp_path / "y", 0, progress=False)


def test_clean_observation_examples():
    raw = "\n\n  $$$$ banner $$\n\nYou are hungry!\n\n-= Kitchen =-\nA kitchen.\n\n\n\n>    -= Kitchen =-0/1"
    assert clean_observation(raw, first=True) == "-= Kitchen =-\nA kitchen."
    end = "You eat the meal.\n\n*** The End ***\n\nYou scored 3 out of a possible 3\nWould you like to RESTART?\n>  "
    assert clean_observation(end) == "You eat the meal.\n\n*** The End ***"


# ------------------------------------------------------------------------------------- item 11: an empty reply
def test_an_empty_reply_sends_no_command_and_is_invalid(cooking_games):
    from agentrl_lib.envs.textworld import EMPTY_REPLY, TextWorldEnv

    env = TextWorldEnv()
    try:
        first = env.reset(cooking_games.games[0].path)
        res = env.step("")
        assert res.obs == EMPTY_REPLY and not res.info.valid and res.reward == 0.0 and not res.done
        look = env.step("look")  # the old code sent `look` for an empty reply: a free observation
        assert look.obs != res.obs and look.info.valid
        assert first.info.score == look.info.score
    finally:
        env.close()
