"""Advantage estimators: pure tensor functions, and the ESTIMATORS registry the trainer picks from by name.

| estimator      | preset       | advantage per                | baseline                        | source             |
|----------------|--------------|------------------------------|---------------------------------|--------------------|
| `gae`          | ppo          | token (γ per turn, γ_tok in) | critic V(s_t) at every token    | GAE; Practitioner  |
| `turn_gae`     | turn_ppo     | turn (A_k on all its tokens) | critic V at each turn's end     | ArCHer; RAGEN      |
| `bilevel_gae`  | bilevel_ppo  | turn across, token within    | critic V at turn ends, tokens   | RAGEN bi-level GAE |
| `grpo`         | grpo         | episode                      | group mean, ÷ group std         | DeepSeekMath eq. 3 |
| `dr_grpo`      | dr_grpo      | episode                      | group mean (no std)             | Dr. GRPO §3.1      |
| `rloo`         | rloo         | episode                      | mean of the others in the group | RLOO eq. 5         |
| `reinforce_pp` | reinforce_pp | token (reward-to-go)         | batch mean, ÷ batch std         | REINFORCE++ §3     |
| `gigpo`        | gigpo        | episode + turn               | group mean + same-state mean    | GiGPO eq. 3-7      |

A critic (needs_critic) exists for the three GAE estimators only. Sources: Schulman et al. 2016 (GAE); "A
Practitioner's Guide to Multi-turn Agentic RL" §4.3; Zhou et al. 2024 (ArCHer); Wang et al. 2025 (RAGEN); Shao et al.
2024 (DeepSeekMath); Liu et al. 2025 ("Understanding R1-Zero-Like Training", Dr. GRPO); Ahmadian et al. 2024 ("Back
to Basics", RLOO); Hu 2025 (REINFORCE++); Feng et al. 2025 ("Group-in-Group Policy Optimization for LLM Agent
Training", GiGPO).

StarPO-S (preset `starpo_s`, RAGEN §4.2) is `gae` plus the group filter `top_std_groups` (keep_top_std 0.25),
decoupled clip 0.2 / 0.28, no KL, entropy bonus 0.001. Dr. GRPO's second half (no per-response 1/|o_i|) is a loss
matter: losses.policy_loss averages over the policy tokens of the whole minibatch (token mean, as DAPO), which never
divides by a single response's length; algo.loss_agg = "seq_mean_token_sum_norm" divides the token sum by a constant
instead, as the Dr. GRPO paper does (see losses.policy_loss).

Per-turn-index baselines and episode length. A baseline indexed by turn number, b_k = the mean return-to-go at turn
k over the group's episodes that reached turn k, compares turn k of one episode with turn k of the others, whatever
state each is in. Estimated from the group with the episode itself in it, turn k's advantage is
(1 − 1/n_k)·(G_{i,k} − mean of the others' G_{j,k}), where n_k, the number of episodes that lasted to turn k, is set
by the policy: the expected update of a turn few episodes reach is shrunk (to 0 where an episode is alone) while
turn 1 keeps (1 − 1/G). That changes the direction of the update, not only its size, and the distortion moves as the
policy makes episodes shorter or longer (a policy that mostly ends at turn 1 hardly learns its turn-2 decisions).
No estimator here uses such a baseline. Episode-level baselines avoid it (`grpo`, `dr_grpo`, `rloo`: whole episodes
from the same start state, one factor for every turn: exactly (1 − 1/G) for dr_grpo, 1 for rloo; `reinforce_pp`: one
batch-wide constant), and so does a critic, which conditions on the state and never contains the episode's own return
(`gae`, `turn_gae`, `bilevel_gae`). GiGPO's step groups condition on the state (actions compared in the same
observation, whatever their turn index), but a state few episodes visit has the same self-inclusion shrink on its
step term; its episode-level term keeps the full credit. tests/test_advantages.py computes the exact expected update
of each by enumerating every group of G episodes on a two-turn game.

The registry: `ESTIMATORS[name]` is an object with `name`, `needs_critic` (the trainer builds a value head and logs
explained variance iff True), `min_group_size` (config validation refuses a smaller algo.group_size) and
`__call__(inputs: AdvantageInputs, algo: AlgoConfig) -> (advantages (B, T) float32, value_targets (B, T) | None)`.
`algo.advantage` names the key. This module follows the table: each estimator's function, then its entry (a function
registered by `@estimator`); their inputs and shared helpers are in advantage_base.py, re-exported here. Add one from
any file (or register an object with those attributes: book/extending.md), then train with `AlgoConfig(advantage=...)`:

    @estimator("reinforce")                      # A_i = R_i on every policy token, no baseline, no critic
    def reinforce(inputs, algo):
        return broadcast_to_tokens(inputs.returns.to(inputs.mask.device), inputs.mask), None

Introduced in notebooks/00_quickstart.md §4.
"""
from __future__ import annotations

import math

import torch

from .advantage_base import (
    AdvantageInputs,
    AlgoFields,
    Estimator,
    FunctionEstimator,
    broadcast_to_tokens,
    group_advantages,
    singleton_groups,
    turn_slices,
    turns_to_tokens,
    whiten,
)
from .config_values import ConfigError

__all__ = [  # with the names re-exported from advantage_base.py
    "ESTIMATORS", "AdvantageInputs", "AlgoFields", "Estimator", "FunctionEstimator", "bilevel_gae",
    "broadcast_to_tokens", "discounted_turn_returns", "dr_grpo_advantages", "estimator", "gae", "get_estimator",
    "gigpo_advantages", "group_advantages", "grpo_advantages", "register_estimator", "reward_to_go", "rloo_advantages",
    "singleton_groups", "top_std_groups", "turn_gae", "turn_slices", "turns_to_tokens", "whiten",
]


# -------------------------------------------------------------------------------------------------- the registry
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


def get_estimator(name: str, group_size: int | None = None) -> Estimator:
    """ESTIMATORS[name], checked where it is looked up (verl's get_adv_estimator_fn): the config does not import this
    registry, so an estimator registered after the config was built is found. With `group_size` (algo.group_size),
    also checks the estimator's min_group_size.

    Raises:
        ConfigError: `name` is not registered (the message lists the registered names and how to add one), or
            group_size < min_group_size (a group baseline of one episode is its own return: every advantage 0).
    """
    if name not in ESTIMATORS:
        raise ConfigError(f"algo.advantage must be one of {sorted(ESTIMATORS)} (got {name!r}); register a new one "
                          "with advantages.register_estimator")
    est = ESTIMATORS[name]
    if group_size is not None and group_size < est.min_group_size:
        raise ConfigError(
            f"algo.advantage {name!r} needs algo.group_size >= {est.min_group_size} (got {group_size}): with one "
            "episode per game the group baseline equals the episode's own return and every advantage is 0. Use "
            "--group-size 4.")
    return est


def estimator(name: str, needs_critic: bool = False, min_group_size: int = 1):
    """Decorator: register the function below, `fn(inputs, algo)` (see Estimator), as ESTIMATORS[name] (a
    FunctionEstimator); the function itself is returned unchanged."""
    def register(fn):
        register_estimator(FunctionEstimator(name, needs_critic, min_group_size, fn))
        return fn

    return register


# ----------------------------------------------------------------------------------------------------------- gae
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


@estimator("gae", needs_critic=True)
def gae_estimator(inputs: AdvantageInputs, algo: AlgoFields) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's estimator: token-level GAE with the critic (`gae`, turn-level γ = algo.gamma, token-level γ =
    algo.gamma_token, λ = algo.lam), whitened over the batch's policy tokens when algo.normalize_advantages.
    Returns (advantages, value targets = GAE returns)."""
    adv, ret = gae(inputs.token_rewards, inputs.values, inputs.mask, algo.gamma, algo.lam,
                   turn_end=inputs.turn_end, gamma_token=algo.gamma_token)
    if algo.normalize_advantages:
        adv = whiten(adv, inputs.mask)
    return adv, ret


# ------------------------------------------------------------------------------------------------------ turn_gae
def turn_gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, turn_end: torch.Tensor,
             gamma: float = 1.0, lam: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn-level GAE: one value per turn, read at the turn's end token; every token of turn k gets A_k.

        V_k = V(s at turn k's end token),   δ_k = r_k + γ V_{k+1} − V_k,   A_k = Σ_j (γλ)^j δ_{k+j},   V_K = 0
        value target of turn k: G_k = A_k + V_k (the λ-return), on every policy token of turn k

    The MDP is the one of the environment (one step per turn), as in the turn-level critics of ArCHer (Zhou et al.
    2024) and RAGEN's turn-level option (Wang et al. 2025, §B of ../shared/REFERENCE.md); a reply's length changes
    neither its credit nor its discount. The value loss trains every policy token of turn k towards G_k (broadcast,
    not only the end token): with rewards only at turn ends, the expected return from any prefix of the reply is the
    turn's, so the target is as right for the reply's tokens as for its end, and the critic's loss keeps the same
    token mask as every other loss term.

    Args:
        rewards: (B, T) float32, turn rewards on turn-end tokens (0 elsewhere).
        values: (B, T) float32, V on policy tokens (only turn-end tokens are read).
        mask: (B, T) 0/1, 1 on policy tokens.
        turn_end: (B, T) 0/1, 1 on each turn's last policy token (rollout.collate's turn_end).
        gamma: discount between turns, in [0, 1].  lam: GAE λ over turns, in [0, 1].
    Returns:
        (advantages, returns): (B, T) float32 each; A_k and G_k on every policy token of turn k, 0 where mask is 0.
    """
    adv = torch.zeros_like(rewards, dtype=torch.float32)
    ret = torch.zeros_like(rewards, dtype=torch.float32)
    for b, turns in enumerate(turn_slices(mask, turn_end)):
        next_v, next_a = 0.0, 0.0
        for end, toks in reversed(turns):
            v = float(values[b, end])
            a = float(rewards[b, end]) + gamma * next_v - v + gamma * lam * next_a
            adv[b, toks], ret[b, toks] = a, a + v
            next_v, next_a = v, a
    return adv, ret


@estimator("turn_gae", needs_critic=True)
def turn_gae_estimator(inputs: AdvantageInputs, algo: AlgoFields) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn-level PPO: `turn_gae` with the critic (γ = algo.gamma between turns, λ = algo.lam), whitened over the
    batch's policy tokens when algo.normalize_advantages. Value targets: each turn's λ-return on all its tokens."""
    adv, ret = turn_gae(inputs.token_rewards, inputs.values, inputs.mask, inputs.turn_end, algo.gamma, algo.lam)
    return (whiten(adv, inputs.mask) if algo.normalize_advantages else adv), ret


# --------------------------------------------------------------------------------------------------- bilevel_gae
def bilevel_gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, turn_end: torch.Tensor,
                gamma: float = 1.0, lam: float = 1.0, gamma_token: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Bi-level GAE (RAGEN's option, Wang et al. 2025; the hierarchical scheme of ArCHer, Zhou et al. 2024):
    turn-level GAE across turns, then token-level GAE within each turn towards the turn's λ-return.

        across turns (`turn_gae`):  G_k = A_k + V_{end(k)},  A_k = Σ_j (γλ)^j δ_{k+j},
                                    δ_k = r_k + γ V_{end(k+1)} − V_{end(k)}
        within turn k (γ_tok = gamma_token, the turn's end token is terminal with reward G_k):
            δ_t = γ_tok V_{t+1} − V_t,    δ_{end(k)} = G_k − V_{end(k)} = A_k,    A_t = δ_t + γ_tok λ A_{t+1}
        value targets: A_t + V_t on every policy token

    Turn boundaries come from `turn_end` (the trajectory's own turn ends). RAGEN's code takes them from the tokens with
    a non-zero reward, which merges a turn that earned 0 into the next one (tests/test_known_bugs.py plants it).

    Identity: with λ = 1 and γ_tok = 1 this equals `gae(..., turn_end=turn_end, gamma_token=1)` for any γ (both are
    then the discounted return from the token's turn on, minus V_t); for λ < 1 they differ (token-level GAE
    bootstraps a turn's end from the next turn's first token, bi-level from the next turn's end).

    Args:
        rewards, values, mask, turn_end: as `turn_gae`.  gamma: discount between turns.  lam: λ at both levels.
        gamma_token: discount between tokens of one reply (RAGEN: 1.0).
    Returns:
        (advantages, returns): (B, T) float32 each, 0 where mask is 0.
    """
    turn_adv, turn_ret = turn_gae(rewards, values, mask, turn_end, gamma, lam)
    mask = mask.float()
    B, T = rewards.shape
    adv = torch.zeros_like(rewards, dtype=torch.float32)
    next_value = torch.zeros(B, dtype=torch.float32, device=rewards.device)
    next_adv = torch.zeros(B, dtype=torch.float32, device=rewards.device)
    for t in reversed(range(T)):
        m = mask[:, t]
        inner = gamma_token * next_value - values[:, t] + gamma_token * lam * next_adv
        a = torch.where(turn_end[:, t] > 0, turn_ret[:, t] - values[:, t], inner)
        adv[:, t] = a * m
        next_value = torch.where(m > 0, values[:, t].float(), next_value)
        next_adv = torch.where(m > 0, a, next_adv)
    return adv, (adv + values.float()) * mask


@estimator("bilevel_gae", needs_critic=True)
def bilevel_gae_estimator(inputs: AdvantageInputs, algo: AlgoFields) -> tuple[torch.Tensor, torch.Tensor]:
    """Bi-level PPO (RAGEN): `bilevel_gae` with the critic (γ = algo.gamma across turns, algo.gamma_token within a
    reply, λ = algo.lam at both levels), whitened when algo.normalize_advantages. Value targets: A_t + V_t."""
    adv, ret = bilevel_gae(inputs.token_rewards, inputs.values, inputs.mask, inputs.turn_end, algo.gamma, algo.lam,
                           algo.gamma_token)
    return (whiten(adv, inputs.mask) if algo.normalize_advantages else adv), ret


# ---------------------------------------------------------------------------------------------------------- grpo
def grpo_advantages(returns: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """A_i = (R_i − mean_g R) / (std_g R + eps) within each group g (unbiased std, as TRL's GRPOTrainer).

    A group whose returns are all equal gets advantage 0 (it carries no learning signal), and so does a group left
    with one trajectory (e.g. its other episodes failed in the environment): without a second member there is no
    baseline. Count those with `singleton_groups` and log them; config validation refuses group_size < 2.

    Args:
        returns: (N,) float32 trajectory returns.  group_ids: (N,) int64.
    Returns: (N,) float32.
    """
    def z_score(r: torch.Tensor) -> torch.Tensor:
        std = r.std()
        return torch.zeros_like(r) if std.item() == 0 else (r - r.mean()) / (std + eps)

    return group_advantages(returns, group_ids, z_score)


@estimator("grpo", min_group_size=2)
def grpo_estimator(inputs: AdvantageInputs, algo: AlgoFields) -> tuple[torch.Tensor, None]:
    """GRPO: `grpo_advantages` of the trajectory returns (ε = algo.grpo_std_eps) on every policy token; no critic."""
    traj_adv = grpo_advantages(inputs.returns, inputs.group_ids, algo.grpo_std_eps)
    return broadcast_to_tokens(traj_adv.to(inputs.mask.device), inputs.mask), None


# ------------------------------------------------------------------------------------------------------- dr_grpo
def dr_grpo_advantages(returns: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO: A_i = R_i − mean_g R, the group mean as baseline without dividing by the group's std (Liu et al.
    2025, "Understanding R1-Zero-Like Training: A Critical Perspective", §3.1 eq. 2-3): the std division weights
    groups with a small spread (nearly all solved or all failed) up, a difficulty bias. A group with one trajectory
    gets 0 (no baseline; see grpo_advantages).

    Args / Returns: as grpo_advantages.
    """
    return group_advantages(returns, group_ids, lambda r: r - r.mean())


@estimator("dr_grpo", min_group_size=2)
def dr_grpo_estimator(inputs: AdvantageInputs, algo: AlgoFields) -> tuple[torch.Tensor, None]:
    """Dr. GRPO: `dr_grpo_advantages` (R − group mean, no std) of the trajectory returns on every policy token; no
    critic. Its other half, no 1/|o_i| length normalisation, is the loss's aggregation (algo.loss_agg)."""
    traj_adv = dr_grpo_advantages(inputs.returns, inputs.group_ids)
    return broadcast_to_tokens(traj_adv.to(inputs.mask.device), inputs.mask), None


# ---------------------------------------------------------------------------------------------------------- rloo
def rloo_advantages(returns: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """A_i = R_i − (1/(G−1)) Σ_{j≠i} R_j within each group (REINFORCE leave-one-out; Ahmadian et al. 2024, eq. 5).

    A group with one trajectory has no leave-one-out baseline and gets advantage 0 (see grpo_advantages).
    Args / Returns: as grpo_advantages.
    """
    return group_advantages(returns, group_ids, lambda r: r - (r.sum() - r) / (len(r) - 1))


@estimator("rloo", min_group_size=2)
def rloo_estimator(inputs: AdvantageInputs, algo: AlgoFields) -> tuple[torch.Tensor, None]:
    """RLOO: `rloo_advantages` of the trajectory returns on every policy token; no critic."""
    traj_adv = rloo_advantages(inputs.returns, inputs.group_ids)
    return broadcast_to_tokens(traj_adv.to(inputs.mask.device), inputs.mask), None


# -------------------------------------------------------------------------------------------------- reinforce_pp
def reward_to_go(rewards: torch.Tensor, mask: torch.Tensor, turn_end: torch.Tensor,
                 gamma: float = 1.0) -> torch.Tensor:
    """Token-level reward-to-go with the discount between turns: G_t = Σ_{k ≥ turn(t)} γ^{k − turn(t)} r_k.

    Rewards sit on turn-end tokens; the running return passes unchanged through tokens with mask 0 (the observation
    and template tokens between turns), so an early turn keeps the credit of later turns. verl's
    compute_reinforce_plus_plus_outcome_advantage multiplied the running return by the response mask ("reset after
    EOS"), which zeroes it at every observation span of a multi-turn sequence (tests/test_known_bugs.py plants it).

    Args:
        rewards: (B, T) float32 on turn-end tokens.  mask, turn_end: (B, T) 0/1.  gamma: discount between turns.
    Returns: (B, T) float32, 0 where mask is 0.
    """
    out = torch.zeros_like(rewards, dtype=torch.float32)
    running = torch.zeros(rewards.shape[0], dtype=torch.float32, device=rewards.device)
    for t in reversed(range(rewards.shape[1])):
        g = torch.where(turn_end[:, t] > 0, gamma, 1.0)  # γ once per turn boundary, 1 inside a reply and between
        running = rewards[:, t] + g * running
        out[:, t] = running * mask[:, t].float()
    return out


@estimator("reinforce_pp")
def reinforce_pp_estimator(inputs: AdvantageInputs, algo: AlgoFields) -> tuple[torch.Tensor, None]:
    """REINFORCE++ (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models", §3):
    the token-level reward-to-go (`reward_to_go`, γ = algo.gamma between turns) whitened over all policy tokens of
    the batch (global batch normalisation, no group baseline, no critic):

        A_t = (G_t − mean_batch G) / std_batch G

    REINFORCE++ puts its KL penalty into the per-token reward; here the KL to the reference is the loss's k3 term
    (algo.kl_coef), as for every estimator."""
    g = reward_to_go(inputs.token_rewards, inputs.mask, inputs.turn_end, algo.gamma)
    return whiten(g, inputs.mask), None


# --------------------------------------------------------------------------------------------------------- gigpo
def discounted_turn_returns(turn_rewards: list[float], gamma: float = 1.0) -> list[float]:
    """[r_0, …, r_{K−1}] → [G_0, …, G_{K−1}], G_k = Σ_{j ≥ k} γ^{j−k} r_j (the return from turn k on)."""
    out, g = [0.0] * len(turn_rewards), 0.0
    for k in reversed(range(len(turn_rewards))):
        g = turn_rewards[k] + gamma * g
        out[k] = g
    return out


def gigpo_advantages(returns: torch.Tensor, group_ids: torch.Tensor, turn_obs: list[list[str]],
                     turn_rewards: list[list[float]], gamma: float = 1.0, step_weight: float = 1.0,
                     eps: float = 1e-6) -> tuple[torch.Tensor, list[list[float]]]:
    """GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training", §3, eq. 3-7): an
    episode-level group advantage plus a step-level one over anchor states.

        episode level:  A^E_i = (R_i − mean_g R) / (std_g R + ε)                      (GRPO within the episode group g)
        anchor states:  turns of the group's trajectories taken in an identical observation o form a step group
                        S(g, o) = {(i, k) : group(i) = g, turn_obs[i][k] = o}
        step level:     G_{i,k} = Σ_{j ≥ k} γ^{j−k} r_{i,j},   A^S_{i,k} = (G_{i,k} − mean_S G) / (std_S G + ε)
        A_{i,k} = A^E_i + ω · A^S_{i,k}                       (ω = step_weight; the paper and verl-agent use 1)

    Normalisation by the std at both levels (verl-agent's mode "mean_std_norm"; its "mean_norm" drops the std as
    Dr. GRPO does). Identical observation text stands for identical state: exact for the rendered grids of RAGEN's
    environments; in TextWorld a reply such as "You can't go that way." recurs in different rooms and pools their
    turns (verl-agent offers similarity grouping for the opposite problem, near-identical states; not done here).
    A step group of one turn (a state no other trajectory of the group met) gets A^S = 0, as does an episode group of
    one trajectory (no baseline).

    Args:
        returns: (N,) float32 episode returns.  group_ids: (N,) int64.
        turn_obs: per trajectory, per turn, the observation the turn's action answered (Trajectory.observations[k]).
        turn_rewards: per trajectory, per turn, the turn's reward.
        gamma: discount between turns (the paper uses 0.95).  step_weight: ω.  eps: ε of both normalisations.
    Returns:
        (episode advantages (N,) float32, per-trajectory per-turn A_{i,k} as lists of floats).
    Raises: ValueError if turn_obs and turn_rewards do not have one entry per turn of each trajectory.
    """
    if len(turn_obs) != len(returns) or any(len(o) != len(r) for o, r in zip(turn_obs, turn_rewards)):
        raise ValueError("gigpo needs one observation and one reward per turn of each trajectory (turn_obs, "
                         "turn_rewards); the trainer fills them from Trajectory.observations and the turn rewards")
    ep_adv = grpo_advantages(returns, group_ids, eps)
    keys: dict[tuple[int, str], int] = {}
    step_ids, step_ret, where = [], [], []
    for i, (obs, rew) in enumerate(zip(turn_obs, turn_rewards)):
        for k, (o, g) in enumerate(zip(obs, discounted_turn_returns(rew, gamma))):
            step_ids.append(keys.setdefault((int(group_ids[i]), o), len(keys)))
            step_ret.append(g)
            where.append((i, k))
    step_adv = grpo_advantages(torch.tensor(step_ret, dtype=torch.float32), torch.tensor(step_ids), eps) \
        if step_ret else torch.zeros(0)
    per_turn = [[float(ep_adv[i])] * len(r) for i, r in enumerate(turn_rewards)]
    for (i, k), a in zip(where, step_adv.tolist()):
        per_turn[i][k] += step_weight * a
    return ep_adv, per_turn


@estimator("gigpo", min_group_size=2)
def gigpo_estimator(inputs: AdvantageInputs, algo: AlgoFields) -> tuple[torch.Tensor, None]:
    """GiGPO: `gigpo_advantages` (episode-level group advantage + algo.gigpo_step_weight × step-level advantage over
    identical observations, γ = algo.gamma, ε = algo.grpo_std_eps), each turn's value on every token of the turn; no
    critic. Needs inputs.turn_obs and inputs.turn_rewards (the trainer fills them)."""
    if inputs.turn_obs is None or inputs.turn_rewards is None:
        raise ValueError("gigpo needs AdvantageInputs.turn_obs and turn_rewards (per-turn observations and "
                         "rewards)")
    _, per_turn = gigpo_advantages(inputs.returns, inputs.group_ids, inputs.turn_obs, inputs.turn_rewards,
                                   algo.gamma, getattr(algo, "gigpo_step_weight", 1.0), algo.grpo_std_eps)
    return turns_to_tokens(per_turn, inputs.mask, inputs.turn_end), None


# ------------------------------------------------------------------------------------- the StarPO-S group filter
def _group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.unique(group_ids, return_inverse=True)


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
