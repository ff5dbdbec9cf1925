"""Advantage estimators: pure tensor functions, and the ESTIMATORS registry the trainer picks from by name.

- `gae`: token-level GAE over policy tokens only (PPO with a critic; Practitioner's Guide §4.3, γ = λ = 1).
- `grpo_advantages`: group-normalised trajectory returns (Shao et al. 2024, DeepSeekMath, eq. 3 outcome supervision).
- `rloo_advantages`: leave-one-out baseline (Ahmadian et al. 2024, "Back to Basics", eq. 5).
- `broadcast_to_tokens`: a trajectory-level advantage on every policy token.
- `top_std_groups`: StarPO-S rollout filtering by within-group reward std (RAGEN §4, Wang et al. 2025).

The registry: `ESTIMATORS[name]` is an object with `name`, `needs_critic` (the trainer builds a value head and logs
explained variance iff True), `min_group_size` (config validation refuses a smaller algo.group_size) and
`__call__(inputs: AdvantageInputs, algo: AlgoConfig) -> (advantages (B, T) float32, value_targets (B, T) | None)`.
`algo.advantage` names the key. Add one from any file, then train with `AlgoConfig(advantage="mine")`:

    @dataclass
    class Reinforce:                              # A_i = R_i on every policy token, no baseline, no critic
        name: str = "reinforce"
        needs_critic: bool = False
        min_group_size: int = 1
        def __call__(self, inputs, algo):
            return broadcast_to_tokens(inputs.returns.to(inputs.mask.device), inputs.mask), None

    register_estimator(Reinforce())

Introduced in notebooks/00_quickstart.md §4.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from .config import AlgoConfig


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
        lam: float = 1.0, turn_end: torch.Tensor | None = None,
        gamma_token: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised Advantage Estimation over policy tokens only (Schulman et al. 2016, eq. 16).

    Environment and prompt tokens (mask 0) are skipped: the "next state" of a policy token is the next policy token
    of the same trajectory, so a turn's last token bootstraps from the first token of the next turn.

        δ_t = r_t + γ_t V_{next(t)} − V_t,      A_t = δ_t + γ_t λ A_{next(t)},     V_{next(last)} = 0
        γ_t = gamma (the turn-level discount) if t ends a turn, else gamma_token (within a reply)

    Which γ the papers mean: the Practitioner's Guide (§4.3) uses γ = λ = 1, where the two coincide; RAGEN's bi-level
    GAE discounts between turns with a turn-level γ and within a reply with a token-level γ (1 by default). One γ per
    token (turn_end=None) discounts a long reply more than a short one for the same turn.

    Args:
        rewards: (B, T) float32, turn rewards on turn-end tokens (0 elsewhere).
        values: (B, T) float32, V(s_t) on policy tokens (ignored elsewhere).
        mask: (B, T) 0/1 (bool or float), 1 on policy tokens.
        gamma: discount between turns (applied at turn-end tokens); with turn_end=None, per policy token.
        turn_end: (B, T) 0/1, 1 on each turn's last policy token; None treats every token as a turn end.
        gamma_token: discount between tokens of one reply (used only with turn_end).
    Returns:
        (advantages, returns): (B, T) float32 each, zero where mask is 0; returns = advantages + values.
    """
    mask = mask.float()
    B, T = rewards.shape
    adv = torch.zeros_like(rewards, dtype=torch.float32)
    next_value = torch.zeros(B, dtype=torch.float32, device=rewards.device)
    next_adv = torch.zeros(B, dtype=torch.float32, device=rewards.device)
    for t in reversed(range(T)):
        m = mask[:, t]
        g = gamma if turn_end is None else torch.where(turn_end[:, t] > 0, gamma, gamma_token).float()
        delta = rewards[:, t] + g * next_value - values[:, t]
        a = delta + g * lam * next_adv
        adv[:, t] = a * m
        # only policy tokens move the "next" pointers; env tokens leave them untouched
        next_value = torch.where(m > 0, values[:, t].float(), next_value)
        next_adv = torch.where(m > 0, a, next_adv)
    returns = (adv + values.float()) * mask
    return adv, returns


def _group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    uniq, inv = torch.unique(group_ids, return_inverse=True)
    return uniq, inv


def singleton_groups(group_ids: torch.Tensor) -> int:
    """Number of groups with a single trajectory (no group baseline; GRPO and RLOO give them advantage 0)."""
    _, counts = torch.unique(group_ids, return_counts=True)
    return int((counts < 2).sum().item())


def grpo_advantages(returns: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """A_i = (R_i − mean_g R) / (std_g R + eps) within each group g (unbiased std, as TRL's GRPOTrainer).

    A group whose returns are all equal gets advantage 0 (it carries no learning signal), and so does a group left
    with one trajectory (e.g. its other episodes failed in the environment): without a second member there is no
    baseline. Count those with `singleton_groups` and log them; config validation refuses group_size < 2.

    Args:
        returns: (N,) float32 trajectory returns.  group_ids: (N,) int64.
    Returns: (N,) float32.
    """
    _, inv = _group_index(group_ids)
    adv = torch.zeros_like(returns, dtype=torch.float32)
    for g in inv.unique():
        idx = (inv == g).nonzero(as_tuple=True)[0]
        if len(idx) < 2:
            continue  # no baseline: advantage 0 (counted by singleton_groups)
        r = returns[idx].float()
        std = r.std()
        adv[idx] = 0.0 if std.item() == 0 else (r - r.mean()) / (std + eps)
    return adv


def rloo_advantages(returns: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """A_i = R_i − (1/(G−1)) Σ_{j≠i} R_j within each group (REINFORCE leave-one-out; Ahmadian et al. 2024, eq. 5).

    A group with one trajectory has no leave-one-out baseline and gets advantage 0 (see grpo_advantages).
    Args / Returns: as grpo_advantages.
    """
    _, inv = _group_index(group_ids)
    adv = torch.zeros_like(returns, dtype=torch.float32)
    for g in inv.unique():
        idx = (inv == g).nonzero(as_tuple=True)[0]
        n = len(idx)
        if n < 2:
            continue  # no baseline: advantage 0 (counted by singleton_groups)
        r = returns[idx].float()
        adv[idx] = r - (r.sum() - r) / (n - 1)
    return adv


def broadcast_to_tokens(traj_adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N,) trajectory advantages → (N, T) on policy tokens (mask 1), 0 elsewhere."""
    return traj_adv[:, None].float() * mask.float()


def top_std_groups(returns: torch.Tensor, group_ids: torch.Tensor, keep_frac: float) -> torch.Tensor:
    """StarPO-S filter: keep the groups whose within-group return std is among the top `keep_frac` (RAGEN §4.2).

    The number of kept groups is keep_frac × n_groups rounded half up (at least 1); ties are broken by order.
    Returns: (N,) bool, True for trajectories of kept groups.
    """
    if keep_frac >= 1.0:
        return torch.ones_like(returns, dtype=torch.bool)
    uniq, inv = _group_index(group_ids)
    stds = torch.stack([returns[inv == g].float().std(unbiased=False) for g in range(len(uniq))])
    n_keep = max(1, math.floor(keep_frac * len(uniq) + 0.5))  # round half up (Python's round() rounds 0.5 to even)
    kept = torch.argsort(stds, descending=True, stable=True)[:n_keep]
    return torch.isin(inv, kept)


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x − mean) / std over the masked entries; 0 where mask is 0."""
    m = mask.float()
    n = m.sum().clamp(min=1)
    mean = (x * m).sum() / n
    var = (((x - mean) ** 2) * m).sum() / n
    return (x - mean) / torch.sqrt(var + eps) * m


# ---------------------------------------------------------------------------------------------- the registry
@dataclass
class AdvantageInputs:
    """What an estimator sees of one step's kept trajectories (B of them, right-padded to T tokens).

    token_rewards: (B, T) float32, each turn's reward on its last policy token (rewards.place_on_tokens), 0 elsewhere.
    mask: (B, T) float32, 1 on policy tokens (the tokens that train).
    returns: (B,) float32, trajectory returns R_i = Σ turn rewards (on the CPU).
    group_ids: (B,) int64, the group (game) of each trajectory (on the CPU).
    turn_end: (B, T) float32, 1 on each turn's last policy token.
    values: (B, T) float32 V_old(s_t) of the critic on policy tokens, or None when the estimator needs no critic.
    """

    token_rewards: torch.Tensor
    mask: torch.Tensor
    returns: torch.Tensor
    group_ids: torch.Tensor
    turn_end: torch.Tensor
    values: torch.Tensor | None = None


class Estimator(Protocol):
    """An advantage estimator (see the module docstring)."""

    name: str
    needs_critic: bool
    min_group_size: int

    def __call__(self, inputs: AdvantageInputs, algo: "AlgoConfig") -> tuple[torch.Tensor, torch.Tensor | None]:
        ...


@dataclass
class GAEEstimator:
    """PPO's estimator: token-level GAE with the critic (`gae`, turn-level γ = algo.gamma, token-level γ =
    algo.gamma_token, λ = algo.lam), whitened over the batch's policy tokens when algo.normalize_advantages.
    Returns (advantages, value targets = GAE returns)."""

    name: str = "gae"
    needs_critic: bool = True
    min_group_size: int = 1

    def __call__(self, inputs: AdvantageInputs, algo: "AlgoConfig") -> tuple[torch.Tensor, torch.Tensor]:
        adv, ret = gae(inputs.token_rewards, inputs.values, inputs.mask, algo.gamma, algo.lam,
                       turn_end=inputs.turn_end, gamma_token=algo.gamma_token)
        if algo.normalize_advantages:
            adv = whiten(adv, inputs.mask)
        return adv, ret


@dataclass
class GRPOEstimator:
    """GRPO: `grpo_advantages` of the trajectory returns (ε = algo.grpo_std_eps) on every policy token; no critic."""

    name: str = "grpo"
    needs_critic: bool = False
    min_group_size: int = 2

    def __call__(self, inputs: AdvantageInputs, algo: "AlgoConfig") -> tuple[torch.Tensor, None]:
        traj_adv = grpo_advantages(inputs.returns, inputs.group_ids, algo.grpo_std_eps)
        return broadcast_to_tokens(traj_adv.to(inputs.mask.device), inputs.mask), None


@dataclass
class RLOOEstimator:
    """RLOO: `rloo_advantages` of the trajectory returns on every policy token; no critic."""

    name: str = "rloo"
    needs_critic: bool = False
    min_group_size: int = 2

    def __call__(self, inputs: AdvantageInputs, algo: "AlgoConfig") -> tuple[torch.Tensor, None]:
        traj_adv = rloo_advantages(inputs.returns, inputs.group_ids)
        return broadcast_to_tokens(traj_adv.to(inputs.mask.device), inputs.mask), None


ESTIMATORS: dict[str, Estimator] = {}
"""Advantage estimators by name: the values algo.advantage accepts."""


def register_estimator(estimator: Estimator, replace: bool = False) -> Estimator:
    """Add `estimator` to ESTIMATORS under estimator.name and return it.

    Raises:
        ValueError: the name is taken (pass replace=True to swap an estimator), or min_group_size < 1.
    """
    if estimator.name in ESTIMATORS and not replace:
        raise ValueError(f"an advantage estimator named {estimator.name!r} exists; pass replace=True to replace it")
    if estimator.min_group_size < 1:
        raise ValueError(f"min_group_size must be >= 1 (got {estimator.min_group_size})")
    ESTIMATORS[estimator.name] = estimator
    return estimator


for _est in (GAEEstimator(), GRPOEstimator(), RLOOEstimator()):
    register_estimator(_est)
del _est
