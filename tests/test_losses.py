"""The losses (agentrl_lib/losses.py) against hand computations: the clipped surrogate and its dual clip, truncated
importance weights, the k3 KL (and approx_kl), the clipped value loss, the masked mean."""
import math

import pytest
import torch

from agentrl_lib.config import AlgoConfig
from agentrl_lib.losses import kl_k3, masked_mean, policy_loss, truncated_is_weights, value_loss


def test_policy_loss_matches_per_token_brute_force():
    torch.manual_seed(0)
    logp, old = torch.randn(3, 6) * 0.3, torch.randn(3, 6) * 0.3
    adv, mask = torch.randn(3, 6), (torch.rand(3, 6) > 0.3).float()
    loss, m = policy_loss(logp, old, adv, mask, AlgoConfig(clip_low=0.2, clip_high=0.28))
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
    loss, m = policy_loss(logp, torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), AlgoConfig(clip_high=0.2))
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


def test_truncated_is_weights_and_dual_clip():
    old = torch.tensor([[0.0, -1.0, -2.0, -3.0]])
    beh = torch.tensor([[-1.0, -1.0, 0.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w = truncated_is_weights(old, beh, mask, cap=2.0)
    assert torch.allclose(w, torch.tensor([[2.0, 1.0, math.exp(-2.0), 0.0]]))
    # dual clip (Ye et al. 2020): for A < 0 the objective is bounded below by c·A
    logp, old_lp = torch.tensor([[2.0, 2.0]]), torch.zeros(1, 2)  # ratio e² ≈ 7.39
    adv = torch.tensor([[-1.0, 1.0]])
    m = torch.ones(1, 2)
    plain, _ = policy_loss(logp, old_lp, adv, m, AlgoConfig(clip_high=0.2))
    dual, met = policy_loss(logp, old_lp, adv, m, AlgoConfig(clip_high=0.2, dual_clip=3.0))
    # token 0: min(7.39·(−1), 1.2·(−1)) = −7.39 → max(−7.39, −3) = −3; token 1: min(7.39, 1.2) = 1.2
    assert plain.item() == pytest.approx(-(-math.exp(2) + 1.2) / 2)
    assert dual.item() == pytest.approx(-(-3.0 + 1.2) / 2) and met["dual_clip_frac"] == 0.5
    with pytest.raises(ValueError, match="dual_clip"):
        policy_loss(logp, old_lp, adv, m, AlgoConfig(dual_clip=0.5))


# ------------------------------------------------------------------------------------------- item 11: smaller ones
def test_approx_kl_is_k3_of_pi_old_to_pi_theta():
    logp, old = torch.tensor([[-1.0, -2.0, -0.5]]), torch.tensor([[-1.5, -1.0, -0.5]])
    _, met = policy_loss(logp, old, torch.ones(1, 3), torch.ones(1, 3), AlgoConfig())
    r = torch.exp(logp - old)
    assert met["approx_kl"] == pytest.approx(((r - 1) - torch.log(r)).mean().item())
    assert met["approx_kl"] != pytest.approx((1 / r - 1 + torch.log(r)).mean().item())  # the old formula


# ------------------------------------------------------------------------------ the policy-loss registry (losses.py)
def test_policy_loss_dispatches_on_loss_mode_and_unknown_modes_are_refused(monkeypatch):
    """algo.loss_mode picks the registered per-token objective; policy_loss aggregates whatever it returns and logs
    its flags. A plain importance-weighted policy gradient (J = ρ·A, no clip) keeps the gradient of a token that
    ppo_clip zeroes (ratio e^0.5 > 1 + ε with A > 0): the control that the registry, not a fixed formula, decides."""
    from agentrl_lib import losses
    from agentrl_lib.config import ConfigError, RunConfig
    from agentrl_lib.parts import run_parts

    monkeypatch.setattr(losses, "POLICY_LOSSES", dict(losses.POLICY_LOSSES))
    losses.register_policy_loss("no_clip")(lambda ratio, adv, algo: (ratio * adv, {"big_ratio": ratio > 1.5}))

    def grad(mode):
        logp = torch.tensor([[0.5]], requires_grad=True)
        loss, m = policy_loss(logp, torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), AlgoConfig(loss_mode=mode))
        loss.backward()
        return logp.grad.item(), m

    g_clip, m_clip = grad("ppo_clip")
    g_plain, m_plain = grad("no_clip")
    assert g_clip == 0.0 and m_clip["clip_frac"] == 1.0
    assert g_plain == pytest.approx(-math.exp(0.5)) and m_plain["big_ratio"] == 1.0 and "clip_frac" not in m_plain
    assert run_parts(RunConfig(algo=AlgoConfig(loss_mode="no_clip"))).policy_loss is losses.POLICY_LOSSES["no_clip"]
    with pytest.raises(ValueError, match="exists"):
        losses.register_policy_loss("no_clip")(lambda *a: None)
    with pytest.raises(ConfigError, match=r"algo.loss_mode must be one of \['no_clip', 'ppo_clip'\]"):
        run_parts(RunConfig(algo=AlgoConfig(loss_mode="ppo")))
