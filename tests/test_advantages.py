"""Advantage estimators against brute-force loops on hand-made trajectories."""
import pytest
import torch

from agentrl_lib.advantages import (broadcast_to_tokens, gae, grpo_advantages, rloo_advantages, singleton_groups,
                                    top_std_groups, whiten)


def brute_turn_gae(rewards, values, mask, turn_end, gamma_turn, gamma_token, lam):
    """GAE over the policy tokens of each row, written with explicit lists; the discount from a token to the next
    policy token is gamma_turn if it ends a turn, else gamma_token."""
    B, T = len(rewards), len(rewards[0])
    adv = [[0.0] * T for _ in range(B)]
    for b in range(B):
        pos = [t for t in range(T) if mask[b][t]]
        a_next = 0.0
        for k in reversed(range(len(pos))):
            t = pos[k]
            g = gamma_turn if turn_end[b][t] else gamma_token
            v_next = values[b][pos[k + 1]] if k + 1 < len(pos) else 0.0
            a_next = rewards[b][t] + g * v_next - values[b][t] + g * lam * a_next
            adv[b][t] = a_next
    return adv


def brute_gae(rewards, values, mask, gamma, lam):
    """Textbook GAE on the subsequence of policy tokens of each row: every token discounted by gamma."""
    ends = [[1] * len(rewards[0]) for _ in rewards]
    return brute_turn_gae(rewards, values, mask, ends, gamma, gamma, lam)


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.9, 0.8), (0.5, 0.0)])
def test_gae_matches_brute_force_with_env_tokens_masked(gamma, lam):
    torch.manual_seed(0)
    # two trajectories: prompt (0), turn 1 (1 1 1), env (0 0), turn 2 (1 1), padding (0)
    mask = torch.tensor([[0, 0, 1, 1, 1, 0, 0, 1, 1, 0],
                         [0, 1, 1, 0, 0, 0, 1, 1, 1, 1]], dtype=torch.float32)
    rewards = torch.zeros(2, 10)
    rewards[0, 4], rewards[0, 8] = 0.3, 1.0  # rewards on turn-end tokens
    rewards[1, 2], rewards[1, 9] = -0.1, 0.5
    values = torch.randn(2, 10)
    adv, ret = gae(rewards, values, mask, gamma, lam)
    ref = torch.tensor(brute_gae(rewards.tolist(), values.tolist(), mask.tolist(), gamma, lam))
    assert torch.allclose(adv, ref, atol=1e-6)
    assert torch.all(adv[mask == 0] == 0) and torch.all(ret[mask == 0] == 0)
    assert torch.allclose(ret[mask == 1], (adv + values)[mask == 1])


def test_gae_gamma_lambda_one_is_remaining_return_minus_value():
    """The paper's setting γ = λ = 1: A_t = (sum of rewards from t on) − V_t."""
    mask = torch.tensor([[1, 1, 0, 1, 1]], dtype=torch.float32)
    rewards = torch.tensor([[0.0, 0.2, 0.0, 0.0, 0.8]])
    values = torch.tensor([[0.1, 0.4, 9.0, 0.3, 0.5]])
    adv, _ = gae(rewards, values, mask, 1.0, 1.0)
    remaining = torch.tensor([[1.0, 1.0, 0.0, 0.8, 0.8]])
    assert torch.allclose(adv, (remaining - values) * mask)


def test_grpo_normalises_within_groups_and_zero_for_equal_returns():
    returns = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.5, 0.5, 2.0, 4.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])
    adv = grpo_advantages(returns, groups, eps=0.0)
    for g in range(3):
        r = returns[groups == g]
        expected = torch.zeros_like(r) if r.std() == 0 else (r - r.mean()) / r.std()
        assert torch.allclose(adv[groups == g], expected)
    assert torch.all(adv[groups == 1] == 0)  # equal returns carry no signal


def test_rloo_is_return_minus_mean_of_the_others():
    returns = torch.tensor([1.0, 0.0, 0.5, 3.0, 3.0])
    groups = torch.tensor([5, 5, 5, 9, 9])
    adv = rloo_advantages(returns, groups)
    for i in range(5):
        others = [returns[j].item() for j in range(5) if j != i and groups[j] == groups[i]]
        assert adv[i].item() == pytest.approx(returns[i].item() - sum(others) / len(others))
    assert adv[3] == 0 and adv[4] == 0


@pytest.mark.parametrize("fn", [grpo_advantages, rloo_advantages])
def test_group_left_with_one_episode_gets_zero_advantage_and_is_counted(fn):
    """A group whose other episodes failed in the env has no baseline: advantage 0, not an error that ends the run
    (the old code raised ValueError), not NaN, not the raw return."""
    adv = fn(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 0, 1]))
    assert adv[2].item() == 0.0 and torch.isfinite(adv).all()
    assert adv[0].item() > 0 > adv[1].item()  # the full group is unaffected
    assert singleton_groups(torch.tensor([0, 0, 1])) == 1 and singleton_groups(torch.tensor([0, 0, 1, 1])) == 0


def test_turn_level_gamma_discounts_between_turns_only():
    torch.manual_seed(1)
    mask = torch.tensor([[0, 1, 1, 1, 0, 0, 1, 1, 0]], dtype=torch.float32)
    turn_end = torch.tensor([[0, 0, 0, 1, 0, 0, 0, 1, 0]], dtype=torch.float32)
    rewards = torch.zeros(1, 9)
    rewards[0, 3], rewards[0, 7] = 0.2, 1.0
    values = torch.randn(1, 9)
    for gt, gk, lam in [(0.9, 1.0, 0.95), (0.5, 0.8, 1.0)]:
        adv, _ = gae(rewards, values, mask, gt, lam, turn_end=turn_end, gamma_token=gk)
        ref = torch.tensor(brute_turn_gae(rewards.tolist(), values.tolist(), mask.tolist(), turn_end.tolist(), gt, gk,
                                          lam))
        assert torch.allclose(adv, ref, atol=1e-6)
    # with λ = 1, zero values and γ_token = 1, a turn's first token sees the next turn's reward discounted once
    adv, _ = gae(rewards, torch.zeros(1, 9), mask, 0.5, 1.0, turn_end=turn_end, gamma_token=1.0)
    assert adv[0, 1].item() == pytest.approx(0.2 + 0.5 * 1.0)
    # a per-token γ (the old behaviour) would discount it once per token in between: 3 times here
    adv_tok, _ = gae(rewards, torch.zeros(1, 9), mask, 0.5, 1.0)
    assert adv_tok[0, 1].item() == pytest.approx(0.5 ** 2 * 0.2 + 0.5 ** 4 * 1.0)


def test_broadcast_puts_advantage_on_policy_tokens_only():
    mask = torch.tensor([[0, 1, 1, 0], [1, 0, 0, 1]], dtype=torch.float32)
    out = broadcast_to_tokens(torch.tensor([2.0, -1.0]), mask)
    assert torch.equal(out, torch.tensor([[0, 2.0, 2.0, 0], [-1.0, 0, 0, -1.0]]))


def test_top_std_groups_keeps_highest_variance_groups():
    returns = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.2, 5.0, 5.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    keep = top_std_groups(returns, groups, 0.25)
    assert keep.tolist() == [False, False, True, True, False, False, False, False]
    keep = top_std_groups(returns, groups, 0.5)
    assert keep.tolist() == [False, False, True, True, True, True, False, False]
    assert top_std_groups(returns, groups, 1.0).all()


def test_top_std_groups_rounds_half_up():
    """keep 0.25 of 2 groups = 0.5 group → 1; of 10 groups = 2.5 → 3 (Python's round() gives 2: banker's rounding)."""
    groups = torch.arange(10).repeat_interleave(2)
    returns = torch.arange(20, dtype=torch.float32) * torch.tensor([1.0, 0.0]).repeat(10)
    assert int(top_std_groups(returns, groups, 0.25).sum()) == 2 * 3
    assert int(top_std_groups(returns[:4], groups[:4], 0.25).sum()) == 2


def test_whiten_has_zero_mean_unit_variance_on_mask():
    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, 4.0, -50.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    w = whiten(x, mask)
    vals = w[mask.bool()]
    assert vals.mean().abs() < 1e-6 and (vals.pow(2).mean() - 1).abs() < 1e-4
    assert torch.all(w[~mask.bool()] == 0)
