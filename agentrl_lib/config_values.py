"""The values config fields may take, below every config dataclass: ConfigError, the closed sets (CHOICES), the
numeric bounds (SEED_MAX, ...) and the context check; and ModelLoadError, the error of a model, device or dtype that
cannot be used (raised by hardware, model_paths, precision and models alike). It imports nothing of agentrl_lib, so the
modules the config's validation reaches (models, through generation) can import it without an import cycle;
config.py re-exports all of it but ModelLoadError.
"""
from __future__ import annotations

REWARDS = ("sparse", "dense", "env")
"""reward.kind's values."""
ACTION_FORMATS = ("plain", "ragen")
"""EnvConfig.action_format values (prompts.ACTION_FORMATS, kept here so config imports no env module)."""
SWE_REWARDS = ("relative", "pass_ratio", "resolved")
"""EnvConfig.swe_reward's values besides '' (envs.swe.REWARD_KINDS, kept here so config imports no env module)."""
DTYPES = ("auto", "float32", "bfloat16", "float16")
"""model.dtype's values."""
TIS_MODES = ("auto", "on", "off")
"""algo.tis's values."""
OLD_LOGPROBS = ("recompute", "behaviour")
"""algo.old_logprobs's values."""
REPORT_TO = ("none", "tensorboard")
"""train.report_to's values (tracking.TRACKERS, repeated here: `import agentrl_lib.config` stays free of torch)."""
LOSS_AGGS = ("token_mean", "seq_mean_token_sum_norm")
"""algo.loss_agg's values (losses.LOSS_AGGS, repeated here so that `import agentrl_lib.config` stays free of torch)."""
CHOICES = {"reward.kind": REWARDS, "env.action_format": ACTION_FORMATS, "algo.tis": TIS_MODES,
           "model.dtype": DTYPES, "algo.loss_agg": LOSS_AGGS,
           "algo.old_logprobs": OLD_LOGPROBS, "train.report_to": REPORT_TO}
"""Fields that take one of a closed set of values (`section.field` → values): the CLI offers them as choices.
algo.advantage's and model.generator's sets are registries: see `choices_for`."""
DEVICE_PATTERN = r"auto|(cpu|cuda|mps)(:\d+)?"
"""Device names accepted by model.device / --device (hardware.pick_device also checks the machine has the device)."""
SEED_MAX = 2**32 - 1
"""Largest seed: numpy (used by TRL's set_seed in SFT) takes seeds in [0, 2**32 - 1]."""
MAX_TURNS_MAX = 10_000
"""Largest env.max_turns: each turn adds at least a reply token and a feedback message (~10 tokens), so more turns
than this outgrow any model's context; the trainer also checks max_turns against the loaded model's context."""
MIXED_PRECISIONS = ("no", "bf16")
"""Values of train.mixed_precision."""
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
