"""Turn-level rewards: the reward kinds (REWARD_KINDS, the registry reward.kind names: sparse, dense or the
environment's own), a format penalty for invalid actions, and their placement on the token that ends each turn.

A new kind is a function `fn(increments, max_score, won) -> one float per turn` (the outcome part, before the format
penalty) and one line, `REWARD_KINDS["mine"] = fn` (book/extending.md); `--reward mine` is then valid. A family whose
env computes its reward itself names its kinds in EnvFamily.reward_kinds (swe: pass_ratio, resolved, relative):
`get_reward(kind, family.reward_kinds)` finds them, and the run's envs compute the kind it names.

Introduced in notebooks/00_quickstart.md §3.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from .config_values import ConfigError


def sparse_turn_rewards(n_turns: int, won: bool) -> list[float]:
    """1.0 on the final turn of a won episode, 0 everywhere else (Practitioner's Guide §4.2, "sparse")."""
    rewards = [0.0] * n_turns
    if n_turns and won:
        rewards[-1] = 1.0
    return rewards


def dense_turn_rewards(increments: list[float], max_score: float, won: bool) -> list[float]:
    """Each turn's score increment on one scale, so that a won episode totals exactly 1 and any other episode totals
    strictly less (before the format penalty, see turn_rewards).

        r_k = Δscore_k / max_score                                   (every episode, the same scale)
        won:      r_last += 1 − Σ_k r_k                              (total exactly 1)
        not won:  if Σ_k r_k > 1 − m/2, rescale all r_k so the total is 1 − m/2,
                  m = the smallest positive r_k of the episode       (half its smallest step below a win)

    The reference code (Practitioner's Guide repo) divides by the number of positive increments only for won games,
    so a lost game with many small increments can out-score a won one; a common scale avoids that, and the cap keeps
    a non-won episode that collected every point strictly below every won one. The cap depends only on the rewards'
    ratios, so it is the same for any unit of score (for integer points it is 1 − 1/(2·max_score)).

    Args:
        increments: per-turn score increments in game points (may be negative).
        max_score: the game's maximum score (> 0, any unit).
    Returns: list of floats, one per turn.
    Raises:
        ValueError: max_score <= 0 or not finite.
    """
    if not (max_score > 0 and math.isfinite(max_score)):
        raise ValueError(f"max_score must be a finite number > 0 (got {max_score})")
    rewards = [d / max_score for d in increments]
    if not rewards:
        return rewards
    total = sum(rewards)
    if won:
        rewards[-1] += 1.0 - total
    else:
        steps = [r for r in rewards if r > 0]
        cap = max(1.0 - min(steps) / 2.0, 0.0) if steps else 1.0
        if total > cap:  # total > cap >= 0, so no division by zero
            rewards = [r * cap / total for r in rewards]
    return rewards


def env_turn_rewards(increments: list[float], max_score: float, won: bool) -> list[float]:
    """The environment's own reward of each turn, as given (reward.kind 'env': RAGEN trains on these, e.g. bandit's
    random payout, Sokoban's −0.1 per move / ±1 / +10); unscaled, so a won episode need not out-score a lost one.
    `max_score` and `won` are unused."""
    return [float(d) for d in increments]


REWARD_KINDS: dict[str, Callable[[list[float], float, bool], list[float]]] = {
    "sparse": lambda increments, max_score, won: sparse_turn_rewards(len(increments), won),
    "dense": dense_turn_rewards,
    "env": env_turn_rewards,
}
"""reward.kind → fn(increments, max_score, won), the outcome reward of each turn of an episode (per-turn game score
increments, the game's max score, whether it was won) before the format penalty; looked up by get_reward."""


def get_reward(kind: str, env_kinds: tuple[str, ...] = ()) -> Callable[[list[float], float, bool], list[float]]:
    """REWARD_KINDS[kind], or, for a kind of `env_kinds` (the games' EnvFamily.reward_kinds, e.g. swe's pass_ratio),
    env_turn_rewards: the env computes that kind itself (it is built with reward=kind, EnvFamily.env_kwargs), so its
    rewards are taken as given. Checked where it is looked up (parts.run_parts, turn_rewards).

    Raises: ConfigError listing the kinds these games take and how to add one."""
    if kind in env_kinds:
        return env_turn_rewards
    if kind not in REWARD_KINDS:
        valid = sorted(REWARD_KINDS) + list(env_kinds)
        raise ConfigError(f"reward.kind must be one of {valid} (got {kind!r}); a family's own kinds "
                          "(EnvFamily.reward_kinds, e.g. swe's pass_ratio, resolved, relative) need that family's "
                          "games (env.games); register a new kind in rewards.REWARD_KINDS")
    return REWARD_KINDS[kind]


def turn_rewards(kind: str, increments: list[float], max_score: float, won: bool, valid: list[bool],
                 format_penalty: float = 0.0, env_kinds: tuple[str, ...] = ()) -> list[float]:
    """Rewards of each turn: get_reward(kind, env_kinds) (sparse, dense or the env's own: kind 'env' or one of the
    games' family's kinds `env_kinds`, `increments` as given), minus `format_penalty` on each turn whose action was
    not admissible.

    The penalty comes on top of the outcome reward (RAGEN's −0.1 per invalid answer), so a won episode with many
    invalid turns can total less than a non-won one with none: on a real cooking game (max score 3) a win in 3 valid
    moves after 4 invalid ones returns 1 − 0.4 = 0.60, below a non-won game at 2/3 of the score with no invalid move
    (0.67). What always holds is the ordering of the outcome part: every win totals 1, every non-win less. Set
    format_penalty=0 for that strict ordering of whole returns.

    Raises:
        ConfigError (a ValueError): unknown kind.  ValueError: len(valid) != len(increments).
    """
    if len(valid) != len(increments):
        raise ValueError(f"valid has {len(valid)} entries for {len(increments)} turns")
    rewards = get_reward(kind, env_kinds)(increments, max_score, won)
    return [r - (format_penalty if not ok else 0.0) for r, ok in zip(rewards, valid)]


def place_on_tokens(rewards: list[float], turn_ends: list[int], length: int) -> torch.Tensor:
    """Put each turn's reward on that turn's last policy token.

    Returns: (length,) float32, zero except at turn_ends[k] where it is rewards[k].
    Raises: ValueError if the lists differ in length or an index is out of range.
    """
    if len(rewards) != len(turn_ends):
        raise ValueError(f"{len(rewards)} rewards for {len(turn_ends)} turns")
    out = torch.zeros(length, dtype=torch.float32)
    for r, t in zip(rewards, turn_ends):
        if not 0 <= t < length:
            raise ValueError(f"turn end {t} outside a sequence of length {length}")
        out[t] += r
    return out
