"""The registered parts a run config names, looked up where a run needs them: the reward kind
(rewards.REWARD_KINDS), the advantage estimator (advantages.ESTIMATORS), the policy loss (losses.POLICY_LOSSES), the
generation backend (generation.GENERATORS) and the alert kinds that stop it (diagnostics.KINDS).

The config checks what it can see alone (types, ranges, the closed sets typed as Literal in config_values); a registry
name is checked where it is looked up, as verl's `get_adv_estimator_fn` does, so the config imports no registry and a
kind, estimator, loss or backend registered after a config was built is found. The Trainer calls `run_parts` before
it takes a lock, opens an env pool or loads a model, `agentrl train` before its other early checks, and a sweep for
every cell before its first run (sweep.cell_config): a misspelt name in a config file costs nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .advantages import Estimator, get_estimator
from .config import RunConfig
from .diagnostics import stopping_kinds
from .generation import get_generator
from .losses import PolicyLoss, get_policy_loss
from .rewards import get_reward


@dataclass(frozen=True)
class RunParts:
    """What a RunConfig's registry names resolve to."""

    reward: Callable[[list[float], float, bool], list[float]]
    """rewards.get_reward(reward.kind, the games' EnvFamily.reward_kinds): fn(increments, max_score, won) -> each
    turn's outcome reward."""

    estimator: Estimator
    """advantages.ESTIMATORS[algo.advantage], whose min_group_size algo.group_size meets."""
    policy_loss: PolicyLoss
    """losses.POLICY_LOSSES[algo.loss_mode]: fn(ratio, advantages, algo) -> (per-token objective, flags)."""
    generator: Callable[[Any, Any], Any]
    """generation.GENERATORS[model.generator]: built as generator(model, tokenizer)."""
    stop_kinds: frozenset[str]
    """The alert kinds that stop the run (empty unless train.stop_on_collapse)."""


def run_parts(config: RunConfig, family: Any = None) -> RunParts:
    """Look up every registry name of `config`; reward.kind among the kinds of `family` too (the games'
    EnvFamily, whose reward_kinds and check_reward say which kinds its games take; default: the family of
    config.env.games when its manifest loads, else none, so only rewards.REWARD_KINDS).

    Raises: ConfigError naming the field, its value and the registered names (rewards.get_reward,
    EnvFamily.check_reward, advantages.get_estimator, losses.get_policy_loss, generation.get_generator,
    diagnostics.stopping_kinds)."""
    family = family or games_family(config.env.games)
    if family is not None:
        family.check_reward(config.reward.kind)  # e.g. swe refuses dense, and takes only its own kinds
    return RunParts(reward=get_reward(config.reward.kind, family.reward_kinds if family is not None else ()),
                    estimator=get_estimator(config.algo.advantage, config.algo.group_size),
                    policy_loss=get_policy_loss(config.algo.loss_mode),
                    generator=get_generator(config.model.generator),
                    stop_kinds=stopping_kinds(config.train.stop_on_collapse, config.train.stop_kinds))


def games_family(games: str):
    """The EnvFamily of the game set in `games` (its manifest.json), or None when `games` is empty or does not load
    (the run's own checks of the games say why, in their place)."""
    from .envs import get_family
    from .envs.base import load_game_set

    if not games:
        return None
    try:
        return get_family(load_game_set(games).family)
    except (ValueError, OSError):  # GameSetError and UnknownFamilyError are ValueErrors
        return None
