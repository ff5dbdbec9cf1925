"""Losses shared by PPO, GRPO and RLOO: the policy losses (POLICY_LOSSES, the registry algo.loss_mode names; the
clipped surrogate with decoupled ε_low / ε_high, 'ppo_clip', is the default), their aggregation over tokens
(aggregate, algo.loss_agg), the clipped value loss, k3 KL to a reference policy, entropy. Each returns (loss,
metrics) so every update logs its own diagnostics.

All token tensors are (B, T) float32 with a (B, T) mask that is 1 on policy tokens; losses average over masked
tokens of the whole minibatch ("token-mean", as DAPO and TRL's default), so long and short trajectories weigh
each token equally; the surrogate can instead divide by a constant, as Dr. GRPO does (LOSS_AGGS, algo.loss_agg).

Introduced in notebooks/00_quickstart.md §4.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .config_values import LOSS_AGGS, ConfigError  # LOSS_AGGS: config_values.LossAgg's values; see below


def masked_mean(x: torch.Tensor, mask: torch.Tensor, count: float | None = None) -> torch.Tensor:
    """Mean of x over entries where mask is 1 (0 if the mask is empty): Σ m·x / Σ m.

    count: the denominator to use instead of Σ m. A data-parallel rank passes the count of the GLOBAL minibatch, so
    that the ranks' results sum to the global mean (agentrl_lib/distributed.py).
    """
    m = mask.float()
    return (x * m).sum() / (m.sum().clamp(min=1.0) if count is None else count)


# LOSS_AGGS (config_values.LossAgg, algo.loss_agg): how policy_loss aggregates the per-token objective J_t:
#
#     token_mean:               L = −Σ_{i,t} m_{i,t} J_{i,t} / Σ_{i,t} m_{i,t}     (DAPO, Yu et al. 2025; TRL's default)
#     seq_mean_token_sum_norm:  L = −Σ_{i,t} m_{i,t} J_{i,t} / (B · L_max)        (Dr. GRPO, Liu et al. 2025, §3.1)
#
# Neither divides a response by its own length, the 1/|o_i| of the original GRPO objective that Dr. GRPO removes (with
# it, a long wrong answer is penalised less per token than a short one). token_mean weighs every token of a minibatch
# alike, but its denominator is the minibatch's token count, so a token's weight still depends on how long the other
# episodes of the minibatch were; seq_mean_token_sum_norm divides by a constant: B (the minibatch's episodes) times
# L_max, the most policy tokens an episode can have (the trainer passes max_turns × max_new_tokens). Its updates are
# smaller by about mean episode tokens / L_max at the same learning rate.


PolicyLoss = Callable[[torch.Tensor, torch.Tensor, Any], tuple[torch.Tensor, dict[str, torch.Tensor]]]
"""A policy loss of the registry: fn(ratio, advantages, algo) -> (J, flags). ratio ρ_t = π_θ(a_t) / π_old(a_t) and
advantages A_t are (B, T) float32; `algo` is the run's AlgoConfig (a loss reads the fields it needs, e.g.
clip_low); J is the per-token objective (B, T) to maximise, before the TIS weights and the aggregation (policy_loss
applies both); flags are (B, T) bool tensors whose masked means become metrics of the same names (e.g. clip_frac)."""
POLICY_LOSSES: dict[str, PolicyLoss] = {}
"""algo.loss_mode → its PolicyLoss (verl's POLICY_LOSS_REGISTRY); add one with @register_policy_loss(name)."""


def register_policy_loss(name: str):
    """Decorator: register `fn(ratio, advantages, algo) -> (J, flags)` (PolicyLoss) as POLICY_LOSSES[name]; the
    function is returned unchanged.

    Raises: ValueError if the name is taken."""
    def register(fn: PolicyLoss) -> PolicyLoss:
        if name in POLICY_LOSSES:
            raise ValueError(f"a policy loss named {name!r} exists; pick another name")
        POLICY_LOSSES[name] = fn
        return fn

    return register


def get_policy_loss(name: str) -> PolicyLoss:
    """POLICY_LOSSES[name], checked where it is looked up (parts.run_parts, policy_loss).

    Raises: ConfigError listing the registered names."""
    if name not in POLICY_LOSSES:
        raise ConfigError(f"algo.loss_mode must be one of {sorted(POLICY_LOSSES)} (got {name!r}); register a new one "
                          "with losses.register_policy_loss")
    return POLICY_LOSSES[name]


@register_policy_loss("ppo_clip")
def ppo_clip(ratio: torch.Tensor, advantages: torch.Tensor, algo) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate (Schulman et al. 2017, eq. 7) with decoupled clip range (DAPO, Yu et al. 2025; StarPO-S) and
    optional dual clip (Ye et al. 2020, eq. 5), per token:

        J_t = min(ρ_t A_t, clip(ρ_t, 1 − ε_low, 1 + ε_high) A_t)
        dual clip (c > 1):  J_t = max(J_t, c · A_t) where A_t < 0     (a bounded step for very large ρ_t)

    Args: ratio, advantages: (B, T) float32; algo: reads clip_low (ε_low), clip_high (ε_high), dual_clip (c; 0 =
        off).
    Returns: J (B, T) float32; flags clip_frac (the clipped term was the smaller) and dual_clip_frac (B, T) bool.
    Raises: ValueError if 0 < dual_clip <= 1.
    """
    if 0 < algo.dual_clip <= 1:
        raise ValueError(f"dual_clip must be 0 (off) or > 1 (got {algo.dual_clip}); Ye et al. 2020 use 3")
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - algo.clip_low, 1.0 + algo.clip_high) * advantages
    objective = torch.min(unclipped, clipped)
    dual = torch.zeros_like(objective, dtype=torch.bool)
    if algo.dual_clip > 0:
        floor = algo.dual_clip * advantages
        dual = (advantages < 0) & (objective < floor)
        objective = torch.where(advantages < 0, torch.max(objective, floor), objective)
    return objective, {"clip_frac": clipped < unclipped, "dual_clip_frac": dual}


def aggregate(objective: torch.Tensor, mask: torch.Tensor, loss_agg: str, max_tokens: float | None = None,
              n_tokens: float | None = None, n_episodes: int | None = None) -> torch.Tensor:
    """The loss L = −(Σ_{i,t} m_{i,t} J_{i,t}) / denominator, the denominator by `loss_agg` (LOSS_AGGS, above):
    Σ m (token_mean) or B · L_max (seq_mean_token_sum_norm, Dr. GRPO).

    Args: objective, mask: (B, T) float32, mask 1 on the policy tokens.  max_tokens: L_max (policy tokens; default
        T, the padded width).  n_tokens, n_episodes: Σ m and B (default: this minibatch's); a micro-batch or a
        data-parallel rank passes the whole minibatch's, so its loss is its share of the minibatch's.
    Returns: 0-dim float32.
    Raises: ValueError if loss_agg is not one of LOSS_AGGS."""
    if loss_agg == "token_mean":
        return -masked_mean(objective, mask, n_tokens)
    if loss_agg == "seq_mean_token_sum_norm":
        n_seq = mask.shape[0] if n_episodes is None else n_episodes
        return -(objective * mask.float()).sum() / (n_seq * (max_tokens or mask.shape[1]))
    raise ValueError(f"loss_agg must be one of {LOSS_AGGS} (got {loss_agg!r})")


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                algo, is_weights: torch.Tensor | None = None, max_tokens: float | None = None,
                n_tokens: float | None = None, n_episodes: int | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The policy's loss on one minibatch: the registered per-token objective of algo.loss_mode (POLICY_LOSSES; the
    default 'ppo_clip', the clipped surrogate), times the truncated importance-sampling weights if given (Yao et
    al. 2025), aggregated by algo.loss_agg:

        ρ_t = exp(log π_θ(a_t) − log π_old(a_t))
        J_t = POLICY_LOSSES[algo.loss_mode](ρ, A, algo)      e.g. min(ρ_t A_t, clip(ρ_t, 1 − ε_low, 1 + ε_high) A_t)
        TIS:  J_t = w_t · J_t,  w_t = min(π_old(a_t) / π_behaviour(a_t), C)  (given as is_weights)
        L = aggregate(J, mask, algo.loss_agg)   (token mean over the mask; or Dr. GRPO's constant normaliser)

    Args:
        logprobs, old_logprobs, advantages: (B, T) float32.  mask: (B, T) 0/1, the policy tokens that train.
        algo: the run's AlgoConfig (loss_mode, loss_agg and what the loss reads: clip_low, clip_high, dual_clip).
        is_weights: (B, T) float32 truncated importance weights (no gradient flows through them), or None.
        max_tokens, n_tokens, n_episodes: the denominators of `aggregate`.
    Returns: loss (scalar), metrics {the loss's flags (ppo_clip: clip_frac, dual_clip_frac), approx_kl, ratio_mean,
        policy_loss}. approx_kl is the k3 estimate of KL(π_old ‖ π_θ) from the sampled tokens, (ρ − 1) − log ρ
        (Schulman 2020, "Approximating KL divergence"); policy_loss is the surrogate alone (before entropy, value
        and KL terms).
    Raises: ConfigError (a ValueError) for an unknown loss_mode; ValueError from the loss (ppo_clip: 0 < dual_clip
        <= 1) or for a loss_agg not in LOSS_AGGS.
    """
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    objective, flags = get_policy_loss(algo.loss_mode)(ratio, advantages, algo)
    if is_weights is not None:
        objective = objective * is_weights.detach()
    loss = aggregate(objective, mask, algo.loss_agg, max_tokens, n_tokens, n_episodes)
    with torch.no_grad():
        metrics = {name: masked_mean(flag.float(), mask, n_tokens).item() for name, flag in flags.items()}
        metrics["approx_kl"] = masked_mean((ratio - 1) - log_ratio, mask, n_tokens).item()
        metrics["ratio_mean"] = masked_mean(ratio, mask, n_tokens).item()
    return loss, {**metrics, "policy_loss": loss.item()}


def truncated_is_weights(old_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor,
                         cap: float) -> torch.Tensor:
    """Truncated importance-sampling weights w_t = min(π_old(a_t) / π_behaviour(a_t), C) (Yao et al. 2025, "Your
    efficient RL framework secretly brings you off-policy RL training", TIS).

    π_behaviour is the distribution the rollout engine sampled from (its logged log-probs); π_old is the same policy
    as the trainer computes it. They differ when the two run different kernels or precisions (bf16 on a GPU, vLLM);
    on a CPU in fp32 they agree to ~1e-6 and w ≈ 1.

    Args:
        old_logprobs, behaviour_logprobs: (B, T) float32.  mask: (B, T) 0/1.  cap: C > 0 (Yao et al. use 2).
    Returns: (B, T) float32 weights, 0 where mask is 0. Raises: ValueError if cap <= 0.
    """
    if cap <= 0:
        raise ValueError(f"the TIS cap must be > 0 (got {cap})")
    w = torch.exp(old_logprobs - behaviour_logprobs).clamp(max=cap)
    return w * mask.float()


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip: float = 0.2, n_tokens: float | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss (PPO2 / CleanRL): ½ mean max((V − R)², (V_old + clip(V − V_old, ±c) − R)²); clip 0: MSE.

    n_tokens: the mean's denominator (masked_mean's count; default Σ mask).
    Returns: loss, metrics {value_loss, value_clip_frac}.
    """
    err = (values - returns) ** 2
    if clip > 0:
        v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        err_clipped = (v_clipped - returns) ** 2
        loss = 0.5 * masked_mean(torch.max(err, err_clipped), mask, n_tokens)
        frac = masked_mean((err_clipped > err).float(), mask, n_tokens).item()
    else:
        loss = 0.5 * masked_mean(err, mask, n_tokens)
        frac = 0.0
    return loss, {"value_loss": loss.item(), "value_clip_frac": frac}


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
          n_tokens: float | None = None) -> torch.Tensor:
    """k3 estimator of KL(π_θ ‖ π_ref) per token (Schulman 2020, "Approximating KL divergence"), masked mean
    (denominator n_tokens, default Σ mask):

        k3 = exp(log π_ref − log π_θ) − (log π_ref − log π_θ) − 1   (≥ 0, unbiased)
    """
    d = ref_logprobs - logprobs
    return masked_mean(torch.exp(d) - d - 1, mask, n_tokens)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) along the last dim: (..., V) → (...)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 − Var[R − V] / Var[R] over masked tokens (1 = perfect critic, ≤ 0 = no better than a constant)."""
    m = mask.bool()
    r, v = returns[m].float(), values[m].float()
    if r.numel() < 2 or r.var() == 0:
        return float("nan")
    return (1 - (r - v).var() / r.var()).item()
