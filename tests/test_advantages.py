"""The advantage estimators (agentrl_lib/advantages.py) against brute-force loops on hand-made trajectories: GAE,
GRPO, RLOO and the StarPO-S filter; the multi-turn estimators of issue 13 (turn_gae, bilevel_gae, dr_grpo,
reinforce_pp, gigpo) on one hand-made batch; the ESTIMATORS registry through config validation and one Trainer step
with an estimator registered here; one tiny RL step per preset through run_rl."""
import math
import statistics
from dataclasses import dataclass, field

import pytest
import torch

from agentrl_lib.advantages import (
    ESTIMATORS,
    AdvantageInputs,
    bilevel_gae,
    broadcast_to_tokens,
    dr_grpo_advantages,
    gae,
    get_estimator,
    gigpo_advantages,
    group_advantages,
    grpo_advantages,
    register_estimator,
    reward_to_go,
    rloo_advantages,
    singleton_groups,
    top_std_groups,
    turn_gae,
    turns_to_tokens,
    whiten,
)
from agentrl_lib.config import (
    ALGO_PRESETS,
    AlgoConfig,
    ConfigError,
    EnvConfig,
    ModelConfig,
    RewardConfig,
    RunConfig,
    TrainConfig,
)
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.parts import run_parts
from agentrl_lib.trainer import Trainer

from helpers import CoinEnv, coin_games


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


def test_group_advantages_hands_each_group_its_returns_in_batch_order():
    """Shuffled, non-contiguous group ids (one a singleton): each group's function sees that group's returns in batch
    order and its output lands at those positions -- against a mask per group. The function depends on position
    (r minus the group's first return, plus the index), so a wrong grouping or order fails: planting one (splitting
    the unsorted batch by the group counts) fails this test."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.tensor([7, 2, 7, 9, 2, 2, 4, 7, 9, 2])
    returns = torch.rand(len(ids), generator=gen)
    fn = lambda r: r - r[0] + torch.arange(len(r), dtype=torch.float32)  # noqa: E731
    want = torch.zeros(len(ids))
    for g in ids.unique():
        idx = (ids == g).nonzero(as_tuple=True)[0]
        if len(idx) >= 2:
            want[idx] = fn(returns[idx])
    got = group_advantages(returns, ids, fn)
    assert torch.equal(got, want) and got[6] == 0  # group 4 is a singleton


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


# ---------------------------------------------------- the multi-turn estimators of issue 13 (turn_gae, bilevel_gae,
# dr_grpo, reinforce_pp, gigpo) against brute-force formulas on one hand-made batch: episodes of different lengths,
# 1-3 turns, prompt and observation tokens (mask 0) between the turns, right padding. The brute force reads the
# turns from the batch's description (never from the tensors the estimators see) and writes each equation as an
# explicit sum, not as the estimators' recursions.
# Each episode: a list of segments, ("o", n) = n tokens the policy did not sample (prompt, observation, padding),
# ("a", n, r) = a turn: n sampled tokens, reward r on the last one.
EPISODES = [
    [("o", 2), ("a", 3, 0.5), ("o", 2), ("a", 2, 0.0), ("o", 1), ("a", 1, 1.0), ("o", 2)],  # 3 turns, zero middle
    [("o", 1), ("a", 2, -0.1), ("o", 3), ("a", 3, 0.0), ("o", 4)],                           # 2 turns, all 0 after
    [("o", 3), ("a", 4, 1.0), ("o", 6)],                                                     # 1 turn
    [("o", 1), ("a", 1, 0.0), ("o", 1), ("a", 5, 0.0), ("o", 1), ("a", 2, 0.2), ("o", 2)],  # 3 turns
]
GROUPS = [0, 0, 1, 1]
OBS = [["start", "hall", "kitchen"], ["start", "hall"], ["start"], ["start", "cellar", "hall"]]


def build(episodes=EPISODES, seed=0):
    """→ (rewards, values, mask, turn_end) (B, T) tensors, and per episode its turns as (token positions, reward)."""
    T = sum(s[1] for s in episodes[0])
    assert all(sum(s[1] for s in e) == T for e in episodes)
    B = len(episodes)
    rewards, mask, turn_end = torch.zeros(B, T), torch.zeros(B, T), torch.zeros(B, T)
    turns = []
    for b, ep in enumerate(episodes):
        t, tb = 0, []
        for seg in ep:
            if seg[0] == "a":
                pos = list(range(t, t + seg[1]))
                mask[b, pos] = 1
                turn_end[b, pos[-1]] = 1
                rewards[b, pos[-1]] = seg[2]
                tb.append((pos, seg[2]))
            t += seg[1]
        turns.append(tb)
    torch.manual_seed(seed)
    values = torch.randn(B, T)
    return rewards, values, mask, turn_end, turns


def brute_turn_gae_of_turns(values, turns, gamma, lam):
    """Per episode, per turn k: (A_k, G_k) with A_k = Σ_j (γλ)^j δ_{k+j}, δ_k = r_k + γ V_{k+1} − V_k."""
    out = []
    for b, tb in enumerate(turns):
        V = [values[b][pos[-1]] for pos, _ in tb] + [0.0]
        delta = [r + gamma * V[k + 1] - V[k] for k, (_, r) in enumerate(tb)]
        A = [sum((gamma * lam) ** j * delta[k + j] for j in range(len(tb) - k)) for k in range(len(tb))]
        out.append([(A[k], A[k] + V[k]) for k in range(len(tb))])
    return out


def on_tokens(turns, per_turn, T):
    x = [[0.0] * T for _ in turns]
    for b, tb in enumerate(turns):
        for (pos, _), v in zip(tb, per_turn[b]):
            for t in pos:
                x[b][t] = v
    return torch.tensor(x)


def whiten_list(x, turns):
    vals = [x[b][t] for b, tb in enumerate(turns) for pos, _ in tb for t in pos]
    mu, sd = statistics.fmean(vals), statistics.pstdev(vals)
    return [[(v - mu) / sd for v in row] for row in x]


def inputs(values=True, seed=0):
    rewards, vals, mask, turn_end, turns = build(seed=seed)
    returns = torch.tensor([sum(r for _, r in tb) for tb in turns])
    return AdvantageInputs(token_rewards=rewards, mask=mask, returns=returns, group_ids=torch.tensor(GROUPS),
                           turn_end=turn_end, values=vals if values else None, turn_obs=OBS,
                           turn_rewards=[[r for _, r in tb] for tb in turns]), turns


# ------------------------------------------------------------------------------------------------ turn-level GAE
@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.9, 0.95), (0.5, 0.0)])
def test_turn_gae_matches_brute_force(gamma, lam):
    rewards, values, mask, turn_end, turns = build()
    adv, ret = turn_gae(rewards, values, mask, turn_end, gamma, lam)
    ref = brute_turn_gae_of_turns(values.tolist(), turns, gamma, lam)
    T = rewards.shape[1]
    assert torch.allclose(adv, on_tokens(turns, [[a for a, _ in r] for r in ref], T), atol=1e-6)
    assert torch.allclose(ret, on_tokens(turns, [[g for _, g in r] for r in ref], T), atol=1e-6)
    assert torch.all(adv[mask == 0] == 0) and torch.all(ret[mask == 0] == 0)


def test_turn_gae_reads_values_only_at_turn_ends():
    """Changing V on a turn's inner tokens changes nothing: the turn-level critic is read at the end token."""
    rewards, values, mask, turn_end, _ = build()
    noisy = values + 10.0 * torch.randn_like(values) * (1 - turn_end)
    a1, r1 = turn_gae(rewards, values, mask, turn_end, 0.9, 0.9)
    a2, r2 = turn_gae(rewards, noisy, mask, turn_end, 0.9, 0.9)
    assert torch.equal(a1, a2) and torch.equal(r1, r2)
    # the token-level GAE does read them (the negative control of this property)
    assert not torch.allclose(gae(rewards, values, mask, 0.9, 0.9, turn_end)[0],
                              gae(rewards, noisy, mask, 0.9, 0.9, turn_end)[0])


# -------------------------------------------------------------------------------------------------- bi-level GAE
def brute_bilevel(values, turns, gamma, lam, gamma_token):
    """Turn level as brute_turn_gae_of_turns; within turn k, tokens p_0..p_n: A_{p_i} = Σ_j (γ_tok λ)^j δ_{p_{i+j}} with
    δ_{p_n} = G_k − V_{p_n} and δ_{p_i} = γ_tok V_{p_{i+1}} − V_{p_i}."""
    level = brute_turn_gae_of_turns(values, turns, gamma, lam)
    adv = [[0.0] * len(values[0]) for _ in values]
    for b, tb in enumerate(turns):
        for k, (pos, _) in enumerate(tb):
            G = level[b][k][1]
            n = len(pos) - 1
            delta = [gamma_token * values[b][pos[i + 1]] - values[b][pos[i]] for i in range(n)]
            delta.append(G - values[b][pos[n]])
            for i in range(n + 1):
                adv[b][pos[i]] = sum((gamma_token * lam) ** j * delta[i + j] for j in range(n + 1 - i))
    return torch.tensor(adv)


@pytest.mark.parametrize("gamma,lam,gamma_token", [(1.0, 1.0, 1.0), (0.9, 0.95, 1.0), (0.8, 0.7, 0.95)])
def test_bilevel_gae_matches_brute_force(gamma, lam, gamma_token):
    rewards, values, mask, turn_end, turns = build()
    adv, ret = bilevel_gae(rewards, values, mask, turn_end, gamma, lam, gamma_token)
    ref = brute_bilevel(values.tolist(), turns, gamma, lam, gamma_token)
    assert torch.allclose(adv, ref, atol=1e-5)
    assert torch.allclose(ret, (ref + values) * mask, atol=1e-5)
    # the turn-end token of turn k carries the turn-level advantage A_k
    level = brute_turn_gae_of_turns(values.tolist(), turns, gamma, lam)
    for b, tb in enumerate(turns):
        for k, (pos, _) in enumerate(tb):
            assert adv[b, pos[-1]].item() == pytest.approx(level[b][k][0], abs=1e-5)


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_bilevel_gae_equals_token_gae_at_lambda_one_and_token_gamma_one(gamma):
    """The identity in bilevel_gae's docstring: λ = 1, γ_tok = 1 → the existing gae with turn_end; not for λ < 1."""
    rewards, values, mask, turn_end, _ = build()
    bi, _ = bilevel_gae(rewards, values, mask, turn_end, gamma, 1.0, 1.0)
    tok, _ = gae(rewards, values, mask, gamma, 1.0, turn_end=turn_end, gamma_token=1.0)
    assert torch.allclose(bi, tok, atol=1e-5)
    bi, _ = bilevel_gae(rewards, values, mask, turn_end, gamma, 0.8, 1.0)
    tok, _ = gae(rewards, values, mask, gamma, 0.8, turn_end=turn_end, gamma_token=1.0)
    assert not torch.allclose(bi, tok, atol=1e-3)


# ------------------------------------------------------------------------------------------------------- Dr. GRPO
def test_dr_grpo_is_return_minus_group_mean_without_std():
    returns = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.3, 0.3, 2.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    adv = dr_grpo_advantages(returns, groups)
    assert adv.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25, 0.0, 0.0, 0.0])  # group 2: one episode
    inp, turns = inputs(values=False)
    tok = ESTIMATORS["dr_grpo"](inp, AlgoConfig(advantage="dr_grpo"))[0]
    R = [sum(r for _, r in tb) for tb in turns]
    means = {g: statistics.fmean(R[i] for i in range(4) if GROUPS[i] == g) for g in set(GROUPS)}
    assert torch.allclose(tok, on_tokens(turns, [[R[b] - means[GROUPS[b]]] * len(tb) for b, tb in enumerate(turns)],
                                         tok.shape[1]), atol=1e-6)


# ----------------------------------------------------------------------------------------------------- REINFORCE++
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_pp_is_whitened_reward_to_go_over_the_batch(gamma):
    inp, turns = inputs(values=False)
    T = inp.mask.shape[1]
    rtg = [[sum(gamma ** (j - k) * tb[j][1] for j in range(k, len(tb))) for k in range(len(tb))] for tb in turns]
    assert torch.allclose(reward_to_go(inp.token_rewards, inp.mask, inp.turn_end, gamma), on_tokens(turns, rtg, T),
                          atol=1e-6)
    adv, vt = ESTIMATORS["reinforce_pp"](inp, AlgoConfig(advantage="reinforce_pp", gamma=gamma))
    ref = torch.tensor(whiten_list(on_tokens(turns, rtg, T).tolist(), turns)) * inp.mask
    assert vt is None and torch.allclose(adv, ref, atol=1e-4)


# ------------------------------------------------------------------------------------------------------------ GiGPO
def brute_gigpo(returns, turn_rewards, turn_obs, groups, gamma, omega, eps=1e-6):
    def norm(xs, x):
        if len(xs) < 2 or statistics.stdev(xs) == 0:
            return 0.0
        return (x - statistics.fmean(xs)) / (statistics.stdev(xs) + eps)

    out = []
    for i in range(len(returns)):
        ep = norm([returns[j] for j in range(len(returns)) if groups[j] == groups[i]], returns[i])
        G = lambda j, k: sum(gamma ** (m - k) * turn_rewards[j][m] for m in range(k, len(turn_rewards[j])))  # noqa: E731
        row = []
        for k, o in enumerate(turn_obs[i]):
            peers = [G(j, m) for j in range(len(returns)) if groups[j] == groups[i]
                     for m, o2 in enumerate(turn_obs[j]) if o2 == o]
            row.append(ep + omega * norm(peers, G(i, k)))
        out.append(row)
    return out


@pytest.mark.parametrize("gamma,omega", [(1.0, 1.0), (0.95, 0.5)])
def test_gigpo_matches_brute_force_with_shared_states(gamma, omega):
    inp, turns = inputs(values=False)
    R = inp.returns.tolist()
    ref = brute_gigpo(R, inp.turn_rewards, OBS, GROUPS, gamma, omega)
    _, per_turn = gigpo_advantages(inp.returns, inp.group_ids, OBS, inp.turn_rewards, gamma, omega)
    assert [x for r in per_turn for x in r] == pytest.approx([x for r in ref for x in r], abs=1e-5)
    algo = AlgoConfig(advantage="gigpo", gamma=gamma, gigpo_step_weight=omega)
    adv, vt = ESTIMATORS["gigpo"](inp, algo)
    assert vt is None and torch.allclose(adv, on_tokens(turns, ref, adv.shape[1]), atol=1e-5)


def test_gigpo_step_groups_by_hand():
    """Group 0: episodes A (start → hall → kitchen, rewards 0, 0, 1) and B (start → hall, rewards 0, 0) pass through
    the same two states; 'kitchen' is A's alone. Group 1 also starts in 'start' but is another step group."""
    returns = torch.tensor([1.0, 0.0, 0.0, 0.0])
    obs = [["start", "hall", "kitchen"], ["start", "hall"], ["start"], ["start"]]
    rew = [[0.0, 0.0, 1.0], [0.0, 0.0], [0.0], [0.0]]
    ep, per_turn = gigpo_advantages(returns, torch.tensor([0, 0, 1, 1]), obs, rew, gamma=1.0, step_weight=1.0, eps=0)
    s = 2 ** -0.5  # the std (unbiased) of {1, 0} is 1/√2: normalised ±0.5 / (1/√2) = ±1/√2
    assert ep.tolist() == pytest.approx([s, -s, 0.0, 0.0])
    # 'start' and 'hall' step groups: G = {1, 0} → ±1/√2; 'kitchen': one member → 0; group 1: all equal → 0
    assert per_turn == [pytest.approx([2 * s, 2 * s, s]), pytest.approx([-2 * s, -2 * s]), [0.0], [0.0]]


def test_gigpo_needs_per_turn_observations():
    inp, _ = inputs(values=False)
    inp.turn_obs = None
    with pytest.raises(ValueError, match="turn_obs"):
        ESTIMATORS["gigpo"](inp, AlgoConfig(advantage="gigpo"))
    with pytest.raises(ValueError, match="one observation and one reward per turn"):
        gigpo_advantages(inp.returns, inp.group_ids, [["a"]] * 4, inp.turn_rewards)


def test_turns_to_tokens_refuses_a_turn_count_mismatch():
    _, _, mask, turn_end, _ = build()
    with pytest.raises(ValueError, match="trajectory 0 has 3 turn ends"):
        turns_to_tokens([[1.0], [1.0, 2.0], [1.0], [1.0, 2.0, 3.0]], mask, turn_end)


# ------------------------------------------------------------------------------------------ registry and presets
def test_every_estimator_gives_zero_on_non_policy_tokens_and_finite_values():
    for name, est in ESTIMATORS.items():
        inp, _ = inputs(values=est.needs_critic)
        adv, vt = est(inp, AlgoConfig(advantage=name))
        assert torch.isfinite(adv).all() and torch.all(adv[inp.mask == 0] == 0), name
        assert (vt is not None) == est.needs_critic, name


def test_presets_reach_every_estimator_and_labels_name_them():
    assert {ALGO_PRESETS[p]["advantage"] for p in ALGO_PRESETS} == set(ESTIMATORS)
    assert [AlgoConfig.from_preset(p).label for p in ALGO_PRESETS] == list(ALGO_PRESETS)
    s = AlgoConfig.from_preset("starpo_s")
    assert (s.advantage, s.keep_top_std, s.clip_low, s.clip_high, s.kl_coef, s.entropy_coef) == \
        ("gae", 0.25, 0.2, 0.28, 0.0, 0.001)
    assert AlgoConfig().label == "ppo" and AlgoConfig(keep_top_std=0.5).label == "ppo"
    for name, est in ESTIMATORS.items():
        if est.min_group_size > 1:
            with pytest.raises(ConfigError, match=f"'{name}' needs algo.group_size >= 2"):
                get_estimator(name, group_size=1)
    with pytest.raises(ConfigError, match="keep_top_std 0.25 ranks groups"):
        AlgoConfig.from_preset("starpo_s", group_size=1).validate()


# ------------------------------------------------------------------------- one tiny RL step per preset (run_rl)
@pytest.mark.trains
@pytest.mark.parametrize("preset", ["turn_ppo", "bilevel_ppo", "dr_grpo", "reinforce_pp", "gigpo", "starpo_s"])
def test_one_rl_step_per_preset_through_run_rl(preset, tiny_model_dir, tmp_path, monkeypatch):
    import agentrl_lib.trainer as trainer_mod
    import agentrl_lib.update as update_mod
    from agentrl_lib.config import EnvConfig, ModelConfig, RewardConfig, RunConfig, TrainConfig
    from agentrl_lib.envs.base import GameRecord, write_manifest
    from agentrl_lib.envs.pool import SerialPool
    from agentrl_lib.run import run_rl

    root = tmp_path / "games"
    root.mkdir()
    recs = []
    for i in range(2):
        (root / f"g{i}.txt").write_text("scripted")
        recs.append(GameRecord(path=str(root / f"g{i}.txt"), name=f"g{i}", seed=i, max_score=1, walkthrough=["look"]))
    write_manifest(root, "textworld", recs, {"scripted": True})
    monkeypatch.setattr(trainer_mod, "open_pool", lambda env, n, games, *kind: SerialPool(n, factory=CoinEnv))
    seen, agg = [], []
    real_loss = update_mod.policy_loss  # the update (update.minibatch_loss) calls losses.policy_loss
    monkeypatch.setattr(update_mod, "policy_loss", lambda lp, old, adv, mask, algo, w, max_tokens, *a, **k: agg.append(
        (algo.loss_agg, max_tokens)) or real_loss(lp, old, adv, mask, algo, w, max_tokens, *a, **k))
    est = ESTIMATORS[ALGO_PRESETS[preset]["advantage"]]
    monkeypatch.setattr(type(est), "__call__", lambda self, inp, algo, _c=type(est).__call__: seen.append(inp)
                        or _c(self, inp, algo))
    cfg = RunConfig(env=EnvConfig(games=str(root), max_turns=2), reward=RewardConfig(kind="dense"),
                    algo=AlgoConfig.from_preset(preset, group_size=4), model=ModelConfig(device="cpu"),
                    train=TrainConfig(steps=1, games_per_step=2, minibatch_size=8, max_new_tokens=5, seed=1, lr=1e-3))
    (row,) = run_rl(cfg, tmp_path / "run", init=str(tiny_model_dir), progress=False)["rows"]
    assert len(seen) == 1 and seen[0].turn_obs is not None
    assert all(o == ["A room.", "ok "] for o in seen[0].turn_obs[:1])  # each action's state: reset, then step 1
    assert row["skipped_update"] == 0.0 and row["grad_norm"] > 0 and row["policy_tokens"] > 0
    assert all(math.isfinite(v) for k, v in row.items() if isinstance(v, float) and k != "explained_variance")
    assert agg and all(x == (cfg.algo.loss_agg, 2 * 5) for x in agg)  # L_max = max_turns × max_new_tokens
    if preset == "starpo_s":
        assert row["kept_fraction"] == pytest.approx(0.5)  # 25% of 2 groups, rounded half up: 1 group


# ------------------------------------------------ the bias of a per-turn-index baseline (advantages.py's docstring)
def expected_update(p_stop, q_good, G, advantage_fn):
    """Exact expected policy-gradient estimate (per episode) on a two-turn game, by enumerating every group of G
    episodes. Turn 1: 'stop' (prob p = σ(θ1), reward 0.3, the episode ends) or 'go' (reward 0). Turn 2 after 'go':
    'good' (prob q = σ(θ2), reward 1) or 'bad' (0). advantage_fn(group) → per episode, per turn, the advantage.
    Returns (E ĝ_θ1, E ĝ_θ2) and the true gradient (∂J/∂θ1, ∂J/∂θ2) of J = 0.3 p + (1 − p) q."""
    import itertools

    kinds = {"S": (p_stop, [0.3]), "GG": ((1 - p_stop) * q_good, [0.0, 1.0]),
             "GB": ((1 - p_stop) * (1 - q_good), [0.0, 0.0])}
    score1 = {"S": 1 - p_stop, "GG": -p_stop, "GB": -p_stop}  # ∂ log π(a_1) / ∂θ1
    score2 = {"GG": 1 - q_good, "GB": -q_good}                 # ∂ log π(a_2) / ∂θ2
    g1 = g2 = 0.0
    for group in itertools.product(kinds, repeat=G):
        prob = math.prod(kinds[k][0] for k in group)
        adv = advantage_fn([kinds[k][1] for k in group])
        for k, a in zip(group, adv):
            g1 += prob * score1[k] * a[0] / G
            if k != "S":
                g2 += prob * score2[k] * a[1] / G
    true = (p_stop * (1 - p_stop) * (0.3 - q_good), (1 - p_stop) * q_good * (1 - q_good))
    return (g1, g2), true


def per_turn_index_baseline(turn_rewards):
    """A_{i,k} = G_{i,k} − mean of G_{j,k} over the group's episodes j that reached turn k (the episode included)."""
    from agentrl_lib.advantages import discounted_turn_returns

    rtg = [discounted_turn_returns(r) for r in turn_rewards]
    out = []
    for g in rtg:
        out.append([x - statistics.fmean(h[k] for h in rtg if len(h) > k) for k, x in enumerate(g)])
    return out


def episode_level(fn):
    def adv(turn_rewards):
        a = fn(torch.tensor([sum(r) for r in turn_rewards]), torch.zeros(len(turn_rewards), dtype=torch.long))
        return [[x] * len(r) for x, r in zip(a.tolist(), turn_rewards)]
    return adv


@pytest.mark.parametrize("p_stop", [0.8, 0.2])
def test_per_turn_index_baseline_bends_the_update_and_episode_level_ones_do_not(p_stop):
    from agentrl_lib.advantages import rloo_advantages

    G, q = 4, 0.6
    (d1, d2), (t1, t2) = expected_update(p_stop, q, G, episode_level(dr_grpo_advantages))
    assert d1 / t1 == pytest.approx(1 - 1 / G) and d2 / t2 == pytest.approx(1 - 1 / G)  # same factor: same direction
    (r1, r2), _ = expected_update(p_stop, q, G, episode_level(rloo_advantages))
    assert r1 / t1 == pytest.approx(1.0) and r2 / t2 == pytest.approx(1.0)
    # the per-turn-index baseline: turn 1 keeps 1 − 1/G, turn 2 gets E[1 − 1/n_2], n_2 = 1 + Binomial(G − 1, 1 − p)
    (b1, b2), _ = expected_update(p_stop, q, G, per_turn_index_baseline)
    shrink = sum(math.comb(G - 1, m) * (1 - p_stop) ** m * p_stop ** (G - 1 - m) * (1 - 1 / (m + 1))
                 for m in range(G))
    assert b1 / t1 == pytest.approx(1 - 1 / G) and b2 / t2 == pytest.approx(shrink)
    assert shrink < 1 - 1 / G - 0.05  # p = 0.8: 0.262 vs 0.75; p = 0.2: 0.688 vs 0.75


# ------------------------------------------------------------------------ Dr. GRPO's loss aggregation (losses.py)
def test_loss_aggregation_token_mean_and_dr_grpo_constant():
    """At ratio 1 the gradient of the surrogate w.r.t. log π_θ(a_t) is −A_t · w. token_mean: w = 1 / (policy tokens
    of the minibatch), which changes when another episode of the minibatch gets longer; seq_mean_token_sum_norm:
    w = 1 / (B · L_max), the same constant whatever the lengths (Dr. GRPO). Neither is GRPO's 1/|o_i|."""
    from agentrl_lib.losses import policy_loss

    def weights(mask, agg):
        logp = torch.zeros(mask.shape, requires_grad=True)
        adv = torch.ones(mask.shape)
        loss, _ = policy_loss(logp, torch.zeros(mask.shape), adv, mask, AlgoConfig(loss_agg=agg), max_tokens=20)
        loss.backward()
        return -logp.grad

    short = torch.tensor([[0, 1, 1, 0, 0, 1, 0, 0], [0, 1, 0, 0, 0, 0, 0, 0]], dtype=torch.float32)
    longer = short.clone()
    longer[1, 3:7] = 1  # the second episode gets longer; the first is unchanged
    for mask in (short, longer):
        w = weights(mask, "seq_mean_token_sum_norm")
        assert torch.allclose(w, mask / (2 * 20))
        assert torch.allclose(weights(mask, "token_mean"), mask / mask.sum())
    assert weights(short, "token_mean")[0, 1] != weights(longer, "token_mean")[0, 1]
    # the loss itself: −Σ J / (B · L_max)
    torch.manual_seed(0)
    logp, old, adv = torch.randn(2, 8) * 0.1, torch.randn(2, 8) * 0.1, torch.randn(2, 8)
    loss, _ = policy_loss(logp, old, adv, longer, AlgoConfig(loss_agg="seq_mean_token_sum_norm"), max_tokens=20)
    r = torch.exp(logp - old)
    J = torch.minimum(r * adv, torch.clamp(r, 0.8, 1.28) * adv)
    assert loss.item() == pytest.approx(-(J * longer).sum().item() / 40, abs=1e-6)
    with pytest.raises(ValueError, match="loss_agg must be one of"):
        policy_loss(logp, old, adv, longer, AlgoConfig(loss_agg="seq_mean"))
    with pytest.raises(ConfigError, match="algo.loss_agg must be one of"):
        AlgoConfig(loss_agg="sum").validate()


# ------------------------------------------------------------------------------------- estimators and config
@pytest.fixture
def registry():
    """ESTIMATORS restored after the test (estimators registered by a test do not leak into others)."""
    saved = dict(ESTIMATORS)
    yield ESTIMATORS
    ESTIMATORS.clear()
    ESTIMATORS.update(saved)


@dataclass
class Reinforce:
    """A toy estimator, A_i = R_i on every policy token (REINFORCE without baseline); records what it was given.
    With needs_critic it returns the Monte Carlo return R_i as every token's value target."""

    name: str = "reinforce"
    needs_critic: bool = False
    min_group_size: int = 1
    calls: list = field(default_factory=list)

    def __call__(self, inputs: AdvantageInputs, algo: AlgoConfig):
        self.calls.append(inputs)
        adv = broadcast_to_tokens(inputs.returns.to(inputs.mask.device), inputs.mask)
        return adv, (adv.clone() if self.needs_critic else None)


def test_every_registered_estimator_round_trips_through_config_validation(tmp_path):
    assert {"gae", "grpo", "rloo"} <= set(ESTIMATORS)
    for name, est in ESTIMATORS.items():
        cfg = RunConfig(algo=AlgoConfig(advantage=name, group_size=est.min_group_size))
        cfg.save(tmp_path / f"{name}.yaml")
        assert RunConfig.load(tmp_path / f"{name}.yaml") == cfg
        assert run_parts(cfg).estimator is est
        if est.min_group_size > 1:  # the registry's min_group_size is what the lookup enforces
            with pytest.raises(ConfigError, match=f"'{name}' needs algo.group_size >= {est.min_group_size}"):
                run_parts(RunConfig(algo=AlgoConfig(advantage=name, group_size=est.min_group_size - 1)))
    AlgoConfig(advantage="reinforce").validate()  # the config alone cannot know the registry: the lookup refuses it
    with pytest.raises(ConfigError, match=r"algo.advantage must be one of \['bilevel_gae', 'dr_grpo', 'gae', 'gigpo'"):
        run_parts(RunConfig(algo=AlgoConfig(advantage="reinforce")))


def test_presets_labels_and_a_registered_estimator(registry):
    assert {p: AlgoConfig.from_preset(p).advantage for p in ("ppo", "grpo", "rloo")} == {"ppo": "gae", "grpo": "grpo",
                                                                                       "rloo": "rloo"}
    assert [AlgoConfig.from_preset(p).label for p in ALGO_PRESETS] == list(ALGO_PRESETS)
    with pytest.raises(ConfigError, match="unknown algorithm preset 'dpo'"):
        AlgoConfig.from_preset("dpo")
    register_estimator(Reinforce(min_group_size=3))
    assert AlgoConfig(advantage="reinforce", group_size=3).label == "reinforce"
    assert get_estimator("reinforce", group_size=3).name == "reinforce"  # registered after the config module loaded
    with pytest.raises(ConfigError, match="'reinforce' needs algo.group_size >= 3"):
        get_estimator("reinforce", group_size=2)
    with pytest.raises(ValueError, match="exists"):
        register_estimator(Reinforce())


@pytest.mark.trains
@pytest.mark.parametrize("needs_critic", [False, True])
def test_an_estimator_registered_here_trains_one_step(needs_critic, registry, tiny_model_dir, tmp_path):
    toy = register_estimator(Reinforce(needs_critic=needs_critic))
    cfg = RunConfig(env=EnvConfig(games=coin_games(tmp_path / "g"), max_turns=2), reward=RewardConfig(kind="dense"),
                    algo=AlgoConfig(advantage="reinforce", group_size=2), model=ModelConfig(device="cpu"),
                    train=TrainConfig(steps=1, games_per_step=2, minibatch_size=4, max_new_tokens=5, temperature=1.0,
                                      lr=1e-3, seed=1))
    with Trainer(cfg, tmp_path / "run", init=tiny_model_dir, pool=SerialPool(4, factory=CoinEnv),
                 progress=False) as trainer:
        assert (trainer.value_head is not None) == needs_critic  # a critic exists iff the estimator needs one
        before = {n: p.detach().clone() for n, p in trainer.policy.named_parameters() if p.requires_grad}
        row = trainer.step(0)
    assert not trainer._release_lock.alive, "leaving the with block closes the trainer (pool + run lock)"
    assert row["skipped_update"] == 0.0 and row["return_std"] > 0, "CoinEnv gives return spread at this seed"
    unchanged = [n for n, p in trainer.policy.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert not unchanged, f"parameters not updated: {unchanged}"
    assert ("explained_variance" in row) == needs_critic and ("value_loss" in row) == needs_critic
    (inputs,) = toy.calls
    B, T = inputs.mask.shape
    assert B == 4 and row["seq_len_max"] == T
    for name in ("token_rewards", "mask", "turn_end"):
        x = getattr(inputs, name)
        assert x.shape == (B, T) and x.dtype == torch.float32, name
    assert inputs.returns.shape == (B,) and inputs.returns.dtype == torch.float32
    assert inputs.group_ids.shape == (B,) and inputs.group_ids.dtype == torch.long
    assert torch.allclose(inputs.token_rewards.sum(1), inputs.returns)  # each turn's reward on its end token
    assert torch.all(inputs.turn_end <= inputs.mask)  # turn ends are policy tokens
    if needs_critic:
        assert inputs.values.shape == (B, T) and inputs.values.dtype == torch.float32
    else:
        assert inputs.values is None


def test_the_builtin_estimators_wrap_the_pure_functions():
    """GRPO through the registry = grpo_advantages broadcast to policy tokens; GAE returns value targets."""
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
    rewards = torch.tensor([[0, 0, 1.0, 0], [0, 0.5, 0, 0], [0, 0, 0, 2.0]])
    inputs = AdvantageInputs(token_rewards=rewards, mask=mask, returns=rewards.sum(1),
                             group_ids=torch.tensor([0, 0, 1]), turn_end=rewards.ne(0).float(),
                             values=torch.zeros(3, 4))
    adv, targets = ESTIMATORS["grpo"](inputs, AlgoConfig(advantage="grpo"))
    assert targets is None
    assert torch.equal(adv, grpo_advantages(inputs.returns, inputs.group_ids, 1e-6)[:, None] * mask)
    adv, targets = ESTIMATORS["gae"](inputs, AlgoConfig(normalize_advantages=False))
    assert torch.allclose(targets, torch.tensor([[0, 1.0, 1, 0], [0, 0.5, 0, 0], [2.0, 2, 2, 2]]))  # γ = λ = 1, V = 0
    assert torch.allclose(adv, targets)
