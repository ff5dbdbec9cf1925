"""Turn rewards (sparse, dense, format penalty, placement) and the losses, against hand computations."""
import math
import random

import pytest
import torch

from agentrl_lib.losses import kl_k3, masked_mean, policy_loss, value_loss
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
    with pytest.raises(ValueError, match="unknown reward kind"):
        turn_rewards("shaped", [0], 1, True, [True])


def test_rewards_sit_on_turn_end_tokens():
    out = place_on_tokens([0.5, -0.1, 1.0], [3, 7, 9], 11)
    expected = torch.zeros(11)
    expected[3], expected[7], expected[9] = 0.5, -0.1, 1.0
    assert torch.equal(out, expected)
    with pytest.raises(ValueError):
        place_on_tokens([1.0], [11], 11)


def test_policy_loss_matches_per_token_brute_force():
    torch.manual_seed(0)
    logp, old = torch.randn(3, 6) * 0.3, torch.randn(3, 6) * 0.3
    adv, mask = torch.randn(3, 6), (torch.rand(3, 6) > 0.3).float()
    loss, m = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    terms = []
    for b in range(3):
        for t in range(6):
            if mask[b, t]:
                ratio = math.exp(logp[b, t] - old[b, t])
                clipped = min(max(ratio, 0.8), 1.28)
                terms.append(min(ratio * adv[b, t].item(), clipped * adv[b, t].item()))
    assert loss.item() == pytest.approx(-sum(terms) / len(terms), rel=1e-5)
    assert 0 <= m["clip_frac"] <= 1


def test_policy_loss_gradient_vanishes_when_clipped():
    logp = torch.tensor([[0.5]], requires_grad=True)  # ratio e^0.5 ≈ 1.65 > 1 + 0.2 with positive advantage
    loss, m = policy_loss(logp, torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), 0.2, 0.2)
    loss.backward()
    assert logp.grad.abs().item() == 0 and m["clip_frac"] == 1.0


def test_kl_k3_is_zero_for_equal_policies_and_positive_otherwise():
    mask = torch.ones(2, 4)
    lp = torch.log(torch.rand(2, 4))
    assert kl_k3(lp, lp, mask).item() == pytest.approx(0.0, abs=1e-7)
    assert kl_k3(lp, lp - 0.5, mask).item() > 0


def test_value_loss_clipping():
    v, old, ret, mask = torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[1.0]]), torch.ones(1, 1)
    plain, _ = value_loss(v, old, ret, mask, clip=0.0)
    clipped, m = value_loss(v, old, ret, mask, clip=0.2)
    assert plain.item() == 0.0 and clipped.item() == pytest.approx(0.5 * 0.8 ** 2) and m["value_clip_frac"] == 1.0


def test_masked_mean_ignores_masked_entries():
    assert masked_mean(torch.tensor([1.0, 100.0, 3.0]), torch.tensor([1, 0, 1])).item() == 2.0
