"""Turn-level rewards: sparse or dense, a format penalty for invalid actions, and their placement on the token
that ends each turn.

Introduced in notebooks/00_quickstart.ipynb.
"""
from __future__ import annotations

import torch


def sparse_turn_rewards(n_turns: int, won: bool) -> list[float]:
    """1.0 on the final turn of a won episode, 0 everywhere else (Practitioner's Guide §4.2, "sparse")."""
    rewards = [0.0] * n_turns
    if n_turns and won:
        rewards[-1] = 1.0
    return rewards


def dense_turn_rewards(increments: list[float], max_score: float, won: bool) -> list[float]:
    """Each turn's score increment, scaled so that a won episode totals exactly 1 and any other episode totals
    strictly less.

        r_k = Δscore_k / max_score                                   (every episode, the same scale)
        won:      r_last += 1 - Σ_k r_k                              (total exactly 1)
        not won:  if Σ_k r_k > 1 - 1/(2·max_score), rescale all r_k so the total is 1 - 1/(2·max_score)

    The reference code (Practitioner's Guide repo) divides by the number of positive increments only for won games,
    so a lost game with many small increments can out-score a won one; a common scale avoids that, and the cap keeps
    a non-won episode strictly below every won one (a won episode scores 1).

    Args:
        increments: per-turn score increments in game points (may be negative).
        max_score: the game's maximum score (> 0).
    Raises:
        ValueError: max_score <= 0.
    """
    if max_score <= 0:
        raise ValueError(f"max_score must be > 0 (got {max_score})")
    rewards = [d / max_score for d in increments]
    if not rewards:
        return rewards
    total = sum(rewards)
    if won:
        rewards[-1] += 1.0 - total
    else:
        cap = 1.0 - 1.0 / (2.0 * max_score)
        if total > cap:
            rewards = [r * cap / total for r in rewards]
    return rewards


def turn_rewards(kind: str, increments: list[float], max_score: float, won: bool, valid: list[bool],
                 format_penalty: float = 0.0) -> list[float]:
    """Rewards of each turn: sparse or dense, minus `format_penalty` on each turn whose action was not admissible.

    The penalty comes on top of the outcome reward (RAGEN's −0.1 per invalid answer), so a won episode with many
    invalid turns can total less than a lost one with none; the outcome part alone keeps every win above every
    non-win. Set format_penalty=0 for that strict ordering of whole returns.

    Raises:
        ValueError: unknown kind, or len(valid) != len(increments).
    """
    if len(valid) != len(increments):
        raise ValueError(f"valid has {len(valid)} entries for {len(increments)} turns")
    if kind == "sparse":
        rewards = sparse_turn_rewards(len(increments), won)
    elif kind == "dense":
        rewards = dense_turn_rewards(increments, max_score, won)
    else:
        raise ValueError(f"unknown reward kind {kind!r}; use 'sparse' or 'dense'")
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
