"""Checks of silent bugs that real multi-turn RL frameworks shipped, as plain functions: each raises AssertionError
(with a message that names what went wrong) when the code it is given has the bug, and returns None otherwise.

`tests/test_known_bugs.py` runs each on the library (it must pass) and on a planted copy of the bug (it must fail);
the chapters' exercises run the same checks on a learner's code (chapter 01 Exercise 3, chapter 02 §3, chapter 03
Exercise 4, chapter 05's REINFORCE++ exercise). The table of bugs, where each shipped and its check, heads the test
file.
"""
from __future__ import annotations

import math
import random
from typing import Callable

import torch

from .advantages import singleton_groups


def check_wins_outscore_non_wins(reward_fn: Callable[[list[float], float, bool], list[float]], trials: int = 2000,
                                 seed: int = 0) -> None:
    """A lost dense-reward game must never total as much as a won one (meow-tea-taro normalised won games only).

    reward_fn(increments, max_score, won) -> turn rewards (rewards.dense_turn_rewards' signature), tried on `trials`
    random games of random scales (max score 0.25 to 100, 1-10 turns, increments that may be 0 or negative).
    Raises AssertionError naming the first lost game whose total reaches a won one's."""
    rng = random.Random(seed)
    for _ in range(trials):
        max_score = rng.choice([1, 3, 7, 8, 0.25, 2.5, 100])
        n = rng.randint(1, 10)
        won_incs = [rng.choice([0, 0, 1, -1]) * max_score / rng.choice([1, 3, 7]) for _ in range(n)]
        lost_incs = [rng.choice([0, 1, 1, 2]) * max_score / rng.choice([3, 7, 8]) for _ in range(rng.randint(1, 10))]
        w = sum(reward_fn(won_incs, max_score, True))
        lo = sum(reward_fn(lost_incs, max_score, False))
        assert lo < w, f"a lost game ({lost_incs}, max {max_score}) totals {lo:.3f} >= a won one ({w:.3f})"


def check_singleton_groups(estimator: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """A group left with one episode (its others failed in the environment) has no baseline: its advantage must be
    0 and finite, and advantages.singleton_groups must count it.

    estimator(returns (N,) float, group_ids (N,) long) -> advantages (N,) float, as advantages.grpo_advantages.
    Raises AssertionError on a non-finite or non-zero advantage of the group of one."""
    returns = torch.tensor([1.0, 0.0, 0.7, 0.2, 0.9])
    groups = torch.tensor([0, 0, 1, 2, 2])  # group 1 lost its other episodes to env failures
    adv = estimator(returns, groups)
    assert torch.isfinite(adv).all(), "non-finite advantage for a group of one"
    assert adv[2].item() == 0.0, "a group of one got a non-zero advantage without a baseline"
    assert singleton_groups(groups) == 1


def sparse_three_turn_batch() -> tuple[torch.Tensor, torch.Tensor, list[list[list[int]]]]:
    """Two 3-turn episodes with observation tokens (mask 0) between the turns; sparse rewards: episode 0 wins on its
    last turn (reward 1), episode 1 earns nothing; episode 0 also has a zero-reward middle turn between two rewarded
    ones in the bi-level check (reward 0.5 on turn 1).

    Returns (mask (2, 13) float32: 1 on policy tokens, turn_end (2, 13) float32: 1 on each turn's last policy
    token, turns: per episode the token positions of each turn)."""
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0],
                         [0, 1, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0]], dtype=torch.float32)
    turn_end = torch.zeros_like(mask)
    turn_end[0, [2, 7, 11]] = 1
    turn_end[1, [1, 5, 10]] = 1
    turns = [[[1, 2], [5, 6, 7], [10, 11]], [[1], [4, 5], [8, 9, 10]]]
    return mask, turn_end, turns


def check_reinforce_pp_keeps_credit_across_observations(estimator: Callable) -> None:
    """REINFORCE++ on two sparse 3-turn episodes (won: rewards 0, 0, 1; lost: 0, 0, 0), γ = 1: every token of the
    won episode has reward-to-go 1 and every token of the lost one 0, so after whitening each won token is above
    every lost one. verl's 'reset after EOS' zeroes the running return at the observation tokens: the won episode's
    first two turns fall to the lost episode's level.

    estimator(AdvantageInputs, AlgoConfig) -> (advantages (B, T), returns), as advantages.ESTIMATORS["reinforce_pp"].
    Raises AssertionError "an earlier turn of the won episode lost its credit: [...]"."""
    from .advantages import AdvantageInputs
    from .config import AlgoConfig

    mask, turn_end, turns = sparse_three_turn_batch()
    rewards = torch.zeros_like(mask)
    rewards[0, 11] = 1.0
    inp = AdvantageInputs(token_rewards=rewards, mask=mask, returns=torch.tensor([1.0, 0.0]),
                          group_ids=torch.tensor([0, 0]), turn_end=turn_end)
    adv, _ = estimator(inp, AlgoConfig(advantage="reinforce_pp", gamma=1.0))
    won = adv[0][mask[0] > 0]
    lost = adv[1][mask[1] > 0]
    assert torch.allclose(won, won[0]) and torch.allclose(lost, lost[0]) and won[0] > 0 > lost[0], \
        f"an earlier turn of the won episode lost its credit: {won.tolist()}"


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)  # pytest.approx's defaults


def check_step_rewards_are_score_increments(games, env_cls) -> None:
    """Replay each walkthrough: every step's reward must be the increment of TextWorld's running score (which
    `textworld.gym` reports in place of a reward), so a won game's rewards sum to its max score.

    games: an envs.protocol.GameSet of TextWorld games; env_cls: an environment class (envs.textworld.TextWorldEnv
    or a copy). Raises AssertionError naming the game and the step whose reward is not the increment."""
    env = env_cls()
    try:
        for g in games.games:
            env.reset(g.path)
            score, total = 0.0, 0.0
            for action in g.walkthrough:
                res = env.step(action)
                assert _close(res.reward, res.info.score - score), \
                    f"{g.name}: step reward {res.reward} is not the score increment {res.info.score - score}"
                score, total = res.info.score, total + res.reward
                if res.done:
                    break
            assert res.info.won and _close(total, g.max_score), (g.name, total, g.max_score)
    finally:
        env.close()
