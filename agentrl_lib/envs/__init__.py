"""The environment-family registry: what `agentrl` needs to know about each family of games, in one place.

A family is one `EnvFamily` entry: its env class (or factory), its game maker, the system prompt that teaches its
command language, the EnvConfig options its env takes, and what a game id is (a file/folder on disk, or a seed for
procedural games). Adding a family is one module that builds an EnvFamily plus one `register_family` call:

    from agentrl_lib.envs import EnvFamily, register_family

    register_family(EnvFamily(name="guess", make_env=GuessEnv, make_games=make_guess_games,
                              system_prompt="Guess the number. Reply with one number.", game_id="seed"))

The built-in families (BUILTIN: textworld, alfworld, RAGEN's bandit, bandit-reversed, frozenlake, sokoban, and swe)
register themselves when their module is imported, and `get_family` imports that module the first time the family is
asked for: importing this package (or `agentrl_lib.envs.base`) imports no family, and registering one imports no game
engine (textworld, alfworld, gymnasium are imported when an env is built or games are made).

Introduced in notebooks/00_quickstart.md §1.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from ..config_values import ConfigError  # imports nothing of agentrl_lib: no cycle
from .protocol import Env, GameSet  # imports nothing of agentrl_lib: base.py's game-set loader imports this package


@dataclass(frozen=True)
class EnvFamily:
    """One family of games: how to build its env, make its games and prompt a policy for it.

    `make_env` must be picklable (a module-level class or function): ProcessPool workers build their env with it.
    """

    name: str
    """Name in manifest.json's `family` field and on the command line (`agentrl make-games NAME`)."""
    make_env: Callable[..., Env]
    """Builds one env: `make_env(**options)`, options as mapped by `options` (the env class itself, usually)."""
    system_prompt: str
    """The system message of every episode of this family (SFT, rollouts and evaluation use the same one)."""
    make_games: Callable[..., GameSet] | None = None
    """Game maker: `make_games(out, n, seed, force=False, **params) -> GameSet` (writes out/manifest.json, see
    base.write_manifest); `agentrl make-games` passes the flags named as its keyword parameters. None: no maker."""
    options: dict[str, str] = field(default_factory=dict)
    """EnvConfig field → keyword of `make_env`, for the config options this family's env takes (e.g. TextWorld:
    {"show_inventory": "show_inventory"}); other EnvConfig fields are not passed to the env."""
    game_id: Literal["file", "seed"] = "file"
    """What a game id (GameRecord.path) is: "file", a file/folder stored relative to the games dir and checked to
    exist; "seed", an opaque id (e.g. "17") from which the env builds the game procedurally; no file on disk."""
    game_files: Callable[[str], list[Path]] | None = None
    """For "file" families: the files a game at this path needs (checked by check_game_set). Raises GameLoadError
    when the path has another family's shape."""
    preload: tuple[str, ...] = ()
    """Modules the ProcessPool's forkserver imports once so each worker forks with them loaded."""
    warm_up: Callable[[str], None] | None = None
    """Optional: parse caches for a game once in the forkserver, so workers start warm (TextWorld's game logic)."""
    reply_as_action: bool = False
    """The env receives the model's whole reply as its action and parses it itself (swe: the ```bash block),
    instead of `prompts.parse_reply`'s first line / RAGEN answer (env.action_format is then not applied)."""
    step_timeout_s: float = 0.0
    """The shortest watchdog per env call this family's steps need, seconds (0: none beyond EnvConfig.step_timeout_s).
    swe: 70 (a 30 s command, then an auto-submit's 30 s test run). A run's pool uses `watchdog_s`."""
    reward_kinds: tuple[str, ...] = ()
    """reward.kind values that name a reward this family's env computes itself, e.g. swe's pass_ratio, resolved and
    relative (SWE-Gym / SWE-smith's "resolved", the Practitioner's Guide's pass ratio). A run naming one builds its
    envs with `make_env(reward=KIND)` (env_kwargs) and trains on that reward as the env gives it
    (rewards.get_reward). A family with kinds of its own takes only those: `check_reward` refuses any other kind."""
    refused_rewards: dict[str, str] = field(default_factory=dict)
    """reward.kind values that training on this family's games refuses → why, and what to use instead (one line;
    `check_reward`). swe: dense, whose win cap inverts the order of pass ratios; sparse and env, which its own kinds
    name exactly."""

    def check_reward(self, kind: str, where: str = "") -> None:
        """Refuse reward.kind `kind` for a run on this family's games: a kind of refused_rewards, or, for a family
        with kinds of its own (reward_kinds), any other kind. Checked by the trainer, `agentrl train` and the sweep
        before any model loads or env starts. `where` prefixes the message (e.g. "cell ...: ").

        Raises: ConfigError, one line: the kind, the family, why, and the kinds to use instead."""
        takes = f"; {self.name} games take --reward {_or(self.reward_kinds)}" if self.reward_kinds else ""
        if kind in self.refused_rewards:
            raise ConfigError(f"{where}reward.kind {kind} (--reward {kind}) does not suit {self.name} games: "
                              f"{self.refused_rewards[kind]}{takes}")
        if self.reward_kinds and kind not in self.reward_kinds:
            raise ConfigError(f"{where}reward.kind {kind} (--reward {kind}) does not suit {self.name} games, whose "
                              f"env computes the reward{takes}")

    def watchdog_s(self, configured: float) -> float:
        """The pool's watchdog per env call for a configured EnvConfig.step_timeout_s: the larger of the two (the
        env bounds its own commands; the watchdog only catches a hung env, so it must not cut a legal step)."""
        return max(float(configured), self.step_timeout_s)

    def env_kwargs(self, env_cfg: Any = None, reward_kind: str = "", **settings: Any) -> dict[str, Any]:
        """Keyword arguments for `make_env` from an EnvConfig (and/or `settings`, by EnvConfig field name): the
        options this family declares; None (unset) keeps the env's default. Other options are ignored. A
        `reward_kind` (the run's reward.kind) of this family's reward_kinds becomes `reward=reward_kind`; any other
        kind concerns the trainer only (check_reward refuses the ones this family does not take)."""
        values = {name: getattr(env_cfg, name) for name in self.options if hasattr(env_cfg, name)}
        values.update({k: v for k, v in settings.items() if k in self.options})
        if values.get("step_timeout_s") is not None:  # the env sizes its limits to the watchdog the pool uses
            values["step_timeout_s"] = self.watchdog_s(values["step_timeout_s"])
        kwargs = {self.options[name]: v for name, v in values.items() if v is not None}
        if reward_kind in self.reward_kinds:
            kwargs["reward"] = reward_kind
        return kwargs


def _or(names) -> str:
    """'a, b or c'."""
    names = list(names)
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)


class UnknownFamilyError(ValueError):
    """No environment family of that name is registered; the message lists the known ones."""


BUILTIN = {"textworld": "agentrl_lib.envs.textworld", "alfworld": "agentrl_lib.envs.alfworld",
           "bandit": "agentrl_lib.envs.bandit", "bandit-reversed": "agentrl_lib.envs.bandit",
           "frozenlake": "agentrl_lib.envs.frozenlake", "sokoban": "agentrl_lib.envs.sokoban",
           "swe": "agentrl_lib.envs.swe"}
"""Built-in families → the module that registers each (imported on first `get_family`)."""

FAMILIES: dict[str, EnvFamily] = {}
"""Registered families by name (the built-in ones appear once get_family has imported them; `family_names()`
lists all)."""


def register_family(family: EnvFamily) -> EnvFamily:
    """Add (or replace) `family` in FAMILIES; returns it."""
    FAMILIES[family.name] = family
    return family


def family_names() -> list[str]:
    """Names of every known family: the built-in ones, then the others registered in this process."""
    return list(BUILTIN) + [name for name in FAMILIES if name not in BUILTIN]


def get_family(name: str) -> EnvFamily:
    """The EnvFamily called `name` (importing a built-in family's module on first use).

    Raises: UnknownFamilyError (a ValueError) naming the known families."""
    if name not in FAMILIES and name in BUILTIN:
        importlib.import_module(BUILTIN[name])
    try:
        return FAMILIES[name]
    except (KeyError, TypeError):
        raise UnknownFamilyError(f"unknown environment family {name!r}; known: {', '.join(family_names())}") from None


def family_reward_kinds() -> tuple[str, ...]:
    """The reward.kind values the families compute themselves (EnvFamily.reward_kinds of every family, the built-in
    ones imported: ~0.1 s), in family order: besides rewards.REWARD_KINDS, what --reward and a sweep grid offer."""
    kinds: dict[str, None] = {}
    for name in family_names():
        kinds.update(dict.fromkeys(get_family(name).reward_kinds))
    return tuple(kinds)


def make_env(family: str, **options: Any) -> Env:
    """One env of `family` ('textworld', 'alfworld', ...), built with `options` (keywords of its make_env).

    Raises: UnknownFamilyError for an unknown family."""
    return get_family(family).make_env(**options)
