"""Turn rewards (agentrl_lib/rewards.py): sparse, dense (scale-free), the format penalty and the placement on turn-end
tokens, against hand computations."""
import random

import pytest
import torch

from agentrl_lib.rewards import dense_turn_rewards, place_on_tokens, sparse_turn_rewards, turn_rewards


def test_sparse_reward_only_on_last_turn_of_a_win():
    assert sparse_turn_rewards(4, True) == [0, 0, 0, 1.0]
    assert sparse_turn_rewards(4, False) == [0, 0, 0, 0]
    assert sparse_turn_rewards(0, True) == []


def test_dense_won_game_sums_to_exactly_one():
    r = dense_turn_rewards([0, 1, 0, 1, 1], max_score=3, won=True)
    assert r[:4] == pytest.approx([0, 1 / 3, 0, 1 / 3]) and sum(r) == pytest.approx(1.0)
    # a win that reports less than max score still totals 1
    assert sum(dense_turn_rewards([1, 0, 0], max_score=3, won=True)) == pytest.approx(1.0)


def test_dense_loss_never_out_scores_a_win():
    """The reference code's defect: a lost game with many small increments must not beat a won game."""
    rng = random.Random(0)
    for _ in range(500):
        max_score = rng.choice([1, 2, 3, 7, 8])
        n = rng.randint(1, 12)
        lost = [rng.choice([0, 0, 1, 2]) for _ in range(n)]
        won = [rng.choice([0, 1]) for _ in range(rng.randint(1, 12))]
        assert sum(dense_turn_rewards(lost, max_score, won=False)) < sum(dense_turn_rewards(won, max_score, won=True))


def test_dense_same_scale_for_partial_progress():
    assert dense_turn_rewards([1, 0, 1], max_score=4, won=False) == pytest.approx([0.25, 0, 0.25])
    with pytest.raises(ValueError):
        dense_turn_rewards([1], max_score=0, won=False)


def test_format_penalty_on_invalid_turns_and_bad_kind():
    r = turn_rewards("sparse", [0, 0, 0], 1, True, [True, False, True], format_penalty=0.1)
    assert r == pytest.approx([0, -0.1, 1.0])
    with pytest.raises(ValueError, match="reward.kind must be one of"):
        turn_rewards("shaped", [0], 1, True, [True])


def test_rewards_sit_on_turn_end_tokens():
    out = place_on_tokens([0.5, -0.1, 1.0], [3, 7, 9], 11)
    expected = torch.zeros(11)
    expected[3], expected[7], expected[9] = 0.5, -0.1, 1.0
    assert torch.equal(out, expected)
    with pytest.raises(ValueError):
        place_on_tokens([1.0], [11], 11)


# ------------------------------------------------------------------- item 10: dense rewards for any score unit
def test_dense_rewards_are_scale_free():
    # max_score 0.25: the old cap 1 − 1/(2·0.25) = −1 turned progress negative and divided by zero without progress
    assert dense_turn_rewards([0.0, 0.0], 0.25, won=False) == [0.0, 0.0]
    assert sum(dense_turn_rewards([0.125, 0.0], 0.25, won=False)) == pytest.approx(0.5)
    for incs, ms, won in [([1, 0, 2], 3, False), ([1, 1, 1], 3, False), ([2, -1, 2], 3, False), ([1, 2], 3, True)]:
        for k in (0.01, 0.25, 7.0):  # the same game in another score unit gets the same rewards
            assert dense_turn_rewards([x * k for x in incs], ms * k, won) == pytest.approx(
                dense_turn_rewards(incs, ms, won))
    # a non-won game that collected every point stays half a step below a win (integer points: 1 − 1/(2·max))
    assert sum(dense_turn_rewards([1, 1, 1], 3, won=False)) == pytest.approx(1 - 1 / 6)
    with pytest.raises(ValueError, match="max_score"):
        dense_turn_rewards([1], float("nan"), won=False)


def test_format_penalty_can_put_a_win_below_a_non_win_as_documented():
    """README / notebook used to claim any win totals more than any other game; with the default penalty it doesn't."""
    won = sum(turn_rewards("dense", [0, 0, 0, 0, 1, 1, 1], 3, True, [False] * 4 + [True] * 3, 0.1))
    partial = sum(turn_rewards("dense", [1, 1, 0], 3, False, [True] * 3, 0.1))
    assert won == pytest.approx(0.6) and partial == pytest.approx(2 / 3) and won < partial
    assert sum(turn_rewards("dense", [0, 0, 0, 0, 1, 1, 1], 3, True, [False] * 4 + [True] * 3, 0.0)) == 1.0
