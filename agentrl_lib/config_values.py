"""The values config fields may take, below every config dataclass: ConfigError, the closed sets typed once (each a
`Literal` that the field is annotated with; its values tuple, TIS_MODES etc., is derived from it, and so are the
config's checks, config.CHOICES and the CLI's choices: `closed_fields`, `check_closed`), the numeric bounds
(SEED_MAX, ...) and the context check; and ModelLoadError, the error of a model, device or dtype that cannot be used
(raised by hardware, model_paths, precision and models alike). It imports nothing of agentrl_lib: it is the ground
floor every module may stand on. config.py re-exports all of it but ModelLoadError.

The open sets are registries and are checked where they are looked up, not here (parts.py: reward.kind in
rewards.REWARD_KINDS, algo.advantage in advantages.ESTIMATORS, algo.loss_mode in losses.POLICY_LOSSES,
model.generator in generation.GENERATORS, train.stop_kinds in diagnostics.KINDS).
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Literal, get_args

ActionFormat = Literal["plain", "ragen"]
"""env.action_format: how a reply becomes an action (prompts.ACTION_FORMATS acts on these)."""
Dtype = Literal["auto", "float32", "bfloat16", "float16"]
"""model.dtype."""
TisMode = Literal["auto", "on", "off"]
"""algo.tis (precision.tis_applies acts on these)."""
OldLogprobs = Literal["recompute", "behaviour"]
"""algo.old_logprobs."""
ReportTo = Literal["none", "tensorboard"]
"""train.report_to (tracking.TRACKERS is keyed by these)."""
LossAgg = Literal["token_mean", "seq_mean_token_sum_norm"]
"""algo.loss_agg (losses.policy_loss acts on these)."""
MixedPrecision = Literal["no", "bf16"]
"""train.mixed_precision and sft.mixed_precision."""

ACTION_FORMATS: tuple[str, ...] = get_args(ActionFormat)
"""EnvConfig.action_format values."""
DTYPES: tuple[str, ...] = get_args(Dtype)
"""model.dtype's values."""
TIS_MODES: tuple[str, ...] = get_args(TisMode)
"""algo.tis's values."""
OLD_LOGPROBS: tuple[str, ...] = get_args(OldLogprobs)
"""algo.old_logprobs's values."""
REPORT_TO: tuple[str, ...] = get_args(ReportTo)
"""train.report_to's values (tracking.TRACKERS's keys)."""
LOSS_AGGS: tuple[str, ...] = get_args(LossAgg)
"""algo.loss_agg's values (losses.LOSS_AGGS is this tuple)."""
MIXED_PRECISIONS: tuple[str, ...] = get_args(MixedPrecision)
"""Values of train.mixed_precision and sft.mixed_precision."""
CLOSED_HINTS = {
    "env.action_format": "'ragen' is <think>...</think><answer>a1 || a2</answer>",
    "train.mixed_precision": "bf16 needs a GPU or a CPU with avx512_bf16 / amx_bf16",
}
"""A sentence the closed-set error adds for a field (`section.field` → text), where the values alone do not say
enough."""


@functools.cache
def closed_fields(cls: type) -> dict[str, tuple]:
    """The fields of the config dataclass `cls` annotated with a Literal, name → the values it allows, in declaration
    order: the one place a closed set is written is the annotation."""
    hints = typing.get_type_hints(cls)
    return {f.name: get_args(hints[f.name]) for f in dataclasses.fields(cls)
            if typing.get_origin(hints[f.name]) is Literal}


def check_closed(section: str, obj) -> None:
    """Refuse a value outside its field's Literal, for every closed field of the config dataclass `obj`.

    Raises: ConfigError `section.field must be one of (...) (got ...)` and the field's CLOSED_HINTS sentence."""
    for name, values in closed_fields(type(obj)).items():
        value = getattr(obj, name)
        if value not in values:
            hint = CLOSED_HINTS.get(f"{section}.{name}")
            raise ConfigError(f"{section}.{name} must be one of {values} (got {value!r})"
                              + (f"; {hint}" if hint else ""))


DEVICE_PATTERN = r"auto|(cpu|cuda|mps)(:\d+)?"
"""Device names accepted by model.device / --device (hardware.pick_device also checks the machine has the device)."""
SEED_MAX = 2**32 - 1
"""Largest seed: numpy (used by TRL's set_seed in SFT) takes seeds in [0, 2**32 - 1]."""
MAX_TURNS_MAX = 10_000
"""Largest env.max_turns: each turn adds at least a reply token and a feedback message (~10 tokens), so more turns
than this outgrow any model's context; the trainer also checks max_turns against the loaded model's context."""
EPISODES_PER_STEP_MAX = 4096
"""Most episodes in one rollout batch: algo.group_size, train.games_per_step and their product (issue 52:
`--group-size 100000` started 100,000 env workers with no output). Each episode of a batch is one env slot (a
process in a ProcessPool, ~60-80 MB each) and one row of every forward pass, so 4096 is already past what one machine
holds in a ProcessPool (see envs.process_pool.pool_workers_max) and ~30x the largest batch of the papers this project
follows (RAGEN: 8 games x 16 episodes = 128); a bigger batch is a sign of a typo, not of a plan."""
LORA_ALPHA_MAX = 4096
"""Largest model.lora_alpha: the adapter's scale is alpha / rank (typical 16-64 over ranks 4-64, a scale of 0.25-16);
alpha 1e30 made every update's loss non-finite, each skipped, and the run end "done" having learned nothing (issue
52). 4096 allows a scale of 4096 at rank 1, far past any published setting."""
MAX_NEW_TOKENS_MAX = 131_072
"""Largest train.max_new_tokens accepted before a model is loaded (the trainer then checks it against the model's
context: with no room left for the prompt every episode ends at the context limit and no update happens)."""


class ConfigError(ValueError):
    """A configuration value is invalid; the message says which field and how to fix it."""


class ModelLoadError(ValueError):
    """The model, one of its files, or the device / dtype asked for cannot be used; the message names the file or
    value and says how to fix it."""


def check_context_room(max_new_tokens: int, max_turns: int, context_limit: int, where: str = "train") -> None:
    """Refuse a per-turn token budget or a turn count the model's context cannot hold: max_new_tokens must be below
    context_limit (else every episode ends at the context limit before its first reply and nothing trains; the
    trainer also stops when a step's prompts leave no room), and max_turns must be <= context_limit (every turn takes
    at least one token).

    Raises: ConfigError naming the field, its value, the model's context and a typical value."""
    flag = "train.max_new_tokens (--max-new-tokens)" if where == "train" else "max_new_tokens (--max-new-tokens)"
    if max_new_tokens >= context_limit:
        raise ConfigError(f"{flag} is {max_new_tokens}, not below the model's context ({context_limit} tokens): no "
                          "prompt would fit and every episode would end at the context limit with no update; 16-32 "
                          "suit one action")
    if max_turns > context_limit:
        raise ConfigError(f"env.max_turns (--max-turns) is {max_turns}, more turns than the model's context holds "
                          f"tokens ({context_limit}); episodes end at the context limit long before; 8-12 suit small "
                          "TextWorld games")
