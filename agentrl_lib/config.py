"""Run configuration: one dataclass per pillar of the design space (environment, reward, policy) plus
the model and the training budget, with YAML in/out and validation whose errors say how to fix the value.

The sections live in config_pillars.py (EnvConfig, RewardConfig, AlgoConfig, ALGO_PRESETS) and config_training.py
(ModelConfig, TrainConfig, and SFTConfig for `agentrl sft`), the values they take in config_values.py (ConfigError,
the closed sets' Literal types, SEED_MAX, ...); this module composes them into RunConfig, derives CHOICES, reads and
writes it, parses a field's value (`parse_field`, for config files, command-line flags and sweep grids alike) and
re-exports all of them:
`from agentrl_lib.config import AlgoConfig` is the one import a user needs. The command-line flags generated from
these dataclasses are in flags.py.

Introduced in notebooks/00_quickstart.md §5.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from .config_pillars import ALGO_PRESETS, AlgoConfig, EnvConfig, RewardConfig
from .config_training import ModelConfig, SFTConfig, TrainConfig
from .config_values import (
    ACTION_FORMATS,
    DEVICE_PATTERN,
    DTYPES,
    EPISODES_PER_STEP_MAX,
    LORA_ALPHA_MAX,
    LOSS_AGGS,
    MAX_NEW_TOKENS_MAX,
    MAX_TURNS_MAX,
    MIXED_PRECISIONS,
    OLD_LOGPROBS,
    REPORT_TO,
    SEED_MAX,
    TIS_MODES,
    ConfigError,
    check_context_room,
    closed_fields,
)

__all__ = [  # the names other modules import from here, wherever they are defined
    "ACTION_FORMATS", "ALGO_PRESETS", "CHOICES", "DEVICE_PATTERN", "DTYPES", "EPISODES_PER_STEP_MAX",
    "LORA_ALPHA_MAX", "LOSS_AGGS", "MAX_NEW_TOKENS_MAX",
    "MAX_TURNS_MAX", "MIXED_PRECISIONS", "OLD_LOGPROBS", "REPORT_TO", "SECTIONS", "SEED_MAX", "TIS_MODES",
    "AlgoConfig", "ConfigError", "DuplicateKeyError", "EnvConfig", "ModelConfig", "RewardConfig",
    "YAMLBoundError", "load_yaml",
    "RunConfig", "SFTConfig", "TrainConfig", "check_context_room", "fold_swe_reward", "parse_field", "swe_reward_gone",
    "upgrade_legacy_keys",
]


@dataclass
class RunConfig:
    """Everything a run needs; saved as config.yaml in the run dir."""

    env: EnvConfig = field(default_factory=EnvConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        for f in fields(self):
            section = getattr(self, f.name)
            for g in fields(section):  # NaN passes every `x < 0` test: refuse non-finite numbers first
                v = getattr(section, g.name)
                if isinstance(v, float) and not math.isfinite(v):
                    raise ConfigError(f"{f.name}.{g.name} must be a finite number (got {v})")
            section.validate()
        if self.model.dtype == "float16":   # before the model loads (precision.training_precision would refuse it)
            raise ConfigError("model.dtype (--dtype) float16 cannot train: fp16 needs loss scaling, which this library "
                              "does not do; use float32, or bf16 (--mixed-precision bf16); float16 stays usable "
                              "for `agentrl eval`")
        episodes = self.train.games_per_step * self.algo.group_size
        if episodes > EPISODES_PER_STEP_MAX:
            raise ConfigError(f"train.games_per_step x algo.group_size (--games-per-step x --group-size) must be at "
                              f"most {EPISODES_PER_STEP_MAX} episodes per step (got {self.train.games_per_step} x "
                              f"{self.algo.group_size} = {episodes}); e.g. 4 x 4 on a CPU, 8 x 16 as RAGEN")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        """Build from a nested dict; unknown sections or keys raise ConfigError naming them."""
        if not isinstance(data, dict):
            raise ConfigError(f"config must be a mapping of sections {[f.name for f in fields(cls)]}, "
                              f"got {type(data).__name__}")
        data = upgrade_legacy_keys(data)
        if isinstance(data.get("env"), dict) and "swe_reward" in data["env"]:
            raise ConfigError(swe_reward_gone(data["env"]["swe_reward"]))
        kinds = {f.name: f.default_factory for f in fields(cls)}  # type: ignore[misc]
        unknown = set(data) - set(kinds)
        if unknown:
            raise ConfigError(f"unknown config section(s) {sorted(unknown)}; valid sections: {sorted(kinds)}")
        parts = {}
        for name, factory in kinds.items():
            section = data.get(name) or {}
            if not isinstance(section, dict):
                raise ConfigError(f"config section '{name}' must be a mapping, got {section!r}")
            proto = factory()
            valid = {f.name: f.type for f in fields(proto)}
            bad = set(section) - set(valid)
            if bad:
                raise ConfigError(f"unknown key(s) {sorted(bad)} in section '{name}'; valid keys: {sorted(valid)}")
            for key, value in section.items():
                setattr(proto, key, parse_field(f"{name}.{key}", getattr(proto, key), value))
            parts[name] = proto
        return cls(**parts)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    @classmethod
    def load(cls, path: str | Path) -> "RunConfig":
        """Read a YAML config. Raises FileNotFoundError or ConfigError (malformed YAML, a key given twice in one
        mapping — e.g. two `train:` sections, of which YAML would silently keep the last —, unknown keys, bad
        values)."""
        path = Path(path)
        if path.is_dir():
            raise ConfigError(f"config file {path} is a directory; pass a YAML file")
        if not path.is_file():
            raise FileNotFoundError(f"config file {path} does not exist")
        try:
            data = load_yaml(path.read_text())
        except (DuplicateKeyError, YAMLBoundError) as e:
            raise ConfigError(f"config file {path}: {e}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path} is not valid YAML: {e}") from e
        except UnicodeDecodeError as e:
            raise ConfigError(f"config file {path} is not a text (UTF-8) YAML file: {e}") from e
        return cls.from_dict(data or {})


class DuplicateKeyError(ValueError):
    """A YAML mapping names one key twice (the message names it and both lines)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise DuplicateKeyError(f"key {key!r} is given twice (lines {seen[key]} and {line}); merge them "
                                            "into one (YAML would keep only the last)")
                seen[key] = line
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                continue
        return super().construct_mapping(node, deep=deep)


YAML_MAX_DEPTH = 64
"""Deepest nesting of collections a YAML file may have (load_yaml): a run config nests 2 levels; 100,000 nested `[`
made PyYAML's recursive composer raise RecursionError (a traceback, issue 52)."""
YAML_MAX_NODES = 100_000
"""Most values a YAML file may hold once its aliases are expanded (load_yaml): a run config holds ~100. A
"billion laughs" file (9 anchors, each a list of 9 aliases of the one before: 9**9 values from 1 KB of text) passes
PyYAML's SafeLoader, which shares the aliased objects, and then hangs whatever walks it (an error message's repr)."""


class YAMLBoundError(ValueError):
    """A YAML text nests deeper than YAML_MAX_DEPTH or expands to more than YAML_MAX_NODES values."""


class _BoundedLoader(_UniqueKeyLoader):
    """_UniqueKeyLoader (a SafeLoader) that refuses a document nested deeper than YAML_MAX_DEPTH while composing it
    (before the recursive composer reaches Python's recursion limit) and one whose aliases expand to more than
    YAML_MAX_NODES values (counted over the composed node graph, each aliased node's size once: no expansion)."""

    def compose_node(self, parent, index):
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > YAML_MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise YAMLBoundError(f"it nests deeper than {YAML_MAX_DEPTH} levels (line {mark.line + 1}); a config "
                                     "nests 2 (section: key: value)")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            sizes: dict[int, int] = {}

            def size(n) -> int:  # depth <= YAML_MAX_DEPTH: the recursion is bounded
                if id(n) not in sizes:
                    children = ([c for kv in n.value for c in kv] if isinstance(n, yaml.MappingNode) else
                                n.value if isinstance(n, yaml.SequenceNode) else [])
                    sizes[id(n)] = min(1 + sum(size(c) for c in children), YAML_MAX_NODES + 1)
                return sizes[id(n)]

            if size(node) > YAML_MAX_NODES:
                raise YAMLBoundError(f"its aliases (*name) expand to more than {YAML_MAX_NODES} values; a config "
                                     "holds about 100: write the values out")
        return node


def load_yaml(text: str):
    """A YAML text as Python data, through _BoundedLoader (a SafeLoader): a key given twice in one mapping
    (DuplicateKeyError), a nesting deeper than YAML_MAX_DEPTH or aliases expanding to more than YAML_MAX_NODES values
    (YAMLBoundError) are refused; other errors are yaml.YAMLError."""
    return yaml.load(text, Loader=_BoundedLoader)


def upgrade_legacy_keys(data: dict[str, Any]) -> dict[str, Any]:
    """A config dict written before `algo.name` became `algo.advantage` (config.yaml of older runs: `algo: {name:
    ppo}`), with the legacy key replaced by the fields of its preset (ALGO_PRESETS). Returns a new dict (or `data`
    itself when there is nothing to upgrade).

    Raises:
        ConfigError: the legacy name is no preset, or contradicts an algo.advantage given beside it.
    """
    algo = data.get("algo")
    if not isinstance(algo, dict) or "name" not in algo:
        return data
    algo = dict(algo)
    name = algo.pop("name")
    if name not in ALGO_PRESETS:
        raise ConfigError(f"algo.name (renamed algo.advantage) must be one of {sorted(ALGO_PRESETS)} (got {name!r})")
    for key, value in ALGO_PRESETS[name].items():
        if key in algo and algo[key] != value:
            raise ConfigError(f"algo.name {name!r} (a preset, {ALGO_PRESETS[name]}) contradicts algo.{key} "
                              f"{algo[key]!r}; drop algo.name")
        algo[key] = value
    return {**data, "algo": algo}


SWE_KINDS_TEXT = "pass_ratio (the Practitioner's Guide's), resolved (SWE-Gym's, binary) or relative"
"""The reward kinds of swe games, in words (envs.swe.REWARD_KINDS), for the messages below."""


def swe_reward_gone(value: Any = "") -> str:
    """The one line that answers a config key env.swe_reward or a flag --swe-reward (the swe family's second reward
    selector, folded into reward.kind): what to write instead."""
    instead = (f"reward.kind: {value} (--reward {value})" if isinstance(value, str) and value else
               f"reward.kind (--reward) {SWE_KINDS_TEXT}")
    return ("env.swe_reward (--swe-reward) is gone: swe games take their reward kind from reward.kind, the one "
            f"reward selector of every family; write {instead} and drop env.swe_reward (swe kinds: "
            f"{SWE_KINDS_TEXT})")


def fold_swe_reward(data: dict[str, Any]) -> dict[str, Any]:
    """A config dict stored while swe games had a second reward selector, env.swe_reward (records of
    results/swe.jsonl, a run dir's config.yaml), with it folded into reward.kind; read by records.upgrade_record and
    rundir before RunConfig.from_dict, which refuses the key in a config a user writes (swe_reward_gone).

    A set env.swe_reward K implies swe games (other families refused it). Under reward.kind env the run trained on
    the env's reward as given, K: reward.kind K now does exactly that. Under sparse it trained on 1 when resolved,
    whatever K (the env's score, which evaluations report, was K's): reward.kind resolved trains on the same rewards
    (tests/test_swe.py proves both equalities on real submissions). Under any other kind, or with K unset (''), the
    key is dropped and reward.kind kept. Returns a new dict (or `data` itself when there is nothing to fold)."""
    env = data.get("env")
    if not isinstance(env, dict) or "swe_reward" not in env:
        return data
    env = dict(env)
    value = env.pop("swe_reward")
    reward = dict(data["reward"]) if isinstance(data.get("reward"), dict) else {}
    if value and reward.get("kind", "dense") == "env":
        reward["kind"] = value
    elif value and reward.get("kind", "dense") == "sparse":
        reward["kind"] = "resolved"
    return {**data, "env": env, "reward": reward}


SECTIONS = {f.name: f.default_factory for f in fields(RunConfig)}  # type: ignore[misc]
"""RunConfig's sections in order: name → dataclass (env, reward, algo, model, train)."""


CHOICES = {f"{section}.{name}": values for section, cls in {**SECTIONS, "sft": SFTConfig}.items()
           for name, values in closed_fields(cls).items()}
"""Fields that take one of a closed set of values (`section.field` → values), derived from their Literal annotations
(config_values.closed_fields): the CLI offers them as choices. reward.kind's, algo.advantage's and model.generator's
sets are registries: see flags.choices_for."""


BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
"""Text a bool field reads as true / false (any case): a sweep grid's `env.process_pool=off`, a quoted YAML 'yes'."""


def parse_bool(text: str) -> bool | None:
    """True / False for a word of BOOL_WORDS (any case, surrounding spaces ignored), None for any other text: the one
    reader of boolean text, for config fields (parse_field) and sweep grid values (sweep.parse_value)."""
    return BOOL_WORDS.get(text.strip().lower())


def parse_field(key: str, default: Any, value: Any) -> Any:
    """`value` for the config field `key` (e.g. 'train.lr') whose default is `default`, converted to the default's type:
    the one parser of field values, for config files (RunConfig.from_dict), command-line flags (flags.py) and sweep
    grids. Text is read as the field's type: numbers from strings (PyYAML, YAML 1.1, reads `1e-5` and `1e3` as strings:
    its float needs a dot, `1.0e-5`), booleans from BOOL_WORDS. Integer fields take integral numbers (`1e3`, `4.0`),
    not 2.5; no number field takes a bool. Closed sets (CHOICES) are checked by the caller (validate, argparse).

    Raises:
        ConfigError: naming `key`, when the value has the wrong type.
    """
    if isinstance(default, bool):
        if isinstance(value, str) and parse_bool(value) is not None:
            return parse_bool(value)
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true/false, got {value!r}")
        return value
    if isinstance(default, (int, float)):
        number = value
        if isinstance(value, str):
            for parse in (int, float):
                try:
                    number = parse(value.strip())
                    break
                except ValueError:
                    number = None
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ConfigError(f"{key} must be a number, got {value!r} (write e.g. 3, 0.2 or 1e-5)")
        if isinstance(default, float):
            try:
                return float(number)
            except OverflowError:
                raise ConfigError(f"{key} must be a finite number, got {value!r}") from None
        if isinstance(number, float):
            if not (math.isfinite(number) and number.is_integer()):
                raise ConfigError(f"{key} must be an integer, got {value!r}")
            number = int(number)
        return number
    if isinstance(default, str) and not isinstance(value, str):
        raise ConfigError(f"{key} must be a string, got {value!r}")
    return value


