"""envstats: world counts and admissible commands measured on real games; the plant-a-bug runner (with its negative
control: the same test passes unplanted and fails planted)."""
import math

import pytest

from agentrl_lib.envstats import TestRun, run_test, space_stats, summarize_space, world_counts


def test_world_counts_match_the_generator_knobs(custom_games):
    for game in custom_games.games:  # world size 2, 3 objects (conftest)
        c = world_counts(game.path)
        assert c["rooms"] == 2 and c["objects"] >= 3 and c["doors"] >= 0
    with pytest.raises(FileNotFoundError, match="sidecar"):
        world_counts(custom_games.root / "no_such_game.z8")


def test_space_stats_play_the_walkthrough_and_random_agent(cooking_games):
    rows = space_stats(cooking_games, random_episodes=2, max_turns=4, seed=0)
    assert len(rows) == len(cooking_games)
    for row, game in zip(rows, cooking_games.games):
        assert row["walkthrough_won"] and row["walkthrough_len"] == len(game.walkthrough)
        assert row["walkthrough_reward"] == game.max_score  # rewards are score increments
        assert len(row["adm_walk"]) == len(game.walkthrough) and all(c > 0 for c in row["adm_walk"])
        assert 1 <= len(row["adm_random"]) <= 2 * 4 and row["rooms"] == 1
    s = summarize_space(rows)
    assert s["games"] == 3 and s["walkthrough_wins"] == 3 and s["rooms"] == 1
    assert s["admissible_max"] >= s["admissible_mean"] > 0 and 0 <= s["random_success"] <= 1
    assert s["states"] == sum(len(r["adm_walk"]) + len(r["adm_random"]) for r in rows)
    assert space_stats(cooking_games, random_episodes=2, max_turns=4, seed=0) == rows  # seeded
    assert math.isnan(summarize_space([{**rows[0], "adm_walk": [], "adm_random": []}])["admissible_mean"])
    with pytest.raises(ValueError):
        summarize_space([])


@pytest.mark.subprocess
def test_run_test_passes_unplanted_and_fails_with_the_planted_bug():
    node = "tests/test_textworld.py::test_clean_observation_examples"
    ok = run_test(node)
    assert isinstance(ok, TestRun) and ok.passed and ok.rc == 0, ok.tail
    planted = run_test(node, plant="""
        import agentrl_lib.envs.textworld as tw
        tw.clean_observation = lambda text, first=False: text   # the status line and banner are left in
    """)
    assert not planted.passed and planted.rc == 1 and "AssertionError" in planted.tail, planted.tail
    assert "FAILED" in str(planted)
